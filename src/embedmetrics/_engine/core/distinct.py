"""Identical rows, identical scores: find the distinct rows of an embedding matrix, exactly.

A matrix product does not promise that two identical rows get identical dot products: MKL's and
cuBLAS' kernels treat the edges of the output differently, so the same pair of vectors can score
differently at different output positions (collapsed float64 embeddings scored 0.00-0.04 instead of
0.02 on an AMD EPYC). Ties between identical rows must be decided by the data, not by the kernel,
so the scans compute every *distinct* pair of rows once and weight it by how often it occurs.

``distinct_rows`` groups rows that are bitwise identical (after turning ``-0.0`` into ``0.0``):
a 64-bit hash of each row's bit pattern, one sort of the hashes, then a bitwise check of every row
against its group's first row; a hash collision (distinct rows, equal hash) falls back to an exact
``torch.unique(dim=0)`` on the bit patterns. Rows whose hashes already differ on a few spread-out
columns (``_PROBE_COLUMNS``) are distinct, so wide rows are hashed whole only when that probe finds
equal hashes. The distinct rows come out sorted by hash, which depends only on the set of rows: any
permutation of the input gives the same distinct rows in the same order, so what is computed from
them does not depend on the row order either. When every row is
distinct (the common case), the input is returned as it is and nothing is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

_INT_OF_SIZE = {2: torch.int16, 4: torch.int32, 8: torch.int64}
#: Rows hashed per chunk (bounds the int64 temporaries to about this many bytes).
_HASH_CHUNK_BYTES = 4 * 2**20
_HASH_SEED = 0x5EED


@dataclass
class DistinctRows:
    """The distinct rows of ``(n, d)`` input and how the input maps onto them.

    ``inverse`` and ``counts`` are ``None`` when every input row is distinct: ``rows`` is then the
    input itself (row ``i`` of the input is row ``i`` of ``rows``).
    """

    rows: Tensor  # (u, d)
    inverse: Optional[Tensor] = None  # (n,) int64: input row i is rows[inverse[i]]
    counts: Optional[Tensor] = None  # (u,) int64: how many input rows equal each distinct row

    @property
    def all_distinct(self) -> bool:
        return self.inverse is None

    def index(self) -> Tensor:
        """``inverse``, or ``arange(n)`` when every row is distinct."""
        if self.inverse is not None:
            return self.inverse
        return torch.arange(self.rows.shape[0], device=self.rows.device)

    def weights(self, dtype: torch.dtype) -> Tensor:
        """``counts`` (ones when every row is distinct) in ``dtype``."""
        if self.counts is not None:
            return self.counts.to(dtype)
        return torch.ones(self.rows.shape[0], dtype=dtype, device=self.rows.device)


def canonical(z: Tensor) -> Tensor:
    """``z`` with ``-0.0`` turned into ``0.0`` (equal values, equal bits); other values unchanged."""
    return z + 0.0


def _bits(z: Tensor) -> Tensor:
    return z.view(_INT_OF_SIZE[z.element_size()])


def row_hash(z: Tensor, seed: int = _HASH_SEED) -> Tensor:
    """A 64-bit hash of each row's canonical bit pattern, computed chunk by chunk (no full copy);
    another ``seed`` gives an independent hash."""
    n, d = z.shape
    gen = torch.Generator().manual_seed(seed)
    mult = (torch.randint(0, 2**62, (d,), generator=gen, dtype=torch.int64) * 2 + 1).to(z.device)
    out = torch.empty(n, dtype=torch.int64, device=z.device)
    rows = max(1, _HASH_CHUNK_BYTES // max(1, 8 * d))
    for s in range(0, n, rows):
        chunk = _bits(canonical(z[s : s + rows]).contiguous()).to(torch.int64)
        # wrapping int64 arithmetic: a multiply-add hash of the bit pattern, then a final mix
        h = (chunk * mult).sum(1)
        out[s : s + rows] = h ^ (h >> 29)
    return out


def _first_of_group(inverse: Tensor, groups: int) -> Tensor:
    n = inverse.shape[0]
    first = torch.full((groups,), n, dtype=torch.int64, device=inverse.device)
    return first.scatter_reduce_(0, inverse, torch.arange(n, device=inverse.device), reduce="amin")


#: Columns hashed first: rows that differ on them differ (most embeddings differ on any few columns).
_PROBE_COLUMNS = 32


def _distinct_on_probe(z: Tensor) -> bool:
    """Whether the rows of ``z`` already differ on a few spread-out columns (then they are distinct)."""
    d = z.shape[1]
    if d <= 2 * _PROBE_COLUMNS:
        return False  # as cheap to hash every column
    probe = z[:, :: -(-d // _PROBE_COLUMNS)]
    return int(torch.unique(row_hash(probe)).shape[0]) == z.shape[0]


def distinct_rows(z: Tensor) -> DistinctRows:
    """Group the rows of ``z`` (a 2-D floating tensor) that are bitwise identical after ``canonical``.

    Host sync (data-dependent sizes): for ``compute`` and functional code. When every row is distinct,
    ``z`` itself comes back (nothing is copied); otherwise the distinct rows are canonical. Rows that
    differ on a few spread-out columns are told distinct by hashing those columns only.
    """
    n = z.shape[0]
    if n < 2 or _distinct_on_probe(z):
        return DistinctRows(z)
    hashes, inverse, counts = torch.unique(row_hash(z), return_inverse=True, return_counts=True)
    if hashes.shape[0] == n:  # distinct hashes: distinct rows
        return DistinctRows(z)
    z = canonical(z)
    bits = _bits(z.contiguous())
    first = _first_of_group(inverse, hashes.shape[0])
    if not bool((bits == bits[first[inverse]]).all()):  # a hash collision: exact grouping instead
        keys, inverse, counts = torch.unique(bits, dim=0, return_inverse=True, return_counts=True)
        if keys.shape[0] == n:
            return DistinctRows(z)
        first = _first_of_group(inverse, keys.shape[0])
    return DistinctRows(z[first], inverse, counts)
