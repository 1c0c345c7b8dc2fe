"""``embedmetrics report --run R --qrels Q`` with trec_eval's options: ``-q`` (per query), ``-c`` (every
judged query, an absent one scoring 0), ``-M n``, ``-l n``, ``-m NAME[.PARAMS]`` (repeatable; nicknames
``official``, trec_eval's default, and ``all_trec``) and ``--format trec_eval``, which prints trec_eval's
three columns (``meas_print_single.c``, ``meas_print_final.c``): ``%-22s\\t%s\\t%6.4f`` (integers as such),
each query's lines in qrels order, then ``all``.

The lists are ranked in trec_eval's order (score descending, then docno descending) whatever ``--ties``.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
from typing import Any

from embedmetrics._io.errors import ReportInputError

#: The flags that ask for trec_eval's measures (the table's TREC family otherwise).
TREC_EVAL_FLAGS = ("per_query", "all_judged_queries", "max_docs", "relevance_level", "measure")


def add_flags(report: argparse.ArgumentParser) -> None:
    """trec_eval's options, its short names as aliases, and ``--format``."""
    group = report.add_argument_group("trec_eval's measures and options (one --run with --qrels)")
    group.add_argument(
        "-q", "--per-query", action="store_true", help="print every query's values too (trec_eval -q)"
    )
    group.add_argument(
        "-c", "--all-judged-queries", action="store_true",
        help="average over every query of the qrels, one absent from the run scoring 0 (trec_eval -c)",
    )  # fmt: skip
    group.add_argument(
        "-M", "--max-docs", type=int, metavar="N", help="evaluate only each query's first N documents"
    )
    group.add_argument(
        "-l",
        "--relevance-level",
        type=int,
        metavar="N",
        help="lowest grade that counts as relevant (default 1)",
    )
    group.add_argument(
        "-m", "--measure", action="append", metavar="NAME[.PARAMS]",
        help="trec_eval measure, repeatable: P.5,10, ndcg_cut.10, ndcg.1=0,2=1, set_F.0.5, ...; nicknames "
        "official (trec_eval's default) and all_trec",
    )  # fmt: skip
    group.add_argument(
        "--format", choices=("table", "trec_eval"), default="table",
        help="the table, or trec_eval's three columns (measure, query or 'all', value)",
    )  # fmt: skip


def requested(args: argparse.Namespace) -> bool:
    """Whether the command asks for trec_eval's measures."""
    given = [getattr(args, f) for f in TREC_EVAL_FLAGS]
    return args.format == "trec_eval" or any(v is not None and v is not False for v in given)


def check(args: argparse.Namespace, runs: list[str]) -> list[Any]:
    """The measures asked for; a refused combination or value raises ``ReportInputError`` (exit 2)."""
    from embedmetrics._engine.ranking.trec_names import parse_measures

    if len(runs) != 1 or args.qrels is None:
        raise ReportInputError(
            "trec_eval's measures (-q, -c, -M, -l, -m, --format trec_eval) need one --run and --qrels."
        )
    others = {
        "--embeddings": args.embeddings,
        "--view1": args.view1,
        "--queries": args.queries,
        "--plot": args.plot,
    }
    given = [flag for flag, value in others.items() if value is not None]
    if given:
        raise ReportInputError(
            f"trec_eval's measures evaluate --run with --qrels only; got {', '.join(given)} too."
        )
    if args.ties in ("pessimistic", "optimistic"):
        raise ReportInputError(
            f"--ties {args.ties}: trec_eval's measures rank ties in trec_eval's order (docno descending)."
        )
    if args.max_docs is not None and args.max_docs < 1:
        raise ReportInputError(f"-M/--max-docs must be a positive number of documents, got {args.max_docs}.")
    if args.relevance_level is not None and args.relevance_level < 0:
        raise ReportInputError(f"-l/--relevance-level must be 0 or more, got {args.relevance_level}.")
    try:
        return parse_measures(args.measure or ["official"])
    except ValueError as err:
        raise ReportInputError(f"-m: {err}") from None


def _run_tag(path: str) -> str:
    """The tag (sixth field) of the run's first line: trec_eval's ``runid``."""
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                return fields[5] if len(fields) > 5 else ""
    return ""


def _text(value: float, integer: bool) -> str:
    """trec_eval's ``%6.4f`` of a value (``%ld`` for the counts); a NaN with its sign, as glibc's printf
    writes it (0/0 gives ``-nan`` there)."""
    if math.isnan(value):
        return f"{'-nan' if math.copysign(1.0, value) < 0 else 'nan':>6}"
    return str(int(value)) if integer and math.isfinite(value) else f"{value:6.4f}"


def _texts(values: Any, integer: bool) -> list[str]:
    """``_text`` of every value of a column (values from 0 to 10 without a Python format each)."""
    if integer:
        return [_text(v, True) for v in values.tolist()]
    return four_decimals(values.numpy())


def four_decimals(values: Any) -> list[str]:
    """``_text`` of each value: the values in ``[0, 10)`` whose fourth decimal is not within 1e-6 of a
    rounding tie are written digit by digit from ``floor(v * 1e4 + 0.5)`` (the correctly rounded value
    there); any other by Python's formatting, which rounds as C's ``printf`` does."""
    import numpy as np

    scaled = np.where(np.isfinite(values), values, -1.0) * 10000.0
    simple = (scaled >= 0) & (scaled < 99999.5) & (np.abs(scaled - np.floor(scaled) - 0.5) > 1e-6)
    k = np.where(simple, np.floor(scaled + 0.5), 0).astype(np.int64)
    chars = np.empty((k.size, 6), dtype=np.uint32)
    chars[:, 0] = 48 + k // 10000
    chars[:, 1] = 46  # "."
    for j, power in enumerate((1000, 100, 10, 1)):
        chars[:, 2 + j] = 48 + (k // power) % 10
    out: list[str] = chars.view("<U6").reshape(-1).tolist()
    for i in np.flatnonzero(~simple).tolist():
        out[i] = _text(float(values[i]), False)
    return out


def relstrings(lists: Any, length: float) -> list[str]:
    """trec_eval's ``relstring`` of each query: the grades of its first ``length`` documents, ``-`` where the
    qrels do not list one, ``.`` for a negative grade, ``>`` above 9 (``m_relstring.c``)."""
    out = []
    for start, end in zip(lists.starts[:-1].tolist(), lists.starts[1:].tolist()):
        grades = lists.grade[start : min(end, start + max(int(length), 0))].tolist()
        out.append("".join(">" if g > 9 else str(g) if g >= 0 else "-" if g == -1 else "." for g in grades))
    return out


def trec_eval_lines(lists: Any, values: dict[str, Any], summary: dict[str, float], measures: list[Any],
                    per_query: bool, run_tag: str) -> list[str]:  # fmt: skip
    """trec_eval's output: each query's lines (``per_query``: one string per query, its measures in
    trec_eval's order), then ``runid`` and the summary's lines."""
    lines: list[str] = []
    if per_query and any(m.name == "relstring" or m.kind.per_query for m in measures):
        labels, columns = [], []  # the printed values, one column (a text per query) per label
        for measure in measures:
            if measure.name == "relstring":
                labels.append(measure.labels()[0])
                columns.append([f"'{t}'" for t in relstrings(lists, measure.params[0])])
            elif measure.kind.per_query:
                labels += measure.labels()
                columns += [_texts(values[label], measure.kind.integer) for label in measure.labels()]
        query_lines = "\n".join(f"{label.replace('{', '{{').replace('}', '}}'):<22}\t{{0}}\t{{{j + 1}}}"
                                for j, label in enumerate(labels))  # fmt: skip
        lines = [query_lines.format(query, *texts) for query, *texts in zip(lists.query_ids, *columns)]
    for measure in measures:
        if measure.name == "runid":
            lines.append(f"{'runid':<22}\tall\t{run_tag}")
        if measure.kind.summary == "none":
            continue
        lines += [
            f"{label:<22}\tall\t{_text(summary[label], measure.kind.integer)}" for label in measure.labels()
        ]
    return lines


def run_trec_eval(args: argparse.Namespace, runs: list[str]) -> int:
    """Read, evaluate and print (``--format``), or write the JSON (``--json``) with every query's values."""
    from embedmetrics._io.trec import read_qrels, read_run
    from embedmetrics._io.trec_eval_lists import graded_lists
    from embedmetrics._report import output
    from embedmetrics._report.preflight import _import_quietly

    measures = check(args, runs)
    if args.json not in (None, "-"):
        output.check_writable(args.json)
    level = 1 if args.relevance_level is None else args.relevance_level
    engine = "embedmetrics._engine.ranking.trec_eval"
    worker = threading.Thread(target=_import_quietly, args=(engine,), daemon=True)
    worker.start()  # torch imports while the files are read (Arrow's and NumPy's native code)
    try:
        lists = graded_lists(read_run(runs[0]), read_qrels(args.qrels), max_docs=args.max_docs)
    finally:
        worker.join()
    from embedmetrics._engine.ranking.trec_eval import trec_eval_values

    values, summary = trec_eval_values(lists, measures, level, args.all_judged_queries)
    if args.json is not None:
        text = output.dump(_document(lists, values, summary, measures, args, _run_tag(runs[0])))
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        output.write_json(args.json, text)
    if args.format == "trec_eval":
        lines = trec_eval_lines(lists, values, summary, measures, args.per_query, _run_tag(runs[0]))
    else:
        rows = {label: summary[label] for label in summary}
        lines = [output.format_table({"trec": rows}, _notes(lists, args))]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _notes(lists: Any, args: argparse.Namespace) -> list[str]:
    """The lines under the table: which queries were evaluated, and where the per-query values go."""
    n_eval = len(lists.query_ids)
    note = f"trec: {n_eval} queries evaluated in trec_eval's order"
    if args.all_judged_queries:
        note += f"; averaged over the {lists.n_qrels_queries} judged queries (-c: an absent one scores 0)"
    else:
        skipped_run, skipped_qrels = lists.n_run_queries - n_eval, lists.n_qrels_queries - n_eval
        note += f"; skipped {skipped_run} run queries without qrels and {skipped_qrels} judged queries absent"
    notes = [note]
    if args.per_query:
        notes.append("per-query values (-q): printed with --format trec_eval, written with --json")
    return notes + ([f"json: {args.json}"] if args.json not in (None, "-") else [])


def _document(lists: Any, values: dict[str, Any], summary: dict[str, float], measures: list[Any],
              args: argparse.Namespace, run_tag: str) -> dict[str, Any]:  # fmt: skip
    """``{"trec_eval": {"all": {...}, "per_query": {qid: {...}}}, "info": {...}}``: trec_eval's names; a
    query's values are the ones ``-q`` prints (not the geometric means' logarithms)."""
    query_ids = lists.query_ids
    shown = [label for m in measures if m.kind.per_query for label in m.labels()]
    columns: dict[str, list[Any]] = {label: values[label].tolist() for label in shown}
    columns.update({m.labels()[0]: relstrings(lists, m.params[0]) for m in measures if m.name == "relstring"})
    per_query = {q: {label: columns[label][i] for label in shown} for i, q in enumerate(query_ids)}
    info = {
        "measures": [m.name if m.given is None else f"{m.name}.{m.given}" for m in measures],
        "relevance_level": 1 if args.relevance_level is None else args.relevance_level,
        "max_docs": args.max_docs, "all_judged_queries": bool(args.all_judged_queries),
        "queries_evaluated": len(query_ids), "ties": "trec_eval",
    }  # fmt: skip
    every: dict[str, Any] = dict(summary)
    if any(m.name == "runid" for m in measures):
        every["runid"] = run_tag
    return {"trec_eval": {"all": every, "per_query": per_query}, "info": info}
