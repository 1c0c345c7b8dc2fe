"""Shape similarity of two representations of the same samples: Procrustes and Kruskal (nidl's).

The definitions are nidl's (``nidl.metrics.procrustes_similarity``, ``procrustes_r2``,
``kruskal_similarity``), computed in float64:

- Procrustes similarity: ``‖X̃ᵀỸ‖_* / (‖X̃‖_F ‖Ỹ‖_F)`` with ``X̃``, ``Ỹ`` column-centred, clamped to
  ``[0, 1]`` (the Frobenius cosine of ``Y`` and its best fit ``sXΩ + b``, ``Ω`` orthogonal); 0 when either
  side is constant.
- Procrustes R²: ``1 − Σᵢ‖Ỹᵢ − (X̃Ω)ᵢ‖ / Σᵢ‖Ỹᵢ‖`` with ``Ω = UVᵀ`` from the SVD of ``X̃ᵀỸ`` (row norms,
  not squared, as nidl); 0 when ``Y`` is constant.
- Kruskal similarity: ``1 − ‖d_X − d_Y‖ / ‖d_Y − mean(d_Y)‖`` over the pairs ``i < j``, ``d`` the Euclidean
  distances (cosine similarities with ``spherical``).

Kruskal's pair statistics are accumulated over blocks of rows (peak memory ``O(block × n)``, never the
``n × n`` matrices nidl builds), the spread of ``d_Y`` by Chan's pairwise update of (count, mean, M2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from embedmetrics._engine.core.scan import l2_normalize

#: Rows of one block of the pair scan (``rows × n`` float64 distances per side).
_PAIR_BLOCK_ELEMENTS = 2**22


def _centred(z: Tensor) -> Tensor:
    z = z.to(torch.float64)
    return z - z.mean(dim=0, keepdim=True)


def _is_zero(x: Tensor) -> bool:
    """nidl's degenerate-case test: ``torch.isclose(x, 0)`` (absolute tolerance 1e-8)."""
    return bool(torch.isclose(x, torch.zeros_like(x)))


def procrustes_similarity(x: Tensor, y: Tensor) -> Tensor:
    """Procrustes similarity with global scale invariance (see the module docstring), float64."""
    xc, yc = _centred(x), _centred(y)
    norms: Tensor = torch.linalg.matrix_norm(xc) * torch.linalg.matrix_norm(yc)
    if _is_zero(norms):
        return norms.new_zeros(())
    nuclear: Tensor = torch.linalg.svdvals(xc.T @ yc).sum()
    return (nuclear / norms).clamp(0.0, 1.0)


def procrustes_r2(x: Tensor, y: Tensor) -> Tensor:
    """Procrustes R² when scale matters (see the module docstring), float64; not symmetric."""
    xc, yc = _centred(x), _centred(y)
    if _is_zero(torch.linalg.matrix_norm(yc)):
        return yc.new_zeros(())
    u, _, vh = torch.linalg.svd(xc.T @ yc, full_matrices=False)
    fitted = xc @ (u @ vh)
    residual: Tensor = torch.linalg.vector_norm(yc - fitted, dim=1).sum()
    total: Tensor = torch.linalg.vector_norm(yc, dim=1).sum()
    return 1.0 - residual / total


def _pair_values(z: Tensor, rows: slice, spherical: bool) -> Tensor:
    """Distances (cosine similarities) of ``z[rows]`` to every row, float64."""
    if spherical:
        return z[rows] @ z.T
    return torch.cdist(z[rows], z)


def kruskal_similarity(x: Tensor, y: Tensor, spherical: bool = False) -> Tensor:
    """Kruskal similarity (see the module docstring), float64; not symmetric."""
    a, b = x.to(torch.float64), y.to(torch.float64)
    if spherical:
        a, b = l2_normalize(a, 1e-12), l2_normalize(b, 1e-12)
    n = a.shape[0]
    residual = a.new_zeros(())
    count, mean, m2 = 0, a.new_zeros(()), a.new_zeros(())
    step = max(1, _PAIR_BLOCK_ELEMENTS // max(n, 1))
    for lo in range(0, n, step):
        rows = slice(lo, min(n, lo + step))
        upper = torch.ones(rows.stop - lo, n, dtype=torch.bool, device=a.device).triu(lo + 1)
        dx, dy = _pair_values(a, rows, spherical)[upper], _pair_values(b, rows, spherical)[upper]
        residual += ((dx - dy) ** 2).sum()
        if dy.numel() == 0:
            continue
        block_mean = dy.mean()
        block_m2 = ((dy - block_mean) ** 2).sum()
        total = count + dy.numel()
        delta = block_mean - mean
        m2 = m2 + block_m2 + delta**2 * (count * dy.numel() / total)
        mean = mean + delta * (dy.numel() / total)
        count = total
    return 1.0 - residual.sqrt() / m2.sqrt() if count else a.new_full((), math.nan)
