"""TREC run and qrels files, and the flat tensors the retrieval functionals take.

Run lines: ``qid Q0 docno rank score tag`` (six whitespace-separated fields; ``Q0``, ``rank`` and
``tag`` are ignored, as trec_eval ignores them: the order comes from ``score``).
Qrels lines: ``qid iter docno rel`` (four fields, ``rel`` an integer; ``iter`` is ignored).
Blank lines and lines starting with ``#`` are skipped.

What is evaluated follows trec_eval 9 with its default options:

- queries of the run without any qrels line are skipped, and so are queries of the qrels that the run
  does not contain (trec_eval without ``-c``);
- a query with qrels lines but no relevant document scores 0 on every measure and is averaged in;
- a document is relevant when ``rel >= 1`` (trec_eval's default ``-l 1``); nDCG uses ``rel`` itself as
  the gain (negative values count as 0);
- relevant documents that the run did not retrieve still count in R (recall, MAP, R-precision) and in
  the ideal DCG: they enter the flat tensors with ``retrieved=False``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from embedmetrics._report.errors import ReportInputError
from embedmetrics._report.progress import progress_bar

RUN_FORMAT = "qid Q0 docno rank score tag"
QRELS_FORMAT = "qid iter docno rel"


@dataclass
class Run:
    """A parsed run: one entry per retrieved document (``line`` is the 1-based line number)."""

    qid: np.ndarray
    docno: np.ndarray
    score: np.ndarray
    line: np.ndarray


@dataclass
class Qrels:
    """Parsed relevance judgements: one entry per judged (query, document)."""

    qid: np.ndarray
    docno: np.ndarray
    rel: np.ndarray
    line: np.ndarray


@dataclass
class TrecTensors:
    """Flat inputs of the retrieval functionals, one row per (query, document).

    Rows with ``retrieved=False`` are relevant documents the run did not return: they count in R and
    in the ideal DCG but are never ranked.
    """

    preds: torch.Tensor
    target: torch.Tensor  # graded relevance, int64 >= 0
    indexes: torch.Tensor
    retrieved: torch.Tensor
    query_ids: list[str]
    n_run_queries: int
    n_qrels_queries: int


def _lines(path: str) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` of the non-blank, non-comment lines of a text file."""
    if not os.path.exists(path):
        raise ReportInputError(f"{path}: no such file.")
    if os.path.isdir(path):
        raise ReportInputError(f"{path}: is a directory, expected a file.")
    size = os.path.getsize(path)
    try:
        with (
            open(path, encoding="utf-8") as handle,
            progress_bar(
                total=size, desc=f"reading {os.path.basename(path)}", unit="B", unit_scale=True
            ) as bar,
        ):
            done = 0
            for number, text in enumerate(handle, start=1):
                done += len(text)
                if number % 65536 == 0:
                    bar.update(done)
                    done = 0
                stripped = text.strip()
                if stripped and not stripped.startswith("#"):
                    yield number, stripped.split()
            bar.update(done)
    except UnicodeDecodeError as err:
        raise ReportInputError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}).") from None
    except OSError as err:
        raise ReportInputError(f"{path}: cannot read it: {err.strerror or err}.") from None


def _check_unique(path: str, qid: np.ndarray, docno: np.ndarray, line: np.ndarray) -> None:
    """Reject a document listed twice for the same query (trec_eval refuses these too)."""
    if qid.size == 0:
        return
    keys = np.char.add(np.char.add(qid, "\x00"), docno)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    repeat = np.flatnonzero(first[inverse.reshape(-1)] != np.arange(keys.size))
    if repeat.size:
        i = int(repeat[0])
        raise ReportInputError(
            f"{path}:{line[i]}: document {str(docno[i])!r} appears twice for query {str(qid[i])!r} "
            f"(first on line {line[first[inverse.reshape(-1)[i]]]})."
        )


def read_run(path: str) -> Run:
    """Parse a TREC run file; a malformed line raises with its line number."""
    qids: list[str] = []
    docnos: list[str] = []
    scores: list[float] = []
    lines: list[int] = []
    for number, fields in _lines(path):
        if len(fields) != 6:
            raise ReportInputError(
                f"{path}:{number}: expected 6 fields ({RUN_FORMAT}), got {len(fields)}: {' '.join(fields)!r}."
            )
        try:
            score = float(fields[4])
        except ValueError:
            raise ReportInputError(f"{path}:{number}: score {fields[4]!r} is not a number.") from None
        if not np.isfinite(score):
            raise ReportInputError(f"{path}:{number}: score {fields[4]!r} is not finite.")
        qids.append(fields[0])
        docnos.append(fields[2])
        scores.append(score)
        lines.append(number)
    if not lines:
        raise ReportInputError(f"{path}: the run is empty (no '{RUN_FORMAT}' lines).")
    run = Run(np.array(qids), np.array(docnos), np.array(scores, dtype=np.float64), np.array(lines))
    _check_unique(path, run.qid, run.docno, run.line)
    return run


def read_qrels(path: str) -> Qrels:
    """Parse a TREC qrels file; a malformed line raises with its line number."""
    qids: list[str] = []
    docnos: list[str] = []
    rels: list[int] = []
    lines: list[int] = []
    for number, fields in _lines(path):
        if len(fields) != 4:
            raise ReportInputError(
                f"{path}:{number}: expected 4 fields ({QRELS_FORMAT}), got {len(fields)}: "
                f"{' '.join(fields)!r}."
            )
        try:
            rel = int(fields[3])
        except ValueError:
            raise ReportInputError(f"{path}:{number}: relevance {fields[3]!r} is not an integer.") from None
        qids.append(fields[0])
        docnos.append(fields[2])
        rels.append(rel)
        lines.append(number)
    if not lines:
        raise ReportInputError(f"{path}: the qrels are empty (no '{QRELS_FORMAT}' lines).")
    qrels = Qrels(np.array(qids), np.array(docnos), np.array(rels, dtype=np.int64), np.array(lines))
    _check_unique(path, qrels.qid, qrels.docno, qrels.line)
    return qrels


def trec_eval_order(qid: np.ndarray, docno: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Scores that reproduce trec_eval's order: ``score`` descending, ties by ``docno`` descending.

    Returns distinct float64 values (minus the position in that order), so that no ties remain.
    """
    _, doc_rank = np.unique(docno, return_inverse=True)
    order = np.lexsort((-doc_rank.reshape(-1), -score))
    position = np.empty(order.size, dtype=np.float64)
    position[order] = np.arange(order.size, dtype=np.float64)
    return -position


def build_tensors(run: Run, qrels: Qrels, *, trec_eval_ties: bool = False) -> TrecTensors:
    """Join a run with its qrels into flat ``preds``/``target``/``indexes``/``retrieved`` tensors.

    Vectorised: query and document ids become integer codes, and one ``(query, document)`` key per row
    is matched with ``np.unique``; there is no loop over queries.
    """
    judged_queries = np.unique(qrels.qid)
    keep = np.isin(run.qid, judged_queries)
    run_q, run_d, run_s = run.qid[keep], run.docno[keep], run.score[keep]
    if run_q.size == 0:
        raise ReportInputError(
            "no query of the run has relevance judgements in the qrels (the query ids do not match)."
        )
    queries, run_qcode = np.unique(run_q, return_inverse=True)
    run_qcode = run_qcode.reshape(-1)
    # qrels rows of evaluated queries, with their query codes
    in_eval = np.isin(qrels.qid, queries)
    qr_q, qr_d, qr_rel = qrels.qid[in_eval], qrels.docno[in_eval], qrels.rel[in_eval]
    qr_qcode = np.searchsorted(queries, qr_q)
    docs, doc_code = np.unique(np.concatenate([run_d, qr_d]), return_inverse=True)
    doc_code = doc_code.reshape(-1).astype(np.int64)
    run_key = run_qcode.astype(np.int64) * len(docs) + doc_code[: run_d.size]
    qr_key = qr_qcode.astype(np.int64) * len(docs) + doc_code[run_d.size :]
    # relevance of each retrieved row (0 when unjudged), and the judged-relevant rows never retrieved
    _, key_code = np.unique(np.concatenate([run_key, qr_key]), return_inverse=True)
    key_code = key_code.reshape(-1)
    rel_of = np.zeros(key_code.max() + 1, dtype=np.int64)
    rel_of[key_code[run_key.size :]] = qr_rel
    was_retrieved = np.zeros(key_code.max() + 1, dtype=bool)
    was_retrieved[key_code[: run_key.size]] = True
    run_rel = rel_of[key_code[: run_key.size]]
    missing = (qr_rel >= 1) & ~was_retrieved[key_code[run_key.size :]]
    if trec_eval_ties:
        run_s = trec_eval_order(run_q, run_d, run_s)
    fill = float(run_s.min()) if run_s.size else 0.0
    preds = np.concatenate([run_s, np.full(int(missing.sum()), fill)])
    target = np.concatenate([run_rel, qr_rel[missing]]).clip(min=0)
    indexes = np.concatenate([run_qcode, qr_qcode[missing]]).astype(np.int64)
    retrieved = np.concatenate([np.ones(run_s.size, dtype=bool), np.zeros(int(missing.sum()), dtype=bool)])
    return TrecTensors(
        preds=torch.from_numpy(np.ascontiguousarray(preds, dtype=np.float64)),
        target=torch.from_numpy(np.ascontiguousarray(target, dtype=np.int64)),
        indexes=torch.from_numpy(indexes),
        retrieved=torch.from_numpy(retrieved),
        query_ids=[str(q) for q in queries.tolist()],
        n_run_queries=int(np.unique(run.qid).size),
        n_qrels_queries=int(judged_queries.size),
    )
