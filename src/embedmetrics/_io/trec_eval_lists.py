"""A run and its qrels as trec_eval ranks them (``form_res_rels.c``): one list of grades per evaluated
query, in trec_eval's order, with the counts of judged documents per grade. No torch.

Each ranked document carries its grade when the qrels judge it for that query (``>= 0``), ``-1`` when the
qrels do not list it (trec_eval's ``RELVALUE_NONPOOL``) and ``-2`` when they list it with a negative
grade (``RELVALUE_UNJUDGED``: in the pool, not judged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import Qrels, Run, _joint_codes, _trec_eval_order, _vocabulary_names

NOT_IN_QRELS, NEGATIVE_GRADE = -1, -2


@dataclass
class GradedLists:
    """The evaluated queries (sorted by name, as trec_eval reads its qrels), the rows of their rankings
    (``starts[q]:starts[q + 1]`` is query ``q``'s list, best first, cut at ``-M``), each row's grade, and
    per query the number of judged documents (grade ``>= 0``) at each grade: ``level_query`` (ascending),
    ``level_grade`` (ascending within a query), ``level_count``."""

    query_ids: list[str]
    starts: np.ndarray
    grade: np.ndarray
    level_query: np.ndarray
    level_grade: np.ndarray
    level_count: np.ndarray
    n_run_queries: int
    n_qrels_queries: int
    positive_judged: int  # qrels lines with a grade > 0, over every judged query (``num_rel`` with ``-c``)


def _lookup(run_q: np.ndarray, run_d: np.ndarray, qr_q: np.ndarray, qr_d: np.ndarray, qr_rel: np.ndarray,
            n_docs: int) -> np.ndarray:  # fmt: skip
    """Each run row's grade in the qrels of its query, ``NOT_IN_QRELS`` where they do not list it,
    ``NEGATIVE_GRADE`` for a negative grade."""
    run_key, qr_key = run_q * n_docs + run_d, qr_q * n_docs + qr_d
    order = np.argsort(qr_key, kind="stable")
    at = np.minimum(np.searchsorted(qr_key[order], run_key), max(qr_key.size - 1, 0))
    found = qr_key[order[at]] == run_key if qr_key.size else np.zeros(run_key.size, dtype=bool)
    grade = np.full(run_key.size, NOT_IN_QRELS, dtype=np.int64)
    grade[found] = np.where(qr_rel[order[at[found]]] < 0, NEGATIVE_GRADE, qr_rel[order[at[found]]])
    return grade


def _levels(qr_q: np.ndarray, qr_rel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query, grade, count) of the judged documents (grade ``>= 0``), by query then grade."""
    judged = qr_rel >= 0
    query, grade = qr_q[judged], qr_rel[judged]
    order = np.lexsort((grade, query))
    query, grade = query[order], grade[order]
    first = np.ones(query.size, dtype=bool)
    first[1:] = (query[1:] != query[:-1]) | (grade[1:] != grade[:-1])
    at = np.flatnonzero(first)
    return query[at], grade[at], np.diff(np.append(at, query.size)).astype(np.int64)


def graded_lists(run: Run, qrels: Qrels, *, max_docs: int | None = None) -> GradedLists:
    """The lists trec_eval evaluates: queries of the run that the qrels judge, each ranked by score
    descending then docno descending, cut at ``max_docs`` (``-M``). (trec_eval 9's ``-c`` changes only
    the summary: ``trec_eval.summarize``.)"""
    queries, run_q, qr_q = _joint_codes(run.queries, run.qid, qrels.queries, qrels.qid)
    docs, run_d, qr_d = _joint_codes(run.docs, run.docno, qrels.docs, qrels.docno)
    in_run, judged = np.zeros(queries.size, dtype=bool), np.zeros(queries.size, dtype=bool)
    in_run[run_q], judged[qr_q] = True, True
    evaluated = in_run & judged
    if not evaluated.any():
        raise ReportInputError(
            "no query of the run has relevance judgements in the qrels (the query ids do not match)."
        )
    names = np.array(_vocabulary_names(queries), dtype=object)
    codes = np.flatnonzero(evaluated)
    codes = codes[np.argsort(names[codes].astype(str), kind="stable")]  # trec_eval: qrels sorted by qid
    position = np.full(queries.size, -1, dtype=np.int64)
    position[codes] = np.arange(codes.size)
    keep = evaluated[run_q]
    rq, rd, rs = run_q[keep], run_d[keep], run.score[keep]
    order = _trec_eval_order(rs, rd, max(docs.size, 1), rq) if rs.size else np.zeros(0, dtype=np.int64)
    order = order[np.argsort(position[rq[order]], kind="stable")]
    rq, rd = position[rq[order]], rd[order]
    counts = np.bincount(rq, minlength=codes.size)
    starts = np.concatenate([[0], np.cumsum(counts)])
    if max_docs is not None and counts.size and int(counts.max()) > max_docs:
        rank = np.arange(rq.size) - starts[rq]
        cut = rank < max_docs
        rq, rd = rq[cut], rd[cut]
        starts = np.concatenate([[0], np.cumsum(np.minimum(counts, max_docs))])
    keep_qr = evaluated[qr_q]
    qq, qd, qrel = position[qr_q[keep_qr]], qr_d[keep_qr], qrels.rel[keep_qr]
    grade = _lookup(rq, rd, qq, qd, qrel, max(docs.size, 1))
    level_query, level_grade, level_count = _levels(qq, qrel)
    return GradedLists(
        query_ids=[str(n) for n in names[codes]], starts=starts, grade=grade, level_query=level_query,
        level_grade=level_grade, level_count=level_count, n_run_queries=int(in_run.sum()),
        n_qrels_queries=int(judged.sum()), positive_judged=int((qrels.rel > 0).sum()),
    )  # fmt: skip
