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
from collections.abc import Sequence

import torch
from torch import Tensor

from embedmetrics._engine.scan import (
    all_reduce_sum,
    block_ranges,
    block_rows,
    compute_dtype,
    l2_normalize,
    rows_for_shard,
    shard_blocks,
)

#: Default budget of one similarity block for the embedding family (the scan holds about two such
#: blocks). Smaller than the scan's generic default: on a 2-core Xeon, 4-16 MiB blocks were fastest
#: on an idle core (cache-resident) and 32-64 MiB on a busy machine (fewer, larger kernels);
#: 32 MiB is within ~15% of the best in both.
EMBEDDING_BLOCK_BYTES = 32 * 2**20

#: Tie policies of contrastive accuracy (see DESIGN.md, "Ties").
TIES = ("average", "pessimistic", "optimistic")

# Largest count that sums of float32 signs represent exactly (2**24).
_EXACT_F32 = 1 << 24


def prepare(z: Tensor, *, normalize: bool, eps: float, dtype: torch.dtype) -> Tensor:
    """Cast ``z`` to the accumulation dtype and optionally L2-normalise its rows."""
    z = z.to(dtype)
    return l2_normalize(z, eps) if normalize else z


# ----------------------------------------------------------------------------- contrastive accuracy


def _diagonal(z1: Tensor, z2: Tensor, rows: int, shard: tuple[int, int] | None = None) -> Tensor:
    """``s_ii`` from the ``B x B`` diagonal tile of each block (same GEMM shapes).

    With ``shard``, only the tiles of that rank's blocks (the other entries are exact zeros):
    summing the results of all ranks (:func:`contrastive_diagonal`) gives the whole diagonal.
    """
    out = torch.zeros(z1.shape[0], dtype=z1.dtype, device=z1.device)
    for start, stop in shard_blocks(block_ranges(z1.shape[0], rows), shard):
        out[start:stop] = (z1[start:stop] @ z2[start:stop].T).diagonal()
    return out


def contrastive_diagonal(
    z1: Tensor, z2: Tensor, *, block_bytes: int = EMBEDDING_BLOCK_BYTES, shard: tuple[int, int] | None = None
) -> Tensor:
    """The whole diagonal ``s_ii``: each rank computes only its own blocks' tiles and one all-reduce
    assembles them (a collective when sharded: every rank of the group must call it)."""
    rows = block_rows(z1.shape[0], block_bytes=block_bytes, itemsize=z1.element_size())
    rows = rows_for_shard(z1.shape[0], rows, shard)
    return all_reduce_sum(_diagonal(z1, z2, rows, shard), shard)


def _sign_sums(diff: Tensor, ones: Tensor, rows: bool, exact: bool) -> tuple[Tensor, Tensor]:
    """``(sum(sign(diff)), sum(|sign(diff)|))`` along rows or columns, in place on ``diff``, float64.

    Sums of ``{-1, 0, 1}`` are exact integers in a matrix-vector product while they stay below
    ``2**24`` (float32); beyond that (``exact=False``) they are summed in float64.
    """
    diff.sign_()
    if not exact:
        dim = 1 if rows else 0
        signed = diff.sum(dim, dtype=torch.float64)
        return signed, diff.abs_().sum(dim, dtype=torch.float64)
    mat = diff if rows else diff.T
    signed = torch.mv(mat, ones).to(torch.float64)
    diff.abs_()
    return signed, torch.mv(mat, ones).to(torch.float64)


def contrastive_partial(
    z1: Tensor,
    z2: Tensor,
    *,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
    diag: Tensor | None = None,
) -> Tensor:
    """Sign sums of this shard's blocks: rows ``[a_row, b_row, a_col, b_col]``, shape ``(4, n)``.

    ``diag`` is the whole diagonal ``s_ii`` (:func:`contrastive_diagonal`); without it every
    call computes all diagonal tiles itself (no collective).

    ``a = g - l`` and ``b = g + l`` for each query in the z1→z2 (row) and z2→z1 (column)
    direction. Rows outside this shard are zero, so partials of all shards add up to the whole.
    ``z1`` and ``z2`` are prepared (:func:`prepare`) ``(n, d)`` tensors of the same dtype.
    """
    n = z1.shape[0]
    rows = rows_for_shard(n, block_rows(n, block_bytes=block_bytes, itemsize=z1.element_size()), shard)
    diag = _diagonal(z1, z2, rows) if diag is None else diag
    out = torch.zeros(4, n, dtype=torch.float64, device=z1.device)
    ranges = shard_blocks(block_ranges(n, rows), shard)
    if not ranges:
        return out
    rows = max(stop - start for start, stop in ranges)
    sim_buf = torch.empty(rows, n, dtype=z1.dtype, device=z1.device)
    diff_buf = torch.empty_like(sim_buf)
    ones = torch.ones(max(rows, n), dtype=z1.dtype, device=z1.device)
    exact_rows = z1.dtype == torch.float64 or n < _EXACT_F32
    exact_cols = z1.dtype == torch.float64 or rows < _EXACT_F32
    z2t = z2.T
    for start, stop in ranges:
        b = stop - start
        sim = torch.mm(z1[start:stop], z2t, out=sim_buf[:b])
        sim.diagonal(offset=start).copy_(diag[start:stop])
        row_diff = torch.sub(sim, diag[start:stop, None], out=diff_buf[:b])
        out[0, start:stop], out[1, start:stop] = _sign_sums(row_diff, ones[:n], True, exact_rows)
        col_a, col_b = _sign_sums(sim.sub_(diag), ones[:b], False, exact_cols)
        out[2] += col_a
        out[3] += col_b
    return out


def contrastive_finalize(partial: Tensor, ks: Sequence[int], ties: str) -> Tensor:
    """Mean hit@k over both directions from the summed partials: float64 of shape ``(len(ks),)``.

    Under ``"average"`` the hits ``clamp(k - g, 0, t) / t`` are summed per tie size ``t`` first (the
    numerators are integers, exact in float64), so the result is exact where it can be: collapsed
    embeddings give exactly ``k / n``.
    """
    n = partial.shape[1]
    a = torch.cat([partial[0], partial[2]])
    b = torch.cat([partial[1], partial[3]])
    nan = torch.isnan(a).any()  # NaN similarities (NaN inputs) give NaN, not misses
    a = torch.nan_to_num(a)
    b = torch.nan_to_num(b)
    above = (a + b) / 2  # g
    tied = (n - b).clamp_min(1)  # t, the positive itself included
    sizes = torch.arange(n + 1, dtype=torch.float64, device=a.device).clamp_min(1)
    values = []
    for k in ks:
        kk = float(min(k, n))
        if ties == "average":
            numer = torch.minimum((kk - above).clamp_min(0), tied)
            per_size = torch.zeros(n + 1, dtype=torch.float64, device=a.device)
            per_size.index_add_(0, tied.to(torch.int64), numer)
            hits = (per_size / sizes).sum()
        elif ties == "pessimistic":
            hits = (above + tied <= kk).sum().to(torch.float64)
        else:  # optimistic
            hits = (above < kk).sum().to(torch.float64)
        values.append(hits / (2 * n))
    out = torch.stack(values)
    return torch.where(nan, torch.full_like(out, math.nan), out)


def contrastive_accuracy(
    z1: Tensor,
    z2: Tensor,
    *,
    normalize: bool,
    eps: float,
    ks: Sequence[int],
    ties: str,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Contrastive top-k accuracy for every ``k`` in ``ks``, shape ``(len(ks),)``, accumulation dtype."""
    dtype = compute_dtype(z1, z2)
    q = prepare(z1.detach(), normalize=normalize, eps=eps, dtype=dtype)
    r = prepare(z2.detach(), normalize=normalize, eps=eps, dtype=dtype)
    # sharded: each rank computes its own diagonal tiles, not all of them (one all-reduce of n values)
    diag = contrastive_diagonal(q, r, block_bytes=block_bytes, shard=shard)
    partial = contrastive_partial(q, r, block_bytes=block_bytes, shard=shard, diag=diag)
    return contrastive_finalize(all_reduce_sum(partial, shard), ks, ties).to(dtype)


# ----------------------------------------------------------------------------- uniformity


def upper_block_ranges(n: int, rows: int, shard: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """Row blocks of the upper triangle (block ``[s, e)`` pairs with columns ``[s, n)``) of one shard.

    Blocks shrink towards the end, so ranks take every ``world``-th block (strided) rather than a
    contiguous run: that balances the work of a triangle.
    """
    ranges = block_ranges(n, rows)
    if shard is not None and shard[1] > 1:
        ranges = ranges[shard[0] :: shard[1]]
    return ranges


def uniformity_partial(
    z: Tensor,
    *,
    t: float,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Per-row ``logsumexp_{j > i}(-t * ||z_i - z_j||^2)`` for this shard's rows (others 0), shape ``(n,)``.

    ``z`` is prepared (:func:`prepare`) and should be centred: ``-t * ||z_i - z_j||^2`` comes from
    ``min(2t z_i . z_j - t ||z_i||^2 - t ||z_j||^2, 0)``, whose rounding error grows with the norms.
    """
    n = z.shape[0]
    tsq = (z * z).sum(1).mul_(t)
    out = torch.zeros(n, dtype=z.dtype, device=z.device)
    # not capped per shard (rows_for_shard): the triangle's blocks are dealt round-robin, and a
    # different row partition would change the summation order of the sharded result
    rows = min(n, block_rows(n, block_bytes=block_bytes, itemsize=z.element_size()))
    buf = torch.empty(rows * n, dtype=z.dtype, device=z.device)
    ones = torch.ones(n, dtype=z.dtype, device=z.device)
    lower_full = torch.ones(rows, rows, dtype=torch.bool, device=z.device).tril_()
    for start, stop in upper_block_ranges(n, rows, shard):
        b, m = stop - start, n - start
        # -t d^2 = 2t s_ij - t sq_j - t sq_i, clamped at 0 (d^2 >= 0)
        pot = torch.addmm(
            -tsq[None, start:], z[start:stop], z[start:].T, alpha=2.0 * t, out=buf[: b * m].view(b, m)
        )
        pot.sub_(tsq[start:stop, None]).clamp_max_(0.0)
        pot[:, :b].masked_fill_(lower_full[:b, :b], -math.inf)  # pairs j <= i
        top = pot.amax(1)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all-masked rows
        sums = torch.mv(pot.sub_(top[:, None]).exp_(), ones[:m])
        out[start:stop] = sums.log_().add_(top)
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
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Uniformity (0-dim, accumulation dtype) of ``n >= 2`` rows; not differentiable (in-place scan)."""
    dtype = compute_dtype(z)
    x = prepare(z.detach(), normalize=normalize, eps=eps, dtype=dtype)
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
