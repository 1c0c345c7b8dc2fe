"""Reductions of the embedding family over the blocked similarity scan.

Each metric is split into a *partial* (what one rank computes from its share of the query blocks:
a tensor whose entries add up across ranks) and a *finalize* step (the closed form applied to the
summed partials). :func:`contrastive_accuracy` and :func:`uniformity` glue them together with
:func:`~embedmetrics._engine.scan.all_reduce_sum`, so a sharded scan gives the same value as an
unsharded one, bit for bit: the partials are integer counts or disjoint per-row values.

Contrastive accuracy
    For ``S = z1 @ z2.T`` and the positive ``s_ii`` (the diagonal), query ``i`` in direction
    z1→z2 has ``g = #{j: s_ij > s_ii}`` candidates strictly above its positive and
    ``t = #{j: s_ij == s_ii}`` (itself included) tied with it; direction z2→z1 reads the same
    counts down column ``j`` against ``s_jj``. Both come from the same block: per block row, the
    signs of ``S - s_ii`` summed along the row give ``g - l`` and their absolute values
    ``g + l`` (``l`` = candidates below), and the signs of ``S - s_jj`` summed down the columns
    give the same for the other direction. Float sums of ``{-1, 0, 1}`` are exact integers, and
    the sign of a float difference is exactly the result of the comparison.

    The diagonal is computed first, block by block (the ``B x B`` diagonal tile of each block),
    and written into every similarity block before the comparisons, so the positive's value is
    one number used identically in both directions and in every block.

Uniformity
    Each unordered pair once: block ``[s, e)`` against the columns ``[s, n)``, entries with
    ``j <= i`` masked. Each row gives the log-sum-exp of ``-t * ||z_i - z_j||^2`` over ``j > i``;
    the per-row values of a rank are disjoint from the other ranks', so summing zero-padded
    vectors across ranks gathers them exactly and every rank reduces the same ``n`` values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from embedmetrics._engine.scan import (
    DEFAULT_BLOCK_BYTES,
    all_reduce_sum,
    block_ranges,
    block_rows,
    compute_dtype,
    iter_similarity_blocks,
    l2_normalize,
)

#: Tie policies of contrastive accuracy (see DESIGN.md, "Ties").
TIES = ("average", "pessimistic", "optimistic")

# Largest count that sums of float32 signs represent exactly (2**24).
_EXACT_F32 = 1 << 24


def prepare(z: Tensor, *, normalize: bool, eps: float, dtype: torch.dtype) -> Tensor:
    """Cast ``z`` to the accumulation dtype and optionally L2-normalise its rows."""
    z = z.to(dtype)
    return l2_normalize(z, eps) if normalize else z


# ----------------------------------------------------------------------------- contrastive accuracy


def _diagonal(z1: Tensor, z2: Tensor, rows: int) -> Tensor:
    """``s_ii`` for every ``i``, from the ``B x B`` diagonal tile of each block (same GEMM shapes)."""
    out = torch.empty(z1.shape[0], dtype=z1.dtype, device=z1.device)
    for start, stop in block_ranges(z1.shape[0], rows):
        out[start:stop] = (z1[start:stop] @ z2[start:stop].T).diagonal()
    return out


def _sign_sums(diff: Tensor, dim: int, exact_f32: bool) -> tuple[Tensor, Tensor]:
    """``(sum(sign(diff)), sum(|sign(diff)|))`` along ``dim``, in place on ``diff``, as float64."""
    acc = None if exact_f32 else torch.float64
    diff.sign_()
    signed = diff.sum(dim, dtype=acc)
    diff.abs_()
    return signed.to(torch.float64), diff.sum(dim, dtype=acc).to(torch.float64)


def contrastive_partial(
    z1: Tensor,
    z2: Tensor,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Sign sums of this shard's blocks: rows ``[a_row, b_row, a_col, b_col]``, shape ``(4, n)``.

    ``a = g - l`` and ``b = g + l`` for each query in the z1→z2 (row) and z2→z1 (column)
    direction. Rows outside this shard are zero, so partials of all shards add up to the whole.
    ``z1`` and ``z2`` are prepared (:func:`prepare`) ``(n, d)`` tensors of the same dtype.
    """
    n = z1.shape[0]
    rows = block_rows(n, block_bytes=block_bytes, itemsize=z1.element_size())
    diag = _diagonal(z1, z2, rows)
    exact = z1.dtype == torch.float64 or n < _EXACT_F32
    out = torch.zeros(4, n, dtype=torch.float64, device=z1.device)
    for start, stop, sim in iter_similarity_blocks(z1, z2, block_bytes=block_bytes, shard=shard):
        sim.diagonal(offset=start).copy_(diag[start:stop])
        row_diff = torch.sub(sim, diag[start:stop, None])
        out[0, start:stop], out[1, start:stop] = _sign_sums(row_diff, 1, exact)
        del row_diff
        col_a, col_b = _sign_sums(sim.sub_(diag), 0, exact and stop - start < _EXACT_F32)
        out[2] += col_a
        out[3] += col_b
    return out


def contrastive_finalize(partial: Tensor, ks: Sequence[int], ties: str) -> Tensor:
    """Mean hit@k over both directions from the summed partials: float64 of shape ``(len(ks),)``."""
    n = partial.shape[1]
    a = torch.cat([partial[0], partial[2]])
    b = torch.cat([partial[1], partial[3]])
    above = (a + b) / 2  # g
    tied = (n - b).clamp_min(1)  # t, the positive itself included
    values = []
    for k in ks:
        kk = float(min(k, n))
        if ties == "average":
            hit = ((kk - above) / tied).clamp(0.0, 1.0)
        elif ties == "pessimistic":
            hit = (above + tied <= kk).to(torch.float64)
        else:  # optimistic
            hit = (above < kk).to(torch.float64)
        # NaN similarities (NaN inputs) propagate instead of counting as misses.
        values.append(torch.where(torch.isnan(a), a, hit).mean())
    return torch.stack(values)


def contrastive_accuracy(
    z1: Tensor,
    z2: Tensor,
    *,
    normalize: bool,
    eps: float,
    ks: Sequence[int],
    ties: str,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Contrastive top-k accuracy for every ``k`` in ``ks``, shape ``(len(ks),)``, accumulation dtype."""
    dtype = compute_dtype(z1, z2)
    q = prepare(z1, normalize=normalize, eps=eps, dtype=dtype)
    r = prepare(z2, normalize=normalize, eps=eps, dtype=dtype)
    partial = all_reduce_sum(contrastive_partial(q, r, block_bytes=block_bytes, shard=shard), shard)
    return contrastive_finalize(partial, ks, ties).to(dtype)


# ----------------------------------------------------------------------------- uniformity


def iter_upper_blocks(
    z: Tensor,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Iterator[tuple[int, int, Tensor]]:
    """Yield ``(start, stop, z[start:stop] @ z[start:].T)``: the upper triangle, block row by block row.

    Blocks shrink towards the end, so ranks take every ``world``-th block (strided) rather than a
    contiguous run: that balances the work of a triangle.
    """
    n = z.shape[0]
    rows = block_rows(n, block_bytes=block_bytes, itemsize=z.element_size())
    ranges = block_ranges(n, rows)
    if shard is not None and shard[1] > 1:
        ranges = ranges[shard[0] :: shard[1]]
    for start, stop in ranges:
        yield start, stop, z[start:stop] @ z[start:].T


def uniformity_partial(
    z: Tensor,
    *,
    t: float,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Per-row ``logsumexp_{j > i}(-t * ||z_i - z_j||^2)`` for this shard's rows (others 0), shape ``(n,)``.

    ``z`` is prepared (:func:`prepare`) and should be centred: squared distances come from
    ``||z_i||^2 + ||z_j||^2 - 2 z_i . z_j`` (clamped at 0), whose rounding error grows with the norms.
    """
    n = z.shape[0]
    sq = (z * z).sum(1)
    out = torch.zeros(n, dtype=z.dtype, device=z.device)
    for start, stop, sim in iter_upper_blocks(z, block_bytes=block_bytes, shard=shard):
        # sim becomes -t * d^2 in place: -t * clamp(sq_i + sq_j - 2 s_ij, 0)
        sim.mul_(-2.0).add_(sq[start:stop, None]).add_(sq[None, start:])
        sim.clamp_min_(0.0).mul_(-t)
        b = stop - start
        lower = torch.ones(b, b, dtype=torch.bool, device=z.device).tril_()
        sim[:, :b].masked_fill_(lower, -math.inf)  # j <= i
        out[start:stop] = torch.logsumexp(sim, dim=1)
    return out


def uniformity_finalize(partial: Tensor) -> Tensor:
    """``log`` of the mean over ordered pairs ``i != j`` from the per-row log-sum-exps (float64)."""
    n = partial.shape[0]
    return torch.logsumexp(partial.to(torch.float64), dim=0) - math.log(n * (n - 1) / 2)


def uniformity(
    z: Tensor,
    *,
    normalize: bool,
    t: float,
    eps: float,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Uniformity (0-dim, accumulation dtype) of ``n >= 2`` rows."""
    dtype = compute_dtype(z)
    x = prepare(z, normalize=normalize, eps=eps, dtype=dtype)
    x = x - x.mean(0)  # distances are translation invariant; centring shrinks the rounding error
    partial = all_reduce_sum(uniformity_partial(x, t=t, block_bytes=block_bytes, shard=shard), shard)
    return uniformity_finalize(partial).to(dtype)


# ----------------------------------------------------------------------------- alignment


def alignment_terms(z1: Tensor, z2: Tensor, *, normalize: bool, alpha: float, eps: float) -> Tensor:
    """``||z1_i - z2_i||^alpha`` per row, in the accumulation dtype (differentiable)."""
    dtype = compute_dtype(z1, z2)
    x = prepare(z1, normalize=normalize, eps=eps, dtype=dtype)
    y = prepare(z2, normalize=normalize, eps=eps, dtype=dtype)
    terms: Tensor = (x - y).norm(dim=1).pow(alpha)
    return terms
