"""What ``embedmetrics report`` checks before any work, without importing torch.

``preflight`` rejects options that do not go together and outputs that could not be written, so
that a bad command fails at once. ``read_trec_while_importing`` reads a TREC run and its qrels and
joins them while another thread imports the evaluation code (torch above all, about a second and a
half): reading and joining are mostly Arrow's and NumPy's native code, which runs beside the import
instead of after it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import threading

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import JoinedRun, join_run, read_qrels, read_run
from embedmetrics._report import output

#: The modules whose import the TREC files are read beside (the command, and the metrics it calls).
EVALUATION_MODULES = ("embedmetrics._report.command", "embedmetrics.functional")


def preflight(args: argparse.Namespace) -> None:
    """Every check that needs no input file: option pairs, the JSON path, the plot directory."""
    check_arguments(args)
    _check_outputs(args)


def _check_outputs(args: argparse.Namespace) -> None:
    """The JSON path is writable, the plot directory exists (created) and matplotlib is there."""
    if args.json not in (None, "-"):
        output.check_writable(args.json)  # before the work, not after it
    if args.plot is not None:
        from embedmetrics._report import plots

        plots._pyplot()  # fail early (exit 2) when matplotlib is missing
        try:
            os.makedirs(args.plot, exist_ok=True)
        except OSError as err:
            reason = err.strerror or err
            raise ReportInputError(f"{args.plot}: cannot create the plot directory: {reason}.") from None


def preflight_comparison(args: argparse.Namespace, runs: list[str]) -> None:
    """The checks of a comparison of runs (``--run`` twice or more): only runs and qrels, writable
    outputs."""
    if args.qrels is None:
        raise ReportInputError(f"comparing {len(runs)} runs needs --qrels too.")
    others = {"--embeddings": args.embeddings, "--view1": args.view1, "--queries": args.queries}
    given = [flag for flag, value in others.items() if value is not None]
    if given:
        raise ReportInputError(f"comparing runs takes runs and --qrels only; got {', '.join(given)} too.")
    if args.dpi < 1:
        raise ReportInputError(f"--dpi must be a positive number of dots per inch, got {args.dpi}.")
    _check_outputs(args)


def check_arguments(args: argparse.Namespace) -> None:
    """Reject options that do not go together (one message, exit status 2)."""
    pairs = (
        ("--embeddings", args.embeddings, "--labels", args.labels),
        ("--reference", args.reference, "--reference-labels", args.reference_labels),
        ("--view1", args.view1, "--view2", args.view2),
        ("--run", args.run, "--qrels", args.qrels),
    )
    for first, a, second, b in pairs:
        if first == "--run" and args.queries is not None:
            continue
        if (a is None) != (b is None):
            given, missing = (first, second) if a is not None else (second, first)
            raise ReportInputError(f"{given} needs {missing} too.")
    if (args.queries is None) != (args.corpus is None):
        given, missing = ("--queries", "--corpus") if args.queries is not None else ("--corpus", "--queries")
        raise ReportInputError(f"{given} needs {missing} too.")
    if args.queries is not None and args.qrels is None:
        raise ReportInputError("--queries and --corpus need --qrels too.")
    if args.dpi < 1:
        raise ReportInputError(f"--dpi must be a positive number of dots per inch, got {args.dpi}.")
    if args.queries is not None and args.run is not None:
        raise ReportInputError(
            "--run evaluates a run file, --queries/--corpus retrieve one: give one of them."
        )
    if args.save_run is not None and args.queries is None:
        raise ReportInputError("--save-run writes the run that --queries/--corpus retrieve; give those too.")
    if args.reference is not None and args.embeddings is None:
        raise ReportInputError("--reference needs --embeddings and --labels (the queries) too.")
    any_input = any(v is not None for v in (args.embeddings, args.view1, args.run, args.queries))
    if not any_input and (args.key is not None or args.labels_key is not None):
        raise ReportInputError(
            "--key/--labels-key select arrays in .npz/.pt inputs; no input file was given."
        )


def read_trec_while_importing(args: argparse.Namespace) -> JoinedRun:
    """The run and qrels of ``args``, read and joined while a thread imports ``EVALUATION_MODULES``.

    The thread only warms the import: an import error is left for the caller's own import to raise,
    and a reading error is raised here once the thread is done, as without it.
    """
    worker = threading.Thread(target=_import_quietly, args=EVALUATION_MODULES, daemon=True)
    worker.start()
    try:
        return read_and_join(args)
    finally:
        worker.join()


def read_and_join(args: argparse.Namespace) -> JoinedRun:
    """``args.run`` joined with ``args.qrels`` (trec_eval's tie order with ``--ties trec_eval``)."""
    return join_run(read_run(args.run), read_qrels(args.qrels), trec_eval_ties=args.ties == "trec_eval")


def _import_quietly(*names: str) -> None:
    with contextlib.suppress(BaseException):  # the caller's own import reports a failure
        for name in names:
            importlib.import_module(name)
