"""Dense retrieval without judgements: each query's top-``depth`` documents and their scores (a run).

The same lists as ``dense_retrieval``'s ``return_run``, from the same routes: a corpus tensor is scanned
whole (``dense_values``), an iterable of ``(embeddings, ids)`` chunks is folded into running lists
(``stream_chunks``), with no judgements (no NaN measures). Tied documents (equal keys) are ordered by id:
ascending (the lowest kept at the cut), or descending (the highest kept and listed first, as trec_eval
orders tied scores), by ranking the order-reversed ids ``~id`` (``-1 - id``, a bijection of int64) and mapping
them back. Ids are checked as given, before they are reversed, so errors name them as given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

from embedmetrics._engine.dense.measures import DenseOptions, dense_values
from embedmetrics._engine.dense.qrels import check_unique_ids
from embedmetrics._engine.dense.scan import by_key_then_id
from embedmetrics._engine.dense.stream import (
    RunningLists,
    StreamQueries,
    check_corpus_part,
    fold_chunk,
    gather_stream,
    stream_chunks,
)


def _reversed(ids: Tensor) -> Tensor:
    return ~ids


def search_run(
    queries: Tensor,
    query_ids: Tensor,
    corpus: Union[Tensor, Iterable[Any]],
    corpus_ids: Optional[Tensor],
    opts: DenseOptions,
    descending: bool,
    validate_args: bool,
) -> tuple[Tensor, Tensor]:
    """``(doc_ids, scores)``: per query (rows in the order of ``queries``) its listed documents, nearest
    first, ties by id in the order asked, ``-1`` / ``-inf`` padding rows of fewer documents (an excluded
    self). ``queries`` and ``query_ids`` (int64, unique) checked; a tensor corpus with its int64
    ``corpus_ids`` checked but for uniqueness (refused here: a search counts no repeat once)."""
    empty = torch.zeros(0, 3, dtype=torch.int64, device=queries.device)
    qids = ~query_ids if descending else query_ids  # ``exclude_self`` compares them with the documents'
    if isinstance(corpus, Tensor):
        assert corpus_ids is not None
        check_unique_ids("corpus_ids", torch.sort(corpus_ids).values)
        if corpus.shape[0] == 0:
            n_q = queries.shape[0]
            return empty.new_zeros(n_q, 0), queries.new_zeros(n_q, 0, dtype=_score_dtype(queries))
        cids = ~corpus_ids if descending else corpus_ids
        result = dense_values(queries, qids, corpus, cids, empty, opts)
    else:
        result, _ = stream_chunks(
            queries, qids, corpus, empty, opts, validate_args, _reversed if descending else None
        )
    ids, scores = result["run"]
    if descending:
        ids = torch.where(torch.isfinite(scores), ~ids, -1)
    rows = torch.searchsorted(result["query_ids"], qids)  # ascending ids back to the given order
    return ids[rows], scores[rows]


def _score_dtype(queries: Tensor) -> torch.dtype:
    """The run's scores: float64 for float64 queries, else float32 (as ``ordered_run``)."""
    return queries.dtype if queries.dtype == torch.float64 else torch.float32


@dataclass
class RunSearch:
    """A run-only search fed one corpus chunk at a time (the streamed route of ``search_run`` as an object,
    for callers that encode the chunks themselves): ``add`` checks a chunk and folds it into the running
    lists, ``ranked`` reads each query's documents and canonical keys. Ids are int64 codes, unique."""

    fixed: StreamQueries
    lists: RunningLists
    descending: bool
    validate_args: bool

    @classmethod
    def start(cls, queries: Tensor, opts: DenseOptions, descending: bool, validate_args: bool) -> RunSearch:
        """Fix the (checked) queries: ``opts`` gives the depth, similarity and block budget."""
        empty = torch.zeros(0, 3, dtype=torch.int64, device=queries.device)
        ids = torch.arange(queries.shape[0], device=queries.device)
        fixed = StreamQueries.build(queries, ids, empty, opts)
        return cls(fixed, fixed.empty_lists(), descending, validate_args)

    def add(self, rows: Tensor, ids: Tensor) -> None:
        """Fold one chunk (``(n, d)`` rows of the queries' dtype and width, finite with ``validate_args``;
        ``(n,)`` int64 ids never given before: the caller's to check)."""
        rows = check_corpus_part("corpus chunk", rows, self.fixed.queries, self.validate_args)
        self.lists = fold_chunk(self.fixed, self.lists, rows, ~ids if self.descending else ids)

    def ranked(self, distributed: bool = False) -> tuple[Tensor, Tensor]:
        """``(ids, keys)``, each ``(Q, min(depth, documents))``: per query (in the order given) its documents
        by canonical key ascending (nearer first), ties by id in the order asked; ``-1`` / ``+inf`` pad.
        ``distributed``: every process's lists merged first (a collective; the queries the same on every
        process, each process's chunks its own): every process returns the same."""
        lists = gather_stream(self.lists) if distributed else self.lists
        width = min(self.fixed.opts.depth, int(lists.n_docs))
        keys, ids = lists.keys[:, :width], lists.ids[:, :width]
        order = by_key_then_id(keys, ids)  # the running lists order a tie block by id at merges only
        keys, ids = keys.gather(1, order), ids.gather(1, order)
        listed = torch.isfinite(keys)
        if self.descending:
            ids = ~ids
        return torch.where(listed, ids, -1), keys
