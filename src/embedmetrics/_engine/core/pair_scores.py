"""Similarities of listed (query, document) pairs that do not depend on the matrix-product kernel.

A matrix product may round the same dot product differently at different output positions or in
products of different shapes (CPU edge kernels, GPU tile choices), so the keys of the blocked scan
depend, in the last bits, on the block size and the corpus order. The scores a user receives (the
dense-retrieval run) are therefore recomputed pair by pair: in float64, the products summed by one
reduction of a fixed shape (``CHUNK_ROWS`` rows, zero-padded), so every pair is computed by the same
instructions in the same order wherever it sits, then rounded once to the output dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Rows per reduction call: every call has this exact shape, so its summation order never changes.
CHUNK_ROWS = 1024


def _row_sums(x: Tensor) -> Tensor:
    """Row sums of a ``(CHUNK_ROWS, d)`` tensor (always this shape: one summation order)."""
    return x.sum(dim=1)


def _unit(rows: Tensor, eps: float) -> Tensor:
    return rows / _row_sums(rows * rows).sqrt().clamp_min(eps)[:, None]


def _similarity(q: Tensor, c: Tensor, similarity: str, eps: float) -> Tensor:
    if similarity == "cosine":
        return _row_sums(_unit(q, eps) * _unit(c, eps))
    if similarity == "dot":
        return _row_sums(q * c)
    diff = q - c
    return -_row_sums(diff * diff).sqrt()


def pair_similarity(
    queries: Tensor, docs: Tensor, query_rows: Tensor, doc_rows: Tensor, similarity: str, eps: float = 1e-12
) -> Tensor:
    """Float64 similarity (``-distance`` for euclidean) of ``queries[query_rows[i]]`` and
    ``docs[doc_rows[i]]`` for every ``i``; memory ``O(CHUNK_ROWS × d)``."""
    n, d = query_rows.numel(), queries.shape[1]
    out = torch.empty(n, dtype=torch.float64, device=queries.device)
    q = torch.zeros(CHUNK_ROWS, d, dtype=torch.float64, device=queries.device)
    c = torch.zeros_like(q)
    for lo in range(0, n, CHUNK_ROWS):
        m = min(n, lo + CHUNK_ROWS) - lo
        q[:m], c[:m] = queries[query_rows[lo : lo + m]], docs[doc_rows[lo : lo + m]]
        q[m:], c[m:] = 0, 0
        out[lo : lo + m] = _similarity(q, c, similarity, eps)[:m]
    return out
