"""Dense retrieval, part 4: a streamed corpus given twice in part counts each document once.

Under DDP a ``DistributedSampler`` pads the corpus to a multiple of the processes by repeating its first
items (docs/lightning.md, "Repeated items under DDP"), so two processes' running lists (or two merged
states) may hold one document each: the same id with the same row, an exact repeat. A streamed corpus
keeps no rows, so beside each document id the metric keeps a 64-bit digest of its row (``row_hash``,
``digests_of``): the same id with the same digest is one document, counted once; the same id with another
digest is two documents under one id and raises ``ValueError`` naming it, as on the stored route
(``repeats.py``).

Lists that share documents merge as lists of disjoint parts do (``merge_lists``), and then:

- a document several parts list for a query is listed once (``merge_lists``' ``drop``);
- ``n_docs`` counts it once;
- the merged tie block at the last key ``v`` (``tail``) counts it once. Every part holding a document
  whose key is ``v`` counts it (in its list, or in its own tail where its list ends at ``v``), so each
  copy beyond the first is taken off. A repeated document's key is read off any list holding it. One
  that no part lists has a key at or past every holding part's last key, so it can be at ``v`` only where
  every holding part's list ends at ``v`` with members of its block left unlisted (a tie block that
  straddles the cut). Only there is its key needed: it is computed from its row, where a process still
  holds it (each keeps the rows of its last chunk, and a sampler's padding is a process's last item);
  without the row the count is unknown, and ``ValueError`` says so.

So the lists, ``n_docs`` and the values equal those of the distinct documents streamed once, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.core.distinct import row_hash
from embedmetrics._engine.core.row_owners import gather_rows
from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.dense.exact_lists import DocFactors
from embedmetrics._engine.dense.qrels import check_unique_ids
from embedmetrics._engine.dense.repeats import repeated_positions
from embedmetrics._engine.dense.scan import IdColumns, TopLists, merge_lists, query_side
from embedmetrics._engine.dense.stream import (
    RunningLists,
    StreamQueries,
    gathered_parts,
    merge_running,
    with_scores,
)

__all__ = [
    "KnownRows",
    "Repeats",
    "digests_of",
    "find_repeats",
    "gather_counting_once",
    "merge_counting_once",
]

#: Entries of one ``(queries, repeated documents)`` block where tie blocks straddle the cut.
_BLOCK_ENTRIES = 1 << 22


def digests_of(rows: Tensor) -> Tensor:
    """``(n,)`` int64: a digest of each corpus row (its canonical bits: ``-0.0`` is ``0.0``)."""
    return row_hash(rows)


@dataclass
class Repeats:
    """The documents more than one part holds: ``ids`` ``(R,)`` ascending, ``extra`` ``(R,)`` their copies
    beyond the first, ``held`` ``(parts, R)`` which parts hold each, ``digests`` ``(R,)`` their rows'."""

    ids: Tensor
    extra: Tensor
    held: Tensor
    digests: Tensor


@dataclass
class KnownRows:
    """Rows of some documents (``rows`` ``(n, d)``, ``ids`` ``(n,)``), such as the last chunks a metric
    holds; a row is used for a repeated document only where its digest is that document's."""

    rows: Tensor
    ids: Tensor

    def matching(self, repeats: Repeats) -> KnownRows:
        """The rows of ``repeats`` whose digest is the repeated document's (a host sync): a row changed
        since it was streamed, or an older row under the same id, is left out."""
        last = max(0, repeats.ids.numel() - 1)
        at = torch.searchsorted(repeats.ids, self.ids.contiguous()).clamp_max(last)
        mine = torch.isin(self.ids, repeats.ids)
        if bool(mine.any()):
            mine[mine.clone()] = digests_of(self.rows[mine]) == repeats.digests[at[mine]]
        return KnownRows(self.rows[mine], self.ids[mine])


def find_repeats(ids: Sequence[Tensor], digests: Sequence[Tensor], name: str) -> Optional[Repeats]:
    """The documents held by more than one part (each part's ``ids`` unique; ``digests`` their rows'),
    ``None`` where none is. An id held with other rows raises ``ValueError`` naming ``name`` and the
    smallest such id. A host sync."""
    for part in ids:  # each part's own ids are unique (``update`` refuses a known id)
        check_unique_ids(name, torch.sort(part).values)
    every, codes = torch.cat(list(ids)), torch.cat(list(digests)).to(ids[0].device)
    found = repeated_positions(every)
    if found is None:
        return None
    repeat, first = found
    differs = codes[repeat] != codes[first]
    if bool(differs.any()):
        value = int(every[repeat[differs]].min())
        raise ValueError(
            f"{name} must hold unique ids, got {value} more than once with different rows (a document "
            "given twice with the same id and the same embedding counts once)."
        )
    shared, extra = torch.unique(every[repeat], return_counts=True)
    held = torch.stack([torch.isin(shared, part.to(shared.device)) for part in ids])
    digest = torch.zeros_like(shared)  # any copy's digest: they are equal
    digest[torch.searchsorted(shared, every[repeat])] = codes[repeat]
    return Repeats(shared, extra, held, digest)


def merge_counting_once(
    fixed: StreamQueries, parts: Sequence[RunningLists], repeats: Repeats, known: Optional[KnownRows]
) -> RunningLists:
    """The running lists of ``parts`` merged, each of the ``repeats`` (the same id and row in several
    parts) counted once (see the module docstring); ``known``: rows of repeated documents, read only where
    a tie block straddles the cut (``ValueError`` where such a document's row is not among them)."""
    parts, repeats = _without_contained(parts, repeats)
    known = None if known is None else known.matching(repeats)
    if len(parts) == 1 or repeats.ids.numel() == 0:
        return merge_running(list(parts))
    tops = [p.top_lists() for p in parts]
    all_keys = torch.cat([t.keys for t in tops], dim=1)
    all_ids = torch.cat([t.ids for t in tops], dim=1)
    listed = torch.isfinite(all_keys)
    drop = _later_listings(all_ids, listed)
    merged = merge_lists(tops, drop=drop)
    merged.judged_keys = torch.stack([p.judged_keys for p in parts]).amin(dim=0)
    v = merged.keys[:, -1]
    over = _listed_at_cut(all_ids, all_keys, listed & ~drop, v, repeats)
    over += _unlisted_at_cut(fixed, tops, all_ids, listed, v, repeats, known)
    merged.tail = merged.tail - over
    n_docs = torch.stack([p.n_docs for p in parts]).sum() - repeats.extra.sum()
    return with_scores(merged, list(parts), n_docs)


def _without_contained(
    parts: Sequence[RunningLists], repeats: Repeats
) -> tuple[Sequence[RunningLists], Repeats]:
    """The parts less those whose every document another kept part holds (a copy of a state, a subset:
    their lists add nothing), and the repeats among the parts kept."""
    keep = list(range(len(parts)))
    for p in reversed(range(len(parts))):
        if int(repeats.held[p].sum()) != int(parts[p].n_docs):
            continue  # documents of its own
        if any(q != p and bool((repeats.held[q] | ~repeats.held[p]).all()) for q in keep):
            keep.remove(p)
    if len(keep) == len(parts):
        return parts, repeats
    held = repeats.held[keep]
    shared = held.sum(dim=0) > 1
    left = Repeats(repeats.ids[shared], held.sum(dim=0)[shared] - 1, held[:, shared], repeats.digests[shared])
    return [parts[p] for p in keep], left


def _later_listings(ids: Tensor, listed: Tensor) -> Tensor:
    """``(Q, W)`` bool: the listed entries whose id a listed entry before them in the row holds."""
    order = torch.argsort((~listed).to(torch.uint8), dim=1, stable=True)  # listed first, in place order
    order = order.gather(1, torch.argsort(ids.gather(1, order), dim=1, stable=True))
    s_ids, s_listed = ids.gather(1, order), listed.gather(1, order)
    again = torch.zeros_like(listed)
    again[:, 1:] = (s_ids[:, 1:] == s_ids[:, :-1]) & s_listed[:, 1:] & s_listed[:, :-1]
    return torch.zeros_like(listed).scatter_(1, order, again)


def _positions(repeats: Repeats, ids: Tensor) -> tuple[Tensor, Tensor]:
    """For each of ``ids``: its place among ``repeats.ids`` (clamped) and whether it is one of them."""
    at = torch.searchsorted(repeats.ids, ids.contiguous()).clamp_max(repeats.ids.numel() - 1)
    return at, repeats.ids[at] == ids


def _listed_at_cut(ids: Tensor, keys: Tensor, first: Tensor, v: Tensor, repeats: Repeats) -> Tensor:
    """Per query, the copies beyond the first of the repeated documents listed at the last key ``v``."""
    at, repeated = _positions(repeats, ids)
    counted = repeated & first & (keys == v[:, None])
    return (repeats.extra[at] * counted).sum(dim=1)


def _unlisted_at_cut(
    fixed: StreamQueries,
    tops: Sequence[TopLists],
    ids: Tensor,
    listed: Tensor,
    v: Tensor,
    repeats: Repeats,
    known: Optional[KnownRows],
) -> Tensor:
    """Per query, the copies beyond the first of the repeated documents no part lists whose key is ``v``:
    only where every holding part's tie block at ``v`` runs past its list are their keys computed."""
    over = torch.zeros(v.shape[0], dtype=torch.int64, device=v.device)
    straddles = torch.stack(
        [
            (t.keys[:, -1] == v) & torch.isfinite(v) & (t.tail > (t.keys == v[:, None]).sum(dim=1))
            for t in tops
        ]
    )
    rows = straddles.any(dim=0).nonzero().flatten()
    if rows.numel() == 0:
        return over
    at, repeated = _positions(repeats, ids[rows])
    n_r = repeats.ids.numel()
    listed_any = torch.zeros(rows.numel(), n_r + 1, dtype=torch.bool, device=v.device)
    listed_any = listed_any.scatter_(1, torch.where(repeated & listed[rows], at, n_r), True)[:, :n_r]
    step = max(1, _BLOCK_ENTRIES // rows.numel())
    for s in range(0, n_r, step):
        held = repeats.held[:, s : s + step]
        # each holder of the document either straddles the cut at the query, or it could not be at v
        open_ = ~(held[:, None, :] & ~straddles[:, rows, None]).any(dim=0) & ~listed_any[:, s : s + step]
        pairs = open_.nonzero()
        if pairs.numel() == 0:
            continue
        query_rows, docs = rows[pairs[:, 0]], repeats.ids[s + pairs[:, 1]]
        if fixed.opts.exclude_self:  # a query's own document is in none of its lists
            other = fixed.query_ids[query_rows] != docs
            query_rows, docs, pairs = query_rows[other], docs[other], pairs[other]
        at_cut = _keys_of(fixed, known, query_rows, docs) == v[query_rows]
        over.index_add_(0, query_rows[at_cut], repeats.extra[s + pairs[at_cut, 1]])
    return over


def _keys_of(fixed: StreamQueries, known: Optional[KnownRows], query_rows: Tensor, docs: Tensor) -> Tensor:
    """The canonical keys of the pairs (query ``query_rows[i]``, document ``docs[i]``) from the documents'
    ``known`` rows; ``ValueError`` where a document's row is not known."""
    held = IdColumns(known.ids)(docs) if known is not None else torch.full_like(docs, -1)
    if known is None or bool((held < 0).any()):
        doc = int(docs[held < 0][0])
        query = int(fixed.query_ids[query_rows[held < 0][0]])
        raise ValueError(
            f"DenseRetrieval: document {doc} was streamed twice (on two processes or in two merged states) "
            f"and may tie with the last listed document of query {query}, whose tie block runs past the "
            "lists; its row is not held (a metric keeps a copy of its last chunk's rows, and those of the "
            "states merged into it: a DistributedSampler's padding is each process's last item, but a "
            "repeat earlier in a stream is not held), so it cannot be counted once. Stream each document "
            "once (Lightning: use_distributed_sampler=False with an UnrepeatedDistributedSampler)."
        )
    dtype = compute_dtype(fixed.queries, known.rows)
    q = query_side(fixed.queries, fixed.opts.similarity, dtype)
    return DocFactors(known.rows, known.ids, fixed.opts.similarity, dtype).dots(q, query_rows, docs)


def gather_counting_once(
    fixed: StreamQueries, local: RunningLists, ids: Tensor, digests: Tensor, last: Optional[KnownRows]
) -> RunningLists:
    """Every process's running lists merged, a document streamed by several processes with the same row
    counted once (``ids`` / ``digests``: this process's documents; ``last``: the rows of its last chunk).
    A collective; every process returns the same or raises the same ``ValueError``."""
    id_parts, digest_parts = gather_rows(ids), gather_rows(digests)
    parts = gathered_parts(local)
    repeats = find_repeats(id_parts, digest_parts, "Argument `corpus_ids` (every process's)")
    if repeats is None:
        return merge_running(parts)
    return merge_counting_once(fixed, parts, repeats, _gather_known(fixed, repeats, last))


def _gather_known(fixed: StreamQueries, repeats: Repeats, last: Optional[KnownRows]) -> KnownRows:
    """The rows of repeated documents that some process holds in its last chunk (and whose digest is still
    that of the document: a row changed in place since is not used), from every process; a collective."""
    rows, ids = fixed.queries[:0], repeats.ids[:0]
    if last is not None and last.ids.numel() > 0:
        kept = last.matching(repeats)
        rows, ids = kept.rows.to(rows.device), kept.ids.to(rows.device)
    return KnownRows(torch.cat(gather_rows(rows)), torch.cat(gather_rows(ids)))
