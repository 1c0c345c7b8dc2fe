"""``embedmetrics report --run a.trec --run b.trec ... --qrels q``: the systems compared.

Each run is joined with the qrels and evaluated per query (the TREC family's measures, trec_eval's
definitions); every measure's per-query values go through ``embedmetrics.functional.compare`` (and
``bootstrap_ci`` with ``--ci``). One table: systems as rows, measures as columns, each cell the mean with
the letters of the systems it is significantly better than.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.comparison.options import OPTIONS
from embedmetrics._engine.settings.options import read_options
from embedmetrics._io.errors import ReportInputError
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


def _options(args: argparse.Namespace) -> dict[str, Any]:
    correction = None if args.correction == "none" else args.correction
    given = {"test": args.test, "correction": correction, "alpha": args.alpha}
    try:
        return read_options("embedmetrics report", OPTIONS["compare"], given)
    except (ValueError, TypeError) as err:
        raise ReportInputError(str(err).replace("Argument `", "--").replace("`", "")) from None


def run_comparison(args: argparse.Namespace, paths: list[str], ks: list[int]) -> int:
    """Compare the runs; print the table (or JSON), write the JSON file and figures when asked."""
    check_distinct(paths)
    opts = _options(args)
    qrels = read_qrels(args.qrels)
    names = system_names(paths)
    joined = [join_as_asked(read_run(p), qrels, args).tensors() for p in paths]
    ties = measure_ties(args.ties)
    per_run = [per_query_trec(data, ks, ties) for data in joined]
    queries = aligned_queries(names, [data.query_ids for data in joined], args.query_set)
    rows = [
        torch.tensor([data.query_ids.index(q) for q in queries]) if data.query_ids != queries else None
        for data in joined
    ]
    if len(queries) < max(2, len(names)):
        raise ReportInputError(
            f"comparing {len(names)} runs needs at least {max(2, len(names))} queries that every run "
            f"retrieved and the qrels judge (no more runs than queries: their pairs' tests would mean "
            f"nothing), got {len(queries)}."
        )
    measures = list(per_run[0])
    results: dict[str, Any] = {}
    for measure in measures:
        values = {n: (v[measure] if r is None else v[measure][r]) for n, v, r in zip(names, per_run, rows)}
        try:
            comparison = compare(values, **opts)
        except ValueError as err:  # the values themselves (overflow, memory): one line, not a traceback
            raise ReportInputError(f"comparison of {measure}: {' '.join(str(err).split())}") from None
        entry = comparison.to_dict()
        if args.ci:
            entry["ci"] = {n: list(map(float, bootstrap_ci(v)[1:])) for n, v in values.items()}
        results[measure] = (comparison, values, entry)
    info = {"systems": dict(zip(names, paths)), "queries_compared": len(queries), "k": ks, "ties": args.ties}
    if args.ties == "trec_eval":
        info["trec_eval"] = args.trec_eval
    document = output.dump({"comparison": {m: e for m, (_, _, e) in results.items()}, "info": info})
    if args.json == "-":
        sys.stdout.write(document + "\n")
        return 0
    rule = f"{opts['test']} test, correction {opts['correction']}, alpha {opts['alpha']}"
    notes = [f"{len(queries)} queries compared; {rule}"]
    if args.json is not None:
        output.write_json(args.json, document)
        notes.append(f"json: {args.json}")
    if args.plot is not None:
        figures = plots.Figures(args.plot, args.plot_format, args.dpi)
        main = f"ndcg@{max(ks)}"  # the differences of the deepest nDCG
        written = plots.plot_comparison(figures, {m: v for m, (_, v, _) in results.items()}, main)
        notes.append(f"plots: {', '.join(written)}")
    sys.stdout.write(
        format_comparison(names, {m: c for m, (c, _, _) in results.items()}, results, args.ci) + "\n"
    )
    sys.stdout.write("\n".join(notes) + "\n")
    return 0


def format_comparison(
    names: list[str], comparisons: dict[str, Any], results: dict[str, Any], ci: bool
) -> str:
    """Systems as rows, measures as columns: ``mean^letters`` (``[low, high]`` with ``--ci``)."""
    letters = next(iter(comparisons.values())).letters()
    header = ["", "system", *comparisons]
    table = [header]
    for name in names:
        row = [letters[name], name]
        for measure, comparison in comparisons.items():
            mean = float(comparison.means[comparison.names.index(name)])
            marks = "".join(letters[t] for t in comparison.beats(name))
            cell = ("nan" if math.isnan(mean) else f"{mean:.4f}") + (f"^{marks}" if marks else "")
            if ci:
                low, high = results[measure][2]["ci"][name]
                cell += f" [{low:.4f}, {high:.4f}]"
            row.append(cell)
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("^letters: the systems a mean is significantly better than.")
    return "\n".join(lines)
