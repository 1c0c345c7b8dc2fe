"""Brute-force NumPy references for the embedding family (full matrices, float64, small n)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def normalize_rows(z: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), eps)


def _direction_hits(sim: np.ndarray, k: int, ties: str) -> np.ndarray:
    """Hit@k of each row of ``sim`` whose positive is the diagonal entry."""
    n = sim.shape[0]
    k = min(k, n)
    pos = np.diag(sim)[:, None]
    g = (sim > pos).sum(1)
    t = (sim == pos).sum(1)
    if ties == "average":
        return np.clip((k - g) / t, 0.0, 1.0)
    if ties == "pessimistic":
        return (g + t <= k).astype(np.float64)
    return (g < k).astype(np.float64)


def contrastive_accuracy(
    z1: np.ndarray, z2: np.ndarray, normalize: bool = True, k: int = 1, ties: str = "average"
) -> float:
    a = normalize_rows(z1) if normalize else np.asarray(z1, np.float64)
    b = normalize_rows(z2) if normalize else np.asarray(z2, np.float64)
    sim = a @ b.T
    return float((_direction_hits(sim, k, ties).mean() + _direction_hits(sim.T, k, ties).mean()) / 2)


def contrastive_accuracy_topk(z1: np.ndarray, z2: np.ndarray, k: int = 1) -> float:
    """The seed's definition through a full sort (valid without ties): is i among the top k?"""
    sim = normalize_rows(z1) @ normalize_rows(z2).T
    n = sim.shape[0]
    k = min(k, n)
    idx = np.arange(n)[:, None]
    rows = (np.argsort(-sim, axis=1, kind="stable")[:, :k] == idx).any(1).mean()
    cols = (np.argsort(-sim.T, axis=1, kind="stable")[:, :k] == idx).any(1).mean()
    return float((rows + cols) / 2)


def expected_hit_over_tie_orders(scores: np.ndarray, positive: int, k: int) -> float:
    """Average of hit@k over every ordering of the candidates consistent with the scores."""
    n = len(scores)
    total, count = 0.0, 0
    for perm in itertools.permutations(range(n)):
        if all(scores[perm[i]] >= scores[perm[i + 1]] for i in range(n - 1)):
            total += float(perm.index(positive) < k)
            count += 1
    return total / count


def contrastive_accuracy_by_orders(z1: np.ndarray, z2: np.ndarray, k: int) -> float:
    """'average' ties from first principles (enumerating tie orders); unnormalised dot products."""
    sim = np.asarray(z1, np.float64) @ np.asarray(z2, np.float64).T
    n = sim.shape[0]
    rows = [expected_hit_over_tie_orders(sim[i], i, k) for i in range(n)]
    cols = [expected_hit_over_tie_orders(sim[:, j], j, k) for j in range(n)]
    return float((np.mean(rows) + np.mean(cols)) / 2)


def uniformity(z: np.ndarray, normalize: bool = True, t: float = 2.0) -> float:
    """log mean_{i != j} exp(-t ||z_i - z_j||^2) from explicit differences, stable log-mean-exp."""
    x = normalize_rows(z) if normalize else np.asarray(z, np.float64)
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    a = -t * d2[~np.eye(len(x), dtype=bool)]
    m = a.max()
    return float(m + np.log(np.mean(np.exp(a - m))))


def uniformity_naive(z: np.ndarray, normalize: bool = True, t: float = 2.0) -> float:
    x = normalize_rows(z) if normalize else np.asarray(z, np.float64)
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    with np.errstate(divide="ignore"):
        return float(np.log(np.mean(np.exp(-t * d2[~np.eye(len(x), dtype=bool)]))))


def alignment(z1: np.ndarray, z2: np.ndarray, normalize: bool = True, alpha: float = 2.0) -> float:
    a = normalize_rows(z1) if normalize else np.asarray(z1, np.float64)
    b = normalize_rows(z2) if normalize else np.asarray(z2, np.float64)
    return float(np.mean(np.linalg.norm(a - b, axis=1) ** alpha))


def ks_list(topk: int | Sequence[int]) -> list[int]:
    return [topk] if isinstance(topk, int) else list(topk)


def contrastive_accuracy_from_similarity(sim: np.ndarray, k: int, ties: str = "average") -> float:
    """Both directions of contrastive accuracy from a full similarity matrix (positives on the diagonal)."""
    return float((_direction_hits(sim, k, ties).mean() + _direction_hits(sim.T, k, ties).mean()) / 2)


def expanded_similarity(base: np.ndarray, groups: np.ndarray, normalize: bool = True) -> np.ndarray:
    """``S[i, j] = base[groups[i]] . base[groups[j]]``: each distinct pair computed once, then expanded,
    so identical rows have identical similarities by construction."""
    b = normalize_rows(base) if normalize else np.asarray(base, np.float64)
    return (b @ b.T)[np.ix_(groups, groups)]
