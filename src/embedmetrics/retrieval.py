"""Module retrieval metrics (``torchmetrics.Metric`` subclasses) over the grouped-ranking engine.

``update`` accepts two kinds of input, which may be mixed in one metric:

- flat ``preds``/``target``/``indexes`` (any equal shape, flattened): the rows are stored
  (``dist_reduce_fx="cat"``) and grouped by ``indexes`` in ``compute``, so a query may span any
  number of ``update`` calls (and processes: indexes must then be globally unique);
- 2-D ``(queries, documents)`` ``preds``/``target`` with ``indexes=None`` (1-D: one query): every row
  is a complete query, ranked at once in ``update``; only its per-query value is stored, so the
  state is ``O(queries)``.

``compute`` calls the same private functions as the functional twins in
:mod:`embedmetrics.functional.retrieval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torchmetrics.utilities.data import dim_zero_cat

from embedmetrics._engine.base import BaseMetric
from embedmetrics._engine.checks import check_bool
from embedmetrics._engine.ranking import Aggregation
from embedmetrics._plotting import plot_metric
from embedmetrics.functional.retrieval import (
    SPECS,
    KArg,
    _check_inputs,
    _check_options,
    _finish,
    _out_dtype,
    _query_values,
)

__all__ = [
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRPrecision",
    "RetrievalRecall",
]


def _cat(state: Union[list[Tensor], Tensor]) -> Optional[Tensor]:
    """Concatenate a list state (or the tensor it became after a sync); ``None`` if empty."""
    if isinstance(state, list):
        return dim_zero_cat(state) if state else None
    return state if state.numel() else None


class _RetrievalMetric(BaseMetric):
    """Shared base: option checks, the two kinds of state, ``compute`` through the shared engine."""

    is_differentiable: bool = False
    higher_is_better: bool = True
    full_state_update: bool = False
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0

    _metric_name: str = ""
    preds: list[Tensor]
    target: list[Tensor]
    indexes: list[Tensor]
    row_values: list[Tensor]
    row_status: list[Tensor]

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        adaptive_k: bool = False,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._ks, self._single = _check_options(
            k, top_k, ties, empty_target_action, ignore_index, aggregation
        )
        check_bool("adaptive_k", adaptive_k)
        check_bool("validate_args", validate_args)
        self.k = k if top_k is None else top_k
        self.top_k = self.k
        self.empty_target_action = empty_target_action
        self.ignore_index = ignore_index
        self.aggregation = aggregation
        self.ties = ties
        self.adaptive_k = adaptive_k
        self.validate_args = validate_args
        self._spec = SPECS[self._metric_name]
        for name in ("preds", "target", "indexes", "row_values", "row_status"):
            self.add_state(name, default=[], dist_reduce_fx="cat")
        # 2-D input stores per-query values at these settings: never share a compute group across them
        self.add_settings_state(
            metric=self._metric_name, ks=self._ks, ties=ties, ignore_index=ignore_index, adaptive_k=adaptive_k
        )

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor | None = None) -> None:
        """Validate a batch, then store it (flat input) or its per-query values (2-D input).

        Args:
            preds: scores (float).
            target: relevance.
            indexes: query id of every document, or ``None`` for 2-D ``(queries, documents)`` input
                (1-D: a single query).
        """
        _check_inputs(
            self._spec,
            preds,
            target,
            indexes,
            ignore_index=self.ignore_index,
            validate_args=self.validate_args,
        )
        if indexes is None:
            values, status = _query_values(
                self._spec,
                preds,
                target,
                None,
                ks=self._ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                adaptive_k=self.adaptive_k,
            )
            self.row_values.append(values.to(_out_dtype(preds)))
            self.row_status.append(status)
        else:
            self.preds.append(preds.reshape(-1))
            self.target.append(target.reshape(-1))
            self.indexes.append(indexes.reshape(-1).to(torch.int64))

    def compute(self) -> Tensor:
        """The metric over every query seen since the last ``reset``."""
        nk = len(self._ks)
        values: list[Tensor] = []
        status: list[Tensor] = []
        dtype = torch.float32
        row_values, row_status = _cat(self.row_values), _cat(self.row_status)
        if row_values is not None and row_status is not None:
            values.append(row_values.reshape(-1, nk))
            status.append(row_status.reshape(-1))
            dtype = row_values.dtype
        preds, target, indexes = _cat(self.preds), _cat(self.target), _cat(self.indexes)
        if preds is not None and target is not None and indexes is not None:
            v, s = _query_values(
                self._spec,
                preds,
                target,
                indexes,
                ks=self._ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                adaptive_k=self.adaptive_k,
            )
            out_dtype = _out_dtype(preds)
            dtype = torch.float64 if torch.float64 in (dtype, out_dtype) else out_dtype
            values.append(v)
            status.append(s)
        if not values:
            all_values = torch.zeros(0, nk, dtype=dtype, device=self.device)
            all_status = torch.zeros(0, dtype=torch.int8, device=self.device)
        else:
            all_values = torch.cat([v.to(torch.float64) for v in values])
            all_status = torch.cat(status)
        return _finish(
            all_values,
            all_status,
            empty_target_action=self.empty_target_action,
            aggregation=self.aggregation,
            single=self._single,
            dtype=dtype,
        )

    def plot(self, val: Tensor | Sequence[Tensor] | None = None, ax: Any = None) -> Any:
        """Plot a single value or a sequence of values (needs matplotlib).

        Args:
            val: value(s) to plot; ``None`` plots ``compute()``.
            ax: a matplotlib axis to draw on.

        Returns:
            The figure and axis. A value per ``k`` is drawn as a curve over ``k``.
        """
        return plot_metric(self, val, ax, self._ks)


class RetrievalHitRate(_RetrievalMetric):
    """Hit rate at ``k``: 1 if a relevant document is among the top ``k`` of a query, averaged.

    Args:
        empty_target_action: a query with no relevant document counts as 0 (``'neg'``), 1
            (``'pos'``), is left out (``'skip'``; 0 if all are) or makes ``compute`` raise (``'error'``).
        ignore_index: documents whose target equals this value are removed.
        k: cut-off: ``None`` (all documents), an int, or a sequence of ints (one value per k).
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or
            ``'none'`` (per-query values: 2-D rows in update order, then indexed queries by index).
        top_k: alias of ``k`` (torchmetrics 1.x name).
        ties: ``'average'`` (expected value over a random order of tied scores), ``'pessimistic'`` or
            ``'optimistic'``.
        validate_args: check values in ``update`` (needs a host sync); shapes/dtypes are always checked.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalHitRate
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([True, False, False, False, True, False, True])
        >>> hr2 = RetrievalHitRate(k=2)
        >>> hr2(preds, target, indexes=indexes)
        tensor(0.5000)
        >>> RetrievalHitRate(k=(1, 2, 3))(preds, target, indexes=indexes)
        tensor([0.0000, 0.5000, 1.0000])
    """

    _metric_name = "hit_rate"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalMRR(_RetrievalMetric):
    """Mean reciprocal rank of the first relevant document (ranks ``> k`` count as 0).

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'`` for queries
            with no relevant document.
        ignore_index: documents whose target equals this value are removed.
        k: cut-off: ``None`` (all), an int, or a sequence of ints.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        top_k: alias of ``k``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalMRR
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([False, False, True, False, True, False, True])
        >>> RetrievalMRR()(preds, target, indexes=indexes)
        tensor(0.7500)
    """

    _metric_name = "reciprocal_rank"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalPrecision(_RetrievalMetric):
    """Precision at ``k``: relevant documents in the top ``k`` over ``k``, averaged over queries.

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'``.
        ignore_index: documents whose target equals this value are removed.
        k: cut-off (``None``: all documents of the query); an int or a sequence of ints.
        adaptive_k: divide by ``min(k, documents of the query)`` instead of ``k``.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        top_k: alias of ``k``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalPrecision
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([False, False, True, False, True, False, True])
        >>> RetrievalPrecision(k=2)(preds, target, indexes=indexes)
        tensor(0.5000)
    """

    _metric_name = "precision"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        adaptive_k: bool = False,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            adaptive_k=adaptive_k,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalRecall(_RetrievalMetric):
    """Recall at ``k``: relevant documents in the top ``k`` over all relevant, averaged over queries.

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'``.
        ignore_index: documents whose target equals this value are removed.
        k: cut-off: ``None`` (all), an int, or a sequence of ints.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        top_k: alias of ``k``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalRecall
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([False, False, True, False, True, False, True])
        >>> RetrievalRecall(k=2)(preds, target, indexes=indexes)
        tensor(0.7500)
    """

    _metric_name = "recall"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalNormalizedDCG(_RetrievalMetric):
    """Normalised DCG at ``k`` with graded relevance (gain = the grade), averaged over queries.

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'``.
        ignore_index: documents whose target equals this value are removed.
        k: cut-off: ``None`` (all), an int, or a sequence of ints.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        top_k: alias of ``k``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalNormalizedDCG
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([0, 1, 0, 0, 1, 0, 2])
        >>> RetrievalNormalizedDCG()(preds, target, indexes=indexes)
        tensor(0.6254)
    """

    _metric_name = "normalized_dcg"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalMAP(_RetrievalMetric):
    """Mean average precision; AP@k divides by all relevant documents ``R`` (trec_eval, ranx).

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'``.
        ignore_index: documents whose target equals this value are removed.
        k: cut-off: ``None`` (all), an int, or a sequence of ints.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        top_k: alias of ``k``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalMAP
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([False, False, True, False, True, False, True])
        >>> RetrievalMAP()(preds, target, indexes=indexes)
        tensor(0.7917)
    """

    _metric_name = "average_precision"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: KArg = None,
        aggregation: Aggregation = "mean",
        *,
        top_k: KArg = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action,
            ignore_index,
            k,
            aggregation,
            top_k=top_k,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )


class RetrievalRPrecision(_RetrievalMetric):
    """R-precision: relevant documents in the top ``R`` over ``R``, averaged over queries.

    Args:
        empty_target_action: ``'neg'`` (default), ``'pos'``, ``'skip'`` or ``'error'``.
        ignore_index: documents whose target equals this value are removed.
        aggregation: ``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable or ``'none'``.
        ties: ``'average'``, ``'pessimistic'`` or ``'optimistic'``.
        validate_args: check values in ``update``.
        kwargs: passed to ``torchmetrics.Metric``.

    Example:
        >>> from torch import tensor
        >>> from embedmetrics import RetrievalRPrecision
        >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])
        >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
        >>> target = tensor([False, False, True, False, True, False, True])
        >>> RetrievalRPrecision()(preds, target, indexes=indexes)
        tensor(0.7500)
    """

    _metric_name = "r_precision"

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        aggregation: Aggregation = "mean",
        *,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        for name in ("k", "top_k"):
            if name in kwargs:
                raise TypeError(
                    f"RetrievalRPrecision has no argument `{name}`: R-precision cuts each query at its own"
                    f" number of relevant documents R. Got {name}={kwargs[name]!r}."
                )
        super().__init__(
            empty_target_action,
            ignore_index,
            None,
            aggregation,
            ties=ties,
            validate_args=validate_args,
            **kwargs,
        )
