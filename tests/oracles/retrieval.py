"""Independent brute-force references for the retrieval tests (plain Python over one ranked list)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

METRICS = (
    "hit_rate",
    "reciprocal_rank",
    "precision",
    "recall",
    "r_precision",
    "average_precision",
    "normalized_dcg",
)


def plain(
    name: str,
    gains: Sequence[float],
    k: int | None,
    *,
    total_relevant: int | None = None,
    ideal_gains: Sequence[float] | None = None,
    adaptive_k: bool = False,
) -> float:
    """The textbook metric of one query whose ranked documents have ``gains`` (no ties)."""
    n = len(gains)
    rel = [g > 0 for g in gains]
    R = sum(rel) if total_relevant is None else total_relevant
    if R == 0:
        return 0.0
    kk = n if k is None else k
    top = rel[:kk]
    if name == "hit_rate":
        return float(any(top))
    if name == "reciprocal_rank":
        for i, r in enumerate(top):
            if r:
                return 1.0 / (i + 1)
        return 0.0
    if name == "precision":
        den = n if k is None else (min(k, n) if adaptive_k else k)
        return sum(top) / den if den else 0.0
    if name == "recall":
        return sum(top) / R
    if name == "r_precision":
        return sum(rel[:R]) / R
    if name == "average_precision":
        hits, total = 0, 0.0
        for i, r in enumerate(top):
            if r:
                hits += 1
                total += hits / (i + 1)
        return total / R
    if name == "normalized_dcg":
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:kk]))
        ideal = sorted(gains if ideal_gains is None else ideal_gains, reverse=True)
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:kk]))
        return dcg / idcg if idcg > 0 else 0.0
    raise KeyError(name)


def tie_orders(scores: Sequence[float]) -> list[list[int]]:
    """Every order of the documents that ranks scores non-increasingly (all permutations of ties)."""
    out = []
    for perm in itertools.permutations(range(len(scores))):
        if all(scores[perm[i]] >= scores[perm[i + 1]] for i in range(len(perm) - 1)):
            out.append(list(perm))
    return out


def brute_force(
    name: str,
    scores: Sequence[float],
    gains: Sequence[float],
    k: int | None,
    ties: str,
    adaptive_k: bool = False,
) -> float:
    """The metric under a tie policy: average over all tie orders, or the worst/best tie-break."""
    if ties == "average":
        orders = tie_orders(scores)
        return sum(plain(name, [gains[i] for i in o], k, adaptive_k=adaptive_k) for o in orders) / len(orders)
    sign = 1 if ties == "pessimistic" else -1
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * gains[i]))
    return plain(name, [gains[i] for i in order], k, adaptive_k=adaptive_k)


def block_arrangements(scores: Sequence[float], labels: Sequence[int]) -> list[list[int]]:
    """Every distinct ranked list of ``labels`` that orders ``scores`` non-increasingly: the multiset
    permutations of the labels of each tie block. Under a uniformly random order of the tied documents
    each is equally likely (every one comes from the same number of document orders)."""
    blocks: dict[float, list[int]] = {}
    for score, label in zip(scores, labels):
        blocks.setdefault(score, []).append(label)
    per_block = [_distinct_orders(blocks[s]) for s in sorted(blocks, reverse=True)]
    return [[label for block in combo for label in block] for combo in itertools.product(*per_block)]


def _distinct_orders(labels: Sequence[int]) -> list[tuple[int, ...]]:
    """The distinct orders of a multiset of labels, in lexicographic order: the places of the smallest
    label chosen first (``itertools.combinations``), then the rest's orders in the places left."""
    if not labels:
        return [()]
    smallest = min(labels)
    rest = sorted(label for label in labels if label != smallest)
    out = []
    for places in itertools.combinations(range(len(labels)), len(labels) - len(rest)):
        for tail in _distinct_orders(rest):
            filled, others = [], iter(tail)
            for i in range(len(labels)):
                filled.append(smallest if i in places else next(others))
            out.append(tuple(filled))
    return sorted(out)


def plain_iprec(ranked: Sequence[int], level: float, num_rel: int) -> float:
    """trec_eval 9's ``iprec_at_recall`` of one ranked list of judgements (``> 0``: relevant): the best
    precision at or after the ``⌊level·R + 0.9⌋``-th relevant document (at least the first)."""
    count = max(int(level * num_rel + 0.9), 1)
    precisions, found = [], 0
    for rank, judgement in enumerate(ranked, 1):
        if judgement > 0:
            found += 1
            precisions.append(found / rank)
    return max(precisions[count - 1 :]) if count <= found else 0.0


def plain_infap(ranked: Sequence[int], num_rel: int) -> float:
    """trec_eval 9's m_infAP.c loop over one ranked list of judgements (1 relevant, 0 judged non-relevant,
    -1 not in the qrels, -2 in the pool and not judged)."""
    eps, total, rel, nonrel, unjudged = 1e-5, 0.0, 0, 0, 0
    for j, judgement in enumerate(ranked):
        if judgement > 0:
            if j == 0:
                total += 1.0
            else:
                seen = (rel + nonrel + unjudged) / j
                total += 1.0 / (j + 1) + (j / (j + 1)) * seen * (rel + eps) / (rel + nonrel + 2 * eps)
            rel += 1
        elif judgement == 0:
            nonrel += 1
        elif judgement == -2:
            unjudged += 1
    return total / num_rel if num_rel else 0.0
