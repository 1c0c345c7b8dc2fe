"""``report --checkpoint DIR``: the running lists of a streamed corpus, saved as the scan goes.

Every ``--checkpoint-every`` seconds (and at the end) the running lists of the dense scan
(``RunningLists.as_dict()``) are written to ``DIR/dense_lists.pt`` with the number of corpus rows done,
the corpus's fingerprint (each shard's name, size, modification time, shape and dtype, and its ids
file's) and the settings (cut-offs, depth, similarity, ties, run, the queries' and qrels' files). The
file is written atomically (``embedmetrics._engine.dense.saved``), so a process killed at any moment
leaves the last complete checkpoint. The same command run again reads it
and goes on from the next row; the lists of disjoint parts merge exactly, so the output is that of an
uninterrupted run. A checkpoint of another corpus or of other settings is refused (``ReportInputError``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from embedmetrics._engine.dense.measures import DenseOptions
from embedmetrics._engine.dense.saved import read_state, write_state
from embedmetrics._engine.dense.stream import RunningLists, StreamQueries
from embedmetrics._io.errors import ReportInputError

#: The checkpoint file in the ``--checkpoint`` directory.
FILE_NAME = "dense_lists.pt"
#: The layout of the file; another is refused.
FORMAT = 1


def file_fingerprint(path: str) -> dict[str, Any]:
    """Name, size and modification time of an input file (``None`` when there is none)."""
    if not os.path.exists(path):
        return {"file": os.path.basename(path), "exists": False}
    info = os.stat(path)
    return {"file": os.path.basename(path), "size": int(info.st_size), "mtime_ns": int(info.st_mtime_ns)}


def stream_settings(opts: DenseOptions, dtype: torch.dtype, inputs: dict[str, Any]) -> dict[str, Any]:
    """Everything the running lists depend on: the options, the dtype, the input files' fingerprints."""
    return {
        "format": FORMAT,
        "k": list(opts.ks),
        "depth": opts.depth,
        "similarity": opts.similarity,
        "ties": opts.ties,
        "exclude_self": opts.exclude_self,
        "return_run": opts.return_run,
        "dtype": str(dtype).replace("torch.", ""),
        **inputs,
    }


#: The flag of each setting, for messages.
FLAGS = {"k": "--k", "depth": "--depth", "similarity": "--similarity", "ties": "--ties", "key": "--key",
         "return_run": "writing a run (--save-run)"}  # fmt: skip


def _difference(saved: dict[str, Any], wanted: dict[str, Any]) -> Optional[str]:
    """What differs between two settings, in words (``None``: nothing)."""
    for name in wanted:
        old, new = saved.get(name), wanted[name]
        if old == new:
            continue
        if name == "corpus":
            return _corpus_difference(old or [], new)
        if isinstance(new, dict):
            return f"the {name} file {new.get('file')!r} is not the one it was made with"
        return f"{FLAGS.get(name, name)} {new!r} here, {old!r} in the checkpoint"
    return None


def _corpus_difference(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    if len(old) != len(new):
        return f"the corpus has {len(new)} files, the checkpoint's had {len(old)}"
    for before, now in zip(old, new):
        if before != now:
            changed = [k for k in now if before.get(k) != now[k]]
            return f"corpus file {now['file']!r} differs ({', '.join(changed)})"
    return "the corpus differs"


@dataclass
class Checkpoint:
    """Where the running lists go (``directory``), for which settings, and how often (seconds)."""

    directory: str
    settings: dict[str, Any]
    every: float = 30.0
    last: float = field(default_factory=time.monotonic)

    @property
    def path(self) -> str:
        return os.path.join(self.directory, FILE_NAME)

    def resume(self, fixed: StreamQueries, n_rows: int) -> tuple[int, RunningLists]:
        """The rows done and the running lists saved, or ``(0, empty lists)`` without a checkpoint.
        A checkpoint of other settings, another corpus or another layout is refused."""
        empty = fixed.empty_lists()
        if not os.path.exists(self.path):
            return 0, empty
        state = self._read()
        why = _difference(state.get("settings", {}), self.settings)
        if why is not None:
            raise ReportInputError(
                f"{self.path}: this checkpoint was made for other inputs or settings ({why}); "
                "delete it or choose another --checkpoint directory."
            )
        try:
            lists = RunningLists(**state["lists"])
            done = int(state["rows_done"])
        except (KeyError, TypeError):
            raise ReportInputError(f"{self.path}: not a checkpoint of embedmetrics report.") from None
        shapes = {name: t.shape for name, t in empty.as_dict().items()}
        if {name: t.shape for name, t in lists.as_dict().items()} != shapes or not 0 <= done <= n_rows:
            raise ReportInputError(f"{self.path}: the saved lists do not fit these queries; delete it.")
        return done, lists

    def _read(self) -> dict[str, Any]:
        try:
            state = read_state(self.path)
        except ValueError as err:
            raise ReportInputError(f"{err} Delete it to start the scan over.") from None
        return state or {}

    def save(self, rows_done: int, lists: RunningLists, *, now: bool = False) -> None:
        """Write the lists (atomically) when ``every`` seconds have passed since the last save, or ``now``."""
        if not now and time.monotonic() - self.last < self.every:
            return
        state = {"settings": self.settings, "rows_done": rows_done, "lists": lists.as_dict()}
        try:
            write_state(self.path, state)
        except OSError as err:
            raise ReportInputError(
                f"{self.path}: cannot write the checkpoint: {err.strerror or err}."
            ) from None
        self.last = time.monotonic()


def open_checkpoint(directory: str, settings: dict[str, Any], every: float) -> Checkpoint:
    """The checkpoint of ``directory`` (created if needed)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise ReportInputError(
            f"{directory}: cannot create the checkpoint directory: {err.strerror or err}."
        ) from None
    return Checkpoint(directory, settings, every)
