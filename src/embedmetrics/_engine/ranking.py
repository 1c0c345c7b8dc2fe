"""The grouped-ranking engine shared by every retrieval metric.

All queries of a call are ranked at once:

1. **Group**: flat input maps ``indexes`` to dense group ids with one ``unique(return_inverse)``;
   2-D input ``(queries, docs)`` uses the row as the group.
2. **Order**: one sort by (group, score descending). For float32 (and narrower) scores the key is a
   single int64: ``group << 33 | inactive << 32 | monotone(score bits)``; float64 scores fall back
   to stable sorts, least significant key first. 2-D input is sorted along its rows.
3. **Tie blocks**: within a group, items with equal scores form a block ``[a, a + t)``. Per item the
   engine keeps its group, ``a``, ``t``, ``r`` (relevant items in its block), ``c`` (relevant items
   above its block), ``x`` (its offset in the block); per group ``n`` (ranked documents) and ``R``
   (relevant documents). Under ``ties="pessimistic"``/``"optimistic"`` the relevance is added to the
   sort key and every item is its own block.
4. **Metrics** are closed-form functions of these statistics (McSherry & Najork, ECIR 2008, for the
   expected value under a uniformly random order of tied items), reduced per group with
   ``index_add_``.

Items may be *inactive*: ignored (``target == ignore_index``: they count nowhere) or judged but not
retrieved (they count in ``R`` and in the ideal DCG, but are never ranked). Inactive items are sorted
after the active ones of their group, so the positions of ranked items are unaffected.

Nothing here loops over queries or moves data to the host: every function works on any device, and
dynamic shapes (``unique``) are confined to :func:`group_ids`, which callers use only in ``compute``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from torch import Tensor

#: Queries of a result: ranked normally / no relevant document / no judged document at all.
STATUS_OK, STATUS_EMPTY, STATUS_ABSENT = 0, 1, 2

Ks = Sequence[Optional[int]]
Aggregation = Union[str, Callable[..., Tensor]]


def stats_dtype(device: torch.device) -> torch.dtype:
    """Float64 for the rank statistics wherever the device supports it (MPS does not)."""
    return torch.float32 if device.type == "mps" else torch.float64


def group_ids(indexes: Tensor) -> tuple[Tensor, int]:
    """Dense group ids ``0..G-1`` (in ascending order of ``indexes``) and ``G``.

    Dynamic shape: on CUDA this synchronises, so it is only called from ``compute`` / functional code.
    """
    uniq, inverse = torch.unique(indexes, return_inverse=True)
    return inverse, int(uniq.numel())


def _desc_float32_key(score: Tensor) -> Tensor:
    """Int64 key in ``[0, 2**32)`` whose ascending order is the descending order of ``score``.

    Order-preserving bit trick: the float32 bit pattern, with the lower 31 bits flipped for negative
    numbers, is a signed int32 monotone in the float value. ``-0.0`` is first folded onto ``+0.0``.
    """
    bits = (score.to(torch.float32) + 0.0).view(torch.int32)
    mono = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (2**31 - 1) - mono.to(torch.int64)


def _lexsort(keys: list[Tensor]) -> Tensor:
    """Permutation along the last dim sorting by ``keys`` (most significant first), stable."""
    perm = torch.sort(keys[-1], dim=-1, stable=True).indices
    for key in reversed(keys[:-1]):
        step = torch.sort(key.gather(-1, perm), dim=-1, stable=True).indices
        perm = perm.gather(-1, step)
    return perm


def sort_perm(
    score: Tensor,
    *,
    group: Tensor | None = None,
    num_groups: int = 1,
    inactive: Tensor | None = None,
    tiebreak: Tensor | None = None,
) -> Tensor:
    """Order by group (ascending), active first, score (descending), ``tiebreak`` (ascending).

    ``score`` is flat with dense ``group`` ids, or 2-D (rows sorted independently, ``group=None``).
    Returns the permutation along the last dim.
    """
    keys: list[Tensor] = []
    if score.dtype != torch.float64 and num_groups < 2**30:
        key = _desc_float32_key(score)
        if inactive is not None:
            key = key | (inactive.to(torch.int64) << 32)
        if group is not None:
            key = key | (group.to(torch.int64) << 33)
        keys.append(key)
    else:
        high: Tensor | None = None
        if group is not None:
            high = group.to(torch.int64) << 1
        if inactive is not None:
            flag = inactive.to(torch.int64)
            high = flag if high is None else high | flag
        if high is not None:
            keys.append(high)
        keys.append(-score)
    if tiebreak is not None:
        keys.append(tiebreak)
    return _lexsort(keys)


@dataclass
class RankStats:
    """Per-item rank statistics (items in ranked order) and per-group totals.

    Per item (shape ``(N,)``): ``group``, ``pos`` (0-based position in its group), ``a``, ``t``, ``r``,
    ``c``, ``x`` (see the module docstring), ``active`` (ranked), ``leader`` (first item of its
    block), ``block_gain`` (mean gain of its block). Per group (shape ``(G,)``): ``n``, ``R``,
    ``status``. ``gain``/``group`` hold the unsorted gains and group ids (for the ideal DCG) and
    ``extra`` the relevant documents given only as a count (gain 1, never retrieved).
    """

    group: Tensor
    group_start: Tensor
    pos: Tensor
    a: Tensor
    t: Tensor
    r: Tensor
    c: Tensor
    x: Tensor
    active: Tensor
    leader: Tensor
    block_gain: Tensor
    n: Tensor
    R: Tensor
    status: Tensor
    num_groups: int
    raw_gain: Tensor
    raw_group: Tensor | None
    extra: Tensor | None


def _flat_groups(shape: torch.Size, device: torch.device) -> Tensor:
    q, d = shape
    return torch.arange(q, device=device).repeat_interleave(d)


def rank(
    score: Tensor,
    gain: Tensor,
    *,
    group: Tensor | None = None,
    num_groups: int | None = None,
    inactive: Tensor | None = None,
    judged: Tensor | None = None,
    num_relevant: Tensor | None = None,
    ties: str = "average",
) -> RankStats:
    """Rank every group at once and return the per-item statistics.

    Args:
        score: flat ``(N,)`` scores with ``group`` ids, or 2-D ``(queries, docs)`` (``group=None``).
        gain: relevance (``>= 0``) of each item, same shape; 0 for ignored items.
        group: dense group ids for flat input (see :func:`group_ids`).
        num_groups: number of groups for flat input.
        inactive: items that are not ranked (ignored, or judged but not retrieved).
        judged: items that exist for the query (not ignored); ``None`` means all.
        num_relevant: per group, the total number of relevant documents (``>=`` those in ``gain``).
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
    """
    fdt = stats_dtype(score.device)
    device = score.device
    tiebreak: Tensor | None = None
    if ties == "pessimistic":  # irrelevant (lowest gain) first within equal scores
        tiebreak = gain.to(fdt)
    elif ties == "optimistic":
        tiebreak = -gain.to(fdt)
    if group is None:  # 2-D: one query per row
        if score.ndim != 2:
            raise ValueError(f"2-D scores expected without `group`, got shape {tuple(score.shape)}.")
        G = score.shape[0]
        perm = sort_perm(score, inactive=inactive, tiebreak=tiebreak)
        grp = _flat_groups(score.shape, device)
        flat_perm = (perm + (torch.arange(G, device=device) * score.shape[1]).unsqueeze(1)).reshape(-1)
    else:
        G = int(num_groups) if num_groups is not None else 0
        flat_perm = sort_perm(score, group=group, num_groups=G, inactive=inactive, tiebreak=tiebreak)
        grp = group[flat_perm]
    s = score.reshape(-1)[flat_perm]
    g = gain.reshape(-1)[flat_perm].to(fdt)
    act = (
        torch.ones_like(s, dtype=torch.bool)
        if inactive is None
        else torch.logical_not(inactive.reshape(-1)[flat_perm])
    )
    rel = g > 0
    N = s.numel()
    idx = torch.arange(N, device=device)

    counts = torch.zeros(G, dtype=torch.int64, device=device).index_add_(0, grp, torch.ones_like(idx))
    group_start = torch.cumsum(counts, 0) - counts
    gstart = group_start[grp]
    pos = idx - gstart
    if ties == "average":
        boundary = pos == 0
        if N > 1:
            boundary[1:] |= (s[1:] != s[:-1]) | (act[1:] != act[:-1])
    else:
        boundary = torch.ones_like(act)
    blk = torch.cumsum(boundary.to(torch.int64), 0) - 1
    first = torch.cummax(torch.where(boundary, idx, 0), 0).values
    rel_i = rel.to(torch.int64)
    t = torch.zeros(N, dtype=torch.int64, device=device).index_add_(0, blk, torch.ones_like(idx))[blk]
    r = torch.zeros(N, dtype=torch.int64, device=device).index_add_(0, blk, rel_i)[blk]
    block_gain = torch.zeros(N, dtype=fdt, device=device).index_add_(0, blk, g)[blk] / t.to(fdt)
    excl = torch.cumsum(rel_i, 0) - rel_i
    c = excl[first] - excl[gstart]

    n = torch.zeros(G, dtype=torch.int64, device=device).index_add_(0, grp, act.to(torch.int64))
    R = torch.zeros(G, dtype=torch.int64, device=device).index_add_(0, grp, rel_i)
    extra: Tensor | None = None
    if num_relevant is not None:
        extra = num_relevant.to(device=device, dtype=torch.int64) - R
        R = R + extra
    if judged is None:
        present = counts > 0
    else:
        jd = judged.reshape(-1).to(torch.int64)
        present = torch.zeros(G, dtype=torch.int64, device=device).index_add_(0, grp, jd[flat_perm]) > 0
    status = torch.where(
        present,
        torch.where(R > 0, STATUS_OK, STATUS_EMPTY),
        STATUS_ABSENT,
    ).to(torch.int8)
    return RankStats(
        group=grp,
        group_start=group_start,
        pos=pos,
        a=first - gstart,
        t=t,
        r=r,
        c=c,
        x=idx - first,
        active=act,
        leader=boundary,
        block_gain=block_gain,
        n=n,
        R=R,
        status=status,
        num_groups=G,
        raw_gain=gain,
        raw_group=group,
        extra=extra,
    )


# --------------------------------------------------------------------------- metrics
# Each returns a (G, len(ks)) tensor of per-query values in the stats dtype.


def _ks(ks: Ks, st: RankStats) -> Tensor:
    """Cut-offs as a ``(1, nk)`` float row; ``None`` (all ranked documents) is ``inf``."""
    vals = [float("inf") if k is None else float(k) for k in ks]
    return torch.tensor(vals, dtype=st.block_gain.dtype, device=st.pos.device).unsqueeze(0)


def _per_group(st: RankStats, src: Tensor) -> Tensor:
    out = torch.zeros(st.num_groups, src.shape[1], dtype=src.dtype, device=src.device)
    return out.index_add_(0, st.group, src)


def _cutoff_block(st: RankStats, k: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per group and cut-off: ``m = min(k, n)`` and ``(a, t, r, c)`` of the block holding position ``m − 1``.

    Everything above that block is inside the top ``k``, everything below is outside, so the metrics
    that only count relevant documents in the top ``k`` need nothing else (G-sized work).
    """
    fdt = st.block_gain.dtype
    m = torch.minimum(k, st.n.to(fdt).unsqueeze(1))  # (G, nk)
    j = (st.group_start.unsqueeze(1) + m.to(torch.int64) - 1).clamp_min(0)
    j = j.clamp_max(max(st.a.numel() - 1, 0))
    a, t, r, c = (v.to(fdt)[j] for v in (st.a, st.t, st.r, st.c))
    empty = m < 1
    a, c = a.masked_fill(empty, 0.0), c.masked_fill(empty, 0.0)
    r = r.masked_fill(empty, 0.0)
    return m, a, t.masked_fill(empty, 1.0), r, c


def _relevant_in_top(st: RankStats, k: Tensor) -> Tensor:
    """Expected relevant documents in the top ``k``: ``c + r·o/t`` at the cut-off block, ``o = m − a``."""
    m, a, t, r, c = _cutoff_block(st, k)
    return c + r * (m - a).clamp_min(0) / t


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` where ``den > 0``, else 0."""
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)


def hit_rate(st: RankStats, ks: Ks) -> Tensor:
    """``1 − Π_blocks C(t−r, o)/C(t, o)``, ``o = clamp(k − a, 0, t)`` (0 when ``o > t − r``).

    Only the block at the cut-off can have ``0 < o < t``: blocks above it are wholly inside the top
    ``k`` (a hit if any is relevant, i.e. ``c > 0``), blocks below contribute a factor 1.
    """
    m, a, t, r, c = _cutoff_block(st, _ks(ks, st))
    o = (m - a).clamp_min(0)
    impossible = o > t - r
    o_ = torch.where(impossible, 0.0, o)
    log_ratio = (torch.lgamma(t - r + 1) - torch.lgamma(t + 1)) + (
        torch.lgamma(t - o_ + 1) - torch.lgamma(t - r - o_ + 1)
    )
    miss = torch.where(impossible | (c > 0), 0.0, torch.exp(torch.where(r > 0, log_ratio, 0.0)))
    return torch.where(m < 1, 0.0, 1.0 - miss)


def reciprocal_rank(st: RankStats, ks: Ks) -> Tensor:
    """Over the first block with ``r > 0``: ``Σ_{x ≤ t−r, a+x<k} C(t−x−1, r−1)/C(t, r) / (a+x+1)``."""
    fdt = st.block_gain.dtype
    k = _ks(ks, st)
    t, r, x = st.t.to(fdt), st.r.to(fdt), st.x.to(fdt)
    use = st.active & (st.r > 0) & (st.c == 0) & (st.x <= st.t - st.r)
    tx = torch.where(use, t - x, 1.0)
    rr = torch.where(use, r, 1.0)
    tt = torch.where(use, t, 1.0)
    log_w = (
        torch.lgamma(tx) - torch.lgamma(rr) - torch.lgamma(tx - rr + 1)
        - (torch.lgamma(tt + 1) - torch.lgamma(rr + 1) - torch.lgamma(tt - rr + 1))
    )  # fmt: skip
    w = torch.where(use, torch.exp(log_w) / (st.pos.to(fdt) + 1), 0.0).unsqueeze(1)
    return _per_group(st, w * (st.pos.to(fdt).unsqueeze(1) < k))


def precision(st: RankStats, ks: Ks, adaptive_k: bool = False) -> Tensor:
    """Relevant in the top ``k`` over ``k`` (``None``: over ``n``; ``adaptive_k``: over ``min(k, n)``)."""
    fdt = st.block_gain.dtype
    k = _ks(ks, st)
    n = st.n.to(fdt).unsqueeze(1)
    den = torch.where(torch.isinf(k), n, torch.minimum(k, n) if adaptive_k else k)
    return _safe_div(_relevant_in_top(st, k), den)


def recall(st: RankStats, ks: Ks) -> Tensor:
    """Relevant in the top ``k`` over ``R``."""
    fdt = st.block_gain.dtype
    return _safe_div(_relevant_in_top(st, _ks(ks, st)), st.R.to(fdt).unsqueeze(1))


def r_precision(st: RankStats) -> Tensor:
    """Relevant in the top ``R`` over ``R`` (one column)."""
    fdt = st.block_gain.dtype
    R = st.R.to(fdt).unsqueeze(1)
    return _safe_div(_relevant_in_top(st, R), R)


def average_precision(st: RankStats, ks: Ks) -> Tensor:
    """``Σ_{p<k} (r/t)·(c + 1 + x·(r−1)/(t−1)) / (p+1)``, divided by ``R``."""
    fdt = st.block_gain.dtype
    k = _ks(ks, st)
    t, r, x, c = st.t.to(fdt), st.r.to(fdt), st.x.to(fdt), st.c.to(fdt)
    pos = st.pos.to(fdt)
    others = torch.where(st.t > 1, x * (r - 1) / (t - 1).clamp_min(1), 0.0)
    term = torch.where(st.active & (st.r > 0), r / t * (c + 1 + others) / (pos + 1), 0.0)
    total = _per_group(st, term.unsqueeze(1) * (pos.unsqueeze(1) < k))
    return _safe_div(total, st.R.to(fdt).unsqueeze(1))


def _discount(pos: Tensor) -> Tensor:
    return 1.0 / torch.log2(pos + 2.0)


def normalized_dcg(st: RankStats, ks: Ks) -> Tensor:
    """DCG (expected gain of each block at each of its positions) over the ideal DCG.

    The ideal ranking orders every judged document (retrieved or not) by gain, plus ``extra`` relevant
    documents of gain 1.
    """
    fdt = st.block_gain.dtype
    k = _ks(ks, st)
    pos = st.pos.to(fdt)
    dcg_item = torch.where(st.active, st.block_gain * _discount(pos), 0.0).unsqueeze(1)
    dcg = _per_group(st, dcg_item * (pos.unsqueeze(1) < k))

    # ideal ranking: one more sort, by (group, gain descending)
    gain = st.raw_gain
    if st.raw_group is None:
        ideal = torch.sort(gain.to(fdt), dim=1, descending=True).values.reshape(-1)
        igrp = _flat_groups(gain.shape, gain.device)
    else:
        perm = sort_perm(gain.to(fdt), group=st.raw_group, num_groups=st.num_groups)
        ideal, igrp = gain.to(fdt)[perm], st.raw_group[perm]
    n_items = ideal.numel()
    counts = torch.zeros(st.num_groups, dtype=torch.int64, device=gain.device)
    counts.index_add_(0, igrp, torch.ones_like(igrp))
    ipos = torch.arange(n_items, device=gain.device) - (torch.cumsum(counts, 0) - counts)[igrp]
    if st.extra is not None:
        # extra relevant documents (gain 1) go after the items with gain >= 1
        big = torch.zeros(st.num_groups, dtype=torch.int64, device=gain.device)
        big.index_add_(0, igrp, (ideal >= 1).to(torch.int64))
        ipos = ipos + torch.where(ideal < 1, st.extra[igrp], 0)
    ipos_f = ipos.to(fdt)
    idcg_item = (ideal * _discount(ipos_f)).unsqueeze(1)
    idcg_src = idcg_item * (ipos_f.unsqueeze(1) < k)
    idcg = torch.zeros(st.num_groups, k.shape[1], dtype=fdt, device=gain.device).index_add_(0, igrp, idcg_src)
    if st.extra is not None:
        idcg = idcg + _extra_dcg(big.to(fdt), st.extra.to(fdt), k)
    return _safe_div(dcg, idcg)


def _extra_dcg(start: Tensor, count: Tensor, k: Tensor) -> Tensor:
    """``Σ_{p = start}^{start+count-1} [p < k] / log2(p + 2)`` per group (``(G, nk)``).

    Uses a cumulative discount table long enough for the largest needed position (host sync:
    functional / ``compute`` only).
    """
    lo = torch.minimum(start.unsqueeze(1), k)
    hi = torch.minimum((start + count).unsqueeze(1), k)
    top = int(hi.max().item()) if hi.numel() else 0
    table = torch.zeros(top + 1, dtype=start.dtype, device=start.device)
    if top > 0:
        table[1:] = torch.cumsum(_discount(torch.arange(top, dtype=start.dtype, device=start.device)), 0)
    return table[hi.long()] - table[lo.long()]


# --------------------------------------------------------------------------- reduction


def resolve_empty(values: Tensor, status: Tensor, empty_target_action: str) -> Tensor:
    """Per-query values after dropping absent queries and applying ``empty_target_action``.

    Dynamic shape (host sync): ``compute`` / functional only.
    """
    keep = status != STATUS_ABSENT
    empty = status == STATUS_EMPTY
    if empty_target_action == "error":
        if bool(empty.any()):
            raise ValueError(
                "A query has no relevant document and `empty_target_action` is 'error' "
                f"({int(empty.sum())} such queries)."
            )
    elif empty_target_action == "skip":
        keep = keep & ~empty
    else:
        fill = 1.0 if empty_target_action == "pos" else 0.0
        values = torch.where(empty.unsqueeze(1), fill, values)
    return values[keep]


def aggregate(values: Tensor, aggregation: Aggregation) -> Tensor:
    """Aggregate ``(Q, nk)`` per-query values over queries (dim 0); ``'none'`` returns them."""
    if isinstance(aggregation, str) and aggregation == "none":
        return values
    if values.shape[0] == 0:
        return torch.zeros(values.shape[1], dtype=values.dtype, device=values.device)
    if aggregation == "mean":
        return values.mean(0)
    if aggregation == "median":
        return values.median(0).values
    if aggregation == "min":
        return values.min(0).values
    if aggregation == "max":
        return values.max(0).values
    assert callable(aggregation)
    out: Tensor = aggregation(values, dim=0)
    return out
