"""Clustering for NMI / AMI: deterministic k-means and a vectorised adjusted mutual information.

k-means: greedy k-means++ initialisation, then Lloyd iterations.

Runs on the input's device. The random numbers of the initialisation are drawn on the CPU from a
``torch.Generator`` with a fixed seed and then moved to the device (a device's own generator draws a
different stream: CUDA and CPU clustered the same data differently), so the same input gives the same
clustering on every device.
Distances to the centres are computed in row blocks sized by the scan's memory budget.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from embedmetrics._engine.core.scan import DEFAULT_BLOCK_BYTES, block_budget, compute_dtype, plan_blocks


def _sq_dists(x: Tensor, x_sq: Tensor, centers: Tensor) -> Tensor:
    c_sq = (centers * centers).sum(dim=1)
    return torch.addmm(x_sq[:, None] + c_sq[None, :], x, centers.T, alpha=-2.0).clamp_min_(0)


def _assign(x: Tensor, x_sq: Tensor, centers: Tensor, block_bytes: int) -> tuple[Tensor, Tensor]:
    labels = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
    best = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    for start, stop in plan_blocks(x.shape[0], centers.shape[0] * x.element_size(), block_bytes)[1]:
        d = _sq_dists(x[start:stop], x_sq[start:stop], centers)
        best[start:stop], labels[start:stop] = d.min(dim=1)
    return labels, best


def _draw(weights: Tensor, trials: int, gen: torch.Generator) -> Tensor:
    """``trials`` indices drawn with probability proportional to ``weights`` (uniform if all zero).

    Inverse-CDF sampling with uniforms from the CPU generator ``gen``: the draws do not depend on the
    device holding ``weights`` (its cumulative sum is computed in float64 on the CPU).
    """
    cdf = weights.detach().to(device="cpu", dtype=torch.float64).cumsum(0)
    total = float(cdf[-1])
    if not total > 0:
        return torch.randint(weights.shape[0], (trials,), generator=gen)
    u = torch.rand(trials, generator=gen, dtype=torch.float64) * total
    return torch.searchsorted(cdf, u, right=True).clamp_max(weights.shape[0] - 1)


def kmeans(
    x: Tensor,
    n_clusters: int,
    *,
    seed: int = 0,
    max_iter: int = 100,
    tol: float = 1e-6,
    block_bytes: int | None = None,
) -> Tensor:
    """Cluster the rows of ``x`` into ``n_clusters`` clusters; returns ``(n,)`` int64 cluster ids."""
    x = x.to(compute_dtype(x))
    block_bytes = block_budget(block_bytes, x.device, DEFAULT_BLOCK_BYTES)
    n = x.shape[0]
    n_clusters = max(1, min(n_clusters, n))
    gen = torch.Generator().manual_seed(seed)  # CPU: the same draws whatever the device
    x_sq = (x * x).sum(dim=1)
    trials = 2 + int(math.log(n_clusters))
    # Greedy k-means++ (Arthur & Vassilvitskii; several candidates per step, keep the best).
    first = int(torch.randint(n, (1,), generator=gen).item())
    centers = x[first : first + 1].clone()
    closest = _sq_dists(x, x_sq, centers).squeeze(1)
    for _ in range(1, n_clusters):
        cand = _draw(closest, trials, gen).to(x.device)
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
        converged = bool(torch.equal(new_labels, labels)) or inertia - new_inertia <= tol * max(
            inertia, 1e-30
        )
        labels, inertia = new_labels, new_inertia
        if converged:
            break
    return labels


def adjusted_mutual_info(preds: Tensor, target: Tensor, *, chunk_terms: int = 2**22) -> Tensor:
    """Adjusted mutual information (arithmetic normalisation), vectorised in torch.

    Same definition as scikit-learn's ``adjusted_mutual_info_score`` and torchmetrics'
    ``adjusted_mutual_info_score``, but the expected mutual information (a sum over every pair of
    clusters and every feasible cell count, with hypergeometric weights) is computed in vectorised
    chunks instead of Python loops: torchmetrics 1.9 needs minutes for 20,000 points in 100 clusters.
    """
    a = torch.unique(preds, return_inverse=True)[1]
    b = torch.unique(target, return_inverse=True)[1]
    f64 = torch.float64
    n = a.shape[0]
    na, nb = int(a.max().item()) + 1, int(b.max().item()) + 1
    if na == nb == 1 or na == nb == n:  # unsplit, or all singletons on both sides: perfect match
        return torch.tensor(1.0, dtype=f64, device=preds.device)
    ai = torch.bincount(a, minlength=na).to(f64)
    bj = torch.bincount(b, minlength=nb).to(f64)
    cells, nij = torch.unique(a * nb + b, return_counts=True)
    nij_f = nij.to(f64)
    nf = float(n)
    mi = (nij_f / nf * (torch.log(nij_f * nf) - torch.log(ai[cells // nb] * bj[cells % nb]))).sum()
    h_a = -(ai / nf * torch.log(ai / nf)).sum()
    h_b = -(bj / nf * torch.log(bj / nf)).sum()
    # Expected mutual information under the permutation model.
    pa = ai.repeat_interleave(nb)
    pb = bj.repeat(na)
    lo = torch.clamp(pa + pb - nf, min=1.0)
    hi = torch.minimum(pa, pb)
    length = (hi - lo + 1).clamp_min(0).to(torch.int64)
    keep = length > 0
    pa, pb, lo, length = pa[keep], pb[keep], lo[keep], length[keep]
    ends = length.cumsum(0)
    emi = torch.zeros((), dtype=f64, device=preds.device)
    lg_n = math.lgamma(nf + 1)
    start = 0
    while start < pa.shape[0]:
        base = int(ends[start - 1].item()) if start > 0 else 0
        stop = int(torch.searchsorted(ends, base + chunk_terms, right=True).item())
        stop = max(stop, start + 1)
        sl = slice(start, stop)
        reps = length[sl]
        x, y, l0 = (
            pa[sl].repeat_interleave(reps),
            pb[sl].repeat_interleave(reps),
            lo[sl].repeat_interleave(reps),
        )
        offs = torch.arange(int(reps.sum().item()), device=preds.device) - (
            reps.cumsum(0) - reps
        ).repeat_interleave(reps)
        v = l0 + offs.to(f64)
        log_p = (
            torch.lgamma(x + 1)
            + torch.lgamma(y + 1)
            + torch.lgamma(nf - x + 1)
            + torch.lgamma(nf - y + 1)
            - lg_n
            - torch.lgamma(v + 1)
            - torch.lgamma(x - v + 1)
            - torch.lgamma(y - v + 1)
            - torch.lgamma(nf - x - y + v + 1)
        )
        emi = emi + (v / nf * (torch.log(nf * v) - torch.log(x * y)) * torch.exp(log_p)).sum()
        start = stop
    normalizer = (h_a + h_b) / 2
    denominator = normalizer - emi
    eps = torch.finfo(f64).eps
    denominator = torch.where(denominator < 0, denominator.clamp(max=-eps), denominator.clamp(min=eps))
    ami: Tensor = (mi - emi) / denominator
    return ami
