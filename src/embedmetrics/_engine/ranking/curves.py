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

from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import Aggregation, check_retrieval_inputs
from embedmetrics._engine.ranking.options import check_fraction
from embedmetrics._engine.ranking.retrieval import (
    CURVE,
    MetricOptions,
    finish,
    out_dtype,
    query_values,
    read_settings,
)


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
    preds: Tensor, target: Tensor, max_k: int | None = None, adaptive_k: bool = False, **given: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """The functional curve: validate, rank once, read every cut-off, reduce."""
    return _curve((CURVE.functional, CURVE.module), preds, target, max_k, adaptive_k, given)


def _curve(
    owner: tuple[str, str],
    preds: Tensor,
    target: Tensor,
    max_k: int | None,
    adaptive_k: bool,
    given: dict[str, Any],
) -> tuple[Tensor, Tensor, Tensor]:
    """``evaluate_curve`` for the functional ``owner`` (its name and registry name: the settings it
    refuses are named for it)."""
    indexes = given.pop("indexes", None)
    settings = read_settings(*owner, {**given, "max_k": max_k, "adaptive_k": adaptive_k}).values
    ignore_index = settings["ignore_index"]
    check_retrieval_inputs(
        CURVE.name, True, preds, target, indexes, ignore_index=ignore_index,
        validate_args=settings["validate_args"],
    )  # fmt: skip
    width = largest_query(target, indexes, ignore_index) if max_k is None else max_k
    values, status = query_values(
        CURVE,
        preds,
        target,
        indexes,
        ks=cutoffs(width),
        ties=settings["ties"],
        ignore_index=ignore_index,
        options=MetricOptions(adaptive_k=settings["adaptive_k"]),
    )
    precision, recall = finish_curve(
        values,
        status,
        empty_target_action=settings["empty_target_action"],
        aggregation=settings["aggregation"],
        dtype=out_dtype(preds),
    )
    one_query = indexes is None and preds.ndim == 1
    n = largest_query(target, None, ignore_index) if one_query and adaptive_k else None
    return precision, recall, top_k_column(width, preds.device, n)


def evaluate_recall_at_precision(
    preds: Tensor,
    target: Tensor,
    min_precision: float,
    max_k: int | None = None,
    adaptive_k: bool = False,
    **given: Any,
) -> tuple[Tensor, Tensor]:
    """The functional recall at a fixed precision: the curve up to ``max_k``, then
    ``recall_at_precision``."""
    floor = check_fraction("min_precision", min_precision)
    owner = ("retrieval_recall_at_fixed_precision", "RetrievalRecallAtFixedPrecision")
    given["min_precision"] = floor  # an option of its table, as its module face's
    precision, recall, top_k = _curve(owner, preds, target, max_k, adaptive_k, given)
    return recall_at_precision(precision, recall, top_k, floor)
