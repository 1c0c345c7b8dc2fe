"""Dense retrieval without judgements: each query's top-``depth`` documents and their scores (a run).

The same lists as ``dense_retrieval``'s ``return_run``, from the same routes: a corpus tensor is scanned
whole (``dense_values``), an iterable of ``(embeddings, ids)`` chunks is folded into running lists
(``stream_chunks``), with no judgements (no NaN measures). Tied documents are ordered by id: ascending (the
lowest kept at the cut), or descending (the highest kept and listed first, as trec_eval orders tied scores),
by ranking the order-reversed ids ``~id`` (``-1 - id``, a bijection of int64) and mapping them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Optional, Union

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import as_tensor
from embedmetrics._engine.dense.measures import DenseOptions, dense_values
from embedmetrics._engine.dense.stream import stream_chunks


def _reversed_ids(chunks: Iterable[Any]) -> Iterator[Any]:
    """The chunks with integer ids order-reversed (``~id``); anything else passed on for the stream's
    checks to name."""
    for number, chunk in enumerate(chunks):
        if isinstance(chunk, (tuple, list)) and len(chunk) == 2:
            ids = as_tensor(f"ids of corpus chunk {number}", chunk[1])
            if not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool):
                chunk = (chunk[0], ~ids)
        yield chunk


def search_run(
    queries: Tensor,
    query_ids: Tensor,
    corpus: Union[Tensor, Iterable[Any]],
    corpus_ids: Optional[Tensor],
    opts: DenseOptions,
    descending: bool,
    validate_args: bool,
) -> tuple[Tensor, Tensor, bool]:
    """``(doc_ids, scores, numpy)``: per query (rows in the order of ``queries``) its listed documents,
    nearest first, ties by id in the order asked, ``-1`` / ``-inf`` padding rows of fewer documents (an
    excluded self); ``numpy``: whether the chunks were NumPy arrays. ``corpus_ids`` with a tensor corpus
    (checked by the caller); ``queries`` and ``query_ids`` checked, ids unique."""
    empty = torch.zeros(0, 3, dtype=torch.int64, device=queries.device)
    numpy = False
    qids = ~query_ids if descending else query_ids  # ``exclude_self`` compares them with the documents'
    if isinstance(corpus, Tensor):
        assert corpus_ids is not None
        cids = ~corpus_ids if descending else corpus_ids
        result = dense_values(queries, qids, corpus, cids, empty, opts)
    else:
        chunks = _reversed_ids(corpus) if descending else corpus
        result, numpy = stream_chunks(queries, qids, chunks, empty, opts, validate_args)
    ids, scores = result["run"]
    if descending:
        ids = torch.where(torch.isfinite(scores), ~ids, -1)
    rows = torch.searchsorted(result["query_ids"], qids)  # ascending ids back to the given order
    return ids[rows], scores[rows], numpy
