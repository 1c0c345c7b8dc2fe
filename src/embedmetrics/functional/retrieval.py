"""Functional retrieval metrics: thin wrappers over the grouped-ranking engine.

Every function accepts

- 1-D ``preds``/``target`` without ``indexes``: one query;
- 2-D ``(queries, documents)`` without ``indexes``: one query per row;
- any shape with ``indexes`` (flattened): the query id of every document.

The module metrics in :mod:`embedmetrics.retrieval` call the same private functions
(:func:`_query_values`, :func:`_finish`), so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from embedmetrics._engine import ranking
from embedmetrics._engine.checks import TIES, check_bool, check_choice, normalize_ks
from embedmetrics._engine.ranking import Aggregation, RankedRows

__all__ = [
    "retrieval_average_precision",
    "retrieval_hit_rate",
    "retrieval_normalized_dcg",
    "retrieval_precision",
    "retrieval_r_precision",
    "retrieval_recall",
    "retrieval_reciprocal_rank",
]

KArg = Union[int, Sequence[int], None]
EMPTY_TARGET_ACTIONS = ("neg", "pos", "skip", "error")
AGGREGATIONS = ("mean", "median", "min", "max", "none")


@dataclass(frozen=True)
class _Spec:
    """How one metric is computed from the rank statistics."""

    name: str
    fn: Callable[[RankedRows, tuple[Optional[int], ...], bool], Tensor]
    binary: bool = True

    def __reduce__(self) -> tuple[Callable[[str], _Spec], tuple[str]]:
        # the functions are lambdas: pickle by name, so metrics survive ddp_spawn and multiprocessing
        return (_spec_named, (self.name,))


def _spec_named(name: str) -> _Spec:
    return SPECS[name]


SPECS: dict[str, _Spec] = {
    "hit_rate": _Spec("hit_rate", lambda st, ks, _: ranking.hit_rate(st, ks)),
    "reciprocal_rank": _Spec("reciprocal_rank", lambda st, ks, _: ranking.reciprocal_rank(st, ks)),
    "precision": _Spec("precision", lambda st, ks, ad: ranking.precision(st, ks, ad)),
    "recall": _Spec("recall", lambda st, ks, _: ranking.recall(st, ks)),
    "r_precision": _Spec("r_precision", lambda st, ks, _: ranking.r_precision(st)),
    "average_precision": _Spec("average_precision", lambda st, ks, _: ranking.average_precision(st, ks)),
    "normalized_dcg": _Spec("normalized_dcg", lambda st, ks, _: ranking.normalized_dcg(st, ks), False),
}


# --------------------------------------------------------------------------- argument checks


def _check_options(
    k: KArg,
    top_k: KArg,
    ties: str,
    empty_target_action: str,
    ignore_index: int | None,
    aggregation: Aggregation,
) -> tuple[tuple[Optional[int], ...], bool]:
    """Validate the options shared by every metric; return the cut-offs and whether ``k`` was scalar."""
    if top_k is not None:
        if k is not None and k != top_k:
            raise ValueError(f"Arguments `k` and its alias `top_k` disagree: k={k!r}, top_k={top_k!r}.")
        k = top_k
    ks, single = normalize_ks("k", k)
    check_choice("ties", ties, TIES)
    check_choice("empty_target_action", empty_target_action, EMPTY_TARGET_ACTIONS)
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        raise TypeError(f"Argument `ignore_index` must be an int or None, got {ignore_index!r}.")
    if not (callable(aggregation) or (isinstance(aggregation, str) and aggregation in AGGREGATIONS)):
        raise ValueError(
            f"Argument `aggregation` must be one of {AGGREGATIONS} or a callable, got {aggregation!r}."
        )
    return ks, single


def _check_inputs(
    spec: _Spec,
    preds: Any,
    target: Any,
    indexes: Any,
    *,
    ignore_index: int | None,
    retrieved: Any = None,
    num_relevant: Any = None,
    validate_args: bool = True,
) -> None:
    """Type and shape checks (always, no host sync); value checks when ``validate_args`` (sync)."""
    for name, value in (("preds", preds), ("target", target)):
        if not isinstance(value, Tensor):
            raise TypeError(f"Argument `{name}` must be a torch.Tensor, got {type(value).__name__}.")
    if not preds.is_floating_point():
        raise TypeError(f"Argument `preds` must be a floating-point tensor, got dtype {preds.dtype}.")
    if target.is_complex() or not (
        target.dtype == torch.bool or _is_int(target) or target.is_floating_point()
    ):
        raise TypeError(
            f"Argument `target` must be a bool, integer or float tensor, got dtype {target.dtype}."
        )
    if preds.shape != target.shape:
        raise ValueError(
            f"Arguments `preds` and `target` must have the same shape, got {tuple(preds.shape)} "
            f"and {tuple(target.shape)}."
        )
    if indexes is None:
        if preds.ndim not in (1, 2):
            raise ValueError(
                "Without `indexes`, `preds` must be 1-D (one query) or 2-D (queries, documents), "
                f"got shape {tuple(preds.shape)}."
            )
    else:
        if not isinstance(indexes, Tensor):
            raise TypeError(
                f"Argument `indexes` must be a torch.Tensor or None, got {type(indexes).__name__}."
            )
        if not _is_int(indexes):
            raise TypeError(f"Argument `indexes` must be an integer tensor, got dtype {indexes.dtype}.")
        if indexes.shape != preds.shape:
            raise ValueError(
                f"Argument `indexes` must have the shape of `preds` {tuple(preds.shape)}, "
                f"got {tuple(indexes.shape)}."
            )
    if preds.numel() == 0:
        raise ValueError(f"Arguments `preds` and `target` must not be empty, got shape {tuple(preds.shape)}.")
    if retrieved is not None:
        if not isinstance(retrieved, Tensor) or retrieved.dtype != torch.bool:
            got = retrieved.dtype if isinstance(retrieved, Tensor) else type(retrieved).__name__
            raise TypeError(f"Argument `retrieved` must be a bool tensor, got {got}.")
        if retrieved.shape != preds.shape:
            raise ValueError(
                f"Argument `retrieved` must have the shape of `preds` {tuple(preds.shape)}, "
                f"got {tuple(retrieved.shape)}."
            )
    if num_relevant is not None:
        if not isinstance(num_relevant, Tensor) or not _is_int(num_relevant):
            got = num_relevant.dtype if isinstance(num_relevant, Tensor) else type(num_relevant).__name__
            raise TypeError(f"Argument `num_relevant` must be an integer tensor, got {got}.")
        if indexes is None:
            queries = preds.shape[0] if preds.ndim == 2 else 1
            if num_relevant.numel() != queries or num_relevant.ndim > 1:
                raise ValueError(
                    f"Argument `num_relevant` must have one entry per query ({queries}), "
                    f"got shape {tuple(num_relevant.shape)}."
                )
    if not validate_args:
        return
    if bool(torch.isnan(preds).any()):
        raise ValueError("Argument `preds` must not contain NaN, got a tensor with NaN values.")
    if ignore_index is None:
        counted = target
    else:
        counted = torch.where(target == ignore_index, torch.zeros((), dtype=target.dtype), target)
    if counted.dtype == torch.bool:
        pass  # always binary and non-negative
    elif spec.binary:
        lo, hi = torch.aminmax(counted)
        bad_value = bool(lo < 0) or bool(hi > 1)
        if not bad_value and counted.is_floating_point():
            bad_value = bool(((counted != 0) & (counted != 1)).any())
        if bad_value:
            bad = (counted != 0) & (counted != 1)
            raise ValueError(
                f"Argument `target` must be binary (bool or 0/1) for `{spec.name}`, "
                f"got the value {counted[bad].reshape(-1)[0].item()!r}."
            )
    else:
        lo, hi = torch.aminmax(counted)
        if bool(lo < 0) or not bool(torch.isfinite(hi.double())):
            bad = ~torch.isfinite(counted.double()) | (counted < 0)
            raise ValueError(
                f"Argument `target` must hold finite relevance grades >= 0 for `{spec.name}`, "
                f"got the value {counted[bad].reshape(-1)[0].item()!r}."
            )
    if num_relevant is not None and bool((num_relevant < 0).any()):
        raise ValueError(f"Argument `num_relevant` must be >= 0, got {num_relevant.tolist()!r}.")


def _is_int(x: Tensor) -> bool:
    return not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool


# --------------------------------------------------------------------------- shared computation


def _query_values(
    spec: _Spec,
    preds: Tensor,
    target: Tensor,
    indexes: Tensor | None,
    *,
    ks: tuple[Optional[int], ...],
    ties: str,
    ignore_index: int | None,
    adaptive_k: bool = False,
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = False,
) -> tuple[Tensor, Tensor]:
    """Per-query values ``(Q, len(ks))`` and status ``(Q,)`` (see ``ranking.STATUS_*``).

    Without ``indexes`` (1-D or 2-D input) nothing synchronises with the host, so the module metrics
    call this from ``update``. With ``indexes`` the grouping has a dynamic shape (``compute`` only).
    """
    ignored = None if ignore_index is None else target == ignore_index
    gain = target if ignored is None else target.masked_fill(ignored, 0)
    inactive = ignored
    if retrieved is not None:
        inactive = ~retrieved if inactive is None else inactive | ~retrieved
    judged = None if ignored is None else ~ignored
    if indexes is None and preds.ndim == 1:  # one query
        preds, gain = preds.unsqueeze(0), gain.unsqueeze(0)
        inactive = None if inactive is None else inactive.unsqueeze(0)
        judged = None if judged is None else judged.unsqueeze(0)
    values, status, found = ranking.evaluate(
        lambda st: spec.fn(st, ks, adaptive_k),
        preds,
        gain,
        ks=ks,
        indexes=indexes,
        inactive=inactive,
        judged=judged,
        num_relevant=None if num_relevant is None else num_relevant.reshape(-1),
        ties=ties,
    )
    if validate_args and num_relevant is not None and bool((num_relevant.reshape(-1) < found).any()):
        raise ValueError(
            "Argument `num_relevant` must be at least the number of relevant documents given, "
            f"got {num_relevant.reshape(-1).tolist()!r} for {found.tolist()!r} found."
        )
    return values, status


def _out_dtype(preds: Tensor) -> torch.dtype:
    return torch.float64 if preds.dtype == torch.float64 else torch.float32


def _finish(
    values: Tensor,
    status: Tensor,
    *,
    empty_target_action: str,
    aggregation: Aggregation,
    single: bool,
    dtype: torch.dtype,
) -> Tensor:
    """Apply ``empty_target_action`` and the aggregation; squeeze the k dimension for a scalar ``k``."""
    per_query = ranking.resolve_empty(values, status, empty_target_action)
    out = ranking.aggregate(per_query, aggregation).to(dtype)
    return out[..., 0] if single else out


def _retrieval(
    metric: str,
    preds: Tensor,
    target: Tensor,
    k: KArg,
    *,
    indexes: Tensor | None,
    top_k: KArg,
    ties: str,
    empty_target_action: str,
    ignore_index: int | None,
    aggregation: Aggregation,
    retrieved: Tensor | None,
    num_relevant: Tensor | None,
    validate_args: bool,
    adaptive_k: bool = False,
) -> Tensor:
    spec = SPECS[metric]
    ks, single = _check_options(k, top_k, ties, empty_target_action, ignore_index, aggregation)
    check_bool("validate_args", validate_args)
    _check_inputs(
        spec,
        preds,
        target,
        indexes,
        ignore_index=ignore_index,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
    values, status = _query_values(
        spec,
        preds,
        target,
        indexes,
        ks=ks,
        ties=ties,
        ignore_index=ignore_index,
        adaptive_k=adaptive_k,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
    return _finish(
        values,
        status,
        empty_target_action=empty_target_action,
        aggregation=aggregation,
        single=single,
        dtype=_out_dtype(preds),
    )


def retrieval_hit_rate(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Hit rate: 1 if at least one relevant document is among the top ``k``, else 0.

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        k: cut-off: ``None`` (all documents), an int, or a sequence of ints (one value per k).
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k for a sequence ``k``); per-query values for
        ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or a query with no relevant document
            under ``empty_target_action='error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_hit_rate
        >>> retrieval_hit_rate(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)
        tensor(1.)
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([True, False, False, False, True, False, True])
        >>> retrieval_hit_rate(preds, target, k=(1, 2), indexes=indexes)
        tensor([0.0000, 0.5000])
    """
    return _retrieval(
        "hit_rate",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )


def retrieval_reciprocal_rank(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Reciprocal rank of the first relevant document (0 if none is in the top ``k``); MRR when averaged.

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        k: only ranks ``<= k`` count (``None``: all); an int or a sequence of ints.
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k); per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_reciprocal_rank
        >>> retrieval_reciprocal_rank(tensor([0.2, 0.3, 0.5]), tensor([False, True, False]))
        tensor(0.5000)
        >>> retrieval_reciprocal_rank(tensor([[0.5, 0.5], [0.9, 0.1]]), tensor([[1, 0], [0, 1]]),
        ...                           aggregation="none")
        tensor([0.7500, 0.5000])
    """
    return _retrieval(
        "reciprocal_rank",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )


def retrieval_precision(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    adaptive_k: bool = False,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Precision at ``k``: relevant documents in the top ``k``, divided by ``k``.

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        k: cut-off (``None``: all ranked documents, dividing by their number); an int or a sequence.
        adaptive_k: divide by ``min(k, number of ranked documents)`` instead of ``k``.
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k); per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_precision
        >>> retrieval_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)
        tensor(0.5000)
        >>> retrieval_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=5, adaptive_k=True)
        tensor(0.6667)
    """
    check_bool("adaptive_k", adaptive_k)
    return _retrieval(
        "precision",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
        adaptive_k=adaptive_k,
    )


def retrieval_recall(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Recall at ``k``: relevant documents in the top ``k``, divided by all relevant documents ``R``.

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        k: cut-off (``None``: all); an int or a sequence of ints.
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k); per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_recall
        >>> retrieval_recall(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)
        tensor(0.5000)
    """
    return _retrieval(
        "recall",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )


def retrieval_r_precision(
    preds: Tensor,
    target: Tensor,
    *,
    indexes: Tensor | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """R-precision: relevant documents in the top ``R``, divided by ``R`` (the number of relevant).

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value; per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_r_precision
        >>> retrieval_r_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]))
        tensor(0.5000)
    """
    return _retrieval(
        "r_precision",
        preds,
        target,
        None,
        indexes=indexes,
        top_k=None,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )


def retrieval_average_precision(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Average precision (MAP when averaged): precision at each relevant rank ``<= k``, summed, over ``R``.

    Unlike torchmetrics, AP@k divides by ``R`` (all relevant documents), as trec_eval and ranx do.

    Args:
        preds: scores (float), higher is better.
        target: relevance (bool or 0/1).
        k: cut-off (``None``: all); an int or a sequence of ints.
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k); per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_average_precision
        >>> retrieval_average_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]))
        tensor(0.8333)
        >>> retrieval_average_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)
        tensor(0.5000)
    """
    return _retrieval(
        "average_precision",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )


def retrieval_normalized_dcg(
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Normalised DCG at ``k`` with graded relevance: ``Σ gain / log2(rank + 1)`` over its ideal value.

    Args:
        preds: scores (float), higher is better.
        target: relevance grades (bool, int or float, ``>= 0``); the gain is the grade itself.
        k: cut-off (``None``: all); an int or a sequence of ints.
        indexes: query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D
            input is one query, 2-D input ``(queries, documents)`` is one query per row.
        top_k: alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.
        ties: ``'average'`` (expected value over a uniformly random order of tied scores),
            ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first).
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``) or raises (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` for the per-query values (in row order for 2-D input, ascending index otherwise).
        retrieved: bool mask, same shape as ``preds``; ``False`` marks a judged document the system
            did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.
        num_relevant: per query, the total number of relevant documents, including ones absent from
            the input (one entry per row, or per distinct index in ascending order); must be at least
            the relevant documents given.
        validate_args: check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are
            always checked.

    Returns:
        The aggregated value (scalar, or one value per k); per-query values for ``aggregation='none'``.

    Raises:
        ValueError: bad shapes or values, an unknown option, or an empty query under ``'error'``.
        TypeError: wrong dtypes or argument types.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics.functional import retrieval_normalized_dcg
        >>> retrieval_normalized_dcg(tensor([0.1, 0.2, 0.3, 4.0, 70.0]), tensor([10, 0, 0, 1, 5]))
        tensor(0.6957)
    """
    return _retrieval(
        "normalized_dcg",
        preds,
        target,
        k,
        indexes=indexes,
        top_k=top_k,
        ties=ties,
        empty_target_action=empty_target_action,
        ignore_index=ignore_index,
        aggregation=aggregation,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
