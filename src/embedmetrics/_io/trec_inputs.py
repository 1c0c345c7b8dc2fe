"""The inputs of ``embedmetrics.trec``: qrels and runs as TREC files' paths, as ir_measures' dicts of dicts
(``{query_id: {doc_id: grade}}``, ``{query_id: {doc_id: score}}``) or as pandas DataFrames (columns
``query_id, doc_id, relevance`` / ``score``), and several runs as ``{run_name: run}``. A DataFrame is read
through its columns (pandas is not imported). No torch."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from embedmetrics._io.trec import Qrels, Run, read_qrels, read_run


def trec_eval_version(trec_eval: str | int) -> int:
    """``"10"`` or ``"9"`` (a string or an int) as the version number, else ``ValueError``."""
    text = str(trec_eval).strip()
    if text not in ("10", "9"):
        raise ValueError(f"Argument `trec_eval` must be '10' or '9', got {trec_eval!r}.")
    return int(text)


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _is_frame(value: Any) -> bool:
    return hasattr(value, "columns") and hasattr(value, "__getitem__") and not isinstance(value, Mapping)


def runs_of(run: Any) -> dict[Any, Any]:
    """``{name: run}`` for several runs, ``{None: run}`` for one."""
    if isinstance(run, Mapping) and run:
        first = next(iter(run.values()))
        several = _is_path(first) or _is_frame(first)
        if isinstance(first, Mapping) and first:
            several = isinstance(next(iter(first.values())), Mapping)
        if several:
            return dict(run)
    return {None: run}


def _columns(
    frame: Any, names: tuple[str, str, str], argument: str
) -> tuple[list[str], list[str], list[Any]]:
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ValueError(
            f"Argument `{argument}` as a DataFrame needs the columns {', '.join(names)}; it lacks "
            f"{', '.join(missing)} (it has {', '.join(map(str, frame.columns))})."
        )
    return [str(v) for v in frame[names[0]]], [str(v) for v in frame[names[1]]], list(frame[names[2]])


def _triples(table: Any, third: str, argument: str) -> tuple[list[str], list[str], list[Any]]:
    """``(query ids, doc ids, values)`` of a dict of dicts or a DataFrame."""
    if _is_frame(table):
        return _columns(table, ("query_id", "doc_id", third), argument)
    if not isinstance(table, Mapping):
        raise TypeError(
            f"Argument `{argument}` must be a file path, a dict of dicts or a DataFrame, got "
            f"{type(table).__name__}."
        )
    queries, docs, values = [], [], []
    for query, row in table.items():
        if not isinstance(row, Mapping):
            raise TypeError(
                f"Argument `{argument}` as a dict must map each query id to {{doc_id: {third}}}, got "
                f"{type(row).__name__} for query {query!r}."
            )
        for doc, value in row.items():
            queries.append(str(query))
            docs.append(str(doc))
            values.append(value)
    return queries, docs, values


def _codes(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    vocabulary, codes = np.unique(np.asarray(names, dtype=object).astype(str), return_inverse=True)
    return codes.astype(np.int64), vocabulary


def qrels_of(qrels: Any, version: int) -> Qrels:
    if _is_path(qrels):
        return read_qrels(os.fspath(qrels), trec_eval=version)
    queries, docs, grades = _triples(qrels, "relevance", "qrels")
    q, q_names = _codes(queries)
    d, d_names = _codes(docs)
    rel = np.asarray([_grade(g) for g in grades], dtype=np.int64)
    _once(q, d, q_names, d_names, "qrels")
    return Qrels(q, d, rel, np.arange(1, rel.size + 1), q_names, d_names)


def _grade(value: Any) -> int:
    """A grade as a whole number (``2``, ``2.0``, ``"2"``), else ``ValueError`` naming it."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not np.isfinite(number) or number != int(number):
        raise ValueError(f"Argument `qrels` must hold whole-number grades, got {value!r}.")
    return int(number)


def _once(q: np.ndarray, d: np.ndarray, q_names: np.ndarray, d_names: np.ndarray, argument: str) -> None:
    """Each document once per query (trec_eval refuses a document listed twice), else ``ValueError``."""
    keys = np.sort(q * max(d_names.size, 1) + d)
    twice = np.flatnonzero(keys[1:] == keys[:-1])
    if twice.size:
        query, doc = divmod(int(keys[twice[0]]), max(d_names.size, 1))
        raise ValueError(f"Argument `{argument}` lists document {str(d_names[doc])!r} twice for query "
                         f"{str(q_names[query])!r} (trec_eval refuses it).")  # fmt: skip


def run_of(run: Any, version: int) -> Run:
    if _is_path(run):
        return read_run(os.fspath(run), trec_eval=version)
    queries, docs, scores = _triples(run, "score", "run")
    score = np.asarray(scores, dtype=np.float64)
    if np.isnan(score).any():
        raise ValueError("Argument `run` must not hold a NaN score (trec_eval's order of it is undefined).")
    q, q_names = _codes(queries)
    d, d_names = _codes(docs)
    _once(q, d, q_names, d_names, "run")
    return Run(q, d, score, np.arange(1, score.size + 1), q_names, d_names)


def write_run(path: str, run: Mapping[str, Mapping[str, float]], tag: str) -> None:
    """``run`` (``{query_id: {doc_id: score}}``, each query's documents in rank order) as a TREC run file:
    ``qid Q0 docno rank score tag``, ranks from 1, each score written exactly (Python's ``repr``)."""
    from embedmetrics._io.errors import ReportInputError

    lines = [
        f"{q} Q0 {d} {i} {s!r} {tag}\n" for q, row in run.items() for i, (d, s) in enumerate(row.items(), 1)
    ]
    if path == "-":
        sys.stdout.writelines(lines)
        return
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(lines)
    except OSError as err:
        raise ReportInputError(f"cannot write {path}: {err.strerror or err}.") from None


def run_source(run: Any, version: int) -> Run | str:
    """A run file's path as it is (read in blocks where it can be, ``evaluate_run_file``), any other run
    as a ``Run``."""
    return os.fspath(run) if _is_path(run) else run_of(run, version)
