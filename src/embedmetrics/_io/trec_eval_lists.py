"""A run and its qrels as trec_eval ranks them (``form_res_rels.c``): one list of grades per evaluated
query, in trec_eval's order, with the counts of judged documents per grade. No torch.

Each ranked document carries its grade when the qrels judge it for that query (``>= 0``), ``-1`` when the
qrels do not list it (trec_eval's ``RELVALUE_NONPOOL``) and ``-2`` when they list it with a negative
grade (``RELVALUE_UNJUDGED``: in the pool, not judged).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import Qrels, Run, _joint_codes, _trec_eval_order, _vocabulary_names

NOT_IN_QRELS, NEGATIVE_GRADE = -1, -2


class NoCommonQueries(ReportInputError):
    """No query of the run is judged: ``embedmetrics trec_eval`` exits with trec_eval's status, 7."""

    status = 7


class AbsentQuery(ReportInputError):
    """A judged query the run lacks, which trec_eval 10.0 refuses without ``-c`` (exit status 4)."""

    status = 4
    partial = ""
    """What trec_eval 10.0 prints before it stops (``trec_eval_mode.run_lines`` sets it)."""

    def __init__(self, message: str, query: str) -> None:
        super().__init__(message)
        self.query = query
        """The first judged query (in trec_eval's order) that the run lacks: trec_eval 10.0 evaluates (and
        with ``-q`` prints) the queries before it, then stops."""


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
    #: Per listed query: whether the run lacks it (``complete``: trec_eval 10's ``-c`` ranks for it one
    #: document that no qrels list, its ``bogus_ranking``).
    absent: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


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


def graded_lists(run: Run, qrels: Qrels, *, max_docs: int | None = None, judged_only: bool = False,
                 version: int = 10, complete: bool = False, refuse_absent: bool = False
                 ) -> GradedLists:  # fmt: skip
    """The lists trec_eval evaluates: queries of the run that the qrels judge, each ranked by score
    descending then docno descending (scores compared in single precision under ``version`` 9, as doubles
    under 10), cut at ``max_docs`` (``-M``); with ``judged_only`` (``-J``), the documents the qrels judge
    (grade ``>= 0``) alone, in that order (``form_res_rels.c``). With ``complete`` (trec_eval 10's ``-c``),
    every judged query the run lacks too, ranking one document that no qrels list (``absent``; trec_eval
    9's ``-c`` changes only the summary: ``trec_eval.summarize``). ``refuse_absent``: a judged query the
    run lacks raises ``AbsentQuery`` (trec_eval 10.0 without ``-c``: "result qid not found", exit 4)."""
    queries, run_q, qr_q = _joint_codes(run.queries, run.qid, qrels.queries, qrels.qid)
    docs, run_d, qr_d = _joint_codes(run.docs, run.docno, qrels.docs, qrels.docno)
    in_run, judged = np.zeros(queries.size, dtype=bool), np.zeros(queries.size, dtype=bool)
    in_run[run_q], judged[qr_q] = True, True
    evaluated = in_run & judged
    listed = judged if complete else evaluated
    names = np.array(_vocabulary_names(queries), dtype=object)
    if refuse_absent and not complete and (judged & ~in_run).any():
        first = min(str(n) for n in names[judged & ~in_run])
        raise AbsentQuery(
            f"query {first!r} of the qrels is not in the run: trec_eval 10.0 stops there without -c "
            "(exit 4, 'result qid not found in qrels'); -c evaluates it as retrieving nothing, "
            "--trec-eval 9 skips it.",
            first,
        )
    if not evaluated.any() and not complete:  # trec_eval 10's -c evaluates every judged query regardless
        raise NoCommonQueries(
            "no query of the run has relevance judgements in the qrels (the query ids do not match)."
        )
    codes = np.flatnonzero(listed)
    codes = codes[np.argsort(names[codes].astype(str), kind="stable")]  # trec_eval: qrels sorted by qid
    position = np.full(queries.size, -1, dtype=np.int64)
    position[codes] = np.arange(codes.size)
    keep = evaluated[run_q]
    rq, rd, rs = run_q[keep], run_d[keep], run.score[keep]
    single = version == 9
    order = (
        _trec_eval_order(rs, rd, max(docs.size, 1), rq, single) if rs.size else np.zeros(0, dtype=np.int64)
    )
    by_query = position[rq[order]]
    if bool((by_query[1:] < by_query[:-1]).any()):  # (a run written query by query, in name order: not)
        order = order[np.argsort(by_query, kind="stable")]
    rq, rd = position[rq[order]], rd[order]
    keep_qr = listed[qr_q]
    qq, qd, qrel = position[qr_q[keep_qr]], qr_d[keep_qr], qrels.rel[keep_qr]
    grade = _lookup(rq, rd, qq, qd, qrel, max(docs.size, 1))
    rq, grade = _cut(rq, grade, codes.size, max_docs, judged_only, ~in_run[codes])
    level_query, level_grade, level_count = _levels(qq, qrel)
    return GradedLists(
        query_ids=[str(n) for n in names[codes]], starts=_starts(rq, codes.size), grade=grade,
        level_query=level_query, level_grade=level_grade, level_count=level_count,
        n_run_queries=int(in_run.sum()), n_qrels_queries=int(judged.sum()),
        positive_judged=int((qrels.rel > 0).sum()), absent=~in_run[codes],
    )  # fmt: skip


def _starts(query: np.ndarray, n_queries: int) -> np.ndarray:
    """Row offsets of the lists of ``query`` (sorted positions ``0..n_queries - 1``)."""
    return np.concatenate([[0], np.cumsum(np.bincount(query, minlength=n_queries))]).astype(np.int64)


def _cut(query: np.ndarray, grade: np.ndarray, n_queries: int, max_docs: int | None, judged_only: bool,
         absent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The rows trec_eval evaluates, ranked: the first ``max_docs`` of each list, then (``judged_only``) the
    judged ones among them; an ``absent`` query gets its one document that no qrels list (trec_eval 10's
    bogus ranking, ``-M`` and ``-J`` applying to it as to any)."""
    if absent.any():
        extra = np.flatnonzero(absent)
        query = np.concatenate([query, extra])
        grade = np.concatenate([grade, np.full(extra.size, NOT_IN_QRELS, dtype=grade.dtype)])
        order = np.argsort(query, kind="stable")
        query, grade = query[order], grade[order]
    if max_docs is not None and query.size:
        rank = np.arange(query.size) - _starts(query, n_queries)[query]
        cut = rank < max_docs
        query, grade = query[cut], grade[cut]
    if judged_only:
        judged = grade >= 0
        query, grade = query[judged], grade[judged]
    return query, grade
