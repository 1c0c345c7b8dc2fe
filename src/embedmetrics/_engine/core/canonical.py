"""Canonical keys: a (query, reference) pair gets one key, whatever else shares its matrix product.

A matrix product's kernel rounds an entry according to the shape of the product and where the entry
sits in it (MKL's AVX2 kernels treat the edge rows and columns of a tile and the threads' split
differently; cuBLAS picks tiles by shape). A key read off a block of the product therefore depends,
in its last bits, on the other queries of the batch, the block size and the position of the row:
ties appear or vanish with them, and with them every tie-aware value.

The scans keep the product as a fast *filter* and rank by canonical keys. The canonical key of a pair
is the sum of the products of its two factor rows (each factor row a function of its own input row
alone), in their dtype, by elementwise operations alone (``pair_dots``: the products, then one fixed
pairwise tree of additions): every step is one IEEE rounding, so the key is a function of the two rows
alone, wherever and with whatever the pair is computed. A product key differs from the exact value by at
most ``γ_d Σ|a_k b_k|`` in any summation order (``u`` the unit roundoff, ``γ_n = n u / (1 - n u)``,
``d`` the factor rows' length), the canonical key by at most ``γ_t Σ|a_k b_k|`` (``t`` the roundings
on a product's way through the tree, ``tree_roundings``), so from each other by at most half the
``margin``: ``(d + t + 2) eps`` times a bound on ``Σ|a_k b_k|`` (``margins_of``). Every entry that can
be among a row's ``kk`` smallest canonical keys (or tie with the ``kk``-th) thus has a product key
within the margin of the row's ``kk``-th smallest product key: only those entries are rescored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.core.scan import row_norms

#: ``classes(rows, cols)``: ``(n, w)`` class of the pairs (block row ``rows[i]``, key column
#: ``cols[i, j]``): what a list's reader tells its entries apart by.
PairClasses = Callable[[Tensor, Tensor], Tensor]


@dataclass
class ListReader:
    """What the reader of a block's ``kk``-long lists reads of them: the ``classes`` of the entries in
    each row's first ``reach`` places (``(rows,)`` int64; ``None``: every place) and the tie blocks that
    hold them; past the reach, nothing it reads may change a value it reports."""

    classes: PairClasses
    reach: Optional[Tensor] = None

    def take(self, rows: Tensor) -> ListReader:
        """The reader of the block rows ``rows`` only, indexed from 0."""
        reach = None if self.reach is None else self.reach[rows]
        return ListReader(lambda r, c: self.classes(rows[r], c), reach)


#: Candidates past a row's ``kk``-th that ``canonical_candidates`` ranks by a ``topk``: in a block where a
#: row's margin reaches further (rare), every row's candidates are sorted instead.
HEAD_SLACK = 8

#: Bytes of one operand's rows per chunk of ``pair_dots`` (the buffers are made once per call): the two
#: operands and the tree's passes stay in a core's L2 cache.
PAIR_CHUNK_BYTES = 2**20


def pair_dots(
    a_rows: Tensor,
    b_rows: Tensor,
    a_index: Tensor,
    b_index: Tensor,
    b_factor: Optional[Callable[[Tensor, Tensor], None]] = None,
) -> Tensor:
    """``a_rows[a_index[i]] · b_rows[b_index[i]]`` for every ``i`` (float64 out), computed in the rows'
    dtype by elementwise operations alone: the products, then their sum by ``tree_sum``. Each step is one
    IEEE rounding of its operands, so a pair's key is a function of its two rows alone, whatever the
    other pairs, the chunks, the threads or the CPU's vector width. ``b_factor(raw, out)``: writes the
    right factor rows of raw ``b_rows`` (a function of each row alone) into ``out`` chunk by chunk, so
    memory stays ``O(PAIR_CHUNK_BYTES)``; the buffers are made once (a fresh chunk would first-touch
    its pages each time)."""
    n, d = a_index.numel(), a_rows.shape[1]
    out = torch.empty(n, dtype=torch.float64, device=a_rows.device)
    step = max(1, min(n, PAIR_CHUNK_BYTES // max(1, d * a_rows.element_size())))
    a = a_rows.new_empty(step, d)
    b = torch.empty_like(a)
    raw = b if b_factor is None else b_rows.new_empty(step, b_rows.shape[1])
    for lo in range(0, n, step):
        m = min(n, lo + step) - lo
        torch.index_select(a_rows, 0, a_index[lo : lo + m], out=a[:m])
        torch.index_select(b_rows, 0, b_index[lo : lo + m], out=raw[:m])
        if b_factor is not None:
            b_factor(raw[:m], b[:m])
        out[lo : lo + m] = tree_sum(a[:m].mul_(b[:m]))
    return out


def tree_sum(x: Tensor) -> Tensor:
    """Row sums of ``x`` (``(n, w)``; overwritten) by one fixed pairwise tree: the columns past the
    largest power of two ``p <= w`` are added onto the first ones, then the second half of the first
    ``p`` onto the first, until one column is left. Each entry meets at most ``tree_roundings(w) − 1``
    additions on its way to the sum. Rows of no column sum to 0."""
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0])
    p = 1 << (x.shape[1].bit_length() - 1)
    if x.shape[1] > p:
        x[:, : x.shape[1] - p].add_(x[:, p:])
    while p > 1:
        p //= 2
        x[:, :p].add_(x[:, p : 2 * p])
    return x[:, 0]


def tree_roundings(w: int) -> int:
    """Roundings on the way of one product of a ``w``-long row to its ``pair_dots`` key: its own, the
    fold of the columns past the largest power of two (where there are any), one per halving (0 for
    rows of no column: their sum is an exact 0)."""
    if w < 1:
        return 0
    p = 1 << (w.bit_length() - 1)
    return 1 + int(w > p) + (p.bit_length() - 1)


def key_margins(a: Tensor, b: Tensor, euclidean: bool = False) -> Tensor:
    """Per row of ``a``, twice the largest distance between a product key ``a_i · b_j`` (any kernel,
    any order) and its canonical key (``margins_of`` with the largest norm of the rows of ``b``)."""
    if b.shape[0] == 0:
        return torch.zeros(a.shape[0], dtype=torch.float64, device=a.device)
    return margins_of(a, float(row_norms(b[:, :-1] if euclidean else b).max()), euclidean)


def margins_of(a: Tensor, top: float, euclidean: bool = False) -> Tensor:
    """Per row of ``a`` (``d`` columns), ``(d + t + 2) eps`` times a bound on ``Σ_k |a_ik b_jk|`` for right
    factor rows of norm at most ``top``, float64, ``t = tree_roundings(d)``: a product key is within
    ``γ_d`` of that sum of the exact value (any order), a canonical key within ``γ_t``, so two keys of one
    pair within ``(d + t) eps / 2`` of each other, and twice that is the margin (the norms in the rows'
    dtype: their own rounding and the ``γ``'s denominators covered by a 2% slack). The bound is
    ``||a_i|| top``; for the Euclidean layout (``a = [-2q, 1]``, ``b = [r, ||r||²]``, ``top`` the largest
    ``||r||``) the tighter ``2 ||q|| top + top²``: Cauchy–Schwarz on the appended column would square
    ``top``. Plus ``8 d`` times the dtype's smallest normal number, for products and sums that
    underflow (the ``γ`` bounds hold in the normal range; subnormal inputs are taken as they are, not
    flushed to zero). The norms are ``scan.row_norms``: computed without underflow or overflow."""
    d = a.shape[1]
    info = torch.finfo(a.dtype)
    scale = 1.02 * (d + tree_roundings(d) + 2) * info.eps
    bound = row_norms(a[:, :-1]) * top + 1.01 * top * top if euclidean else row_norms(a) * top
    # underflow: a product or a sum below the smallest normal number is off by at most that number
    # (even flushed to zero), so each key by at most 2 d of them
    margins: Tensor = bound * scale + 8 * d * info.tiny
    return margins


@dataclass
class Rescorer:
    """Canonical keys of one block of rows: the block's factor rows ``a``, the reference factor rows
    ``b``, which row of ``b`` each key column holds (``column_row``, ``None``: column ``j`` is row ``j``),
    and per row twice the product's largest error (``margins``)."""

    a: Tensor
    b: Tensor
    column_row: Optional[Tensor]
    margins: Tensor

    def keys(self, rows: Tensor, cols: Tensor) -> Tensor:
        """Canonical float64 keys of the (block row, key column) pairs."""
        b_index = cols if self.column_row is None else self.column_row[cols]
        return pair_dots(self.a, self.b, rows, b_index)

    def take(self, rows: Tensor) -> Rescorer:
        """The same keys for the block rows ``rows`` only."""
        return Rescorer(self.a[rows], self.b, self.column_row, self.margins[rows])

    def widened(self, keys: Tensor, rows: Optional[Tensor] = None) -> Tensor:
        """``keys`` (one per row, or per ``rows``) plus the rows' margins, rounded up in ``keys``' dtype:
        every product key that can tie with or beat a canonical key ``<= keys`` is ``<=`` this."""
        m = self.margins if rows is None else self.margins[rows]
        out = (keys.double() + m).to(keys.dtype)
        return torch.nextafter(out, torch.full_like(out, float("inf")))

    def rows(self, s: Tensor, rows: Tensor, upto: Tensor) -> Tensor:
        """Whole rows ``rows`` of the product keys ``s`` (float64), canonical wherever an entry can be
        ``<= upto`` (per row) canonically: an equality with a canonical key read off them is exact."""
        sub = s[rows].double()
        limit = self.widened(upto.to(s.dtype), rows).double()
        near = (sub <= limit[:, None]).nonzero()
        if near.numel() > 0:
            sub[near[:, 0], near[:, 1]] = self.keys(rows[near[:, 0]], near[:, 1])
        return sub


def canonical_smallest(
    vals: Tensor,
    idx: Tensor,
    s: Tensor,
    rescore: Rescorer,
    columns: Optional[Tensor] = None,
    values: bool = True,
    reader: Optional[ListReader] = None,
) -> tuple[Tensor, Tensor]:
    """The ``kk = vals.shape[1]`` smallest canonical keys of each row of ``s`` and their columns, ascending.

    ``vals``, ``idx``: the rows' ``kk`` smallest *product* keys of ``s`` (``+inf`` past a row's wanted
    keys). Every entry of ``s`` within the margin of the row's last finite listed key is a candidate; the
    ``kk`` smallest are kept (equal canonical keys in any order). ``values``: every candidate is rescored;
    otherwise only those within the margin of the next smaller or larger candidate: an entry farther
    from both keeps its product key, which orders it as its canonical key would and ties with nothing,
    so the order and the tie blocks (all that rank statistics read) are canonical, not every value.
    ``columns``: the key column of each entry of ``s`` where ``s`` holds candidates rather than whole
    rows. Rows holding NaN keep their product keys (their values are NaN anyway); ``+inf`` entries
    (masked columns, padding) stay ``+inf``.
    ``reader`` (with ``values`` off): a run of near candidates of one class keeps its product keys
    unless it reaches the ``kk − 1``-th key (``mixed_runs``), and a run that starts past the reader's
    ``reach`` keeps them all: the reader sees no difference.
    """
    nb, kk = vals.shape
    last, ok = _last_listed(vals)
    limit = torch.where(ok, rescore.widened(last), -torch.inf)
    near = (s <= limit[:, None]).nonzero()
    if near.numel() == 0:
        return vals.double(), idx
    rows = near[:, 0]
    cols = near[:, 1] if columns is None else columns[rows, near[:, 1]]
    count = torch.bincount(rows, minlength=nb)
    width = max(int(count.max()), kk)
    slot = rows * width + torch.arange(rows.numel(), device=s.device) - (count.cumsum(0) - count)[rows]
    keys = torch.full((nb * width,), float("inf"), dtype=torch.float64, device=s.device)
    keys.index_copy_(0, slot, s[near[:, 0], near[:, 1]].double())
    picked = torch.zeros(nb * width, dtype=torch.int64, device=s.device).index_copy_(0, slot, cols)
    keys, order = keys.view(nb, width).sort(dim=1)
    picked = picked.view(nb, width).gather(1, order)
    return _rescored_smallest(keys, picked, kk, rescore, values, ok, (vals, idx), reader)


def canonical_candidates(
    cand: Tensor,
    cand_col: Tensor,
    kk: int,
    rescore: Rescorer,
    values: bool = True,
    reader: Optional[ListReader] = None,
) -> tuple[Tensor, Tensor]:
    """``canonical_smallest`` where ``cand`` (``(rows, width)``, ``width >= kk``, ``+inf`` padding) holds
    every product key of a row that can be among its ``kk`` smallest canonical keys, and ``cand_col``
    their key columns: one ranking of the candidates instead of a ``topk`` and a second gathering."""
    keys, order, count, ok = _margin_prefix(cand, kk, rescore)
    width = max(int(count.max()), kk)
    cols = cand_col.gather(1, order[:, :width])
    within = keys[:, :width].masked_fill(torch.arange(width, device=cand.device) >= count, torch.inf)
    return _rescored_smallest(within, cols, kk, rescore, values, ok, (keys[:, :kk], cols[:, :kk]), reader)


def _margin_prefix(cand: Tensor, kk: int, rescore: Rescorer) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each row's candidates ascending (``keys``, their places in ``cand``: ``order``) at least as far
    as the margin of its ``kk``-th key reaches: its first ``count`` (``(rows, 1)``; 0 for rows not
    ``ok``, ``_last_listed``). A ``topk`` of ``kk + HEAD_SLACK`` keys, or where a row's margin reaches
    its last, a sort of every candidate."""
    head = min(cand.shape[1], kk + HEAD_SLACK)
    keys, order = cand.topk(head, dim=1, largest=False, sorted=True)
    last, ok = _last_listed(keys[:, :kk])
    limit = torch.where(ok, rescore.widened(last), -torch.inf)[:, None]
    count = torch.searchsorted(keys, limit, right=True)
    if head < cand.shape[1] and bool((count == head).any()):
        keys, order = cand.sort(dim=1)
        count = torch.searchsorted(keys, limit, right=True)
    return keys, order, count, ok


def _last_listed(vals: Tensor) -> tuple[Tensor, Tensor]:
    """Per row of ascending ``vals`` (``+inf`` past a row's wanted keys, NaN last), its last finite key
    and whether the row is ``ok``: it holds a finite key and no NaN. A row whose last key is finite is
    ``ok`` (NaN sorts last), so only the other rows are read whole: the common case reads one key a row."""
    last = vals[:, -1].clone()
    ok = torch.isfinite(last)
    odd = (~ok).nonzero().view(-1)
    if odd.numel() > 0:
        some = vals[odd]
        last[odd] = torch.where(torch.isfinite(some), some, -torch.inf).amax(dim=1)
        ok[odd] = ~some.isnan().any(dim=1) & torch.isfinite(last[odd])
    return last, ok


def _rescored_smallest(
    keys: Tensor,
    cols: Tensor,
    kk: int,
    rescore: Rescorer,
    values: bool,
    ok: Tensor,
    product: tuple[Tensor, Tensor],
    reader: Optional[ListReader] = None,
) -> tuple[Tensor, Tensor]:
    """The ``kk`` smallest of each row's candidates (float64), ``keys`` (ascending, ``+inf`` padding; the
    product's dtype or float64, a scratch of the caller's) at key columns ``cols``, once the candidates
    that need it are rescored in place (all with ``values``; with a ``reader``, not the runs of one class
    short of the boundary nor those past its reach): a canonical key is exact in the product's dtype.
    Rows not ``ok`` keep their product keys and columns (``product``)."""
    width = keys.shape[1]
    keys, cols = keys.contiguous(), cols.contiguous()
    if values:
        at = torch.isfinite(keys).view(-1).nonzero().view(-1)
    else:
        at = _near_entries(keys, cols, kk, rescore.margins, reader)
    if at.numel() > 0:
        rows = torch.div(at, width, rounding_mode="floor")
        canonical = rescore.keys(rows, cols.view(-1).index_select(0, at)).to(keys.dtype)
        keys.view(-1).index_copy_(0, at, canonical)
    top, top_cols = _smallest_of_nearly_sorted(keys, cols, kk, at)
    top = top.double()
    if bool(ok.all()):
        return top, top_cols
    vals, idx = product
    return torch.where(ok[:, None], top, vals.double()), torch.where(ok[:, None], top_cols, idx)


def _near_entries(
    keys: Tensor, cols: Tensor, kk: int, margins: Tensor, reader: Optional[ListReader]
) -> Tensor:
    """Flat places (``row * width + place``) of the ascending ``keys`` within the row's margin of a
    neighbour (``needing_canonical``); with a ``reader``, only those in a run of near keys that starts
    within the reader's reach and holds more than one class (``mixed_runs``) or can tie with the
    ``kk − 1``-th or ``kk``-th key (a list's last place and the one past it: whether the last tie block
    spills). A run that starts past the reach is more than the margin above every place the reader
    reads, so its canonical keys cannot cross or tie them. Worked out on the near pairs alone: they are
    few of a row's places."""
    width = keys.shape[1]
    left = _gaps_close(keys, margins).view(-1).nonzero().view(-1)  # each near pair's first flat place
    if left.numel() == 0:
        return left
    if reader is None:  # both places of every pair; a place of two pairs once
        every: Tensor = torch.unique_consecutive(torch.stack([left, left + 1], dim=1).view(-1))
        return every
    row = torch.div(left, width, rounding_mode="floor")
    starts = torch.ones_like(left, dtype=torch.bool)  # the first pair of each run (consecutive pairs)
    starts[1:] = left[1:] != left[:-1] + 1
    if reader.reach is not None:
        left, row, starts = _runs_within(left, row, starts, width, reader.reach)
        if left.numel() == 0:
            return left
    places = torch.stack([left, left + 1], dim=1)  # ascending; a place of two pairs twice in a row
    edge = (keys[:, max(kk - 2, 0)] - margins).index_select(0, row)
    redo = keys.view(-1).index_select(0, places.view(-1)).view(-1, 2) >= edge[:, None]
    redo |= _mixed_pairs(row, places, starts, cols, reader.classes)[:, None]
    places, redo = places.view(-1), redo.view(-1)
    # a place shared by two pairs is in one run: both pairs give it the same verdict, kept once
    redo[1:] &= places[1:] != places[:-1]
    return places.masked_select(redo)


def _runs_within(
    left: Tensor, row: Tensor, starts: Tensor, width: int, reach: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The near pairs (first flat places ``left``, block rows ``row``, ``starts`` of runs) of the runs
    that start within their row's ``reach``: whole runs are kept or dropped."""
    first = torch.where(starts, left, 0).cummax(dim=0).values - row * width  # the run's first place
    keep = (first < reach.index_select(0, row)).nonzero().view(-1)
    return left.index_select(0, keep), row.index_select(0, keep), starts.index_select(0, keep)


def _mixed_pairs(row: Tensor, places: Tensor, starts: Tensor, cols: Tensor, classes: PairClasses) -> Tensor:
    """Of the near pairs (flat places ``places[i]``, ``(n, 2)``, of block row ``row[i]``, ascending;
    ``starts``: the first pair of each run of consecutive pairs), those in a run whose members are not
    all of one class."""
    kinds = classes(row, cols.view(-1).index_select(0, places.view(-1)).view(-1, 2))
    run = starts.cumsum(0) - 1
    mixed = torch.zeros(int(run[-1]) + 1, dtype=torch.int64, device=row.device)
    mixed.index_add_(0, run, (kinds[:, 0] != kinds[:, 1]).to(torch.int64))
    return mixed.index_select(0, run) > 0


def _gaps_close(keys: Tensor, margins: Tensor) -> Tensor:
    """``(rows, width)``: each of a row's ascending keys within the row's margin of the next (two such
    keys' canonical keys may cross or tie); the last of a row never (its gap is NaN, close to nothing,
    even an infinite margin). ``inf - inf`` is NaN: padding is never close. One pass over the keys as one
    flat run (the row ends masked after), in their dtype: the margins rounded up to it, a gap within a
    margin rounds to within it."""
    n_rows, width = keys.shape
    flat = keys.contiguous().view(-1)
    gap = torch.empty_like(flat)
    torch.sub(flat[1:], flat[:-1], out=gap[:-1])
    gap = gap.view(n_rows, width)
    gap[:, -1] = torch.nan
    up = margins.to(keys.dtype)
    return gap <= torch.nextafter(up, torch.full_like(up, torch.inf))[:, None]


def _close_to_next(keys: Tensor, margins: Tensor) -> Tensor:
    """``(rows, width - 1)``: ``_gaps_close`` without the rows' last keys."""
    return _gaps_close(keys, margins)[:, :-1]


def mixed_runs(keys: Tensor, margins: Tensor, classes: Tensor) -> Tensor:
    """Of each row's ascending keys, those in a run of neighbours (each within the row's margin of the
    next) whose ``classes`` are not all equal. Reordering or tying the members of a run of one class
    leaves every statistic of the class sequence unchanged, and its keys cannot cross or tie another
    run's canonical keys (the runs are more than the margin apart): such a run needs no rescoring."""
    n_rows, width = keys.shape
    close = _close_to_next(keys, margins)
    starts = torch.ones_like(keys, dtype=torch.bool)
    starts[:, 1:] = ~close
    run = (starts.cumsum(dim=1) - 1) + width * torch.arange(n_rows, device=keys.device)[:, None]
    run, c = run.view(-1), classes.reshape(-1).to(torch.float64)
    low = torch.full((n_rows * width,), torch.inf, dtype=torch.float64, device=keys.device)
    high = torch.full_like(low, -torch.inf)
    low.scatter_reduce_(0, run, c, "amin")
    high.scatter_reduce_(0, run, c, "amax")
    return (low != high)[run].view(n_rows, width)


def _smallest_of_nearly_sorted(keys: Tensor, cols: Tensor, kk: int, changed: Tensor) -> tuple[Tensor, Tensor]:
    """The ``kk`` smallest ``keys`` of each row, ascending, and their ``cols``, for rows that were
    ascending before the entries at the flat places ``changed`` were rescored: a row still ascending
    gives its first ``kk`` as they are (the common case), the others a ``topk``, written over their
    first ``kk`` places. Only the places next to a changed one can be out of order. Returns views of
    ``keys`` and ``cols``: the caller's scratch."""
    width = keys.shape[1]
    top, top_cols = keys[:, :kk], cols[:, :kk]
    if changed.numel() == 0:
        return top, top_cols
    flat, place = keys.view(-1), changed % width
    key = flat.index_select(0, changed)
    before = (place > 0) & (flat.index_select(0, (changed - 1).clamp_min(0)) > key)
    after = (place < width - 1) & (key > flat.index_select(0, (changed + 1).clamp_max(flat.numel() - 1)))
    # ``changed`` ascending: its rows too
    moved = torch.unique_consecutive(torch.div(changed[before | after], width, rounding_mode="floor"))
    if moved.numel() > 0:
        top[moved], pick = keys[moved].topk(kk, dim=1, largest=False, sorted=True)
        top_cols[moved] = cols[moved].gather(1, pick)
    return top, top_cols


def needing_canonical(keys: Tensor, margins: Tensor) -> Tensor:
    """Of each row's ascending product keys, those within the row's margin of a neighbour."""
    close = _close_to_next(keys, margins)
    need = torch.zeros_like(keys, dtype=torch.bool)
    need[:, 1:] |= close
    need[:, :-1] |= close
    return need & torch.isfinite(keys)
