"""Dense retrieval, part 1: the exact top-``depth`` documents of every query, corpus sharded or not.

Each process scans *its own* corpus rows against all queries, one block of queries at a time
(:class:`~embedmetrics._engine.knn.KeyBlocks`: one matrix product per block, identical corpus rows
given bit-identical keys, the query's own document masked with ``exclude_self``), and keeps per query
the ``depth`` smallest keys (:func:`~embedmetrics._engine.knn.smallest_keys` with ``depth + 1`` keys,
so that a tie block continuing past ``depth`` is seen) and their document ids. Where the tie block at
the cut-off continues past ``depth`` ("spill"), the whole row is read again for that query only: its
full size is counted (``tail``) and the listed members become the lowest document ids of the block,
so the list does not depend on the kernel, the block size or the corpus order.

:func:`merge_lists` merges the per-process lists exactly: the ``depth`` smallest of the union ordered
by (key, document id), and the size of the global boundary block as the sum of each part's count at
that key (a part whose own list ends at that key counted its whole block, every other part holds its
members of the block in its list). The keys of the judged (query, document) pairs are read from the
same products (:attr:`TopLists.judged_keys`): they tell which relevant documents share the boundary
block, all that the tie statistics need beyond the list.

Memory: the embeddings, one block, and ``O(queries × depth)``; never ``queries × corpus``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.knn import KeyBlocks, smallest_keys
from embedmetrics._engine.qrels import Judgements, find_sorted

_NO_ID = torch.iinfo(torch.int64).max


@dataclass
class TopLists:
    """Per query (rows), the ``depth`` nearest documents of one corpus part (or of all, merged).

    ``keys`` ``(Q, depth)`` float64 ascending (nearer first; ``+inf`` pads rows with fewer documents),
    ``ids`` their document ids (``-1`` padding), ``tail`` ``(Q,)`` the number of documents of the part
    whose key equals the row's last key (the whole tie block, also past ``depth``), ``judged_keys``
    ``(E,)`` the key of every judged pair of :class:`~embedmetrics._engine.qrels.Judgements` whose
    document the part holds (``+inf`` otherwise, and for a query's own document with ``exclude_self``).
    """

    keys: Tensor
    ids: Tensor
    tail: Tensor
    judged_keys: Tensor

    @classmethod
    def empty(cls, n_queries: int, depth: int, n_entries: int, device: torch.device) -> TopLists:
        inf = float("inf")
        return cls(
            torch.full((n_queries, depth), inf, dtype=torch.float64, device=device),
            torch.full((n_queries, depth), -1, dtype=torch.int64, device=device),
            torch.zeros(n_queries, dtype=torch.int64, device=device),
            torch.full((n_entries,), inf, dtype=torch.float64, device=device),
        )


def _columns_of(ids: Tensor, corpus_ids: Tensor) -> Tensor:
    """The corpus column holding each of ``ids``, ``-1`` where the corpus part has no such id."""
    order = torch.argsort(corpus_ids)
    at = find_sorted(corpus_ids[order], ids)
    return torch.where(at >= 0, order[at.clamp_min(0)], -1)


def scan_corpus(
    queries: Tensor,
    query_ids: Tensor,
    corpus: Tensor,
    corpus_ids: Tensor,
    judgements: Judgements,
    *,
    depth: int,
    similarity: str,
    exclude_self: bool,
    block_bytes: Optional[int],
) -> TopLists:
    """The top-``depth`` lists of every query against this corpus part (see the module docstring)."""
    out = TopLists.empty(queries.shape[0], depth, judgements.entry_row.numel(), queries.device)
    n_c = corpus.shape[0]
    if n_c == 0 or queries.shape[0] == 0:
        return out
    self_index = _columns_of(query_ids, corpus_ids) if exclude_self else None
    entry_col = _columns_of(judgements.entry_doc, corpus_ids)
    kk, width = min(depth + 1, n_c), min(depth, n_c)
    keys = KeyBlocks.prepare(queries, corpus, similarity, kk, self_index)
    ranges = keys.plan(block_bytes, None)
    bounds = torch.searchsorted(
        judgements.entry_row, torch.tensor([r for rng in ranges for r in rng], device=queries.device)
    ).tolist()
    for i, (start, stop) in enumerate(ranges):
        s = keys.block(start, stop)
        lo, hi = bounds[2 * i], bounds[2 * i + 1]
        cols, rows = entry_col[lo:hi], judgements.entry_row[lo:hi] - start
        found = s[rows, cols.clamp_min(0)].to(torch.float64)
        out.judged_keys[lo:hi] = torch.where(cols >= 0, found, float("inf"))
        vals, idx = smallest_keys(s, kk, keys.groups)
        top = vals[:, :width]
        ids = corpus_ids[idx[:, :width]]
        last = top[:, -1]
        tail = (top == last[:, None]).sum(dim=1)
        if kk > width:
            spill = ((vals[:, width] == last) & torch.isfinite(last)).nonzero().flatten()
            if spill.numel() > 0:
                block = s[spill, : keys.n_r]
                tail[spill], ids[spill] = _spilled_block(
                    block, last[spill], corpus_ids, ids[spill], tail[spill]
                )
        ids = torch.where(torch.isfinite(top), ids, -1)
        out.keys[start:stop, :width] = top.to(torch.float64)
        out.ids[start:stop, :width] = ids
        out.tail[start:stop] = tail
    return out


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


def merge_lists(parts: TopLists, n_parts: int) -> TopLists:
    """Merge ``n_parts`` part lists stacked along the rows (``(n_parts * Q, depth)``) exactly."""
    n_q = parts.keys.shape[0] // n_parts
    depth = parts.keys.shape[1]
    keys = parts.keys.view(n_parts, n_q, depth)
    ids = parts.ids.view(n_parts, n_q, depth)
    all_keys = keys.permute(1, 0, 2).reshape(n_q, n_parts * depth)
    all_ids = ids.permute(1, 0, 2).reshape(n_q, n_parts * depth)
    order = torch.argsort(all_ids, dim=1, stable=True)
    order = order.gather(1, torch.argsort(all_keys.gather(1, order), dim=1, stable=True))[:, :depth]
    top_keys, top_ids = all_keys.gather(1, order), all_ids.gather(1, order)
    v = top_keys[:, -1]
    part_last = keys[:, :, -1]
    counted = (keys == v[None, :, None]).sum(dim=2)
    whole = (part_last == v[None]) & torch.isfinite(v)[None]
    tail = torch.where(whole, parts.tail.view(n_parts, n_q), counted).sum(dim=0)
    return TopLists(top_keys, top_ids, tail, parts.judged_keys)


def gather_lists(local: TopLists) -> TopLists:
    """All processes' lists merged (every process returns the same); a collective."""
    world = dist.get_world_size()
    stacked = []
    for t in (local.keys, local.ids, local.tail):
        bucket = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(bucket, t.contiguous())
        stacked.append(torch.cat(bucket))
    judged = local.judged_keys.clone()
    dist.all_reduce(judged, op=dist.ReduceOp.MIN)
    return merge_lists(TopLists(stacked[0], stacked[1], stacked[2], judged), world)
