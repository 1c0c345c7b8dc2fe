"""Canonical keys: a (query, reference) pair gets one key, whatever else shares its matrix product.

A matrix product's kernel rounds an entry according to the shape of the product and where the entry
sits in it (MKL's AVX2 kernels treat the edge rows and columns of a tile and the threads' split
differently; cuBLAS picks tiles by shape). A key read off a block of the product therefore depends,
in its last bits, on the other queries of the batch, the block size and the position of the row:
ties appear or vanish with them, and with them every tie-aware value.

The scans keep the product as a fast *filter* and rank by canonical keys. The canonical key of a pair
is the sum of the products of its two factor rows (each factor row a function of its own input row
alone), in their dtype, by one reduction of a fixed shape (``CHUNK_ROWS`` pairs, zero-padded): every
pair is computed by the same instructions in the same order wherever it sits. A product key and the
canonical key each differ from the exact value by at most ``γ_(d+1) Σ|a_k b_k|`` in any summation
order (``u`` the unit roundoff, ``γ_n = n u / (1 - n u)``), so from each other by at most ``margin``:
``(d + 2) eps`` times a bound on ``Σ|a_k b_k|`` (``margins_of``). Every entry that can be among a
row's ``kk`` smallest canonical keys (or tie with the ``kk``-th) thus has a product key within
``2 margin`` of the row's ``kk``-th smallest product key: only those entries are rescored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

#: ``classes(rows, cols)``: ``(n, w)`` class of the pairs (block row ``rows[i]``, key column
#: ``cols[i, j]``): what a list's reader tells its entries apart by.
PairClasses = Callable[[Tensor, Tensor], Tensor]

#: Pairs per reduction call: every call has this exact shape, so its summation order never changes.
CHUNK_ROWS = 1024


def pair_dots(
    a_rows: Tensor,
    b_rows: Tensor,
    a_index: Tensor,
    b_index: Tensor,
    b_factor: Optional[Callable[[Tensor, Tensor], None]] = None,
) -> Tensor:
    """``a_rows[a_index[i]] · b_rows[b_index[i]]`` for every ``i`` (float64 out), computed in the rows'
    dtype by chunks of one fixed shape ``(CHUNK_ROWS, d)``, zero-padded. ``b_factor(raw, out)``: writes
    the right factor rows of raw ``b_rows`` (a function of each row alone) into ``out`` (the chunk's
    ``(CHUNK_ROWS, d)`` buffer, zero rows past the raw ones), chunk by chunk: memory ``O(CHUNK_ROWS d)``.
    Every buffer is made once and reused (a fresh chunk would first-touch its pages each time)."""
    n = a_index.numel()
    out = torch.empty(n, dtype=torch.float64, device=a_rows.device)
    a = torch.zeros(CHUNK_ROWS, a_rows.shape[1], dtype=a_rows.dtype, device=a_rows.device)
    b = torch.zeros_like(a)
    raw = b if b_factor is None else b_rows.new_empty(CHUNK_ROWS, b_rows.shape[1])
    sums = torch.empty(CHUNK_ROWS, dtype=a_rows.dtype, device=a_rows.device)
    for lo in range(0, n, CHUNK_ROWS):
        m = min(n, lo + CHUNK_ROWS) - lo
        torch.index_select(a_rows, 0, a_index[lo : lo + m], out=a[:m])
        torch.index_select(b_rows, 0, b_index[lo : lo + m], out=raw[:m])
        if m < CHUNK_ROWS:
            a[m:] = 0
            if b_factor is None:
                b[m:] = 0
        if b_factor is not None:
            b_factor(raw[:m], b)
        torch.sum(a.mul_(b), dim=1, out=sums)  # always (CHUNK_ROWS, d): one summation order
        out[lo : lo + m] = sums[:m]
    return out


def key_margins(a: Tensor, b: Tensor, euclidean: bool = False) -> Tensor:
    """Per row of ``a``, twice the largest distance between a product key ``a_i · b_j`` (any kernel,
    any order) and its canonical key (``margins_of`` with the largest norm of the rows of ``b``)."""
    if b.shape[0] == 0:
        return torch.zeros(a.shape[0], dtype=torch.float64, device=a.device)
    return margins_of(a, float((b[:, :-1] if euclidean else b).norm(dim=1).max()), euclidean)


def margins_of(a: Tensor, top: float, euclidean: bool = False) -> Tensor:
    """Per row of ``a``, ``2 (d + 2) eps`` times a bound on ``Σ_k |a_ik b_jk|`` for right factor rows of
    norm at most ``top``, float64 (the norms in the rows' dtype, their own rounding covered by a 1% slack).
    The bound is ``||a_i|| top``; for the Euclidean layout (``a = [-2q, 1]``, ``b = [r, ||r||²]``, ``top``
    the largest ``||r||``) the tighter ``2 ||q|| top + top²``: Cauchy–Schwarz on the appended column
    would square ``top``."""
    scale = 2.02 * (a.shape[1] + 2) * torch.finfo(a.dtype).eps
    if euclidean:
        bound = a[:, :-1].norm(dim=1).double() * top + 1.01 * top * top
    else:
        bound = a.norm(dim=1).double() * top
    margins: Tensor = bound * scale
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
    classes: Optional[PairClasses] = None,
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
    ``classes`` (with ``values`` off): a run of near candidates of one class keeps its product keys
    unless it reaches the ``kk − 1``-th key (``mixed_runs``): a reader of classes alone sees no difference.
    """
    nb, kk = vals.shape
    finite = torch.isfinite(vals)
    last = torch.where(finite, vals, -torch.inf).amax(dim=1)
    ok = ~vals.isnan().any(dim=1) & torch.isfinite(last)
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
    return _rescored_smallest(keys, picked, kk, rescore, values, ok, (vals, idx), classes)


def canonical_candidates(
    cand: Tensor,
    cand_col: Tensor,
    kk: int,
    rescore: Rescorer,
    values: bool = True,
    classes: Optional[PairClasses] = None,
) -> tuple[Tensor, Tensor]:
    """``canonical_smallest`` where ``cand`` (``(rows, width)``, ``width >= kk``, ``+inf`` padding) holds
    every product key of a row that can be among its ``kk`` smallest canonical keys, and ``cand_col``
    their key columns: one sort of the candidates instead of a ``topk`` and a second gathering. The
    candidates within the margin of a row's ``kk``-th product key are a prefix of the sorted row."""
    keys, order = cand.sort(dim=1)
    vals = keys[:, :kk]
    last = torch.where(torch.isfinite(vals), vals, -torch.inf).amax(dim=1)
    ok = ~vals.isnan().any(dim=1) & torch.isfinite(last)
    limit = torch.where(ok, rescore.widened(last), -torch.inf)
    # the rows are ascending: each row's candidates within the margin are its first ``count``
    count = torch.searchsorted(keys, limit[:, None].to(keys.dtype), right=True)
    width = max(int(count.max()), kk)
    keys = keys[:, :width]
    cols = cand_col.gather(1, order[:, :width])
    keys64 = torch.where(keys <= limit[:, None], keys.double(), torch.inf)
    product = (vals, cols[:, :kk])
    return _rescored_smallest(keys64, cols, kk, rescore, values, ok, product, classes)


def _rescored_smallest(
    keys: Tensor,
    cols: Tensor,
    kk: int,
    rescore: Rescorer,
    values: bool,
    ok: Tensor,
    product: tuple[Tensor, Tensor],
    classes: Optional[PairClasses] = None,
) -> tuple[Tensor, Tensor]:
    """The ``kk`` smallest of each row's candidates, ``keys`` (float64, ascending, ``+inf`` padding) at
    key columns ``cols``, once the candidates that need it are rescored in place (all with ``values``;
    with ``classes``, not the runs of one class short of the boundary); rows not ``ok`` keep their
    product keys and columns (``product``)."""
    width = keys.shape[1]
    keys, cols = keys.contiguous(), cols.contiguous()
    if values:
        at = torch.isfinite(keys).view(-1).nonzero().view(-1)
    else:
        at = _near_entries(keys, cols, kk, rescore.margins, classes)
    if at.numel() > 0:
        rows = torch.div(at, width, rounding_mode="floor")
        keys.view(-1).index_copy_(0, at, rescore.keys(rows, cols.view(-1).index_select(0, at)))
    top, top_cols = _smallest_of_nearly_sorted(keys, cols, kk, at)
    if bool(ok.all()):
        return top, top_cols
    vals, idx = product
    return torch.where(ok[:, None], top, vals.double()), torch.where(ok[:, None], top_cols, idx)


def _near_entries(
    keys: Tensor, cols: Tensor, kk: int, margins: Tensor, classes: Optional[PairClasses]
) -> Tensor:
    """Flat places (``row * width + place``) of the ascending ``keys`` within the row's margin of a
    neighbour (``needing_canonical``); with ``classes``, only those in a run of near keys of more than
    one class (``mixed_runs``) or that can tie with the ``kk − 1``-th or ``kk``-th key (a reader's last
    place and the one past it). Worked out on the near pairs alone: they are few of a row's places."""
    n_rows, width = keys.shape
    if width < 2:
        return torch.zeros(0, dtype=torch.int64, device=keys.device)
    pairs = _close_to_next(keys, margins).view(-1).nonzero().view(-1)
    left = pairs + torch.div(pairs, width - 1, rounding_mode="floor")  # the pair's first flat place
    right = left + 1
    redo = torch.zeros(n_rows * width, dtype=torch.bool, device=keys.device)
    if left.numel() == 0:
        return redo.nonzero().view(-1)
    row = torch.div(left, width, rounding_mode="floor")
    flat_keys = keys.view(-1)
    mixed = (
        torch.ones_like(left, dtype=torch.bool) if classes is None else _mixed_pairs(row, left, cols, classes)
    )
    edge = (keys[:, max(kk - 2, 0)] - margins)[row]
    # a place shared by two pairs is in one run: both pairs write it the same value
    redo[left] = mixed | (flat_keys[left] >= edge)
    redo[right] = mixed | (flat_keys[right] >= edge)
    return redo.nonzero().view(-1)


def _mixed_pairs(row: Tensor, left: Tensor, cols: Tensor, classes: PairClasses) -> Tensor:
    """Of the near pairs (flat places ``left`` and ``left + 1`` of block row ``row``, ascending), those in
    a run (consecutive near pairs of one row) whose members are not all of one class."""
    flat_cols = cols.view(-1)
    kinds = classes(row, torch.stack([flat_cols[left], flat_cols[left + 1]], dim=1))
    starts = torch.ones_like(left, dtype=torch.bool)
    starts[1:] = left[1:] != left[:-1] + 1
    run = starts.cumsum(0) - 1
    mixed = torch.zeros(int(run[-1]) + 1, dtype=torch.int64, device=left.device)
    return mixed.index_add_(0, run, (kinds[:, 0] != kinds[:, 1]).to(torch.int64))[run] > 0


def _close_to_next(keys: Tensor, margins: Tensor) -> Tensor:
    """``(rows, width - 1)``: each of a row's ascending keys within the row's margin of the next (two
    such keys' canonical keys may cross or tie). ``inf - inf`` is NaN: padding is never close."""
    return (keys[:, 1:] - keys[:, :-1]) <= margins[:, None]


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
    gives its first ``kk`` as they are (the common case), the others a ``topk``. Only the places next
    to a changed one can be out of order."""
    width = keys.shape[1]
    top, top_cols = keys[:, :kk].clone(), cols[:, :kk].clone()
    if changed.numel() == 0:
        return top, top_cols
    flat, place = keys.view(-1), changed % width
    key = flat[changed]
    before = (place > 0) & (flat[(changed - 1).clamp_min(0)] > key)
    after = (place < width - 1) & (key > flat[(changed + 1).clamp_max(flat.numel() - 1)])
    moved = torch.unique(torch.div(changed[before | after], width, rounding_mode="floor"))
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
