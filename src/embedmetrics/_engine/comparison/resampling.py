"""The resamples of the randomization and bootstrap tests and intervals, as batched tensor work.

Every function takes ``(Q, m)`` float64 values whose rows are already in a canonical order (see
:func:`canonical_order`), so a result depends on the multiset of the queries, never on the order they
arrived, were merged or gathered in. The random numbers come from NumPy's PCG64 generator seeded with
``seed``, on the CPU, in one fixed layout (resample after resample, query after query): the same seed,
the same numbers of queries and resamples give the same resamples on every device, whatever the
chunking. The resamples are processed in chunks of about ``_CHUNK`` entries (a resample's row of
signs or counts, for as many resamples as fit), each chunk one matrix product with the values: the cost
is linear in the number of queries and of resamples, and the memory is bounded by the chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

#: Entries (queries x resamples) of one chunk of random signs or resample counts.
_CHUNK = 1 << 23


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


def drawn(draw: Callable[[int], np.ndarray], sizes: list[int]) -> Iterator[np.ndarray]:
    """``draw(rows)`` for every chunk size in turn, the next chunk drawn in a worker thread while the
    caller works on the current one (NumPy releases the GIL while it fills an array; one worker: the
    draws come in order, the same numbers as drawn one after the other)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(draw, sizes[0])
        for rows in [*sizes[1:], 0]:
            current = pending.result()
            if rows:
                pending = pool.submit(draw, rows)
            yield current


def sign_flip_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: ``sum_q s_q x_q`` of every column of the ``(Q, m)`` values under random
    signs ``s`` (the same signs for every column).

    The signs are random bits, 8 queries to a byte (bit ``b`` of byte ``j`` of a resample: query
    ``8 j + b``; 1: ``+``, 0: ``-``); a chunk of them is unpacked into a 0/1 matrix ``B`` and the sums
    are ``2 B x - sum(x)``, one matrix product per chunk.
    """
    rng, n = np.random.default_rng(seed), values.shape[0]
    width, total = (n + 7) // 8, values.sum(dim=0)
    sizes = chunks(n_resamples, 8 * width)
    bits = torch.empty(sizes[0], n, dtype=values.dtype, device=values.device)  # reused: no page faults
    parts = []

    def draw(rows: int) -> np.ndarray:
        packed = rng.integers(0, 256, (rows, width), dtype=np.uint8)
        return np.unpackbits(packed, axis=1, count=n, bitorder="little")

    for rows, unpacked in zip(sizes, drawn(draw, sizes)):
        bits[:rows].copy_(torch.from_numpy(unpacked))
        parts.append(2 * (bits[:rows] @ values) - total)
    return torch.cat(parts)


def bootstrap_sums(values: Tensor, n_resamples: int, seed: int) -> Tensor:
    """``(n_resamples, m)``: the sums of every column of the ``(Q, m)`` values over resamples of the
    ``Q`` rows with replacement (the same resamples for every column).

    Each resample is ``Q`` uniform row indices; a chunk of them becomes a matrix of counts ``C`` (how
    often each row was drawn) and the sums are ``C x``, one matrix product per chunk.
    """
    rng, n = np.random.default_rng(seed), values.shape[0]
    sizes = chunks(n_resamples, n)
    counts = torch.empty(sizes[0], n, dtype=values.dtype, device=values.device)  # reused: no page faults
    ones = torch.ones((), dtype=values.dtype, device=values.device).expand(sizes[0], n)
    parts = []
    draws = drawn(lambda rows: rng.integers(0, n, (rows, n), dtype=np.int64), sizes)
    for rows, drawn_picks in zip(sizes, draws):
        picks = torch.from_numpy(drawn_picks).to(values.device)
        counts[:rows].zero_().scatter_add_(1, picks, ones[:rows])
        parts.append(counts[:rows] @ values)
    return torch.cat(parts)
