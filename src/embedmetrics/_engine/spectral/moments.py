"""Representation health from sufficient statistics: RankMe, α-ReQ, LiDAR and linear CKA.

None of these metrics needs the samples themselves, only a few sums over them, kept in float64:

- ``n``, ``Σz`` and ``Σzzᵀ`` (``Moments``) give the uncentred and the centred scatter matrices;
  the singular values of ``Z`` are the square roots of the eigenvalues of ``ZᵀZ`` (RankMe), the
  covariance spectrum is that of ``(ZᵀZ − n·μμᵀ) / (n − 1)`` (α-ReQ).
- per class ``n_c`` and ``Σ_c z`` on top of ``Σzzᵀ`` give the between-class and within-class
  covariances of LiDAR (``grouped_sums`` merges the per-batch class sums).
- ``Σx``, ``Σy``, ``ΣxxT``, ``ΣyyT`` and ``ΣxyT`` give linear CKA.

Sums add across batches and processes, so the value is the same for any batch split and world size
(up to float64 rounding of the sums: about 1e-16 of ``Σ‖z‖²``), with O(d²) memory for any ``n`` and
no sample queue. Numerical limits: eigenvalues are resolved down to about ``1e-16 · λ_max`` (singular
values down to about ``1e-8 · σ_max``); a centred statistic loses the digits of ``‖μ‖² / variance``
(1e8 still leaves 8 digits). Eigendecompositions run in float64 in O(d³): comfortable up to d = 8192.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor


class Moments(NamedTuple):
    """Number of rows, column sums and ``ZᵀZ`` of a matrix, in float64."""

    n: Tensor
    total: Tensor
    gram: Tensor


def column_sums(z: Tensor) -> tuple[Tensor, Tensor]:
    """``Σz`` and ``ZᵀZ`` of one batch ``z`` (``(n, d)``), in float64, without reading the data."""
    z64 = z.detach().to(torch.float64)
    return z64.sum(dim=0), z64.T @ z64


def moments(z: Tensor) -> Moments:
    """The sufficient statistics of all rows ``z`` (``(n, d)``)."""
    return Moments(torch.tensor(z.shape[0], dtype=torch.int64, device=z.device), *column_sums(z))


def cross_gram(x: Tensor, y: Tensor) -> Tensor:
    """``XᵀY`` in float64."""
    return x.detach().to(torch.float64).T @ y.detach().to(torch.float64)


def centered(n: Tensor, sum_a: Tensor, sum_b: Tensor, cross: Tensor) -> Tensor:
    """``(A − 1μ_aᵀ)ᵀ(B − 1μ_bᵀ) = AᵀB − Σa Σbᵀ / n``."""
    return cross - torch.outer(sum_a, sum_b) / n.to(torch.float64)


def descending_eigenvalues(matrix: Tensor) -> Tensor:
    """Eigenvalues of a symmetric PSD matrix, largest first, rounding negatives clamped to 0."""
    values: Tensor = torch.linalg.eigvalsh((matrix + matrix.T) * 0.5)
    return values.flip(0).clamp_min(0.0)


def smooth_rank(values: Tensor, eps: float) -> Tensor:
    """``exp(−Σ p log p)`` with ``p = v / ‖v‖₁ + eps`` (Roy & Vetterli's effective rank with the
    papers' ``eps``); 0 for an all-zero spectrum (rank 0)."""
    total = values.sum()
    p = values / torch.where(total > 0, total, 1.0) + eps
    value = torch.exp(-(p * torch.log(p)).sum())
    return torch.where(total > 0, value, 0.0)


def rankme(m: Moments, *, center: bool, eps: float) -> Tensor:
    """RankMe (Garrido et al., ICML 2023) of the rows summarised by ``m``.

    The singular values of ``Z`` (``n × d``; centred with ``center``) are the square roots of the
    eigenvalues of ``ZᵀZ``; as ``torch.linalg.svdvals(Z)`` gives, the ``min(n, d)`` largest are used.
    """
    scatter = centered(m.n, m.total, m.total, m.gram) if center else m.gram
    lam = descending_eigenvalues(scatter)[: int(min(int(m.n), scatter.shape[0]))]
    return smooth_rank(resolved(lam).sqrt(), eps)


def resolved(lam: Tensor) -> Tensor:
    """Descending eigenvalues with those below the eigensolver's resolution (``d · ε · λ_max``, ``ε`` of
    float64) set to 0: rounding noise of a zero eigenvalue, whose square root (``~1e-8 · σ_max``) would
    otherwise count as a singular value the data do not have."""
    if lam.numel() == 0:
        return lam
    floor = lam[0] * lam.numel() * torch.finfo(lam.dtype).eps
    return torch.where(lam > floor, lam, 0.0)


def alpha_req(m: Moments, *, fit_range: tuple[int, int]) -> Tensor:
    """α-ReQ (Agrawal et al., NeurIPS 2022): the decay α of ``λ_i ∝ i^(−α)`` for the eigenvalues of the
    covariance, by least squares of ``log λ_i`` on ``log i`` with weights ``1 / i`` (the authors'
    fit) over the ranks ``fit_range`` (1-based, inclusive) that hold a nonzero eigenvalue.

    NaN when fewer than two such eigenvalues exist (or ``n < 2``).
    """
    n = int(m.n)
    nan = torch.tensor(math.nan, dtype=torch.float64, device=m.gram.device)
    if n < 2:
        return nan
    lam = descending_eigenvalues(centered(m.n, m.total, m.total, m.gram)) / (n - 1)
    floor = lam[0] * lam.shape[0] * torch.finfo(torch.float64).eps  # numerically zero below this
    lo, hi = fit_range
    hi = min(hi, lam.shape[0], n - 1)  # a centred n-row matrix has at most n - 1 nonzero eigenvalues
    if hi - lo < 1:
        return nan
    ranks = torch.arange(lo, hi + 1, dtype=torch.float64, device=lam.device)
    values = lam[lo - 1 : hi]
    keep = values > floor
    if int(keep.sum()) < 2:
        return nan
    x, y, w = torch.log(ranks[keep]), torch.log(values[keep]), 1.0 / ranks[keep]
    x_mean, y_mean = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
    slope = (w * (x - x_mean) * (y - y_mean)).sum() / (w * (x - x_mean) ** 2).sum()
    return -slope


def inverse_sqrt(matrix: Tensor) -> Tensor:
    """``M^(−1/2)`` of a symmetric positive definite matrix."""
    w: Tensor
    v: Tensor
    w, v = torch.linalg.eigh((matrix + matrix.T) * 0.5)
    root: Tensor = (v * w.clamp_min(torch.finfo(w.dtype).tiny).rsqrt()) @ v.T
    return root


def lidar(counts: Tensor, class_sums: Tensor, gram: Tensor, *, delta: float, eps: float) -> Tensor:
    """LiDAR (Thilak et al., ICLR 2024) from per-class counts and sums and ``Σzzᵀ`` of all rows.

    With class means ``μ_c``, their mean ``μ``, ``C`` classes and ``N`` rows:
    ``Σ_b = Σ_c (μ_c − μ)(μ_c − μ)ᵀ / (C − 1)``, ``Σ_w = Σ_c Σ_i (z − μ_c)(z − μ_c)ᵀ / (N − C) + δI``,
    and LiDAR is the smooth rank (``eps``) of the eigenvalues of ``Σ_w^(−1/2) Σ_b Σ_w^(−1/2)``.
    NaN with fewer than two classes or no class with two rows.
    """
    n_classes, n_rows = counts.shape[0], int(counts.sum()) if counts.numel() else 0
    if n_classes < 2 or n_rows <= n_classes:
        return torch.tensor(math.nan, dtype=torch.float64, device=gram.device)
    c64 = counts.to(torch.float64)
    means = class_sums / c64[:, None]
    spread = means - means.mean(dim=0)
    between = spread.T @ spread / (n_classes - 1)
    scaled = class_sums / c64.sqrt()[:, None]
    within = (gram - scaled.T @ scaled) / (n_rows - n_classes)
    within = within + delta * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    root = inverse_sqrt(within)
    return smooth_rank(descending_eigenvalues(root @ between @ root), eps)


def linear_cka(n: Tensor, sum_x: Tensor, sum_y: Tensor, xx: Tensor, yy: Tensor, xy: Tensor) -> Tensor:
    """Linear CKA (Kornblith et al., ICML 2019): ``‖X̃ᵀỸ‖²_F / (‖X̃ᵀX̃‖_F ‖ỸᵀỸ‖_F)`` of the centred
    matrices; NaN when either representation is constant (a zero denominator)."""
    kxy = centered(n, sum_x, sum_y, xy)
    kxx = centered(n, sum_x, sum_x, xx)
    kyy = centered(n, sum_y, sum_y, yy)
    den = torch.linalg.matrix_norm(kxx) * torch.linalg.matrix_norm(kyy)
    num = (kxy * kxy).sum()
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), math.nan)


def grouped_sums(labels: Tensor, counts: Tensor, sums: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Merge per-batch class partials ``(label, count, sum)`` into one row per label (sorted).

    Deterministic on every device: the partials of a label are added in their given order, one
    occurrence at a time (no atomics), so the result does not depend on the kernel schedule.
    """
    used = (counts > 0).nonzero().flatten()  # drop the empty slots of ``class_partials``
    order = used[torch.sort(labels[used], stable=True).indices]
    labels, counts, sums = labels[order], counts[order], sums[order]
    unique, inverse, per_label = torch.unique_consecutive(labels, return_inverse=True, return_counts=True)
    starts = torch.cumsum(per_label, 0) - per_label
    occurrence = torch.arange(labels.shape[0], device=labels.device) - starts[inverse]
    out_counts = torch.zeros(unique.shape[0], dtype=counts.dtype, device=counts.device)
    out_sums = torch.zeros(unique.shape[0], *sums.shape[1:], dtype=sums.dtype, device=sums.device)
    for j in range(int(per_label.max()) if per_label.numel() else 0):
        at = (occurrence == j).nonzero().flatten()
        out_counts.index_add_(0, inverse[at], counts[at])
        out_sums.index_add_(0, inverse[at], sums[at])
    return unique, out_counts, out_sums


def class_partials(z: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(labels, counts, sums, used)`` of one batch in ``n`` fixed slots (``n`` rows), float64.

    Slot ``i < used`` holds the ``i``-th distinct label (sorted), its row count and its row sum; the
    slots from ``used`` on have count 0 and sum 0 and repeat the last label, so they add nothing
    wherever they are merged. No shape depends on the data: no host sync. Deterministic on every
    device (a sort, integer counts and a segmented sum of the sorted rows, no float atomics): the rows
    are partials of one row each, merged by ``merge_partials``.
    """
    return merge_partials(labels, torch.ones_like(labels, dtype=torch.int64), z.detach().to(torch.float64))


def merge_partials(labels: Tensor, counts: Tensor, sums: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Class partials ``(label, count, sum)`` (several batches' slots, concatenated) merged into one row
    per label, in ``n`` fixed slots as ``class_partials`` gives them (no host sync); ``used``
    counts the real ones. The partials of a label are added in their given order (deterministic)."""
    n = labels.shape[0]
    sorted_labels, order = torch.sort(labels, stable=True)
    first = torch.ones(n, dtype=torch.bool, device=labels.device)
    first[1:] = sorted_labels[1:] != sorted_labels[:-1]
    slot = torch.cumsum(first, 0) - 1
    out_counts = torch.zeros_like(counts).scatter_add_(0, slot, counts[order])
    per_slot = torch.zeros_like(slot).scatter_add_(0, slot, torch.ones_like(slot))
    starts = (torch.cumsum(per_slot, 0) - per_slot).clamp_max(n - 1)
    out_sums = torch.segment_reduce(sums[order], "sum", lengths=per_slot, axis=0, unsafe=True)
    return sorted_labels[starts], out_counts, out_sums, first.sum()
