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

import math
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
    """A parsed run: one entry per retrieved document (``line`` is the 1-based line number).

    ``qid`` and ``docno`` are integer codes into the name arrays ``queries`` and ``docs``.
    """

    qid: np.ndarray
    docno: np.ndarray
    score: np.ndarray
    line: np.ndarray
    queries: np.ndarray
    docs: np.ndarray


@dataclass
class Qrels:
    """Parsed relevance judgements: one entry per judged (query, document), ids coded as in :class:`Run`."""

    qid: np.ndarray
    docno: np.ndarray
    rel: np.ndarray
    line: np.ndarray
    queries: np.ndarray
    docs: np.ndarray


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
            open(path, encoding="utf-8-sig") as handle,
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


def _check_unique(path: str, table: Run | Qrels) -> None:
    """Reject a document listed twice for the same query (trec_eval refuses these too)."""
    keys = table.qid * max(len(table.docs), 1) + table.docno
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    repeat = np.flatnonzero(first[inverse] != np.arange(keys.size))
    if repeat.size:
        i = int(repeat[0])
        raise ReportInputError(
            f"{path}:{table.line[i]}: document {str(table.docs[table.docno[i]])!r} appears twice for query "
            f"{str(table.queries[table.qid[i]])!r} (first on line {table.line[first[inverse[i]]]})."
        )


def _names(vocabulary: dict[str, int]) -> np.ndarray:
    return np.array(list(vocabulary), dtype=str)  # insertion order = code order


def read_run(path: str) -> Run:
    """Parse a TREC run file; a malformed line raises with its line number."""
    queries: dict[str, int] = {}
    docs: dict[str, int] = {}
    qids: list[int] = []
    docnos: list[int] = []
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
        if not math.isfinite(score):
            raise ReportInputError(f"{path}:{number}: score {fields[4]!r} is not finite.")
        qids.append(queries.setdefault(fields[0], len(queries)))
        docnos.append(docs.setdefault(fields[2], len(docs)))
        scores.append(score)
        lines.append(number)
    if not lines:
        raise ReportInputError(f"{path}: the run is empty (no '{RUN_FORMAT}' lines).")
    run = Run(
        np.array(qids, dtype=np.int64),
        np.array(docnos, dtype=np.int64),
        np.array(scores, dtype=np.float64),
        np.array(lines, dtype=np.int64),
        _names(queries),
        _names(docs),
    )
    _check_unique(path, run)
    return run


def read_qrels(path: str) -> Qrels:
    """Parse a TREC qrels file; a malformed line raises with its line number."""
    queries: dict[str, int] = {}
    docs: dict[str, int] = {}
    qids: list[int] = []
    docnos: list[int] = []
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
        if not -(2**63) <= rel < 2**63:
            raise ReportInputError(
                f"{path}:{number}: relevance {fields[3]!r} is out of range (a 64-bit integer is expected)."
            )
        qids.append(queries.setdefault(fields[0], len(queries)))
        docnos.append(docs.setdefault(fields[2], len(docs)))
        rels.append(rel)
        lines.append(number)
    if not lines:
        raise ReportInputError(f"{path}: the qrels are empty (no '{QRELS_FORMAT}' lines).")
    qrels = Qrels(
        np.array(qids, dtype=np.int64),
        np.array(docnos, dtype=np.int64),
        np.array(rels, dtype=np.int64),
        np.array(lines, dtype=np.int64),
        _names(queries),
        _names(docs),
    )
    _check_unique(path, qrels)
    return qrels


def _joint_codes(
    names_a: np.ndarray, codes_a: np.ndarray, names_b: np.ndarray, codes_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Re-code two coded columns into one vocabulary, sorted by name (so code order = name order)."""
    names, inverse = np.unique(np.concatenate([names_a, names_b]), return_inverse=True)
    inverse = inverse.reshape(-1)
    return names, inverse[: names_a.size][codes_a], inverse[names_a.size :][codes_b]


def build_tensors(run: Run, qrels: Qrels, *, trec_eval_ties: bool = False) -> TrecTensors:
    """Join a run with its qrels into flat ``preds``/``target``/``indexes``/``retrieved`` tensors.

    Vectorised: ids are integer codes in one joint vocabulary, and the ``(query, document)`` pairs of
    the run and of the qrels are matched with one ``np.unique``; there is no loop over queries.
    With ``trec_eval_ties`` the scores are replaced by trec_eval's strict order (score descending,
    then docno descending), so no ties remain.
    """
    query_names, run_q, qr_q = _joint_codes(run.queries, run.qid, qrels.queries, qrels.qid)
    doc_names, run_d, qr_d = _joint_codes(run.docs, run.docno, qrels.docs, qrels.docno)
    in_run = np.zeros(query_names.size, dtype=bool)
    in_run[run_q] = True
    judged = np.zeros(query_names.size, dtype=bool)
    judged[qr_q] = True
    evaluated = in_run & judged  # trec_eval: queries of the run that have qrels lines
    if not evaluated.any():
        raise ReportInputError(
            "no query of the run has relevance judgements in the qrels (the query ids do not match)."
        )
    dense = np.cumsum(evaluated) - 1  # evaluated query -> 0..Q-1 (in sorted qid order)
    keep_run, keep_qr = evaluated[run_q], evaluated[qr_q]
    run_q, run_d, run_s = run_q[keep_run], run_d[keep_run], run.score[keep_run]
    qr_q, qr_d, qr_rel = qr_q[keep_qr], qr_d[keep_qr], qrels.rel[keep_qr]
    # relevance of each retrieved row (0 when unjudged), and the judged-relevant rows never retrieved
    n_docs = max(doc_names.size, 1)
    run_key, qr_key = run_q * n_docs + run_d, qr_q * n_docs + qr_d
    _, key_code = np.unique(np.concatenate([run_key, qr_key]), return_inverse=True)
    key_code = key_code.reshape(-1)
    rel_of = np.zeros(int(key_code.max()) + 1, dtype=np.int64)
    rel_of[key_code[run_key.size :]] = qr_rel
    was_retrieved = np.zeros(int(key_code.max()) + 1, dtype=bool)
    was_retrieved[key_code[: run_key.size]] = True
    run_rel = rel_of[key_code[: run_key.size]]
    missing = (qr_rel >= 1) & ~was_retrieved[key_code[run_key.size :]]
    if trec_eval_ties:
        # doc codes follow the sorted docno strings, so this is trec_eval's (score desc, docno desc)
        order = np.lexsort((-run_d, -run_s))
        run_s = np.empty(order.size, dtype=np.float64)
        run_s[order] = -np.arange(order.size, dtype=np.float64)
    n_missing = int(missing.sum())
    fill = float(run_s.min())  # never ranked: any value would do
    preds = np.concatenate([run_s, np.full(n_missing, fill)])
    target = np.concatenate([run_rel, qr_rel[missing]]).clip(min=0)
    indexes = dense[np.concatenate([run_q, qr_q[missing]])]
    retrieved = np.concatenate([np.ones(run_s.size, dtype=bool), np.zeros(n_missing, dtype=bool)])
    return TrecTensors(
        preds=torch.from_numpy(np.ascontiguousarray(preds, dtype=np.float64)),
        target=torch.from_numpy(np.ascontiguousarray(target, dtype=np.int64)),
        indexes=torch.from_numpy(np.ascontiguousarray(indexes, dtype=np.int64)),
        retrieved=torch.from_numpy(retrieved),
        query_ids=[str(q) for q in query_names[evaluated].tolist()],
        n_run_queries=int(in_run.sum()),
        n_qrels_queries=int(judged.sum()),
    )
