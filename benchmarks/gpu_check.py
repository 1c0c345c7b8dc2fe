"""The prepared GPU check (``make gpu-check``): every check that needs a GPU, in one run, ending in one table.

In order, each part in a process of its own, under one deadline (``--budget``, 8 minutes by default):

1. the CUDA tests (``tests/integration/test_cuda.py``);
2. the contract suite on the device (``EMBEDMETRICS_TEST_DEVICE=cuda``, read by
   ``tests/contracts/_contract.py``), apart from its NumPy and host-only files;
3. the distributed contracts on two NCCL processes, one GPU each (``EMBEDMETRICS_TEST_BACKEND=nccl``,
   read by ``tests/_dist.py``), where two GPUs are present; else one line says why it is skipped;
4. ``benchmarks/run_all.py --device cuda --quick``.

Each test part prints one line (passed, failed, timed out; pytest's own summary); the run ends with one
table of the benchmark rows: ours, the bare product on the same device, ours over it, and whether the
values equal the peer's. Nothing is downloaded or installed: run it with the Python that has torch with
CUDA (``PYTHONPATH=src python3 benchmarks/gpu_check.py``, which ``make gpu-check`` does). On a machine
without CUDA it says so in one line and exits 0. ``--device cpu --dry-run`` runs every part on the CPU
at small sizes (the CUDA tests skip themselves): the suite runs it (``tests/integration/test_gpu_check.py``),
so the check cannot rot while no GPU is lent. Usage::

    PYTHONPATH=src python3 benchmarks/gpu_check.py                     # on a GPU machine
    PYTHONPATH=src python3 benchmarks/gpu_check.py --device cpu --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"

#: Contract files that hold no device question (NumPy in and out, the registry's and options' tables).
HOST_ONLY = ("test_numpy.py", "test_options.py", "test_registry.py")
#: The dry run's share of the contract suite: one metric, one contract (the cost is pytest's start).
DRY_CONTRACTS = ("tests/contracts/test_batches.py", "-k", "any_batch_split and RetrievalMAP")
#: The dry run's benchmark (``run_all.py --quick``, then these): one metric against its peer, small.
DRY_BENCH = ["--only", "bench_retrieval", "--script-args", "--queries 500 --metrics RetrievalMRR"]


@dataclass
class Part:
    """One step of the check: a command line, its environment additions, its share of the time, or the
    reason it is skipped (``skip``, then nothing runs)."""

    name: str
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    seconds: float = 60.0
    skip: str = ""


def pytest_part(name: str, args: list[str], env: dict[str, str], seconds: float) -> Part:
    """A pytest run of ``args`` (quiet, no cache, no plugin autoload beyond the project's settings)."""
    return Part(name, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env, seconds)


def plan(device: str, gpus: int, *, dry_run: bool, bench_json: str) -> list[Part]:
    """The parts, in order, for ``device`` with ``gpus`` CUDA devices visible."""
    on = {"EMBEDMETRICS_TEST_DEVICE": device}
    contracts = ["tests/contracts", *(f"--ignore=tests/contracts/{f}" for f in HOST_ONLY)]
    parts = [
        pytest_part("CUDA tests", ["tests/integration/test_cuda.py"], {}, 120.0),
        pytest_part(f"contract suite on {device}", list(DRY_CONTRACTS) if dry_run else contracts, on, 200.0),
    ]
    nccl = pytest_part(
        "distributed contracts, 2 NCCL processes",
        ["tests/contracts/test_distributed.py"],
        {**on, "EMBEDMETRICS_TEST_BACKEND": "nccl"},
        120.0,
    )
    if device == "cpu" or gpus < 2:
        nccl.skip = f"needs two CUDA devices, {gpus} found"
    parts.append(nccl)
    bench = [str(HERE / "run_all.py"), "--device", device, "--quick", "--json", bench_json]
    # the rest of the budget (about 6 of the 8 minutes): on an H200 the quick scripts took over 240 s
    parts.append(Part("benchmarks (run_all.py --quick)", [sys.executable, *bench], {}, float("inf")))
    if dry_run:
        parts[-1].argv += DRY_BENCH
    return parts


def summary(output: str) -> str:
    """The last line of a pytest run (``3 passed, 1 skipped in 2.1s``), the number of rows of a table that
    ends the output (``run_all.py``), or the last line of any other output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if lines and lines[-1].startswith("|"):
        return f"{sum(line.startswith('|') for line in lines) - 2} benchmark rows"
    return lines[-1].strip("= ") if lines else ""


def run_part(part: Part, left: float) -> tuple[str, str]:
    """Run ``part`` within ``left`` seconds: ``(status, detail)``, status one of ``passed``, ``FAILED``,
    ``TIMED OUT``, ``skipped``; the tail of a failing part's output goes to stderr."""
    if part.skip:
        return "skipped", part.skip
    limit = max(1.0, min(part.seconds, left))
    env = {**os.environ, **part.env}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        timeout = None if limit == float("inf") else limit  # --budget inf: no limit
        proc = subprocess.run(part.argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "TIMED OUT", f"stopped after {limit:.0f} s"
    if proc.returncode == 0:
        return "passed", summary(proc.stdout)
    print(f"--- {part.name}: the end of its output\n{(proc.stdout + proc.stderr)[-3000:]}", file=sys.stderr)
    return "FAILED", summary(proc.stdout) or f"exit code {proc.returncode}"


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} GB" if unit == "GB" else f"{value * 1e3:.1f} ms" if value < 0.1 else f"{value:.3f} s"


def table(rows: list[dict[str, Any]]) -> str:
    """The benchmark rows as one Markdown table: ours, the bare product on the device (``-`` where a row
    has none: memory rows, file readers), ours over it, and whether ours equals the peer (``-``: no peer)."""
    lines = [
        "| workload | device | ours | bare product | ours / bare | equal values |",
        "| --- | --- | ---: | ---: | ---: | :---: |",
    ]
    for row in rows:
        bare = row["bound_value"] if row.get("bound") and "product" in row["bound"] else None
        ratio = f"{row['ours'] / bare:.2f}x" if bare else "-"
        equal = {True: "yes", False: "NO", None: "-"}[row["equal"]]
        cells = [row["workload"], row["device"], _figure(row["ours"], row["unit"]), _figure(bare, "s")]
        lines.append("| " + " | ".join([*cells, ratio, equal]) + " |")
    return "\n".join(lines)


def machine_line(info: dict[str, Any]) -> str:
    """The machine the rows were measured on (``run_all.py``'s JSON), as one line."""
    gpu = f"; GPU {info['gpu']} (CUDA {info['cuda']})" if "gpu" in info else ""
    return f"Measured on {info['cpu']}, torch {info['torch']} ({info['cpu_capability']}){gpu}:"


def cuda_devices(device: str) -> int:
    """How many CUDA devices torch sees (0 without CUDA), for a ``cuda`` check; 0 for the CPU."""
    if device == "cpu":
        return 0
    try:
        import torch
    except ImportError:  # this Python has no torch: no CUDA either
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--dry-run", action="store_true", help="small parts: checks that every part runs")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check")
    args = parser.parse_args(argv)
    gpus = cuda_devices(args.device)
    if args.device == "cuda" and gpus == 0:
        print("gpu-check: no CUDA device on this machine (torch sees none): nothing to check.")
        return 0
    deadline = time.monotonic() + args.budget
    failed, status = False, "skipped"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        bench_json = str(Path(tmp) / "rows.json")
        for part in plan(args.device, gpus, dry_run=args.dry_run, bench_json=bench_json):
            start = time.monotonic()
            status, detail = run_part(part, deadline - start)
            failed |= status in ("FAILED", "TIMED OUT")
            print(f"{part.name}: {status} ({detail}; {time.monotonic() - start:.0f} s)", flush=True)
        saved = Path(bench_json)  # written whole after every script (renamed over the last one)
        found = json.loads(saved.read_text()) if saved.exists() else {}
    print()
    if found.get("scripts"):  # what each benchmark script took (those a timeout stopped are missing)
        print(
            "Times of the benchmark scripts: "
            + ", ".join(
                f"{s['script']} {s['seconds']:.0f} s{' (FAILED)' * s['failed']}" for s in found["scripts"]
            )
        )
    benchmarks_stopped = status == "TIMED OUT"  # the last part's: a failing run_all printed its errors
    for script in found.get("scripts", []) if benchmarks_stopped else []:
        if script["failed"]:
            print(f"--- {script['script']} failed: the end of its output\n{script['error']}", file=sys.stderr)
    if "machine" in found:
        print(machine_line(found["machine"]))
    print(table(found.get("rows", [])))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
