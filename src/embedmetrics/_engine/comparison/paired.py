"""Paired significance tests on per-query values, for one pair or many pairs at once.

Every test takes the paired differences ``d = a - b`` of ``P`` pairs of systems over the same ``Q``
queries (``(P, Q)`` float64) and returns, per pair, the statistic, the p-value, the mean difference and an
effect size:

- ``"t"``: Student's paired t-test, ``t = mean(d) / (sd(d) / sqrt(Q))`` with ``Q - 1`` degrees of
  freedom (``scipy.stats.ttest_rel``); effect size Cohen's ``d_z = mean(d) / sd(d)``.
- ``"wilcoxon"``: the Wilcoxon signed-rank test with scipy's choices (zeros dropped, tied ``|d|``
  ranked by their average rank; the exact null distribution for up to 50 queries without ties or zeros,
  every sign flip enumerated for up to 13 queries with ties or zeros, else the normal approximation
  with the tie correction and no continuity correction; ``scipy.stats.wilcoxon``); the statistic is
  ``min(W+, W-)`` (two-sided) or ``W+``; effect size the matched-pairs rank-biserial correlation.
- ``"randomization"``: Fisher's paired randomization (sign-flip) test of ``mean(d)``: ``n_resamples``
  random sign vectors, shared by every pair, as random bits unpacked tile by tile and multiplied
  with every system's values at once (``resampling.sign_flip_sums``); p-value
  ``(1 + #{resampled statistics at least as extreme}) / (1 + n_resamples)``.
- ``"bootstrap"``: the paired bootstrap test of ``mean(d)``: ``n_resamples`` resamples of the queries
  (with replacement), shared by every pair, as matrices of resample counts multiplied with every
  system's values (``resampling.bootstrap_sums``); the resampled means are centred on the observed
  one (the null) and compared with it as above.

The resamples act on centred values: every system minus its own value on the first query (of the
canonical order below), so a constant added to every system changes nothing and no system's scale
reaches another pair's statistic. A pair's resampled mean of ``d`` is the difference of its two
systems' resampled sums over ``Q``, plus ``d`` of the first query times the resampled mean of the
weights (1 for the bootstrap's counts; the mean of the signs for sign flips: a column of ones,
resampled alongside). The queries
are first put in a canonical order (sorted by their values, ``resampling.canonical_order``): the
p-values depend on the multiset of the queries, not on their order. The random numbers come from
``seed`` on the CPU (``resampling``), so a seed gives the same p-values on every device and in every
run. The normal distribution of Wilcoxon's approximation is ``erfc``'s (tail-accurate: no p-value
rounds to 0 above ``1e-300``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.comparison.resampling import bootstrap_sums, sign_flip_sums
from embedmetrics._engine.comparison.systems import Systems

#: Relative tolerance of "at least as extreme" (sums of the same numbers in another order).
_TOLERANCE = 1e-12
#: Bytes of the resampled statistics of the pairs held at once (a block of pairs at a time).
_NULL_BYTES = 1 << 25


class PairedResult(NamedTuple):
    """Per pair (``(P,)`` float64 each): the test statistic, its p-value, the mean difference ``a - b``
    and the effect size."""

    statistic: Tensor
    p_value: Tensor
    mean_difference: Tensor
    effect_size: Tensor


def run_test(
    systems: Systems,
    left: Tensor,
    right: Tensor,
    test: str,
    alternative: str,
    n_resamples: int,
    seed: int,
) -> PairedResult:
    """The paired test ``test`` of the pairs ``(left[p], right[p])`` of ``systems`` (see the module
    docstring); no ``(pairs, queries)`` matrix is held (``systems.Systems``). The resampling tests
    release the systems' rows once their table is built."""
    mean, sd, first = systems.moments(left, right)
    if test == "t":
        return _t_test(mean, sd, systems.n, alternative)
    if test == "wilcoxon":
        results = [
            _wilcoxon(systems.difference(int(i), int(j)), m, alternative)
            for i, j, m in zip(left, right, mean)
        ]
        return PairedResult(*(torch.stack(parts) for parts in zip(*results)))
    n, count = systems.n, len(systems.rows)
    table = systems.centred_table(ones=test == "randomization")
    systems.release()
    if test == "randomization":  # a column of ones: the sum of each resample's signs
        sums = sign_flip_sums(table, n_resamples, seed)

        def null(p: slice) -> Tensor:
            return (sums[:, left[p]] - sums[:, right[p]]).T / n + first[p, None] * (sums[:, count] / n)

    else:  # resampled mean of d minus the observed one: the null of the bootstrap test
        sums = bootstrap_sums(table, n_resamples, seed)

        def null(p: slice) -> Tensor:
            return (sums[:, left[p]] - sums[:, right[p]]).T / n + (first[p] - mean[p])[:, None]

    return PairedResult(mean, _resampled_p(mean, null, n_resamples, alternative), mean, mean / sd)


# ----------------------------------------------------------------------------- t


def _t_test(mean: Tensor, sd: Tensor, n: int, alternative: str) -> PairedResult:
    try:
        from scipy.special import stdtr  # type: ignore[import-untyped]  # the t distribution
    except ImportError:
        raise ImportError("The paired t-test needs scipy: pip install 'embedmetrics[compare]'.") from None

    t = mean / (sd / math.sqrt(n))
    tt = t.cpu().numpy()
    if alternative == "greater":
        p = stdtr(n - 1, -tt)
    elif alternative == "less":
        p = stdtr(n - 1, tt)
    else:
        p = 2 * stdtr(n - 1, -np.abs(tt))
    p_value = torch.as_tensor(np.asarray(p, dtype=np.float64), device=mean.device)
    return PairedResult(t, p_value, mean, mean / sd)


# ----------------------------------------------------------------------------- wilcoxon


def _signed_ranks(d: Tensor) -> tuple[Tensor, Tensor, bool]:
    """Average ranks of ``|d|`` over the non-zero differences (0 for zeros), the tie correction
    ``sum(t^3 - t)`` and whether there are ties."""
    nonzero = d != 0
    values = d.abs()[nonzero]
    ranks = torch.zeros_like(d)
    if values.numel() == 0:
        return ranks, d.new_zeros(()), False
    sorted_values, order = torch.sort(values)
    _, inverse, counts = torch.unique_consecutive(sorted_values, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).to(d.dtype)
    average = (ends - counts.to(d.dtype) + 1 + ends) / 2
    in_order = torch.empty_like(values)
    in_order[order] = average[inverse]
    ranks[nonzero] = in_order
    c = counts.to(d.dtype)
    return ranks, (c**3 - c).sum(), bool((counts > 1).any())


def _wilcoxon(d: Tensor, mean: Tensor, alternative: str) -> PairedResult:
    ranks, tie_term, ties = _signed_ranks(d)
    r_plus, r_minus = ranks[d > 0].sum(), ranks[d < 0].sum()
    count = float((d != 0).sum())
    n, zeros = d.shape[0], bool((d == 0).any())
    if n <= 50 and not (ties or zeros):
        p = _wilcoxon_exact(int(count), float(r_plus), alternative)
    elif n <= 13:
        p = _wilcoxon_enumerated(d, ranks, float(r_plus), alternative)
    else:
        p = _wilcoxon_normal(count, float(r_plus), float(tie_term), alternative)
    statistic = torch.minimum(r_plus, r_minus) if alternative == "two-sided" else r_plus
    total = r_plus + r_minus
    effect = torch.where(total > 0, (r_plus - r_minus) / torch.where(total > 0, total, 1.0), 0.0)
    return PairedResult(statistic, d.new_tensor(p), mean, effect)


def _wilcoxon_exact(count: int, r_plus: float, alternative: str) -> float:
    """The exact null distribution of ``W+`` for ``count`` ranks without ties (a subset-sum count)."""
    top = count * (count + 1) // 2
    ways = np.zeros(top + 1)
    ways[0] = 1.0
    for rank in range(1, count + 1):
        ways[rank:] = ways[rank:] + ways[: top + 1 - rank].copy()
    pmf = ways / 2.0**count
    lo, hi = math.ceil(r_plus), math.floor(r_plus)
    return _one_or_two_sided(float(pmf[: lo + 1].sum()), float(pmf[hi:].sum()), alternative)


def _wilcoxon_enumerated(d: Tensor, ranks: Tensor, r_plus: float, alternative: str) -> float:
    """Every sign flip of the ``n <= 13`` differences: the exact permutation p-value (as scipy)."""
    n = d.shape[0]
    signs = torch.tensor(list(itertools.product((1.0, -1.0), repeat=n)), dtype=d.dtype, device=d.device)
    null = ((signs * d) > 0).to(d.dtype) @ ranks
    gamma = abs(r_plus) * torch.finfo(d.dtype).eps * 100
    less = float((null <= r_plus + gamma).to(d.dtype).mean())
    return _one_or_two_sided(less, float((null >= r_plus - gamma).to(d.dtype).mean()), alternative)


def _one_or_two_sided(less: float, greater: float, alternative: str) -> float:
    """The p-value of ``alternative`` from the two one-sided ones (two-sided: twice the smaller, <= 1)."""
    if alternative == "less":
        return less
    if alternative == "greater":
        return greater
    return min(1.0, 2 * min(less, greater))


def _wilcoxon_normal(count: float, r_plus: float, tie_term: float, alternative: str) -> float:
    """The normal approximation with the tie correction (no continuity correction)."""
    mean = count * (count + 1) / 4
    se = math.sqrt((count * (count + 1) * (2 * count + 1) - tie_term / 2) / 24)
    z = (r_plus - mean) / se if se > 0 else math.nan
    at = {"greater": -z, "less": z}.get(alternative, -abs(z))
    p = normal_cdf(at)
    return p if alternative != "two-sided" else 2 * p


def normal_cdf(z: float) -> float:
    """The standard normal CDF as ``erfc(-z / sqrt(2)) / 2``: accurate to the last digits in the lower
    tail (down to ``1e-300`` and below), where ``1 + erf`` would cancel."""
    return float(torch.special.erfc(torch.tensor(-z / math.sqrt(2), dtype=torch.float64)) / 2)


# ----------------------------------------------------------------------------- resampling


def _resampled_p(
    observed: Tensor, null: Callable[[slice], Tensor], n_resamples: int, alternative: str
) -> Tensor:
    """``(1 + #{null at least as extreme as observed}) / (1 + resamples)`` per pair; ``null(pairs)`` gives
    the ``(pairs, resamples)`` resampled statistics of a slice of the pairs, taken a block at a time."""
    step = max(1, _NULL_BYTES // (8 * n_resamples))
    counts = [
        _extreme_counts(observed[lo : lo + step], null(slice(lo, lo + step)), alternative)
        for lo in range(0, observed.numel(), step)
    ]
    count = torch.cat(counts).to(observed.dtype) + 1
    return count / torch.full_like(count, n_resamples + 1)  # a tensor: a CUDA kernel would use 1 / (n + 1)


def _extreme_counts(observed: Tensor, null: Tensor, alternative: str) -> Tensor:
    """Per pair, the resampled statistics at least as extreme as the observed one."""
    obs = observed[:, None]
    gamma = obs.abs() * _TOLERANCE
    if alternative == "greater":
        extreme = null >= obs - gamma
    elif alternative == "less":
        extreme = null <= obs + gamma
    else:
        extreme = null.abs() >= obs.abs() - gamma
    return extreme.sum(dim=1)
