"""The bootstrap's resample counts (``counts``) against the multinomial distribution they must follow,
with scipy's multinomial and chi-square as the judge: exact for every composition of a few queries
(both samplers, the draws added and the draws taken away), and with the multinomial's moments and
marginal for thousands of queries."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch

from embedmetrics._engine.comparison import counts
from embedmetrics._engine.comparison.resampling import chunk_generator


def _draw(queries: int, resamples: int, seed: int, chunk: int = 2000) -> np.ndarray:
    """``(resamples, queries)`` counts, ``chunk`` resamples at a time from independent generators."""
    out = torch.empty(resamples, queries, dtype=torch.int16)
    for k, top in enumerate(range(0, resamples, chunk)):
        counts.resample_counts(chunk_generator(seed, k), out[top : top + chunk])
    return out.numpy()


def _chi_square_against_multinomial(drawn: np.ndarray) -> float:
    """The p-value of the counts' compositions against the multinomial of ``Q`` draws over ``Q`` rows
    (every composition; scipy's pmf)."""
    resamples, queries = drawn.shape
    outcomes = [c for c in itertools.product(range(queries + 1), repeat=queries) if sum(c) == queries]
    index = {c: i for i, c in enumerate(outcomes)}
    seen = np.bincount([index[tuple(row)] for row in drawn.tolist()], minlength=len(outcomes))
    pmf = scipy.stats.multinomial.pmf(np.array(outcomes), queries, [1 / queries] * queries)
    return float(scipy.stats.chisquare(seen, resamples * pmf / pmf.sum()).pvalue)


@pytest.mark.parametrize("margin", [counts._MARGIN, -3.0], ids=["mostly-added", "mostly-taken"])
@pytest.mark.parametrize("queries", [3, 5])
def test_poissonized_counts_follow_the_multinomial_exactly(
    monkeypatch: pytest.MonkeyPatch, queries: int, margin: float
) -> None:
    """Poissonized at 3 and 5 queries (where the Poisson total misses ``Q`` most of the time, above and
    below it: both corrections), the compositions' frequencies against every multinomial probability."""
    monkeypatch.setattr(counts, "_POISSON_FROM", 1)
    monkeypatch.setattr(counts, "_MARGIN", margin)
    drawn = _draw(queries, 60_000, seed=queries)
    assert (drawn.sum(axis=1) == queries).all()
    assert _chi_square_against_multinomial(drawn) > 1e-3


def test_both_corrections_are_taken_on_few_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Poisson totals of the test above fall short of ``Q`` (draws added) in most resamples under
    the module's margin and exceed it (draws taken away) in most under a negative one: each branch is
    what one of the chi-squares judged."""
    monkeypatch.setattr(counts, "_POISSON_FROM", 1)
    for margin, sign in ((counts._MARGIN, -1), (-3.0, 1)):
        monkeypatch.setattr(counts, "_MARGIN", margin)
        out = torch.empty(2000, 5, dtype=torch.int16)
        counts.poisson_pairs(chunk_generator(0, 0), out.view(-1), counts.poisson_mean(5))
        assert int((torch.sign(out.sum(dim=1) - 5) == sign).sum()) > 1000, margin


def test_drawn_counts_follow_the_multinomial_exactly() -> None:
    assert counts._POISSON_FROM > 5
    drawn = _draw(5, 60_000, seed=9)
    assert _chi_square_against_multinomial(drawn) > 1e-3


@pytest.mark.parametrize("queries", [counts._POISSON_FROM, 20_001])
def test_many_queries_have_the_multinomial_marginal_and_moments(queries: int) -> None:
    """Poissonized counts of thousands of queries: every resample sums to ``Q``; a query's count is
    Binomial(``Q``, 1/``Q``) (chi-square over 0..5 and more), two queries' counts covary by ``-1/Q``."""
    drawn = _draw(queries, 400, seed=queries).astype(np.int64)
    assert (drawn.sum(axis=1) == queries).all()
    seen = np.bincount(np.minimum(drawn.ravel(), 6), minlength=7)
    pmf = scipy.stats.binom.pmf(np.arange(6), queries, 1 / queries)
    expected = drawn.size * np.append(pmf, 1 - pmf.sum())
    assert scipy.stats.chisquare(seen, expected).pvalue > 1e-3
    centred = drawn - 1.0
    covariance = float((centred[:, :-1] * centred[:, 1:]).mean())  # neighbouring queries
    assert covariance == pytest.approx(-1 / queries, abs=5 / math.sqrt(drawn.size))
    assert float(centred.var()) == pytest.approx(1 - 1 / queries, rel=0.01)


def test_the_pair_table_inverts_the_pair_distribution() -> None:
    """Every 16-bit number the table answers inverts to that outcome at both ends of its interval; the
    straddling ones (``-1``) are few."""
    table, cdf, codes = counts.pair_distribution(counts.poisson_mean(100_000))
    table = table.numpy()
    answered = np.flatnonzero(table != -1)
    for end in (answered / 65536, np.nextafter((answered + 1) / 65536, 0)):
        outcome = np.searchsorted(cdf, end, side="right")
        assert np.array_equal(codes[outcome], table[answered])
    assert (table == -1).mean() < 1e-3
    a, b = codes % 256, codes // 256
    assert a.max() == b.max() == counts._LARGEST


def test_a_count_type_too_narrow_is_refused_before_it_wraps() -> None:
    """``int8`` counts would wrap where a resample adds more than 127 - ``_LARGEST`` draws: refused with
    ``CountOverflow`` (the caller redoes the chunk wider), not wrapped."""
    with pytest.raises(counts.CountOverflow):
        counts.resample_counts(chunk_generator(0, 0), torch.empty(2, 20_000, dtype=torch.int8))


def test_the_same_generator_gives_the_same_counts_in_any_integer_type() -> None:
    narrow, wide = torch.empty(3, 9000, dtype=torch.int16), torch.empty(3, 9000, dtype=torch.int32)
    counts.resample_counts(chunk_generator(4, 2), narrow)
    counts.resample_counts(chunk_generator(4, 2), wide)
    assert torch.equal(narrow.to(torch.int32), wide)
