"""Dense retrieval, part 2: the lists by canonical keys, and the scan that makes them.

``scan_corpus`` scans the corpus part once with product keys, ``FAST_EXTRA`` places deeper than
``depth`` (``CorpusScan``: the fast path, near the bare product's speed). A query's canonical lists
are then read off its fast list (``exact_lists``): every entry that can be among its ``depth``
nearest by canonical keys (``embedmetrics._engine.core.canonical``), or tie with the ``depth``-th,
has a product key within the margin of the ``depth``-th product key; when the list reaches past that
(the common case) its entries up to there are rescored and ranked by (canonical key, document id),
the boundary tie block counted whole. A query whose near ties overflow the list (heavily tied data)
is scanned again, block by block with canonical keys. The keys of the judged pairs are canonical too
(``judged_keys``). So a query's lists never depend on the other queries, the block size, the corpus
order or the product's kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.core.canonical import margins_of, mixed_runs, needing_canonical, pair_dots
from embedmetrics._engine.core.row_owners import gather_same
from embedmetrics._engine.core.scan import compute_dtype, row_norms
from embedmetrics._engine.dense.qrels import Judgements
from embedmetrics._engine.dense.scan import (
    CorpusScan,
    IdColumns,
    TopLists,
    by_key_then_id,
    columns_of,
    corpus_side,
    query_side,
)

#: Places the fast scan lists past ``depth``: a query whose near ties (within the product's error
#: margin of its ``depth``-th key) fit in them is rescored from its list, without a second scan.
FAST_EXTRA = 8


class DocFactors:
    """The right factor rows of chosen corpus documents (by id), and the largest norm of any."""

    def __init__(self, corpus: Tensor, corpus_ids: Tensor, similarity: str, dtype: torch.dtype) -> None:
        self.corpus, self.corpus_ids, self.similarity, self.dtype = corpus, corpus_ids, similarity, dtype
        # the largest norm of a document row (its factor: unit rows for cosine)
        empty = corpus.shape[0] == 0
        self.largest_norm = (
            1.0 if similarity == "cosine" or empty else float(row_norms(corpus.to(dtype)).max())
        )
        self.holds = IdColumns(corpus_ids)  # the corpus row of an id, -1 where the part has none

    def dots(self, q: Tensor, query_rows: Tensor, ids: Tensor) -> Tensor:
        """Canonical keys of the pairs (``q[query_rows[i]]``, document ``ids[i]``; held by the part),
        the documents' factor rows made chunk by chunk (never a copy of the documents)."""
        rows = self.holds(ids)

        def factor(raw: Tensor, out: Tensor) -> None:  # -0.0 made +0.0, as the scan's distinct rows
            rows = raw.to(self.dtype).add_(0.0)  # ``raw``: pair_dots' own buffer
            corpus_side(rows, self.similarity, out.shape[0], out.view(-1))

        return pair_dots(q, self.corpus, query_rows, rows, factor)

    def margins(self, q: Tensor) -> Tensor:
        """Per query, twice the largest distance between a product key and a canonical key (float64)."""
        return margins_of(q, self.largest_norm, self.similarity == "euclidean")


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
    distributed: bool = False,
    order_all: bool = False,
) -> TopLists:
    """The top-``depth`` lists of every query against this corpus part, by canonical keys (see the
    module docstring): a fast scan of product keys ``FAST_EXTRA`` places deeper than ``depth``, its
    lists rescored (``exact_lists``); the queries whose near ties overflow them are scanned again with
    canonical keys block by block. ``distributed`` (a collective; the queries are the same on every
    process): the parts' lists are to be merged, so only the entries that can be among the *merged* top
    ``depth`` are listed, and those near another entry of any part or the merged boundary rescored
    (``merged_fast``). Near entries of one gain (``mixed_runs``) keep their product keys: the measures
    read the gains only, so their order is the run's business alone; ``order_all`` (the run is
    returned) rescores them too."""
    n_q, n_c = queries.shape[0], corpus.shape[0]
    out = TopLists.empty(n_q, depth, judgements.entry_row.numel(), queries.device)
    if n_q == 0:
        return out
    dtype = compute_dtype(queries, corpus)
    q = query_side(queries, similarity, dtype)
    docs = DocFactors(corpus, corpus_ids, similarity, dtype)
    if n_c == 0:
        if distributed:  # every process takes part in the collective
            merged_fast(None, depth, q, docs, None if order_all else torch.empty(0, device=q.device))
        return out
    scan = CorpusScan.build(
        q, corpus.detach().to(dtype), corpus_ids, similarity, (depth + FAST_EXTRA, depth), block_bytes
    )
    self_pos = scan.ordered(columns_of(query_ids, corpus_ids)) if exclude_self else None
    fast = scan.lists(q, depth + FAST_EXTRA, self_pos, canonical=False)
    gains = None if order_all else list_gains(fast, judgements)
    merged = merged_fast(fast, depth, q, docs, gains) if distributed else None
    lists, redo = exact_lists(fast, depth, q, docs, merged, gains=gains)
    if redo.numel() > 0:
        exact = scan.lists(q[redo], depth, None if self_pos is None else self_pos[redo], canonical=True)
        lists.keys[redo], lists.ids[redo], lists.tail[redo] = exact.keys, exact.ids, exact.tail
    lists.judged_keys = judged_keys(q, docs, judgements, query_ids if exclude_self else None)
    return lists


@dataclass
class MergedFast:
    """What the fast lists of every process say about the merged lists, per query (``merged_fast``):
    the ``depth``-th smallest product key of their union (``kth``), the margin for the largest document
    norm of any process, ``limit = kth + margin``, the union's product keys sorted (float64), and
    whether every process's fast list reaches past ``limit`` (``every_ok``); with gains, whether each
    key of the union is in a run of near keys of more than one gain (``mixed``, ``mixed_runs``)."""

    kth: Tensor
    margins: Tensor
    limit: Tensor
    keys: Tensor
    every_ok: Tensor
    mixed: Optional[Tensor] = None

    def near(self, keys: Tensor) -> Tensor:
        """Whether each of ``keys`` (one process's fast list) has another key of the union within the
        margin: the order of one farther from every other is canonical already."""
        x, m = keys.double(), self.margins[:, None]
        lo = torch.searchsorted(self.keys, (x - m).contiguous(), right=False)
        hi = torch.searchsorted(self.keys, (x + m).contiguous(), right=True)
        near = (hi - lo) >= 2  # the key itself is in the union
        if self.mixed is None:
            return near
        at = torch.searchsorted(self.keys, x.contiguous(), right=False).clamp_max(self.keys.shape[1] - 1)
        return near & self.mixed.gather(1, at)


def merged_fast(
    fast: Optional[TopLists], depth: int, q: Tensor, docs: DocFactors, gains: Optional[Tensor] = None
) -> MergedFast:
    """The ``MergedFast`` of every process's fast list (a collective; ``fast`` ``None`` for an empty
    part). The ``depth`` smallest canonical keys of the union are within half the margin of ``kth``, so
    every entry of any part that can be among them, or tie with the last, has a product key ``<= limit``:
    a part rescores and lists those only. ``gains``: the gains of the fast list's entries (``None`` on
    every process, or a tensor on every process; ignored for an empty part)."""
    width = depth + FAST_EXTRA
    keys = torch.full((q.shape[0], width), torch.inf, dtype=q.dtype, device=q.device)
    if fast is not None:
        keys[:, : fast.keys.shape[1]] = fast.keys[:, :width]
    bucket = gather_same(keys)
    norm = docs.largest_norm if docs.corpus.shape[0] > 0 else 0.0
    top = torch.tensor([norm], dtype=torch.float64, device=q.device)
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    union, order = torch.cat(bucket, dim=1).double().sort(dim=1)  # NaN last
    kth = union[:, depth - 1]
    margins = margins_of(q, float(top), docs.similarity == "euclidean")
    limit = kth + margins
    lasts = torch.stack([b[:, -1].double() for b in bucket], dim=1)
    every_ok = ~union.isnan().any(dim=1) & ((lasts > limit[:, None]) | torch.isinf(lasts)).all(dim=1)
    limit = torch.where(kth.isnan(), torch.inf, limit)
    mixed = None
    if gains is not None:  # the gains of the union's entries, in its order (-1: no entry)
        mine = torch.full_like(keys, -1.0, dtype=torch.float64)
        if fast is not None:
            mine[:, : gains.shape[1]] = gains[:, :width]
        mixed = mixed_runs(union, margins, torch.cat(gather_same(mine), dim=1).gather(1, order))
    return MergedFast(kth, margins, limit, union, every_ok, mixed)


def exact_lists(
    fast: TopLists,
    depth: int,
    q: Tensor,
    docs: DocFactors,
    merged: Optional[MergedFast] = None,
    values: bool = False,
    gains: Optional[Tensor] = None,
) -> tuple[TopLists, Tensor]:
    """The canonical top-``depth`` lists of the queries whose fast list (product keys, deeper than
    ``depth``) holds every entry that can matter, and the rows of the others (to scan again).

    Only the entries within the margin of another key or of the ``depth``-th key are rescored: an entry
    farther keeps its product key, which orders it as its canonical key would and ties with nothing,
    so the order, the tie blocks and the boundary key (compared with the judged keys) are canonical:
    all that the measures read. ``merged`` (lists to be merged with other processes'): the ``depth``-th
    key, the margin and the other keys are those of the union (``merged_fast``), and a query for which
    some process's fast list overflows is rescored whole. ``values``: every listed key canonical.
    ``gains`` (of the fast list's entries): near entries in a run of one gain keep their product keys
    (``mixed_runs``), except at the boundary."""
    keys, ids = fast.keys, fast.ids
    kth = keys[:, depth - 1].double() if merged is None else merged.kth
    margins = docs.margins(q) if merged is None else merged.margins
    limit = kth + margins if merged is None else merged.limit
    last = keys[:, -1]
    ok = ~keys.isnan().any(dim=1) & ((last > limit) | torch.isinf(last))
    listed = torch.isfinite(keys) & (keys <= limit[:, None]) & ok[:, None]
    canon = torch.where(listed, keys.double(), torch.inf)
    boundary = keys.double() >= (kth - margins)[:, None]  # can tie with the boundary key
    if values:
        redo = listed
    elif merged is None:
        close = needing_canonical(canon, margins)
        if gains is not None:
            close &= mixed_runs(canon, margins, gains)
        redo = listed & (close | boundary)
    else:
        redo = listed & (merged.near(keys) | boundary | ~merged.every_ok[:, None])
    near = redo.nonzero()
    if near.numel() > 0:
        canon[near[:, 0], near[:, 1]] = docs.dots(q, near[:, 0], ids[near[:, 0], near[:, 1]])
    order = by_key_then_id(canon, torch.where(torch.isfinite(canon), ids, torch.iinfo(torch.int64).max))
    top_keys = canon.gather(1, order)[:, :depth]
    top_ids = torch.where(torch.isfinite(top_keys), ids.gather(1, order)[:, :depth], -1)
    v = top_keys[:, -1]
    tail = torch.where(torch.isfinite(v), (canon == v[:, None]).sum(dim=1), torch.isinf(top_keys).sum(dim=1))
    lists = TopLists(top_keys, top_ids, tail, fast.judged_keys)
    return lists, (~ok).nonzero().flatten()


def list_gains(lists: TopLists, judgements: Judgements) -> Tensor:
    """``(Q, width)`` float64 gain of each listed document (0 where unjudged or not relevant): all that
    the measures read of it."""
    rows = torch.arange(lists.ids.shape[0], device=lists.ids.device)[:, None]
    return judgements.relevance(rows, lists.ids).clamp_min(0).double()


def judged_keys(q: Tensor, docs: DocFactors, judgements: Judgements, self_ids: Optional[Tensor]) -> Tensor:
    """The canonical key of every judged (query, document) pair whose document the part holds (``+inf``
    otherwise, and for a query's own document where ``self_ids``, the query ids, are given)."""
    rows, doc = judgements.entry_row, judgements.entry_doc
    out = torch.full((rows.numel(),), float("inf"), dtype=torch.float64, device=q.device)
    held = docs.holds(doc) >= 0
    if self_ids is not None:
        held &= doc != self_ids[rows]
    at = held.nonzero().flatten()
    if at.numel() > 0:
        out[at] = docs.dots(q, rows[at], doc[at])
    return out
