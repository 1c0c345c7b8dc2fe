"""The resamples of the randomization and bootstrap tests and intervals, as batched tensor work.

Every function takes ``(Q, m)`` float64 values whose rows are already in a canonical order (see
:func:`canonical_order`), so a result depends on the multiset of the queries, never on the order they
arrived, were merged or gathered in.

**The random numbers** are drawn in chunks of about ``_CHUNK`` entries (as many resamples as fit, at
least one; the chunk sizes depend on the numbers of queries and resamples alone). Those of chunk ``k``
come from NumPy's PCG64 generator (:func:`chunk_generator`), on the CPU: the same seed and the same
numbers of queries and resamples give the same resamples on every device. A chunk is kept compact:
random bits (sign flips, 1 bit an entry) or resample counts (``int16``, 2 bytes an entry).

**The products** of the signs or counts with the values read them in tiles of float64 of at most
``_TILE_BYTES`` (cache-sized, chosen in bytes, never per CPU): the chunks are taken in groups of at
least ``_SIGN_ROWS`` or ``_COUNT_ROWS`` resamples (:func:`groups`), each group in tiles of
:func:`tile_shape` (resamples x queries), each tile unpacked or converted into one reused float64
buffer and multiplied with its slice of the values, added to the group's ``(rows, m)`` sums. A slice
of the values is therefore read once for a group, whatever the number of queries (not once for each
chunk, whose rows shrink as the queries grow: a cost quadratic in the queries), and no float64 matrix
larger than a tile is ever written: the cost is linear in the queries and the resamples, the
memory bounded by a few groups. The groups are drawn and built by ``_WORKERS`` threads while the
caller multiplies (NumPy and torch release the GIL), into rotating buffers (no page faults).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

#: Entries (queries x resamples) of one chunk of random numbers: the chunks fix the random streams.
_CHUNK = 1 << 23
#: Bytes of one float64 tile of signs or counts, multiplied from cache.
_TILE_BYTES = 1 << 20
#: Resamples of a group of random bits (at least; 1 bit an entry: memory ``32 Q`` bytes).
_SIGN_ROWS = 256
#: Resamples of a tile (at most): a multiple of 48, so of every kernel height of BLAS's products.
_TILE_ROWS = 240
#: Resamples of a group of resample counts (at least; 2 bytes an entry: memory ``64 Q`` bytes).
_COUNT_ROWS = 32
#: Threads that draw and build the groups while the caller multiplies them.
_WORKERS = 2


class _CountOverflow(Exception):
    """A resample drew one query more often than ``int16`` counts (never seen: the counts are redone
    in ``int32``)."""


def canonical_order(values: Tensor) -> Tensor:
    """``(Q,)``: the permutation that sorts the queries (the columns of the ``(S, Q)`` values) by their
    values, system 0 first, ties broken by the next systems (a stable sort per key, last key first)."""
    order = torch.arange(values.shape[1], device=values.device)
    for row in values.flip(0):
        order = order[torch.argsort(row[order], stable=True)]
    return order


def chunks(n_resamples: int, width: int) -> list[int]:
    """Resamples per chunk: as many rows of ``width`` entries as fit in ``_CHUNK`` (at least one)."""
    rows = max(1, _CHUNK // max(width, 1))
    return [min(rows, n_resamples - start) for start in range(0, n_resamples, rows)]


def groups(sizes: list[int], rows: int) -> list[range]:
    """The chunks (their indices) in consecutive groups of at least ``rows`` resamples (the last group
    may hold fewer)."""
    out, start, held = [], 0, 0
    for k, size in enumerate(sizes):
        held += size
        if held >= rows:
            out.append(range(start, k + 1))
            start, held = k + 1, 0
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def tile_shape(rows: int, columns: int) -> tuple[int, int]:
    """``(resamples, queries)`` of the float64 tiles of chunks of ``rows`` resamples times values of
    ``columns`` columns: at most ``_TILE_ROWS`` resamples, as many queries as fill ``_TILE_BYTES`` with
    the tile and its slice of the values (a multiple of 8: whole bytes of random bits; at least 8)."""
    tall = max(1, min(rows, _TILE_ROWS))
    return tall, max(8, _TILE_BYTES // (8 * (tall + columns)) // 8 * 8)


def row_tiles(sizes: list[int], tall: int) -> list[tuple[int, int, int]]:
    """The tiles' rows in a group of chunks of ``sizes`` resamples: ``(chunk, first, end)``, every
    chunk's rows from its first, ``tall`` at a time. A tile never straddles two chunks, starts a
    multiple of ``_TILE_ROWS`` rows into its chunk and its sums are rows of the chunk's own (aligned)
    sums, so every row meets BLAS's kernels where one product of the whole chunk would put it: the
    sums do not depend on the grouping or the tiles (bit for bit)."""
    return [(k, top, min(size, top + tall)) for k, size in enumerate(sizes) for top in range(0, size, tall)]


def chunk_generator(seed: int, k: int) -> np.random.Generator:
    """NumPy's PCG64 for chunk ``k``: the seed sequence of ``seed`` with spawn key ``(k,)`` (independent
    streams for every seed and chunk)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(k,))))


def group_blocks(
    build: Callable[[np.random.Generator, Tensor], None],
    sizes: list[int],
    parts: list[range],
    make: Callable[[int], Tensor],
    seed: int,
) -> Iterator[Tensor]:
    """The block of every group of chunks, in order: the rows of chunk ``k`` filled by
    ``build(chunk_generator(seed, k), rows)``, in ``_WORKERS`` threads, each group into one of
    ``_WORKERS + 1`` rotating buffers ``make(rows)`` (the caller is done with a buffer before it is
    filled again)."""
    tallest = max(sum(sizes[k] for k in part) for part in parts)
    with torch.inference_mode(False):  # normal tensors: the threads (not in the caller's mode) write them
        buffers = [make(tallest) for _ in range(min(len(parts), _WORKERS + 1))]

    def job(g: int) -> Tensor:
        out, start = buffers[g % len(buffers)], 0
        for k in parts[g]:
            build(chunk_generator(seed, k), out[start : start + sizes[k]])
            start += sizes[k]
        return out[:start]

    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        pending = deque(pool.submit(job, g) for g in range(min(_WORKERS, len(parts))))
        for g in range(len(parts)):
            ready = pending.popleft().result()
            if g + _WORKERS < len(parts):
                pending.append(pool.submit(job, g + _WORKERS))
            yield ready


def tiled_products(
    blocks: Iterator[Tensor],
    values: Tensor,
    parts: list[list[int]],
    fill: Callable[[Tensor, int, int, Tensor], None],
) -> Tensor:
    """``(resamples, m)``: every block of signs or counts (a group of chunks of ``parts[g]``
    resamples) times the ``(Q, m)`` values, in float64 tiles of :func:`tile_shape` written into one
    reused buffer: ``fill(rows, lo, hi, tile)`` writes the entries of queries ``lo:hi`` of the block's
    ``rows`` into ``tile``, which is multiplied with ``values[lo:hi]`` and added to those rows' sums
    (:func:`row_tiles`). A slice of the values is read once for every block (it stays in cache across
    the block's tiles)."""
    (n, m), out = values.shape, []
    tall, wide = tile_shape(max(max(sizes) for sizes in parts), m)
    scratch = torch.zeros(tall * wide, dtype=values.dtype, device=values.device)
    for block, sizes in zip(blocks, parts):
        block = block.to(values.device)  # compact: random bits or int16 counts
        sums = [values.new_zeros(size, m) for size in sizes]
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        for lo in range(0, n, wide):
            hi = min(n, lo + wide)
            for k, top, bottom in row_tiles(sizes, tall):
                tile = scratch[: (bottom - top) * (hi - lo)].view(bottom - top, hi - lo)
                fill(block[starts[k] + top : starts[k] + bottom], lo, hi, tile)
                sums[k][top:bottom].addmm_(tile, values[lo:hi])
        out.extend(sums)
    return torch.cat(out)


def _unpack_bits(bits: Tensor, lo: int, hi: int, out: Tensor) -> None:
    """``out``: the 0/1 signs of queries ``lo:hi`` (``lo`` a multiple of 8) of the packed ``bits``."""
    part = bits[:, lo // 8 : (hi + 7) // 8]
    if part.is_cpu:
        out.copy_(torch.from_numpy(np.unpackbits(part.numpy(), axis=1, count=hi - lo, bitorder="little")))
    else:
        out.copy_(unpack_bits_on_device(part, hi - lo))


def unpack_bits_on_device(part: Tensor, count: int) -> Tensor:
    """``(rows, count)`` uint8: NumPy's ``unpackbits(part, axis=1, count=count, bitorder="little")`` in
    torch operations, on ``part``'s device."""
    shifts = torch.arange(8, dtype=torch.uint8, device=part.device)
    return ((part[:, :, None] >> shifts) & 1).flatten(1)[:, :count]


def _convert_counts(counts: Tensor, lo: int, hi: int, out: Tensor) -> None:
    """``out``: the counts of queries ``lo:hi``, as float64."""
    out.copy_(counts[:, lo:hi])


def sign_flip_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: ``sum_q s_q x_q`` of every column of the ``(Q, m)`` values under random
    signs ``s`` (the same signs for every column).

    The signs are random bits, 8 queries to a byte (bit ``b`` of byte ``j`` of a resample: query
    ``8 j + b``; 1: ``+``, 0: ``-``), drawn chunk by chunk and kept packed; the sums are
    ``2 B x - sum(x)``, ``B x`` multiplied tile by tile of the 0/1 matrix ``B`` (unpacked per tile).
    """
    n = values.shape[0]
    width, total = (n + 7) // 8, values.sum(dim=0)
    sizes = chunks(n_resamples, 8 * width)
    parts = groups(sizes, _SIGN_ROWS)

    def build(rng: np.random.Generator, out: Tensor) -> None:
        out.copy_(torch.from_numpy(rng.integers(0, 256, tuple(out.shape), dtype=np.uint8)))

    blocks = group_blocks(build, sizes, parts, lambda rows: torch.empty(rows, width, dtype=torch.uint8), seed)
    return (
        2 * tiled_products(blocks, values, [[sizes[k] for k in part] for part in parts], _unpack_bits) - total
    )


def bootstrap_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: the sums of every column of the ``(Q, m)`` values over resamples of the
    ``Q`` rows with replacement (the same resamples for every column).

    Each resample is ``Q`` uniform row indices; a chunk of them becomes a matrix of counts ``C`` (how
    often each row was drawn, ``int16``) and the sums are ``C x``, multiplied tile by tile.
    """
    try:
        return _bootstrap_sums(values, n_resamples, seed, torch.int16)
    except _CountOverflow:
        return _bootstrap_sums(values, n_resamples, seed, torch.int32)


def _bootstrap_sums(values: Tensor, n_resamples: int, seed: int, dtype: torch.dtype) -> Tensor:
    """:func:`bootstrap_sums` with counts of ``dtype``; raises ``_CountOverflow`` if one wraps around."""
    n = values.shape[0]
    sizes = chunks(n_resamples, n)
    parts = groups(sizes, _COUNT_ROWS)
    ones = torch.ones((), dtype=dtype).expand(sizes[0], n)
    exact = n <= torch.iinfo(dtype).max  # a count is at most n

    def build(rng: np.random.Generator, out: Tensor) -> None:
        picks = torch.from_numpy(rng.integers(0, n, tuple(out.shape), dtype=np.int64))
        out.zero_().scatter_add_(1, picks, ones[: out.shape[0]])
        if not exact and not bool((out.sum(dim=1, dtype=torch.int64) == n).all()):
            raise _CountOverflow  # a wrapped count lowers its resample's total below n

    blocks = group_blocks(build, sizes, parts, lambda rows: torch.empty(rows, n, dtype=dtype), seed)
    spans = [[sizes[k] for k in part] for part in parts]
    return tiled_products(blocks, values, spans, _convert_counts)
