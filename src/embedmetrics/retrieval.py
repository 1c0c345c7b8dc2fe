"""Module retrieval metrics (``torchmetrics.Metric`` subclasses): thin faces over the retrieval engine.

``update`` accepts two kinds of input, which may be mixed in one metric:

- flat ``preds``/``target``/``indexes`` (any equal shape, flattened): the rows are stored
  (``dist_reduce_fx="cat"``) and grouped by ``indexes`` in ``compute``, so a query may span any
  number of ``update`` calls (and processes: indexes must then be globally unique);
- 2-D ``(queries, documents)`` ``preds``/``target`` with ``indexes=None`` (1-D: one query): every row
  is a complete query, ranked at once in ``update``; only its per-query value is stored, so the
  state is ``O(queries)``.

Each metric is declared once in :mod:`embedmetrics._engine.retrieval` (closed form, options,
docstring); the classes here only name it. ``update`` and ``compute`` run the engine functions the
functional twins run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from embedmetrics._engine.base import BaseMetric
from embedmetrics._engine.checks import (
    ArgumentKindError,
    check_bool,
    check_retrieval_inputs,
    check_retrieval_options,
)
from embedmetrics._engine.retrieval import RetrievalDeclaration, documented, finish, out_dtype, query_values
from embedmetrics._plotting import plot_metric

__all__ = [
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalMetric",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRPrecision",
    "RetrievalRecall",
]


class RetrievalMetric(BaseMetric):
    """Base of the retrieval metrics: option checks, the two kinds of state, ``compute`` by the engine.

    Subclasses name their declaration (``declaration``); see :class:`RetrievalHitRate` for the arguments.
    """

    is_differentiable: bool = False
    higher_is_better: bool = True
    full_state_update: bool = False
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0

    declaration: ClassVar[RetrievalDeclaration]
    preds: list[Tensor]
    target: list[Tensor]
    indexes: list[Tensor]
    row_values: list[Tensor]
    row_status: list[Tensor]

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: int | Sequence[int] | None = None,
        aggregation: str | Callable[..., Tensor] = "mean",
        *,
        top_k: int | Sequence[int] | None = None,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        adaptive_k = kwargs.pop("adaptive_k", False) if self.declaration.name == "precision" else False
        super().__init__(**kwargs)
        self._ks, self._single = check_retrieval_options(
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
        self.add_row_store("preds", "target", "indexes", "row_values", "row_status")
        # 2-D input stores per-query values at these settings: never share a compute group across them
        self.add_settings_state(
            metric=self.declaration.name,
            ks=self._ks,
            ties=ties,
            ignore_index=ignore_index,
            adaptive_k=adaptive_k,
        )

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor | None = None) -> None:
        """Validate a batch, then store it (flat input) or its per-query values (2-D input).

        Args:
            preds: scores (float).
            target: relevance.
            indexes: query id of every document, or ``None`` for 2-D ``(queries, documents)`` input
                (1-D: a single query).
        """
        check_retrieval_inputs(
            self.declaration.name,
            self.declaration.binary,
            preds,
            target,
            indexes,
            ignore_index=self.ignore_index,
            validate_args=self.validate_args,
        )
        if indexes is None:
            values, status = query_values(
                self.declaration,
                preds,
                target,
                None,
                ks=self._ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                adaptive_k=self.adaptive_k,
            )
            self.row_values.append(values.to(out_dtype(preds)))
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
        row_values, row_status = self.stored_rows("row_values"), self.stored_rows("row_status")
        if row_values is not None and row_status is not None:
            values.append(row_values.reshape(-1, nk))
            status.append(row_status.reshape(-1))
            dtype = row_values.dtype
        preds, target, indexes = (self.stored_rows(n) for n in ("preds", "target", "indexes"))
        if preds is not None and target is not None and indexes is not None:
            v, s = query_values(
                self.declaration,
                preds,
                target,
                indexes,
                ks=self._ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                adaptive_k=self.adaptive_k,
            )
            flat_dtype = out_dtype(preds)
            dtype = torch.float64 if torch.float64 in (dtype, flat_dtype) else flat_dtype
            values.append(v)
            status.append(s)
        if not values:
            all_values = torch.zeros(0, nk, dtype=dtype, device=self.device)
            all_status = torch.zeros(0, dtype=torch.int8, device=self.device)
        else:
            all_values = torch.cat([v.to(torch.float64) for v in values])
            all_status = torch.cat(status)
        return finish(
            all_values,
            all_status,
            empty_target_action=self.empty_target_action,
            aggregation=self.aggregation,
            single=self._single,
            dtype=dtype,
            needs=self.declaration.needs,
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


@documented("hit_rate", "module")
class RetrievalHitRate(RetrievalMetric):
    pass


@documented("reciprocal_rank", "module")
class RetrievalMRR(RetrievalMetric):
    pass


@documented("precision", "module")
class RetrievalPrecision(RetrievalMetric):
    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        k: int | Sequence[int] | None = None,
        adaptive_k: bool = False,
        aggregation: str | Callable[..., Tensor] = "mean",
        *,
        top_k: int | Sequence[int] | None = None,
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
            adaptive_k=adaptive_k,
            **kwargs,
        )


@documented("recall", "module")
class RetrievalRecall(RetrievalMetric):
    pass


@documented("normalized_dcg", "module")
class RetrievalNormalizedDCG(RetrievalMetric):
    pass


@documented("average_precision", "module")
class RetrievalMAP(RetrievalMetric):
    pass


@documented("r_precision", "module")
class RetrievalRPrecision(RetrievalMetric):
    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean",
        *,
        ties: str = "average",
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        for name in ("k", "top_k"):
            if name in kwargs:
                raise ArgumentKindError(
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


@documented("fall_out", "module")
class RetrievalFallOut(RetrievalMetric):
    higher_is_better = False

    def __init__(
        self,
        empty_target_action: str = "pos",
        ignore_index: int | None = None,
        k: int | Sequence[int] | None = None,
        aggregation: str | Callable[..., Tensor] = "mean",
        *,
        top_k: int | Sequence[int] | None = None,
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
