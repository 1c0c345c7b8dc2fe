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
from embedmetrics._engine.ranking.options import COMMON, OPTIONS
from embedmetrics._engine.ranking.own_metric import own_query_values
from embedmetrics._engine.ranking.retrieval import (
    RetrievalDeclaration,
    RetrievalSettings,
    finish,
    out_dtype,
    query_values,
    read_settings,
)
from embedmetrics._engine.settings.options import Option, read_options, refuse_other_settings
from embedmetrics._metric.base import BaseMetric
from embedmetrics._metric.docstrings import documented, documented_curve
from embedmetrics._metric.registry import class_names
from embedmetrics._plotting import plot_curve, plot_metric

__all__ = ["RetrievalMetric", *class_names("retrieval")]

#: The settings of a subclass that defines its own ``_metric`` (torchmetrics' ``RetrievalMetric``'s):
#: no tie policy and no cut-off (its ``_metric`` reads the settings it adds itself).
OWN_METRIC_OPTIONS: tuple[Option, ...] = COMMON[1:]
_OWN_METRIC_REASON = "a subclass's own `_metric` takes this setting itself (in its own `__init__`)"


class RetrievalMetric(BaseMetric):
    """Base of the retrieval metrics: option checks, the two kinds of state, ``compute`` by the engine.

    Subclasses name their declaration (``declaration``); see ``RetrievalHitRate`` for the arguments.

    As in torchmetrics, a subclass of your own may instead define ``_metric(self, preds, target)``, the
    value of one query (its scores and relevance, documents whose target is ``ignore_index`` dropped;
    called only for a query with a relevant document). It takes the settings of torchmetrics' base,
    ``empty_target_action``, ``ignore_index``, ``aggregation`` (also as the third positional argument,
    as in torchmetrics) and ``validate_args``, and adds its own in its ``__init__``; set
    ``allow_non_binary_target = True`` for graded relevance.

    Example:
        >>> import torch
        >>> from embedmetrics.retrieval import RetrievalMetric
        >>> class FirstIsRelevant(RetrievalMetric):
        ...     def _metric(self, preds, target):
        ...         return target[preds.argmax()].float()
        >>> metric = FirstIsRelevant()
        >>> preds, target = torch.tensor([0.9, 0.1, 0.8, 0.2]), torch.tensor([0, 1, 1, 0])
        >>> metric.update(preds, target, indexes=torch.tensor([0, 0, 1, 1]))
        >>> metric.compute()
        tensor(0.5000)
    """

    is_differentiable: bool = False
    higher_is_better: bool = True
    full_state_update: bool = False
    plot_lower_bound: float = 0.0
    _aligned_row_stores = (("preds", "target", "indexes"),)
    plot_upper_bound: float = 1.0
    #: A subclass's own ``_metric`` takes graded relevance (torchmetrics' name; declared metrics: their
    #: declaration decides).
    allow_non_binary_target: bool = False
    _own_metric: bool

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
        options = type(self).options()
        own = self._own_metric = self._defines_metric()
        if self._table() is None and not own:
            raise TypeError(
                f"{type(self).__name__} is a base class: give a subclass of it `_metric(self, preds, "
                "target)`, the value of one query (as torchmetrics' RetrievalMetric), or use a metric of "
                "embedmetrics.retrieval."
            )
        if own and self._table() is None and (isinstance(k, str) or callable(k)) and aggregation == "mean":
            k, aggregation = None, k  # torchmetrics' base: (empty_target_action, ignore_index, aggregation)
        given = {o.name: kwargs.pop(o.name) for o in options if o.name in kwargs}
        given.update(empty_target_action=empty_target_action, ignore_index=ignore_index)
        given.update(aggregation=aggregation, validate_args=validate_args)
        if ties != "average" or any(o.name == "ties" for o in options):
            given["ties"] = ties
        if k is not None or any(o.name == "k" for o in options):
            given["k"] = k
        super().__init__(**kwargs)
        settings = self._read_settings(given, top_k)
        # one value per query from an own `_metric` (it reads `top_k` itself)
        self._ks, self._single = ((None,), True) if own else self._cutoffs(settings)
        self._options = settings.options
        if "k" in settings.values:
            self.top_k = settings.values["k"]
        if "ties" not in settings.values:
            self.ties = "average"
        name = f"{type(self).__module__}.{type(self).__qualname__}" if own else self.declaration.name
        # 2-D input stores per-query values at these settings: never share a compute group across them
        self.apply_options(settings.values, record={"metric": name, "k": self._ks})
        self.add_row_store("preds", "target", "indexes", "row_values", "row_status")

    @classmethod
    def options(cls) -> tuple[Option, ...]:
        """The option table of the class: of the nearest registered class, else the base's settings
        (``OWN_METRIC_OPTIONS``)."""
        table = cls._table()
        return OWN_METRIC_OPTIONS if table is None else OPTIONS[table]

    @classmethod
    def _defines_metric(cls) -> bool:
        """Whether the class computes its own ``_metric`` (torchmetrics' API) instead of a declaration."""
        return cls._metric is not RetrievalMetric._metric

    def _read_settings(self, given: dict[str, Any], top_k: int | Sequence[int] | None) -> RetrievalSettings:
        """The checked settings: of the registered table, else the base's (no cut-off, no ties)."""
        owner, table = type(self).__name__, self._table()
        if table is not None:
            return read_settings(owner, table, given, top_k)
        reasons = dict.fromkeys(("k", "top_k", "ties"), _OWN_METRIC_REASON)
        alias = {} if top_k is None else {"top_k": top_k}
        refuse_other_settings(owner, OWN_METRIC_OPTIONS, {**given, **alias}, reasons)
        return RetrievalSettings(read_options(owner, OWN_METRIC_OPTIONS, given), (None,), True)

    def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
        """The value of one query, for a subclass of your own (torchmetrics' API; see the class docstring).

        Args:
            preds: the query's scores (1-D).
            target: the query's relevance (1-D), with at least one relevant document.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no `_metric`.")

    def _batch_context(self) -> dict[str, Any]:
        if self._own_metric:
            binary, unjudged = not self.allow_non_binary_target, False
        else:
            binary, unjudged = self.declaration.binary, self.declaration.unjudged
        metric = type(self).__name__ if self._own_metric else self.declaration.name
        return {"metric": metric, "binary": binary, "unjudged": unjudged, "ignore_index": self.ignore_index}

    @classmethod
    def _table(cls) -> str | None:
        """The registry name whose option table this class reads (the nearest registered class), or
        ``None`` (the base, or a subclass of your own of it)."""
        return next((c.__name__ for c in cls.__mro__ if c.__name__ in OPTIONS), None)

    def _values(
        self, preds: Tensor, target: Tensor, indexes: Tensor | None, ks: tuple[int | None, ...]
    ) -> tuple[Tensor, Tensor]:
        """Per-query values and status: by the declaration's closed form, or the class's own ``_metric``."""
        if self._own_metric:
            return own_query_values(self._metric, preds, target, indexes, self.ignore_index)
        return query_values(
            self.declaration,
            preds,
            target,
            indexes,
            ks=ks,
            ties=self.ties,
            ignore_index=self.ignore_index,
            options=self._options,
        )

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
            values, status = self._values(preds, target, None, self._ks)
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
            needs="relevant" if self._own_metric else self.declaration.needs,
        )

    def _query_values(self, ks: tuple[int | None, ...]) -> tuple[Tensor, Tensor, torch.dtype]:
        """Per-query values (float64) and status of every stored query, and the result dtype."""
        values: list[Tensor] = []
        status: list[Tensor] = []
        dtype = torch.float32
        width = len(ks) * (1 if self._own_metric else self.declaration.values_per_cutoff)
        row_values, row_status = self.stored_rows("row_values"), self.stored_rows("row_status")
        if row_values is not None and row_status is not None:
            values.append(row_values.reshape(-1, width))
            status.append(row_status.reshape(-1))
            dtype = row_values.dtype
        preds, target, indexes = (self.stored_rows(n) for n in ("preds", "target", "indexes"))
        if preds is not None and target is not None and indexes is not None:
            v, s = self._values(preds, target, indexes, ks)
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
