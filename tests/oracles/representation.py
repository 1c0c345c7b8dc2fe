"""Brute-force NumPy references for representation health, written from the papers' formulas on the
full matrices (SVD, eigendecomposition, explicit loops): independent of the sufficient statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def smooth_rank(values: np.ndarray, eps: float) -> float:
    total = values.sum()
    if total <= 0:
        return 0.0
    p = values / total + eps
    return float(np.exp(-(p * np.log(p)).sum()))


def rankme(z: np.ndarray, center: bool = False, eps: float = 1e-7) -> float:
    z = np.asarray(z, np.float64)
    if center:
        z = z - z.mean(axis=0)
    return smooth_rank(np.linalg.svd(z, compute_uv=False), eps)


def alpha_req(z: np.ndarray, fit_range: tuple[int, int] = (6, 100)) -> float:
    z = np.asarray(z, np.float64)
    lam = np.sort(np.linalg.eigvalsh(np.cov(z, rowvar=False).reshape(z.shape[1], z.shape[1])))[::-1]
    lo, hi = fit_range
    ranks = np.arange(1, lam.size + 1)
    keep = (ranks >= lo) & (ranks <= min(hi, z.shape[0] - 1)) & (lam > lam[0] * lam.size * 2**-52)
    if keep.sum() < 2:
        return float("nan")
    x, y, w = np.log(ranks[keep]), np.log(lam[keep]), 1.0 / ranks[keep]
    design = np.stack([x, np.ones_like(x)], axis=1) * np.sqrt(w)[:, None]
    slope, _ = np.linalg.lstsq(design, y * np.sqrt(w), rcond=None)[0]
    return float(-slope)


def lidar(z: np.ndarray, labels: np.ndarray, delta: float = 1e-4, eps: float = 1e-8) -> float:
    z = np.asarray(z, np.float64)
    classes = np.unique(labels)
    if classes.size < 2 or z.shape[0] <= classes.size:
        return float("nan")
    means = np.stack([z[labels == c].mean(axis=0) for c in classes])
    mu = means.mean(axis=0)
    between = sum(np.outer(m - mu, m - mu) for m in means) / (classes.size - 1)
    within = sum(np.outer(r - means[i], r - means[i]) for i, c in enumerate(classes) for r in z[labels == c])
    within = within / (z.shape[0] - classes.size) + delta * np.eye(z.shape[1])
    w, v = np.linalg.eigh(within)
    root = v @ np.diag(w**-0.5) @ v.T
    lam = np.clip(np.linalg.eigvalsh(root @ between @ root), 0, None)
    return smooth_rank(lam, eps)


def linear_cka_hsic(x: np.ndarray, y: np.ndarray) -> float:
    """CKA in its HSIC form with linear kernels (Gram matrices of the samples)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = x.shape[0]
    h = np.eye(n) - 1.0 / n
    k, l_ = h @ x @ x.T @ h, h @ y @ y.T @ h
    hsic = lambda a, b: np.trace(a @ b)  # noqa: E731
    den = np.sqrt(hsic(k, k) * hsic(l_, l_))
    return float(hsic(k, l_) / den) if den > 0 else float("nan")


def knn_accuracy(
    bank: np.ndarray,
    bank_labels: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    k: int = 20,
    temperature: float = 0.07,
    tops: Sequence[int] = (1, 5),
    num_classes: int | None = None,
    ties: str = "average",
    exclude_self: bool = False,
) -> np.ndarray:
    """Full similarity rows; tied neighbours at the cut-off share the places; class ties by ``ties``."""

    def unit(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.float64)
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    sim = unit(queries) @ unit(bank).T
    classes = np.unique(np.concatenate([bank_labels, query_labels]))
    n_classes = num_classes or classes.size
    out = np.zeros(len(tops))
    for i in range(sim.shape[0]):
        row = sim[i].copy()
        if exclude_self:
            row[i] = -np.inf
        kk = min(k, row.size - int(exclude_self))
        v_k = np.sort(row)[::-1][kk - 1]
        weights = np.exp(row / temperature)
        above, tied = row > v_k, row == v_k
        share = (kk - above.sum()) / tied.sum()
        terms: list[list[float]] = [[] for _ in range(n_classes)]
        for j in np.nonzero(above | tied)[0]:
            c = np.searchsorted(classes, bank_labels[j])
            terms[c].append(weights[j] * (1.0 if above[j] else share))
        # correctly rounded sums: classes with the same neighbours' similarities get the same vote,
        # whatever order the bank holds them in (a plain running sum would let the order break the tie)
        votes = np.array([math.fsum(t) for t in terms])
        own = votes[np.searchsorted(classes, query_labels[i])]
        g, t = (votes > own).sum(), (votes == own).sum()
        for j, top in enumerate(tops):
            if ties == "average":
                out[j] += np.clip((top - g) / t, 0, 1)
            elif ties == "pessimistic":
                out[j] += float(g + t <= top)
            else:
                out[j] += float(g < top)
    return out / sim.shape[0]
