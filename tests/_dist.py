"""Run a function in a real ``torch.distributed`` (gloo) process group, one OS process per rank.

The parent starts ``world_size`` fresh Python processes (``python _dist.py --worker ...``); each
joins a gloo group through a file rendezvous in the run's temporary directory (no TCP port is
chosen in advance, so two runs can never race for one; gloo's own connections use ports the OS
assigns, on the loopback interface), limits itself to one thread, loads the target function's
module *by file path* (so it works whatever pytest's import mode) and calls
``target(rank, world_size, **kwargs)``. Return values come back through
``torch.save`` files; they must be picklable (tensors, dicts, lists, numbers).

Nothing can hang: the group is created with a collective timeout, and the parent kills every
worker and raises :class:`DistributedRunError` (an ``AssertionError``, so pytest reports a failure
with the message) when a rank fails, when the wall-clock deadline passes, or when a rank exits
without a result. The message names the rank and carries the tail of its stderr.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

#: Seconds a collective may wait inside a worker before gloo aborts it.
COLLECTIVE_TIMEOUT_S = 60.0


class DistributedRunError(AssertionError):
    """A distributed run failed, timed out, or a rank died."""


def _src_root() -> str:
    """Directory that holds the ``embedmetrics`` package being tested (so workers import the same code)."""
    import embedmetrics

    return str(Path(embedmetrics.__file__).resolve().parents[1])


def _tail(path: Path, n_chars: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-n_chars:]


def run_distributed(
    target: Callable[..., Any],
    world_size: int,
    *,
    timeout: float = 120.0,
    collective_timeout: float = COLLECTIVE_TIMEOUT_S,
    kwargs: dict[str, Any] | None = None,
) -> list[Any]:
    """Run ``target(rank, world_size, **kwargs)`` on ``world_size`` gloo ranks; return the per-rank results.

    ``target`` must be a module-level function of an importable file. Raises
    :class:`DistributedRunError` (never hangs) if any rank raises, dies, or the run exceeds ``timeout``
    seconds of wall-clock time.
    """
    file = inspect.getsourcefile(target)
    if file is None or target.__qualname__ != target.__name__:
        raise ValueError(f"`target` must be a module-level function, got {target!r}.")
    with tempfile.TemporaryDirectory(prefix="embedmetrics-dist-") as tmp:
        tmpdir = Path(tmp)
        torch.save(kwargs or {}, tmpdir / "kwargs.pt")
        env = dict(os.environ)
        env.update(
            GLOO_SOCKET_IFNAME="lo",
            WORLD_SIZE=str(world_size),
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([_src_root(), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []
        try:
            for rank in range(world_size):
                log = tmpdir / f"rank{rank}.log"
                logs.append(log)
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    str(Path(file).resolve()),
                    target.__name__,
                    str(rank),
                    str(world_size),
                    str(collective_timeout),
                    str(tmpdir),
                ]
                rank_env = {**env, "RANK": str(rank)}
                with log.open("wb") as fh:
                    procs.append(subprocess.Popen(cmd, env=rank_env, stdout=fh, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + timeout
            while True:
                codes = [p.poll() for p in procs]
                failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    # give the other ranks a moment to report their own error, then stop them
                    time.sleep(1.0)
                    r = failed[0]
                    raise DistributedRunError(
                        f"rank {r} of {world_size} exited with code {codes[r]} running "
                        f"{target.__name__}; its output:\n{_tail(logs[r])}"
                    )
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    pending = [r for r, c in enumerate(codes) if c is None]
                    detail = "\n".join(f"--- rank {r} output:\n{_tail(logs[r], 1500)}" for r in pending)
                    raise DistributedRunError(
                        f"{target.__name__} on {world_size} ranks did not finish within {timeout:.0f} s "
                        f"(ranks {pending} still running: deadlock or hang); workers were killed.\n{detail}"
                    )
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
        results = []
        for rank in range(world_size):
            out = tmpdir / f"result{rank}.pt"
            if not out.exists():
                msg = f"rank {rank} exited without a result; output:\n{_tail(logs[rank])}"
                raise DistributedRunError(msg)
            results.append(torch.load(out, weights_only=False))
        return results


def _worker(file: str, name: str, rank: int, world: int, collective_timeout: float, tmpdir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location(f"_dist_target_{Path(file).stem}", file)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    target = getattr(module, name)
    kwargs = torch.load(Path(tmpdir) / "kwargs.pt", weights_only=False)
    backend = os.environ.get("EMBEDMETRICS_TEST_BACKEND", "gloo")  # ``nccl``: one GPU per rank
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=(Path(tmpdir) / "rendezvous").resolve().as_uri(),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=collective_timeout),
    )
    try:
        result = target(rank, world, **kwargs)
        torch.save(result, Path(tmpdir) / f"result{rank}.pt.tmp")
        os.replace(Path(tmpdir) / f"result{rank}.pt.tmp", Path(tmpdir) / f"result{rank}.pt")
        dist.barrier()  # nobody tears the group down while a peer is still in a collective
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs=6, required=True)
    ns = parser.parse_args()
    f, n, r, w, ct, d = ns.worker
    _worker(f, n, int(r), int(w), float(ct), d)
    # the result is on disk and the group torn down: skip the interpreter's teardown, where a library's
    # native threads (a tokenizer's pool, a loader's progress thread) can abort the process at exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
