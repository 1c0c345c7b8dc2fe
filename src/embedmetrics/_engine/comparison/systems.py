"""The systems compared: their per-query values as rows, in the canonical order, read in blocks.

``compare`` of ``S`` systems on ``Q`` queries tests ``P = S (S - 1) / 2`` pairs. Nothing here holds the
``(P, Q)`` differences: a pair's mean and standard deviation are reduced from blocks of its differences
(``_DIFFERENCE_BYTES`` at most), the resampling tests multiply one ``(Q, S + 1)`` table, and the rows
are put in the canonical order as they are read. The working set is the table and one block, whatever
the number of pairs.

Bits. torch reduces a row of a matrix of two or more rows whole, on one thread; a matrix of one row
(``P = 1``, ``paired_test``) it splits across threads from 32,768 values on, so its sum depended on the
thread count. Every reduction here takes at least two rows (a lone row is reduced beside a copy of
itself): a pair's mean and deviation are the same bits in any block, for any number of pairs and
threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from embedmetrics._engine.comparison.resampling import canonical_order, padded_columns

#: Bytes of one block of differences (float64 rows of ``Q`` values, two rows at least).
_DIFFERENCE_BYTES = 1 << 25
#: Bytes of a comparison that are never checked against the memory at hand (reading it costs more).
_ALWAYS_FITS = 1 << 26
#: Bytes of a block of differences at least, where a quarter of the systems' rows would be smaller.
_SMALL_BLOCK = 1 << 22
#: Bytes of the per-pair results held at once (float64), beside the resampled statistics.
_PAIR_RESULTS = 12


class ComparisonTooLargeError(ValueError, MemoryError):
    """The pairs' results of a comparison cannot fit in the memory at hand."""


class Systems:
    """``S`` systems' per-query values: ``rows`` (``S`` checked 1-D float64 rows of ``Q`` values, in the
    caller's query order) and ``order``, the canonical order of the queries (``canonical_order``)."""

    def __init__(self, rows: Sequence[Tensor]) -> None:
        self.rows = list(rows)
        self.n = int(self.rows[0].shape[0])
        self.order: Tensor | None = canonical_order(self.rows)
        self._ordered: Tensor | None = None

    @property
    def block_rows(self) -> int:
        """Rows of a block of differences at most: a quarter of the systems, or as many rows as fill
        ``_SMALL_BLOCK`` bytes where that is more (many short rows: few, larger reductions)."""
        return max(len(self.rows) // 4, _SMALL_BLOCK // (8 * max(self.n, 1)))

    def pair(self, a: int, b: int) -> tuple[Tensor, Tensor]:
        """``(left, right)`` of the one pair ``(a, b)``, on the rows' device."""
        device = self.rows[0].device
        return torch.tensor([a], device=device), torch.tensor([b], device=device)

    def row(self, s: int) -> Tensor:
        """System ``s``'s values in the canonical order."""
        if self._ordered is not None:
            return self._ordered[s]
        return self.rows[s] if self.order is None else self.rows[s][self.order]

    def hold_ordered(self, hold: bool) -> None:
        """With ``hold``, keep every row in the canonical order (``(S, Q)``: the values' own size) until
        ``hold_ordered(False)``: a pair's rows are then read in place, not gathered again for every pair."""
        self._ordered = None
        if hold:
            self._ordered = self.rows[0].new_empty(len(self.rows), self.n)
            for s, row in enumerate(self.rows):
                self._ordered[s] = row if self.order is None else row[self.order]

    def means(self) -> Tensor:
        """``(S,)``: each system's mean over the queries (canonical order)."""
        return torch.cat(
            [
                _row_reduce(self._block(b, self.row), "mean")
                for b in _blocks(len(self.rows), self.n, self.block_rows)
            ]
        )

    def moments(self, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(mean, sd, first)`` of every pair's differences ``row(left[p]) - row(right[p])``: their mean,
        standard deviation (``Q - 1`` degrees of freedom) and first value, a block of pairs at a time (its
        rows gathered from the rows in the canonical order at once)."""
        means, sds, firsts = [], [], []
        self.hold_ordered(True)
        ordered = self._ordered
        assert ordered is not None
        for block in _blocks(left.numel(), self.n, self.block_rows):
            d = ordered.index_select(0, left[block.start : block.stop])
            d.sub_(ordered.index_select(0, right[block.start : block.stop]))
            means.append(_row_reduce(d, "mean"))
            sds.append(_row_reduce(d, "std"))
            firsts.append(d[:, 0].clone())
        self.hold_ordered(False)
        return torch.cat(means), torch.cat(sds), torch.cat(firsts)

    def _block(self, block: range, row: Callable[[int], Tensor]) -> Tensor:
        """``(len(block), Q)``: ``row(k)`` for every ``k`` of ``block``, written into one buffer."""
        out = self.rows[0].new_empty(len(block), self.n)
        for at, k in enumerate(block):
            out[at] = row(k)
        return out

    def difference(self, a: int, b: int) -> Tensor:
        """``(Q,)``: the differences of systems ``a`` and ``b``, canonical order."""
        return self.row(a) - self.row(b)

    def centred_table(self, ones: bool) -> Tensor:
        """``(Q, padded)`` zeros but for column ``s``: ``row(s) - row(s)[0]`` (every system minus its own
        first value), and with ``ones`` a column of ones after them; padded with zero columns to
        ``resampling.padded_columns`` (the table the resampling kernels multiply as it is)."""
        count = len(self.rows) + int(ones)
        table = self.rows[0].new_zeros(self.n, padded_columns(count))
        for s in range(len(self.rows)):
            row = self.row(s)
            table[:, s] = row - row[0]
        if ones:
            table[:, count - 1] = 1.0
        return table

    def release(self) -> None:
        """Drop the rows and their order (never read again: the table is what the resampling multiplies)."""
        self.rows, self.order, self._ordered = self.rows[:1], None, None


def _blocks(count: int, n: int, most: int) -> list[range]:
    """``range(count)`` in blocks of as many rows of ``n`` float64 values as fit in
    ``_DIFFERENCE_BYTES``, at most ``most`` rows, at least two."""
    size = max(2, min(_DIFFERENCE_BYTES // (8 * max(n, 1)), most))
    return [range(start, min(count, start + size)) for start in range(0, count, size)]


def _row_reduce(rows: Tensor, how: str) -> Tensor:
    """The mean (``how="mean"``) or the standard deviation (``"std"``) of each row of ``rows``, reduced
    from at least two rows (see the module docstring)."""
    lone = rows.shape[0] == 1
    block = torch.cat([rows, rows]) if lone else rows
    out = block.mean(dim=1) if how == "mean" else block.std(dim=1)
    return out[:1] if lone else out


def memory_at_hand(device: torch.device) -> int:
    """Bytes that can still be allocated: a CUDA device's free memory, else the host's available memory
    (``MemAvailable`` of ``/proc/meminfo``; the free physical pages where there is none)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: nothing is refused


def comparison_bytes(systems: int, queries: int, n_resamples: int, resampling: bool) -> int:
    """The bytes a comparison of ``systems`` on ``queries`` holds beyond its inputs: the pairs' results,
    the significance matrix, and for the resampling tests the ``(Q, S + 1)`` table and the resampled
    sums of every system."""
    pairs = systems * (systems - 1) // 2
    total = pairs * 8 * _PAIR_RESULTS + 2 * systems * systems
    if resampling:
        total += 8 * padded_columns(systems + 1) * (queries + n_resamples)
    return total


def check_fits(shape: tuple[int, int], n_resamples: int, resampling: bool, device: torch.device) -> None:
    """Refuse, before allocating anything, a comparison whose pairs cannot fit in the memory at hand."""
    systems, queries = shape
    need = comparison_bytes(systems, queries, n_resamples, resampling)
    if need <= _ALWAYS_FITS:
        return
    have = memory_at_hand(device)
    if need > have:
        pairs = systems * (systems - 1) // 2
        raise ComparisonTooLargeError(
            f"Argument `values` of {systems} systems on {queries} queries (shape {shape}) makes {pairs} "
            f"pairs whose results need about {_gigabytes(need)}, more than the {_gigabytes(have)} of "
            f"memory at hand on {device.type}: compare fewer systems, queries or resamples at once."
        )


def _gigabytes(count: int) -> str:
    return f"{count / 2**30:.3g} GiB" if count < 2**60 else f"2^{math.log2(count):.0f} bytes"
