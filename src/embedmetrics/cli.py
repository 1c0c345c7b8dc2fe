"""The ``embedmetrics`` command line.

``embedmetrics report`` evaluates embeddings with labels, two views of the same items, and/or a TREC
run with its qrels, prints one table, and optionally writes the same numbers as JSON (``--json``) and
PNG figures (``--plot``). Without input arguments it evaluates a built-in example (scikit-learn's
bundled digits). See ``docs/report.md``.

Exit status: 0 on success, 2 on bad input (missing or unreadable file, wrong shape, length mismatch,
malformed TREC line, options that do not go together), with one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from embedmetrics import __version__
from embedmetrics._engine.comparison.options import OPTIONS as COMPARISON_OPTIONS
from embedmetrics._engine.dense.options import OPTIONS as DENSE_OPTIONS
from embedmetrics._engine.fusion.fuse import METHODS as FUSION_METHODS
from embedmetrics._engine.fusion.fuse import NORMS as FUSION_NORMS
from embedmetrics._engine.settings.options import TIES_OPTION, Option
from embedmetrics._engine.settings.policies import TIES
from embedmetrics._io.errors import ReportInputError, as_flags
from embedmetrics._report import trec_eval_mode
from embedmetrics._report.output import PLOT_FORMATS
from embedmetrics.trec import TABLE_FORMATS

#: Cut-offs reported when ``--k`` is not given.
DEFAULT_K = (1, 5, 10)
#: The report's tie policies: the metrics' own, and trec_eval's order (docno descending).
REPORT_TIES = (*TIES, "trec_eval")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors become one-line ``ReportInputError``."""

    def error(self, message: str) -> NoReturn:
        hint = trec_eval_mode.other_options_hint(message)
        raise ReportInputError(f"{message} (see `{self.prog} --help`){hint}.")


def parse_ks(text: str) -> list[int]:
    """``"1,5,10"`` -> ``[1, 5, 10]`` (sorted, without repeats); anything else is a usage error.

    Examples:
        >>> parse_ks("10,1,5,5")
        [1, 5, 10]
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        ks = [int(p) for p in parts]
    except ValueError:
        raise ReportInputError(f"--k must be positive integers separated by commas, got {text!r}.") from None
    if not ks or any(k < 1 for k in ks):
        raise ReportInputError(f"--k must be positive integers separated by commas, got {text!r}.")
    return sorted(set(ks))


def option_flag(group: argparse._ArgumentGroup, option: Option, **overrides: Any) -> None:
    """The flag of a metric's option (``--name``): its choices or type, default and document line."""
    text = option.doc.replace("``", "")
    kwargs: dict[str, Any] = {"default": option.default, "help": f"{text} (default: {option.default})"}
    if option.choices:
        kwargs["choices"] = option.choices
    elif option.annotation.startswith("int"):
        kwargs.update(type=int, metavar="N")
    elif option.annotation == "float":
        kwargs.update(type=float, metavar="X")
    kwargs.update(overrides)
    group.add_argument(option.flag, **kwargs)


def _comparison_flags(report: argparse.ArgumentParser) -> None:
    """The flags of a comparison of runs: ``compare``'s options marked for the command line, and more."""
    group = report.add_argument_group("comparing runs (two or more --run with --qrels)")
    for option in COMPARISON_OPTIONS["compare"]:
        if option.cli:  # --test, --correction, --alpha, ...: the options of embedmetrics.functional.compare
            overrides: dict[str, Any] = {}
            if option.name == "correction":  # the command line's `none` is the function's None
                choices = (*option.choices, "none")
                words = f"{', '.join(choices[:-1])} or {choices[-1]} (no correction)"
                help_text = f"multiple-comparison correction: {words} (default: {option.default})"
                overrides = {"choices": choices, "help": help_text}
            if option.name == "baseline":
                help_text = "a run's name (its file name without extension): each other run against it alone"
                overrides = {"metavar": "RUN", "help": help_text + ", the correction over those pairs"}
            option_flag(group, option, **overrides)
    group.add_argument(
        "--table-format", choices=TABLE_FORMATS, default="text",
        help="the table: text (default), markdown (GitHub), latex (booktabs) or csv (means and p-values)",
    )  # fmt: skip
    group.add_argument("--ci", action="store_true", help="show a bootstrap 95%% confidence interval per mean")
    group.add_argument(
        "--query-set",
        choices=("same", "intersection"),
        default="same",
        help="runs with different queries: refuse (same, default) or compare on the common ones",
    )


def _dense_flags(report: argparse.ArgumentParser) -> None:
    """The flags of dense retrieval: the metric's options marked for the command line, the corpus's
    reading (blocks, progress) and its checkpoints."""
    group = report.add_argument_group("dense retrieval (query embeddings against a corpus)")
    group.add_argument(
        "--queries", metavar="FILE", help="query embeddings (ids: an 'ids' array or FILE's .ids.txt sidecar)"
    )
    group.add_argument(
        "--corpus",
        metavar="PATH",
        help="document embeddings, read block by block (ids as for --queries): a file, or a directory of "
        ".npy/.npz shards, each with its ids",
    )
    for option in DENSE_OPTIONS["DenseRetrieval"]:
        if option.cli:  # --depth, --similarity: the metric's own options
            given = {"help": "length of the retrieved list (default: the largest --k)"}
            option_flag(group, option, **(given if option.name == "depth" else {}))
    group.add_argument("--save-run", metavar="FILE", help="write the retrieved lists as a TREC run file")
    group.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="save the scan's running lists in DIR as it goes; the same command run again resumes there",
    )
    group.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="seconds between two saves of --checkpoint (default: 30; 0: after every block)",
    )
    group.add_argument(
        "--block-rows",
        metavar="N",
        type=int,
        help="corpus rows read at a time (default: 64 MB of float32 rows)",
    )
    group.add_argument(
        "--progress",
        action="store_true",
        help="show the corpus scan's progress bar on stderr even when it is not a terminal",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``embedmetrics`` parser with its ``report`` and ``trec_eval`` subcommands."""
    parser = _Parser(
        prog="embedmetrics", description="Retrieval and embedding evaluation from the command line."
    )
    parser.add_argument("--version", action="version", version=f"embedmetrics {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help=(
            "evaluate labelled embeddings, two views, a TREC run and/or dense retrieval, or compare "
            "systems (two or more --run with --qrels: --run A --run B --qrels Q [--test t --ci], paired "
            "tests); print one table"
        ),
        description=(
            "Evaluate what you have on disk and print one table. Four input families, combinable: labelled "
            "embeddings (--embeddings --labels), two views (--view1 --view2), a TREC run (--run --qrels) "
            "and dense retrieval of query embeddings against a corpus (--queries --corpus --qrels). "
            "Comparing systems is a mode of its own, not combinable: two or more runs (--run A --run B "
            "--qrels Q, nothing else) give per-measure means, paired "
            "tests (--test), corrected p-values (--correction) and confidence intervals (--ci). "
            "Without input arguments, evaluates a built-in example (scikit-learn's digits: embeddings, "
            "views and a TREC run)."
        ),
        epilog="Exit status: 0 success, 2 bad input or arguments (one line on stderr).",
    )
    group = report.add_argument_group("embeddings with labels")
    group.add_argument("--embeddings", metavar="FILE", help="query embeddings (n, d): .npy, .npz, .pt, .pth")
    group.add_argument("--labels", metavar="FILE", help="their labels (n,): integers or strings")
    group.add_argument(
        "--reference", metavar="FILE", help="reference embeddings (default: the queries themselves)"
    )
    group.add_argument("--reference-labels", metavar="FILE", help="labels of the reference embeddings")
    group = report.add_argument_group("two views")
    group.add_argument("--view1", metavar="FILE", help="first view (n, d); row i pairs with row i of --view2")
    group.add_argument("--view2", metavar="FILE", help="second view (n, d)")
    group = report.add_argument_group("TREC run")
    group.add_argument(
        "--run",
        metavar="FILE",
        action="append",
        help="run file: qid Q0 docno rank score tag; two or more: compare the systems (see below)",
    )
    group.add_argument(
        "--qrels", metavar="FILE", help="qrels file: qid iter docno rel (or a BEIR .tsv with --queries)"
    )
    option_flag(
        group,
        TIES_OPTION,
        choices=REPORT_TIES,
        help="tied scores in the run: expected value over random tie orders (average, default), worst "
        "or best case, or trec_eval's order (docno descending)",
    )
    trec_eval_mode.add_flags(report)
    _comparison_flags(report)
    _dense_flags(report)
    _output_flags(report)
    _fuse_parser(commands)
    commands.add_parser(  # parsed by trec_eval_command (main hands it its arguments)
        "trec_eval", add_help=False, help="trec_eval's calling form: embedmetrics trec_eval [options] QRELS "
        "RUN [RUN ...] prints what trec_eval 10.0 (or 9.0.8: --trec-eval 9) prints, run after run",
    )  # fmt: skip
    return parser


def _fuse_parser(commands: Any) -> None:
    """``embedmetrics fuse --method M RUN RUN ... -o FUSED``: rank fusion (``embedmetrics.trec.fuse``)."""
    fuse = commands.add_parser(
        "fuse", help="rank fusion of runs into one TREC run (RRF, CombSUM, CombMNZ, Borda, ISR, ...)",
        description="Fuse two or more TREC runs into one, as ranx's fuse defines the methods; each list, and "
        "the fused one, ranked as trec_eval ranks it (score descending, then docno descending).",
        epilog="Exit status: 0 success, 2 bad input or arguments (one line on stderr).",
    )  # fmt: skip
    fuse.add_argument("runs", nargs="+", metavar="RUN", help="TREC run files (two or more)")
    fuse.add_argument("--method", required=True, help=f"one of {', '.join(FUSION_METHODS)} (or CombSUM, ...)")
    fuse.add_argument(
        "--norm",
        default="min-max",
        help=f"scores' normalisation: {', '.join(FUSION_NORMS)} or none (default: min-max)",
    )
    fuse.add_argument("--k", type=float, metavar="K", help="rrf's k (default: 60)")
    fuse.add_argument("--weights", metavar="W,W,...", help="wsum's weights, one per run, in order")
    fuse.add_argument("--depth", type=int, metavar="N", help="keep each query's first N documents")
    fuse.add_argument(
        "--tag", default="fused", help="the run tag written in the sixth column (default: fused)"
    )
    fuse.add_argument(
        "-o", "--output", required=True, metavar="FUSED", help="the fused run's file ('-': stdout)"
    )


def run_fuse(args: argparse.Namespace) -> int:
    """Fuse the runs and write the fused run as a TREC run (scores written exactly)."""
    from embedmetrics._io.trec_inputs import write_run
    from embedmetrics.trec import fuse

    if len(args.runs) < 2:
        raise ReportInputError(f"fuse needs at least 2 runs, got {len(args.runs)}.")
    if any(c.isspace() for c in args.tag) or not args.tag:
        raise ReportInputError(f"--tag must be one word (trec_eval reads the sixth field), got {args.tag!r}.")
    same = [r for r in args.runs if args.output != "-" and os.path.exists(args.output)
            and os.path.samefile(r, args.output)]  # fmt: skip
    if same:
        raise ReportInputError(f"-o {args.output} is one of the runs: it would be overwritten.")
    try:
        weights = None if args.weights is None else [float(w) for w in args.weights.split(",")]
    except ValueError:
        raise ReportInputError(
            f"--weights must be numbers separated by commas, got {args.weights!r}."
        ) from None
    try:
        fused = fuse(args.runs, args.method, norm=args.norm, weights=weights, depth=args.depth,
                     **({} if args.k is None else {"k": args.k}))  # fmt: skip
    except (ValueError, TypeError) as err:
        raise ReportInputError(as_flags(str(err))) from None
    write_run(args.output, fused, args.tag)
    sys.stderr.write(f"fused {len(args.runs)} runs ({args.method}): {args.output}\n")
    return 0


def _output_flags(report: argparse.ArgumentParser) -> None:
    """The report's other options: arrays' keys, cut-offs, the JSON and the figures."""
    group = report.add_argument_group("options")
    group.add_argument("--key", metavar="NAME", help="array to read from .npz files or .pt dicts")
    group.add_argument("--labels-key", metavar="NAME", help="array to read for labels (default: --key)")
    group.add_argument("--k", metavar="K,K,...", help="cut-offs (default 1,5,10, clipped to small data)")
    group.add_argument(
        "--json", metavar="PATH", help="also write the numbers as JSON ('-': JSON on stdout instead)"
    )
    group.add_argument("--plot", metavar="DIR", help="write figures into DIR (created if needed)")
    group.add_argument(
        "--plot-format", choices=PLOT_FORMATS, default="png", help="format of the figures (default: png)"
    )
    group.add_argument(
        "--dpi", metavar="N", type=int, default=100, help="resolution of the figures (default: 100)"
    )


def run() -> NoReturn:
    """The console script and ``python -m embedmetrics``: ``main()``, then leave at once.

    By then every output is written, closed and flushed (flushed again here); what is skipped is the
    interpreter's teardown of the imported torch, about 0.3 s of a command that takes a few seconds.
    An exception other than bad input still leaves through the interpreter, with its traceback.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a closed pipe (`... | head`): nothing left to write to
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 bad input; ``trec_eval``: trec_eval's)."""
    words = list(argv) if argv is not None else sys.argv[1:]
    if words[:1] == ["trec_eval"]:  # its own parser: trec_eval's options, getopt's way
        from embedmetrics._report.trec_eval_command import main as trec_eval_main

        return trec_eval_main(words[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(words)
        if args.command is None:
            raise ReportInputError(
                "choose a command: `embedmetrics report`, `embedmetrics trec_eval` or `embedmetrics fuse` "
                "(see `embedmetrics --help`)."
            )
        if args.command == "fuse":
            return run_fuse(args)
        ks = parse_ks(args.k) if args.k is not None else list(DEFAULT_K)  # None: the default, clipped
        runs = args.run or []
        if trec_eval_mode.requested(args) and not trec_eval_mode.comparing(args, runs):
            return trec_eval_mode.run_trec_eval(args, runs)
        if len(runs) < 2 and (args.baseline is not None or args.table_format != "text"):
            given = "--baseline" if args.baseline is not None else f"--table-format {args.table_format}"
            raise ReportInputError(f"{given} is an option of comparing runs: give two or more --run.")
        args.run = runs[0] if len(runs) == 1 else None
        if len(runs) > 1:  # comparing systems
            from embedmetrics._report.preflight import preflight_comparison

            preflight_comparison(args, runs)
            from embedmetrics._report.compare import run_comparison

            return run_comparison(args, runs, ks)
        trec = None
        if args.run is not None and args.queries is None:  # read the files while torch imports
            from embedmetrics._report.preflight import preflight, read_trec_while_importing

            preflight(args)
            trec = read_trec_while_importing(args)
        from embedmetrics._report.command import run_report

        return run_report(args, ks, trec)
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except ReportInputError as err:
        message = " ".join(str(err).split())
        sys.stderr.write(f"embedmetrics: error: {message}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
