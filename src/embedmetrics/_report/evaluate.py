"""The metric calls of the report: every number it prints comes from the public API here.

One function per input family. Each returns an ordered ``{key: value}`` dict (the JSON keys) and
whatever the plots need; the retrieval family calls each functional once, with all cut-offs at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from embedmetrics._report.trec import TrecTensors

#: The AccuracyCalculator's default metrics, in the order the report lists them.
DEFAULT_EMBEDDING_KEYS = ("precision_at_1", "r_precision", "mean_average_precision_at_r", "NMI", "AMI")


@dataclass
class EmbeddingResult:
    """Numbers of the labelled-embeddings family, and the per-class precision_at_1 for its plot."""

    metrics: dict[str, float]
    per_class_precision_at_1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    per_class_count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _floats(values: Tensor | float | Sequence[float]) -> list[float]:
    if isinstance(values, Tensor):
        return [float(v) for v in values.reshape(-1).tolist()]
    if isinstance(values, (int, float)):
        return [float(values)]
    return [float(v) for v in values]


@dataclass
class TrecResult:
    """Numbers of the TREC family, and hit_rate@k / recall@k for every k of the curve plot."""

    metrics: dict[str, float]
    curve_ks: list[int] = field(default_factory=list)
    curve_hit_rate: list[float] = field(default_factory=list)
    curve_recall: list[float] = field(default_factory=list)


def evaluate_trec(data: TrecTensors, ks: Sequence[int], ties: str, curve_k: int = 0) -> TrecResult:
    """hit_rate@k, mrr, ndcg@k, map, precision@k, recall@k, r_precision as trec_eval defines them.

    Each functional is called once with every cut-off; with ``curve_k`` the hit-rate and recall
    calls also cover ``1..curve_k`` for the plot.
    """
    from embedmetrics.functional import (
        retrieval_average_precision,
        retrieval_hit_rate,
        retrieval_normalized_dcg,
        retrieval_precision,
        retrieval_r_precision,
        retrieval_recall,
        retrieval_reciprocal_rank,
    )

    binary = data.target > 0
    common: dict[str, Any] = {
        "indexes": data.indexes,
        "ties": ties,
        "empty_target_action": "neg",
        "retrieved": data.retrieved,
    }
    klist = list(ks)
    curve_ks = list(range(1, curve_k + 1))
    wide = sorted(set(klist) | set(curve_ks))
    hit = dict(zip(wide, _floats(retrieval_hit_rate(data.preds, binary, wide, **common))))
    recall = dict(zip(wide, _floats(retrieval_recall(data.preds, binary, wide, **common))))
    ndcg = _floats(retrieval_normalized_dcg(data.preds, data.target, klist, **common))
    precision = _floats(retrieval_precision(data.preds, binary, klist, **common))
    out: dict[str, float] = {f"hit_rate@{k}": hit[k] for k in klist}
    out["mrr"] = _floats(retrieval_reciprocal_rank(data.preds, binary, **common))[0]
    out.update({f"ndcg@{k}": v for k, v in zip(klist, ndcg)})
    out["map"] = _floats(retrieval_average_precision(data.preds, binary, **common))[0]
    out.update({f"precision@{k}": v for k, v in zip(klist, precision)})
    out.update({f"recall@{k}": recall[k] for k in klist})
    out["r_precision"] = _floats(retrieval_r_precision(data.preds, binary, **common))[0]
    return TrecResult(out, curve_ks, [hit[k] for k in curve_ks], [recall[k] for k in curve_ks])


def evaluate_views(z1: Tensor, z2: Tensor, ks: Sequence[int]) -> dict[str, float]:
    """contrastive_accuracy@k (both directions averaged), uniformity (mean of the two views'), alignment."""
    from embedmetrics.functional import alignment_score, contrastive_accuracy_score, uniformity_score

    klist = tuple(ks)
    acc = _floats(contrastive_accuracy_score(z1, z2, topk=klist))
    out = {f"contrastive_accuracy@{k}": v for k, v in zip(klist, acc)}
    out["uniformity"] = (_floats(uniformity_score(z1))[0] + _floats(uniformity_score(z2))[0]) / 2
    out["alignment"] = _floats(alignment_score(z1, z2))[0]
    return out


def evaluate_embeddings(
    query: Tensor,
    query_labels: Tensor,
    reference: Tensor,
    reference_labels: Tensor,
    *,
    same_source: bool,
    ks: Sequence[int],
    n_classes: int,
) -> EmbeddingResult:
    """precision_at_1, r_precision, mean_average_precision_at_r, NMI, AMI, precision@k, and
    precision_at_1 per class.

    Two scans keep memory bounded: the calculator's default metrics (``k`` = the largest class, no
    neighbour lists kept), then a ``k = max(ks)`` scan whose neighbour lists give precision@k (the
    seed's custom-metric recipe, :func:`embedmetrics.neighbors.precision_at_k`) and whose per-query
    precision_at_1 statistic gives the per-class bars.
    """
    from embedmetrics import AccuracyCalculator
    from embedmetrics.neighbors import precision_at_k

    base = AccuracyCalculator().get_accuracy(query, reference, query_labels, reference_labels, same_source)
    metrics = {key: float(base[key]) for key in DEFAULT_EMBEDDING_KEYS}

    klist = list(ks)
    names = [f"precision_at_{k}_of_report" for k in klist]
    per_query: dict[str, Tensor] = {}

    def _precision(k: int) -> Callable[..., float]:
        def calculate(
            self: object,
            knn_labels: Tensor,
            query_labels: Tensor,
            not_lone_query_mask: Tensor,
            **kwargs: object,
        ) -> float:
            mask = not_lone_query_mask
            if not bool(mask.any()):
                return math.nan
            return float(precision_at_k(knn_labels[mask], query_labels[mask][:, None], k))

        return calculate

    def _capture(
        self: object, query_labels: Tensor, not_lone_query_mask: Tensor, knn_stats: Any, **kwargs: object
    ) -> float:
        # knn_stats: the scan's per-query statistics, which embedmetrics' calculator passes to every
        # calculate_* method (tie-averaged, so the per-class means average to precision_at_1 exactly)
        per_query["precision_at_1"] = knn_stats.stats["precision_at_1"][not_lone_query_mask]
        per_query["labels"] = query_labels[not_lone_query_mask]
        return math.nan

    methods: dict[str, Any] = {f"calculate_{n}": _precision(k) for k, n in zip(klist, names)}
    methods["calculate_per_class_of_report"] = _capture
    extra = [*names, "per_class_of_report"]
    methods["requires_knn"] = lambda self: [*AccuracyCalculator.requires_knn(self), *extra]
    calculator_type = type("_ReportCalculator", (AccuracyCalculator,), methods)
    # precision_at_1 is included so that the scan computes its per-query statistic for _capture
    calculator = calculator_type(include=(*extra, "precision_at_1"), k=max(klist))
    raw = calculator.get_accuracy(query, reference, query_labels, reference_labels, same_source)
    metrics.update({f"precision@{k}": float(raw[n]) for k, n in zip(klist, names)})

    labels = per_query["labels"].reshape(-1).cpu()
    values = per_query["precision_at_1"].cpu().double()
    counts = torch.bincount(labels, minlength=n_classes).numpy()
    sums = torch.zeros(n_classes, dtype=torch.float64).index_add_(0, labels, values).numpy()
    per_class = np.divide(sums, counts, out=np.full(n_classes, np.nan), where=counts > 0)
    return EmbeddingResult(metrics, per_class, counts)
