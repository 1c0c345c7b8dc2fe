"""Module retrieval metrics (``torchmetrics.Metric`` subclasses): thin faces over the retrieval engine.

``update`` accepts two kinds of input, which may be mixed in one metric:

- flat ``preds``/``target``/``indexes`` (any equal shape, flattened): the rows are stored
  (``dist_reduce_fx="cat"``) and grouped by ``indexes`` in ``compute``, so a query may span any
  number of ``update`` calls (and processes: indexes must then be globally unique);
- 2-D ``(queries, documents)`` ``preds``/``target`` with ``indexes=None`` (1-D: one query): every row
  is a complete query, ranked at once in ``update``; only its per-query value is stored, so the
  state is ``O(queries)``.

Each metric is declared once in ``embedmetrics._engine.ranking.retrieval`` (closed form, options,
docstring); the classes here only name it. ``update`` and ``compute`` run the engine functions the
functional twins run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import Aggregation, check_ranking_batch
from embedmetrics._engine.core.inputs import Arg, BatchSpec
from embedmetrics._engine.ranking.curves import (
    cutoffs,
    finish_curve,
    largest_query,
    recall_at_precision,
    top_k_column,
)
from embedmetrics._engine.ranking.options import OPTIONS
from embedmetrics._engine.ranking.retrieval import (
    RetrievalDeclaration,
    RetrievalSettings,
    finish,
    out_dtype,
    query_values,
    read_settings,
)
from embedmetrics._metric.base import BaseMetric
from embedmetrics._metric.docstrings import documented, documented_curve
from embedmetrics._metric.registry import class_names
from embedmetrics._plotting import plot_curve, plot_metric

__all__ = ["RetrievalMetric", *class_names("retrieval")]


class RetrievalMetric(BaseMetric):
    """Base of the retrieval metrics: option checks, the two kinds of state, ``compute`` by the engine.

    Subclasses name their declaration (``declaration``); see ``RetrievalHitRate`` for the arguments.
    """

    is_differentiable: bool = False
    higher_is_better: bool = True
    full_state_update: bool = False
    plot_lower_bound: float = 0.0
    _aligned_row_stores = (("preds", "target", "indexes"),)
    plot_upper_bound: float = 1.0

    declaration: ClassVar[RetrievalDeclaration]
    batch_spec = BatchSpec(
        (Arg("preds", "scores"), Arg("target", "relevance"), Arg("indexes", "query_ids", optional=True)),
        rule=check_ranking_batch,
    )
    # the settings (their option table: ``embedmetrics._engine.ranking.options``)
    ties: str
    empty_target_action: str
    ignore_index: int | None
    aggregation: Aggregation
    validate_args: bool
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
        table = OPTIONS[self._table()]
        given = {o.name: kwargs.pop(o.name) for o in table if o.name in kwargs}
        given.update(empty_target_action=empty_target_action, ignore_index=ignore_index)
        given.update(aggregation=aggregation, ties=ties, validate_args=validate_args)
        if k is not None or any(o.name == "k" for o in table):
            given["k"] = k
        super().__init__(**kwargs)
        settings = read_settings(type(self).__name__, self._table(), given, top_k)
        self._ks, self._single = self._cutoffs(settings)
        self._options = settings.options
        if "k" in settings.values:
            self.top_k = settings.values["k"]
        # 2-D input stores per-query values at these settings: never share a compute group across them
        self.apply_options(settings.values, record={"metric": self.declaration.name, "k": self._ks})
        self.add_row_store("preds", "target", "indexes", "row_values", "row_status")

    def _batch_context(self) -> dict[str, Any]:
        return {
            "metric": self.declaration.name,
            "binary": self.declaration.binary,
            "unjudged": self.declaration.unjudged,
            "ignore_index": self.ignore_index,
        }

    @classmethod
    def _table(cls) -> str:
        """The registry name whose option table this class reads (the nearest registered class)."""
        return next(c.__name__ for c in cls.__mro__ if c.__name__ in OPTIONS)

    def _cutoffs(self, settings: RetrievalSettings) -> tuple[tuple[int | None, ...], bool]:
        """The cut-offs of the per-query values, and whether ``k`` was a scalar."""
        return settings.ks, settings.single

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor | None = None) -> None:
        """Validate a batch, then store it (flat input) or its per-query values (2-D input).

        Args:
            preds: scores (float).
            target: relevance.
            indexes: query id of every document, or ``None`` for 2-D ``(queries, documents)`` input
                (1-D: a single query).
        """
        batch, _ = self.read_batch(preds, target, indexes)
        preds, target, indexes = batch["preds"], batch["target"], batch["indexes"]
        if indexes is None:
            values, status = query_values(
                self.declaration,
                preds,
                target,
                None,
                ks=self._ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                options=self._options,
            )
            self.append_rows("row_values", values.to(out_dtype(preds)))
            self.append_rows("row_status", status)
        else:
            self.append_rows("preds", preds.reshape(-1))
            self.append_rows("target", target.reshape(-1))
            self.append_rows("indexes", indexes.reshape(-1).to(torch.int64))

    def compute(self) -> Tensor:
        """The metric over every query seen since the last ``reset``."""
        values, status, dtype = self._query_values(self._ks)
        return finish(
            values,
            status,
            empty_target_action=self.empty_target_action,
            aggregation=self.aggregation,
            single=self._single,
            dtype=dtype,
            needs=self.declaration.needs,
        )

    def _query_values(self, ks: tuple[int | None, ...]) -> tuple[Tensor, Tensor, torch.dtype]:
        """Per-query values (float64) and status of every stored query, and the result dtype."""
        values: list[Tensor] = []
        status: list[Tensor] = []
        dtype = torch.float32
        width = len(ks) * self.declaration.values_per_cutoff
        row_values, row_status = self.stored_rows("row_values"), self.stored_rows("row_status")
        if row_values is not None and row_status is not None:
            values.append(row_values.reshape(-1, width))
            status.append(row_status.reshape(-1))
            dtype = row_values.dtype
        preds, target, indexes = (self.stored_rows(n) for n in ("preds", "target", "indexes"))
        if preds is not None and target is not None and indexes is not None:
            v, s = query_values(
                self.declaration,
                preds,
                target,
                indexes,
                ks=ks,
                ties=self.ties,
                ignore_index=self.ignore_index,
                options=self._options,
            )
            flat_dtype = out_dtype(preds)
            dtype = torch.float64 if torch.float64 in (dtype, flat_dtype) else flat_dtype
            values.append(v)
            status.append(s)
        if not values:
            return (
                torch.zeros(0, width, dtype=dtype, device=self.device),
                torch.zeros(0, dtype=torch.int8, device=self.device),
                dtype,
            )
        return torch.cat([v.to(torch.float64) for v in values]), torch.cat(status), dtype

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
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        k: int | Sequence[int] | None = None, adaptive_k: bool = False,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, k, aggregation, adaptive_k=adaptive_k, **kwargs)


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
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, aggregation=aggregation, **kwargs)


@documented("r_precision_multiple", "module")
class RetrievalRPrecisionMultiple(RetrievalMetric):
    def __init__(
        self, multiple: float = 1.0, empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(
            empty_target_action, ignore_index, aggregation=aggregation, multiple=multiple, **kwargs
        )


@documented("set_relative_precision", "module")
class RetrievalSetRelativePrecision(RetrievalMetric):
    pass


@documented("set_map", "module")
class RetrievalSetMAP(RetrievalMetric):
    pass


@documented("set_f", "module")
class RetrievalSetF(RetrievalMetric):
    def __init__(
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        k: int | Sequence[int] | None = None, beta: float = 1.0,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, k, aggregation, beta=beta, **kwargs)


@documented("interpolated_precision", "module")
class RetrievalInterpolatedPrecision(RetrievalMetric):
    def __init__(
        self, recall_level: float = 0.0, empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", *, ties: str = "pessimistic", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(
            empty_target_action,
            ignore_index,
            aggregation=aggregation,
            ties=ties,
            recall_level=recall_level,
            **kwargs,
        )


@documented("infap", "module")
class RetrievalInfAP(RetrievalMetric):
    def __init__(
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", *, ties: str = "pessimistic", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, aggregation=aggregation, ties=ties, **kwargs)


@documented("bpref", "module")
class RetrievalBpref(RetrievalMetric):
    def __init__(
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, aggregation=aggregation, **kwargs)


@documented("fall_out", "module")
class RetrievalFallOut(RetrievalMetric):
    higher_is_better = False

    def __init__(
        self, empty_target_action: str = "pos", ignore_index: int | None = None,
        k: int | Sequence[int] | None = None, aggregation: str | Callable[..., Tensor] = "mean",
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(empty_target_action, ignore_index, k, aggregation, **kwargs)


@documented("auroc", "module")
class RetrievalAUROC(RetrievalMetric):
    def __init__(
        self, empty_target_action: str = "neg", ignore_index: int | None = None,
        top_k: int | Sequence[int] | None = None, max_fpr: float | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        k = kwargs.pop("k", None)
        super().__init__(
            empty_target_action, ignore_index, k, aggregation, top_k=top_k, max_fpr=max_fpr, **kwargs
        )


@documented_curve("module", fixed_precision=False)
class RetrievalPrecisionRecallCurve(RetrievalMetric):
    max_k: int | None

    def __init__(
        self, max_k: int | None = None, adaptive_k: bool = False, empty_target_action: str = "neg",
        ignore_index: int | None = None, aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        kwargs.update(max_k=max_k, adaptive_k=adaptive_k)
        super().__init__(empty_target_action, ignore_index, aggregation=aggregation, **kwargs)

    def _cutoffs(self, settings: RetrievalSettings) -> tuple[tuple[int | None, ...], bool]:
        max_k = settings.values["max_k"]
        return ((None,) if max_k is None else cutoffs(max_k)), False

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor | None = None) -> None:
        """Validate a batch and store it (see ``RetrievalMetric``); 2-D input needs ``max_k``."""
        if indexes is None and self.max_k is None:
            raise ValueError(
                f"{type(self).__name__} needs `max_k` for input without `indexes` (its per-query state "
                "has one value per k), got max_k=None."
            )
        super().update(preds, target, indexes)

    def _curve(self) -> tuple[Tensor, Tensor, Tensor]:
        target, indexes = self.stored_rows("target"), self.stored_rows("indexes")
        if self.max_k is not None:
            width = self.max_k
        elif target is not None and indexes is not None:
            width = largest_query(target, indexes, self.ignore_index)
        else:
            width = 1
        values, status, dtype = self._query_values(cutoffs(width))
        precision, recall = finish_curve(
            values,
            status,
            empty_target_action=self.empty_target_action,
            aggregation=self.aggregation,
            dtype=dtype,
        )
        return precision, recall, top_k_column(width, self.device)

    def compute(self) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        """Precision, recall and ``k`` over every query seen since the last ``reset``."""
        return self._curve()

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the curve, precision against recall (needs matplotlib).

        Args:
            val: ``(precision, recall, top_k)`` as returned by ``compute``; ``None`` computes it.
            ax: a matplotlib axis to draw on.

        Returns:
            The figure and axis.
        """
        return plot_curve(self, val if val is not None else self.compute(), ax)


@documented_curve("module", fixed_precision=True)
class RetrievalRecallAtFixedPrecision(RetrievalPrecisionRecallCurve):
    min_precision: float

    def __init__(
        self, min_precision: float = 0.0, max_k: int | None = None, adaptive_k: bool = False,
        empty_target_action: str = "neg", ignore_index: int | None = None,
        aggregation: str | Callable[..., Tensor] = "mean", **kwargs: Any,
    ) -> None:  # fmt: skip
        kwargs["min_precision"] = min_precision
        super().__init__(max_k, adaptive_k, empty_target_action, ignore_index, aggregation, **kwargs)

    def compute(self) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """The best recall at the fixed precision, and its ``k``."""
        return recall_at_precision(*self._curve(), self.min_precision)

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the recall (needs matplotlib).

        Args:
            val: ``(recall, k)`` as ``compute`` returns it, or a sequence of them (or of recalls);
                ``None`` computes it.
            ax: a matplotlib axis to draw on.

        Returns:
            The figure and axis.
        """
        value = self.compute() if val is None else val
        recall = (
            value[0] if isinstance(value, tuple) else [v[0] if isinstance(v, tuple) else v for v in value]
        )
        return self._plot(recall, ax)
