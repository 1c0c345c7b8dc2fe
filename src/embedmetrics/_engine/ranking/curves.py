"""Precision and recall at every cut-off ``k = 1..max_k``, and the best recall at a fixed precision.

Both faces of [`RetrievalPrecisionRecallCurve`][embedmetrics.RetrievalPrecisionRecallCurve] /
[`retrieval_precision_recall_curve`][embedmetrics.functional.retrieval_precision_recall_curve] and of
[`RetrievalRecallAtFixedPrecision`][embedmetrics.RetrievalRecallAtFixedPrecision] /
[`retrieval_recall_at_fixed_precision`][embedmetrics.functional.retrieval_recall_at_fixed_precision] compute
here. A curve is the
precision and recall closed forms of the ranking engine read at the cut-offs ``1..max_k`` of one
ranking per query (one row sort, ``(queries, max_k)`` work), so it inherits their exact tie
handling; torchmetrics 1.9's curve is the same numbers on tie-free data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.core.arrays import numpy_io
from embedmetrics._engine.core.checks import (
    Aggregation,
    check_bool,
    check_number,
    check_positive_int,
    check_retrieval_inputs,
    check_retrieval_options,
)
from embedmetrics._engine.ranking.retrieval import (
    CURVE,
    Face,
    MetricOptions,
    args_section,
    finish,
    out_dtype,
    query_values,
)


def check_curve_options(max_k: int | None, adaptive_k: bool) -> MetricOptions:
    """``max_k`` is ``None`` or a positive int; ``adaptive_k`` a bool."""
    if max_k is not None:
        check_positive_int("max_k", max_k)
    return MetricOptions(adaptive_k=check_bool("adaptive_k", adaptive_k))


def check_min_precision(value: float) -> float:
    """``min_precision`` is a number in ``[0, 1]``."""
    out = check_number("min_precision", value)
    if out > 1:
        raise ValueError(f"Argument `min_precision` must be a number in [0, 1], got {value!r}.")
    return out


def cutoffs(max_k: int) -> tuple[int, ...]:
    """The cut-offs of a curve: ``1..max_k``."""
    return tuple(range(1, max_k + 1))


def largest_query(target: Tensor, indexes: Tensor | None, ignore_index: int | None) -> int:
    """The most documents (ignored ones excluded) of any query: the default ``max_k``. Host sync."""
    kept = torch.ones_like(target, dtype=torch.bool) if ignore_index is None else target != ignore_index
    if indexes is not None:
        idx = indexes.reshape(-1)[kept.reshape(-1)]
        if idx.numel() == 0:
            return 1
        return max(1, int(torch.unique(idx, return_counts=True)[1].max()))
    rows = kept if kept.ndim == 2 else kept.reshape(1, -1)
    return max(1, int(rows.sum(1).max())) if rows.numel() else 1


def split_curve(values: Tensor) -> tuple[Tensor, Tensor]:
    """Precision and recall halves of the ``(..., 2·max_k)`` curve values."""
    half = values.shape[-1] // 2
    return values[..., :half], values[..., half:]


def top_k_column(max_k: int, device: torch.device, adaptive_n: int | None = None) -> Tensor:
    """``1..max_k``; with ``adaptive_n`` (one query, ``adaptive_k``) capped at its ``n`` documents."""
    top = torch.arange(1, max_k + 1, device=device)
    return top if adaptive_n is None else top.clamp_max(max(adaptive_n, 1))


def recall_at_precision(
    precision: Tensor, recall: Tensor, top_k: Tensor, min_precision: float
) -> tuple[Tensor, Tensor]:
    """The largest recall whose precision is ``>= min_precision``, and its ``k`` (the largest such ``k``).

    As torchmetrics: when no ``k`` qualifies, or the best recall is 0, the recall is 0 and ``k`` is
    ``max_k``. Works along the last dimension (one curve, or one per query).
    """
    ok = precision >= min_precision
    masked = torch.where(ok, recall, -1.0)
    best = masked.max(-1, keepdim=True).values
    cols = torch.arange(recall.shape[-1], device=recall.device)
    last = torch.where(ok & (masked == best), cols, -1).max(-1).values
    found = best.squeeze(-1) > 0
    best_k = torch.where(
        found,
        top_k.expand_as(recall).gather(-1, last.clamp_min(0).unsqueeze(-1)).squeeze(-1),
        recall.shape[-1],
    )
    return torch.where(found, best.squeeze(-1), 0.0).to(recall.dtype), best_k


def finish_curve(
    values: Tensor, status: Tensor, *, empty_target_action: str, aggregation: Aggregation, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """Aggregated (or per-query) precision and recall curves."""
    out = finish(
        values,
        status,
        empty_target_action=empty_target_action,
        aggregation=aggregation,
        single=False,
        dtype=dtype,
    )
    return split_curve(out)


def evaluate_curve(
    preds: Tensor,
    target: Tensor,
    max_k: int | None,
    adaptive_k: bool,
    *,
    indexes: Tensor | None,
    ties: str,
    empty_target_action: str,
    ignore_index: int | None,
    aggregation: Aggregation,
    validate_args: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """The functional curve: validate, rank once, read every cut-off, reduce."""
    check_retrieval_options(None, None, ties, empty_target_action, ignore_index, aggregation)
    options = check_curve_options(max_k, adaptive_k)
    check_bool("validate_args", validate_args)
    check_retrieval_inputs(
        CURVE.name, True, preds, target, indexes, ignore_index=ignore_index, validate_args=validate_args
    )
    width = largest_query(target, indexes, ignore_index) if max_k is None else max_k
    values, status = query_values(
        CURVE,
        preds,
        target,
        indexes,
        ks=cutoffs(width),
        ties=ties,
        ignore_index=ignore_index,
        options=options,
    )
    precision, recall = finish_curve(
        values,
        status,
        empty_target_action=empty_target_action,
        aggregation=aggregation,
        dtype=out_dtype(preds),
    )
    one_query = indexes is None and preds.ndim == 1
    n = largest_query(target, None, ignore_index) if one_query and adaptive_k else None
    return precision, recall, top_k_column(width, preds.device, n)


def evaluate_recall_at_precision(
    preds: Tensor, target: Tensor, min_precision: float, max_k: int | None, adaptive_k: bool, **rest: Any
) -> tuple[Tensor, Tensor]:
    """The functional recall at a fixed precision: the curve, then ``recall_at_precision``."""
    floor = check_min_precision(min_precision)
    precision, recall, top_k = evaluate_curve(preds, target, max_k, adaptive_k, **rest)
    return recall_at_precision(precision, recall, top_k, floor)


def documented_curve(face: str, fixed_precision: bool) -> Callable[[Face], Face]:
    """Decorator setting a curve face's docstring (and, for a module class, its declaration)."""

    def decorate(obj: Face) -> Face:
        obj.__doc__ = curve_docstring(face, fixed_precision)
        if face == "module":
            obj.declaration = CURVE
            return obj
        return numpy_io(obj)  # the library's one array convention (NumPy in, NumPy out)

    return decorate


# --------------------------------------------------------------------------- docstrings

_SUMMARY = {
    False: "Precision and recall of each query's top ``k`` documents for every ``k = 1..max_k``.",
    True: (
        "The largest recall at any ``k <= max_k`` whose precision is at least ``min_precision``, and "
        "that ``k``."
    ),
}
_DETAILS = {
    False: (
        "One ranking per query, read at every cut-off (no per-query loop); ties as in every\n"
        "retrieval metric. Over several queries the curves are aggregated point by point."
    ),
    True: (
        "Computed on the aggregated precision-recall curve (per query with ``aggregation='none'``).\n"
        "Equal recalls go to the larger ``k``; when no ``k`` qualifies or the best recall is 0, the\n"
        "recall is 0 and ``k`` is ``max_k`` (as torchmetrics)."
    ),
}
_OPTION_ENTRIES = [
    (
        "max_k",
        "the last cut-off; ``None``: the most documents of any query (ignored ones excluded).\n"
        "    A module fed 2-D input needs it (its per-query state has one value per ``k``).",
    ),
    ("adaptive_k", "precision at ``k`` divides by ``min(k, n)`` (``n`` documents of the query)."),
]
_COMMON_ENTRIES = [
    (
        "ties",
        "``'average'`` (expected value over a random order of tied scores), ``'pessimistic'``\n"
        "    or ``'optimistic'``.",
    ),
    (
        "empty_target_action",
        "a query with no relevant document has the curve 0 (``'neg'``), 1 (``'pos'``), is\n"
        "    left out (``'skip'``) or raises (``'error'``).",
    ),
    ("ignore_index", "documents whose target equals this value are removed."),
    (
        "aggregation",
        "``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or ``'none'``\n"
        "    (one curve per query), applied to each ``k``.",
    ),
]


def curve_docstring(face: str, fixed_precision: bool) -> str:
    """The docstring of a curve face (``face="functional"`` or ``"module"``)."""
    entries: list[tuple[str, str]] = []
    if face == "functional":
        entries += [("preds", "scores (float), higher is better."), ("target", "relevance (bool or 0/1).")]
    if fixed_precision:
        entries.append(("min_precision", "the precision a cut-off must reach, in ``[0, 1]``."))
    entries += _OPTION_ENTRIES
    if face == "functional":
        entries.append(
            (
                "indexes",
                "query id of every document; ``None``: 1-D input is one query, 2-D input one query\n"
                "    per row.",
            )
        )
    entries += _COMMON_ENTRIES
    entries.append(("validate_args", "check values (needs a host sync); shapes and dtypes always."))
    if face == "module":
        entries.append(("kwargs", "passed to ``torchmetrics.Metric``."))
    returns = (
        "The tuple ``(recall, k)`` of 0-dim tensors (one entry per query with ``aggregation='none'``)."
        if fixed_precision
        else "The tuple ``(precision, recall, top_k)`` of ``(max_k,)`` tensors (precision and recall\n"
        "    ``(queries, max_k)`` with ``aggregation='none'``); for one query with ``adaptive_k``,\n"
        "    ``top_k`` stops at its number of documents."
    )
    body = [_SUMMARY[fixed_precision], "", _DETAILS[fixed_precision], "", args_section(entries), ""]
    if face == "functional":
        body += ["Returns:", f"    {returns}", ""]
    else:  # a class documents what ``compute`` returns in its text (no Returns section)
        body += ["``compute()`` returns t" + returns[1:].replace("\n    ", "\n"), ""]
    body += ["Examples:", *(f"    {line}" for line in _example(face, fixed_precision))]
    return "\n".join(body) + "\n"


def _example(face: str, fixed_precision: bool) -> list[str]:
    name = {
        ("functional", False): "retrieval_precision_recall_curve",
        ("functional", True): "retrieval_recall_at_fixed_precision",
        ("module", False): "RetrievalPrecisionRecallCurve",
        ("module", True): "RetrievalRecallAtFixedPrecision",
    }[face, fixed_precision]
    where = "embedmetrics.functional" if face == "functional" else "embedmetrics"
    lines = [">>> from torch import tensor", f">>> from {where} import {name}"]
    if face == "functional":
        preds, target = "tensor([0.2, 0.3, 0.5])", "tensor([True, False, True])"
        if fixed_precision:
            return [*lines, f">>> {name}({preds}, {target}, min_precision=0.6)", "(tensor(1.), tensor(3))"]
        return [
            *lines,
            f">>> precision, recall, top_k = {name}({preds}, {target}, max_k=2)",
            ">>> precision, recall, top_k",
            "(tensor([1.0000, 0.5000]), tensor([0.5000, 0.5000]), tensor([1, 2]))",
        ]
    lines += [
        ">>> indexes = tensor([0, 0, 0, 0, 1, 1, 1])",
        ">>> preds = tensor([0.4, 0.01, 0.5, 0.6, 0.2, 0.3, 0.5])",
        ">>> target = tensor([True, False, False, True, True, False, True])",
    ]
    if fixed_precision:
        return [
            *lines,
            f">>> {name}(min_precision=0.8, max_k=4)(preds, target, indexes=indexes)",
            "(tensor(0.5000), tensor(1))",
        ]
    return [
        *lines,
        f">>> precision, recall, top_k = {name}(max_k=4)(preds, target, indexes=indexes)",
        ">>> precision",
        "tensor([1.0000, 0.5000, 0.6667, 0.5000])",
        ">>> recall",
        "tensor([0.5000, 0.5000, 1.0000, 1.0000])",
    ]
