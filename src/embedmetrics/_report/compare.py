"""``embedmetrics report --run a.trec --run b.trec ... --qrels q``: the systems compared.

Each run is joined with the qrels and evaluated per query (the TREC family's measures, trec_eval's
definitions); every measure's per-query values go through ``embedmetrics.functional.compare`` (and
``bootstrap_ci`` with ``--ci``). One table: systems as rows, measures as columns, each cell the mean with
the letters of the systems it is significantly better than.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.comparison.options import OPTIONS
from embedmetrics._engine.settings.options import read_options
from embedmetrics._io.errors import ReportInputError, as_flags
from embedmetrics._io.trec import read_qrels, read_run
from embedmetrics._report import output, plots
from embedmetrics._report.evaluate import measure_ties, per_query_trec
from embedmetrics._report.preflight import join_as_asked
from embedmetrics.functional import bootstrap_ci, compare

#: Queries named in an error about different query sets.
_SHOWN = 5


def system_names(paths: list[str]) -> list[str]:
    """The runs' file names without extension (their paths where two names collide)."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return stems if len(set(stems)) == len(stems) else list(paths)


def check_distinct(paths: list[str]) -> None:
    """Every ``--run`` a different file (the same file twice would compare a system with itself)."""
    seen: dict[str, str] = {}
    for path in paths:
        key = os.path.normcase(os.path.realpath(path))
        if key in seen:
            raise ReportInputError(f"--run {path} is the same file as --run {seen[key]}: give each run once.")
        seen[key] = path


def aligned_queries(names: list[str], query_ids: list[list[str]], policy: str) -> list[str]:
    """The queries every run is compared on: all of them (the same in every run) or, with
    ``--query-set intersection``, the common ones; otherwise an error naming the missing queries."""
    common = set.intersection(*(set(q) for q in query_ids))
    every = set.union(*(set(q) for q in query_ids))
    if common != every and policy != "intersection":
        parts = []
        for name, ids in zip(names, query_ids):
            missing = sorted(every - set(ids))
            if missing:
                shown = ", ".join(missing[:_SHOWN]) + (
                    f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
                )
                parts.append(f"{name} lacks {len(missing)} ({shown})")
        raise ReportInputError(
            "the runs evaluate different queries: "
            + "; ".join(parts)
            + ". Compare on the common queries with --query-set intersection."
        )
    if len(common) < 2:
        raise ReportInputError(f"comparing runs needs at least 2 common queries, got {len(common)}.")
    return [q for q in query_ids[0] if q in common]


def _positions(query_ids: list[str], queries: list[str]) -> Tensor:
    """Where each of ``queries`` stands in ``query_ids``."""
    where = {q: i for i, q in enumerate(query_ids)}
    return torch.tensor([where[q] for q in queries], dtype=torch.long)


def _options(args: argparse.Namespace, names: list[str], paths: list[str]) -> dict[str, Any]:
    """``compare``'s options from the flags; ``--baseline`` is a run's name or its ``--run`` as given."""
    baseline = names[paths.index(args.baseline)] if args.baseline in paths else args.baseline
    correction = None if args.correction == "none" else args.correction
    given = {"test": args.test, "correction": correction, "alpha": args.alpha, "seed": args.seed,
             "n_resamples": args.n_resamples, "baseline": baseline}  # fmt: skip
    try:
        opts = read_options("embedmetrics report", OPTIONS["compare"], given)
    except (ValueError, TypeError) as err:
        raise ReportInputError(as_flags(str(err))) from None
    if args.ci and args.table_format != "text":
        raise ReportInputError(
            f"--ci shows the intervals in the text table and the JSON; --table-format {args.table_format} "
            "has no place for them: drop --ci, or write them with --json."
        )
    if baseline is not None and baseline not in names:
        raise ReportInputError(
            f"--baseline {baseline}: no run has that name; the runs are {', '.join(names)}."
        )
    return opts


def _default_measures(
    args: argparse.Namespace, paths: list[str], ks: list[int]
) -> tuple[dict[str, dict[str, Tensor]], int]:
    """The default measures' per-query values of each run (the TREC family's, ``--ties``), on the
    queries every run evaluates: ``({measure: {name: values}}, queries)``."""
    qrels = read_qrels(args.qrels)
    names = system_names(paths)
    joined = [join_as_asked(read_run(p), qrels, args).tensors() for p in paths]
    ties = measure_ties(args.ties)
    per_run = [per_query_trec(data, ks, ties) for data in joined]
    queries = aligned_queries(names, [data.query_ids for data in joined], args.query_set)
    rows = [_positions(data.query_ids, queries) if data.query_ids != queries else None for data in joined]
    if len(queries) < max(2, len(names)):
        raise ReportInputError(
            f"comparing {len(names)} runs needs at least {max(2, len(names))} queries that every run "
            f"retrieved and the qrels judge (no more runs than queries: their pairs' tests would mean "
            f"nothing), got {len(queries)}."
        )
    values = {
        measure: {n: (v[measure] if r is None else v[measure][r]) for n, v, r in zip(names, per_run, rows)}
        for measure in per_run[0]
    }
    return values, len(queries)


def _compared(values: dict[str, dict[str, Tensor]], opts: dict[str, Any]) -> dict[str, Any]:
    """Each measure's ``Comparison``; a value ``compare`` refuses is one line naming the measure."""
    out = {}
    for measure, by_system in values.items():
        try:
            out[measure] = compare(by_system, **opts)
        except ValueError as err:  # the values themselves (overflow, memory): one line, not a traceback
            raise ReportInputError(f"comparison of {measure}: {' '.join(str(err).split())}") from None
    return out


def _intervals(values: dict[str, dict[str, Tensor]]) -> dict[str, dict[str, tuple[float, float]]]:
    """``--ci``: each system's bootstrap 95% interval of its mean, per measure."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for measure, by_system in values.items():
        out[measure] = {}
        for name, v in by_system.items():
            low, high = bootstrap_ci(v)[1:]
            out[measure][name] = (float(low), float(high))
    return out


def run_comparison(args: argparse.Namespace, paths: list[str], ks: list[int]) -> int:
    """Compare the runs on the default measures or those ``-m`` names; print the table
    (``--table-format``) or JSON, write the JSON file and figures when asked."""
    from embedmetrics.trec import TREC_EVAL_TIES, RunComparison

    check_distinct(paths)
    names = system_names(paths)
    opts = _options(args, names, paths)
    if args.measure:
        values, n_queries = measures_per_query(args.qrels, dict(zip(names, paths)), args.measure,
                                               version=args.trec_eval, query_set=args.query_set)  # fmt: skip
    else:
        values, n_queries = _default_measures(args, paths, ks)
    ties = TIE_WORDS[args.ties] if not args.measure and args.ties != "trec_eval" else TREC_EVAL_TIES
    grid = RunComparison(names, _compared(values, opts), n_queries, **opts, ties=ties)
    grid.intervals = _intervals(values) if args.ci else None
    document = _document(grid, args, paths, ks)
    if args.json == "-":
        sys.stdout.write(document + "\n")
        return 0
    notes = [f"{n_queries} queries compared"]
    if args.json is not None:
        output.write_json(args.json, document)
        notes.append(f"json: {args.json}")
    if args.plot is not None:
        figures = plots.Figures(args.plot, args.plot_format, args.dpi)
        main = f"ndcg@{max(ks)}" if f"ndcg@{max(ks)}" in values else next(iter(values))
        notes.append(f"plots: {', '.join(plots.plot_comparison(figures, values, main))}")
    sys.stdout.write(grid.table(args.table_format).rstrip("\n") + "\n")
    (sys.stdout if args.table_format == "text" else sys.stderr).write("\n".join(notes) + "\n")
    return 0


#: How ``--ties`` ranks tied scores, in the caption.
TIE_WORDS = {
    "average": "tied scores at the expected value over their random orders (--ties average)",
    "pessimistic": "tied scores in their worst order (--ties pessimistic)",
    "optimistic": "tied scores in their best order (--ties optimistic)",
}


def _document(grid: Any, args: argparse.Namespace, paths: list[str], ks: list[int]) -> str:
    """The JSON: each measure's comparison (with its intervals under ``--ci``) and what it was run with."""
    comparison = {m: c.to_dict() for m, c in grid.comparisons.items()}
    if grid.intervals:
        for measure, entry in comparison.items():
            entry["ci"] = {n: list(v) for n, v in grid.intervals[measure].items()}
    info: dict[str, Any] = {"systems": dict(zip(grid.names, paths)), **grid.settings()}
    info["ties"] = "trec_eval" if args.measure else args.ties
    if args.measure:
        info["measures"] = list(args.measure)
    else:
        info["k"] = ks
    if args.measure or args.ties == "trec_eval":
        info["trec_eval"] = args.trec_eval
    return output.dump({"comparison": comparison, "info": info})


def _list_names(runs: list[Any]) -> list[str]:
    """Names of runs given as a list: their file names where all are paths, else ``run1``, ``run2``..."""
    if all(isinstance(r, (str, os.PathLike)) for r in runs):
        return system_names([os.fspath(r) for r in runs])
    return [f"run{i}" for i in range(1, len(runs) + 1)]


def measures_per_query(qrels: Any, runs: Any, measures: Any, *, version: int = 10, query_set: str = "same"
                       ) -> tuple[dict[str, dict[str, Tensor]], int]:  # fmt: skip
    """``({measure: {name: per-query values}}, queries compared)`` of the runs (``{name: run}`` or a list of
    paths) on ``measures`` (any names: ``_engine/trec_eval/aliases.py``), each query ranked as trec_eval
    ranks it; the measures that trec_eval prints only in its summary (``runid``, ``num_q``, ``gm_map``)
    have no per-query values and are left out. Bad input raises ``ReportInputError``."""
    from embedmetrics._engine.trec_eval.aliases import kind_of, resolve
    from embedmetrics._io.trec_inputs import qrels_of, run_source, runs_of
    from embedmetrics._report.trec_measures import evaluate_requests

    try:
        requests = resolve(measures, version)
    except (ValueError, TypeError) as err:
        raise ReportInputError(f"-m: {err}") from None
    requests = [r for r in requests if getattr(kind_of(r, version), "per_query", True)]
    if not requests:
        raise ReportInputError("-m: none of these measures has per-query values to compare (runid, num_q, "
                               "gm_map and gm_bpref are trec_eval's summaries only).")  # fmt: skip
    listed = isinstance(runs, (list, tuple))
    given = dict(zip(_list_names(list(runs)), runs)) if listed else runs_of(runs)
    if None in given or len(given) < 2:
        raise ReportInputError("comparing runs needs at least 2 runs, as {name: run} or a list of paths.")
    names = [str(n) for n in given]
    judged = qrels_of(qrels, version)
    per_run = [evaluate_requests(run_source(r, version), judged, requests, version=version).per_query
               for r in given.values()]  # fmt: skip
    labels = list(per_run[0])
    queries = aligned_queries(names, [list(p[labels[0]]) for p in per_run], query_set)
    if len(queries) < len(names):
        raise ReportInputError(f"comparing {len(names)} runs needs at least {len(names)} common queries, got "
                               f"{len(queries)}.")  # fmt: skip
    values = {label: {n: torch.tensor([p[label][q] for q in queries], dtype=torch.float64)
                      for n, p in zip(names, per_run)} for label in labels}  # fmt: skip
    return values, len(queries)


def compare_measures(qrels: Any, runs: Any, measures: Any, options: dict[str, Any], *, version: int = 10,
                     query_set: str = "same") -> tuple[list[str], dict[str, Any], int]:  # fmt: skip
    """``(names, {measure: Comparison}, queries compared)``: ``measures_per_query`` compared with
    ``options`` (``compare``'s)."""
    values, n_queries = measures_per_query(qrels, runs, measures, version=version, query_set=query_set)
    names = list(next(iter(values.values())))
    if options.get("baseline") is not None and options["baseline"] not in names:
        raise ReportInputError(
            f"baseline {options['baseline']!r} is not one of the runs ({', '.join(names)})."
        )
    return names, _compared(values, options), n_queries
