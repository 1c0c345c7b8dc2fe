"""TREC data in Python: trec_eval's measures of runs against qrels, per query or averaged.

``evaluate(qrels, run, measures)`` takes qrels and runs as file paths, as ir_measures' dicts of dicts
(``{query_id: {doc_id: grade}}``, ``{query_id: {doc_id: score}}``) or as pandas DataFrames (columns
``query_id, doc_id, relevance`` / ``score``), and several runs at once as ``{run_name: run}`` (the qrels
read once). The values are trec_eval's, computed by the same code as ``embedmetrics trec_eval``: those
of trec_eval 10.0 by default, of 9.0.8 (pytrec_eval's) with ``trec_eval="9"``, where the two differ. It
imports neither torch nor pandas (a DataFrame is read through its columns).

Queries are evaluated as trec_eval evaluates them without ``-c``: a query of the run without qrels is
skipped, and so is a judged query the run lacks (trec_eval 10.0 stops there; ``evaluate`` skips it, as
9.0.8 and pytrec_eval do).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from embedmetrics._io.trec import Qrels, Run, read_qrels, read_run

__all__ = ["evaluate"]

#: What ``evaluate`` returns for one run: ``{measure: mean}`` or ``{measure: {query_id: value}}``.
Values = Union[dict[str, float], dict[str, dict[str, float]]]


def evaluate(
    qrels: Any,
    run: Any,
    measures: Sequence[str],
    *,
    per_query: bool = False,
    trec_eval: str | int = "10",
) -> dict[str, Any]:
    """trec_eval's ``measures`` of ``run`` against ``qrels``.

    Args:
        qrels: a TREC qrels file's path, ``{query_id: {doc_id: grade}}``, or a DataFrame with columns
            ``query_id``, ``doc_id``, ``relevance``.
        run: a TREC run file's path, ``{query_id: {doc_id: score}}``, a DataFrame with columns
            ``query_id``, ``doc_id``, ``score``, or several of them as ``{run_name: run}``.
        measures: trec_eval's names, as ``-m`` takes them: ``"map"``, ``"ndcg_cut.10"``, ``"P.5,10"``,
            ``"recip_rank"``, ``"official"``, ...
        per_query: each query's value (``{measure: {query_id: value}}``) instead of the mean.
        trec_eval: ``"10"`` (trec_eval 10.0, the default) or ``"9"`` (9.0.8, as pytrec_eval).

    Returns:
        ``{measure: value}`` with trec_eval's names of the values (``P_5``, ``ndcg_cut_10``), or, for
        several runs, ``{run_name: {measure: value}}``.

    Example:
        >>> from embedmetrics.trec import evaluate
        >>> qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
        >>> run = {"q1": {"d1": 0.9, "d2": 0.5}, "q2": {"d1": 0.8, "d3": 0.1}}
        >>> evaluate(qrels, run, ["map", "P.1"])
        {'map': 0.75, 'P_1': 0.5}
        >>> evaluate(qrels, run, ["recip_rank"], per_query=True)
        {'recip_rank': {'q1': 1.0, 'q2': 0.5}}
    """
    from embedmetrics._report.trec_eval_mode import Settings, evaluate_run, measures_of

    version = _version(trec_eval)
    if isinstance(measures, str):
        raise TypeError(f"Argument `measures` must be a list of measure names, got the string {measures!r}.")
    settings = Settings(measures_of(list(measures), version), version=version)
    judged = _qrels(qrels, version)
    runs = _runs(run)
    out = {
        name: _values(evaluate_run(_run(r, version), judged, settings), per_query) for name, r in runs.items()
    }
    return out if not (len(out) == 1 and None in out) else out[None]


def _version(trec_eval: str | int) -> int:
    text = str(trec_eval).strip()
    if text not in ("10", "9"):
        raise ValueError(f"Argument `trec_eval` must be '10' or '9', got {trec_eval!r}.")
    return int(text)


def _values(evaluated: tuple[Any, dict[str, Any], dict[str, float]], per_query: bool) -> Values:
    lists, values, summary = evaluated
    if not per_query:
        return {label: float(value) for label, value in summary.items()}
    ids = list(lists.query_ids)
    return {
        label: dict(zip(ids, np.asarray(column, dtype=np.float64).tolist()))
        for label, column in values.items()
    }


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _is_frame(value: Any) -> bool:
    return hasattr(value, "columns") and hasattr(value, "__getitem__") and not isinstance(value, Mapping)


def _runs(run: Any) -> dict[Any, Any]:
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


def _qrels(qrels: Any, version: int) -> Qrels:
    if _is_path(qrels):
        return read_qrels(os.fspath(qrels), trec_eval=version)
    queries, docs, grades = _triples(qrels, "relevance", "qrels")
    q, q_names = _codes(queries)
    d, d_names = _codes(docs)
    rel = np.asarray([int(g) for g in grades], dtype=np.int64)
    return Qrels(q, d, rel, np.arange(1, rel.size + 1), q_names, d_names)


def _run(run: Any, version: int) -> Run:
    if _is_path(run):
        return read_run(os.fspath(run), trec_eval=version)
    queries, docs, scores = _triples(run, "score", "run")
    score = np.asarray(scores, dtype=np.float64)
    if np.isnan(score).any():
        raise ValueError("Argument `run` must not hold a NaN score (trec_eval's order of it is undefined).")
    q, q_names = _codes(queries)
    d, d_names = _codes(docs)
    return Run(q, d, score, np.arange(1, score.size + 1), q_names, d_names)
