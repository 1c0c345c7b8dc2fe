"""The resamples of the randomization and bootstrap tests and intervals, as batched tensor work.

Every function takes ``(Q, m)`` float64 values whose rows are already in a canonical order (see
:func:`canonical_order`), so a result depends on the multiset of the queries, never on the order they
arrived, were merged or gathered in.

**The random numbers** are drawn in chunks of resamples (as many as fit in ``_SIGN_CHUNK`` random
bits or ``_COUNT_CHUNK`` drawn indices, at least one; the chunk sizes depend on the numbers of queries
and resamples alone). Those of chunk ``k`` come from NumPy's SFC64 generator (:func:`chunk_generator`),
on the CPU: the same seed and the same numbers of queries and resamples give the same resamples on
every device. A chunk is kept compact: random bits (sign flips, 1 bit an entry) or resample counts
(``int8``, 1 byte an entry; see ``counts``), drawn in pieces small enough to be reused memory (a fresh
mapping of tens of megabytes for every chunk costs page faults on every call).

**The products** of the signs or counts with the values read them in tiles of float64 of at most
``_TILE_BYTES`` (cache-sized, chosen in bytes, never per CPU): the chunks are taken in groups of at
least ``_SIGN_ROWS`` or ``_COUNT_ROWS`` resamples (half as many from ``_GROUP_BYTES`` on: :func:`groups`,
:func:`group_rows`), each group in tiles of
:func:`tile_shape` (at most ``_TILE_ROWS`` resamples x queries, across the chunks of the group), each
tile unpacked or converted into one reused float64 buffer and multiplied with its slice of the values,
added to the group's sums. The values are padded with zero columns to a multiple of
``_COLUMN_STEP`` (BLAS's (MKL's) fastest product for a few columns: 2 to 3 times faster than 10 or 11
columns on an AVX2 CPU; the zero columns are dropped from the sums). A slice of the values is therefore
read once for a group, whatever the number of queries, and no float64 matrix larger than a tile is ever
written: the cost is linear in the queries and the resamples, the memory bounded by one group buffer a
thread. ``_WORKERS`` threads each draw, build and multiply their own groups (NumPy and torch release
the GIL), each into one buffer made once a call (:func:`resampled_sums`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.comparison.counts import CountOverflow, random_bytes, resample_counts

#: Random bits (queries x resamples) of one chunk of sign flips: the chunks fix the random streams.
_SIGN_CHUNK = 1 << 23
#: Counts (queries x resamples) of one chunk of the bootstrap.
_COUNT_CHUNK = 1 << 20
#: Bytes of one float64 tile of signs or counts, multiplied from cache.
_TILE_BYTES = 1 << 20
#: The same on a GPU: no cache to fit, and one kernel launch per tile.
_DEVICE_TILE_BYTES = 1 << 26
#: Resamples of a group of random bits (at least; 1 bit an entry: memory ``32 Q`` bytes a thread).
_SIGN_ROWS = 256
#: Resamples of a tile (at most): a multiple of 48, so of every kernel height of BLAS's products.
_TILE_ROWS = 240
#: Resamples of a group of resample counts (at least; 1 byte an entry: memory ``32 Q`` bytes a thread).
_COUNT_ROWS = 32
#: Bytes of a thread's group of bits or counts above which it holds half as many resamples (16 MiB:
#: 500,000 queries; a million queries' groups held 64 MB, close to the values of 10 systems).
_GROUP_BYTES = 1 << 24
#: The values' columns are padded with zeros to a multiple of this (BLAS's fastest narrow products).
_COLUMN_STEP = 12
#: Bytes of float64 signs or counts (resamples x queries) at most that are multiplied whole, in the
#: caller's thread (:func:`_direct_sums`): 200 queries x 10,000 resamples.
_DIRECT_BYTES = 1 << 24
#: Threads that draw, build and multiply the groups side by side.
_WORKERS = 2


def canonical_order(values: Tensor | Sequence[Tensor]) -> Tensor:
    """``(Q,)``: the permutation that sorts the queries (the columns of the ``(S, Q)`` finite values, or of
    ``S`` rows of ``Q`` values) by their values, system 0 first, ties broken by the next systems, then by
    the queries' positions: the order of stable sorts by every system, the last first. Done as one sort by
    system 0, then the same stable sorts (the last system first, then the runs of equal values of system
    0) of the tied queries only: one sort where system 0 has no ties, one more than a sort per system
    where most queries tie."""
    order = torch.argsort(values[0], stable=True)
    keys = values[0][order]
    starts = torch.ones_like(keys, dtype=torch.bool)  # where a run of equal values of system 0 starts
    starts[1:] = keys[1:] != keys[:-1]
    alone = starts & torch.cat([starts[1:], starts.new_ones(1)])
    tied = torch.nonzero(~alone).squeeze(1)  # positions in a run of two or more: whole runs, in order
    if len(values) == 1 or tied.numel() == 0:
        return order
    queries, runs = order[tied], torch.cumsum(starts, 0)[tied]
    inner = torch.arange(len(tied), device=keys.device)
    for key in (*(values[s][queries] for s in range(len(values) - 1, 0, -1)), runs):
        inner = inner[torch.argsort(key[inner], stable=True)]
    order[tied] = queries[inner]
    return order


def chunks(n_resamples: int, width: int, entries: int) -> list[int]:
    """Resamples per chunk: as many rows of ``width`` entries as fit in ``entries`` (at least one)."""
    rows = max(1, entries // max(width, 1))
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


def group_rows(least: int, row_bytes: int) -> int:
    """Resamples of a group (at least): ``least``, or half as many where ``least`` rows of ``row_bytes``
    would take more than ``_GROUP_BYTES`` (a tile of half the height is as fast; the memory is halved)."""
    return least if least * row_bytes <= _GROUP_BYTES else max(1, least // 2)


def padded_columns(columns: int) -> int:
    """The columns the values are multiplied with: ``columns`` rounded up to ``_COLUMN_STEP``."""
    return -(-columns // _COLUMN_STEP) * _COLUMN_STEP


def tile_shape(rows: int, columns: int, budget: int | None = None) -> tuple[int, int]:
    """``(resamples, queries)`` of the float64 tiles of groups of ``rows`` resamples times values of
    ``columns`` (padded) columns: at most ``_TILE_ROWS`` resamples, as many queries as fill ``budget``
    bytes (``_TILE_BYTES``, a CPU's cache) with the tile and its slice of the values (a multiple of 8:
    whole bytes of random bits; at least 8)."""
    tall = max(1, min(rows, _TILE_ROWS))
    return tall, max(8, (budget or _TILE_BYTES) // (8 * (tall + columns)) // 8 * 8)


def chunk_generator(seed: int, k: int) -> np.random.Generator:
    """NumPy's SFC64 for chunk ``k``: the seed sequence of ``seed`` with spawn key ``(k,)`` (independent
    streams for every seed and chunk)."""
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(k,))))


def resampled_sums(
    build: Callable[[np.random.Generator, Tensor], None],
    make: Callable[[int], Tensor],
    fill: Callable[[Tensor, int, int, Tensor], None],
    values: Tensor,
    sizes: list[int],
    parts: list[range],
    seed: int,
) -> Tensor:
    """``(resamples, m)``: every group of chunks built and multiplied with the ``(Q, m)`` values, group
    ``g`` by thread ``g % _WORKERS``, into the thread's own buffer ``make(rows)`` (the rows of chunk
    ``k`` filled by ``build(chunk_generator(seed, k), rows)``) and tiles (:func:`group_products`); the
    groups' sums in order. NumPy and torch release the GIL: the threads draw, unpack and multiply side
    by side, each with a one-thread product (:func:`_one_thread_each`). An error or an interrupt in any
    thread stops the others at their next group."""
    if values.shape[1] == padded_columns(values.shape[1]) and values.is_contiguous():
        padded = values  # padded by the caller (``systems.Systems.centred_table``)
    else:
        padded = values.new_zeros(values.shape[0], padded_columns(values.shape[1]))
        padded[:, : values.shape[1]] = values
    if padded.is_cpu and 8 * sum(sizes) * padded.shape[0] <= _DIRECT_BYTES:
        return _direct_sums(build, make, fill, padded, sizes, seed)[:, : values.shape[1]]
    heights = [sum(sizes[k] for k in part) for part in parts]
    budget = _TILE_BYTES if padded.is_cpu else _DEVICE_TILE_BYTES
    tall, wide = tile_shape(max(heights), padded.shape[1], budget)
    out: list[Tensor | None] = [None] * len(parts)
    stop = threading.Event()

    def worker(first: int) -> None:
        with torch.no_grad():
            for g in range(first, len(parts), _WORKERS):
                if stop.is_set():
                    return
                if g == first:  # a thread with a group: its buffers, once
                    block, scratch = make(max(heights)), padded.new_zeros(tall * wide)
                start = 0
                for k in parts[g]:
                    build(chunk_generator(seed, k), block[start : start + sizes[k]])
                    start += sizes[k]
                sums = group_products(block[:start].to(padded.device), padded, (tall, wide), scratch, fill)
                out[g] = sums[:, : values.shape[1]]

    _one_thread_each(worker, stop)
    assert all(sums is not None for sums in out)  # every group, or the error that stopped them
    return torch.cat(out)  # type: ignore[arg-type]


def _direct_sums(
    build: Callable[[np.random.Generator, Tensor], None],
    make: Callable[[int], Tensor],
    fill: Callable[[Tensor, int, int, Tensor], None],
    padded: Tensor,
    sizes: list[int],
    seed: int,
) -> Tensor:
    """:func:`resampled_sums` of a small input (at most ``_DIRECT_BYTES`` of float64 signs or counts), in
    the caller's thread: every chunk built into one block, converted whole and multiplied once (the
    threads, groups and tiles cost more than the work below that size)."""
    block, start = make(sum(sizes)), 0
    for k, size in enumerate(sizes):
        build(chunk_generator(seed, k), block[start : start + size])
        start += size
    weights = padded.new_empty(start, padded.shape[0])
    fill(block, 0, padded.shape[0], weights)
    return weights @ padded


def _one_thread_each(worker: Callable[[int], None], stop: threading.Event) -> None:
    """``worker(0)``, ..., ``worker(_WORKERS - 1)`` in threads of their own, each with torch's thread
    setting 1 (its products single-threaded, the workers side by side). ``torch.set_num_threads`` also
    sets the value a new thread of the process starts from: each worker reads that value first (a new
    thread starts from it), all set theirs, a short-lived thread puts the value back, and only then do
    they start: the rest of the process sees it changed for well under a millisecond, and the caller's
    own setting never. The first error (or an interrupt of the caller) sets ``stop`` and is raised once
    all have stopped."""
    inherited: list[int] = []
    barrier = threading.Barrier(_WORKERS + 1)

    def run(first: int) -> None:
        try:
            inherited.append(torch.get_num_threads())  # a new thread: the process's setting
            barrier.wait()
            torch.set_num_threads(1)
            barrier.wait()
            barrier.wait()  # the process's setting is back
            worker(first)
        except BaseException:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        running = [pool.submit(run, first) for first in range(_WORKERS)]
        try:
            barrier.wait()  # all have read the setting
            barrier.wait()  # all have set theirs
            restore = threading.Thread(target=torch.set_num_threads, args=(inherited[0],))
            restore.start()
            restore.join()
            barrier.wait()
            for done in running:
                done.result()
        except BaseException:
            stop.set()
            barrier.abort()
            raise


def group_products(
    block: Tensor,
    padded: Tensor,
    shape: tuple[int, int],
    scratch: Tensor,
    fill: Callable[[Tensor, int, int, Tensor], None],
) -> Tensor:
    """``(rows, M)``: the block of signs or counts (``rows`` resamples) times the ``(Q, M)`` padded
    values, in float64 tiles of ``shape`` written into ``scratch``: ``fill(rows, lo, hi, tile)``
    writes the entries of queries ``lo:hi`` of the block's ``rows`` into ``tile``, which is multiplied
    with ``padded[lo:hi]`` and added to those rows' sums. A slice of the values is read once for the
    block (it stays in cache across the block's tiles)."""
    (n, columns), (tall, wide), height = padded.shape, shape, block.shape[0]
    sums = padded.new_zeros(height, columns)
    for lo in range(0, n, wide):
        hi = min(n, lo + wide)
        for top in range(0, height, tall):
            bottom = min(height, top + tall)
            tile = scratch[: (bottom - top) * (hi - lo)].view(bottom - top, hi - lo)
            fill(block[top:bottom], lo, hi, tile)
            sums[top:bottom].addmm_(tile, padded[lo:hi])
    return sums


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
    ``8 j + b``; 1: ``+``, 0: ``-``; the bytes of a chunk are its generator's raw outputs, see
    ``counts.random_bytes``), kept packed; the sums are ``2 B x - sum(x)``, ``B x`` multiplied tile by tile
    of the 0/1 matrix ``B`` (unpacked per tile).
    """
    n = values.shape[0]
    width, total = (n + 7) // 8, values.sum(dim=0)
    sizes = chunks(n_resamples, 8 * width, _SIGN_CHUNK)
    parts = groups(sizes, group_rows(_SIGN_ROWS, width))

    def build(rng: np.random.Generator, out: Tensor) -> None:
        out.copy_(torch.from_numpy(random_bytes(rng, out.numel()).reshape(out.shape)))

    def make(rows: int) -> Tensor:
        return torch.empty(rows, width, dtype=torch.uint8)

    return 2 * resampled_sums(build, make, _unpack_bits, values, sizes, parts, seed) - total


def bootstrap_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: the sums of every column of the ``(Q, m)`` values over resamples of the
    ``Q`` rows with replacement (the same resamples for every column).

    Each resample is ``Q`` uniform row indices, kept as the counts ``C`` of a chunk (how often each row
    was drawn, ``int8``; drawn by ``counts.resample_counts``) and the sums are ``C x``, multiplied
    tile by tile. Where a count could wrap around (``counts.CountOverflow``: a query drawn 128 times in
    a resample, or the conservative bound of the poissonized counts, never reached at real sizes) the
    work is redone in ``int16``, then ``int32`` (the same random numbers, the same counts).
    """
    for dtype in (torch.int8, torch.int16):
        try:
            return _bootstrap_sums(values, n_resamples, seed, dtype)
        except CountOverflow:
            continue
    return _bootstrap_sums(values, n_resamples, seed, torch.int32)


def _bootstrap_sums(values: Tensor, n_resamples: int, seed: int, dtype: torch.dtype) -> Tensor:
    """:func:`bootstrap_sums` with counts of ``dtype``; raises ``CountOverflow`` if one could wrap
    around."""
    n = values.shape[0]
    sizes = chunks(n_resamples, n, _COUNT_CHUNK)
    parts = groups(sizes, group_rows(_COUNT_ROWS, n))

    def make(rows: int) -> Tensor:
        return torch.empty(rows, n, dtype=dtype)

    return resampled_sums(resample_counts, make, _convert_counts, values, sizes, parts, seed)
