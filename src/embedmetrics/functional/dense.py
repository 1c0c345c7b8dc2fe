"""Functional dense retrieval: query embeddings against a corpus, scored against qrels as trec_eval does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import as_tensor, check_ids, to_tensors
from embedmetrics._engine.dense.measures import DenseOptions, check_dense_rows, dense_options, dense_values
from embedmetrics._engine.dense.options import OPTIONS
from embedmetrics._engine.dense.search import search_run
from embedmetrics._engine.dense.stream import check_corpus_part, check_query_set, stream_chunks
from embedmetrics._engine.settings.options import options_in, read_options

__all__ = ["dense_retrieval", "dense_search"]

#: The arguments named in the errors of the queries' checks.
QUERY_NAMES = ("queries", "query_ids")


def _ids(name: str, ids: Any, like: Tensor) -> Tensor:
    if ids is None:
        return torch.arange(like.shape[0], device=like.device)
    return as_tensor(name, ids).to(like.device)


def _output(result: dict[str, Any], numpy: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key == "run":
            ids, scores = value
            out[key] = (ids.cpu().numpy(), scores.cpu().numpy()) if numpy else (ids, scores)
        elif key == "query_ids":
            out[key] = value.cpu().numpy() if numpy else value
        else:
            out[key] = (
                (np.float64(value) if value.ndim == 0 else value.cpu().double().numpy()) if numpy else value
            )
    return out


def _no_chunk_ids(corpus_ids: Any) -> None:
    if corpus_ids is not None:
        raise ValueError(
            "Argument `corpus_ids` must be None where `corpus` is an iterable of (embeddings, ids) chunks, "
            f"got {type(corpus_ids).__name__}."
        )


def _streamed(
    queries: Any,
    query_ids: Any,
    chunks: Any,
    corpus_ids: Any,
    qrels: Tensor,
    opts: DenseOptions,
    validate: bool,
) -> dict[str, Any]:
    """``dense_retrieval`` of a corpus given as an iterable of ``(embeddings, ids)`` chunks."""
    _no_chunk_ids(corpus_ids)
    given = as_tensor("queries", queries)
    q, qids = check_query_set(given, _ids("query_ids", query_ids, given), validate, given.device, QUERY_NAMES)
    result, numpy = stream_chunks(q, qids, chunks, qrels.to(q.device), opts, validate)
    return _output(result, numpy or isinstance(queries, np.ndarray))


def dense_retrieval(
    queries: Any,
    corpus: Any,
    qrels: Any,
    *,
    query_ids: Any = None,
    corpus_ids: Any = None,
    k: int | Sequence[int] = 10,
    metrics: Sequence[str] | None = None,
    depth: int | None = None,
    similarity: str = "cosine",
    exclude_self: bool = False,
    ties: str = "average",
    aggregation: str | Callable[..., Tensor] = "mean",
    return_run: bool = False,
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> dict[str, Any]:
    r"""Dense retrieval: every query against the whole corpus, scored on the qrels as trec_eval does.

    The exact ``depth`` nearest documents of every query are found by a blocked scan (one matrix
    product per block of queries, never a ``queries × corpus`` matrix), then nDCG, recall, precision,
    MRR, MAP, hit rate and R-precision are computed at every cut-off of ``k`` at once, with trec_eval's
    semantics: relevant documents that were not retrieved (or are not in the corpus) still count in
    ``R`` and in the ideal DCG, a judged query without a relevant document scores 0, and queries
    without any qrels line are skipped (the keys' trec_eval names: the Dense retrieval guide). Tied
    similarities are decided by ``ties``, never by the kernel, the block size or the corpus order:
    ``"average"`` gives the exact expected value under a random order of tied documents (also for a tie
    block across a cut-off or ``depth``), ``"pessimistic"`` / ``"optimistic"`` rank them by increasing /
    decreasing relevance.

    Args:
        queries: ``(Q, d)`` query embeddings (tensor or NumPy array; all inputs of one kind).
        corpus: ``(N, d)`` document embeddings, or an iterable of ``(embeddings, ids)`` chunks (streamed).
        qrels: ``(n, 3)`` integer ``(query_id, doc_id, relevance)`` rows (relevant: ``>= 1``; graded).
        query_ids: ``(Q,)`` unique integer ids of the queries; default: row numbers.
        corpus_ids: ``(N,)`` unique integer ids of the documents; default: row numbers.
        k: a cut-off or a sequence of them.
        metrics: a subset of ``("ndcg", "recall", "precision", "mrr", "map", "hit_rate", "r_precision")``.
        depth: the list's length (BEIR: 1000), default ``max(k)``, clipped to the corpus size (free where it
            is whole; streamed chunks hold ``queries × depth`` entries from the start).
        similarity: ``"cosine"``, ``"dot"`` or ``"euclidean"`` (nearer is better).
        exclude_self: drop the document whose id equals the query's id from its ranking (BEIR's
            ``ignore_identical_ids``, for sets whose queries are also in the corpus).
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        aggregation: ``"mean"``, ``"median"``, ``"min"``, ``"max"``, a callable ``f(values, dim=0)``, or
            ``"none"`` for per-query values (ascending query id, NaN where a query has no judgement).
        return_run: also return ``"run"``: ``(doc_ids, scores)``, ``(Q, min(depth, N))``, nearest first,
            ties by ascending document id; scores are the similarity (minus the distance for
            ``"euclidean"``), recomputed per pair in float64; ``-1`` / ``-inf`` pad shorter rows.
        block_bytes: memory budget of one similarity block, in bytes (``None``: chosen per device).
        validate_args: reject NaN and infinite embeddings (reads the data).

    Returns:
        A dict with a key ``f"{metric}@{k}"`` for every metric and cut-off (``"r_precision"`` without
        one), each a 0-dim tensor in the embeddings' dtype (per-query tensors with
        ``aggregation="none"``; NaN when no query is judged, e.g. no query id is in the qrels); never
        attached to the autograd graph; ``"query_ids"`` (ascending) with ``aggregation="none"`` or
        ``return_run``; ``"run"`` when asked. NumPy inputs give NumPy outputs.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import dense_retrieval
        >>> queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> corpus = torch.tensor([[0.9, 0.1], [0.1, 0.9], [0.7, 0.7]])
        >>> qrels = torch.tensor([[0, 0, 1], [1, 2, 1]])  # (query_id, doc_id, relevance)
        >>> result = dense_retrieval(queries, corpus, qrels, k=(1, 2), metrics=["recall", "mrr"])
        >>> {key: round(float(v), 4) for key, v in result.items()}
        {'recall@1': 0.5, 'recall@2': 1.0, 'mrr@1': 0.5, 'mrr@2': 0.75}
    """
    table = OPTIONS["DenseRetrieval"]
    values = read_options("dense_retrieval", table, options_in(table, locals()))
    opts = dense_options(values)
    qrels, validate = values["qrels"], values["validate_args"]
    if not isinstance(corpus, (Tensor, np.ndarray)):  # an iterable of (embeddings, ids) chunks
        return _streamed(queries, query_ids, corpus, corpus_ids, qrels, opts, validate)
    (q, c), numpy = to_tensors(("queries", "corpus"), queries, corpus)
    ids = (_ids("query_ids", query_ids, q), _ids("corpus_ids", corpus_ids, c))
    qids, cids = check_dense_rows(q, c, *ids, validate)
    return _output(dense_values(q, qids, c, cids, qrels.to(q.device), opts), numpy)


def dense_search(
    queries: Any,
    corpus: Any,
    *,
    corpus_ids: Any = None,
    query_ids: Any = None,
    depth: int = 10,
    similarity: str = "cosine",
    exclude_self: bool = False,
    tie_order: str = "ascending",
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> tuple[Any, Any]:
    r"""Exact search without judgements: each query's top-``depth`` documents and their scores.

    The lists of [`dense_retrieval`][embedmetrics.functional.dense_retrieval]'s run, for callers that have
    no qrels (an MTEB search model, a re-ranker's first stage): every query against the whole corpus,
    given as a tensor or streamed as an iterable of ``(embeddings, ids)`` chunks (read once; no corpus row
    kept), the same lists either way, whatever the chunk sizes, their order, the block size or the CPU.
    Documents of equal key (the similarity in the embeddings' dtype, computed pair by pair: identical rows
    always tie) are ordered by id: ``tie_order="ascending"`` keeps the lowest ids at the cut and lists them
    first; ``"descending"`` keeps the highest and lists them first, as trec_eval and pytrec_eval order tied
    scores (to order ties by another key, e.g. string ids, pass each document's rank in that order). The run
    is ordered by the float64 scores: pytrec_eval, which reads scores as C ``float``, also ties scores that
    differ below float32's precision, and may order those otherwise.

    Args:
        queries: ``(Q, d)`` query embeddings (tensor or NumPy array).
        corpus: ``(N, d)`` document embeddings of the queries' dtype (``N`` may be 0), or an iterable of
            ``(embeddings, ids)`` chunks.
        corpus_ids: ``(N,)`` unique integer ids of a tensor corpus; default: row numbers (``None``
            with chunks). Ids are unique across chunks too.
        query_ids: ``(Q,)`` unique integer ids of the queries (read by ``exclude_self``); default: row
            numbers.
        depth: documents listed per query (clipped to the corpus size; streamed chunks hold
            ``queries × depth`` list entries from the start).
        similarity: ``"cosine"``, ``"dot"`` or ``"euclidean"`` (nearer is better).
        exclude_self: drop the document whose id equals the query's id (``-1`` / ``-inf`` pad the row).
        tie_order: ``"ascending"`` or ``"descending"`` ids among documents of equal key.
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
        validate_args: reject NaN and infinite embeddings (reads the data).

    Returns:
        ``(doc_ids, scores)``, each ``(Q, min(depth, N))``, rows in the order of ``queries``, nearest first:
        int64 ids and the similarity (minus the distance for ``"euclidean"``) recomputed per pair in float64,
        returned as float64 for float64 queries, else float32. NumPy queries give NumPy outputs; a tensor
        corpus is of the queries' kind.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import dense_search
        >>> queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> corpus = torch.tensor([[0.9, 0.1], [0.1, 0.9], [0.7, 0.7], [0.7, 0.7]])
        >>> ids, scores = dense_search(queries, corpus, depth=2)
        >>> ids
        tensor([[0, 2],
                [1, 2]])
        >>> dense_search(queries, corpus, depth=2, tie_order="descending")[0]  # documents 2 and 3 tie
        tensor([[0, 3],
                [1, 3]])
        >>> chunks = [(corpus[:2], torch.tensor([0, 1])), (corpus[2:], torch.tensor([2, 3]))]
        >>> torch.equal(dense_search(queries, chunks, depth=2)[0], ids)
        True
    """
    values = read_options(
        "dense_search", OPTIONS["DenseSearch"], options_in(OPTIONS["DenseSearch"], locals())
    )
    ids, scores = _search(queries, corpus, corpus_ids, query_ids, values)
    return (ids.cpu().numpy(), scores.cpu().numpy()) if isinstance(queries, np.ndarray) else (ids, scores)


def _search(
    queries: Any, corpus: Any, corpus_ids: Any, query_ids: Any, values: dict[str, Any]
) -> tuple[Tensor, Tensor]:
    """``dense_search`` of checked settings ``values``: the inputs checked, then the engine's search."""
    opts = dense_options(
        {
            **values,
            "k": 1,
            "metrics": ["hit_rate"],
            "ties": "average",
            "aggregation": "none",
            "return_run": True,
        }
    )
    descending, validate = values["tie_order"] == "descending", values["validate_args"]
    cids = None
    if isinstance(corpus, (Tensor, np.ndarray)):
        (given, c), _ = to_tensors(("queries", "corpus"), queries, corpus)
    else:
        _no_chunk_ids(corpus_ids)
        given = as_tensor("queries", queries)
    q, qids = check_query_set(given, _ids("query_ids", query_ids, given), validate, given.device, QUERY_NAMES)
    if isinstance(corpus, (Tensor, np.ndarray)):
        corpus = check_corpus_part("corpus", c, q, validate)
        cids = check_ids("corpus_ids", _ids("corpus_ids", corpus_ids, corpus), corpus.shape[0])
    return search_run(q, qids, corpus, cids, opts, descending, validate)
