"""The grouped-ranking engine shared by every retrieval metric.

All queries of a call are ranked at once, on a padded *row* layout ``(queries, m)``:

1. **Group**: 2-D input ``(queries, docs)`` is already one query per row. Flat input is put in that
   layout by one sort of ``indexes``: the items of a query become a row, padded with inactive items
   up to the largest query. When query sizes are very uneven (padding would more than double the
   work), queries are bucketed by size (powers of two), so padding stays below 2x; each bucket is
   ranked like 2-D input (a loop over at most ~30 buckets, never over queries).
2. **Order**: every row is sorted by score, descending, inactive items last (one row sort; the
   order inside a tie block does not matter, every statistic below is symmetric in it;
   ``ties="pessimistic"``/``"optimistic"`` first sort by relevance, then stably by score).
3. **Tie blocks**: within a row, items with equal scores form a block ``[a, e)`` (``t = e − a``
   items, 0-based positions). As the rows are sorted, ``a`` and ``e`` are two binary searches for
   the item's key; ``r`` (relevant items in the block) and ``c`` (relevant above it) are differences
   of one running count of relevant items, read at ``a`` and ``e``. Under the non-average policies
   every item is its own block.
4. **Metrics** are closed-form functions of these (McSherry & Najork, ECIR 2008, for the expected
   value under a uniformly random order of tied items). Cut-off metrics (hit rate, precision,
   recall, R-precision) read only the block holding position ``k − 1``; summed metrics (DCG, AP, RR)
   take a running sum along the row and read it at column ``k − 1``. Only the first ``max(k)``
   columns of a row are ever needed (all of them when ``k`` is ``None``).

Items may be *inactive*: ignored (``target == ignore_index``: they count nowhere) or judged but not
retrieved (they count in ``R`` and in the ideal DCG, but are never ranked). Inactive items are sorted
after the active ones of their row, so the ``n`` ranked items of a row are its first ``n`` columns.

Nothing here loops over queries. Ranking 2-D input never moves data to the host; grouping flat input
has dynamic shapes (host syncs), so callers do it only in ``compute`` / functional code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from embedmetrics._engine.core import tie_stats
from embedmetrics._engine.core.checks import Aggregation
from embedmetrics._engine.core.scan import rows_at

#: Queries of a result: ranked normally / no relevant document / no judged document at all.
STATUS_OK, STATUS_EMPTY, STATUS_ABSENT = 0, 1, 2

Ks = Sequence[Optional[int]]


def stats_dtype(device: torch.device) -> torch.dtype:
    """Float64 for the rank statistics wherever the device supports it (MPS does not)."""
    return torch.float32 if device.type == "mps" else torch.float64


def columns_needed(ks: Ks, m: int) -> int:
    """Columns of a row that the cut-offs ``ks`` look at: ``min(max(ks), m)``, ``m`` for ``None``."""
    if any(k is None for k in ks):
        return m
    return max(1, min(max(int(k) for k in ks if k is not None), m))


@dataclass
class RankedRows:
    """Queries as rows in ranked order.

    Per row and column (``(G, m)``): ``gain`` (relevance in ranked order, input dtype), ``keys``
    (the sorted keys ``-score``, ``inf`` for inactive items; ``None`` when every item is its own tie
    block) and ``crel`` (``(G, m + 1)``, relevant ranked items before each column). Per row: ``n``
    (ranked documents), ``R`` (relevant documents, ``extra`` included), ``found`` (relevant documents
    given), ``nonrelevant`` (judged non-relevant documents given, ranked or not: bpref's ``N``),
    ``status``. ``columns`` (``L``) is how many leading columns the metrics look at,
    ``raw_gain`` the gains in input order (for the ideal DCG) and ``extra`` the relevant documents
    given only as a count (gain 1, never retrieved).
    """

    gain: Tensor
    keys: Tensor | None
    crel: Tensor
    columns: int
    n: Tensor
    R: Tensor
    found: Tensor
    nonrelevant: Tensor
    status: Tensor
    raw_gain: Tensor
    extra: Tensor | None
    has_inactive: bool

    @property
    def fdt(self) -> torch.dtype:
        return stats_dtype(self.gain.device)

    def blocks(self, cols: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Start ``a`` and end ``e`` of the tie block of the items at ``cols`` (``(G, c)``).

        ``cols=None``: every one of the first ``L`` columns. Rows are sorted, so a block is the range
        of keys equal to the item's: two binary searches.
        """
        G = self.gain.shape[0]
        if cols is None:
            cols = torch.arange(self.columns, device=self.gain.device).expand(G, self.columns)
        if self.keys is None:
            return cols, cols + 1
        head = self.keys.gather(1, cols)
        a = torch.searchsorted(self.keys, head)
        e = torch.searchsorted(self.keys, head, right=True)
        if self.has_inactive:  # inactive items tie with active scores of -inf: cut at n
            e = torch.minimum(e, self.n.unsqueeze(1))
        return a, e


def _sorted_rows(
    score: Tensor, gain: Tensor, inactive: Tensor | None, ties: str
) -> tuple[Tensor, Tensor | None]:
    """Row-wise permutation (score descending, inactive last) and the sorted keys (``average`` only).

    The sort key is ``-score``, NaN for inactive items (NaN sorts last). The returned keys have
    ``inf`` instead of NaN, as the binary searches need a total order.
    """
    key = -score
    if inactive is not None:
        key = key.masked_fill(inactive, float("nan"))
    if ties == "average":
        sk, perm = torch.sort(key, dim=1)  # the order within a tie block does not matter
        if inactive is not None:
            inf = float("inf")
            sk = sk.nan_to_num(nan=inf, posinf=inf, neginf=-inf)
        return perm, sk
    tiebreak = gain.to(stats_dtype(gain.device))  # pessimistic: irrelevant (lowest gain) first
    if ties == "optimistic":
        tiebreak = -tiebreak
    first = torch.sort(tiebreak, dim=1).indices
    step = torch.sort(key.gather(1, first), dim=1, stable=True).indices  # keeps the tiebreak order
    return first.gather(1, step), None


def _running_sum(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``(G, m + 1)`` sums of the first ``j`` columns of ``x``, ``j = 0..m``."""
    out = torch.zeros(x.shape[0], x.shape[1] + 1, dtype=dtype, device=x.device)
    torch.cumsum(x, 1, dtype=dtype, out=out[:, 1:])
    return out


def rank_rows(
    score: Tensor,
    gain: Tensor,
    *,
    columns: int,
    inactive: Tensor | None = None,
    judged: Tensor | None = None,
    num_relevant: Tensor | None = None,
    ties: str = "average",
    needs: str = "relevant",
) -> RankedRows:
    """Rank every row of ``(G, m)`` input at once (no host sync).

    Args:
        score: ``(G, m)`` scores, one query per row.
        gain: relevance (``>= 0``, any real dtype) of each item; 0 for ignored and padding items.
        columns: how many leading columns the metrics look at (``columns_needed``).
        inactive: items that are not ranked (ignored, padding, or judged but not retrieved).
        judged: items that exist for the query (not ignored, not padding); ``None`` means all.
        num_relevant: per row, the total number of relevant documents (``>=`` those in ``gain``).
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        needs: what a query must have not to be "empty": a ``"relevant"`` document (most metrics) or
            an ``"irrelevant"`` ranked document (fall-out).
    """
    if score.ndim != 2:
        raise ValueError(f"2-D scores expected, got shape {tuple(score.shape)}.")
    G, m = score.shape
    device = score.device
    perm, keys = _sorted_rows(score, gain, inactive, ties)
    g = gain.gather(1, perm)
    n = torch.full((G,), m, dtype=torch.int64, device=device)
    if inactive is not None:
        n = n - inactive.sum(1)
    # relevant items before each column; read only up to n (inactive items come after the ranked ones)
    crel = _running_sum(g if g.dtype == torch.bool else g > 0, stats_dtype(device))
    found = crel[:, -1].to(torch.int64)
    extra: Tensor | None = None
    R = found
    if num_relevant is not None:
        extra = num_relevant.to(device=device, dtype=torch.int64) - found
        R = found + extra
    present = torch.ones(G, dtype=torch.bool, device=device) if judged is None else judged.any(1)
    given = torch.full_like(n, m) if judged is None else judged.sum(1)
    has = R > 0 if needs == "relevant" else n > found
    status = torch.where(present, torch.where(has, STATUS_OK, STATUS_EMPTY), STATUS_ABSENT).to(torch.int8)
    return RankedRows(
        gain=g,
        keys=keys,
        crel=crel,
        columns=min(columns, m),
        n=n,
        R=R,
        found=found,
        nonrelevant=given - found,
        status=status,
        raw_gain=gain,
        extra=extra,
        has_inactive=inactive is not None,
    )


# --------------------------------------------------------------------------- grouping flat input


def _group_layout(indexes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Items in group order (``perm``), and per group (ascending index) its first item and size.

    One sort of the indexes (as int32 when their range allows: faster). Host sync.
    """
    idx = indexes.reshape(-1).to(torch.int64)
    N = idx.numel()
    lo, hi = (int(v) for v in torch.aminmax(idx))
    if lo >= -(2**31) and hi < 2**31:
        idx = idx.to(torch.int32)
    elif hi - lo < 2**31:
        idx = (idx - lo).to(torch.int32)
    sk, perm = torch.sort(idx)  # the order within a group does not matter: rows are sorted next
    new = torch.ones(N, dtype=torch.bool, device=idx.device)
    new[1:] = sk[1:] != sk[:-1]
    starts = new.nonzero().squeeze(1)
    counts = torch.diff(starts, append=torch.full((1,), N, dtype=starts.dtype, device=starts.device))
    return perm, starts, counts


def _buckets(counts: Tensor) -> list[tuple[Tensor | None, int]]:
    """Groups to rank together, as ``(rows or None for all, width)``, padding at most ~2x the items.

    Host sync.
    """
    width = int(counts.max())
    if counts.numel() * width <= 2 * int(counts.sum()):
        return [(None, width)]
    size_class = torch.ceil(torch.log2(counts.to(torch.float64))).to(torch.int64)
    out: list[tuple[Tensor | None, int]] = []
    for c in torch.unique(size_class).tolist():
        rows = (size_class == c).nonzero().squeeze(1)
        out.append((rows, int(counts[rows].max())))
    return out


def _bucket_items(
    perm: Tensor, starts: Tensor, counts: Tensor, rows: Tensor | None, width: int
) -> tuple[Tensor, Tensor | None]:
    """``(G_b, width)`` flat positions of the items of the bucket's groups, and the padding mask.

    When every group has ``width`` items, the layout is a view of ``perm`` (no padding). Host sync.
    """
    if rows is None and int(counts.min()) == width:
        return perm.view(-1, width), None
    first, size = (starts, counts) if rows is None else (starts[rows], counts[rows])
    col = torch.arange(width, device=perm.device)
    valid = col < size.unsqueeze(1)
    return rows_at(perm, torch.where(valid, first.unsqueeze(1) + col, 0)), ~valid


def query_rows(indexes: Tensor) -> tuple[Tensor, Tensor | None] | None:
    """Flat input as one row per query, for callers that evaluate the same rows many times (group
    once, then pass 2-D input): ``(items, padding)``, the ``(G, width)`` flat positions of each query's
    items (queries in ascending index order) and the padding mask (``None``: none), or ``None`` when the
    query sizes are so uneven that one padded matrix would be more than twice the items (the flat path
    buckets them instead). Host sync.
    """
    perm, starts, counts = _group_layout(indexes)
    buckets = _buckets(counts)
    if len(buckets) != 1:
        return None
    return _bucket_items(perm, starts, counts, None, buckets[0][1])


PerRow = Callable[[RankedRows], Tensor]


def evaluate(
    metric: PerRow,
    score: Tensor,
    gain: Tensor,
    *,
    ks: Ks,
    indexes: Tensor | None = None,
    inactive: Tensor | None = None,
    judged: Tensor | None = None,
    num_relevant: Tensor | None = None,
    ties: str = "average",
    needs: str = "relevant",
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-query ``metric`` values ``(G, nk)``, status ``(G,)`` and relevant documents given ``(G,)``.

    Without ``indexes``, ``score`` is ``(G, m)`` (no host sync). With ``indexes`` (flat input), the
    queries are the distinct indexes in ascending order (host syncs).
    """
    if indexes is None:
        st = rank_rows(
            score,
            gain,
            columns=columns_needed(ks, score.shape[1]),
            inactive=inactive,
            judged=judged,
            num_relevant=num_relevant,
            ties=ties,
            needs=needs,
        )
        return metric(st), st.status, st.found
    perm, starts, counts = _group_layout(indexes)
    score, gain = score.reshape(-1), gain.reshape(-1)
    inactive = None if inactive is None else inactive.reshape(-1)
    judged = None if judged is None else judged.reshape(-1)
    if num_relevant is not None and num_relevant.numel() != counts.numel():
        raise ValueError(
            f"Argument `num_relevant` must have one entry per distinct index ({counts.numel()}), "
            f"got shape {tuple(num_relevant.shape)}."
        )
    parts: list[tuple[Tensor | None, Tensor, Tensor, Tensor]] = []
    for rows, width in _buckets(counts):
        item, pad = _bucket_items(perm, starts, counts, rows, width)
        inactive_b, judged_b = pad, None if pad is None else ~pad
        if inactive is not None:
            inactive_b = rows_at(inactive, item) if pad is None else pad | rows_at(inactive, item)
        if judged is not None:
            judged_b = rows_at(judged, item) if pad is None else rows_at(judged, item) & ~pad
        gain_b = rows_at(gain, item)
        st = rank_rows(
            rows_at(score, item),
            gain_b if pad is None else gain_b.masked_fill(pad, 0),
            columns=columns_needed(ks, width),
            inactive=inactive_b,
            judged=judged_b,
            num_relevant=num_relevant if num_relevant is None or rows is None else num_relevant[rows],
            ties=ties,
            needs=needs,
        )
        parts.append((rows, metric(st), st.status, st.found))
    if len(parts) == 1:
        return parts[0][1], parts[0][2], parts[0][3]
    G = counts.numel()
    values = torch.empty(G, parts[0][1].shape[1], dtype=parts[0][1].dtype, device=score.device)
    status = torch.empty(G, dtype=torch.int8, device=score.device)
    found = torch.empty(G, dtype=torch.int64, device=score.device)
    for rows, v, s, f in parts:
        assert rows is not None
        values[rows], status[rows], found[rows] = v, s, f
    return values, status, found


# --------------------------------------------------------------------------- metrics
# Each maps RankedRows to a (G, len(ks)) tensor of per-query values in the stats dtype.


def _row(values: Sequence[float], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``(1, len(values))`` tensor of Python numbers, filled on ``device`` (no host-to-device copy).

    ``torch.tensor(values, device=device)`` would copy from host memory, which synchronises with a
    CUDA device; ``update`` of 2-D input must not.
    """
    return torch.stack([torch.full((), v, dtype=dtype, device=device) for v in values]).unsqueeze(0)


def cutoff_row(ks: Ks, st: RankedRows) -> Tensor:
    """Cut-offs as a ``(1, nk)`` float row; ``None`` (all ranked documents) is ``inf``."""
    vals = [float("inf") if k is None else float(k) for k in ks]
    return _row(vals, st.fdt, st.gain.device)


def _last_column(ks: Ks, st: RankedRows) -> Tensor:
    """``(G, nk)`` column ``min(k, L) − 1`` where a running sum along the row is read for cut-off ``k``."""
    L = st.columns
    cols = [L - 1 if k is None else min(int(k), L) - 1 for k in ks]
    return _row(cols, torch.int64, st.gain.device).expand(st.gain.shape[0], len(cols))


def cutoff_block(st: RankedRows, k: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per row and cut-off: ``m = min(k, n)`` and ``(a, t, r, c)`` of the block holding position ``m − 1``.

    Everything above that block is inside the top ``k``, everything below is outside, so the metrics
    that only count relevant documents in the top ``k`` need nothing else (``(G, nk)`` work).
    """
    m = torch.minimum(k, st.n.unsqueeze(1).to(st.fdt))  # (G, nk)
    empty = m < 1
    a, e = st.blocks((m.to(torch.int64) - 1).clamp_min(0))
    c = st.crel.gather(1, a)
    r = (st.crel.gather(1, e) - c).masked_fill(empty, 0.0)
    t = (e - a).to(st.fdt).masked_fill(empty, 1.0)
    return m, a.to(st.fdt).masked_fill(empty, 0.0), t, r, c.masked_fill(empty, 0.0)


def relevant_in_top(st: RankedRows, k: Tensor) -> Tensor:
    """Expected relevant documents in the top ``k``: ``c + r·o/t`` at the cut-off block, ``o = m − a``."""
    m, a, t, r, c = cutoff_block(st, k)
    return c + r * (m - a).clamp_min(0) / t


def _items(st: RankedRows) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per item of the first ``L`` columns: position ``p``, ranked mask and ``(t, r, c, x)`` (stats dtype)."""
    p = torch.arange(st.columns, dtype=st.fdt, device=st.gain.device)
    a_i, e_i = st.blocks()
    a = a_i.to(st.fdt)
    c = st.crel.gather(1, a_i)
    r = st.crel.gather(1, e_i) - c
    ranked = p < st.n.unsqueeze(1)
    return p, ranked, e_i.to(st.fdt) - a, r, c, p - a


def hit_rate(st: RankedRows, ks: Ks) -> Tensor:
    """``1 − Π_blocks C(t−r, o)/C(t, o)``, ``o = clamp(k − a, 0, t)`` (0 when ``o > t − r``).

    Only the block at the cut-off can have ``0 < o < t``: blocks above it are wholly inside the top
    ``k`` (a hit if any is relevant, i.e. ``c > 0``), blocks below contribute a factor 1.
    """
    m, a, t, r, c = cutoff_block(st, cutoff_row(ks, st))
    o = (m - a).clamp_min(0)
    impossible = o > t - r
    o_ = torch.where(impossible, 0.0, o)
    log_ratio = (torch.lgamma(t - r + 1) - torch.lgamma(t + 1)) + (
        torch.lgamma(t - o_ + 1) - torch.lgamma(t - r - o_ + 1)
    )
    miss = torch.where(impossible | (c > 0), 0.0, torch.exp(torch.where(r > 0, log_ratio, 0.0)))
    return torch.where(m < 1, 0.0, 1.0 - miss)


def reciprocal_rank(st: RankedRows, ks: Ks) -> Tensor:
    """Over the first block with ``r > 0``: ``Σ_{x ≤ t−r, a+x<k} C(t−x−1, r−1)/C(t, r) / (a+x+1)``.

    That block holds the first relevant item ``f`` (a binary search in the running count of relevant
    items); the probabilities come from ``first_relevant``.
    """
    fdt, G, m = st.fdt, st.gain.shape[0], st.gain.shape[1]
    f = torch.searchsorted(st.crel, torch.ones(G, 1, dtype=fdt, device=st.gain.device)) - 1
    found = f < st.n.unsqueeze(1)  # a ranked relevant item exists
    a_i, e_i = st.blocks(f.clamp_max(m - 1))
    r = st.crel.gather(1, e_i) - st.crel.gather(1, a_i)
    t, a = (e_i - a_i).to(fdt), a_i.to(fdt)
    p = torch.arange(st.columns, dtype=fdt, device=st.gain.device)
    first = torch.where(found, tie_stats.first_relevant(t, r, p - a), 0.0)
    return tie_stats.at(tie_stats.reciprocal_ranks(first), _last_column(ks, st))


def precision(st: RankedRows, ks: Ks, adaptive_k: bool = False) -> Tensor:
    """Relevant in the top ``k`` over ``k`` (``None``: over ``n``; ``adaptive_k``: over ``min(k, n)``)."""
    k = cutoff_row(ks, st)
    n = st.n.to(st.fdt).unsqueeze(1)
    den = torch.where(torch.isinf(k), n, torch.minimum(k, n) if adaptive_k else k)
    return tie_stats.ratio(relevant_in_top(st, k), den)


def recall(st: RankedRows, ks: Ks) -> Tensor:
    """Relevant in the top ``k`` over ``R``."""
    return tie_stats.ratio(relevant_in_top(st, cutoff_row(ks, st)), st.R.to(st.fdt).unsqueeze(1))


def fall_out(st: RankedRows, ks: Ks) -> Tensor:
    """Irrelevant documents in the top ``k`` over all irrelevant (ranked) documents ``n − found``."""
    k = cutoff_row(ks, st)
    m = torch.minimum(k, st.n.to(st.fdt).unsqueeze(1))
    irrelevant = (st.n - st.found).to(st.fdt).unsqueeze(1)
    return tie_stats.ratio(m - relevant_in_top(st, k), irrelevant)


def r_precision(st: RankedRows) -> Tensor:
    """Relevant in the top ``R`` over ``R`` (one column); needs every column (``ks=(None,)``)."""
    R = st.R.to(st.fdt).unsqueeze(1)
    return tie_stats.ratio(relevant_in_top(st, R), R)


def r_precision_multiple(st: RankedRows, multiple: float) -> Tensor:
    """trec_eval's ``Rprec_mult``: relevant in the top ``k`` over ``k``, ``k = ⌊multiple·R + 0.9⌋``
    (trec_eval 9's rounding; 0 when ``k`` is 0). ``multiple=1`` is R-precision. Needs every column."""
    k = torch.floor(multiple * st.R.to(st.fdt).unsqueeze(1) + 0.9)
    return tie_stats.ratio(relevant_in_top(st, k), k)


def average_precision(st: RankedRows, ks: Ks) -> Tensor:
    """``Σ_{p<k} (r/t)·(c + 1 + x·(r−1)/(t−1)) / (p+1)``, divided by ``R``.

    The summands are ``precision_terms``, shared with the kNN scan.
    """
    p, ranked, t, r, c, x = _items(st)
    term = torch.where(ranked & (r > 0), tie_stats.precision_terms(t, r, c, x, p), 0.0)
    return tie_stats.ratio(tie_stats.at(term, _last_column(ks, st)), st.R.to(st.fdt).unsqueeze(1))


def auroc(st: RankedRows, ks: Ks, max_fpr: float | None = None) -> Tensor:
    """Area under the ROC curve of the top ``k`` documents (standardised partial area for ``max_fpr``).

    Under a random order of tied items, the ``i``-th irrelevant item of a tie block (``t`` items,
    ``r`` relevant, ``c`` relevant above it) has ``c + i·r/(t − r + 1)`` relevant items before it in
    expectation. The area up to ``x`` irrelevant items, times ``P·N``, is the sum of those counts over
    the first ``⌊x⌋`` irrelevant items plus ``x − ⌊x⌋`` of the next: linear, so exact in expectation
    (the full area is the Mann–Whitney count with ties as halves). The top ``k`` cuts the block at the
    cut-off: ``j`` of its ``r`` relevant items enter with probability ``C(r, j)·C(t − r, o − j)/C(t, o)``
    (``o`` places left) and the area is averaged over ``j``. A top ``k`` without both a relevant and an
    irrelevant document scores 0, as in torchmetrics. ``max_fpr`` gives McClish's standardised
    partial area, ``0.5·(1 + (A − f²/2)/(f − f²/2))``.
    """
    fdt, device, L = st.fdt, st.gain.device, st.columns
    G = st.gain.shape[0]
    p = torch.arange(L, device=device).expand(G, L)
    a_i, e_i = st.blocks()
    c_i = st.crel.gather(1, a_i)
    r_i = st.crel.gather(1, e_i) - c_i
    before = st.crel[:, :L]
    negative = (p < st.n.unsqueeze(1)) & (st.crel[:, 1 : L + 1] == before)
    ordinal = p.to(fdt) - before  # irrelevant items before this one (its 0-based ordinal)
    within = ordinal - (a_i.to(fdt) - c_i) + 1.0  # its 1-based ordinal among its block's irrelevant
    expected_tp = c_i + within * r_i / ((e_i - a_i).to(fdt) - r_i + 1.0)
    slot = torch.where(negative, ordinal.to(torch.int64), L)  # the rest land in a spare column
    per_negative = torch.zeros(G, L + 1, dtype=fdt, device=device)
    per_negative.scatter_(1, slot, torch.where(negative, expected_tp, 0.0))
    area_upto = _running_sum(per_negative[:, :L], fdt)  # (G, L + 1): first q irrelevant items

    k = cutoff_row(ks, st)
    m, a, t, r, c = cutoff_block(st, k)
    o = (m - a).clamp_min(0)
    finite = [int(v) for v in ks if v is not None]
    J = 1 if not finite else min(max(finite), L) + 1
    j_lo = (o - (t - r)).clamp_min(0)
    j = j_lo.unsqueeze(2) + torch.arange(J, dtype=fdt, device=device)  # (G, nk, J)
    valid = j <= torch.minimum(r, o).unsqueeze(2)
    j = torch.where(valid, j, j_lo.unsqueeze(2))
    t3, r3, o3, c3 = (v.unsqueeze(2) for v in (t, r, o, c))
    n_above = (a - c).unsqueeze(2)
    P, N = c3 + j, n_above + o3 - j
    log_w = (
        torch.lgamma(r3 + 1)
        - torch.lgamma(j + 1)
        - torch.lgamma(r3 - j + 1)
        + torch.lgamma(t3 - r3 + 1)
        - torch.lgamma(o3 - j + 1)
        - torch.lgamma(t3 - r3 - o3 + j + 1)
        - torch.lgamma(t3 + 1)
        + torch.lgamma(o3 + 1)
        + torch.lgamma(t3 - o3 + 1)
    )
    weight = torch.where(o3 == t3, 1.0, torch.exp(log_w)).masked_fill(~valid, 0.0)

    def area(q: Tensor) -> Tensor:  # sum of the expected counts of the first q irrelevant items
        inside = (q - n_above).clamp_min(0)
        upto = area_upto.gather(1, torch.minimum(q, n_above).to(torch.int64).flatten(1)).view(q.shape)
        return upto + inside * c3 + j * inside * (inside + 1) / (2 * (o3 - j + 1))

    if max_fpr is None or max_fpr == 1.0:
        value = tie_stats.ratio(area(N), P * N)
    else:
        x = max_fpr * N
        q = torch.floor(x)
        part = area(q) + (x - q) * (area(torch.minimum(q + 1, N)) - area(q))
        lo = 0.5 * max_fpr**2
        value = 0.5 * (1 + (tie_stats.ratio(part, P * N) - lo) / (max_fpr - lo))
    value = torch.where((P > 0) & (N > 0), value, 0.0)
    return (weight * value).sum(2)


def _discount(pos: Tensor) -> Tensor:
    return 1.0 / torch.log2(pos + 2.0)


def normalized_dcg(st: RankedRows, ks: Ks) -> Tensor:
    """DCG (mean gain of each item's block at its position) over the ideal DCG.

    The ideal ranking orders every judged document (retrieved or not) by gain, plus ``extra`` relevant
    documents of gain 1.
    """
    fdt = st.fdt
    L = st.columns
    device = st.gain.device
    p = torch.arange(L, dtype=fdt, device=device)
    disc = _discount(p)
    a, e = st.blocks()
    cg = _running_sum(st.gain, fdt)
    block_gain = (cg.gather(1, e) - cg.gather(1, a)) / (e - a).to(fdt)
    last = _last_column(ks, st)
    dcg = tie_stats.at(torch.where(p < st.n.unsqueeze(1), block_gain * disc, 0.0), last)

    # ideal ranking: the L largest gains of the row (later ones are past every cut-off)
    ideal = torch.topk(st.raw_gain.to(fdt), L, dim=1).values
    if st.extra is None:
        idcg = (ideal * disc).cumsum(1).gather(1, last)
    else:
        # extra relevant documents (gain 1) go after the items with gain >= 1
        k = cutoff_row(ks, st)
        ipos = p + torch.where(ideal < 1, st.extra.unsqueeze(1), 0)
        items = (ideal * _discount(ipos)).unsqueeze(2) * (ipos.unsqueeze(2) < k.unsqueeze(1))
        big = (st.raw_gain >= 1).sum(1).to(fdt)
        idcg = items.sum(1) + _extra_dcg(big, st.extra.to(fdt), k)
    return tie_stats.ratio(dcg, idcg)


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


def resolve_empty(
    values: Tensor, status: Tensor, empty_target_action: str, needs: str = "relevant"
) -> Tensor:
    """Per-query values after dropping absent queries and applying ``empty_target_action``.

    Dynamic shape (host sync): ``compute`` / functional only.
    """
    keep = status != STATUS_ABSENT
    empty = status == STATUS_EMPTY
    if empty_target_action == "error":
        if bool(empty.any()):
            raise ValueError(
                f"A query has no {needs} document and `empty_target_action` is 'error' "
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
