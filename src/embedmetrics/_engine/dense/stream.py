"""Dense retrieval, part 3: a corpus streamed chunk by chunk against fixed queries (running lists).

The queries and the qrels are fixed first (``StreamQueries``); each corpus chunk is then scanned against
every query at once and folded into **running lists** (``RunningLists``): per query the ``depth``
nearest documents seen so far by canonical key (``embedmetrics._engine.core.canonical``), ordered by
(key, document id), the size of the whole tie block at the last key, the canonical key of every judged
pair whose document has been seen, and (for ``return_run``) the float64 score of every listed document.
No corpus row is kept: memory is ``O(queries × (width + depth))`` plus one similarity block, whatever
the number of documents.

A chunk's own lists are the stored route's (``CorpusScan``: a fast scan of product keys, its entries
rescored, rows whose near ties overflow scanned again with canonical keys), with every listed key
canonical (a key of one chunk is compared with keys of others). After the first full lists, a chunk's
scan lists only the keys that can still enter them: a canonical key ``<= v`` (the running last key) has a
product key within half the margin of it, so the product filter's bound is ``v`` plus the margin. Lists
of disjoint corpus parts merge exactly (``merge_lists``), so the running lists after any chunks, in any
order and of any sizes, are the canonical lists of their union, and the values equal the stored route's
(``dense_values``) bit for bit. Lists of several processes merge the same way (``gather_stream``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import (
    ArgumentKindError,
    as_tensor,
    check_embeddings,
    check_finite,
    check_ids,
)
from embedmetrics._engine.core.pair_scores import pair_similarity
from embedmetrics._engine.core.row_owners import gather_same
from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.dense.exact_lists import (
    FAST_EXTRA,
    DocFactors,
    exact_lists,
    judged_keys,
)
from embedmetrics._engine.dense.measures import (
    DenseOptions,
    _no_queries,
    check_dense_score_range,
    ordered_run,
    values_of_lists,
)
from embedmetrics._engine.dense.qrels import Judgements, check_new_ids, check_unique_ids
from embedmetrics._engine.dense.scan import (
    CorpusScan,
    TopLists,
    by_key_then_id,
    columns_of,
    merge_lists,
    query_side,
)
from embedmetrics._metric.seen_ids import SeenIds

__all__ = [
    "RunningLists",
    "StreamQueries",
    "check_query_set",
    "fold_chunk",
    "gather_stream",
    "stream_values",
]


@dataclass
class StreamQueries:
    """The fixed side of a stream: the queries in ascending id order, their ids, the judgements."""

    queries: Tensor
    query_ids: Tensor
    judgements: Judgements
    opts: DenseOptions

    @classmethod
    def build(cls, queries: Tensor, query_ids: Tensor, qrels: Tensor, opts: DenseOptions) -> StreamQueries:
        """Sort the queries by id (ids unique: ``ValueError`` naming a repeated one) and index the qrels."""
        order = torch.argsort(query_ids)
        ids = query_ids[order]
        check_unique_ids("query_ids", ids)
        return cls(queries.detach()[order], ids, Judgements.build(qrels.to(ids.device), ids), opts)

    def empty_lists(self) -> RunningLists:
        """The running lists before any document."""
        n_q, depth, dev = self.queries.shape[0], self.opts.depth, self.queries.device
        lists = TopLists.empty(n_q, depth, self.judgements.entry_row.numel(), dev)
        scores = torch.full(
            (n_q, depth if self.opts.return_run else 0), -math.inf, dtype=torch.float64, device=dev
        )
        return RunningLists(lists.keys, lists.ids, lists.tail, lists.judged_keys, scores, _count(0, dev))


def _count(n: int, device: torch.device) -> Tensor:
    return torch.tensor(n, dtype=torch.int64, device=device)


@dataclass
class RunningLists:
    """Per query, the canonical top-``depth`` lists of the documents seen so far (see the module
    docstring): ``keys`` ``(Q, depth)`` float64 ascending (``+inf`` pads), ``ids`` (``-1`` pads),
    ``tail`` ``(Q,)`` the whole tie block at the last key, ``judged_keys`` ``(E,)`` (``+inf``: not seen),
    ``scores`` ``(Q, depth)`` float64 (``(Q, 0)`` without ``return_run``), ``n_docs`` the documents seen."""

    keys: Tensor
    ids: Tensor
    tail: Tensor
    judged_keys: Tensor
    scores: Tensor
    n_docs: Tensor

    def as_dict(self) -> dict[str, Tensor]:
        """The tensors by field name (metric states, checkpoints)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def top_lists(self) -> TopLists:
        return TopLists(self.keys, self.ids, self.tail, self.judged_keys)


def with_scores(lists: TopLists, parts: list[RunningLists], n_docs: Tensor) -> RunningLists:
    """The merged lists with each listed document's score looked up in the parts (ids are unique per
    query across disjoint parts), in canonical (key, id) order."""
    keys, ids = (
        lists.keys,
        lists.ids,
    )  # ascending keys (``merge_lists``); only tied keys need their ids ordered
    tied = ((keys[:, 1:] == keys[:, :-1]) & torch.isfinite(keys[:, 1:])).any(dim=1).nonzero().flatten()
    if tied.numel() > 0:
        order = by_key_then_id(keys[tied], ids[tied])
        keys, ids = keys.clone(), ids.clone()
        keys[tied], ids[tied] = keys[tied].gather(1, order), ids[tied].gather(1, order)
    scores = parts[0].scores
    if scores.shape[1] > 0:
        every_id = torch.cat([p.ids for p in parts], dim=1)
        every_score = torch.cat([p.scores for p in parts], dim=1)
        # by id, a listed entry before the padding of the same id: a real id -1 finds its own score
        padding = torch.isinf(torch.cat([p.keys for p in parts], dim=1)).to(torch.uint8)
        at = torch.argsort(padding, dim=1, stable=True)
        at = at.gather(1, torch.argsort(every_id.gather(1, at), dim=1, stable=True))
        sorted_ids = every_id.gather(1, at)
        pos = torch.searchsorted(sorted_ids, ids.contiguous()).clamp_max(sorted_ids.shape[1] - 1)
        scores = every_score.gather(1, at.gather(1, pos))
        scores = torch.where(torch.isfinite(keys), scores, -math.inf)
    return RunningLists(keys, ids, lists.tail, lists.judged_keys, scores, n_docs)


def merge_running(parts: list[RunningLists]) -> RunningLists:
    """The running lists of disjoint corpus parts merged exactly (``merge_lists``)."""
    merged = merge_lists([p.top_lists() for p in parts])
    merged.judged_keys = torch.stack([p.judged_keys for p in parts]).amin(dim=0)
    return with_scores(merged, parts, torch.stack([p.n_docs for p in parts]).sum())


def _wide_bound(lists: RunningLists, docs: DocFactors, q: Tensor, dtype: torch.dtype) -> Optional[Tensor]:
    """The product keys a chunk's scan must list: up to the running last key plus the margin (``None``
    while no list is full). Rounded up into ``dtype``: a cast never drops a key at the bound."""
    last = lists.keys[:, -1]
    if not bool(torch.isfinite(last).any()):
        return None
    wide = (last + docs.margins(q)).to(dtype)
    return torch.nextafter(wide, torch.full_like(wide, math.inf)).to(torch.float64)


def _chunk_lists(
    fixed: StreamQueries, lists: RunningLists, corpus: Tensor, corpus_ids: Tensor
) -> RunningLists:
    """The chunk's own canonical lists (every listed key canonical), the keys past the running lists' reach
    left out, with the chunk's judged keys and scores."""
    opts = fixed.opts
    depth, sim = opts.depth, opts.similarity
    dtype = compute_dtype(fixed.queries, corpus)
    q = query_side(fixed.queries, sim, dtype)
    docs = DocFactors(corpus, corpus_ids, sim, dtype)
    scan = CorpusScan.build(
        q, corpus.to(dtype), corpus_ids, sim, (depth + FAST_EXTRA, depth), opts.block_bytes
    )
    self_pos = scan.ordered(columns_of(fixed.query_ids, corpus_ids)) if opts.exclude_self else None
    bound = _wide_bound(lists, docs, q, dtype)
    fast = scan.lists(q, depth + FAST_EXTRA, self_pos, canonical=False, bound=bound)
    chunk = None
    if bound is not None:
        fast, chunk = _bounded_lists(fast, bound, depth, q, docs)
    if chunk is None:
        chunk, redo = exact_lists(_padded(fast, depth + FAST_EXTRA), depth, q, docs, values=True)
        if redo.numel() > 0:  # near ties past the fast lists: those rows again, with canonical keys
            exact = scan.lists(q[redo], depth, None if self_pos is None else self_pos[redo], canonical=True)
            chunk.keys[redo], chunk.ids[redo], chunk.tail[redo] = exact.keys, exact.ids, exact.tail
    self_ids = fixed.query_ids if opts.exclude_self else None
    judged = judged_keys(q, docs, fixed.judgements, self_ids)
    scores = lists.scores[:, :0]
    if opts.return_run:
        scores = _listed_scores(fixed.queries, corpus, chunk, docs, sim)
    n = _count(corpus.shape[0], corpus.device)
    return RunningLists(chunk.keys, chunk.ids, chunk.tail, judged, scores, n)


def _bounded_lists(
    fast: TopLists, bound: Tensor, depth: int, q: Tensor, docs: DocFactors
) -> tuple[TopLists, Optional[TopLists]]:
    """The fast lists of a chunk scanned up to ``bound`` (the running lists' reach) without the keys past
    it (a row's plain ``topk`` lists some: none can enter the lists), and, where no row keeps ``depth``
    keys, the chunk's canonical lists: every key up to the bound rescored, as wide as the most keys of a
    row (the merge takes lists of any width); ``None`` otherwise (``exact_lists`` reads them)."""
    past = fast.keys > bound[:, None]
    keys, ids = fast.keys.masked_fill(past, math.inf), fast.ids.masked_fill(past, -1)
    kept = TopLists(keys, ids, fast.tail, fast.judged_keys)
    finite = torch.isfinite(keys)
    width = max(1, int(finite.sum(dim=1).max()))  # one column at least: a list has a last place
    if width >= depth:
        return kept, None
    keys, ids, finite = keys[:, :width], ids[:, :width], finite[:, :width]  # ascending: the finite first
    canon = torch.full(keys.shape, math.inf, dtype=torch.float64, device=keys.device)
    listed = finite.nonzero()
    canon[listed[:, 0], listed[:, 1]] = docs.dots(q, listed[:, 0], ids[listed[:, 0], listed[:, 1]])
    order = by_key_then_id(canon, torch.where(finite, ids, torch.iinfo(torch.int64).max))
    canon, ids = canon.gather(1, order), ids.gather(1, order)
    tail = (canon == canon[:, -1:]).sum(dim=1)
    return kept, TopLists(canon, torch.where(torch.isfinite(canon), ids, -1), tail, fast.judged_keys)


def _padded(lists: TopLists, width: int) -> TopLists:
    """Lists at least ``width`` wide (``+inf`` / ``-1`` pad a bounded scan's narrower lists)."""
    short = width - lists.keys.shape[1]
    if short <= 0:
        return lists
    keys = torch.nn.functional.pad(lists.keys, (0, short), value=math.inf)
    ids = torch.nn.functional.pad(lists.ids, (0, short), value=-1)
    return TopLists(keys, ids, lists.tail, lists.judged_keys)


def _listed_scores(
    queries: Tensor, corpus: Tensor, chunk: TopLists, docs: DocFactors, similarity: str
) -> Tensor:
    """``pair_similarity`` of every listed (query, document) pair of the chunk (``-inf`` elsewhere)."""
    listed = torch.isfinite(chunk.keys).nonzero()
    scores = torch.full(chunk.keys.shape, -math.inf, dtype=torch.float64, device=chunk.keys.device)
    cols = docs.holds(chunk.ids[listed[:, 0], listed[:, 1]])
    scores[listed[:, 0], listed[:, 1]] = pair_similarity(queries, corpus, listed[:, 0], cols, similarity)
    return scores


def fold_chunk(fixed: StreamQueries, lists: RunningLists, corpus: Tensor, corpus_ids: Tensor) -> RunningLists:
    """The running lists after one more corpus chunk (``(n, d)`` rows, ``(n,)`` int64 ids never seen
    before; the caller checks them). ``lists`` is left as it was: a chunk that raises changes nothing."""
    corpus = corpus.detach()
    if corpus.shape[0] == 0 or fixed.queries.shape[0] == 0:
        return replace(lists, n_docs=lists.n_docs + corpus.shape[0])
    check_dense_score_range(fixed.queries, corpus, fixed.opts.similarity, False)
    return merge_running([lists, _chunk_lists(fixed, lists, corpus, corpus_ids)])


def gathered_parts(local: RunningLists) -> list[RunningLists]:
    """Every process's running lists, in rank order (a collective)."""
    tensors = local.as_dict()
    gathered = {name: gather_same(t[None] if t.ndim == 0 else t) for name, t in tensors.items()}
    world = len(gathered["keys"])
    return [
        RunningLists(**{name: gathered[name][r].reshape(tensors[name].shape) for name in tensors})
        for r in range(world)
    ]


def gather_stream(local: RunningLists) -> RunningLists:
    """Every process's running lists merged (a collective; every process returns the same)."""
    return merge_running(gathered_parts(local))


def stream_values(
    fixed: StreamQueries, lists: RunningLists, dtype: torch.dtype, *, distributed: bool = False
) -> dict[str, Any]:
    """The result dict of [`dense_retrieval`][embedmetrics.functional.dense_retrieval] from the running
    lists (every process's, merged, when ``distributed``: a collective); ``dtype``: that of the values."""
    if distributed:
        lists = gather_stream(lists)
    opts = fixed.opts
    if fixed.queries.shape[0] == 0:
        return _no_queries(fixed.queries.to(dtype), fixed.queries[:0].to(dtype), opts)
    n_docs = int(lists.n_docs)
    depth = max(max(opts.ks), min(opts.depth, n_docs))  # as the stored route clips it
    keys = lists.keys[:, :depth]
    last = keys[:, -1]
    # a list that was not full holds every document: its tie block at the (clipped) last key is in it
    held = torch.where(torch.isfinite(last), (keys == last[:, None]).sum(dim=1), torch.isinf(keys).sum(dim=1))
    tail = torch.where(torch.isfinite(lists.keys[:, -1]), lists.tail, held)
    top = TopLists(keys, lists.ids[:, :depth], tail, lists.judged_keys)
    run = None
    if opts.return_run:
        width = min(depth, n_docs)
        run = ordered_run(top.ids[:, :width], lists.scores[:, :width], fixed.queries.dtype)
    return values_of_lists(top, fixed.judgements, fixed.query_ids, replace(opts, depth=depth), dtype, run)


def stream_chunks(
    queries: Tensor,
    query_ids: Tensor,
    chunks: Iterable[Any],
    qrels: Tensor,
    opts: DenseOptions,
    validate_args: bool,
    id_map: Optional[Callable[[Tensor], Tensor]] = None,
) -> tuple[dict[str, Any], bool]:
    """The result of ``dense_values`` for a corpus given as an iterable of ``(embeddings, ids)`` chunks
    (read once), and whether the chunks were NumPy arrays. Every chunk must have the queries' width and
    dtype and ids never given before (``ValueError`` naming the chunk and the id as given). ``id_map``: a
    bijection of int64 ids applied to each chunk's checked ids (the run holds the mapped ids)."""
    if isinstance(chunks, (Mapping, str, bytes)) or not isinstance(chunks, Iterable):
        raise ArgumentKindError(
            "Argument `corpus` must be a tensor, a NumPy array or an iterable of (embeddings, ids) chunks, "
            f"got {type(chunks).__name__}."
        )
    fixed = StreamQueries.build(queries, query_ids, qrels, opts)
    given: list[Tensor] = []  # each chunk's ids, looked up through ``seen``
    lists, seen, numpy = fixed.empty_lists(), SeenIds(), False
    for number, chunk in enumerate(chunks):
        rows, ids, numpy = _checked_chunk(number, chunk, fixed.queries, validate_args)
        check_new_ids(f"ids of corpus chunk {number}", ids, given, seen)
        given.append(ids)
        lists = fold_chunk(fixed, lists, rows, ids if id_map is None else id_map(ids))
    return stream_values(fixed, lists, compute_dtype(fixed.queries)), numpy


def _checked_chunk(
    number: int, chunk: Any, queries: Tensor, validate_args: bool
) -> tuple[Tensor, Tensor, bool]:
    """One ``(embeddings, ids)`` chunk of a streamed corpus, checked against the queries."""
    if not isinstance(chunk, (tuple, list)) or len(chunk) != 2:
        raise ArgumentKindError(
            "Argument `corpus` as an iterable must yield (embeddings, ids) pairs, got "
            f"{type(chunk).__name__} as chunk {number}."
        )
    name = f"corpus chunk {number}"
    rows = check_corpus_part(name, as_tensor(name, chunk[0]), queries, validate_args)
    ids = check_ids(f"ids of {name}", as_tensor(f"ids of {name}", chunk[1]).to(queries.device), rows.shape[0])
    return rows, ids, isinstance(chunk[0], np.ndarray)


def check_corpus_part(name: str, rows: Tensor, queries: Tensor, validate_args: bool) -> Tensor:
    """A part of a corpus searched with ``queries``: ``(n, d)`` rows (empty allowed) of the queries' dtype
    and width (``ValueError`` naming ``name``), finite with ``validate_args``; detached, on their device."""
    rows = rows.detach().to(queries.device)
    check_embeddings(name, rows, allow_empty=True)
    if rows.dtype != queries.dtype or rows.shape[1] != queries.shape[1]:
        raise ValueError(
            f"Argument `corpus`: {name} must have the queries' dtype and width ({queries.dtype}, "
            f"{queries.shape[1]} features), got {rows.dtype} with shape {tuple(rows.shape)}."
        )
    if validate_args:
        check_finite(name, rows)
    return rows


def check_query_set(
    embeddings: Any,
    ids: Any,
    validate_args: bool,
    device: torch.device,
    names: tuple[str, str] = ("embeddings", "ids"),
) -> tuple[Tensor, Tensor]:
    """A stream's query set (``set_queries``; ``names``: the arguments' names in errors): ``(Q, d)``
    floating embeddings (at least one row; finite with ``validate_args``), ``(Q,)`` unique integer ids, as
    tensors on ``device`` (ids int64)."""
    rows, id_name = names
    queries = as_tensor(rows, embeddings).detach().to(device)
    check_embeddings(rows, queries)
    if validate_args:
        check_finite(rows, queries)
    query_ids = check_ids(id_name, as_tensor(id_name, ids).to(device), queries.shape[0])
    check_unique_ids(id_name, torch.sort(query_ids).values)
    return queries, query_ids
