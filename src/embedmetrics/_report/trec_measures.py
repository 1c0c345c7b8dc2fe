"""Measures asked for by any name (``_engine/trec_eval/aliases.py``), evaluated on one run: each query's
value and the summary, keyed by the names asked for. No torch.

The requests are evaluated in groups that trec_eval can compute in one call: trec_eval's own names
together (as ``-m`` reads them), and ir_measures' names by relevance level (``-l``) and ``-J``, the
cut-offs of one measure merged (``P@5`` and ``P@10``: ``P.5,10``); a measure asked with other
parameters (``SetF(beta=0.5)`` beside ``SetF``) gets a call of its own. ``Judged@k`` and ``RR@k`` are
computed on the group's lists.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from embedmetrics._engine.trec_eval.aliases import JUDGED, Request, kind_of
from embedmetrics._engine.trec_eval.names import (
    FLOAT_CUTS,
    LONG_CUTS,
    MeasureKind,
    parse_measure,
    parse_measures,
)
from embedmetrics._io.trec import Qrels, Run
from embedmetrics._io.trec_eval_lists import NOT_IN_QRELS
from embedmetrics._report.trec_eval_mode import Settings, evaluate_run, evaluate_run_file


@dataclass
class Evaluated:
    """One run's values: ``per_query[label]`` (``{query_id: value}``) and ``summary[label]`` (trec_eval's
    summary: the mean over the queries, or its sum, count or geometric mean), keyed by the names asked
    for (trec_eval's labels for trec_eval's names)."""

    per_query: dict[str, dict[str, float]]
    summary: dict[str, float]
    lists: list[Any]  # the graded lists of the first call (the queries evaluated)


@dataclass
class _Group:
    level: int
    judged_only: bool
    specs: dict[str, list[str]]  # trec_eval measure -> its parameter texts (cut-offs merged)
    requests: list[Request]


def evaluate_requests(run: Run | str, qrels: Qrels, requests: Sequence[Request], *, version: int = 10,
                      complete: bool = False, max_docs: int | None = None) -> Evaluated:  # fmt: skip
    """Every request's values on ``run`` (a ``Run``, or a run file's path, read in blocks of whole queries
    where it can be: ``evaluate_run_file``); ``complete``: trec_eval's ``-c`` (every judged query averaged, an
    absent one scoring 0), which is how ir_measures averages; ``max_docs``: ``-M``."""
    out = Evaluated({}, {}, [])
    for group in _groups(requests, version):
        specs = [name if not texts else f"{name}.{','.join(texts)}" for name, texts in group.specs.items()]
        trec_names = all(r.trec_eval_name for r in group.requests)
        measures = parse_measures(specs, version) if trec_names else _each(specs, version)
        settings = Settings(measures, version=version, complete=complete, relevance_level=group.level,
                            judged_only=group.judged_only, max_docs=max_docs)  # fmt: skip
        own = [r for r in group.requests if r.own]

        def extra(lists: Any, own: list[Request] = own) -> dict[str, np.ndarray]:
            return {r.label: own_values(lists, r) for r in own}

        if isinstance(run, str):  # a file: read in blocks of whole queries where it can be
            lists, values, summary, _ = evaluate_run_file(run, qrels, settings, extra)
        else:
            lists, values, summary = evaluate_run(run, qrels, settings)
            values = {**values, **extra(lists)}
        out.lists = out.lists or [lists]
        ids = list(lists.query_ids)
        denominator = lists.n_qrels_queries if complete else len(ids)
        for request in group.requests:
            if request.own is None and request.value not in summary:  # runid, relstring: text, no value
                continue
            if request.own is None:
                column = np.asarray(values.get(request.value, np.zeros(0)), dtype=np.float64)
                mean = float(summary[request.value])
                if _counted_as_ir_measures(request, complete, version):
                    mean = float(column[~np.asarray(lists.absent, dtype=bool)].sum()) if ids else 0.0
            else:
                column = np.asarray(values[request.label], dtype=np.float64)
                mean = float(column.sum() / denominator) if denominator else float("nan")
            kind = kind_of(request, version)  # per query as trec_eval's -q (ir_measures': counts too)
            shown = kind is None or kind.per_query or (not request.trec_eval_name and kind.summary != "gm")
            if shown and column.size == len(ids):  # (trec_eval's -q: no num_q, gm_map's logarithms)
                out.per_query[request.label] = dict(zip(ids, column.tolist()))
            out.summary[request.label] = mean
    order = [r.label for r in requests if r.label in out.summary]
    per_query = {k: out.per_query[k] for k in order if k in out.per_query}
    return Evaluated(per_query, {k: out.summary[k] for k in order}, out.lists)


def _counted_as_ir_measures(request: Request, complete: bool, version: int) -> bool:
    """Whether a count (``NumQ``, ``NumRet``, ``NumRel``, ``NumRelRet``) sums the queries of the run only:
    ir_measures' names with ``complete`` (ir_measures adds 0 for a judged query the run lacks, where
    trec_eval's ``-c`` counts it)."""
    if request.trec_eval_name or not complete:
        return False
    kind = kind_of(request, version)
    return kind is not None and kind.summary in ("sum", "count")


def _each(specs: list[str], version: int) -> list[object]:
    """The measures of ``specs``, each as given (no ``-m`` rule of the first parameters winning)."""
    return [m for spec in specs for m in parse_measure(spec, version)]


def _groups(requests: Sequence[Request], version: int) -> list[_Group]:
    """The requests in as few trec_eval calls as compute them as asked."""
    groups: list[_Group] = []
    for request in requests:
        name, _, text = request.spec.partition(".")
        cuts = bool(request.spec) and _has_cutoffs(request.spec, version)
        given = [text] if text else []
        for group in groups:
            same = (all(r.trec_eval_name for r in group.requests) == request.trec_eval_name
                    and group.level == request.relevance_level
                    and group.judged_only == request.judged_only)  # fmt: skip
            if same and (request.trec_eval_name or not request.spec or name not in group.specs or cuts
                         or group.specs[name] == given):  # fmt: skip
                break
        else:
            group = _Group(request.relevance_level, request.judged_only, {}, [])
            groups.append(group)
        group.requests.append(request)
        if request.spec and request.trec_eval_name:
            group.specs.setdefault(request.spec, [])
        elif request.spec:
            texts = group.specs.setdefault(name, [])
            texts += [t for t in (text.split(",") if cuts else given) if t and t not in texts]
    return groups


def _has_cutoffs(spec: str, version: int) -> bool:
    return parse_measure(spec, version)[0].kind.params in (LONG_CUTS, FLOAT_CUTS)


def own_values(lists: object, request: Request) -> np.ndarray:
    """``Judged@k`` or ``RR@k`` per query on trec_eval's ranking (``lists``: ``GradedLists``)."""
    starts = np.asarray(lists.starts)  # type: ignore[attr-defined]
    grade = np.asarray(lists.grade)  # type: ignore[attr-defined]
    sizes = np.diff(starts)
    depth = sizes if request.cutoff is None else np.minimum(sizes, request.cutoff)
    rank = np.arange(grade.size) - np.repeat(starts[:-1], sizes)
    inside = rank < np.repeat(depth, sizes)
    query = np.repeat(np.arange(sizes.size), sizes)
    if request.own == JUDGED:
        judged = np.bincount(query[inside & (grade != NOT_IN_QRELS)], minlength=sizes.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(depth > 0, judged / np.maximum(depth, 1), 0.0)
    hits = inside & (grade >= request.relevance_level)
    first = np.full(sizes.size, np.iinfo(np.int64).max)
    np.minimum.at(first, query[hits], rank[hits])
    return np.where(first < np.iinfo(np.int64).max, 1.0 / (first + 1.0), 0.0)


def run_named(args: argparse.Namespace, path: str, requests: list[Request]) -> int:
    """``report --run R --qrels Q -m NAME ...`` where a name is ir_measures' (``nDCG@10``): the table, the
    three columns of ``--format trec_eval`` (``-q``: each query's lines first) or the JSON, keyed by the
    names as given. ``-l`` sets the level of trec_eval's names; ir_measures' carry theirs (``rel=``)."""
    from embedmetrics._io.trec import read_qrels
    from embedmetrics._report import output
    from embedmetrics._report.trec_eval_mode import notes

    level = 1 if args.relevance_level is None else args.relevance_level
    requests = [replace(r, relevance_level=level) if r.trec_eval_name else r for r in requests]
    qrels = read_qrels(args.qrels, trec_eval=args.trec_eval)
    done = evaluate_requests(path, qrels, requests, version=args.trec_eval, complete=args.all_judged_queries,
                             max_docs=args.max_docs)  # fmt: skip
    if args.json is not None:
        by_query: dict[str, dict[str, float]] = {}
        for label, values in done.per_query.items():
            for query, value in values.items():
                by_query.setdefault(query, {})[label] = value
        info = {"measures": list(args.measure), "trec_eval": args.trec_eval, "ties": "trec_eval"}
        text = output.dump({"trec_eval": {"all": done.summary, "per_query": by_query}, "info": info})
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        output.write_json(args.json, text)
    if args.format == "trec_eval":
        lines = trec_eval_format(done, requests, args.per_query, args.trec_eval)
    else:
        lines = [output.format_table({"trec": done.summary}, notes(done.lists[0], args))]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def trec_eval_format(
    done: Evaluated, requests: Sequence[Request], per_query: bool, version: int
) -> list[str]:
    """trec_eval's three columns of ``done``: with ``per_query``, each query's lines (in the lists' order,
    the measures as asked), then ``all``; the counts as integers."""
    from embedmetrics._report.trec_eval_mode import four_decimals

    counts = {r.label for r in requests if (kind_of(r, version) or MeasureKind()).integer}

    def texts(label: str, values: list[float]) -> list[str]:
        return [str(int(v)) for v in values] if label in counts else four_decimals(np.asarray(values))

    lines: list[str] = []
    if per_query and done.per_query:
        columns = {label: dict(zip(v, texts(label, list(v.values())))) for label, v in done.per_query.items()}
        for query in done.lists[0].query_ids:
            lines += [f"{label:<22}\t{query}\t{c[query]}" for label, c in columns.items() if query in c]
    return lines + [f"{label:<22}\tall\t{texts(label, [v])[0]}" for label, v in done.summary.items()]
