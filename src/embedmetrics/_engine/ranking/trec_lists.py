"""Ranked lists of grades, one per query, as flat tensors with segment operations: the form every
trec_eval measure reads (``trec_measures``). Queries are segments ``starts[q]:starts[q + 1]`` of the rows,
best first; nothing loops over queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

F64 = torch.float64


@dataclass
class Segments:
    """Rows grouped by query: ``starts`` (``Q + 1`` offsets), each row's query and 0-based position."""

    starts: Tensor

    def __post_init__(self) -> None:
        self.sizes = self.starts.diff()
        self.n_queries = int(self.sizes.numel())
        self.row_query = torch.repeat_interleave(torch.arange(self.n_queries), self.sizes)
        self.position = torch.arange(self.row_query.numel()) - self.starts[:-1][self.row_query]
        self._layout: list[tuple[Tensor, Tensor, Tensor]] | None = None

    @classmethod
    def of_sizes(cls, sizes: Tensor) -> Segments:
        return cls(torch.cat([sizes.new_zeros(1), sizes.cumsum(0)]))

    def sum(self, values: Tensor) -> Tensor:
        """Per query: the sum of its rows' values (float64), added in row order as trec_eval adds them."""
        if not values.is_floating_point():
            return torch.zeros(self.n_queries, dtype=F64).index_add_(0, self.row_query, values.to(F64))
        return self.at(self.cumsum(values.to(F64)), self.sizes)

    def cumsum(self, values: Tensor) -> Tensor:
        """Per row: the sum of its query's values up to and including it. Integers: one running sum less
        each query's start (exact). Floats: added in row order within each query (as trec_eval's loops
        add them; a running sum over all queries would round differently), the queries in blocks of
        similar sizes, each padded to a power of two (less than twice the rows in all)."""
        if not values.is_floating_point():
            total = values.cumsum(0)
            before = torch.cat([total.new_zeros(1), total])[self.starts[:-1]]
            return total - before[self.row_query]
        out = torch.empty_like(values)
        padded = torch.cat([values, values.new_zeros(1)])
        for gather, inside, rows in self._blocks():
            out[rows] = padded[gather].cumsum(1).reshape(-1)[inside]
        return out

    def _blocks(self) -> list[tuple[Tensor, Tensor, Tensor]]:
        """``cumsum``'s blocks, computed once: queries whose sizes round up to the same power of two, as
        ``(gather, inside, rows)``: the rows of each query padded to the block's width (the padding points
        past the last row), the padded cells that hold a row (flat), and those rows."""
        if self._layout is None:
            self._layout = []
            width = 2 ** torch.ceil(torch.log2(self.sizes.clamp(min=1).to(F64))).long()
            n_rows = int(self.starts[-1])
            for size in torch.unique(width[self.sizes > 0]).tolist():
                queries = torch.nonzero((width == size) & (self.sizes > 0)).reshape(-1)
                offsets = torch.arange(size)
                mask = offsets[None, :] < self.sizes[queries, None]
                gather = torch.where(mask, self.starts[queries, None] + offsets[None, :], n_rows)
                inside = torch.nonzero(mask.reshape(-1)).reshape(-1)
                self._layout.append((gather, inside, gather.reshape(-1)[inside]))
        return self._layout

    def at(self, cumulative: Tensor, count: Tensor) -> Tensor:
        """Per query (or per query and column: ``count`` of shape ``(Q,)`` or ``(Q, C)``), a row
        cumulative read after the first ``count`` rows of the query (``count`` at most its size; 0 where
        ``count`` is 0)."""
        query = torch.arange(self.n_queries).reshape(-1, *([1] * (count.dim() - 1)))
        return self.at_query(cumulative, query, count)

    def at_query(self, cumulative: Tensor, query: Tensor, count: Tensor) -> Tensor:
        """``at`` for any queries: the cumulative after the first ``count`` rows of ``query``
        (broadcast together)."""
        padded = torch.cat([cumulative.new_zeros(1), cumulative])
        taken = padded[torch.where(count > 0, self.starts[query] + count, 0)]
        return torch.where(count > 0, taken, torch.zeros_like(taken))


def suffix_max(values: Tensor, segments: Segments) -> Tensor:
    """Per row: the largest value of its query's rows from it to the end (exact: the values are ranked
    and the ranks, shifted per query, take one running maximum)."""
    if values.numel() == 0:
        return values
    distinct, rank = torch.unique(values, return_inverse=True)
    span = distinct.numel()
    shifted = (rank + (segments.n_queries - 1 - segments.row_query) * span).flip(0)
    best = shifted.cummax(0).values.flip(0) - (segments.n_queries - 1 - segments.row_query) * span
    out: Tensor = distinct[best]
    return out
