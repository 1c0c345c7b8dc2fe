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


def _draw(queries: int, resamples: int, seed: int, chunk: int = 1999) -> np.ndarray:
    """``(resamples, queries)`` counts, ``chunk`` resamples at a time from independent generators (an
    odd chunk: counts left over after whole tuples, chunks that start unaligned)."""
    out = torch.empty(resamples, queries, dtype=torch.int8)
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
        counts.poisson_tuples(chunk_generator(0, 0), out.view(-1), counts.poisson_mean(5))
        assert int((torch.sign(out.sum(dim=1) - 5) == sign).sum()) > 1000, margin


def test_drawn_counts_follow_the_multinomial_exactly() -> None:
    assert counts._POISSON_FROM > 5
    drawn = _draw(5, 60_000, seed=9)
    assert _chi_square_against_multinomial(drawn) > 1e-3


@pytest.mark.parametrize("queries", [counts._POISSON_FROM, 20_001, 20_002])
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


def test_the_tuple_table_inverts_the_tuple_distribution() -> None:
    """Every 16-bit number the table answers inverts to that outcome at both ends of its interval; the
    straddling ones (``-1``) are few; the cumulative distribution is the running sum of the products of
    scipy's Poisson probabilities, the likeliest first, first count in the lowest byte."""
    mean = counts.poisson_mean(100_000)
    tuples = counts.tuple_table(mean)
    table, cdf, codes = tuples.table.numpy(), tuples.cdf, tuples.codes
    answered = np.flatnonzero(table != -1)
    for end in (answered / 65536, np.nextafter((answered + 1) / 65536, 0)):
        outcome = np.searchsorted(cdf, end, side="right")
        assert np.array_equal(codes[outcome], table[answered])
    assert (table == -1).mean() < 0.02
    cells = np.stack([(codes >> (8 * i)) & 255 for i in range(counts._CELLS)], axis=1)
    assert cells.max() == counts._LARGEST
    assert len({tuple(c) for c in cells.tolist()}) == (counts._LARGEST + 1) ** counts._CELLS
    probability = np.prod(scipy.stats.poisson.pmf(cells, mean), axis=1)
    assert (np.diff(probability) <= 1e-12 * probability[1:]).all()  # the likeliest first
    np.testing.assert_allclose(cdf, np.cumsum(probability), rtol=1e-12, atol=1e-15)


def test_straddling_numbers_invert_as_a_search_of_the_whole_distribution() -> None:
    """The straddling 16-bit numbers, finished by the second table (8 more bits) or a search: the
    outcome a search of the whole distribution gives for the uniform their bits and the generator's
    next numbers spell (read back from a second generator in the same state)."""
    tuples = counts.tuple_table(counts.poisson_mean(20_000))
    straddling = np.flatnonzero(tuples.table.numpy() == -1).astype(np.uint16)
    bits = np.repeat(straddling, 40)
    got = counts._invert(tuples, bits, chunk_generator(8, 0))
    again = chunk_generator(8, 0)
    words = again.bit_generator.random_raw(-(-bits.size // 8))
    more = np.array([(int(words[i // 8]) >> (8 * (i % 8))) & 255 for i in range(bits.size)])
    fine = tuples.fine[tuples.slot[bits], more]
    still = np.flatnonzero(fine == -1)
    uniforms = (bits + more / 256) / 65536
    uniforms[still] += again.random(still.size) / (1 << 24)
    position = np.searchsorted(tuples.cdf, uniforms, side="right")
    assert np.array_equal(got, tuples.codes[np.minimum(position, tuples.cdf.size - 1)])
    assert 0 < still.size < 0.05 * bits.size  # most finished by the second table


class _AlwaysFirst:
    """A generator whose every drawn index is 0 (its other draws are a real generator's)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.bit_generator = rng.bit_generator

    def integers(self, low: int, high: int, size: object) -> np.ndarray:
        return np.zeros(size, dtype=np.int64)  # type: ignore[call-overload]

    def __getattr__(self, name: str) -> object:
        return getattr(self.rng, name)


@pytest.mark.parametrize("queries", [300, 5000])
def test_a_count_that_wraps_around_is_refused(monkeypatch: pytest.MonkeyPatch, queries: int) -> None:
    """A query drawn more often than ``int8`` holds (every drawn index 0: 300 draws, or the hundreds
    added to a poissonized resample) raises ``CountOverflow`` (the caller redoes the chunk wider); the
    same counts in ``int16`` hold and sum to the queries."""
    monkeypatch.setattr(counts, "_MARGIN", 10.0)  # many draws added
    rng = _AlwaysFirst(chunk_generator(0, 0))
    with pytest.raises(counts.CountOverflow):
        counts.resample_counts(rng, torch.empty(2, queries, dtype=torch.int8))  # type: ignore[arg-type]
    wide = torch.empty(2, queries, dtype=torch.int16)
    counts.resample_counts(_AlwaysFirst(chunk_generator(0, 0)), wide)  # type: ignore[arg-type]
    assert (wide.sum(dim=1) == queries).all()
    assert int(wide[:, 0].min()) > 127


@pytest.mark.parametrize("queries", [1000, 9000])
def test_the_same_generator_gives_the_same_counts_in_any_integer_type(queries: int) -> None:
    made = []
    for dtype in (torch.int8, torch.int16, torch.int32):
        made.append(torch.empty(3, queries, dtype=dtype))
        counts.resample_counts(chunk_generator(4, 2), made[-1])
    assert torch.equal(made[0].to(torch.int32), made[2])
    assert torch.equal(made[1].to(torch.int32), made[2])


def test_counts_written_through_a_buffer_equal_counts_written_straight() -> None:
    """Aligned ``int8`` counts take the table's answers straight; unaligned ones (and other types) go
    through a buffer: the same generator gives the same counts either way, and the few counts left
    after whole tuples (``3 x 4099`` is one more than a multiple of 4) complete every resample."""
    buffer = torch.empty(3 * 4099 + 4, dtype=torch.int8)
    aligned, unaligned = buffer[:-4].view(3, 4099).clone(), buffer[1:-3].view(3, 4099)
    assert aligned.data_ptr() % 4 == 0
    assert unaligned.data_ptr() % 4 != 0
    counts.resample_counts(chunk_generator(6, 0), aligned)
    counts.resample_counts(chunk_generator(6, 0), unaligned)
    assert torch.equal(aligned, unaligned)
    assert (aligned.sum(dim=1) == 4099).all()


@pytest.mark.parametrize("seed", range(12))
def test_refused_exactly_where_the_added_draws_could_wrap_a_count(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Every added draw on query 0 of one resample of 5,000 queries, about 106 of them (the most an
    ``int8`` count of at most ``_LARGEST`` Poisson draws can take): ``CountOverflow`` where more than
    ``127 - _LARGEST`` were added, else the ``int8`` counts are the ``int16`` ones (none wrapped)."""
    queries, limit = 5000, 127 - counts._LARGEST
    monkeypatch.setattr(counts, "_MARGIN", limit / math.sqrt(queries))
    tuples = torch.empty(1, queries, dtype=torch.int16)
    counts.poisson_tuples(chunk_generator(seed, 0), tuples.view(-1), counts.poisson_mean(queries))
    added = queries - int(tuples.sum())
    narrow, wide = torch.empty(1, queries, dtype=torch.int8), torch.empty(1, queries, dtype=torch.int16)
    counts.resample_counts(_AlwaysFirst(chunk_generator(seed, 0)), wide)  # type: ignore[arg-type]
    assert int(wide[0, 0]) == int(tuples[0, 0]) + max(added, 0)
    if added > limit:
        with pytest.raises(counts.CountOverflow):
            counts.resample_counts(_AlwaysFirst(chunk_generator(seed, 0)), narrow)  # type: ignore[arg-type]
    else:
        counts.resample_counts(_AlwaysFirst(chunk_generator(seed, 0)), narrow)  # type: ignore[arg-type]
        assert torch.equal(narrow.to(torch.int16), wide)
