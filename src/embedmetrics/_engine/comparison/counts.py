"""The resample counts of the bootstrap: how often each of ``Q`` rows is drawn in a resample of ``Q``
uniform draws with replacement (the multinomial distribution of ``Q`` draws over ``Q`` equally likely
rows), written into a ``(resamples, Q)`` integer tensor from one seeded NumPy generator.

Two exact samplers, chosen by ``Q`` alone:

- **draws** (``Q < _POISSON_FROM``): ``Q`` indices ``rng.integers(0, Q)`` a resample, counted
  (:func:`draw_counts`).
- **poissonized** (larger ``Q``, :func:`poissonized_counts`): independent Poisson counts of mean
  ``λ = 1 - _MARGIN / sqrt(Q)`` for every row, whose total ``T`` falls short of ``Q`` (but for about
  13 resamples in 10,000), then ``Q - T`` more uniform draws added; a resample whose ``T`` exceeds
  ``Q`` has ``T - Q`` of its ``T`` draws taken away, chosen uniformly without replacement. Exact:
  given ``T = t``, independent Poisson counts are distributed as the counts of ``t`` independent
  uniform draws; adding ``Q - t`` more independent uniform draws, or keeping a uniformly chosen ``Q``
  of the ``t``, leaves the counts of ``Q`` independent uniform draws, whatever ``t``.

The Poisson counts come four rows at a time by inversion: a 16-bit random number looks the tuple up
in a table of the tuple's distribution (the likeliest outcomes first); the 1.4% of 16-bit numbers
whose interval straddles a step of that distribution take 8 more random bits and a second table, and
the 1% of those still straddling a 53-bit uniform to finish the inversion (:func:`tuple_table`).
One table lookup (and 2 random bytes) for four counts, where a draw costs a bounded random integer
and a scattered increment: about 4 times fewer CPU cycles.
"""

from __future__ import annotations

import decimal
import functools
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

#: From this many rows on, the counts are poissonized (below, ``Q`` draws are counted).
_POISSON_FROM = 4096
#: ``λ = 1 - _MARGIN / sqrt(Q)``: the Poisson total exceeds ``Q`` with probability about ``Φ(-3)``
#: (0.13% of the resamples have draws taken away: a pass over their counts; the others, about ``3
#: sqrt(Q)`` draws added).
_MARGIN = 3.0
#: Counts of a piece of the poissonized counts (2 bytes of random bits a tuple).
_PIECE = 1 << 20
#: Poisson counts drawn together, by one 16-bit random number.
_CELLS = 4
#: Draws of a piece of the counted draws (8 MiB of ``int64`` indices: memory the allocator reuses).
_DRAW_PIECE = 1 << 20
#: Buckets the added draws are counted in (by the last bits of their flat index: a power of two) to
#: bound how many land on one query of one resample.
_BUCKETS = 4096
#: Largest count of one row in the tuple table (a Poisson count of mean at most 1 is at least 22 with
#: probability below ``1e-21``; such outcomes are left out of the table).
_LARGEST = 21


class CountOverflow(Exception):
    """A count could exceed the largest value of the counts' type (the caller redoes the chunk in a
    wider one: the same random numbers, the same counts)."""


def resample_counts(rng: np.random.Generator, out: Tensor) -> None:
    """``out`` (``(rows, Q)`` integers): the counts of ``rows`` resamples of ``Q`` draws, from ``rng``;
    raises :class:`CountOverflow` where a count wrapped around in ``out``'s type (drawn indices, checked
    from the resamples' sums where ``Q`` exceeds the type's largest value) or where one could
    (poissonized counts: at most ``_LARGEST`` plus the added draws that land on it, bounded from those
    draws; a conservative check, which never fires at the sizes of a real call)."""
    if out.shape[1] < _POISSON_FROM:
        draw_counts(rng, out)
    else:
        poissonized_counts(rng, out)


def draw_counts(rng: np.random.Generator, out: Tensor) -> None:
    """``out`` (``(rows, Q)``, ``Q < _POISSON_FROM``): the counts of ``Q`` indices ``rng.integers(0, Q)``
    a resample, whole resamples drawn a piece of at most ``_DRAW_PIECE`` indices at a time."""
    rows, n = out.shape
    out.zero_()
    step = max(1, _DRAW_PIECE // n)
    ones = torch.ones((), dtype=out.dtype).expand(min(rows, step), n)
    for top in range(0, rows, step):
        piece = out[top : top + step]
        picks = torch.from_numpy(rng.integers(0, n, tuple(piece.shape)))
        piece.scatter_add_(1, picks, ones[: len(piece)])
    if n > torch.iinfo(out.dtype).max:
        _refuse_wrapped(out, n)


def _refuse_wrapped(out: Tensor, total: int) -> None:
    """Raise :class:`CountOverflow` unless every resample's counts still sum to ``total`` (a count that
    wrapped around lowers its resample's sum by a multiple of the type's range)."""
    if not (row_totals(out, -torch.iinfo(out.dtype).min) == total).all():
        raise CountOverflow


def row_totals(out: Tensor, largest: int) -> np.ndarray:
    """``(rows,)`` int64: the sums of the rows of the integer ``out``, every count at most ``largest``
    (at least 1) in magnitude. Where ``largest`` is at most 128 (``int8`` counts, or Poisson counts of
    any type), summed in ``int16`` a block at a time (the most counts that cannot overflow it, a power
    of two: 1,024 Poisson counts, 1.4 times as fast as an ``int32`` sum), then the blocks in ``int64``;
    else in ``int64``."""
    counts = out.numpy()
    rows, n = counts.shape
    if largest > 128:
        wide: np.ndarray = counts.sum(axis=1, dtype=np.int64)
        return wide
    block = 1 << ((32767 // largest).bit_length() - 1)
    whole = n // block * block
    blocks = counts[:, :whole].reshape(rows, whole // block, block).sum(axis=2, dtype=np.int16)
    totals: np.ndarray = blocks.sum(axis=1, dtype=np.int64) + counts[:, whole:].sum(axis=1, dtype=np.int64)
    return totals


def random_bytes(rng: np.random.Generator, count: int) -> np.ndarray:
    """``(count,)`` uint8: the generator's next raw 64-bit outputs as little-endian bytes, in order
    (the leftover bytes of the last output are dropped)."""
    raw = rng.bit_generator.random_raw(-(-count // 8)).astype("<u8", copy=False)
    out: np.ndarray = raw.view(np.uint8)[:count]
    return out


def poisson_mean(n: int) -> float:
    """``λ`` of the poissonized counts of ``n`` rows: ``1 - _MARGIN / sqrt(n)``, at least ``1/2``."""
    return max(0.5, 1.0 - _MARGIN / math.sqrt(n))


class TupleTable(NamedTuple):
    """The distribution of ``_CELLS`` independent Poisson counts, for inversion (:func:`tuple_table`)."""

    #: ``(2**16,)`` int32: the code of the outcome of every 16-bit number, ``-1`` where it straddles.
    table: Tensor
    #: The cumulative distribution of the outcomes, the likeliest first.
    cdf: np.ndarray
    #: ``int32`` codes of the outcomes: the counts as the bytes of an ``int32``, in order.
    codes: np.ndarray
    #: ``(2**16,)``: the row of ``fine`` of every straddling 16-bit number (``-1`` for the others).
    slot: np.ndarray
    #: ``(straddling, 256)`` int32: the same as ``table`` for the 256 parts of every straddling interval.
    fine: np.ndarray


def poisson_pmf(mean: float) -> np.ndarray:
    """``(_LARGEST + 1,)``: Poisson probabilities of 0, ..., ``_LARGEST`` for ``mean``, each correctly
    rounded from 40 significant digits (``decimal``: the same bits on every platform, where ``exp``
    of a C library may differ in its last bit)."""
    with decimal.localcontext() as context:
        context.prec = 40
        first = (-decimal.Decimal(mean)).exp()
        return np.array(
            [float(first * decimal.Decimal(mean) ** i / math.factorial(i)) for i in range(_LARGEST + 1)]
        )


def _codes_of_intervals(cdf: np.ndarray, codes: np.ndarray, low: np.ndarray, width: float) -> np.ndarray:
    """The code every uniform of ``[low, low + width)`` inverts to, or ``-1`` where it straddles a step."""
    first = np.searchsorted(cdf, low, side="right")
    last = np.searchsorted(cdf, low + width, side="left")
    found: np.ndarray = np.where(first == last, codes[np.minimum(first, cdf.size - 1)], -1).astype(np.int32)
    return found


@functools.lru_cache(maxsize=4)
def tuple_table(mean: float) -> TupleTable:
    """The :class:`TupleTable` of Poisson counts of ``mean`` (each at most ``_LARGEST``).

    The outcomes are ordered from the likeliest (ties in lexicographic order), so that the unlikely
    ones crowd into the last few intervals; their cumulative distribution is an exact sum of the
    probabilities rounded to multiples of ``2**-62`` (within ``2.5e-14`` of the true one after 234,256
    terms), and every step of the table is the same on every platform: the probabilities come from
    :func:`poisson_pmf` and IEEE products, the sum from integers. ``table[u]`` is the code of the
    outcome every uniform of ``[u, u + 1) / 2**16`` inverts to, or ``-1`` where that interval
    straddles steps of the distribution (1.4% of them for means near 1); ``fine`` splits each of those
    in 256 parts the same way (1% of their parts still straddle)."""
    k = np.arange(_LARGEST + 1)
    pmf = poisson_pmf(mean)
    probability, codes = pmf, k.astype(np.int64)
    for _ in range(_CELLS - 1):
        probability = np.outer(pmf, probability).ravel()
        codes = (k[:, None] + 256 * codes[None, :]).ravel()
    order = np.argsort(-probability, kind="stable")
    codes = codes[order].astype(np.int32)
    cdf = np.cumsum(np.rint(probability[order] * 2.0**62).astype(np.int64)) / 2.0**62
    table = _codes_of_intervals(cdf, codes, np.arange(1 << 16) / 65536, 1 / 65536)
    straddling = np.flatnonzero(table == -1)
    slot = np.full(1 << 16, -1, dtype=np.int64)
    slot[straddling] = np.arange(straddling.size)
    parts = (straddling[:, None] + np.arange(256)[None, :] / 256) / 65536
    fine = _codes_of_intervals(cdf, codes, parts.ravel(), 1 / (1 << 24)).reshape(-1, 256)
    return TupleTable(torch.from_numpy(table), cdf, codes, slot, fine)


def _invert(tuples: TupleTable, bits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The codes of straddling 16-bit numbers ``bits``: 8 more random bits each (the bytes of the
    generator's next raw outputs) choose a part of the interval in ``fine``; the parts that still
    straddle take a 53-bit uniform and a search of the whole distribution (in increasing order: NumPy
    starts each search where the last one ended)."""
    more = random_bytes(rng, bits.size)
    rows = tuples.slot[bits]
    found: np.ndarray = tuples.fine[rows, more]
    searched = np.flatnonzero(found == -1)
    if searched.size:
        where = (bits[searched] + (more[searched] + rng.random(searched.size)) / 256) / 65536
        order = np.argsort(where)
        found[searched[order]] = _search(tuples, where[order])
    return found


def _search(tuples: TupleTable, uniforms: np.ndarray) -> np.ndarray:
    """The codes of the outcomes the ``uniforms`` invert to."""
    found: np.ndarray = tuples.codes[
        np.minimum(np.searchsorted(tuples.cdf, uniforms, side="right"), tuples.cdf.size - 1)
    ]
    return found


def poisson_tuples(rng: np.random.Generator, out: Tensor, mean: float) -> None:
    """``out`` (flat, any integer type): independent Poisson counts of ``mean``, ``_CELLS`` at a time
    by :func:`tuple_table`, ``_PIECE`` counts at a time (the last few counts from one more tuple, drawn
    by a 53-bit uniform); straight into ``int8`` counts where they are aligned, else through a
    buffer."""
    tuples = tuple_table(mean)
    direct = out.dtype == torch.int8 and out.data_ptr() % 4 == 0
    scratch = None if direct else torch.empty(_PIECE // _CELLS, dtype=torch.int32)
    total = out.numel()
    whole = total - total % _CELLS
    for lo in range(0, whole, _PIECE):
        size = min(_PIECE, whole - lo) // _CELLS
        bits = random_bytes(rng, 2 * size).view("<u2")
        found = out[lo : lo + _CELLS * size].view(torch.int32) if scratch is None else scratch[:size]
        torch.index_select(tuples.table, 0, torch.from_numpy(bits).int(), out=found)
        straddling = np.flatnonzero(found.numpy() == -1)
        if straddling.size:
            found.numpy()[straddling] = _invert(tuples, bits[straddling], rng)
        if scratch is not None:
            out[lo : lo + _CELLS * size].copy_(found.view(torch.int8))
    if whole < total:
        code = int(_search(tuples, rng.random(1))[0])
        out[whole:].copy_(torch.tensor([(code >> (8 * i)) & 255 for i in range(total - whole)]))


def poissonized_counts(rng: np.random.Generator, out: Tensor) -> None:
    """``out`` (``(rows, Q)``): the poissonized counts of the module docstring, from ``rng`` (Poisson
    tuples, then the added draws of every short resample, then the draws taken from every long one).
    A count wraps around only where more than ``max - _LARGEST`` added draws land on one query of one
    resample: the draws are counted in ``_BUCKETS`` buckets by their flat index (a bucket's count at
    least that of any one query it holds; about 12 on average at 4,096 queries, fewer above, where 106
    are allowed), and :class:`CountOverflow` is raised where a bucket holds more (conservative)."""
    rows, n = out.shape
    poisson_tuples(rng, out.view(-1), poisson_mean(n))
    short = n - row_totals(out, _LARGEST)
    added = np.maximum(short, 0)
    picks = np.repeat(np.arange(rows, dtype=np.int64) * n, added) + rng.integers(0, n, int(added.sum()))
    if int(np.bincount(picks & (_BUCKETS - 1), minlength=1).max()) > torch.iinfo(out.dtype).max - _LARGEST:
        raise CountOverflow
    out.view(-1).scatter_add_(0, torch.from_numpy(picks), torch.ones((), dtype=out.dtype).expand(picks.size))
    for r in np.flatnonzero(short < 0):
        row = out[r].numpy()
        kept = np.cumsum(row, dtype=np.int64)
        taken = rng.choice(int(kept[-1]), int(-short[r]), replace=False)
        np.subtract.at(row, np.searchsorted(kept, taken, side="right"), 1)
