"""Bootstrap confidence intervals of the mean of per-query values (percentile and BCa), vectorized."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from embedmetrics._engine.comparison.resampling import bootstrap_sums


class Interval(NamedTuple):
    """The mean of the values and the bounds of its confidence interval (one entry per column)."""

    mean: Tensor
    low: Tensor
    high: Tensor


def bootstrap_interval(
    values: Tensor, confidence: float, n_resamples: int, method: str, seed: int
) -> Interval:
    """The ``confidence`` interval of the mean of each column of the ``(Q, m)`` float64 ``values``.

    Each column is sorted first (its resamples depend on its multiset of values, not on the order of
    the rows), then resampled (``resampling.bootstrap_sums``: the same resample counts for every
    column). ``"percentile"``: the ``(1 ± confidence) / 2`` quantiles of the resampled means (linear
    interpolation, as NumPy). ``"bca"``: the quantiles shifted by the bias correction
    ``z0 = Φ⁻¹((#{resampled < observed} + #{resampled <= observed}) / (2 n))`` (ties with the
    observed mean count half) and the acceleration of the jackknife means (Efron 1987), as
    ``scipy.stats.bootstrap``.
    """
    values = values.sort(dim=0).values
    n = values.shape[0]
    mean = values.sum(dim=0) / n
    boot = bootstrap_sums(values, n_resamples, seed) / n  # (n_resamples, m)
    tail = (1 - confidence) / 2
    levels = torch.tensor([tail, 1 - tail], dtype=values.dtype, device=values.device)[:, None]
    levels = levels.expand(2, values.shape[1])
    if method == "bca":
        levels = _bca_levels(values, boot, mean, levels)
    bounds = _quantiles(boot.sort(dim=0).values, levels)
    return Interval(mean, bounds[0], bounds[1])


def _bca_levels(values: Tensor, boot: Tensor, mean: Tensor, levels: Tensor) -> Tensor:
    """``(2, m)`` BCa-adjusted quantile levels."""
    below = (boot < mean).to(values.dtype).sum(dim=0) + (boot <= mean).to(values.dtype).sum(dim=0)
    z0 = torch.special.ndtri(below / (2 * boot.shape[0]))
    n = values.shape[0]
    jack = (values.sum(dim=0) - values) / (n - 1)  # (Q, m): the means without each query
    dev = jack.mean(dim=0) - jack
    accel = (dev**3).sum(dim=0) / (6 * ((dev**2).sum(dim=0)) ** 1.5)
    z = torch.special.ndtri(levels)
    out: Tensor = torch.special.ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))
    return out


def _quantiles(ordered: Tensor, levels: Tensor) -> Tensor:
    """``(k, m)``: the ``levels`` quantiles of each column of the sorted ``(n, m)`` values, with linear
    interpolation (NumPy's default); NaN levels give NaN. Any ``n`` (no ``torch.quantile`` size limit)."""
    n = ordered.shape[0]
    position = levels.clamp(0.0, 1.0) * (n - 1)
    low = position.floor().clamp(0, n - 1)
    weight = position - low
    lo = low.nan_to_num(0.0).long()
    hi = (lo + 1).clamp(max=n - 1)
    at_low, at_high = ordered.gather(0, lo), ordered.gather(0, hi)
    out = at_low + weight * (at_high - at_low)
    return torch.where(torch.isfinite(levels), out, torch.full_like(out, float("nan")))
