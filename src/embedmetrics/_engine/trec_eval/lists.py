"""Ranked lists of grades, one per query, as flat arrays with segment operations: the form every
trec_eval measure reads (``measures``). Queries are segments ``starts[q]:starts[q + 1]`` of the rows,
best first; nothing loops over queries.
"""

from __future__ import annotations

import numpy as np

F64 = np.float64
Array = np.ndarray


class Segments:
    """Rows grouped by query: ``starts`` (``Q + 1`` offsets), each row's query and 0-based position."""

    def __init__(self, starts: Array) -> None:
        self.starts: Array = np.asarray(starts, dtype=np.int64)
        """The ``Q + 1`` row offsets of the queries."""
        self.sizes: Array = np.diff(self.starts)
        """The number of rows of each query."""
        self.n_queries = int(self.sizes.size)
        """The number of queries."""
        self.row_query: Array = np.repeat(np.arange(self.n_queries), self.sizes)
        """Each row's query."""
        self.position: Array = np.arange(self.row_query.size) - self.starts[:-1][self.row_query]
        """Each row's 0-based position in its query's list."""
        self._layout: list[tuple[Array, Array, Array]] | None = None

    @classmethod
    def of_sizes(cls, sizes: Array) -> Segments:
        return cls(np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes, dtype=np.int64)]))

    def count(self, rows: Array) -> Array:
        """Per query: how many of ``rows`` (row indices) are its."""
        return np.bincount(self.row_query[rows], minlength=self.n_queries).astype(np.int64)

    def sum(self, values: Array) -> Array:
        """Per query: the sum of its rows' values (float64), added in row order as trec_eval adds them."""
        if values.dtype.kind in "biu":
            return np.bincount(self.row_query, weights=values, minlength=self.n_queries).astype(F64)
        return self.at(self.cumsum(values.astype(F64, copy=False)), self.sizes)

    def cumsum(self, values: Array) -> Array:
        """Per row: the sum of its query's values up to and including it. Integers: one running sum less
        each query's start (exact). Floats: added in row order within each query (as trec_eval's loops
        add them; a running sum over all queries would round differently), the queries in blocks of
        similar sizes, each padded to a power of two (less than twice the rows in all)."""
        if values.dtype.kind in "biu":
            total = np.cumsum(values, dtype=np.int64)
            before = np.concatenate([np.zeros(1, dtype=np.int64), total])[self.starts[:-1]]
            out: Array = total - before[self.row_query]
            return out
        out = np.empty(values.shape, dtype=F64)
        padded = np.concatenate([values.astype(F64, copy=False), np.zeros(1, dtype=F64)])
        for gather, inside, rows in self._blocks():
            out[rows] = np.cumsum(padded[gather], axis=1).reshape(-1)[inside]
        return out

    def _blocks(self) -> list[tuple[Array, Array, Array]]:
        """``cumsum``'s blocks, computed once: queries whose sizes round up to the same power of two, as
        ``(gather, inside, rows)``: the rows of each query padded to the block's width (the padding points
        past the last row), the padded cells that hold a row (flat), and those rows."""
        if self._layout is None:
            self._layout = []
            width = 2 ** np.ceil(np.log2(np.maximum(self.sizes, 1).astype(F64))).astype(np.int64)
            n_rows = int(self.starts[-1])
            for size in np.unique(width[self.sizes > 0]).tolist():
                queries = np.flatnonzero((width == size) & (self.sizes > 0))
                offsets = np.arange(size)
                mask = offsets[None, :] < self.sizes[queries, None]
                gather = np.where(mask, self.starts[queries, None] + offsets[None, :], n_rows)
                inside = np.flatnonzero(mask.reshape(-1))
                self._layout.append((gather, inside, gather.reshape(-1)[inside]))
        return self._layout

    def at(self, cumulative: Array, count: Array) -> Array:
        """Per query (or per query and column: ``count`` of shape ``(Q,)`` or ``(Q, C)``), a row
        cumulative read after the first ``count`` rows of the query (``count`` at most its size; 0 where
        ``count`` is 0)."""
        query = np.arange(self.n_queries).reshape(-1, *([1] * (count.ndim - 1)))
        return self.at_query(cumulative, query, count)

    def at_query(self, cumulative: Array, query: Array, count: Array) -> Array:
        """``at`` for any queries: the cumulative after the first ``count`` rows of ``query``
        (broadcast together)."""
        padded = np.concatenate([np.zeros(1, dtype=cumulative.dtype), cumulative])
        taken = padded[np.where(count > 0, self.starts[query] + count, 0)]
        out: Array = np.where(count > 0, taken, np.zeros_like(taken))
        return out


def suffix_max(values: Array, segments: Segments) -> Array:
    """Per row: the largest value of its query's rows from it to the end (exact: the values are ranked
    and the ranks, shifted per query, take one running maximum)."""
    if values.size == 0:
        return values
    distinct, rank = np.unique(values, return_inverse=True)
    span = distinct.size
    shift = (segments.n_queries - 1 - segments.row_query) * span
    best = np.maximum.accumulate((rank.reshape(-1) + shift)[::-1])[::-1] - shift
    out: Array = distinct[best]
    return out


def group_sum(query: Array, values: Array, n_queries: int) -> Array:
    """Per query, the sum of ``values`` of the entries of ``query`` (counts: exact in float64), float64."""
    return np.bincount(query, weights=values, minlength=n_queries).astype(F64)


def divide(num: Array, den: Array) -> Array:
    """``num / den`` where ``den`` is not 0, else 0 (trec_eval leaves such a value at 0)."""
    den = np.asarray(den, dtype=F64)
    safe = np.where(den != 0, den, 1.0)
    out: Array = np.where(den != 0, np.asarray(num, dtype=F64) / safe, 0.0)
    return out
