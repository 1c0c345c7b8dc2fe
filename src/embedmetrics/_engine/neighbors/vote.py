"""Weighted k-NN classification (Wu et al., CVPR 2018; used by DINO and solo-learn to monitor SSL).

Each query takes the ``k`` bank rows most cosine-similar to it; neighbour ``j`` votes for its label
with weight ``exp(s_j / T)``; a query is a hit at ``top`` when its true class is among the ``top``
classes with the largest vote. Computed on the exact blocked kNN scan
(``KeyBlocks``, ``smallest_keys``): no
``queries x bank`` matrix, one block at a time.

Ties, decided by the data and never by the kernel or the row order:

- **Neighbours tied at the cut-off.** When the ``k``-th similarity is shared by ``t`` bank rows of
  which only ``o`` fit in the top ``k``, each of the ``t`` votes with weight ``exp(s/T) · o / t``: its
  probability of being among the ``k`` under a random order of tied rows (so the votes are the
  expected votes). The whole tie block is counted, also where it extends past the ``k + 1`` keys the
  scan keeps ("spill").
- **Classes tied in votes.** With ``g`` classes of strictly larger vote than the true class and ``t``
  classes of equal vote (the true class included; classes without a vote tie at 0), ``"average"``
  scores ``clamp((top - g) / t, 0, 1)``, the expected hit of a ``topk`` over the ``C`` class votes
  under a random order of tied classes; ``"pessimistic"``: hit iff ``g + t <= top``;
  ``"optimistic"``: hit iff ``g < top``.

The scan of a bank part gives per query a ``VoteLists``: its ``k`` nearest keys with their classes,
the size of the tie block at the last key and the classes of that block's members the list does not
hold. Lists of disjoint bank parts merge exactly (``merge_votes``), so a bank sharded across
processes gives the value of one process (``knn_vote_hits`` with ``sharded=True``: each process
scans only its own bank rows against all queries). Votes are accumulated in float64 one neighbour
position at a time, in ascending (key, class) order, without atomics: the same data gives the same bits
on every device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.core.checks import finite_values
from embedmetrics._engine.core.exact_sum import order_free_sum
from embedmetrics._engine.core.knn import KeyBlocks
from embedmetrics._engine.core.row_owners import gather_rows, gather_same, route_identical_rows
from embedmetrics._engine.core.scan import block_ranges, compute_dtype
from embedmetrics._engine.dense.scan import boundary_block, by_key_then_id, side_by_side

#: Elements of one ``(queries, classes)`` vote block (float64): 32 MiB.
_VOTE_BLOCK_ELEMENTS = 2**22


def class_indices(
    bank_labels: Tensor,
    query_labels: Tensor,
    num_classes: Optional[int],
    every_label: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor, int]:
    """Labels as class indices ``0..C-1`` (sorted label order) and ``C``: ``num_classes`` when given
    (at least the number of distinct labels), else the number of distinct labels. ``every_label``:
    the bank labels of every process where the bank is sharded (default: ``bank_labels``)."""
    seen = bank_labels if every_label is None else every_label
    # int64 for both: a query label is never cast into a narrower bank dtype (256 is not uint8's 0)
    unique = torch.unique(torch.cat([seen.to(torch.int64), query_labels.to(torch.int64)]))
    n_distinct = unique.shape[0]
    if num_classes is not None and num_classes < n_distinct:
        raise ValueError(
            f"Argument `num_classes` must be at least the number of distinct labels ({n_distinct}), "
            f"got {num_classes}."
        )
    bank_cls = torch.searchsorted(unique, bank_labels.to(torch.int64).contiguous())
    query_cls = torch.searchsorted(unique, query_labels.to(torch.int64).contiguous())
    return bank_cls, query_cls, num_classes or n_distinct


def expected_hits(votes: Tensor, true: Tensor, tops: tuple[int, ...], ties: str) -> Tensor:
    """``(rows, len(tops))`` hit of the true class among the ``top`` largest votes, ties by ``ties``."""
    own = votes.gather(1, true[:, None])
    above = (votes > own).sum(dim=1, keepdim=True).to(torch.float64)
    tied = (votes == own).sum(dim=1, keepdim=True).to(torch.float64)
    top = torch.tensor(tops, dtype=torch.float64, device=votes.device)[None]
    if ties == "pessimistic":
        return (above + tied <= top).to(torch.float64)
    if ties == "optimistic":
        return (above < top).to(torch.float64)
    return ((top - above) / tied).clamp(0.0, 1.0)


@dataclass
class VoteLists:
    """Per query (rows), the ``k`` nearest bank rows of one bank part (or of all, merged).

    ``keys`` ``(Q, k)`` float64 ascending (``+inf`` pads a part with fewer rows), ``classes`` their
    class indices (0 in the padding), ``tail`` ``(Q,)`` the number of the part's rows whose key equals
    the row's last key (the whole tie block), ``extra`` ``(m, 3)`` int64 rows ``(query, class, count)``:
    members of that tie block of each class that the list does not hold.
    """

    keys: Tensor
    classes: Tensor
    tail: Tensor
    extra: Tensor

    @classmethod
    def empty(cls, n_queries: int, k: int, device: torch.device) -> VoteLists:
        return cls(
            torch.full((n_queries, k), float("inf"), dtype=torch.float64, device=device),
            torch.zeros(n_queries, k, dtype=torch.int64, device=device),
            torch.zeros(n_queries, dtype=torch.int64, device=device),
            torch.zeros(0, 3, dtype=torch.int64, device=device),
        )


def _class_counts(rows: Tensor, cols: Tensor, bank_cls: Tensor, n_rows: int, n_classes: int) -> Tensor:
    """``(n_rows, C)`` number of ``(row, column)`` pairs per row and class of the column's row."""
    counts = torch.zeros(n_rows, n_classes, dtype=torch.int64, device=bank_cls.device)
    counts.index_put_((rows, bank_cls[cols]), torch.ones_like(cols), accumulate=True)
    return counts


def _sparse(counts: Tensor, rows: Tensor) -> Tensor:
    """The nonzero cells of ``counts`` as ``(rows[i], class, count)`` rows."""
    at = counts.nonzero()
    return torch.stack([rows[at[:, 0]], at[:, 1], counts[at[:, 0], at[:, 1]]], dim=1)


def scan_votes(
    bank: Tensor,
    bank_cls: Tensor,
    queries: Tensor,
    *,
    k: int,
    n_classes: int,
    exclude_self: bool = False,
    block_bytes: int | None = None,
) -> VoteLists:
    """The ``VoteLists`` of every query against this bank part (``k``: the lists' width; a part
    with fewer rows pads its lists). ``exclude_self``: the queries are the bank rows, each skips its own."""
    n_q, n_r = queries.shape[0], bank.shape[0]
    out = VoteLists.empty(n_q, k, queries.device)
    width = min(k, n_r - int(exclude_self))
    if width < 1 or n_q == 0:
        return out
    self_index = torch.arange(n_q, device=queries.device) if exclude_self else None
    keys = KeyBlocks.prepare(queries, bank, "cosine", min(width + 1, n_r), self_index)
    extras = [out.extra]
    for start, stop in keys.plan(block_bytes, None, extra_row_bytes=16 * n_classes):
        block, vals, idx, rescore = keys.nearest(start, stop)
        top, cls = vals[:, :width], bank_cls[idx[:, :width]]
        last = top[:, -1]
        out.keys[start:stop, :width] = top.to(torch.float64)
        out.classes[start:stop, :width] = cls
        out.tail[start:stop] = (top == last[:, None]).sum(dim=1)
        if keys.kk > width:
            spill = ((vals[:, width] == last) & torch.isfinite(last)).nonzero().flatten()
            if spill.numel() > 0:  # the tie block runs past the kept keys: count it on the full row
                row = rescore.rows(block[:, : keys.n_r], spill, last[spill])
                where = (row == last[spill, None]).nonzero()
                whole = _class_counts(where[:, 0], where[:, 1], bank_cls, spill.numel(), n_classes)
                listed = (top[spill] == last[spill, None]).to(torch.int64)
                whole.scatter_add_(1, cls[spill], -listed)
                out.tail[start + spill] += whole.sum(dim=1)
                extras.append(_sparse(whole, start + spill))
    out.extra = torch.cat(extras)
    return out


def merge_votes(parts: VoteLists, n_parts: int, n_classes: int) -> VoteLists:
    """Merge ``n_parts`` lists of disjoint bank parts stacked along the rows (``(n_parts * Q, k)``,
    ``extra`` rows numbered in that stacking) exactly: the ``k`` smallest keys of the union, and the
    whole tie block at the new last key (each part's members of it: in its list, or, where the part's
    own list ends at that key, also its ``extra``)."""
    n_q, k = parts.keys.shape[0] // n_parts, parts.keys.shape[1]
    all_keys, all_cls = side_by_side(parts.keys, n_parts), side_by_side(parts.classes, n_parts)
    top_keys, order = torch.topk(all_keys, k, dim=1, largest=False, sorted=True)
    top_cls = all_cls.gather(1, order)
    v = top_keys[:, -1]
    whole, tail = boundary_block(
        parts.keys.view(n_parts, n_q, k).unbind(0), parts.tail.view(n_parts, n_q).unbind(0), v
    )
    rows = (tail > (top_keys == v[:, None]).sum(dim=1)).nonzero().flatten()
    out = VoteLists(top_keys, top_cls, tail, parts.extra[:0])
    if rows.numel() > 0:  # part of the boundary block is outside the merged list: count it by class
        at = torch.full((n_q,), -1, dtype=torch.int64, device=v.device)
        at[rows] = torch.arange(rows.numel(), device=v.device)
        counts = torch.zeros(rows.numel(), n_classes, dtype=torch.int64, device=v.device)
        counts.scatter_add_(1, all_cls[rows], (all_keys[rows] == v[rows, None]).to(torch.int64))
        counts.scatter_add_(1, top_cls[rows], -(top_keys[rows] == v[rows, None]).to(torch.int64))
        e = parts.extra
        keep = whole.reshape(-1)[e[:, 0]] & (at[e[:, 0] % n_q] >= 0)
        e = e[keep]
        counts.index_put_((at[e[:, 0] % n_q], e[:, 1]), e[:, 2], accumulate=True)
        out.extra = _sparse(counts, rows)
    return out


def gather_votes(local: VoteLists, rows: tuple[int, int], n_classes: int) -> VoteLists:
    """Every process's lists of queries ``rows`` merged (a collective; ``local`` holds all queries)."""
    world = dist.get_world_size()
    r0, r1 = rows
    stacked = [torch.cat([b[r0:r1] for b in gather_same(t)]) for t in (local.keys, local.classes, local.tail)]
    extras = []
    for part, e in enumerate(gather_rows(local.extra)):
        e = e[(e[:, 0] >= r0) & (e[:, 0] < r1)]
        extras.append(torch.cat([e[:, :1] + (part * (r1 - r0) - r0), e[:, 1:]], dim=1))
    return merge_votes(VoteLists(stacked[0], stacked[1], stacked[2], torch.cat(extras)), world, n_classes)


def vote_hits(
    lists: VoteLists,
    query_cls: Tensor,
    *,
    temperature: float,
    tops: tuple[int, ...],
    ties: str,
    n_classes: int,
) -> Tensor:
    """The hit of each of the lists' queries at each ``top`` (float64 ``(Q, len(tops))``)."""
    n_q, k = lists.keys.shape
    hits = torch.zeros(n_q, len(tops), dtype=torch.float64, device=lists.keys.device)
    extra = lists.extra[torch.argsort(lists.extra[:, 0], stable=True)]
    for r0, r1 in block_ranges(n_q, max(1, _VOTE_BLOCK_ELEMENTS // n_classes)):
        order = by_key_then_id(lists.keys[r0:r1], lists.classes[r0:r1])  # ascending (key, class)
        keys, cls = lists.keys[r0:r1].gather(1, order), lists.classes[r0:r1].gather(1, order)
        v = keys[:, -1:]
        # exp(cos / T) scaled by the row's largest weight (never overflows; the argmax is unchanged)
        weight = torch.exp((keys[:, :1] - keys) / temperature)
        strict = (keys < v).to(torch.float64)
        votes = torch.zeros(r1 - r0, n_classes, dtype=torch.float64, device=keys.device)
        for j in range(k):  # one position at a time: no two adds to one cell in a kernel
            votes.scatter_add_(1, cls[:, j : j + 1], (weight[:, j] * strict[:, j])[:, None])
        tied = torch.zeros(r1 - r0, n_classes, dtype=torch.int64, device=keys.device)
        tied.scatter_add_(1, cls, (keys == v).to(torch.int64))
        lo, hi = torch.searchsorted(extra[:, 0].contiguous(), torch.tensor([r0, r1], device=keys.device))
        e = extra[lo:hi]
        tied.index_put_((e[:, 0] - r0, e[:, 1]), e[:, 2], accumulate=True)
        share = weight[:, -1] * (k - strict.sum(dim=1)) / lists.tail[r0:r1].to(torch.float64)
        votes += share[:, None] * tied.to(torch.float64)
        hits[r0:r1] = expected_hits(votes, query_cls[r0:r1], tops, ties)
    return hits


def knn_vote_hits(
    bank: Tensor,
    bank_labels: Tensor,
    queries: Tensor,
    query_labels: Tensor,
    *,
    k: int,
    temperature: float,
    tops: tuple[int, ...],
    num_classes: Optional[int] = None,
    ties: str = "average",
    exclude_self: bool = False,
    block_bytes: int | None = None,
    sharded: bool = False,
) -> Tensor:
    """Sum of the hits of every query at each ``top`` (float64 ``(len(tops),)``), added in an order that
    does not depend on the order of the queries (``order_free_sum``).

    ``k`` is clipped to the bank rows a query sees (all of them, or all but its own row with
    ``exclude_self``, where ``queries`` are the bank rows themselves).

    NaN without any bank row, and NaN when an embedding is not finite (never a score from NaN
    similarities; a host sync, and a collective when sharded). ``sharded``: the bank is sharded across
    processes (a collective; every process returns the same sum). ``queries`` are the same on every
    process and ``bank`` is this process's share: each process scans its own bank rows against all
    queries (identical rows held by several processes are all scanned by one,
    ``route_identical_rows``), the lists are merged exactly, and
    each process votes for a contiguous share of the queries.
    """
    nan = torch.full((len(tops),), math.nan, dtype=torch.float64, device=queries.device)
    if not _all_finite(bank, queries, sharded):
        return nan
    if sharded:
        shard = _sharded_lists(bank, bank_labels, queries, query_labels, k, num_classes, block_bytes)
        if shard is None:
            return nan
        lists, query_cls, n_classes = shard
        hits = vote_hits(lists, query_cls, temperature=temperature, tops=tops, ties=ties, n_classes=n_classes)
        return order_free_sum(torch.cat(gather_rows(hits)))
    if bank.shape[0] == 0:
        return nan
    bank_cls, query_cls, n_classes = class_indices(bank_labels, query_labels, num_classes)
    k = min(k, bank.shape[0] - int(exclude_self))
    if k < 1 or queries.shape[0] == 0:
        return torch.zeros_like(nan)
    lists = scan_votes(
        bank, bank_cls, queries, k=k, n_classes=n_classes, exclude_self=exclude_self, block_bytes=block_bytes
    )
    hits = vote_hits(lists, query_cls, temperature=temperature, tops=tops, ties=ties, n_classes=n_classes)
    return order_free_sum(hits)


def _all_finite(bank: Tensor, queries: Tensor, sharded: bool) -> bool:
    """Every embedding finite (on every process when ``sharded``: a collective)."""
    bad = torch.zeros((), dtype=torch.int64, device=queries.device)
    for t in (bank, queries):
        if t.numel():
            bad = bad + (~finite_values(t)).to(torch.int64)
    if sharded:
        dist.all_reduce(bad)
    return int(bad) == 0


def _sharded_lists(
    bank: Tensor,
    bank_labels: Tensor,
    queries: Tensor,
    query_labels: Tensor,
    k: int,
    num_classes: Optional[int],
    block_bytes: Optional[int],
) -> Optional[tuple[VoteLists, Tensor, int]]:
    """This process's share of the queries: their merged lists over every process's bank, their
    classes and ``C`` (``None`` where no process has a bank row). A collective."""
    rank, world = dist.get_rank(), dist.get_world_size()
    every_label = torch.cat(gather_rows(torch.unique(bank_labels)))
    bank_cls, query_cls, n_classes = class_indices(bank_labels, query_labels, num_classes, every_label)
    n_bank = torch.tensor([bank.shape[0]], dtype=torch.int64, device=queries.device)
    dist.all_reduce(n_bank)
    if int(n_bank) == 0:
        return None
    bank, bank_cls = route_identical_rows(bank.detach().to(compute_dtype(queries, bank)), bank_cls)
    local = scan_votes(
        bank, bank_cls, queries, k=min(k, int(n_bank)), n_classes=n_classes, block_bytes=block_bytes
    )
    per = -(-queries.shape[0] // world)
    rows = (min(rank * per, queries.shape[0]), min((rank + 1) * per, queries.shape[0]))
    return gather_votes(local, rows, n_classes), query_cls[rows[0] : rows[1]], n_classes
