"""Deterministic k-means in torch (greedy k-means++ initialisation, Lloyd iterations).

Runs on the input's device; the random choices of the initialisation come from a
``torch.Generator`` seeded with a fixed seed, so the same input gives the same clustering.
Distances to the centres are computed in row blocks sized by the scan's memory budget.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from embedmetrics._engine.scan import DEFAULT_BLOCK_BYTES, block_ranges, block_rows, compute_dtype


def _sq_dists(x: Tensor, x_sq: Tensor, centers: Tensor) -> Tensor:
    c_sq = (centers * centers).sum(dim=1)
    return torch.addmm(x_sq[:, None] + c_sq[None, :], x, centers.T, alpha=-2.0).clamp_min_(0)


def _assign(x: Tensor, x_sq: Tensor, centers: Tensor, block_bytes: int) -> tuple[Tensor, Tensor]:
    rows = block_rows(centers.shape[0], block_bytes=block_bytes, itemsize=x.element_size())
    labels = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
    best = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    for start, stop in block_ranges(x.shape[0], rows):
        d = _sq_dists(x[start:stop], x_sq[start:stop], centers)
        best[start:stop], labels[start:stop] = d.min(dim=1)
    return labels, best


def kmeans(
    x: Tensor,
    n_clusters: int,
    *,
    seed: int = 0,
    max_iter: int = 100,
    tol: float = 1e-6,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> Tensor:
    """Cluster the rows of ``x`` into ``n_clusters`` clusters; returns ``(n,)`` int64 cluster ids."""
    x = x.to(compute_dtype(x))
    n = x.shape[0]
    n_clusters = max(1, min(n_clusters, n))
    gen = torch.Generator(device=x.device)
    gen.manual_seed(seed)
    x_sq = (x * x).sum(dim=1)
    trials = 2 + int(math.log(n_clusters))
    # Greedy k-means++ (Arthur & Vassilvitskii; several candidates per step, keep the best).
    first = int(torch.randint(n, (1,), generator=gen, device=x.device).item())
    centers = x[first : first + 1].clone()
    closest = _sq_dists(x, x_sq, centers).squeeze(1)
    for _ in range(1, n_clusters):
        total = closest.sum()
        if total <= 0:
            probs = torch.ones_like(closest)
        else:
            probs = closest / total
        cand = torch.multinomial(probs, trials, replacement=True, generator=gen)
        d = _sq_dists(x, x_sq, x[cand])  # (n, trials)
        new_closest = torch.minimum(closest[:, None], d)
        best = int(new_closest.sum(dim=0).argmin().item())
        closest = new_closest[:, best]
        centers = torch.cat([centers, x[cand[best]][None]])
    labels, dist = _assign(x, x_sq, centers, block_bytes)
    inertia = float(dist.sum().item())
    for _ in range(max_iter):
        sums = torch.zeros_like(centers).index_add_(0, labels, x)
        sizes = torch.bincount(labels, minlength=n_clusters).to(x.dtype)
        empty = sizes == 0
        new_centers = torch.where(empty[:, None], centers, sums / sizes.clamp_min(1)[:, None])
        centers = new_centers
        new_labels, dist = _assign(x, x_sq, centers, block_bytes)
        new_inertia = float(dist.sum().item())
        converged = bool(torch.equal(new_labels, labels)) or inertia - new_inertia <= tol * max(inertia, 1e-30)
        labels, inertia = new_labels, new_inertia
        if converged:
            break
    return labels
