"""What ``AccuracyCalculator``'s kNN metrics receive: from the exact scan (``knn_kwargs``: per-query
statistics, and neighbour lists only when a custom or overridden metric needs them), or from the
user's ``knn_func`` (``listed_knn_kwargs``); the ``k`` of each, its log line, and ``label_counts`` in
the form of the call (a dict for the seed's 1.x form, ``(labels, counts)`` for 2.x).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from embedmetrics._engine.neighbors.calculator_metrics import computed_from_statistics
from embedmetrics._engine.neighbors.lists import (
    EQUALITY,
    get_label_match_counts,
    get_lone_query_labels,
    get_unique_labels,
)
from embedmetrics._engine.neighbors.statistics import KNN_STATS, neighbor_statistics, scan_k

if TYPE_CHECKING:
    from embedmetrics._engine.neighbors.calculator import Calculator

LOGGER = logging.getLogger("embedmetrics")


def needs_neighbor_lists(self: Calculator, metrics: Sequence[str]) -> bool:
    """Whether a kNN metric of ``metrics`` reads the neighbour lists (a custom or overridden one)."""
    return any(m in self.requires_knn() and not computed_from_statistics(self, m) for m in metrics)


def knn_kwargs(
    self: Calculator,
    q: Tensor,
    r: Tensor,
    ql: Tensor,
    rl: Tensor,
    self_index: Tensor | None,
    metrics: Sequence[str],
    shard: tuple[int, int] | None,
    version: int,
) -> dict[str, Any]:
    """The exact scan's per-query statistics (``knn_stats``) and what the list-based metrics need."""
    found = neighbor_statistics(
        q,
        r,
        ql,
        rl,
        self_index=self_index,
        k=scan_k(self.k, metrics, r.shape[0]),
        stats=tuple(KNN_STATS[m] for m in metrics if m in KNN_STATS),
        distance=self.distance,
        ties=self.ties,
        label_comparison_fn=self.label_comparison_fn,
        return_neighbors=needs_neighbor_lists(self, metrics),
        block_bytes=self.block_bytes,
        shard=shard,
    )
    result, not_lone = found.result, found.not_lone
    log_k(self.k, metrics, found.counts)
    return {
        "label_counts": label_counts(self, rl, found.unique_query_labels, found.matches, version),
        "knn_labels": rl[result.indices] if result.indices is not None else None,
        "knn_distances": result.distances,
        "lone_query_labels": get_unique_labels(ql[~not_lone]),
        "not_lone_query_mask": not_lone,
        "knn_stats": result,
    }


def log_k(k: int | str | None, metrics: Sequence[str], counts: Tensor) -> None:
    """Log the scan (INFO), and warn when an integer ``k`` cuts R-precision or MAP@R short."""
    most = int(counts.max().item()) if counts.numel() else 0
    LOGGER.info("exact kNN scan: %d queries, k=%s (largest relevant count %d)", counts.numel(), k, most)
    cut = [m for m in ("r_precision", "mean_average_precision_at_r") if m in metrics]
    if isinstance(k, int) and k < most and cut:
        LOGGER.warning(
            "k=%d is less than the largest relevant count %d, so %s are computed on the first k "
            "neighbours only; use k='max_bin_count' (or None) for the exact values, or "
            "'mean_average_precision' for MAP@k.",
            k,
            most,
            cut,
        )


def listed_knn_kwargs(
    self: Calculator,
    q: Tensor,
    r: Tensor,
    ql: Tensor,
    rl: Tensor,
    same_source: bool,
    metrics: Sequence[str],
    version: int,
) -> dict[str, Any]:
    """Neighbour lists from the user's ``knn_func``, and what the list-based metrics need."""
    comparison = self.label_comparison_fn or EQUALITY
    counts = get_label_match_counts(ql, rl, comparison)
    lone, not_lone = get_lone_query_labels(ql, counts, same_source, comparison)
    most = int(counts[1].max().item()) if counts[1].numel() else 1
    k = scan_k(self.k, metrics, r.shape[0] - int(same_source)) or max(most - int(same_source), 1)
    # PML 2.x hands its kNN functions float32 embeddings (FaissKNN, CustomKNN expect them)
    distances, indices = self.knn_func(q.float(), k, r.float(), same_source)  # type: ignore[misc]
    return {
        "label_counts": counts if version == 2 else label_counts(self, rl, counts[0], counts[1], 1),
        "knn_labels": rl[indices.to(rl.device)],
        "knn_distances": distances,
        "lone_query_labels": lone,
        "not_lone_query_mask": not_lone,
    }


def label_counts(self: Calculator, rl: Tensor, uq: Tensor, matches: Tensor, version: int) -> Any:
    """What custom metrics get as ``label_counts``: a dict (1.x) or ``(labels, counts)`` (2.x)."""
    if version == 2:
        return uq, matches
    if self.label_comparison_fn is None:
        if rl.ndim == 1:
            labels, cnt = torch.unique(rl, return_counts=True)
        else:
            labels, cnt = torch.unique(rl, dim=0, return_counts=True)
    else:
        labels, cnt = uq, matches
    keys = labels.tolist()
    return {(tuple(key) if isinstance(key, list) else key): int(c) for key, c in zip(keys, cnt.tolist())}
