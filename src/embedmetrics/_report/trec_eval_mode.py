"""``embedmetrics report --run R --qrels Q`` with trec_eval's options: ``-q`` (per query), ``-c`` (every
judged query, an absent one scoring 0), ``-M n``, ``-l n``, ``-m NAME[.PARAMS]`` (repeatable; nicknames
``official``, trec_eval's default, and ``all_trec``) and ``--format trec_eval``, which prints trec_eval's
three columns (``meas_print_single.c``, ``meas_print_final.c``): ``%-22s\\t%s\\t%6.4f`` (integers as such),
each query's lines in qrels order, then ``all``.

The lists are ranked in trec_eval's order (score descending, then docno descending) whatever ``--ties``.
``--trec-eval 10`` (the default) or ``9`` picks the version whose output is printed where the two differ
(``docs/trec-eval.md``). ``evaluate_run`` and ``run_lines`` are the evaluation and the printing that
``embedmetrics trec_eval`` (``trec_eval_command``) shares.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from embedmetrics._io.errors import ReportInputError

#: The trec_eval versions whose output can be printed (``--trec-eval``), the default first.
VERSIONS = (10, 9)

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
        help="measure, repeatable: trec_eval's (P.5,10, ndcg_cut.10, set_F.0.5, ...; nicknames official, "
        "trec_eval's default, and all_trec) or ir_measures' (nDCG@10, AP@100, P(rel=2)@5, RR@10, ...); "
        "with several --run, the measures they are compared on",
    )  # fmt: skip
    group.add_argument(
        "--format", choices=("table", "trec_eval"), default="table",
        help="the table, or trec_eval's three columns (measure, query or 'all', value)",
    )  # fmt: skip
    version_flag(group)


def version_flag(group: Any) -> None:
    """``--trec-eval {10,9}``: the trec_eval version whose output is printed where the two differ."""
    group.add_argument(
        "--trec-eval", type=int, choices=VERSIONS, default=VERSIONS[0], metavar="{10,9}",
        help="the trec_eval version to equal where 10.0 and 9.0.8 differ (default: 10; 9: as pytrec_eval)",
    )  # fmt: skip


#: trec_eval's option letters that only ``embedmetrics trec_eval`` takes (the report does not).
OTHER_LETTERS = ("-J", "-n", "-N", "-o", "-Z", "-R", "-T")


def other_options_hint(message: str) -> str:
    """Where an argparse error ``message`` refuses one of trec_eval's letters that the report does not
    take (``-J``, ``-n``, ``-N``, ``-o``, ``-Z``, ``-R``, ``-T``, glued or not), a sentence pointing to
    ``embedmetrics trec_eval``, which takes them all; else ``""``."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    words = message.split(":", 1)[1].split()
    found = sorted({w[:2] for w in words if w[:2] in OTHER_LETTERS})
    if not found:
        return ""
    return (f"; trec_eval's {', '.join(found)}: `embedmetrics trec_eval [options] QRELS RUN` takes every "
            "trec_eval option (see `embedmetrics trec_eval --help`)")  # fmt: skip


def requested(args: argparse.Namespace) -> bool:
    """Whether the command asks for trec_eval's measures."""
    given = [getattr(args, f) for f in TREC_EVAL_FLAGS]
    return args.format == "trec_eval" or any(v is not None and v is not False for v in given)


def comparing(args: argparse.Namespace, runs: list[str]) -> bool:
    """Whether several runs are compared on the measures ``-m`` names (no other trec_eval option)."""
    others = [getattr(args, f) for f in TREC_EVAL_FLAGS if f != "measure"]
    return (
        len(runs) > 1
        and args.format != "trec_eval"
        and not any(v is not None and v is not False for v in others)
    )


def measures_of(specs: Optional[list[str]], version: int) -> list[Any]:
    """The measures ``-m`` names (trec_eval's ``official`` without one); a bad one raises ``ValueError``."""
    from embedmetrics._engine.trec_eval.names import parse_measures

    return parse_measures(specs or ["official"], version=version)


def wrong_limit(max_docs: Optional[int], relevance_level: Optional[int]) -> Optional[str]:
    """What is wrong with ``-M`` (0 or more documents: trec_eval takes 0, it crashes on a negative number)
    or ``-l`` (0 or more), or ``None``."""
    if max_docs is not None and max_docs < 0:
        return f"-M/--max-docs must be 0 or more documents (trec_eval crashes below 0), got {max_docs}."
    if relevance_level is not None and relevance_level < 0:
        return f"-l/--relevance-level must be 0 or more, got {relevance_level}."
    return None


def check(args: argparse.Namespace, runs: list[str]) -> list[Any]:
    """The measures asked for; a refused combination or value raises ``ReportInputError`` (exit 2)."""
    if len(runs) > 1:
        raise ReportInputError(
            "-q, -c, -M, -l and --format trec_eval print one run's values: for several runs, "
            "`embedmetrics trec_eval QRELS RUN1 RUN2 ...` prints trec_eval's output run after run, and "
            "`embedmetrics report --run A --run B --qrels Q -m NAME ...` compares them on the measures named."
        )
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
    wrong = wrong_limit(args.max_docs, args.relevance_level)
    if wrong is not None:
        raise ReportInputError(wrong)
    try:
        return measures_of(args.measure, args.trec_eval)
    except ValueError as err:
        from embedmetrics._engine.trec_eval.aliases import resolve

        try:  # ir_measures' names among them (nDCG@10): evaluated by ``trec_measures.run_named``
            return list(resolve(args.measure or [], args.trec_eval))
        except ValueError:
            raise ReportInputError(f"-m: {err}") from None


@dataclass(frozen=True)
class Settings:
    """trec_eval's options: what is evaluated and printed."""

    measures: list[Any]
    """The measures (``measures_of``)."""
    version: int = VERSIONS[0]
    """The trec_eval version (10 or 9)."""
    per_query: bool = False
    """``-q``: every query's values too."""
    complete: bool = False
    """``-c``: average over every judged query (10.0 also prints the absent ones with ``-q``)."""
    max_docs: Optional[int] = None
    """``-M``: each query's first documents only."""
    relevance_level: int = 1
    """``-l``: the lowest relevant grade."""
    judged_only: bool = False
    """``-J``: the judged documents only."""
    summary: bool = True
    """Whether the summary is printed (``-n``: not)."""
    num_docs: int = 0
    """``-N``: documents in the collection (``utility``'s fourth coefficient reads it)."""
    zscores: Optional[dict[str, Any]] = field(default=None, hash=False)
    """``-Z``: the means and deviations of ``trec_zscores.read_zscores``."""
    refuse_absent: bool = False
    """Whether a judged query the run lacks is refused under 10 without ``-c``, as trec_eval 10.0 refuses it
    (``embedmetrics trec_eval``; the report skips it, as 9.0.8 does)."""


def _text(value: float, integer: bool) -> str:
    """trec_eval's ``%6.4f`` of a value (``%ld`` for the counts); a NaN with its sign, as glibc's printf
    writes it (0/0 gives ``-nan`` there)."""
    if math.isnan(value):
        return f"{'-nan' if math.copysign(1.0, value) < 0 else 'nan':>6}"
    return str(int(value)) if integer and math.isfinite(value) else f"{value:6.4f}"


def _texts(values: Any, integer: bool) -> list[str]:
    """``_text`` of every value of a column (values from 0 to 10 without a Python format each)."""
    import numpy as np

    column = np.asarray(values)
    if integer:
        return [_text(v, True) for v in column.tolist()]
    return four_decimals(column.astype(np.float64, copy=False))


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
                    per_query: bool, run_tag: str, *, summary_lines: bool = True,
                    zscore: bool = False) -> list[str]:  # fmt: skip
    """trec_eval's output: each query's lines (``per_query``: one string per query, its measures in
    trec_eval's order), then ``runid`` and the summary's lines (unless not ``summary_lines``: ``-n``).
    ``zscore`` (``-Z``): every value but ``runid``'s and ``relstring``'s named with a ``Z`` first and
    printed as ``%6.4f`` (``meas_print_single.c``, ``meas_print_final.c``)."""
    lines: list[str] = []
    mark = "Z" if zscore else ""
    if per_query and any(m.name == "relstring" or m.kind.per_query for m in measures):
        labels, columns = [], []  # the printed values, one column (a text per query) per label
        for measure in measures:
            if measure.name == "relstring":
                labels.append(measure.labels()[0])
                columns.append(_relstring_texts(lists, measure))
            elif measure.kind.per_query:
                labels += measure.labels()
                integer = measure.kind.integer and not zscore
                columns += [_texts(values[label], integer) for label in measure.labels()]
        query_lines = "\n".join(
            f"{'' if label.startswith('relstring') else mark}{_escaped(label):<22}\t{{0}}\t{{{j + 1}}}"
            for j, label in enumerate(labels)
        )
        lines = [query_lines.format(query, *texts) for query, *texts in zip(lists.query_ids, *columns)]
    for measure in measures if summary_lines else ():
        if measure.name == "runid":
            lines.append(f"{'runid':<22}\tall\t{run_tag}")
        if measure.kind.summary == "none":
            continue
        integer = measure.kind.integer and not zscore
        lines += [f"{mark}{label:<22}\tall\t{_text(summary[label], integer)}" for label in measure.labels()]
    return lines


def _escaped(label: str) -> str:
    """``label`` as ``str.format`` prints it (its braces doubled)."""
    return label.replace("{", "{{").replace("}", "}}")


def _relstring_texts(lists: Any, measure: Any) -> list[str]:
    """``relstring``'s quoted text per query; ``''`` for a query the run lacks where trec_eval 10.0 clears
    it (its default length only: ``clear_relstr`` is called for the value named ``relstring``)."""
    if getattr(lists, "relstrings", None) is not None:  # a run evaluated in blocks: kept per block
        return list(lists.relstrings[measure.labels()[0]])
    texts = [f"'{t}'" for t in relstrings(lists, measure.params[0])]
    if measure.labels()[0] == "relstring":
        texts = ["''" if gone else t for t, gone in zip(texts, lists.absent.tolist() or [False] * len(texts))]
    return texts


def evaluate_run(run: Any, qrels: Any, settings: Settings) -> tuple[Any, dict[str, Any], dict[str, float]]:
    """The graded lists, each query's values (``{label: (Q,)}``) and the summary of one run, as trec_eval
    computes them with ``settings``."""
    from embedmetrics._io.trec_eval_lists import graded_lists

    s = settings
    lists = graded_lists(
        run, qrels, max_docs=s.max_docs, judged_only=s.judged_only, version=s.version,
        complete=s.complete and s.version == 10, refuse_absent=s.refuse_absent and s.version == 10,
    )  # fmt: skip
    from embedmetrics._engine.trec_eval.values import trec_eval_values

    transform = None
    if s.zscores is not None:
        from embedmetrics._io.trec_zscores import to_zscores

        transform = functools.partial(to_zscores, query_ids=lists.query_ids, zscores=s.zscores)
    values, summary = trec_eval_values(
        lists, s.measures, s.relevance_level, s.complete, version=s.version, num_docs=s.num_docs,
        absent=lists.absent, transform=transform,
    )  # fmt: skip
    return lists, values, summary


@dataclass
class QueryList:
    """What is read of the lists of a run evaluated in blocks: the evaluated queries (trec_eval's order)
    and the counts of the notes."""

    query_ids: list[str]
    n_run_queries: int
    n_qrels_queries: int
    absent: Any = None
    relstrings: Optional[dict[str, list[str]]] = None  # each ``relstring`` measure's quoted texts


#: What a run file's evaluation gives: the lists (or ``QueryList``), the values, the summary, the tag.
Evaluated = tuple[Any, dict[str, Any], dict[str, float], str]
#: More per-query values of the lists (``Judged@k``): ``{label: (Q,) values}``, kept beside trec_eval's.
Extra = Callable[[Any], dict[str, Any]]


def evaluate_run_file(path: str, qrels: Any, settings: Settings, extra: Optional[Extra] = None) -> Evaluated:
    """``evaluate_run`` of the run file ``path``, and its tag: read in blocks of whole queries
    (``trec_run_blocks``), so that the run is never held whole, where the file is grouped by query and
    what is printed needs only per-query values; else read whole (a file whose queries come back, standard
    input, ``relstring``, ``-Z``, and a judged query the run lacks under 10 with ``-c`` or where 10.0
    stops)."""
    from embedmetrics._io.trec import read_run

    streamed = _evaluate_blocks(path, qrels, settings, extra)
    if streamed is not None:
        return streamed
    run = read_run(path, trec_eval=settings.version)
    lists, values, summary = evaluate_run(run, qrels, settings)
    return lists, {**values, **(extra(lists) if extra else {})}, summary, run.tag


def _evaluate_blocks(path: str, qrels: Any, settings: Settings, extra: Optional[Extra] = None
                     ) -> Optional[Evaluated]:  # fmt: skip
    """The blocks' values put in trec_eval's query order and summarised; ``None`` where the whole file must
    be read instead."""
    import numpy as np

    from embedmetrics._engine.trec_eval.values import summarize
    from embedmetrics._io.trec_eval_lists import NoCommonQueries
    from embedmetrics._io.trec_run_blocks import NotGrouped, run_blocks

    if settings.zscores is not None:
        return None
    texts = [m for m in settings.measures if m.name == "relstring"]
    each = replace(settings, complete=False, refuse_absent=False)
    ids: list[str] = []
    columns: list[dict[str, Any]] = []
    seen: set[str] = set()
    tag = ""
    try:
        for run in run_blocks(path, settings.version):
            seen.update(str(q) for q in run.queries.tolist())
            tag = run.tag if run.qid.size else tag
            try:
                lists, values, _ = evaluate_run(run, qrels, each)
            except NoCommonQueries:
                continue
            ids += lists.query_ids
            quoted = {m.labels()[0]: _relstring_texts(lists, m) for m in texts}
            columns.append({**values, **quoted, **(extra(lists) if extra else {})})
    except NotGrouped:
        return None
    judged = {str(q) for q in qrels.queries.tolist()}
    stops = settings.version == 10 and (settings.complete or settings.refuse_absent)
    if not ids or (stops and judged - seen):
        return None
    order = np.argsort(np.array(ids, dtype=str), kind="stable")
    values = {label: np.concatenate([c[label] for c in columns])[order] for label in columns[0]}
    quoted = {m.labels()[0]: values.pop(m.labels()[0]).tolist() for m in texts}
    complete = settings.complete
    summary = summarize(values, settings.measures, len(judged) if complete else None,
                        int((qrels.rel > 0).sum()) if complete else None)  # fmt: skip
    view = QueryList([ids[i] for i in order.tolist()], len(seen), len(judged), np.zeros(len(ids), dtype=bool),
                     quoted)  # fmt: skip
    return view, values, summary, tag


def file_lines(path: str, qrels: Any, settings: Settings) -> str:
    """``run_lines`` of the run file ``path``, read in blocks of whole queries where it can be
    (``evaluate_run_file``)."""
    streamed = _evaluate_blocks(path, qrels, settings)
    if streamed is None:
        from embedmetrics._io.trec import read_run

        return run_lines(read_run(path, trec_eval=settings.version), qrels, settings)
    lists, values, summary, tag = streamed
    lines = trec_eval_lines(lists, values, summary, settings.measures, settings.per_query, tag,
                            summary_lines=settings.summary)  # fmt: skip
    return "".join(line + "\n" for line in lines)


def run_lines(run: Any, qrels: Any, settings: Settings) -> str:
    """trec_eval's output for one run, as one text (a line per value, each ended by a newline). A judged
    query the run lacks (10.0 without ``-c``) raises ``AbsentQuery`` with ``partial``: what trec_eval 10.0
    prints before it stops there (with ``-q``, the lines of the queries before that one)."""
    from embedmetrics._io.trec_eval_lists import AbsentQuery

    try:
        lists, values, summary = evaluate_run(run, qrels, settings)
    except AbsentQuery as err:
        err.partial = _before(run, qrels, settings, err.query)
        raise
    lines = trec_eval_lines(
        lists, values, summary, settings.measures, settings.per_query, run.tag,
        summary_lines=settings.summary, zscore=settings.zscores is not None,
    )  # fmt: skip
    return "".join(line + "\n" for line in lines)


def _before(run: Any, qrels: Any, settings: Settings, stop: str) -> str:
    """What trec_eval 10.0 prints for ``run`` before it stops at the judged query ``stop`` that the run
    lacks (``trec_eval.c``'s loop over the qrels' queries): with ``-q``, the lines of the queries before
    it; nothing else (no summary)."""
    if not settings.per_query:
        return ""
    from embedmetrics._io.trec_eval_lists import NoCommonQueries

    skip = replace(settings, refuse_absent=False, summary=False)
    try:
        lists, values, summary = evaluate_run(run, qrels, skip)
    except NoCommonQueries:  # no query of the run judged: none before ``stop`` either
        return ""
    lines = trec_eval_lines(
        lists, values, summary, skip.measures, True, run.tag, summary_lines=False,
        zscore=skip.zscores is not None,
    )  # fmt: skip
    if len(lines) != len(lists.query_ids):  # no measure with per-query lines
        return ""
    return "".join(line + "\n" for q, line in zip(lists.query_ids, lines) if q < stop)


def run_trec_eval(args: argparse.Namespace, runs: list[str]) -> int:
    """Read, evaluate and print (``--format``), or write the JSON (``--json``) with every query's values."""
    from embedmetrics._io.trec import read_qrels
    from embedmetrics._report import output

    measures = check(args, runs)
    if args.json not in (None, "-"):
        output.check_writable(args.json)
    if measures and not hasattr(measures[0], "kind"):  # names resolved as requests: any vocabulary
        from embedmetrics._report.trec_measures import run_named

        return run_named(args, runs[0], measures)
    level = 1 if args.relevance_level is None else args.relevance_level
    settings = Settings(
        measures, version=args.trec_eval, per_query=args.per_query, complete=args.all_judged_queries,
        max_docs=args.max_docs, relevance_level=level,
    )  # fmt: skip
    qrels = read_qrels(args.qrels, trec_eval=args.trec_eval)
    lists, values, summary, tag = evaluate_run_file(runs[0], qrels, settings)
    if args.json is not None:
        text = output.dump(_document(lists, values, summary, measures, args, tag))
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        output.write_json(args.json, text)
    if args.format == "trec_eval":
        lines = trec_eval_lines(lists, values, summary, measures, args.per_query, tag)
    else:
        rows = {label: summary[label] for label in summary}
        lines = [output.format_table({"trec": rows}, notes(lists, args))]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def notes(lists: Any, args: argparse.Namespace) -> list[str]:
    """The lines under the table: which queries were evaluated, and where the per-query values go."""
    n_eval = len(lists.query_ids)
    note = f"trec: {n_eval} queries evaluated in trec_eval's order"
    if args.all_judged_queries:
        note += f"; averaged over the {lists.n_qrels_queries} judged queries (-c: an absent one scores 0)"
    else:
        skipped_run, skipped_qrels = lists.n_run_queries - n_eval, lists.n_qrels_queries - n_eval
        note += (f"; skipped {skipped_run} run queries without qrels and {skipped_qrels} judged queries "
                 "absent from the run (as trec_eval 9 does; trec_eval 10.0 stops at the first judged query "
                 "absent from the run, `embedmetrics trec_eval` does too)")  # fmt: skip
    notes = [note]
    if args.per_query:
        notes.append("per-query values (-q): printed with --format trec_eval, written with --json")
    return notes + ([f"json: {args.json}"] if args.json not in (None, "-") else [])


def _document(lists: Any, values: dict[str, Any], summary: dict[str, float], measures: list[Any],
              args: argparse.Namespace, run_tag: str) -> dict[str, Any]:  # fmt: skip
    """``{"trec_eval": {"all": {...}, "per_query": {qid: {...}}}, "info": {...}}``: trec_eval's names; a
    query's values are the ones ``-q`` prints (not the geometric means' logarithms)."""
    import numpy as np

    query_ids = lists.query_ids
    shown = [label for m in measures if m.kind.per_query for label in m.labels()]
    columns: dict[str, list[Any]] = {label: np.asarray(values[label]).tolist() for label in shown}
    columns.update({m.labels()[0]: relstrings(lists, m.params[0]) for m in measures if m.name == "relstring"})
    per_query = {q: {label: columns[label][i] for label in shown} for i, q in enumerate(query_ids)}
    info = {
        "measures": [m.name if m.given is None else f"{m.name}.{m.given}" for m in measures],
        "relevance_level": 1 if args.relevance_level is None else args.relevance_level,
        "max_docs": args.max_docs, "all_judged_queries": bool(args.all_judged_queries),
        "queries_evaluated": len(query_ids), "ties": "trec_eval", "trec_eval": args.trec_eval,
    }  # fmt: skip
    every: dict[str, Any] = dict(summary)
    if any(m.name == "runid" for m in measures):
        every["runid"] = run_tag
    return {"trec_eval": {"all": every, "per_query": per_query}, "info": info}
