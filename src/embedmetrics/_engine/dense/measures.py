"""Dense retrieval, part 2: trec_eval's measures on the exact top-``depth`` lists, ties included.

The lists come from ``embedmetrics._engine.dense.scan``. Every measure is a prefix sum of four
per-position terms (expected relevance, expected gain, the AP summand, the probability that the first
relevant document is at the position), read at the cut-off:

==============  =================================================================  ================
key             value                                                              trec_eval
==============  =================================================================  ================
``ndcg@k``      ``Σ_{p<k} gain(p)/log2(p+2)`` over the ideal DCG@k of the qrels     ``ndcg_cut_k``
``recall@k``    relevant in the top ``k`` over ``R``                                ``recall_k``
``precision@k`` relevant in the top ``k`` over ``k``                                ``P_k``
``mrr@k``       ``1/rank`` of the first relevant document within the top ``k``     (``recip_rank``)
``map@k``       ``Σ_{p<k} rel(p)·precision@(p+1)`` over ``R``                       ``map_cut_k``
``hit_rate@k``  a relevant document in the top ``k``                                (``success_k``)
``r_precision`` relevant in the top ``min(R, depth)`` over ``R``                    ``Rprec``
==============  =================================================================  ================

``R`` counts the relevant lines of the qrels (``relevance >= 1``), retrieved or not, in the corpus or
not; the ideal DCG orders every judged document of the query. Under ``ties="average"`` each term is
its expectation over a uniformly random order of tied documents (``tie_stats``),
the tie block at the end of the list counted whole; ``"pessimistic"`` / ``"optimistic"`` order every
tie block by increasing / decreasing gain. Queries without a qrels line are skipped (NaN per query).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
from torch import Tensor

from embedmetrics._engine.core import tie_stats
from embedmetrics._engine.core.checks import (
    Aggregation,
    check_embeddings,
    check_finite,
    check_ids,
    check_same_device,
    check_score_range,
    largest_magnitude,
    normalize_ks,
)
from embedmetrics._engine.core.pair_scores import pair_similarity
from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.dense.exact_lists import scan_corpus
from embedmetrics._engine.dense.options import DENSE_METRICS
from embedmetrics._engine.dense.qrels import Judgements, per_row_sorted
from embedmetrics._engine.dense.repeats import distinct_rows
from embedmetrics._engine.dense.scan import TopLists, by_key_then_id, columns_of, gather_lists
from embedmetrics._engine.ranking.measures import aggregate


@dataclass(frozen=True)
class DenseOptions:
    """Checked options of dense retrieval (see ``check_dense_options``)."""

    ks: tuple[int, ...]
    metrics: tuple[str, ...]
    depth: int
    similarity: str
    exclude_self: bool
    ties: str
    aggregation: Aggregation
    return_run: bool
    block_bytes: Optional[int]

    def result_keys(self) -> list[str]:
        """``f"{metric}@{k}"`` for every metric and cut-off (``r_precision`` alone), in order."""
        keys: list[str] = []
        for m in self.metrics:
            keys += [m] if m == "r_precision" else [f"{m}@{k}" for k in self.ks]
        return keys


def dense_options(values: Mapping[str, Any]) -> DenseOptions:
    """The options from the checked values of dense retrieval's table (``dense.options``); ``depth``
    defaults to the largest ``k`` and must be at least it."""
    ks = tuple(sorted({int(v) for v in normalize_ks("k", values["k"], allow_none=False)[0] if v is not None}))
    metrics = values["metrics"]
    names = DENSE_METRICS if metrics is None else tuple(m for m in DENSE_METRICS if m in metrics)
    depth = values["depth"]
    d = max(ks) if depth is None else depth
    if d < max(ks):
        raise ValueError(f"Argument `depth` must be at least the largest `k` ({max(ks)}), got {depth!r}.")
    return DenseOptions(
        ks, names, d, values["similarity"], values["exclude_self"], values["ties"], values["aggregation"],
        values["return_run"], values["block_bytes"],
    )  # fmt: skip


# --------------------------------------------------------------------------- per-position terms


@dataclass
class Terms:
    """``(Q, depth)`` float64 per-position terms whose prefix sums are the measures: those of every
    ranked list (``tie_stats.ListTerms``) and the gains (for nDCG)."""

    lists: tie_stats.ListTerms
    gain: Tensor


def _runs(keys: Tensor) -> tuple[Tensor, Tensor]:
    """Run (tie block) index of every position and the position where its run starts."""
    new = torch.ones_like(keys, dtype=torch.bool)
    new[:, 1:] = keys[:, 1:] != keys[:, :-1]
    pos = torch.arange(keys.shape[1], device=keys.device)
    return new.cumsum(dim=1) - 1, torch.where(new, pos, 0).cummax(dim=1).values


def _run_sums(values: Tensor, run: Tensor) -> Tensor:
    """Per position, the sum of ``values`` over its run."""
    return torch.zeros_like(values).scatter_add_(1, run, values).gather(1, run)


def _boundary(lists: TopLists, judgements: Judgements) -> tuple[Tensor, Tensor, Tensor]:
    """Per query: is the list full with a finite last key, and the relevant documents and gain sum of
    the whole tie block at that key (from the judged pairs' keys)."""
    last = lists.keys[:, -1]
    full = torch.isfinite(last)
    rows = judgements.entry_row
    in_block = (lists.judged_keys == last[rows]) & full[rows]
    n_q = last.shape[0]
    rel = torch.zeros(n_q, dtype=torch.float64, device=last.device)
    rel.index_add_(0, rows, (in_block & (judgements.entry_rel >= 1)).double())
    gain = torch.zeros_like(rel).index_add_(0, rows, judgements.gains() * in_block)
    return full, rel, gain


def average_terms(lists: TopLists, grades: Tensor, judgements: Judgements) -> Terms:
    """Expected terms under a random order of tied documents (``ties="average"``)."""
    rel = (grades >= 1).double()
    gain = grades.clamp_min(0).double()
    run, start = _runs(lists.keys)
    t = _run_sums(torch.ones_like(rel), run)
    r, g = _run_sums(rel, run), _run_sums(gain, run)
    full, r_b, g_b = _boundary(lists, judgements)
    last = (run == run[:, -1:]) & full[:, None]
    t = torch.where(last, lists.tail.double()[:, None], t)
    r = torch.where(last, r_b[:, None], r)
    g = torch.where(last, g_b[:, None], g)
    c = (rel.cumsum(dim=1) - rel).gather(1, start)
    x = (torch.arange(rel.shape[1], device=rel.device) - start).double()
    return _terms(tie_stats.PositionStats(t, r, c, x), g / t)


def ordered_terms(lists: TopLists, grades: Tensor, judgements: Judgements, optimistic: bool) -> Terms:
    """Terms when every tie block is ordered by gain: decreasing (optimistic) or increasing."""
    gain = grades.clamp_min(0).double()
    keys = lists.keys
    order = torch.argsort(gain, dim=1, descending=optimistic, stable=True)
    order = order.gather(1, torch.argsort(keys.gather(1, order), dim=1, stable=True))
    gain = gain.gather(1, order)
    run, start = _runs(keys)
    full, _, _ = _boundary(lists, judgements)
    last = (run == run[:, -1:]) & full[:, None]
    if bool(full.any()):
        gain = torch.where(last, _boundary_gains(lists, judgements, start, optimistic), gain)
    rel = (gain > 0).double()
    ones = torch.ones_like(rel)
    return _terms(tie_stats.PositionStats(ones, rel, rel.cumsum(dim=1) - rel, torch.zeros_like(rel)), gain)


def _boundary_gains(lists: TopLists, judgements: Judgements, start: Tensor, optimistic: bool) -> Tensor:
    """``(Q, depth)`` gain at each position of the boundary block when the whole block is ordered by
    gain: its relevant members' gains (decreasing), or its zero-gain members then the gains (increasing)."""
    last = lists.keys[:, -1]
    rows, gains = judgements.entry_row, judgements.gains()
    member = (lists.judged_keys == last[rows]) & (gains > 0)
    n_q, depth = lists.keys.shape
    block = per_row_sorted(rows[member], gains[member], n_q, depth, descending=optimistic)
    n_pos = torch.bincount(rows[member], minlength=n_q)
    x = torch.arange(depth, device=last.device) - start[:, -1:]
    if not optimistic:
        x = x - (lists.tail - n_pos)[:, None]
    ok = (x >= 0) & (x < n_pos[:, None])
    if block.shape[1] == 0:
        return torch.zeros_like(lists.keys)
    return torch.where(ok, block.gather(1, x.clamp(0, block.shape[1] - 1)), 0.0)


def _terms(ps: tie_stats.PositionStats, gain: Tensor) -> Terms:
    return Terms(tie_stats.ListTerms.of(ps), gain)


# --------------------------------------------------------------------------- measures


def measure_values(terms: Terms, judgements: Judgements, opts: DenseOptions) -> dict[str, Tensor]:
    """``{key: (Q,) float64}`` per-query values (NaN for queries without judgements), read off the
    terms by the list measures of ``tie_stats`` (shared with the kNN metrics)."""
    lists = terms.lists
    depth = lists.relevance.shape[1]
    dev = lists.relevance.device
    p = torch.arange(depth, device=dev, dtype=torch.float64)
    disc = 1.0 / torch.log2(p + 2.0)
    ks = torch.tensor(opts.ks, device=dev)
    last = ks - 1
    R = judgements.num_relevant.double()[:, None]
    found = tie_stats.at(lists.relevance, last)
    table: dict[str, Any] = {
        "ndcg": lambda: tie_stats.ratio(
            tie_stats.at(terms.gain * disc, last), judgements.ideal_dcg(opts.ks, disc)
        ),
        "recall": lambda: tie_stats.ratio(found, R),
        "precision": lambda: found / ks.double()[None],
        "mrr": lambda: tie_stats.at(tie_stats.reciprocal_ranks(lists.first), last),
        "map": lambda: tie_stats.ratio(tie_stats.at(lists.precision, last), R),
        "hit_rate": lambda: tie_stats.at(lists.first, last),
    }
    skip = ~judgements.judged
    out: dict[str, Tensor] = {}
    for name in opts.metrics:
        if name == "r_precision":  # trec_eval's: the relevant among the first R, over R
            upto = tie_stats.upto(lists.relevance, judgements.num_relevant.clamp(max=depth))
            out[name] = tie_stats.ratio(upto, R[:, 0]).masked_fill(skip, math.nan)
            continue
        values = table[name]()
        for j, k in enumerate(opts.ks):
            out[f"{name}@{k}"] = values[:, j].masked_fill(skip, math.nan)
    return out


# --------------------------------------------------------------------------- the whole evaluation


def dense_values(
    queries: Tensor,
    query_ids: Tensor,
    corpus: Tensor,
    corpus_ids: Tensor,
    qrels: Tensor,
    opts: DenseOptions,
    *,
    distributed: bool = False,
    value_dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """The result dict of [`dense_retrieval`][embedmetrics.functional.dense_retrieval].

    ``distributed``: the queries are the same on every process and each holds its own corpus part;
    the lists are merged across processes (a collective) and every process returns the same result.
    ``value_dtype``: the dtype of the values (default: that of the embeddings' scan, as the faces return).
    """
    queries, corpus = queries.detach(), corpus.detach()  # values and the run never keep a graph
    if queries.shape[0] == 0:  # the same on every process (the queries are gathered)
        return _no_queries(queries, corpus, opts)
    # a row given twice (same id, same values: a sampler's padding) counts once; the same id with other
    # rows raises. The queries are the same on every process; the corpus ids of every process are
    # checked by every process (the same error everywhere, never a mixed result)
    queries, query_ids = distinct_rows("Argument `query_ids`", queries, query_ids)
    corpus, corpus_ids = distinct_rows("Argument `corpus_ids`", corpus, corpus_ids, distributed=distributed)
    order = torch.argsort(query_ids)
    query_ids = query_ids[order]
    queries = queries[order]
    judgements = Judgements.build(qrels, query_ids)
    # no list is longer than the corpus: a huge ``depth`` costs nothing (the cut-offs stay addressable)
    n_corpus = corpus_size(corpus, distributed)
    opts = replace(opts, depth=max(max(opts.ks), min(opts.depth, n_corpus)))
    check_dense_score_range(queries, corpus, opts.similarity, distributed)
    # identical rows on several processes get the same canonical keys: no routing needed
    lists = scan_corpus(
        queries, query_ids, corpus, corpus_ids, judgements, depth=opts.depth,
        similarity=opts.similarity, exclude_self=opts.exclude_self, block_bytes=opts.block_bytes,
        distributed=distributed, order_all=opts.return_run,
    )  # fmt: skip
    lists = (gather_lists(lists) if distributed else lists).canonical()
    run = None
    if opts.return_run:
        width = min(lists.keys.shape[1], n_corpus)
        scores = _run_scores(lists, queries, corpus, corpus_ids, width, opts.similarity, distributed)
        run = ordered_run(lists.ids[:, :width], scores, queries.dtype)
    dtype = value_dtype or compute_dtype(queries, corpus)
    return values_of_lists(lists, judgements, query_ids, opts, dtype, run)


def values_of_lists(
    lists: TopLists,
    judgements: Judgements,
    query_ids: Tensor,
    opts: DenseOptions,
    dtype: torch.dtype,
    run: Optional[tuple[Tensor, Tensor]] = None,
) -> dict[str, Any]:
    """The result dict from the merged canonical lists of every query (ascending ``query_ids``): the
    measures under ``opts.ties``, aggregated, in ``dtype``; ``run`` added as ``"run"`` when given."""
    valid = torch.isfinite(lists.keys)
    rows = torch.arange(lists.keys.shape[0], device=lists.keys.device)[:, None]
    grades = torch.where(valid, judgements.relevance(rows, lists.ids), 0)
    if opts.ties == "average":
        terms = average_terms(lists, grades, judgements)
    else:
        terms = ordered_terms(lists, grades, judgements, opts.ties == "optimistic")
    per_query = measure_values(terms, judgements, opts)
    result: dict[str, Any] = {}
    judged = judgements.judged
    any_judged = bool(judged.any())
    for key, values in per_query.items():
        values = values.to(dtype)
        if isinstance(opts.aggregation, str) and opts.aggregation == "none":
            result[key] = values
        elif not any_judged:
            result[key] = values.new_full((), math.nan)
        else:
            result[key] = aggregate(values[judged][:, None], opts.aggregation).reshape(())
    if opts.return_run or (isinstance(opts.aggregation, str) and opts.aggregation == "none"):
        result["query_ids"] = query_ids
    if run is not None:
        result["run"] = run
    return result


def _no_queries(queries: Tensor, corpus: Tensor, opts: DenseOptions) -> dict[str, Any]:
    """The result without any query: NaN (an empty tensor per query with ``aggregation="none"``)."""
    per_query = isinstance(opts.aggregation, str) and opts.aggregation == "none"
    dtype, dev = compute_dtype(queries, corpus), queries.device
    empty = torch.zeros(0, dtype=torch.int64, device=dev)
    result: dict[str, Any] = {
        key: torch.zeros(0, dtype=dtype, device=dev)
        if per_query
        else torch.full((), math.nan, dtype=dtype, device=dev)
        for key in opts.result_keys()
    }
    if opts.return_run or per_query:
        result["query_ids"] = empty
    if opts.return_run:
        result["run"] = (empty.view(0, 0), torch.zeros(0, 0, dtype=dtype, device=dev))
    return result


def check_dense_score_range(queries: Tensor, corpus: Tensor, similarity: str, distributed: bool) -> None:
    """Refuse embeddings whose scores would overflow (every process the same error: the corpus' largest
    magnitude is the largest of every process's part)."""
    if similarity == "cosine":
        return
    largest = torch.stack([largest_magnitude(queries).double(), largest_magnitude(corpus).double()])
    if distributed:
        torch.distributed.all_reduce(largest, op=torch.distributed.ReduceOp.MAX)
    magnitudes = (float(largest[0]), float(largest[1]))
    check_score_range(
        ("queries", "corpus"), magnitudes, queries.shape[1], similarity, compute_dtype(queries, corpus)
    )


def corpus_size(corpus: Tensor, distributed: bool) -> int:
    n = torch.tensor([corpus.shape[0]], dtype=torch.int64, device=corpus.device)
    if distributed:
        torch.distributed.all_reduce(n)
    return int(n)


def _run_scores(
    lists: TopLists,
    queries: Tensor,
    corpus: Tensor,
    corpus_ids: Tensor,
    width: int,
    similarity: str,
    distributed: bool,
) -> Tensor:
    """``(Q, width)`` float64 similarity (``-distance`` for euclidean) of the first ``width`` listed
    documents of every query, recomputed pair by pair (``pair_scores``: the same bits whatever the block
    size, corpus order, world size or kernel); ``-inf`` where nothing is listed."""
    keys, ids = lists.keys[:, :width], lists.ids[:, :width]
    listed = torch.isfinite(keys)
    cols = columns_of(ids.reshape(-1), corpus_ids).view_as(ids)
    here = (listed & (cols >= 0)).nonzero()  # the pairs whose document this process holds
    scores = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)
    scores[here[:, 0], here[:, 1]] = pair_similarity(
        queries, corpus, here[:, 0], cols[here[:, 0], here[:, 1]], similarity
    )
    if distributed:  # every listed document is held by exactly one process
        torch.distributed.all_reduce(scores)
    return torch.where(listed, scores, -math.inf)


def ordered_run(ids: Tensor, scores: Tensor, query_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``(doc_ids, scores)``: the listed documents ordered by score, then document id (``-1`` /
    ``-inf`` pad), the scores in float64 for float64 queries, else float32."""
    order = by_key_then_id(-scores, ids)
    out_dtype = query_dtype if query_dtype == torch.float64 else torch.float32
    return ids.gather(1, order), scores.gather(1, order).to(out_dtype)


def check_dense_rows(
    queries: Tensor, corpus: Tensor, query_ids: Tensor, corpus_ids: Tensor, validate_args: bool
) -> tuple[Tensor, Tensor]:
    """Check the embeddings and their ids (``(n,)`` integers, one per row); return the ids as int64."""
    check_embeddings("queries", queries)
    check_embeddings("corpus", corpus)
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"Arguments `queries` and `corpus` must have the same number of features, got "
            f"{queries.shape[1]} and {corpus.shape[1]}."
        )
    check_same_device(("queries", "corpus"), queries, corpus)
    if validate_args:
        check_finite("queries", queries)
        check_finite("corpus", corpus)
    return check_ids("query_ids", query_ids, queries.shape[0]), check_ids(
        "corpus_ids", corpus_ids, corpus.shape[0]
    )
