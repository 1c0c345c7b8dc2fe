"""The resamples of the randomization and bootstrap tests and intervals, as batched tensor work.

Every function takes ``(Q, m)`` float64 values whose rows are already in a canonical order (see
:func:`canonical_order`), so a result depends on the multiset of the queries, never on the order they
arrived, were merged or gathered in. The resamples are processed in chunks of about ``_CHUNK`` entries
(as many resamples as fit, at least one; the chunk sizes depend on the numbers of queries and resamples
alone), each chunk one ``(rows, Q)`` matrix of signs or counts multiplied with the values: the cost is
linear in the number of queries and of resamples, the memory bounded by a few chunks. The random
numbers of chunk ``k`` come from NumPy's PCG64 generator (:func:`chunk_generator`), on the CPU: the
same seed and the same numbers of queries and resamples give the same resamples on every device. The
chunks are drawn and built by ``_WORKERS`` threads while the caller multiplies (NumPy and torch release
the GIL), into rotating buffers (no page faults).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

#: Entries (queries x resamples) of one chunk of random signs or resample counts.
_CHUNK = 1 << 23
#: Threads that draw and build the chunks while the caller multiplies them.
_WORKERS = 2


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


def chunk_generator(seed: int, k: int) -> np.random.Generator:
    """NumPy's PCG64 for chunk ``k``: the seed sequence of ``seed`` with spawn key ``(k,)`` (independent
    streams for every seed and chunk)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(k,))))


def chunk_matrices(
    build: Callable[[np.random.Generator, Tensor], None], sizes: list[int], width: int, seed: int
) -> Iterator[Tensor]:
    """The ``(rows, width)`` float64 matrix of every chunk, in order: chunk ``k`` filled by
    ``build(chunk_generator(seed, k), out)``, in ``_WORKERS`` threads,
    each into one of ``_WORKERS + 1`` rotating buffers (the caller is done with a buffer before it is
    filled again)."""
    with torch.inference_mode(False):  # normal tensors: the threads (not in the caller's mode) write them
        buffers = [
            torch.empty(sizes[0], width, dtype=torch.float64) for _ in range(min(len(sizes), _WORKERS + 1))
        ]

    def job(k: int) -> Tensor:
        out = buffers[k % len(buffers)][: sizes[k]]
        build(chunk_generator(seed, k), out)
        return out

    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        pending = deque(pool.submit(job, k) for k in range(min(_WORKERS, len(sizes))))
        for k in range(len(sizes)):
            ready = pending.popleft().result()
            if k + _WORKERS < len(sizes):
                pending.append(pool.submit(job, k + _WORKERS))
            yield ready


def sign_flip_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: ``sum_q s_q x_q`` of every column of the ``(Q, m)`` values under random
    signs ``s`` (the same signs for every column).

    The signs are random bits, 8 queries to a byte (bit ``b`` of byte ``j`` of a resample: query
    ``8 j + b``; 1: ``+``, 0: ``-``); a chunk of them is unpacked into a 0/1 matrix ``B`` and the sums
    are ``2 B x - sum(x)``, one matrix product per chunk.
    """
    n = values.shape[0]
    width, total = (n + 7) // 8, values.sum(dim=0)
    sizes = chunks(n_resamples, 8 * width)

    def build(rng: np.random.Generator, out: Tensor) -> None:
        packed = rng.integers(0, 256, (out.shape[0], width), dtype=np.uint8)
        out.copy_(torch.from_numpy(np.unpackbits(packed, axis=1, count=n, bitorder="little")))

    parts = [2 * (bits.to(values.device) @ values) - total for bits in chunk_matrices(build, sizes, n, seed)]
    return torch.cat(parts)


def bootstrap_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: the sums of every column of the ``(Q, m)`` values over resamples of the
    ``Q`` rows with replacement (the same resamples for every column).

    Each resample is ``Q`` uniform row indices; a chunk of them becomes a matrix of counts ``C`` (how
    often each row was drawn) and the sums are ``C x``, one matrix product per chunk.
    """
    n = values.shape[0]
    sizes = chunks(n_resamples, n)
    ones = torch.ones((), dtype=torch.float64).expand(sizes[0], n)

    def build(rng: np.random.Generator, out: Tensor) -> None:
        picks = torch.from_numpy(rng.integers(0, n, tuple(out.shape), dtype=np.int64))
        out.zero_().scatter_add_(1, picks, ones[: out.shape[0]])

    return torch.cat([counts.to(values.device) @ values for counts in chunk_matrices(build, sizes, n, seed)])
