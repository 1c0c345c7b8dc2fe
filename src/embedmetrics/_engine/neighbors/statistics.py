"""The kNN label metrics of metric learning (the engine behind ``embedmetrics.neighbors`` and
``embedmetrics.functional.neighbors``).

``neighbor_statistics`` is the one pipeline: the relevant references of every query (the query
itself excluded), ``k`` (the largest relevant count unless given; no 1023 cap), the exact blocked
scan (``knn_scan``) and the per-query statistics, combined across ranks
when the scan was sharded. ``average`` reduces per-query values (optionally per class first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import finite_values
from embedmetrics._engine.core.knn import KnnResult, LabelComparison, knn_scan, relevant_counts

#: The kNN metrics and the per-query statistic of the scan behind each.
KNN_STATS = {
    "precision_at_1": "precision_at_1",
    "r_precision": "r_precision",
    "mean_average_precision_at_r": "map_at_r",
    "mean_average_precision": "average_precision",
    "mean_reciprocal_rank": "reciprocal_rank",
}


#: Metrics over the whole ranking when ``k`` is ``None`` (pytorch-metric-learning 2.x); the others
#: need only the first ``R`` neighbours.
WHOLE_RANKING_METRICS = ("mean_average_precision", "mean_reciprocal_rank")


def scan_k(k: Optional[int | str], metrics: Sequence[str], n_references: int) -> Optional[int]:
    """Neighbours to list for ``metrics`` (``None``: the largest relevant count, see ``resolve_k``).

    An int as given; ``"max_bin_count"`` the largest relevant count; ``"all"`` every reference;
    ``None`` every reference when a whole-ranking metric is asked for, else the largest relevant count
    (where it gives the values of every reference).
    """
    if isinstance(k, int):
        return k
    if k == "all" or (k is None and any(m in WHOLE_RANKING_METRICS for m in metrics)):
        return max(n_references, 1)
    return None


def unique_ids(labels: Tensor) -> Tensor:
    """Dense ids of 1-D labels or of the rows of 2-D labels."""
    inverse: Tensor
    if labels.ndim == 1:
        inverse = torch.unique(labels, return_inverse=True)[1]
    else:
        inverse = torch.unique(labels, dim=0, return_inverse=True)[1]
    return inverse


def average(values: Tensor, labels: Tensor, avg_of_avgs: bool) -> float:
    """Mean of per-query ``values``, or the mean over classes of per-class means.

    The values are summed in ascending order, so the result does not depend on the order of the
    queries (a float sum does): any row permutation gives the same bits.
    """
    if values.numel() == 0:
        return math.nan
    if avg_of_avgs:
        return float(class_means(values, labels).mean().item())
    return float(values.sort().values.mean().item())


def class_means(values: Tensor, labels: Tensor) -> Tensor:
    """Mean of ``values`` per class, in ascending label order (summed in ascending order of value)."""
    order = values.argsort(stable=True)
    ids = unique_ids(labels)[order]
    n = int(ids.max().item()) + 1 if ids.numel() else 0
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, ids, values[order])
    return sums / torch.bincount(ids, minlength=n).to(values.dtype)


def self_index_of(q: Tensor, r: Tensor, ql: Tensor, rl: Tensor, identical: bool) -> Tensor:
    """Reference index of each query row (same-source case)."""
    n_q = q.shape[0]
    if n_q > r.shape[0]:
        raise ValueError(
            "Argument `embeddings_come_from_same_source` is True but `query` has more rows "
            f"({n_q}) than `reference` ({r.shape[0]})."
        )
    arange = torch.arange(n_q, device=q.device)
    if identical or (torch.equal(q, r[:n_q]) and torch.equal(ql, rl[:n_q])):
        return arange
    # Match each query row to an identical reference row with the same label.
    key = torch.cat([r, q]).to(torch.float64)
    lab = torch.cat([rl, ql]).to(torch.float64).reshape(key.shape[0], -1)
    _, inv = torch.unique(torch.cat([key, lab], dim=1), dim=0, return_inverse=True)
    n_r = r.shape[0]
    first = torch.full((int(inv.max().item()) + 1,), n_r, dtype=torch.int64, device=q.device)
    first.scatter_reduce_(0, inv[:n_r], torch.arange(n_r, device=q.device), reduce="amin")
    found = first[inv[n_r:]]
    missing = (found == n_r).nonzero().flatten()
    if missing.numel() > 0:
        raise ValueError(
            "Argument `embeddings_come_from_same_source` is True but query row "
            f"{int(missing[0])} is not a row of `reference` with the same label."
        )
    return found


@dataclass
class NeighborStatistics:
    """What the kNN metrics are computed from."""

    result: KnnResult  # per-query statistics (and neighbour lists when asked for)
    counts: Tensor  # (n_q,) relevant references of each query, itself excluded
    unique_query_labels: Tensor
    matches: Tensor  # relevant references of each distinct query label

    @property
    def not_lone(self) -> Tensor:
        """Queries with at least one relevant reference (the kNN metrics average over these)."""
        return self.counts > 0


def resolve_k(k: Optional[int], counts: Tensor, n_visible: int) -> int:
    """Neighbours to retrieve: ``k`` if given, else the largest relevant count; at most ``n_visible``."""
    if k is not None:
        return min(int(k), n_visible)
    most = int(counts.max().item()) if counts.numel() else 0
    return min(max(most, 1), n_visible)


def neighbor_statistics(
    q: Tensor,
    r: Tensor,
    ql: Tensor,
    rl: Tensor,
    *,
    self_index: Optional[Tensor],
    k: Optional[int],
    stats: Sequence[str],
    distance: str = "euclidean",
    ties: str = "average",
    label_comparison_fn: Optional[LabelComparison] = None,
    return_neighbors: bool = False,
    block_bytes: int | None = None,
    shard: Optional[tuple[int, int]] = None,
) -> NeighborStatistics:
    """Relevant counts, ``k``, the exact scan and its per-query ``stats`` (see ``KNN_STATS``)."""
    counts, uq, matches = relevant_counts(ql, rl, self_index, label_comparison_fn)
    n_visible = r.shape[0] - (1 if self_index is not None and bool((self_index >= 0).any()) else 0)
    kk = resolve_k(k, counts, n_visible)
    if kk >= 1:
        result = knn_scan(
            q,
            r,
            ql,
            rl,
            k=kk,
            counts=counts,
            self_index=self_index,
            distance=distance,
            ties=ties,
            label_comparison_fn=label_comparison_fn,
            return_neighbors=return_neighbors,
            stats=stats,
            block_bytes=block_bytes,
            shard=shard,
        ).all_reduce(shard)
    else:  # no reference a query could see: every query is lone
        z = torch.zeros(q.shape[0], 0, device=q.device)
        result = KnnResult({}, z.long(), z, 0)
    return NeighborStatistics(result, counts, uq, matches)


def finite(*tensors: Tensor) -> bool:
    """Whether every value is finite (NaN or infinite embeddings have no neighbours). Host sync."""
    return all(bool(finite_values(t)) for t in tensors)
