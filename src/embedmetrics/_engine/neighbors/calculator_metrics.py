"""The built-in metrics of ``AccuracyCalculator``: its ``calculate_<name>`` methods and
``get_cluster_labels``, written here as functions of the calculator (``self``) and named by the class.

A kNN metric is read off the exact scan's per-query statistics (``knn_stats``); without them (a
``knn_func``, or ``_get_accuracy`` called with ``knn_labels``) it is computed from the neighbour lists
by pytorch-metric-learning's list helpers. NMI and AMI score the clusters of the queries.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torchmetrics.functional.clustering import normalized_mutual_info_score

from embedmetrics._engine.core.checks import as_tensor
from embedmetrics._engine.core.knn import KnnResult
from embedmetrics._engine.neighbors import lists
from embedmetrics._engine.neighbors.clustering import adjusted_mutual_info, kmeans
from embedmetrics._engine.neighbors.statistics import KNN_STATS, unique_ids

if TYPE_CHECKING:
    from embedmetrics._engine.neighbors.calculator import Calculator


def get_cluster_labels(self: Calculator, query: Tensor, query_labels: Tensor, **kwargs: Any) -> Tensor:
    """Cluster id of each query: the user's ``kmeans_func`` or the built-in k-means (as many
    clusters as distinct query labels; torch, k-means++ initialisation, fixed seed ``kmeans_seed``)."""
    if not kwargs.get("embeddings_are_finite", True):  # no clustering of NaN: one cluster each
        return torch.arange(query.shape[0], device=query.device)
    n_clusters = int(unique_ids(query_labels).max().item()) + 1
    if self.kmeans_func is not None:
        return as_tensor("cluster_labels", self.kmeans_func(query, n_clusters)).to(query.device)
    return kmeans(query, n_clusters, seed=self.kmeans_seed, block_bytes=self.block_bytes)


def calculate_NMI(self: Calculator, query_labels: Tensor, cluster_labels: Tensor, **kwargs: Any) -> float:
    """Normalized mutual information (arithmetic mean) of the k-means clusters of the query embeddings
    (``get_cluster_labels``) and the query labels."""
    if not kwargs.get("embeddings_are_finite", True):
        return math.nan
    with warnings.catch_warnings():  # torch's note on sparse invariant checks, from torchmetrics
        warnings.simplefilter("ignore", UserWarning)
        return float(normalized_mutual_info_score(cluster_labels, unique_ids(query_labels)).item())


def calculate_AMI(self: Calculator, query_labels: Tensor, cluster_labels: Tensor, **kwargs: Any) -> float:
    """Adjusted mutual information of the k-means clusters and the query labels.

    Same value as ``torchmetrics.functional.clustering.adjusted_mutual_info_score`` (and
    scikit-learn's), computed by a vectorised implementation: torchmetrics' expected-mutual-
    information loop takes minutes at 20,000 points and 100 clusters.
    """
    if not kwargs.get("embeddings_are_finite", True):
        return math.nan
    return float(adjusted_mutual_info(cluster_labels, unique_ids(query_labels)).item())


def calculate_precision_at_1(self: Calculator, **kwargs: Any) -> Any:
    """Precision of the nearest neighbour: is it relevant?"""
    return knn_metric(self, "precision_at_1", kwargs)


def calculate_r_precision(self: Calculator, **kwargs: Any) -> Any:
    """R-precision: relevant items among the first ``R`` neighbours, divided by ``R`` (``R``: the query's
    number of relevant references, the query itself excluded; ``min(R, k)`` when ``k < R``)."""
    return knn_metric(self, "r_precision", kwargs)


def calculate_mean_average_precision_at_r(self: Calculator, **kwargs: Any) -> Any:
    """MAP@R of "A Metric Learning Reality Check" (section 3.2)."""
    return knn_metric(self, "mean_average_precision_at_r", kwargs)


def calculate_mean_average_precision(self: Calculator, **kwargs: Any) -> Any:
    """Mean average precision over the ``k`` neighbours, divided by ``R`` (on request: not a default)."""
    return knn_metric(self, "mean_average_precision", kwargs)


def calculate_mean_reciprocal_rank(self: Calculator, **kwargs: Any) -> Any:
    """Mean reciprocal rank: 1 / rank of the first relevant neighbour within ``k``, 0 if none (on
    request: not a default)."""
    return knn_metric(self, "mean_reciprocal_rank", kwargs)


#: The built-in kNN metrics' methods, by metric name.
BUILTIN_KNN_METHODS = {
    "precision_at_1": calculate_precision_at_1,
    "r_precision": calculate_r_precision,
    "mean_average_precision_at_r": calculate_mean_average_precision_at_r,
    "mean_average_precision": calculate_mean_average_precision,
    "mean_reciprocal_rank": calculate_mean_reciprocal_rank,
}


def computed_from_statistics(self: Calculator, metric: str) -> bool:
    """Whether ``metric`` is a built-in kNN metric the calculator does not override (so the scan's
    per-query statistics give it, without neighbour lists)."""
    own = getattr(type(self), self.function_keyword + metric, None)
    return metric in KNN_STATS and own is BUILTIN_KNN_METHODS.get(metric)


def knn_metric(self: Calculator, name: str, kwargs: dict[str, Any]) -> Any:
    """A built-in kNN metric from the scan's statistics, or from neighbour lists when there are
    no statistics (a ``knn_func``, or ``_get_accuracy`` called with ``knn_labels``)."""
    ql, mask = kwargs["query_labels"], kwargs["not_lone_query_mask"]
    stats: KnnResult | None = kwargs.get("knn_stats")
    if stats is None:
        return listed_metric(self, name, kwargs)
    if not kwargs.get("embeddings_are_finite", True) or not bool(mask.any()):
        return lists.nan_accuracy(lists.get_unique_labels(ql), self.return_per_class)
    stat = KNN_STATS[name]
    if stat not in stats.stats:
        return math.nan
    return lists.maybe_get_avg_of_avgs(
        stats.stats[stat][mask], ql[mask], self.avg_of_avgs, self.return_per_class
    )


def listed_metric(self: Calculator, name: str, kwargs: dict[str, Any]) -> Any:
    """A built-in kNN metric from the neighbour lists (``knn_labels``), as pytorch-metric-learning."""
    counts = kwargs["label_counts"]
    if isinstance(counts, dict):  # the 1.x form: {label: count}
        counts = (list(counts.keys()), list(counts.values()))
    knn_labels, ql = lists.try_getting_not_lone_labels(
        kwargs["knn_labels"], kwargs["query_labels"], kwargs["not_lone_query_mask"]
    )
    if knn_labels is None or ql is None:
        return lists.nan_accuracy(counts[0], self.return_per_class)
    fn = self.label_comparison_fn or lists.EQUALITY
    rpc, avg = self.return_per_class, self.avg_of_avgs
    same = bool(kwargs.get("ref_includes_query", False))
    q = ql[:, None]
    if name == "precision_at_1":
        return lists.precision_at_k(knn_labels, q, 1, avg, rpc, fn)
    if name == "r_precision":
        return lists.r_precision(knn_labels, q, same, counts, avg, rpc, fn)
    if name == "mean_reciprocal_rank":
        return lists.mean_reciprocal_rank(knn_labels, q, avg, rpc, fn)
    at_r = name == "mean_average_precision_at_r"
    return lists.mean_average_precision(knn_labels, q, same, counts, avg, rpc, fn, at_r=at_r)
