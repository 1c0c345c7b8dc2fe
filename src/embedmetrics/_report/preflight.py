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
import mmap
import os
import pickle
import sys
import threading

import numpy as np

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import JoinedRun, Qrels, Run, join_run, read_qrels, read_run
from embedmetrics._io.trec_arrow import arrow_modules
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
    """The run and qrels of ``args``, read and joined while ``EVALUATION_MODULES`` are imported.

    On Linux, where the process has not imported torch yet (the command line), a forked child reads
    and joins (on another core: the import and the reading never wait for each other's lock) and sends
    the arrays back; otherwise a thread imports while this one reads. Either way only the import is
    warmed: an import error is left for the caller's own import to raise, and a reading error is
    raised here, as without it.
    """
    if sys.platform.startswith("linux") and "torch" not in sys.modules:
        return _read_in_child(args)
    worker = threading.Thread(target=_import_quietly, args=EVALUATION_MODULES, daemon=True)
    worker.start()
    try:
        return read_and_join(args)
    finally:
        worker.join()


def _read_in_child(args: argparse.Namespace) -> JoinedRun:
    """``read_and_join(args)`` in a forked child while this process imports. The child writes the joined
    arrays into memory shared with this process (no copy through a pipe: 0.1 s for 2M rows) and sends
    the rest, or the message of a ``ReportInputError``, through a pipe. Any other failure of the child
    is read again here, so that it raises with its own traceback."""
    arrow_modules()  # imported here, where there is time to spare, not on the child's longer path
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        shared: SharedRows | None = SharedRows(_most_rows(args))
    except (OSError, ValueError, OverflowError):  # no room for such a mapping: the pipe carries the rows
        shared = None
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, send, and leave (whatever happens) without the parent's exit handlers
        try:
            os.close(readable)
            _send(args, writable, shared)
        finally:
            os._exit(0)
    os.close(writable)
    _import_quietly(*EVALUATION_MODULES)
    with os.fdopen(readable, "rb") as incoming:
        try:
            kind, value = pickle.load(incoming)
        except EOFError:  # the child died before it could answer
            kind, value = "failed", None
    # reaped in the background: the child's exit (freeing its memory) is not this process' to wait for
    threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
    if kind == "error":
        raise ReportInputError(str(value))
    if kind == "shared" and shared is not None:
        return shared.joined(*value)
    return value if isinstance(value, JoinedRun) else read_and_join(args)


def _send(args: argparse.Namespace, writable: int, shared: SharedRows | None) -> None:
    """The child's side of ``_read_in_child``: the joined arrays (in ``shared`` where they fit), the
    message of a bad input, or ``"failed"`` (the parent reads again to raise the error itself)."""
    try:
        joined = read_and_join(args)
        result: tuple[str, object] = ("joined", joined)
        if shared is not None and shared.hold(joined):
            result = (
                "shared",
                (joined.preds.size, joined.query_ids, joined.n_run_queries, joined.n_qrels_queries),
            )
    except ReportInputError as err:
        result = ("error", str(err))
    except BaseException:
        result = ("failed", None)
    with os.fdopen(writable, "wb") as out:
        pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)


def _most_rows(args: argparse.Namespace) -> int:
    """At most how many rows the join of ``args``' files can have: a run line has at least 12 bytes (six
    fields), a qrels line 8 (four); every qrels line can add a row (a relevant document not retrieved)."""
    try:
        return os.path.getsize(args.run) // 12 + os.path.getsize(args.qrels) // 8 + 1
    except OSError:
        return 1  # the child's reading says what is wrong with the file


class SharedRows:
    """Memory shared with a forked child for the four row arrays of a ``JoinedRun`` (anonymous pages:
    the ones never written cost nothing)."""

    COLUMNS = (("preds", np.float64), ("target", np.int64), ("indexes", np.int64), ("retrieved", np.bool_))

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.memory = mmap.mmap(-1, rows * sum(np.dtype(t).itemsize for _, t in self.COLUMNS))

    def _views(self, n: int) -> list[np.ndarray]:
        views, offset = [], 0
        for _, dtype in self.COLUMNS:
            views.append(np.frombuffer(self.memory, dtype=dtype, count=n, offset=offset))
            offset += self.rows * np.dtype(dtype).itemsize
        return views

    def hold(self, joined: JoinedRun) -> bool:
        """Write ``joined``'s rows (the child); ``False`` where they do not fit."""
        n = joined.preds.size
        if n > self.rows:
            return False
        for view, (name, _) in zip(self._views(n), self.COLUMNS):
            view[:] = getattr(joined, name)
        return True

    def joined(self, n: int, query_ids: list[str], n_run: int, n_qrels: int) -> JoinedRun:
        """The ``JoinedRun`` the child wrote (this process: its arrays are views of the shared memory)."""
        preds, target, indexes, retrieved = self._views(n)
        return JoinedRun(preds, target, indexes, retrieved, query_ids, n_run, n_qrels)


def read_and_join(args: argparse.Namespace) -> JoinedRun:
    """``args.run`` joined with ``args.qrels`` as the report's options ask (``join_as_asked``)."""
    return join_as_asked(read_run(args.run), read_qrels(args.qrels), args)


def join_as_asked(run: Run, qrels: Qrels, args: argparse.Namespace) -> JoinedRun:
    """``run`` joined with ``qrels``: in trec_eval's tie order with ``--ties trec_eval``, its scores compared
    as the ``--trec-eval`` version stores them (10.0's doubles, 9.0.8's single precision)."""
    return join_run(run, qrels, trec_eval_ties=args.ties == "trec_eval", trec_eval=args.trec_eval)


def _import_quietly(*names: str) -> None:
    with contextlib.suppress(BaseException):  # the caller's own import reports a failure
        for name in names:
            importlib.import_module(name)
