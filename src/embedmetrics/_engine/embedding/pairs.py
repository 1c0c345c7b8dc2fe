"""Reductions of the embedding family over the blocked similarity scan.

Each metric is split into a *partial* (what one rank computes from its share of the query blocks:
a tensor whose entries add up across ranks) and a *finalize* step (the closed form applied to the
summed partials). ``contrastive_accuracy`` and ``uniformity`` glue them together with
``all_reduce_sum``, so a sharded scan gives the same value as an
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
    Each unordered pair once: tile ``[s, e)`` against the columns ``[s, n)``, entries with
    ``j <= i`` masked (fixed tiles: no block size changes a bit). Each row gives the log-sum-exp
    of ``-t * ||z_i - z_j||^2`` over ``j > i``; the per-row values of a rank are disjoint from the
    other ranks', so summing zero-padded vectors across ranks gathers them exactly and every rank
    reduces the same ``n`` values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import normalize_ks
from embedmetrics._engine.core.distinct import distinct_rows
from embedmetrics._engine.core.fused import fused_sign_counts
from embedmetrics._engine.core.scan import (
    all_reduce_sum,
    block_budget,
    block_ranges,
    compute_dtype,
    l2_normalize,
    plan_blocks,
    shard_blocks,
)

#: Default budget of one similarity block for the embedding family (the scan holds about two such
#: blocks). Smaller than the scan's generic default: on a 2-core Xeon, 4-16 MiB blocks were fastest
#: on an idle core (cache-resident) and 32-64 MiB on a busy machine (fewer, larger kernels);
#: 32 MiB is within ~15% of the best in both.
EMBEDDING_BLOCK_BYTES = 32 * 2**20

# Largest count that sums of float32 signs represent exactly (2**24).
_EXACT_F32 = 1 << 24

TopK = Union[int, Sequence[int]]


# ----------------------------------------------------------------------------- options


def topk_cutoffs(topk: Any) -> tuple[tuple[int, ...], bool]:
    """The cut-offs of a checked ``topk``, and whether it was a scalar."""
    ks, single = normalize_ks("topk", topk, allow_none=False)
    return tuple(k for k in ks if k is not None), single


def prepare(z: Tensor, *, normalize: bool, eps: float, dtype: torch.dtype) -> Tensor:
    """Cast ``z`` to the accumulation dtype and optionally L2-normalise its rows."""
    z = z.to(dtype)
    return l2_normalize(z, eps) if normalize else z


# ----------------------------------------------------------------------------- contrastive accuracy


def _diagonal(z1: Tensor, z2: Tensor, rows: int, shard: tuple[int, int] | None = None) -> Tensor:
    """``s_ii`` from the ``B x B`` diagonal tile of each block (same GEMM shapes).

    With ``shard``, only the tiles of that rank's blocks (the other entries are exact zeros):
    summing the results of all ranks (``contrastive_diagonal``) gives the whole diagonal.
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
    rows, _ = plan_blocks(z1.shape[0], z1.shape[0] * z1.element_size(), block_bytes, shard)
    return all_reduce_sum(_diagonal(z1, z2, rows, shard), shard)


def contrastive_partial(
    z1: Tensor,
    z2: Tensor,
    *,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
    diag: Tensor | None = None,
) -> Tensor:
    """Sign sums of this shard's blocks: rows ``[a_row, b_row, a_col, b_col]``, shape ``(4, n)``.

    ``diag`` is the whole diagonal ``s_ii`` (``contrastive_diagonal``); without it every
    call computes all diagonal tiles itself (no collective).

    ``a = g - l`` and ``b = g + l`` for each query in the z1→z2 (row) and z2→z1 (column)
    direction. Rows outside this shard are zero, so partials of all shards add up to the whole.
    ``z1`` and ``z2`` are prepared (``prepare``) ``(n, d)`` tensors of the same dtype.
    """
    n = z1.shape[0]
    rows, ranges = plan_blocks(n, n * z1.element_size(), block_bytes, shard)
    diag = _diagonal(z1, z2, rows) if diag is None else diag
    out = torch.zeros(4, n, dtype=torch.float64, device=z1.device)
    if not ranges:
        return out
    rows = max(stop - start for start, stop in ranges)
    sim_buf = torch.empty(rows, n, dtype=z1.dtype, device=z1.device)
    diff_buf = torch.empty_like(sim_buf)
    slice_rows = compare_slice_rows(n, z1.element_size(), z1.device)
    ones = torch.ones(max(rows, n), dtype=z1.dtype, device=z1.device)
    exact_rows = z1.dtype == torch.float64 or n < _EXACT_F32
    exact_cols = z1.dtype == torch.float64 or rows < _EXACT_F32
    compare = exact_rows and exact_cols and _finite_products(z1, z2)
    z2t = z2.T
    for start, stop in ranges:
        b = stop - start
        sim = torch.mm(z1[start:stop], z2t, out=sim_buf[:b])
        sim.diagonal(offset=start).copy_(diag[start:stop])
        fused = fused_sign_counts(sim, diag[start:stop], diag) if b == rows else None
        if fused is not None:  # the same integers as the eager passes below, in one or two passes
            out[0, start:stop], out[1, start:stop] = fused[0].double(), fused[1].double()
            out[2] += fused[2].double()
            out[3] += fused[3].double()
            continue
        if compare:  # the same integers, from four comparisons of each slice of the block
            counts = _compared_sums(sim, diag[start:stop], diag, ones, diff_buf[:slice_rows])
            out[0, start:stop], out[1, start:stop] = counts[0], counts[1]
            out[2] += counts[2]
            out[3] += counts[3]
            continue
        row_diff = torch.sub(sim, diag[start:stop, None], out=diff_buf[:b])
        out[0, start:stop], out[1, start:stop] = _weighted_sign_sums(row_diff, ones[:n], 1, exact_rows)
        col_a, col_b = _weighted_sign_sums(sim.sub_(diag), ones[:b], 0, exact_cols)
        out[2] += col_a
        out[3] += col_b
    return out


def contrastive_finalize(
    partial: Tensor, ks: Sequence[int], ties: str, *, n: int | None = None, weights: Tensor | None = None
) -> Tensor:
    """Mean hit@k over both directions from the summed partials: float64 of shape ``(len(ks),)``.

    ``partial`` holds ``[a_row, b_row, a_col, b_col]`` per query (or per distinct positive pair, each
    standing for ``weights[p]`` queries); ``n`` is the number of candidates (rows) of each direction.
    Under ``"average"`` the hits ``clamp(k - g, 0, t) / t`` are summed per tie size ``t`` first (the
    numerators are integers, exact in float64), so the result is exact where it can be: collapsed
    embeddings give exactly ``k / n``.
    """
    n = partial.shape[1] if n is None else n
    w = (
        torch.ones(partial.shape[1], dtype=torch.float64, device=partial.device)
        if weights is None
        else weights
    )
    w = torch.cat([w, w]).to(torch.float64)
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
            numer = torch.minimum((kk - above).clamp_min(0), tied) * w
            per_size = torch.zeros(n + 1, dtype=torch.float64, device=a.device)
            per_size.index_add_(0, tied.to(torch.int64), numer)
            hits = (per_size / sizes).sum()
        elif ties == "pessimistic":
            hits = torch.where(above + tied <= kk, w, 0.0).sum()
        else:  # optimistic
            hits = torch.where(above < kk, w, 0.0).sum()
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
    block_bytes: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Contrastive top-k accuracy for every ``k`` in ``ks``, shape ``(len(ks),)``, accumulation dtype.

    Identical rows get identical similarities (see ``embedmetrics._engine.core.distinct``): with no
    repeated row in either view the plain blocked scan runs; otherwise every distinct pair of rows is
    computed once (``weighted_contrastive_partial``). ``block_bytes=None``: chosen for the
    device (``block_budget``).
    """
    dtype = compute_dtype(z1, z2)
    block_bytes = block_budget(block_bytes, z1.device, EMBEDDING_BLOCK_BYTES)
    d1 = distinct_rows(z1.detach().to(dtype))
    d2 = distinct_rows(z2.detach().to(dtype))
    q = prepare(d1.rows, normalize=normalize, eps=eps, dtype=dtype)
    r = prepare(d2.rows, normalize=normalize, eps=eps, dtype=dtype)
    if d1.all_distinct and d2.all_distinct:
        # sharded: each rank computes its own diagonal tiles, not all of them (one all-reduce of n values)
        diag = contrastive_diagonal(q, r, block_bytes=block_bytes, shard=shard)
        partial = contrastive_partial(q, r, block_bytes=block_bytes, shard=shard, diag=diag)
        value = contrastive_finalize(all_reduce_sum(partial, shard), ks, ties)
    else:
        pairs = PositivePairs.of(d1.index(), d2.index(), r.shape[0])
        partial = weighted_contrastive_partial(
            q, r, pairs, d1.weights(dtype), d2.weights(dtype), block_bytes=block_bytes, shard=shard
        )
        stats = all_reduce_sum(partial, shard)
        value = contrastive_finalize(stats, ks, ties, n=z1.shape[0], weights=pairs.weights)
    # sign(NaN) is 0: a NaN row would look tied with everything. Non-finite input gives NaN instead.
    finite = torch.isfinite(d1.rows).all() & torch.isfinite(d2.rows).all()
    return torch.where(finite, value, math.nan).to(dtype)


@dataclass
class PositivePairs:
    """The distinct (z1 row, z2 row) positive pairs, as indices into the distinct rows of each view.

    Sorted by ``u`` (then ``v``); ``weights[p]`` is how many queries have pair ``p`` as their positive.
    """

    u: Tensor
    v: Tensor
    weights: Tensor

    @staticmethod
    def of(index1: Tensor, index2: Tensor, n2: int) -> PositivePairs:
        keys, counts = torch.unique(index1 * n2 + index2, return_counts=True)
        return PositivePairs(keys // n2, keys % n2, counts)


def _pair_similarities(q: Tensor, r: Tensor, pairs: PositivePairs, rows: int) -> Tensor:
    """``q[u_p] . r[v_p]`` for every pair, computed once each (row-wise products, in chunks)."""
    out = torch.empty(pairs.u.shape[0], dtype=q.dtype, device=q.device)
    for s, e in block_ranges(pairs.u.shape[0], rows):
        out[s:e] = (q[pairs.u[s:e]] * r[pairs.v[s:e]]).sum(1)
    return out


def _finite_products(z1: Tensor, z2: Tensor) -> bool:
    """Whether every ``z1_i . z2_j`` is finite however it is rounded: the product of the largest row
    norms (Cauchy-Schwarz) well below the dtype's largest number. Then ``s - s_ii`` is NaN nowhere
    and its sign is the result of comparing ``s`` with ``s_ii``."""
    top = z1.norm(dim=1).max() * z2.norm(dim=1).max() if z1.numel() and z2.numel() else z1.new_zeros(())
    return bool(top < torch.finfo(z1.dtype).max / 4)


#: Bytes of one slice of a similarity block compared at a time on a CPU: small enough to stay in the
#: cache through its four comparisons and their products (the block is read from memory once, not four
#: times: contrastive top-5 at 16,384 x 128 took 0.94 s with whole-block passes, 0.74 s in 1 MiB slices,
#: the bare product 0.43 s, on a 2-core Xeon with AVX2 kernels). Other devices compare whole blocks.
COMPARE_SLICE_BYTES = 1 << 20


def compare_slice_rows(n: int, itemsize: int, device: torch.device) -> int:
    """Rows of one compared slice of a block of ``n`` columns (see ``COMPARE_SLICE_BYTES``)."""
    if device.type != "cpu":
        return 1 << 62
    return max(1, COMPARE_SLICE_BYTES // max(1, n * itemsize))


def _compared_sums(
    sim: Tensor, d_rows: Tensor, d_cols: Tensor, ones: Tensor, buf: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(g - l, g + l)`` of every row of ``sim`` (``g`` / ``l``: its entries above / below the row's
    positive, ``d_rows``) and of every column (against ``d_cols``), float64. Each count is a
    matrix-vector product of a 0/1 comparison with ``ones`` (exact below ``2**24``), made a slice of
    ``buf``'s rows at a time (the slice stays in the cache for its four comparisons); ``sim`` is left as
    it is."""
    b, n = sim.shape
    step = buf.shape[0]
    row_g, row_l = (torch.empty(b, dtype=sim.dtype, device=sim.device) for _ in range(2))
    col_g, col_l = (torch.zeros(n, dtype=sim.dtype, device=sim.device) for _ in range(2))
    for s in range(0, b, step):
        part, positive = sim[s : s + step], d_rows[s : s + step, None]
        mask, units = buf[: part.shape[0]], ones[: part.shape[0]]
        torch.mv(torch.gt(part, positive, out=mask), ones[:n], out=row_g[s : s + step])
        col_g.addmv_(torch.gt(part, d_cols[None, :], out=mask).T, units)
        torch.mv(torch.lt(part, positive, out=mask), ones[:n], out=row_l[s : s + step])
        col_l.addmv_(torch.lt(part, d_cols[None, :], out=mask).T, units)
    rg, rl, cg, cl = (x.to(torch.float64) for x in (row_g, row_l, col_g, col_l))
    return rg - rl, rg + rl, cg - cl, cg + cl


def _weighted_sign_sums(diff: Tensor, weights: Tensor, dim: int, exact: bool) -> tuple[Tensor, Tensor]:
    """``(sum(w * sign(diff)), sum(w * |sign(diff)|))`` along ``dim``, in place on ``diff``, float64.

    Sums of ``{-1, 0, 1}`` times integer weights are exact in a matrix-vector product while they stay
    below ``2**24`` (float32); beyond that (``exact=False``) they are summed in float64.
    """
    diff.sign_()
    if not exact:
        shape = (1, -1) if dim == 1 else (-1, 1)
        w = weights.to(torch.float64).view(shape)
        signed = (diff * w).sum(dim, dtype=torch.float64)
        return signed, (diff.abs_() * w).sum(dim, dtype=torch.float64)
    mat = diff if dim == 1 else diff.T
    signed = torch.mv(mat, weights).to(torch.float64)
    diff.abs_()
    return signed, torch.mv(mat, weights).to(torch.float64)


def weighted_contrastive_partial(
    q: Tensor,
    r: Tensor,
    pairs: PositivePairs,
    c1: Tensor,
    c2: Tensor,
    *,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Sign sums per positive pair over distinct rows: ``(4, P)`` rows ``[a_row, b_row, a_col, b_col]``.

    ``q`` (``u1`` distinct z1 rows, multiplicities ``c1``) and ``r`` (``u2``, ``c2``) are prepared. Each
    block of distinct z1 rows is multiplied by ``r`` once; the entry of every positive pair is set to
    the pair's own similarity (computed once, ``_pair_similarities``), so every occurrence of a
    pair of rows, in either direction, compares the same number. The z1→z2 direction of pair ``p``
    compares row ``u_p`` with the pair's value, weighted by ``c2``; the z2→z1 direction compares
    column ``v_p`` with it, weighted by ``c1``. Sharded, ranks take disjoint blocks of distinct z1
    rows and the partials add up.
    """
    n_u1, n_u2, n_p = q.shape[0], r.shape[0], pairs.u.shape[0]
    rows, ranges = plan_blocks(n_u1, max(n_u2, n_p) * q.element_size(), block_bytes, shard)
    pos = _pair_similarities(q, r, pairs, rows)
    out = torch.zeros(4, n_p, dtype=torch.float64, device=q.device)
    exact = q.dtype == torch.float64 or max(int(c1.sum()), int(c2.sum())) < _EXACT_F32
    pair_start = torch.searchsorted(pairs.u, torch.arange(n_u1 + 1, device=q.device))
    r_t = r.T
    for start, stop in ranges:
        sim = q[start:stop] @ r_t
        ps, pe = int(pair_start[start]), int(pair_start[stop])
        sim[pairs.u[ps:pe] - start, pairs.v[ps:pe]] = pos[ps:pe]
        for cs, ce in block_ranges(pe - ps, rows):  # z1 -> z2: the rows of this block's pairs
            at = slice(ps + cs, ps + ce)
            diff = sim.index_select(0, pairs.u[at] - start).sub_(pos[at, None])
            out[0, at], out[1, at] = _weighted_sign_sums(diff, c2, 1, exact)
        diff = sim.index_select(1, pairs.v).sub_(pos)  # z2 -> z1: every pair's column
        col_a, col_b = _weighted_sign_sums(diff, c1[start:stop], 0, exact)
        out[2] += col_a
        out[3] += col_b
    return out


# ----------------------------------------------------------------------------- uniformity


#: Fixed tiles of the uniformity scan: every matrix product and row sum is taken over one tile of
#: ``uniformity_tile_rows(n)`` rows (starting at a multiple of it; at most ``UNIFORMITY_TILE_ROWS``, fewer
#: for small ``n`` so that shards still share the work) by at most
#: ``UNIFORMITY_TILE_COLUMNS`` columns (starting at the tile's first row, then at multiples of it from
#: there). The tiles depend only on ``n``, never on ``block_bytes`` or on the shard: a BLAS kernel may
#: round a row differently in a product of another shape (an AMD EPYC's float64 uniformity moved by
#: 4.4e-16 between 64-byte and default blocks), but the same product of the same rows gives the same bits.
UNIFORMITY_TILE_ROWS = 64
UNIFORMITY_TILE_COLUMNS = 32768
#: On a CPU a tile holds at most this many bytes, so that it stays in the cache through its passes (4,096
#: float32 columns: uniformity t=2 at 16,384 x 128 took 0.59 s in 32,768-column tiles, 0.43 s in these, on
#: a 2-core Xeon with AVX2 kernels). The columns then depend on the dtype and the device too, still never
#: on the budget or the shard.
UNIFORMITY_CPU_TILE_BYTES = 1 << 20


def uniformity_tile_columns(itemsize: int, device: torch.device) -> int:
    """Columns of one tile of the uniformity scan (see ``UNIFORMITY_CPU_TILE_BYTES``)."""
    if device.type != "cpu":
        return UNIFORMITY_TILE_COLUMNS
    return max(
        1, min(UNIFORMITY_TILE_COLUMNS, UNIFORMITY_CPU_TILE_BYTES // (UNIFORMITY_TILE_ROWS * itemsize))
    )


def _needs_shift(tsq: Tensor, log_counts: Tensor | None) -> bool:
    """Whether a potential can leave the range where ``exp`` is a normal number with room to sum: every
    ``-t ||z_i - z_j||^2`` is at least ``-4 max_i t ||z_i||^2``; counts add at most ``log n``. Then the
    row sums are taken after subtracting each row's largest potential (``logsumexp``); otherwise the
    potentials are exponentiated as they are (one pass fewer)."""
    room = -math.log(torch.finfo(tsq.dtype).tiny) - 24.0
    top = 4.0 * float(tsq.max()) if tsq.numel() else 0.0
    extra = float(log_counts.max()) if log_counts is not None and log_counts.numel() else 0.0
    return not (top + extra < room)


def uniformity_tile_rows(n: int) -> int:
    """Rows of one tile of the uniformity scan over ``n`` rows: a function of ``n`` alone."""
    return max(1, min(UNIFORMITY_TILE_ROWS, n // UNIFORMITY_TILE_ROWS))


def _tile_log_sum_exp(pot: Tensor, ones: Tensor, shift: bool) -> Tensor:
    """Per row of ``pot`` (``-inf`` for masked pairs), ``logsumexp`` over its columns, in place; without
    ``shift``, the potentials are in ``exp``'s safe range (``_needs_shift``) and taken as they are."""
    if not shift:
        return torch.mv(pot.exp_(), ones[: pot.shape[1]]).log_()
    top = pot.amax(1)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all-masked rows
    sums = torch.mv(pot.sub_(top[:, None]).exp_(), ones[: pot.shape[1]])
    return sums.log_().add_(top)


def uniformity_partial(
    z: Tensor,
    *,
    t: float,
    shard: tuple[int, int] | None = None,
    log_counts: Tensor | None = None,
) -> Tensor:
    """Per-row ``logsumexp_{j > i}(-t * ||z_i - z_j||^2)`` for this shard's rows (others 0), shape ``(n,)``.

    ``z`` is prepared (``prepare``) and should be centred: ``-t * ||z_i - z_j||^2`` comes from
    ``min(2t z_i . z_j - t ||z_i||^2 - t ||z_j||^2, 0)``, whose rounding error grows with the norms.
    With ``log_counts`` (distinct rows standing for ``c_i`` input rows each), row ``i`` gives
    ``log c_i + logsumexp_{j > i}(-t * ||z_i - z_j||^2 + log c_j)``: the pairs between two groups.
    The scan runs in fixed tiles (``UNIFORMITY_TILE_ROWS``), dealt round-robin to the shards: each
    row's value is the same bits whatever the sharding (peak memory: one tile).
    """
    n = z.shape[0]
    tsq = (z * z).sum(1).mul_(t)
    out = torch.zeros(n, dtype=z.dtype, device=z.device)
    tile = uniformity_tile_rows(n)
    tiles = block_ranges(n, tile)
    if shard is not None and shard[1] > 1:
        tiles = tiles[shard[0] :: shard[1]]
    columns = uniformity_tile_columns(z.element_size(), z.device)
    width = max(1, min(n, columns))
    shift = _needs_shift(tsq, log_counts)
    buf = torch.empty(tile * width, dtype=z.dtype, device=z.device)
    ones = torch.ones(width, dtype=z.dtype, device=z.device)
    rows = torch.arange(n, device=z.device)
    cols = rows[:width]
    for start, stop in tiles:
        b = stop - start
        parts = []
        for c0, c1 in block_ranges(n - start, columns):
            c0, c1 = c0 + start, c1 + start
            # -t d^2 = 2t s_ij - t sq_j - t sq_i, clamped at 0 (d^2 >= 0)
            pot = torch.addmm(
                -tsq[None, c0:c1],
                z[start:stop],
                z[c0:c1].T,
                alpha=2.0 * t,
                out=buf[: b * (c1 - c0)].view(b, -1),
            )
            pot.sub_(tsq[start:stop, None]).clamp_max_(0.0)
            if log_counts is not None:
                pot.add_(log_counts[None, c0:c1])
            if c0 < stop:  # pairs j <= i
                pot.masked_fill_(cols[None, : c1 - c0] + c0 <= rows[start:stop, None], -math.inf)
            parts.append(_tile_log_sum_exp(pot, ones, shift))
        out[start:stop] = parts[0] if len(parts) == 1 else torch.logsumexp(torch.stack(parts), dim=0)
        if log_counts is not None:
            out[start:stop] += log_counts[start:stop]
    return out


def uniformity_finalize(partial: Tensor, counts: Tensor | None = None) -> Tensor:
    """``log`` of the mean over ordered pairs ``i != j`` from the per-row log-sum-exps (float64).

    ``counts``: multiplicities of distinct rows; the ``c (c - 1) / 2`` pairs inside a group are at
    distance exactly 0 (potential ``exp(0) = 1``), so collapsed embeddings score exactly 0.
    """
    terms = partial.to(torch.float64)
    n = terms.shape[0]
    if counts is not None:
        c = counts.to(torch.float64)
        n = int(counts.sum())
        terms = torch.cat([terms, torch.log(c[c > 1] * (c[c > 1] - 1) / 2)])
    pairs = torch.tensor(n * (n - 1) / 2, dtype=torch.float64, device=terms.device)
    return torch.logsumexp(terms, dim=0) - torch.log(pairs)


def uniformity(
    z: Tensor,
    *,
    normalize: bool,
    t: float,
    eps: float,
    block_bytes: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Tensor:
    """Uniformity (0-dim, accumulation dtype) of ``n >= 2`` rows; not differentiable (in-place scan).

    Repeated rows are grouped first (``embedmetrics._engine.core.distinct``): each distinct pair is
    computed once and weighted, and pairs of identical rows count at distance exactly 0. The scan's
    fixed tiles (``uniformity_partial``) make the value independent of ``block_bytes``, which is
    accepted for the family's common signature and changes nothing.
    """
    del block_bytes  # the tiles are fixed: the same bits for any budget
    dtype = compute_dtype(z)
    distinct = distinct_rows(z.detach().to(dtype))
    x = prepare(distinct.rows, normalize=normalize, eps=eps, dtype=dtype)
    x = x - x.mean(0)  # distances are translation invariant; centring shrinks the rounding error
    log_counts = None if distinct.counts is None else distinct.weights(dtype).log()
    partial = uniformity_partial(x, t=t, shard=shard, log_counts=log_counts)
    return uniformity_finalize(all_reduce_sum(partial, shard), distinct.counts).to(dtype)


# ----------------------------------------------------------------------------- alignment


def alignment_terms(z1: Tensor, z2: Tensor, *, normalize: bool, alpha: float, eps: float) -> Tensor:
    """``||z1_i - z2_i||^alpha`` per row, in the accumulation dtype (differentiable)."""
    dtype = compute_dtype(z1, z2)
    x = prepare(z1, normalize=normalize, eps=eps, dtype=dtype)
    y = prepare(z2, normalize=normalize, eps=eps, dtype=dtype)
    terms: Tensor = (x - y).norm(dim=1).pow(alpha)
    return terms
