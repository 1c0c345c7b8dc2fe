"""``ties="average"`` for the two twins of trec_eval's measures that are not linear in a tie block's
counts: interpolated precision (a maximum) and infAP (products of counts). Each is the exact expected
value under a uniformly random order of the documents of every tie block (docs/ties.md): a finite sum
over the blocks' arrangements, in closed form where one exists, never sampled.

Under the random order the blocks are independent, and a block ``[a, a + t)`` with ``r`` relevant
documents and ``c`` relevant above it holds the ``c + 1``-th to ``c + r``-th relevant documents of its
row whatever the order: only where they sit inside the block is random (a uniform ``r``-subset of its
``t`` places). Blocks of one shape are computed as one batch of tensors (the shapes are read on the
host). A block whose exact sum would take more than ``MAX_BLOCK_WORK`` steps is refused with a
``TieBlockTooLargeError`` naming its size and relevant count, never approximated.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from embedmetrics._engine.ranking.measures import RankedRows, _running_sum  # the engine's running counts

#: The most elementary steps the exact sum over the arrangements of one tie block may take (docs/ties.md).
MAX_BLOCK_WORK = 2**29
#: Elements of one batch of work (the blocks of a shape are cut into batches of about this size).
_BATCH = 2**21


class TieBlockTooLargeError(ValueError):
    """A tie block whose exact expected value (``ties="average"``) would cost more than
    ``MAX_BLOCK_WORK`` steps."""


class Blocks(NamedTuple):
    """Every tie block of the ranked documents, flat (``(B,)`` each): its row, first place ``a``, size
    ``t``, relevant documents ``r`` in it and ``c`` above it, in the stats dtype (``row`` int64)."""

    row: Tensor
    a: Tensor
    t: Tensor
    r: Tensor
    c: Tensor


def tie_blocks(st: RankedRows) -> Blocks:
    """The tie blocks of the ranked columns of every row (host sync)."""
    L = st.columns
    cols = torch.arange(L, device=st.gain.device).expand(st.gain.shape[0], L)
    a, e = st.blocks()
    first = (a == cols) & (cols < st.n.unsqueeze(1))
    row, col = first.nonzero(as_tuple=True)
    end = e[row, col]
    c = st.crel[row, col]
    fdt = st.fdt
    return Blocks(row, col.to(fdt), (end - col).to(fdt), st.crel[row, end] - c, c)


def shapes(*sizes: Tensor) -> list[tuple[tuple[int, ...], Tensor]]:
    """The distinct rows of the integer columns ``sizes`` and the indices of the blocks of each (one
    sort of the rows written as one integer)."""
    columns = [s.to(torch.int64) for s in sizes]
    if columns[0].numel() == 0:
        return []
    base = max(int(c.max()) for c in columns) + 1
    if base ** len(columns) >= 2**62:  # too wide for one integer: compare the rows themselves
        _, key = torch.unique(torch.stack(columns, 1), dim=0, return_inverse=True)
    else:
        key = torch.zeros_like(columns[0])
        for c in columns:
            key = key * base + c
    key, order = torch.sort(key, stable=True)
    _, counts = torch.unique_consecutive(key, return_counts=True)
    groups = torch.split(order, counts.tolist())
    return [(tuple(int(c[g[0]]) for c in columns), g) for g in groups]


def check_work(work: int, t: int, r: int, measure: str) -> None:
    """Refuse a tie block whose exact sum would take more than ``MAX_BLOCK_WORK`` steps."""
    if work > MAX_BLOCK_WORK:
        raise TieBlockTooLargeError(
            f"ties='average': the exact {measure} of a tie block of {t} documents with {r} relevant "
            f"would take {work} steps, more than the bound of {MAX_BLOCK_WORK} (docs/ties.md); use "
            "ties='pessimistic' or 'optimistic', or break the ties in the scores."
        )


def log_binomial(n: Tensor | float, k: Tensor | float, like: Tensor) -> Tensor:
    """``log C(n, k)`` for ``0 <= k <= n`` (lgamma, elementwise, in the dtype and device of ``like``)."""
    n, k = (torch.as_tensor(x, dtype=like.dtype, device=like.device) for x in (n, k))
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def batches(count: int, width: int) -> list[slice]:
    """Consecutive slices of ``count`` items of ``width`` elements each, ``_BATCH`` elements a slice."""
    step = max(1, _BATCH // max(width, 1))
    return [slice(i, min(i + step, count)) for i in range(0, count, step)]


def _per_block(st: RankedRows, blocks: Blocks, value: Tensor, reduce: str) -> Tensor:
    """``(G,)``: ``value`` of each block summed (``"sum"``) or maximised (``"amax"``, 0 where none) over
    the blocks of each row, through a dense ``(G, L)`` matrix (deterministic on every device)."""
    dense = torch.zeros(st.gain.shape[0], max(st.columns, 1), dtype=value.dtype, device=value.device)
    dense[blocks.row, blocks.a.to(torch.int64)] = value
    return dense.sum(1) if reduce == "sum" else dense.amax(1)


# --------------------------------------------------------------------------- infAP


def _infap_shape(
    r: int, y0: int, other: int, a: Tensor, c: Tensor, cn: Tensor, cu: Tensor, z0: Tensor, eps: float
) -> Tensor:
    """The expected sum of infAP's terms over the ``r`` relevant documents of blocks of one shape
    (``y0`` judged non-relevant, ``other`` unjudged: ``z0`` of the pool, the rest not in the qrels).

    A relevant document sits at a uniform place ``q`` of its block, with ``x`` relevant, ``y`` judged
    non-relevant and ``k`` unjudged block mates above it (multivariate hypergeometric given ``q``); its
    term ``(1 + pool · (rel + ε) / (rel + nonrel + 2ε)) / (a + q + 1)`` is linear in the pool-unjudged
    among the ``k`` (``k · z0 / other`` expected), so the sum runs over ``(x, y, k)``, ``k`` first.
    """
    fdt, dev = a.dtype, a.device
    t = r + y0 + other
    m = torch.arange(r + y0, dtype=fdt, device=dev).unsqueeze(1)  # x + y
    k = torch.arange(other + 1, dtype=fdt, device=dev)
    lw = log_binomial(other, k, a) - log_binomial(t - 1, m + k, a)
    top = lw.amax(1, keepdim=True)
    w = torch.exp(lw - top)  # (M, K): P(k | q = m + k) up to the factors of x and y, scaled per m
    den = a.view(-1, 1, 1) + m + k + 1  # the rank a + q + 1
    h, hz = (w / den).sum(2), (w * k / den).sum(2)  # (b, M)
    x = torch.arange(r, dtype=fdt, device=dev).view(-1, 1)
    y = torch.arange(y0 + 1, dtype=fdt, device=dev)
    mm = (x + y).to(torch.int64)  # (r, y0 + 1)
    scale = torch.exp(log_binomial(r - 1, x, a) + log_binomial(y0, y, a) + top[mm, 0])
    rel = c.view(-1, 1, 1) + x
    judged = rel + cn.view(-1, 1, 1) + y
    f = (rel + eps) / (judged + 2 * eps)
    rho = (z0 / other if other else torch.zeros_like(z0)).view(-1, 1, 1)
    terms = scale * (h[:, mm] * (1 + (judged + cu.view(-1, 1, 1)) * f) + rho * f * hz[:, mm])
    return terms.sum((1, 2)) * (r / t)


def infap_average(st: RankedRows, eps: float) -> Tensor:
    """infAP's sum of terms per row (``(G,)``), its exact expectation over the tie orders (``eps``:
    trec_eval's smoothing). The judgements are the gains 1, 0, -1 (not in the qrels), -2 (pool)."""
    fdt, L = st.fdt, st.columns
    b = tie_blocks(st)
    g = st.gain[:, :L]
    ranked = torch.arange(L, device=g.device) < st.n.unsqueeze(1)
    nonrel, pool = _running_sum((g == 0) & ranked, fdt), _running_sum((g == -2) & ranked, fdt)
    start, end = b.a.to(torch.int64), (b.a + b.t).to(torch.int64)
    cn, cu = nonrel[b.row, start], pool[b.row, start]
    y0, z0 = nonrel[b.row, end] - cn, pool[b.row, end] - cu
    other = b.t - b.r - y0
    keep = (b.r > 0).nonzero().squeeze(1)
    value = torch.zeros_like(b.a)
    for (r, y, o), group in shapes(b.r[keep], y0[keep], other[keep]):
        check_work((r + y) * (o + 1) + r * (y + 1), r + y + o, r, "infAP")
        idx = keep[group]
        for part in batches(idx.numel(), max((r + y) * (o + 1), r * (y + 1))):
            i = idx[part]
            value[i] = _infap_shape(r, y, o, b.a[i], b.c[i], cn[i], cu[i], z0[i], eps)
    return _per_block(st, b, value, "sum")


# --------------------------------------------------------------------------- interpolated precision


class _Candidates(NamedTuple):
    """Values ``v`` a random block's maximum can take above its row's floor, one per ``(j, u)`` place of
    the block's ``j``-th relevant document after ``u`` non-relevant ones, with ``log P(block max < v)``."""

    block: Tensor
    value: Tensor
    log_below: Tensor


def _lowest_allowed(spare: int, a: Tensor, c: Tensor, j0: Tensor, v: Tensor, r: int) -> Tensor:
    """``(V, r)``: per candidate ``v`` (``(V,)``, with its block's ``a``, ``c``, ``j0``) and relevant document
    ``j``, the fewest non-relevant documents ``u`` before it that put its precision ``(c + j) / (a + j + u)``
    below ``v`` (``spare + 1``: none; 0 where ``j < j0``). The precision falls as ``u`` grows, so the places
    allowed are ``u >= λ_j``; an estimate is corrected with the very comparisons of the candidates."""
    j = torch.arange(1, r + 1, dtype=a.dtype, device=a.device)
    num, base, v = c.unsqueeze(1) + j, a.unsqueeze(1) + j, v.unsqueeze(1)
    low = torch.ceil(num / v - base).clamp(0, spare + 1)
    for _ in range(3):  # the estimate is off by at most one where a precision rounds next to v
        low = low - ((low > 0) & (num / (base + low - 1) < v)).to(low.dtype)
        low = low + ((low <= spare) & (num / (base + low) >= v)).to(low.dtype)
    return torch.where(j < j0.unsqueeze(1), 0, low.to(torch.int64))


def _log_below(r: int, spare: int, low: Tensor, dtype: torch.dtype) -> Tensor:
    """``log P(max < v)`` per candidate row of ``low`` (``_lowest_allowed``) of blocks of ``r`` relevant and
    ``spare`` non-relevant documents: the arrangements are the monotone paths ``u_1 <= … <= u_r`` in
    ``[0, spare]`` (``u_j``: non-relevant documents before the ``j``-th relevant one), ``C(t, r)`` of them;
    those with every ``u_j >= λ_j`` are counted by prefix sums, from the first step with a bound (the paths
    before it in closed form), on the columns some row still allows, rescaled every few steps."""
    fdt, dev = dtype, low.device
    first = int((low > 0).any(0).to(torch.int64).argmax())
    u = torch.arange(spare + 1, dtype=fdt, device=dev)
    log_paths = log_binomial(u + first, first, u)
    top = log_paths.amax()
    paths = torch.exp(log_paths - top).expand(low.shape[0], -1)
    log_scale = torch.full((low.shape[0],), float(top), dtype=fdt, device=dev)
    every = max(1, int(200 / math.log10(spare + 2)))  # a step multiplies the paths by at most spare + 1
    lo = 0
    for i in range(first, r):
        if i > first:
            paths = torch.cumsum(paths, 1)
        cut = max(lo, int(low[:, i].amin()))
        paths, lo = paths[:, cut - lo :], cut
        paths = torch.where(u[lo:] >= low[:, i : i + 1], paths, 0.0)
        if (i - first) % every == every - 1 or i == r - 1:
            scale = paths.amax(1, keepdim=True).clamp_min(torch.finfo(fdt).tiny)
            paths, log_scale = paths / scale, log_scale + torch.log(scale.squeeze(1))
    return torch.log(paths.sum(1)) + log_scale - log_binomial(r + spare, r, u)


def _log_below_by_segments(r: int, spare: int, low: Tensor, dtype: torch.dtype) -> Tensor:
    """``_log_below`` in ``O(r³)`` steps per candidate rather than ``O(r·spare)``, for few relevant documents
    among many: the bounds ``λ_1 <= … <= λ_r`` cut ``[0, spare]`` into ``r + 1`` segments, and a path is a
    multiset of ``r`` places, ``n_k`` of them in segment ``k`` (``C(length + n_k − 1, n_k)`` ways each);
    ``u_j >= λ_j`` for every ``j`` is ``n_0 + … + n_k <= k`` for every ``k``. The sum over the ``n_k`` runs
    on those prefix sums, in logs (every term positive)."""
    dev, count = low.device, low.shape[0]
    edges = torch.cat(
        [low.new_zeros(count, 1), low.cummax(1).values, low.new_full((count, 1), spare + 1)], 1
    ).to(dtype)
    length = (edges[:, 1:] - edges[:, :-1]).unsqueeze(2)  # (V, r + 1, 1)
    n = torch.arange(r + 1, dtype=dtype, device=dev)
    ways = torch.lgamma(length + n) - torch.lgamma(n + 1) - torch.lgamma(length.clamp_min(1.0))
    ways = torch.where(n == 0, 0.0, torch.where(length > 0, ways, -math.inf))  # (V, r + 1, r + 1)
    step = n.view(1, -1) - n.view(-1, 1)  # places added: prefix sum P -> P'
    above = n.view(1, -1)
    state = torch.full((count, r + 1), -math.inf, dtype=dtype, device=dev)
    state[:, 0] = 0.0
    for k in range(r + 1):
        terms = state.unsqueeze(2) + ways[:, k, :][:, step.clamp_min(0).to(torch.int64)]
        state = torch.logsumexp(torch.where((step >= 0) & (above <= k), terms, -math.inf), 1)
    return state[:, r] - log_binomial(r + spare, r, n)


def _distinct(block: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct ``(block, value)`` pairs (equal fractions such as 1/2 and 2/4 are one candidate)."""
    order = torch.argsort(value, stable=True)
    order = order[torch.argsort(block[order], stable=True)]
    block, value = block[order], value[order]
    new = torch.ones_like(block, dtype=torch.bool)
    new[1:] = (block[1:] != block[:-1]) | (value[1:] != value[:-1])
    return block[new], value[new]


def _candidates(b: Blocks, j0: Tensor, floor: Tensor, random: Tensor) -> _Candidates:
    """The candidate values of every random block above its row's floor, with their ``log P``."""
    parts: list[tuple[Tensor, Tensor, Tensor]] = []
    idx = random.nonzero().squeeze(1)
    for (r, spare), group in shapes(b.r[idx], b.t[idx] - b.r[idx]):
        i = idx[group]
        fdt, dev = b.a.dtype, b.a.device
        j = torch.arange(1, r + 1, dtype=fdt, device=dev).view(1, -1, 1)
        u = torch.arange(spare + 1, dtype=fdt, device=dev)
        value = (b.c[i].view(-1, 1, 1) + j) / (b.a[i].view(-1, 1, 1) + j + u)
        keep = (j >= j0[i].view(-1, 1, 1)) & (value > floor[b.row[i]].view(-1, 1, 1))
        which, value = _distinct(keep.nonzero(as_tuple=True)[0], value[keep])
        if which.numel() == 0:
            continue
        # a step of the sum by segments (a log-sum-exp) costs about 8 of the prefix sums' (additions)
        by_segments = 8 * (r + 1) ** 3 < r * (spare + 1)
        per_candidate = 8 * (r + 1) ** 3 if by_segments else r * (spare + 1)
        check_work(int(torch.bincount(which).amax()) * per_candidate, r + spare, r, "interpolated precision")
        value, order = torch.sort(value, stable=True)  # neighbours in a batch share their bounds
        which = which[order]
        below = torch.empty_like(value)
        count = _log_below_by_segments if by_segments else _log_below
        for part in batches(value.numel(), (r + 1) ** 2 if by_segments else spare + 1):
            w = i[which[part]]
            low = _lowest_allowed(spare, b.a[w], b.c[w], j0[w], value[part], r)
            below[part] = count(r, spare, low, fdt)
        parts.append((i[which], value, below))
    if not parts:
        empty = torch.zeros(0, dtype=b.a.dtype, device=b.a.device)
        return _Candidates(torch.zeros(0, dtype=torch.int64, device=b.a.device), empty, empty)
    block, value, below = (torch.cat(x) for x in zip(*parts))
    return _Candidates(block, value, below)


def _segments(row: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """For items sorted by ``row``: the distinct rows, each item's segment and place in it, the widest."""
    rows, counts = torch.unique_consecutive(row, return_counts=True)
    segment = torch.repeat_interleave(torch.arange(rows.numel(), device=row.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    place = torch.arange(row.numel(), device=row.device) - starts[segment]
    return rows, segment, place, int(counts.max()) if counts.numel() else 0


def _expected_max(b: Blocks, floor: Tensor, cand: _Candidates) -> Tensor:
    """``E[max] = floor + Σ_v (v − v') · P(max >= v)`` per row, over its candidate values ``v`` in
    descending order (``v'``: the next smaller one, or the floor). ``log P(max < v)`` is the sum over the
    row's blocks of ``log P(block max < v)``, each block's a step function of ``v``: telescoped over its own
    candidates (ascending), then summed over the row's candidates in descending order."""
    order = torch.argsort(cand.value, stable=True)
    order = order[torch.argsort(cand.block[order], stable=True)]
    block, value, below = cand.block[order], cand.value[order], cand.log_below[order]
    same = torch.zeros_like(block, dtype=torch.bool)
    same[:-1] = block[1:] == block[:-1]
    step = below - torch.where(same, below.roll(-1), 0.0)
    row = b.row[block]
    order = torch.argsort(value, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    row, value, step = row[order], value[order], step[order]
    rows, segment, place, width = _segments(row)
    dense = torch.zeros(rows.numel(), width, dtype=value.dtype, device=value.device)
    dense[segment, place] = step
    log_below = torch.cumsum(dense, 1)[segment, place]
    same = torch.zeros_like(row, dtype=torch.bool)
    same[:-1] = row[1:] == row[:-1]
    lower = torch.where(same, value.roll(-1), floor[row])
    dense.zero_()
    dense[segment, place] = (value - lower) * -torch.expm1(log_below)
    out = floor.clone()
    out[rows] += dense.sum(1)
    return out


def interpolated_precision_average(st: RankedRows, level: float) -> Tensor:
    """trec_eval's ``iprec_at_recall`` per row (``(G,)``), its exact expectation over the tie orders.

    The value is the maximum precision ``i / rank_i`` over the relevant documents ``i >= count``
    (``count = ⌊level·R + 0.9⌋``, at least 1). A block whose eligible relevant documents cannot move
    (``r = t``) gives its value; one that can gives at least its pessimistic value ``(c + r)/(a + t)``:
    the row's floor is the largest of these, and the expectation above it is summed over the candidate
    values of the blocks that can move.
    """
    fdt = st.fdt
    b = tie_blocks(st)
    count = torch.floor(level * st.R.to(fdt) + 0.9).clamp_min(1.0)
    j0 = (count[b.row] - b.c).clamp_min(1.0)  # the first relevant document of the block that counts
    eligible = b.r >= j0
    floor = _per_block(st, b, torch.where(eligible, (b.c + b.r) / (b.a + b.t), 0.0), "amax")
    cand = _candidates(b, j0, floor, eligible & (b.r < b.t))
    return _expected_max(b, floor, cand)
