"""The metric calls of the report: every number it prints comes from the public API here.

One function per input family. Each returns an ordered ``{key: value}`` dict (the JSON keys) and
whatever the plots need; the retrieval family calls each functional once, with all cut-offs at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.ranking.measures import query_rows
from embedmetrics._io.trec import TrecTensors

#: The AccuracyCalculator's default metrics, in the order the report lists them.
DEFAULT_EMBEDDING_KEYS = ("precision_at_1", "r_precision", "mean_average_precision_at_r", "NMI", "AMI")

#: The number of nearest references whose weighted vote gives the report's kNN accuracy.
KNN_VOTE_K = 20


def clip_default_ks(ks: Sequence[int], limit: int) -> list[int]:
    """The default cut-offs clipped to ``limit`` (every ``k`` above it becomes ``limit``), for data too
    small for them; ``ks`` unchanged when ``limit < 1`` (the family's own check then says why).

    Example:
        >>> clip_default_ks([1, 5, 10], 9)
        [1, 5, 9]
        >>> clip_default_ks([1, 5, 10], 3)
        [1, 3]
    """
    return list(ks) if limit < 1 else sorted({min(k, limit) for k in ks})


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


def _query_rows(data: TrecTensors) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """``preds``, ``target`` and the common arguments of the seven functionals: one row per query
    (2-D input, grouped once here instead of once per call) where the query sizes allow
    (``query_rows``), the flat rows with ``indexes`` otherwise.
    Padding cells are ``retrieved=False`` with gain 0, which count nowhere (not ranked, not relevant)."""
    layout = query_rows(data.indexes)
    if layout is None:
        return data.preds, data.target, {"indexes": data.indexes, "retrieved": data.retrieved}
    items, padding = layout
    preds, target, retrieved = (x[items] for x in (data.preds, data.target, data.retrieved))
    if padding is not None:
        target, retrieved = target.masked_fill(padding, 0), retrieved & ~padding
    return preds, target, {"retrieved": retrieved}


def measure_ties(ties: str) -> str:
    """The tie policy the TREC measures rank with: ``trec_eval``'s order (``join_run``) leaves no tied
    scores, so every policy gives the same values, and the optimistic one ranks without searching for
    tie blocks."""
    return "optimistic" if ties == "trec_eval" else ties


#: The TREC measures: report name -> (retrieval metric, whether it takes the cut-offs).
TREC_MEASURES = {
    "hit_rate": ("hit_rate", True), "mrr": ("reciprocal_rank", False), "ndcg": ("normalized_dcg", True),
    "map": ("average_precision", False), "precision": ("precision", True), "recall": ("recall", True),
    "r_precision": ("r_precision", False),
}  # fmt: skip


def _trec_values(data: TrecTensors, ks: Sequence[int], ties: str, aggregation: str) -> dict[str, Tensor]:
    """measure -> its values (``aggregation="mean"``: one per cut-off; ``"none"``: ``(Q, cut-offs)``),
    every measure read off one ranking of the queries (``shared_query_values``) and finished as the
    retrieval functionals finish theirs (an empty query scores 0, as in trec_eval). The values were
    checked when the files were read (finite scores, integer grades clipped at 0): no check per measure."""
    from embedmetrics._engine.ranking.retrieval import finish, out_dtype, shared_query_values

    preds, target, rows = _query_rows(data)
    cut = tuple(ks)
    requests = [(metric, cut if cutoffs else (None,)) for metric, cutoffs in TREC_MEASURES.values()]
    shared = shared_query_values(
        requests, preds, target, rows.get("indexes"), ties=ties, retrieved=rows["retrieved"]
    )
    return {
        name: finish(
            *shared[metric], empty_target_action="neg", aggregation=aggregation, single=False,
            dtype=out_dtype(preds),
        )
        for name, (metric, _) in TREC_MEASURES.items()
    }  # fmt: skip


def _keyed(values: dict[str, Tensor], ks: Sequence[int], wanted: Sequence[int]) -> dict[str, Tensor]:
    """``name@k`` for every measure with cut-offs (its columns follow ``ks``; ``k`` of ``wanted``), and
    ``name`` for the others (one column)."""
    at = {k: j for j, k in enumerate(ks)}
    out: dict[str, Tensor] = {}
    for name, v in values.items():
        if TREC_MEASURES[name][1]:
            out.update({f"{name}@{k}": v[..., at[k]] for k in wanted})
        else:
            out[name] = v[..., 0]
    return out


def evaluate_trec(data: TrecTensors, ks: Sequence[int], ties: str, curve_k: int = 0) -> TrecResult:
    """hit_rate@k, mrr, ndcg@k, map, precision@k, recall@k, r_precision as trec_eval defines them;
    with ``curve_k``, hit rate and recall also at ``1..curve_k`` for the plot."""
    curve_ks = list(range(1, curve_k + 1))
    wide = sorted(set(ks) | set(curve_ks))
    values = _trec_values(data, wide, ties, "mean")
    out = {key: float(v) for key, v in _keyed(values, wide, ks).items()}
    hit, recall = _floats(values["hit_rate"]), _floats(values["recall"])
    at = {k: j for j, k in enumerate(wide)}
    return TrecResult(out, curve_ks, [hit[at[k]] for k in curve_ks], [recall[at[k]] for k in curve_ks])


def per_query_trec(data: TrecTensors, ks: Sequence[int], ties: str) -> dict[str, Tensor]:
    """measure -> ``(Q,)`` per-query values of the measures of ``evaluate_trec``, in the order of
    ``data.query_ids`` (ascending index: the order of the rows of ``_query_rows`` and of flat input)."""
    return _keyed(_trec_values(data, ks, ties, "none"), ks, ks)


def evaluate_views(z1: Tensor, z2: Tensor, ks: Sequence[int]) -> dict[str, float]:
    """contrastive_accuracy@k (both directions averaged), uniformity (mean of the two views'), alignment."""
    from embedmetrics.functional import alignment_score, contrastive_accuracy_score, uniformity_score

    klist = tuple(ks)
    acc = _floats(contrastive_accuracy_score(z1, z2, topk=klist))
    out = {f"contrastive_accuracy@{k}": v for k, v in zip(klist, acc)}
    out["uniformity"] = (_floats(uniformity_score(z1))[0] + _floats(uniformity_score(z2))[0]) / 2
    out["alignment"] = _floats(alignment_score(z1, z2))[0]
    return out


def alpha_fit_range(n_features: int) -> tuple[int, int]:
    """The α-ReQ ranks the report fits: the authors' 6 to 100, or every rank when ``d <= 6``."""
    return (6, 100) if n_features > 6 else (1, max(n_features, 2))


def knn_vote_k(n_available: int) -> int:
    """The vote's k: ``KNN_VOTE_K``, clipped to the ``n_available`` references each query has (a vote of
    20 over 9 references is a vote of 9: the rows name the k it takes).

    Example:
        >>> knn_vote_k(9), knn_vote_k(1796)
        (9, 20)
    """
    return max(1, min(KNN_VOTE_K, n_available))


def knn_vote_tops(n_classes: int) -> tuple[int, ...]:
    """The class ranks the report's kNN accuracy counts: top 1, and top 5 only with more than 5 classes
    (with at most 5 the true class is always among the top 5: 1.0 by construction).

    Example:
        >>> knn_vote_tops(10), knn_vote_tops(2)
        ((1, 5), (1,))
    """
    return (1, 5) if n_classes > 5 else (1,)


def representation_health(
    query: Tensor,
    query_labels: Tensor,
    reference: Tensor,
    reference_labels: Tensor,
    same_source: bool,
    n_classes: int,
) -> dict[str, float]:
    """RankMe and α-ReQ (``alpha_fit_range``) of the query embeddings, and the weighted k-NN
    accuracy of the queries against the references (leave-one-out when they are the same rows): a vote
    of the ``knn_vote_k`` nearest (T=0.07) is right when the query's class gets the most votes
    (``_top1``) or, with more than 5 classes (``knn_vote_tops``), is among the 5 classes with the most
    (``_top5``); the keys name the vote's k, so that neither reads as a cut-off."""
    from embedmetrics._engine.neighbors.vote import knn_vote_hits
    from embedmetrics.functional import alpha_req, rankme

    k = knn_vote_k(reference.shape[0] - (1 if same_source else 0))
    tops = knn_vote_tops(n_classes)
    hits = knn_vote_hits(
        reference, reference_labels, query, query_labels, k=k, temperature=0.07, tops=tops,
        exclude_self=same_source,
    )  # fmt: skip
    acc = _floats(hits / query.shape[0])
    return {
        "rankme": _floats(rankme(query))[0],
        "alpha_req": _floats(alpha_req(query, fit_range=alpha_fit_range(query.shape[1])))[0],
        **{f"knn_accuracy_k{k}_top{top}": value for top, value in zip(tops, acc)},
    }


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
    """precision_at_1, r_precision, mean_average_precision_at_r, NMI, AMI, representation health
    (RankMe, α-ReQ, weighted k-NN accuracy), precision@k for every ``k > 1`` of ``ks`` (at ``k = 1``
    it is ``precision_at_1``, listed once), and precision_at_1 per class.

    Two scans keep memory bounded: the calculator's default metrics (``k`` = the largest class, no
    neighbour lists kept), then a ``k = max(ks)`` scan whose neighbour lists give precision@k
    (``embedmetrics.neighbors.precision_at_k``) and whose per-query precision_at_1 statistic gives the
    per-class bars.
    """
    from embedmetrics import AccuracyCalculator
    from embedmetrics._engine.neighbors.statistics import neighbor_statistics
    from embedmetrics.neighbors import precision_at_k

    base = AccuracyCalculator().get_accuracy(query, reference, query_labels, reference_labels, same_source)
    metrics = {key: float(base[key]) for key in DEFAULT_EMBEDDING_KEYS}
    metrics.update(
        representation_health(query, query_labels, reference, reference_labels, same_source, n_classes)
    )

    klist = list(ks)
    found = neighbor_statistics(
        query,
        reference,
        query_labels,
        reference_labels,
        self_index=torch.arange(query.shape[0]) if same_source else None,
        k=max(klist),
        stats=("precision_at_1",),
        return_neighbors=True,
    )
    mask = found.not_lone
    indices = found.result.indices
    for k in (k for k in klist if k > 1):  # precision@1 is precision_at_1 (tie-averaged): one row
        if not bool(mask.any()) or indices is None:
            metrics[f"precision@{k}"] = math.nan
            continue
        knn_labels = reference_labels[indices[mask]]
        value = precision_at_k(knn_labels, query_labels[mask][:, None], k)
        assert isinstance(value, float)  # not per class
        metrics[f"precision@{k}"] = value
    # the scan's tie-averaged per-query precision_at_1: the per-class means average to it exactly
    per_query = {
        "precision_at_1": found.result.stats["precision_at_1"][mask],
        "labels": query_labels[mask],
    }
    labels = per_query["labels"].reshape(-1).cpu()
    values = per_query["precision_at_1"].cpu().double()
    counts = torch.bincount(labels, minlength=n_classes).numpy()
    sums = torch.zeros(n_classes, dtype=torch.float64).index_add_(0, labels, values).numpy()
    per_class = np.divide(sums, counts, out=np.full(n_classes, np.nan), where=counts > 0)
    return EmbeddingResult(metrics, per_class, counts)


@dataclass
class DenseResult:
    """Numbers of the dense family, the curve of the plot, and the run (when asked)."""

    metrics: dict[str, float]
    n_judged: int
    query_ids: Tensor
    run: Any = None
    curve_ks: list[int] = field(default_factory=list)
    curve_hit_rate: list[float] = field(default_factory=list)
    curve_recall: list[float] = field(default_factory=list)


def dense_stream_queries(
    data: Any, ks: Sequence[int], *, depth: int, similarity: str, ties: str, curve_k: int, return_run: bool
) -> Any:
    """The fixed side of the corpus stream (``StreamQueries``): the queries, their qrels, and the options
    of [`dense_retrieval`][embedmetrics.functional.dense_retrieval] checked as it checks them, with every
    cut-off at once (and ``1..curve_k`` for the plot), per-query values; ``depth`` clipped to the corpus
    (the lists are allocated at once)."""
    from embedmetrics._engine.dense.measures import dense_options
    from embedmetrics._engine.dense.options import OPTIONS as DENSE_OPTIONS
    from embedmetrics._engine.dense.stream import StreamQueries
    from embedmetrics._engine.settings.options import read_options

    wide = sorted(set(ks) | set(range(1, curve_k + 1)))
    given: dict[str, Any] = {
        "qrels": data.qrels.qrels,
        "k": wide,
        "depth": max(
            min(depth, data.corpus.rows), *wide
        ),  # clipped to the corpus, as dense_retrieval clips it
        "similarity": similarity,
        "ties": "average" if ties == "trec_eval" else ties,
        "aggregation": "none",
        "return_run": return_run,
    }
    values = read_options("dense_retrieval", DENSE_OPTIONS["DenseRetrieval"], given)
    return StreamQueries.build(data.queries, data.query_ids, values["qrels"], dense_options(values))


def evaluate_dense_stream(fixed: Any, lists: Any, ks: Sequence[int], curve_k: int) -> DenseResult:
    """Every dense-retrieval measure of the running lists of the whole corpus (``stream_values``: the
    dict ``dense_retrieval`` returns on the corpus at once), the mean over the judged queries."""
    from embedmetrics._engine.dense.stream import stream_values

    out = stream_values(fixed, lists, fixed.queries.dtype)
    curve_ks = list(range(1, curve_k + 1))
    judged = ~torch.isnan(out["r_precision"])
    mean = {
        key: float(v[judged].mean()) if bool(judged.any()) else math.nan
        for key, v in out.items()
        if key not in ("run", "query_ids")
    }
    metrics = {
        key: v for key, v in mean.items() if not key.partition("@")[2] or int(key.partition("@")[2]) in ks
    }
    return DenseResult(
        metrics, int(judged.sum()), out["query_ids"], out.get("run"), curve_ks,
        [mean[f"hit_rate@{k}"] for k in curve_ks], [mean[f"recall@{k}"] for k in curve_ks],
    )  # fmt: skip
