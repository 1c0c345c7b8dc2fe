"""The decisions of ``AccuracyCalculator`` (``embedmetrics.neighbors``), which only names them.

- its settings (``seed_order``, ``chosen_metrics``, ``set_options``): the seed's positional
  order, the metrics it computes by default and those a call may still ask for, the option table;
- the metrics of one call (``select_metrics``) and the tensors of a ``get_accuracy`` call
  (``call_inputs``);
- the defaults of pytorch-metric-learning's protocol (``get_curr_metrics``, ``get_function_dict``,
  ``requires_knn``, ``requires_clustering``; ``call_metric_functions`` is its ``_get_accuracy``);
- the one compute path of ``get_accuracy`` and ``EmbeddingAccuracy`` (``evaluate``): what every
  ``calculate_<name>`` method receives (the kNN part in ``calculator_knn``), then one call each.

The functions take the calculator as ``self`` (those the class names are its methods): its
``requires_knn``, ``requires_clustering``, ``get_cluster_labels`` and ``calculate_<name>`` methods are
pytorch-metric-learning's subclassing protocol, so they are always called through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import (
    ArgumentKindError,
    as_float,
    as_tensor,
    check_finite,
    check_metric_names,
    check_neighbor_inputs,
    check_no_clustering_with_custom_labels,
    check_query_rows_first,
)
from embedmetrics._engine.core.knn import LabelComparison
from embedmetrics._engine.neighbors.accuracy_call import AccuracyCall
from embedmetrics._engine.neighbors.calculator_knn import knn_kwargs, listed_knn_kwargs
from embedmetrics._engine.neighbors.lists import EQUALITY
from embedmetrics._engine.neighbors.options import OPTIONS
from embedmetrics._engine.neighbors.statistics import KNN_STATS, finite, self_index_of
from embedmetrics._engine.settings.options import options_in, read_options

#: Metrics computed only when asked for by name (``include``) in the seed's (1.x) call form.
OPT_IN_METRICS = ("mean_average_precision", "mean_reciprocal_rank")
#: The built-in metrics that need ``cluster_labels``.
CLUSTERING_METRICS = ("NMI", "AMI")


class Calculator(Protocol):
    """What these functions read of an ``AccuracyCalculator`` (its options and its protocol)."""

    function_keyword: str
    original_metrics: list[str]
    _allowed: list[str]
    avg_of_avgs: bool
    return_per_class: bool
    k: int | str | None
    label_comparison_fn: LabelComparison | None
    distance: str
    ties: str
    kmeans_seed: int
    block_bytes: int | None
    validate_args: bool
    knn_func: Callable[..., tuple[Tensor, Tensor]] | None
    kmeans_func: Callable[[Tensor, int], Any] | None
    device: torch.device | None

    def get_curr_metrics(self) -> list[str]: ...
    def requires_clustering(self) -> list[str]: ...
    def requires_knn(self) -> list[str]: ...
    def get_cluster_labels(self, query: Tensor, query_labels: Tensor, **kwargs: Any) -> Tensor: ...


def seed_order(return_per_class: Any, k: Any, label_comparison_fn: Any) -> tuple[Any, Any, Any]:
    """``(return_per_class, k, label_comparison_fn)``: the seed's 1.x positional order had ``k`` in
    ``return_per_class``'s place and ``label_comparison_fn`` in ``k``'s; a non-bool is read that way."""
    if isinstance(return_per_class, bool):
        return return_per_class, k, label_comparison_fn
    if k is not None and not callable(k):
        raise ArgumentKindError(f"Argument `return_per_class` must be a bool, got {return_per_class!r}.")
    return False, return_per_class, k if callable(k) else label_comparison_fn


def available_metrics(self: Calculator) -> list[str]:
    """Every metric of the calculator: the names of its ``calculate_<name>`` methods."""
    key = self.function_keyword
    return [n[len(key) :] for n in dir(self) if n.startswith(key) and callable(getattr(self, n))]


def chosen_metrics(
    self: Calculator, include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The metrics computed by default, and those a call may still ask for: the chosen ones and the
    opt-in ones not ruled out (``include``; default: every metric not opt-in)."""
    all_metrics = available_metrics(self)
    check_metric_names("include", include, all_metrics)
    check_metric_names("exclude", exclude, all_metrics)
    chosen = list(include) if include else [m for m in all_metrics if m not in OPT_IN_METRICS]
    allowed = [m for m in (list(include) or all_metrics) if m not in exclude]  # exclude wins, as in PML
    return [m for m in chosen if m not in exclude], allowed


def set_options(self: Calculator, scope: Mapping[str, Any]) -> None:
    """Check the options the constructor was given (``scope``: its ``locals()``; ``include`` and
    ``exclude`` are read by ``chosen_metrics``) and set them; refuse clustering with a custom comparison."""
    table = OPTIONS["AccuracyCalculator"]
    given = options_in([o for o in table if o.name not in ("include", "exclude")], scope)
    values = read_options(type(self).__name__, table, given)
    if values["avg_of_avgs"] and values["return_per_class"]:
        raise ValueError(
            "Arguments `avg_of_avgs` and `return_per_class` are mutually exclusive; got both True."
        )
    for name, value in values.items():
        setattr(self, name, value)
    refuse_clustering_with_custom_labels(self, self.original_metrics)


def refuse_clustering_with_custom_labels(self: Calculator, metrics: Sequence[str]) -> None:
    """Clustering metrics compare cluster ids with labels by equality: not with a custom comparison."""
    clustering = [m for m in metrics if m in self.requires_clustering()]
    check_no_clustering_with_custom_labels(self.label_comparison_fn, clustering)


def select_metrics(
    self: Calculator, include: Sequence[str], exclude: Sequence[str], version: int
) -> list[str]:
    """The metrics of one call: ``include`` (default: the seed's defaults for the 1.x call form,
    every metric not excluded at construction for the 2.x form, as pytorch-metric-learning 2.x)."""
    check_metric_names("include", include, self._allowed)
    check_metric_names("exclude", exclude, self._allowed)
    chosen = list(include) if include else self.original_metrics if version == 1 else self._allowed
    return [m for m in chosen if m not in exclude]


def get_curr_metrics(self: Calculator) -> list[str]:
    """Names of the metrics ``get_accuracy`` computes by default."""
    return list(self.original_metrics)


def get_function_dict(
    self: Calculator, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> dict[str, Any]:
    """The ``calculate_<name>`` methods of the selected metrics, by name (pytorch-metric-learning 2.x)."""
    return {m: getattr(self, self.function_keyword + m) for m in select_metrics(self, include, exclude, 2)}


def call_metric_functions(self: Calculator, function_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Call each metric function with the shared keyword arguments (pytorch-metric-learning 2.x's
    ``_get_accuracy``)."""
    return {name: fn(**kwargs) for name, fn in function_dict.items()}


def requires_clustering(self: Calculator) -> list[str]:
    """Metrics that need ``cluster_labels`` (extend in a subclass)."""
    return list(CLUSTERING_METRICS)


def requires_knn(self: Calculator) -> list[str]:
    """Metrics that need the nearest neighbours (extend in a subclass)."""
    return list(KNN_STATS)


def call_inputs(self: Calculator, call: AccuracyCall) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """The arguments of ``evaluate`` for one ``get_accuracy`` call: its checked tensors (floating-point
    embeddings, on the calculator's device), then its metrics and each query row's own reference row."""
    metrics = select_metrics(self, call.include, call.exclude, call.version)
    names = ("query", "reference", "query_labels", "reference_labels")
    values = (call.query, call.reference, call.query_labels, call.reference_labels)
    q, r, ql, rl = (as_tensor(n, v).detach() for n, v in zip(names, values))
    q, r = as_float(q), as_float(r)
    if self.device is not None:
        q, r = q.to(self.device), r.to(self.device)
    check_neighbor_inputs(q, r, ql, rl)
    if self.validate_args:
        check_finite("query", q)
        check_finite("reference", r)
    ql, rl = ql.to(q.device), rl.to(q.device)
    self_index = None
    if call.same_source:
        identical = call.query is call.reference
        if call.version == 2:
            check_query_rows_first(q, r, ql, rl)
            identical = True
        self_index = self_index_of(q, r, ql, rl, identical)
    options = {
        "self_index": self_index,
        "metrics": metrics,
        "same_source": call.same_source,
        "version": call.version,
    }
    return (q, r, ql, rl), options


def evaluate(
    self: Calculator,
    query: Tensor,
    reference: Tensor,
    query_labels: Tensor,
    reference_labels: Tensor,
    *,
    self_index: Tensor | None = None,
    metrics: Sequence[str] | None = None,
    same_source: bool | None = None,
    shard: tuple[int, int] | None = None,
    version: int = 1,
) -> dict[str, Any]:
    """The calculator's metrics on validated tensors, with the query rows' own reference rows given.

    The one code path of ``get_accuracy`` and ``EmbeddingAccuracy``: ``self_index[i]`` is
    the reference row of query ``i`` (``-1``: none), never its own neighbour; ``metrics`` defaults to
    ``get_curr_metrics``; ``shard`` scans only this rank's share of the queries; ``version``
    is the call form (custom metrics get ``label_counts`` as a dict for 1.x, a pair for 2.x).
    """
    q, r, ql, rl = query, reference, query_labels, reference_labels
    metrics = self.get_curr_metrics() if metrics is None else list(metrics)
    same_source = self_index is not None if same_source is None else same_source
    refuse_clustering_with_custom_labels(self, metrics)
    kwargs: dict[str, Any] = {
        "query": q,
        "reference": r,
        "query_labels": ql,
        "reference_labels": rl,
        "embeddings_come_from_same_source": same_source,
        "ref_includes_query": same_source,
        "label_comparison_fn": self.label_comparison_fn or EQUALITY,
        # NaN or infinite embeddings have no neighbours: the built-in metrics are NaN then
        "embeddings_are_finite": finite(q, r),
    }
    if any(m in self.requires_knn() for m in metrics):
        if self.knn_func is not None:
            kwargs.update(listed_knn_kwargs(self, q, r, ql, rl, same_source, metrics, version))
        else:
            kwargs.update(knn_kwargs(self, q, r, ql, rl, self_index, metrics, shard, version))
    if any(m in self.requires_clustering() for m in metrics):
        kwargs["cluster_labels"] = self.get_cluster_labels(**kwargs)
    return {m: getattr(self, self.function_keyword + m)(**kwargs) for m in metrics}
