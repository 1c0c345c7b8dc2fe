"""Brute-force reference of dense retrieval: the full NumPy similarity matrix, then trec_eval's measures.

Independent of the library: full matrix, a sort (or every order of tied documents), and the textbook
definitions of :func:`tests._retrieval_oracle.plain` with trec_eval's denominators (``R`` from the
qrels, the ideal DCG over every judged document of the query).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from oracles.retrieval import plain, tie_orders

#: dense key -> (oracle metric name)
NAMES = {
    "ndcg": "normalized_dcg",
    "recall": "recall",
    "precision": "precision",
    "mrr": "reciprocal_rank",
    "map": "average_precision",
    "hit_rate": "hit_rate",
    "r_precision": "r_precision",
}


def similarity(queries: np.ndarray, corpus: np.ndarray, kind: str) -> np.ndarray:
    """``(Q, N)`` float64 similarity: cosine, dot, or minus the Euclidean distance."""
    q, c = queries.astype(np.float64), corpus.astype(np.float64)
    if kind == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
        return q @ c.T
    if kind == "dot":
        return q @ c.T
    return -np.sqrt(((q[:, None, :] - c[None, :, :]) ** 2).sum(-1))


def _measure(key: str, gains: list[float], R: int, ideal: list[float], depth: int) -> float:
    name, _, cut = key.partition("@")
    k = int(cut) if cut else None
    if R == 0 and name != "ndcg":
        return 0.0
    top = gains[:depth]
    if name == "r_precision":
        return sum(g > 0 for g in top[:R]) / R
    if name == "ndcg":
        return plain("normalized_dcg", top, k, ideal_gains=ideal) if any(g > 0 for g in ideal) else 0.0
    return plain(NAMES[name], top + [0.0] * max(0, (k or 0) - len(top)), k, total_relevant=R)


def dense_reference(
    queries: np.ndarray,
    corpus: np.ndarray,
    qrels: Sequence[tuple[int, int, int]],
    keys: Sequence[str],
    *,
    depth: int,
    similarity_kind: str = "cosine",
    query_ids: Sequence[int] | None = None,
    corpus_ids: Sequence[int] | None = None,
    exclude_self: bool = False,
    ties: str = "none",
) -> dict[str, list[float]]:
    """Per query (ascending id) value of every key; NaN for queries without judgements.

    ``ties="none"``: data must be tie-free (one sort); ``"average"``: the mean over every order of
    tied documents (small corpora only); ``"pessimistic"`` / ``"optimistic"``: tied documents by
    increasing / decreasing gain.
    """
    qids = list(range(len(queries))) if query_ids is None else list(query_ids)
    dids = list(range(len(corpus))) if corpus_ids is None else list(corpus_ids)
    sim = similarity(queries, corpus, similarity_kind)
    judged: dict[int, dict[int, int]] = {}
    for q, d, rel in qrels:
        judged.setdefault(int(q), {})[int(d)] = int(rel)
    out: dict[str, list[float]] = {key: [] for key in keys}
    for row in np.argsort(np.asarray(qids), kind="stable"):
        qid = qids[row]
        if qid not in judged:
            for key in keys:
                out[key].append(math.nan)
            continue
        j = judged[qid]
        cols = [c for c in range(len(dids)) if not (exclude_self and dids[c] == qid)]
        scores = [float(sim[row, c]) for c in cols]
        gains = [float(max(j.get(dids[c], 0), 0)) for c in cols]
        R = sum(1 for v in j.values() if v >= 1)
        ideal = sorted((float(max(v, 0)) for v in j.values()), reverse=True)
        if ties == "none":
            orders = [sorted(range(len(cols)), key=lambda i: -scores[i])]
        elif ties in ("pessimistic", "optimistic"):
            sign = 1 if ties == "pessimistic" else -1
            orders = [sorted(range(len(cols)), key=lambda i: (-scores[i], sign * gains[i]))]
        else:
            orders = tie_orders(scores)
        for key in keys:
            vals = [_measure(key, [gains[i] for i in o], R, ideal, depth) for o in orders]
            out[key].append(sum(vals) / len(vals))
    return out
