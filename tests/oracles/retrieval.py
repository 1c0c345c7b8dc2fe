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
