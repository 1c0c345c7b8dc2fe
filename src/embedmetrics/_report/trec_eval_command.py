"""``embedmetrics trec_eval [options] QRELS RUN [RUN ...]``: trec_eval's calling form.

trec_eval's option letters with their meaning (``trec_eval.c``): ``-q``, ``-c``, ``-n``, ``-J``, ``-o``,
``-m MEAS`` (repeatable), ``-l N``, ``-M N``, ``-N N``, ``-Z FILE``, ``-R qrels``, ``-T trec_results``, glued
as getopt takes them (``-mP.5``, ``-M100``, ``-l2``, ``-qc``) and anywhere on the line; its long names too
(``--measure``, ``--query_eval_wanted``, ...). Then ``--trec-eval {10,9}`` (the version whose output is
printed) and ``--output-dir DIR``. Several runs: each run's block exactly as trec_eval prints it for that
run, run after run, the qrels read once. A run ``-`` is standard input.

Exit status as trec_eval's where it refuses: 1 a usage error or an unknown measure, 2 an unreadable or
malformed file (and ``-R``/``-T`` formats not read here) or a cut-off trec_eval cannot initialise, 4 a
document twice in a query (or, 10.0 without ``-c``, a judged query the run lacks), 7 no query of the run
judged, 255 an unreadable ``-Z`` file or one trec_eval's lookup would read past; one line on stderr. Several
runs go on past a failing run, as a shell loop over trec_eval; the status is the first failing run's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from embedmetrics._io.errors import ReportInputError
from embedmetrics._report.trec_eval_mode import Settings, measures_of, version_flag, wrong_limit

PROG = "embedmetrics trec_eval"
#: ``-R``'s judgement formats of trec_eval that are not read here (preferences, ``_jg``).
OTHER_FORMATS = ("prefs", "qrels_prefs", "qrels_jg")


class UsageError(ReportInputError):
    """A usage error or an unknown measure: trec_eval's exit status, 1."""

    status = 1


class _Parser(argparse.ArgumentParser):
    """A parser whose errors are one line and exit status 1, as trec_eval's usage errors."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{PROG} --help`).")


#: trec_eval's options: its letter, its long name, where argparse puts the value, the help line, and how
#: argparse reads it (``trec_eval.c``'s ``getopt_long`` table).
_OPTIONS: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    ("q", "query_eval_wanted", "per_query", "print every query's values too", {"action": "store_true"}),
    ("m", "measure", "measure", "measure[.params] or nickname (official, all_trec, set), repeatable",
     {"action": "append", "metavar": "MEAS"}),
    ("c", "complete_rel_info_wanted", "complete", "average over every judged query (an absent one scores 0)",
     {"action": "store_true"}),
    ("l", "level_for_rel", "level", "lowest relevant grade (default 1)", {"type": int, "default": 1,
     "metavar": "N"}),
    ("n", "nosummary", "no_summary", "print no summary (no 'all' lines)", {"action": "store_true"}),
    ("J", "Judged_docs_only", "judged_only", "evaluate only the judged documents", {"action": "store_true"}),
    ("N", "Number_docs_in_coll", "num_docs", "documents in the collection (utility's 4th coefficient)",
     {"type": int, "default": 0, "metavar": "N"}),
    ("M", "Max_retrieved_per_topic", "max_docs", "evaluate each query's first N documents only",
     {"type": int, "metavar": "N"}),
    ("R", "Rel_info_format", "rel_format", "judgement format: qrels (the only one read here)",
     {"default": "qrels", "metavar": "FORMAT"}),
    ("T", "Results_format", "results_format", "run format: trec_results", {"default": "trec_results",
     "metavar": "FORMAT"}),
    ("o", "Output_old_results_format", "old_format", "accepted, no effect (as in trec_eval: obsolete)",
     {"action": "store_true"}),
    ("Z", "Zscore", "zscores", "print z-scores against FILE's 'qid measure mean stddev' lines",
     {"metavar": "FILE"}),
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """trec_eval's options (its letters and long names), ``--trec-eval`` and ``--output-dir``."""
    parser = _Parser(
        prog=PROG, usage="%(prog)s [options] QRELS RUN [RUN ...]",
        description="trec_eval's calling form: a script that calls `trec_eval` calls `embedmetrics "
        "trec_eval` with the same options and files. Several runs print each run's block as trec_eval "
        "prints it, one after the other.",
        epilog="Exit status as trec_eval's: 0 success, 1 usage or unknown measure, 2 bad file or cut-off, "
        "4 a document twice in a query (or, 10.0 without -c, a judged query the run lacks), 7 no query of "
        "the run judged, 255 bad -Z file. See docs/trec-eval.md.",
    )  # fmt: skip
    parser.add_argument("-v", "--version", action=_Version, nargs=0, help="print the version (on stderr, as "
                        "trec_eval does) and exit")  # fmt: skip
    for letter, long, dest, text, kwargs in _OPTIONS:
        parser.add_argument(f"-{letter}", f"--{long}", dest=dest, help=text, **kwargs)
    version_flag(parser)
    parser.add_argument("--output-dir", metavar="DIR", help="write each run's output to DIR/<its file name>")
    parser.add_argument("qrels", metavar="QRELS", help="qrels file: qid iter docno rel")
    parser.add_argument(
        "runs", metavar="RUN", nargs="+", help="run files (qid Q0 docno rank score tag); '-': stdin"
    )
    return parser


class _Version(argparse.Action):
    """``-v``: the version on stderr, as trec_eval prints its own (``trec_eval.c``), then exit 0."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:  # fmt: skip
        sys.stderr.write(_version() + "\n")
        raise SystemExit(0)


def _version() -> str:
    from embedmetrics import __version__

    return f"embedmetrics {__version__}: trec_eval 10.0 (--trec-eval 10) and 9.0.8 (--trec-eval 9)"


def settings_of(args: argparse.Namespace) -> Settings:
    """The evaluation's settings; a refused option or measure raises (trec_eval's status)."""
    if args.rel_format != "qrels":
        known = "is not read here (preference and _jg judgements)" if args.rel_format in OTHER_FORMATS else (
            "is not a trec_eval judgement format")  # fmt: skip
        raise ReportInputError(f"-R {args.rel_format}: {known}; only qrels is.")
    if args.results_format != "trec_results":
        raise ReportInputError(f"-T {args.results_format}: only trec_results runs are read.")
    wrong = wrong_limit(args.max_docs, args.level)
    if wrong is not None:
        raise UsageError(wrong)
    from embedmetrics._engine.trec_eval.names import CutoffError

    try:
        measures = measures_of(args.measure, args.trec_eval)
    except CutoffError as err:  # trec_eval: "Cannot initialize measure", exit 2
        raise ReportInputError(f"-m: {err}") from None
    except ValueError as err:
        raise UsageError(f"-m: {err}") from None
    return Settings(
        measures, version=args.trec_eval, per_query=args.per_query, complete=args.complete,
        max_docs=args.max_docs, relevance_level=args.level, judged_only=args.judged_only,
        summary=not args.no_summary, num_docs=args.num_docs, refuse_absent=True,
    )  # fmt: skip


def output_paths(runs: Sequence[str], output_dir: str | None) -> list[str | None]:
    """Where each run's output goes: stdout (``None``), or ``DIR/<the run file's name>``; two runs of one
    name, and a run ``-`` there, are refused. ``-`` may be given once (standard input is read once)."""
    if list(runs).count("-") > 1:
        raise UsageError("a run '-' (standard input) can be given once.")
    if output_dir is None:
        return [None] * len(runs)
    if "-" in runs:
        raise UsageError("--output-dir names each output after its run file; a run '-' (stdin) has no name.")
    names: dict[str, str] = {}
    for run in runs:
        name = os.path.basename(os.path.normpath(run))
        if name in names:
            raise ReportInputError(f"--output-dir: runs {names[name]!r} and {run!r} both write {name!r}.")
        names[name] = run
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ReportInputError(f"--output-dir {output_dir}: is a file, expected a directory.")
    os.makedirs(output_dir, exist_ok=True)
    return [os.path.join(output_dir, name) for name in names]


def evaluate(args: argparse.Namespace) -> int:
    """Read the qrels once, then evaluate and print (or write) each run in turn, as a shell loop over
    trec_eval would: a run that fails prints what trec_eval prints before it stops, then its one-line
    error, and the next runs go on; the status is the first failing run's (0 if none fails). Several runs
    on stdout without ``-m runid``: each block's run named on stderr first (``==> RUN <==``)."""
    from embedmetrics._io.trec import read_qrels

    settings = settings_of(args)
    targets = output_paths(args.runs, args.output_dir)
    qrels = read_qrels(args.qrels, trec_eval=args.trec_eval)
    if args.zscores is not None:
        from embedmetrics._io.trec_zscores import read_zscores

        settings = dataclasses.replace(settings, zscores=read_zscores(args.zscores))
    first = 0
    label = (
        len(args.runs) > 1
        and args.output_dir is None
        and not (settings.summary and any(m.name == "runid" for m in settings.measures))  # -n: no runid
    )
    for path, target in zip(args.runs, targets):
        if label:  # which run the next block is, on stderr (stdout stays trec_eval's), as `head` names files
            sys.stdout.flush()
            sys.stderr.write(f"==> {path} <==\n")
            sys.stderr.flush()
        status = _one_run(path, target, qrels, settings)
        first = first or status
    return first


def _one_run(path: str, target: str | None, qrels: Any, settings: Settings) -> int:
    """Evaluate one run and print (or write) its block; a refusal prints what trec_eval prints before it
    stops, then the one line on stderr: the status (trec_eval's)."""
    from embedmetrics._report.trec_eval_mode import file_lines

    try:
        text, failed = file_lines(path, qrels, settings), None
    except ReportInputError as err:
        text, failed = str(getattr(err, "partial", "")), err
    if target is None:
        sys.stdout.write(text)
    else:
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            raise ReportInputError(f"{target}: cannot write it: {err.strerror or err}.") from None
    return 0 if failed is None else _refused(failed)


def _refused(err: ReportInputError) -> int:
    """Write ``err`` as one line on stderr; its exit status (trec_eval's; 2 unless it names one)."""
    sys.stdout.flush()
    message = " ".join(str(err).split())
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return int(getattr(err, "status", 2))


def main(argv: Sequence[str]) -> int:
    """``embedmetrics trec_eval ARGV``; the exit status (trec_eval's where it refuses)."""
    try:
        return evaluate(build_parser().parse_intermixed_args(list(argv)))
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except ReportInputError as err:
        return _refused(err)
