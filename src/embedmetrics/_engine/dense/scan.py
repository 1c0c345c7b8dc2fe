"""Dense retrieval, part 1: the exact top-``depth`` documents of every query, corpus sharded or not.

Each process scans *its own* corpus rows against all queries, one block of corpus columns at a time:
one matrix product of all queries by the block (a tall product, near the bare GEMM's speed), the
``depth + 1`` smallest keys of every row of the block (``smallest_keys``),
and an exact merge into the running top-``depth`` lists (``merge_lists``). After the first block,
a block's candidates are only its keys up to the running lists' last key (equal keys included): no
larger key can enter the lists, so most blocks add a few columns to merge. Memory: the queries,
one key block (``block_bytes``, default ``DENSE_BLOCK_BYTES``) and ``O(queries × depth)``; the
corpus is never copied whole and no ``queries × corpus`` matrix exists.

Identical rows, identical keys: the corpus columns are grouped by distinct row
(``CorpusLayout``) and blocks never split a group, so each distinct row is multiplied once and its
key copied to all its columns. Where the tie block at a block's cut-off continues past ``depth``
("spill"), that query's row of the block is read again: the block's full size is counted (``tail``) and
the listed members become its lowest document ids, so the lists do not depend on the kernel, the block
size or the corpus order. ``exclude_self`` masks the column whose id is the query's.

``merge_lists`` merges lists of disjoint corpus parts exactly (blocks of one process, or processes):
the ``depth`` smallest keys of the union, the lowest ids where the boundary block does not fit, and the
global boundary block's size as the sum of each part's count at that key (a part whose own list ends
at that key counted its whole block, every other part holds its members of the block in its list).
The keys of the judged (query, document) pairs are read from the same products
(``TopLists.judged_keys``): they tell which relevant documents share the boundary block, all that
the tie statistics need beyond the lists.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.core.block_progress import block_done
from embedmetrics._engine.core.canonical import Rescorer, key_margins
from embedmetrics._engine.core.distinct import distinct_rows
from embedmetrics._engine.core.knn import GROUP_SIZE, column_groups, smallest_keys
from embedmetrics._engine.core.row_owners import gather_same
from embedmetrics._engine.core.scan import block_budget, l2_normalize
from embedmetrics._engine.dense.qrels import find_sorted

#: Default budget of one key block (all queries x a block of corpus columns) on the CPU, bytes: one
#: constant on every CPU (no probe of the instruction set, the caches or the threads), so the blocks of
#: given sizes, and the peak memory, are the same on every CPU (``block_columns``).
DENSE_BLOCK_BYTES = 64 * 2**20

_NO_ID = torch.iinfo(torch.int64).max
#: Parts of rows in which a block's candidate filter runs on the CPU: its temporaries (index vectors of
#: every candidate) take about 0.8 of the block while the running lists still hold far keys (the first
#: blocks), the largest share of the peak memory; in quarters, 0.2, at no cost in time (docs/benchmarks.md,
#: issue 49). A row's list is its own: the same lists. On a GPU (a budget of a quarter of the free memory,
#: where fewer, larger kernels pay) the filter runs on all rows at once.
FILTER_PARTS = 4
#: The first blocks of a scan, whose filter runs in parts: later blocks meet the running lists' tight
#: bound, which leaves each row a few candidates (small temporaries: in parts, more small passes alone).
LOOSE_BLOCKS = 2


@dataclass
class TopLists:
    """Per query (rows), the ``depth`` nearest documents of one corpus part (or of all, merged).

    ``keys`` ``(Q, depth)`` float64 ascending (nearer first; ``+inf`` pads rows with fewer documents),
    ``ids`` their document ids (``-1`` padding), ``tail`` ``(Q,)`` the number of documents of the part
    whose key equals the row's last key (the whole tie block, also past ``depth``), ``judged_keys``
    ``(E,)`` the key of every judged pair of ``Judgements`` whose
    document the part holds (``+inf`` otherwise, and for a query's own document with ``exclude_self``).
    """

    keys: Tensor
    ids: Tensor
    tail: Tensor
    judged_keys: Tensor

    def canonical(self) -> TopLists:
        """The same lists ordered by (key, document id) in every row."""
        order = by_key_then_id(self.keys, self.ids)
        return TopLists(self.keys.gather(1, order), self.ids.gather(1, order), self.tail, self.judged_keys)

    @classmethod
    def empty(cls, n_queries: int, depth: int, n_entries: int, device: torch.device) -> TopLists:
        inf = float("inf")
        return cls(
            torch.full((n_queries, depth), inf, dtype=torch.float64, device=device),
            torch.full((n_queries, depth), -1, dtype=torch.int64, device=device),
            torch.zeros(n_queries, dtype=torch.int64, device=device),
            torch.full((n_entries,), inf, dtype=torch.float64, device=device),
        )


class IdColumns:
    """The column of each id in a corpus part's ids: one sort, then a binary search per lookup."""

    def __init__(self, corpus_ids: Tensor) -> None:
        self.order = torch.argsort(corpus_ids)
        self.sorted_ids = corpus_ids[self.order]

    def __call__(self, ids: Tensor) -> Tensor:
        """The corpus column holding each of ``ids``, ``-1`` where the corpus part has no such id."""
        if self.sorted_ids.numel() == 0:
            return torch.full_like(ids, -1)
        at = find_sorted(self.sorted_ids, ids)
        return torch.where(at >= 0, self.order[at.clamp_min(0)], -1)


def columns_of(ids: Tensor, corpus_ids: Tensor) -> Tensor:
    """The corpus column holding each of ``ids``, ``-1`` where the corpus part has no such id."""
    return IdColumns(corpus_ids)(ids)


def query_side(queries: Tensor, similarity: str, dtype: torch.dtype) -> Tensor:
    """Queries as the left factor of the key product (ascending key = nearer): ``−q̂`` (cosine),
    ``−q`` (dot) or ``[−2q, 1]`` against ``[r, ||r||²]`` (Euclidean up to the query's own ``||q||²``)."""
    q = queries.detach().to(dtype)
    if similarity == "cosine":
        return -l2_normalize(q, 1e-12)
    if similarity == "dot":
        return -q
    return torch.cat([q * -2.0, q.new_ones(q.shape[0], 1)], dim=1)


def corpus_width(dim: int, similarity: str) -> int:
    """Columns of a corpus row in the key product (Euclidean appends ``||r||²``)."""
    return dim + 1 if similarity == "euclidean" else dim


def corpus_side(rows: Tensor, similarity: str, n_cols: int, out: Optional[Tensor] = None) -> Tensor:
    """``(n_cols, d')`` right factor of the key product for ``rows``, zero rows as padding; written
    into ``out`` (flat, reused by every block: no fresh pages) when given."""
    n, width = rows.shape[0], corpus_width(rows.shape[1], similarity)
    if out is None:
        out = rows.new_empty(n_cols * width)
    side = out[: n_cols * width].view(n_cols, width)
    if similarity == "cosine":
        l2_normalize(rows, 1e-12, out=side[:n])
    elif similarity == "euclidean":
        side[:n, :-1] = rows
        torch.sum(rows * rows, dim=1, out=side[:n, -1])
    else:
        side[:n] = rows
    side[n:] = 0.0
    return side


@dataclass
class CorpusLayout:
    """The corpus columns grouped by distinct row (every copy of a row next to the others).

    ``order``: ordered column -> corpus row (``None``: the identity, every row distinct);
    ``ends``: per distinct row, the ordered column after its last copy; ``rows``: the distinct rows.
    """

    rows: Tensor
    order: Optional[Tensor]
    inverse: Optional[Tensor]
    ends: Tensor

    @classmethod
    def build(cls, corpus: Tensor) -> CorpusLayout:
        distinct = distinct_rows(corpus)
        if distinct.inverse is None or distinct.counts is None:
            n = corpus.shape[0]
            return cls(distinct.rows, None, None, torch.arange(1, n + 1, device=corpus.device))
        order = torch.argsort(distinct.inverse, stable=True)
        return cls(distinct.rows, order, distinct.inverse, distinct.counts.cumsum(0))

    def blocks(self, columns: int) -> list[tuple[int, int, int, int]]:
        """``(first distinct row, end, first column, end column)`` of blocks of about ``columns`` columns
        that never split the copies of a row."""
        ends = self.ends.tolist()
        out, u0, c0 = [], 0, 0
        while u0 < len(ends):
            u1 = max(u0 + 1, bisect.bisect_right(ends, c0 + columns, lo=u0))
            out.append((u0, u1, c0, ends[u1 - 1]))
            u0, c0 = u1, ends[u1 - 1]
        return out


def _padded_width(n_cols: int, depth: int) -> tuple[int, Optional[tuple[int, int]]]:
    """Columns of a block's key matrix (padded for the candidate filter) and the filter's groups."""
    groups = column_groups(n_cols, min(depth + 1, n_cols))
    return (n_cols if groups is None else groups[0] * GROUP_SIZE), groups


def block_columns(n_queries: int, n_corpus: int, width: int, itemsize: int, depth: int, budget: int) -> int:
    """Corpus columns of one block: a column costs ``(n_queries + width) * itemsize`` bytes (its keys for
    every query and its row of the product's right factor), and a block's columns fit ``budget``
    (``block_budget``: ``DENSE_BLOCK_BYTES`` on the CPU), in whole groups of the candidate filter
    (``_block_width``). The sizes and the budget alone decide it: on every CPU the same blocks."""
    return _block_width(n_corpus, max(1, budget // ((n_queries + width) * itemsize)), depth)


def _block_width(n_cols: int, budget_columns: int, depth: int) -> int:
    """Columns per block: at most ``budget_columns``, whole coarse groups of the candidate filter (a full
    block needs no padding columns: no zero rows to copy, no ``+inf`` columns to write), spread evenly
    over the blocks so that the last is not a narrow remainder (too narrow for the filter, its rows would
    each take a plain ``topk``)."""
    groups = column_groups(budget_columns, min(depth + 1, budget_columns))
    unit = 1 if groups is None else groups[0] * GROUP_SIZE // groups[1]
    columns = budget_columns - budget_columns % unit
    even = -(-n_cols // -(-n_cols // columns))  # the columns over as many blocks as they need
    return min(columns, -(-even // unit) * unit)


@dataclass
class KeyBuffers:
    """Flat storage reused by every block (a fresh block would first-touch its pages each time)."""

    keys: Tensor
    distinct: Optional[Tensor]
    corpus: Tensor

    def view(self, which: str, rows: int, cols: int) -> Tensor:
        flat = self.keys if which == "keys" else self.distinct
        assert flat is not None
        return flat[: rows * cols].view(rows, cols)


def _block_keys(
    q: Tensor,
    layout: CorpusLayout,
    block: tuple[int, int, int, int],
    similarity: str,
    padded: int,
    buffers: KeyBuffers,
) -> tuple[Tensor, Rescorer]:
    """``(Q, padded)`` keys of the block's columns, ``+inf`` in the padding columns, and the block's
    canonical keys (``Rescorer``, its margins left to the caller; valid until the next block). Each
    distinct row is multiplied once and its key copied to every column holding it (bit-identical keys)."""
    u0, u1, c0, c1 = block
    inf = float("inf")
    s = buffers.view("keys", q.shape[0], padded)
    if layout.order is None or layout.inverse is None:
        side = corpus_side(layout.rows[u0:u1], similarity, padded, buffers.corpus)
        torch.mm(q, side.T, out=s)
        s[:, c1 - c0 :] = inf
        return s, Rescorer(q, side, None, torch.empty(0))
    keys_u = buffers.view("distinct", q.shape[0], u1 - u0 + 1)
    side = corpus_side(layout.rows[u0:u1], similarity, u1 - u0 + 1, buffers.corpus)
    torch.mm(q, side.T, out=keys_u)
    keys_u[:, -1] = inf
    local = torch.full((padded,), u1 - u0, dtype=torch.int64, device=q.device)
    local[: c1 - c0] = layout.inverse[layout.order[c0:c1]] - u0
    return torch.index_select(keys_u, 1, local, out=s), Rescorer(q, side, local, torch.empty(0))


@dataclass
class CorpusScan:
    """The corpus part in blocks of whole groups of identical rows, and the buffers every block reuses."""

    layout: CorpusLayout
    ordered_ids: Tensor
    position: Tensor
    blocks: list[tuple[int, int, int, int]]
    buffers: KeyBuffers
    similarity: str

    @classmethod
    def build(
        cls,
        q: Tensor,
        corpus: Tensor,
        corpus_ids: Tensor,
        similarity: str,
        depths: tuple[int, ...],
        block_bytes: Optional[int],
    ) -> CorpusScan:
        """Blocks and buffers for scans of list lengths ``depths`` (the first the longest)."""
        depth = depths[0]
        n_q, n_c = q.shape[0], corpus.shape[0]
        layout = CorpusLayout.build(corpus)
        position = torch.arange(n_c, device=q.device)
        ordered_ids = corpus_ids
        if layout.order is not None:
            position = torch.empty_like(position).scatter_(0, layout.order, position)
            ordered_ids = corpus_ids[layout.order]
        width = corpus_width(corpus.shape[1], similarity)
        budget = block_budget(block_bytes, q.device, DENSE_BLOCK_BYTES)
        blocks = layout.blocks(block_columns(n_q, n_c, width, q.element_size(), depth, budget))
        widest = max(_padded_width(b[3] - b[2], d)[0] for b in blocks for d in depths)
        distinct = None if layout.order is None else q.new_empty(n_q * (max(b[1] - b[0] for b in blocks) + 1))
        buffers = KeyBuffers(q.new_empty(n_q * widest), distinct, q.new_empty((widest + 1) * width))
        return cls(layout, ordered_ids, position, blocks, buffers, similarity)

    def ordered(self, cols: Tensor) -> Tensor:
        """Corpus columns in the scan's order (``-1`` stays ``-1``)."""
        return torch.where(cols >= 0, self.position[cols.clamp_min(0)], -1)

    def lists(
        self,
        q: Tensor,
        depth: int,
        self_pos: Optional[Tensor],
        *,
        canonical: bool,
        bound: Optional[Tensor] = None,
    ) -> TopLists:
        """The top-``depth`` lists of the queries ``q`` (at most the rows the buffers were built for), by
        product keys or by canonical keys (``judged_keys`` left empty). ``bound`` (``(Q,)`` float64):
        only keys ``<= bound`` are wanted (see ``_scan_block``; the lists may then be narrower)."""
        running: Optional[TopLists] = None
        given = bound
        for done, block in enumerate(self.blocks, start=1):
            c0, c1 = block[2], block[3]
            if running is not None and running.keys.shape[1] == depth:  # a narrower list is not full
                last = running.keys[:, -1]
                bound = last if given is None else torch.minimum(last, given)
            part = _scan_block(
                q, self.layout, block, self.similarity, depth, self.ordered_ids[c0:c1], self_pos,
                self.buffers, bound, canonical, FILTER_PARTS if done <= LOOSE_BLOCKS else 1,
            )  # fmt: skip
            if running is not None:  # bounded parts are narrower than ``depth``: keep every key of both
                part = merge_lists([running, part], min(depth, running.keys.shape[1] + part.keys.shape[1]))
            running = part
            block_done(done, len(self.blocks))
        assert running is not None
        return running


def _scan_block(
    q: Tensor,
    layout: CorpusLayout,
    block: tuple[int, int, int, int],
    similarity: str,
    depth: int,
    block_ids: Tensor,
    self_pos: Optional[Tensor],
    buffers: KeyBuffers,
    bound: Optional[Tensor] = None,
    canonical: bool = False,
    parts: int = 1,
) -> TopLists:
    """The top-``depth`` lists of one corpus block (``(Q, depth)``; canonical keys when ``canonical``;
    the product keys' filter in ``parts`` parts of rows on the CPU, ``_smallest_in_parts``).

    With ``bound`` (the running lists' last keys), only keys ``<= bound`` are listed: no larger key can
    enter the merged list, and every member of its boundary block is still listed or counted. The list
    is then as wide as the most such keys of a row (at most ``depth``; ``+inf`` pads the other rows).
    """
    n_q, n_cols, c0 = q.shape[0], block[3] - block[2], block[2]
    padded, groups = _padded_width(n_cols, depth)
    s, rescore = _block_keys(q, layout, block, similarity, padded, buffers)
    if self_pos is not None:
        mine = ((self_pos >= c0) & (self_pos < c0 + n_cols)).nonzero().flatten()
        s[mine, self_pos[mine] - c0] = float("inf")
    if canonical:  # the product filters (its bound widened by the margin), canonical keys decide
        rescore.margins = key_margins(q, rescore.b, euclidean=similarity == "euclidean")
        wide = None if bound is None else rescore.widened(bound.to(s.dtype))
        vals, idx = smallest_keys(s, min(depth + 1, n_cols), groups, wide, rescore, n_real=n_cols)
    else:
        vals, idx = _smallest_in_parts(s, min(depth + 1, n_cols), groups, bound, n_cols, parts)
    width = min(depth, vals.shape[1])
    top = vals[:, :width]
    ids = block_ids[idx[:, :width]]
    last = top[:, -1]
    tail = (top == last[:, None]).sum(dim=1)
    if vals.shape[1] > width:
        spill = ((vals[:, width] == last) & torch.isfinite(last)).nonzero().flatten()
        if spill.numel() > 0:
            rows = rescore.rows(s[:, :n_cols], spill, last[spill]) if canonical else s[spill, :n_cols]
            tail[spill], ids[spill] = _spilled_block(rows, last[spill], block_ids, ids[spill], tail[spill])
    part = TopLists.empty(n_q, depth if bound is None else width, 0, q.device)
    part.keys[:, :width] = top
    part.ids[:, :width] = torch.where(torch.isfinite(top), ids, -1)
    part.tail = tail
    return part


def _smallest_in_parts(
    s: Tensor, kk: int, groups: Optional[tuple[int, int]], bound: Optional[Tensor], n_real: int, parts: int
) -> tuple[Tensor, Tensor]:
    """``smallest_keys`` of the rows of ``s`` in ``parts`` parts of rows on the CPU (one elsewhere), each
    part's result padded to the widest with ``+inf`` (column 0), as ``smallest_keys`` pads a row of fewer
    keys."""
    step = max(1, -(-s.shape[0] // (parts if s.device.type == "cpu" else 1)))
    if s.shape[0] <= step:
        return smallest_keys(s, kk, groups, bound, n_real=n_real)
    found = [
        smallest_keys(
            s[r : r + step], kk, groups, None if bound is None else bound[r : r + step], n_real=n_real
        )
        for r in range(0, s.shape[0], step)
    ]
    width = max(p[0].shape[1] for p in found)
    vals = s.new_full((s.shape[0], width), float("inf"))
    idx = torch.zeros(s.shape[0], width, dtype=torch.int64, device=s.device)
    for r, (v, i) in zip(range(0, s.shape[0], step), found):
        vals[r : r + v.shape[0], : v.shape[1]], idx[r : r + v.shape[0], : v.shape[1]] = v, i
    return vals, idx


def _spilled_block(
    rows: Tensor, last: Tensor, corpus_ids: Tensor, ids: Tensor, in_list: Tensor
) -> tuple[Tensor, Tensor]:
    """Whole-block size of rows whose boundary block continues past the list, and the list with the
    block's ``in_list`` lowest document ids in its last places."""
    eq = rows == last[:, None]
    size = eq.sum(dim=1)
    width = ids.shape[1]
    room = int(in_list.max())
    lowest = torch.where(eq, corpus_ids[None], _NO_ID).topk(room, dim=1, largest=False).values
    j = torch.arange(width, device=ids.device) - (width - in_list)[:, None]
    ids = torch.where(j >= 0, lowest.gather(1, j.clamp(0, room - 1)), ids)
    return size, ids


def by_key_then_id(keys: Tensor, ids: Tensor) -> Tensor:
    """Per row, the permutation ordering ``(key, id)`` ascending."""
    order = torch.argsort(ids, dim=1, stable=True)
    return order.gather(1, torch.argsort(keys.gather(1, order), dim=1, stable=True))


def merge_lists(
    parts: Sequence[TopLists], width: Optional[int] = None, drop: Optional[Tensor] = None
) -> TopLists:
    """Merge the lists of disjoint corpus parts exactly (each ``(Q, w)``, any widths): the ``width``
    smallest keys of the union (default: as many as the widest part holds; at most the parts' widths
    together); where the union has more documents at the last key than places, the lowest ids among
    them. Its order within equal keys is unspecified until ``TopLists.canonical``.

    Parts cut by a bound (``CorpusScan.lists``) are each narrower than the lists they feed: their merge
    must be as wide as both together (up to ``depth``), or the keys of one that fit are dropped.
    ``drop``: ``(Q, total width)`` entries of the parts side by side left out of the union (the second
    listing of a document two parts hold, ``stream_repeats``); the tail still counts them.
    """
    depth = max(part.keys.shape[1] for part in parts) if width is None else width
    all_keys = torch.cat([part.keys for part in parts], dim=1)
    all_ids = torch.cat([part.ids for part in parts], dim=1)
    if drop is not None:
        all_keys, all_ids = all_keys.masked_fill(drop, float("inf")), all_ids.masked_fill(drop, -1)
    if len(parts) == 2 and drop is None and not bool(all_keys.isnan().any()):  # two ascending lists
        order = _merged_order(parts[0].keys, parts[1].keys)[:, :depth]
        top_keys = all_keys.gather(1, order)
    else:
        top_keys, order = torch.topk(all_keys, depth, dim=1, largest=False, sorted=True)
    top_ids = all_ids.gather(1, order)
    v = top_keys[:, -1]
    choice = ((all_keys == v[:, None]).sum(dim=1) > (top_keys == v[:, None]).sum(dim=1)) & torch.isfinite(v)
    rows = choice.nonzero().flatten()
    if rows.numel() > 0:  # the boundary block does not fit: its lowest ids
        pick = by_key_then_id(all_keys[rows], all_ids[rows])[:, :depth]
        top_keys[rows], top_ids[rows] = all_keys[rows].gather(1, pick), all_ids[rows].gather(1, pick)
    _, tail = boundary_block([part.keys for part in parts], [part.tail for part in parts], v)
    return TopLists(top_keys, top_ids, tail, parts[0].judged_keys)


def _merged_order(a: Tensor, b: Tensor) -> Tensor:
    """Per row, the columns of ``cat([a, b], dim=1)`` in ascending order of key, for rows of ``a`` and
    ``b`` ascending already (equal keys: ``a``'s first): each key's place is its own column plus the
    count of the other list's smaller keys (a binary search), no sort of the union."""
    wa, wb = a.shape[1], b.shape[1]
    at_a = torch.arange(wa, device=a.device) + torch.searchsorted(b.contiguous(), a.contiguous(), right=False)
    at_b = torch.arange(wb, device=a.device) + torch.searchsorted(a.contiguous(), b.contiguous(), right=True)
    order = torch.empty(a.shape[0], wa + wb, dtype=torch.int64, device=a.device)
    order.scatter_(1, at_a, torch.arange(wa, device=a.device).expand_as(at_a))
    order.scatter_(1, at_b, torch.arange(wa, wa + wb, device=a.device).expand_as(at_b))
    return order


def side_by_side(stacked: Tensor, n_parts: int) -> Tensor:
    """The lists of ``n_parts`` parts stacked along the rows (``(n_parts * Q, w)``) as one row per
    query holding every part's list (``(Q, n_parts * w)``)."""
    n_q, width = stacked.shape[0] // n_parts, stacked.shape[1]
    return stacked.view(n_parts, n_q, width).permute(1, 0, 2).reshape(n_q, n_parts * width)


def boundary_block(keys: Sequence[Tensor], tails: Sequence[Tensor], v: Tensor) -> tuple[Tensor, Tensor]:
    """For the lists of disjoint parts ``keys`` (each ``(Q, w)``; ``tails`` their whole tie blocks at
    their last keys) and the merged last key ``v`` (``(Q,)``): per part and query whether the part's own
    list ends at ``v`` (``(n_parts, Q)``: its tail is then its whole block at ``v``), and the size of
    the merged block at ``v`` (every other part holds its members of the block in its list)."""
    finite = torch.isfinite(v)
    whole = torch.stack([(k[:, -1] == v) & finite for k in keys])
    counted = torch.stack([(k == v[:, None]).sum(dim=1) for k in keys])
    return whole, torch.where(whole, torch.stack(list(tails)), counted).sum(dim=0)


def gather_lists(local: TopLists) -> TopLists:
    """All processes' lists merged (every process returns the same); a collective."""
    gathered = [gather_same(t) for t in (local.keys, local.ids, local.tail)]
    judged = local.judged_keys.clone()
    dist.all_reduce(judged, op=dist.ReduceOp.MIN)
    return merge_lists([TopLists(k, i, t, judged) for k, i, t in zip(*gathered)])
