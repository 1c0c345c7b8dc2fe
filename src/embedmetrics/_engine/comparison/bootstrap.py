"""Bootstrap confidence intervals of the mean of per-query values (percentile and BCa), vectorized."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from embedmetrics._engine.comparison.paired import bootstrap_means


class Interval(NamedTuple):
    """The mean of the values and the bounds of its confidence interval (one entry per column)."""

    mean: Tensor
    low: Tensor
    high: Tensor


def bootstrap_interval(
    values: Tensor, confidence: float, n_resamples: int, method: str, seed: int
) -> Interval:
    """The ``confidence`` interval of the mean of each column of the ``(Q, m)`` float64 ``values``.

    ``"percentile"``: the ``(1 ± confidence) / 2`` quantiles of the resampled means (linear
    interpolation, as NumPy). ``"bca"``: the quantiles shifted by the bias correction
    ``z0 = Φ⁻¹(#{resampled < observed} / n)`` and the acceleration of the jackknife means (Efron 1987),
    as ``scipy.stats.bootstrap``.
    """
    mean = values.mean(dim=0)
    boot = bootstrap_means(values, n_resamples, seed)  # (n_resamples, m)
    tail = (1 - confidence) / 2
    levels = torch.tensor([tail, 1 - tail], dtype=values.dtype, device=values.device)[:, None]
    levels = levels.expand(2, values.shape[1])
    if method == "bca":
        levels = _bca_levels(values, boot, mean, levels)
    bounds = torch.stack([_quantile(boot[:, j], levels[:, j]) for j in range(values.shape[1])], dim=1)
    return Interval(mean, bounds[0], bounds[1])


def _bca_levels(values: Tensor, boot: Tensor, mean: Tensor, levels: Tensor) -> Tensor:
    """``(2, m)`` BCa-adjusted quantile levels."""
    z0 = torch.special.ndtri((boot < mean).to(values.dtype).mean(dim=0))
    n = values.shape[0]
    jack = (values.sum(dim=0) - values) / (n - 1)  # (Q, m): the means without each query
    dev = jack.mean(dim=0) - jack
    accel = (dev**3).sum(dim=0) / (6 * ((dev**2).sum(dim=0)) ** 1.5)
    z = torch.special.ndtri(levels)
    out: Tensor = torch.special.ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))
    return out


def _quantile(x: Tensor, q: Tensor) -> Tensor:
    """Quantiles with linear interpolation (NaN levels give NaN)."""
    finite = torch.isfinite(q)
    out = torch.full_like(q, float("nan"))
    if bool(finite.any()):
        out[finite] = torch.quantile(x, q[finite].clamp(0.0, 1.0))
    return out
