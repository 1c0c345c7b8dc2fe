"""Every benchmark in one run, and one table of ratios: ours against the peer and against the bound.

Each script runs in a process of its own (and runs its faiss-based peers in processes of their own);
every figure in a row was measured side by side in the same run. The peers are benchmark-only
extras: ``pip install -e ".[bench]"`` and ``pip install --no-deps nidl==0.0.2`` (``make bench`` installs
them); a peer that is not installed leaves its cells empty. Usage::

    python benchmarks/run_all.py                  # the CPU sizes (about 6 minutes on 2 cores)
    python benchmarks/run_all.py --device cuda    # the same rows on a GPU (CPU-only peers stay on the CPU)
    python benchmarks/run_all.py --quick          # smaller sizes, a minute: checks that everything runs
    python benchmarks/run_all.py --quick --only bench_neighbors --script-args "--n 1000"  # smaller still
    python benchmarks/run_all.py --json out.json  # the rows, machine-readable (rewritten after every script)

The table (and the JSON) opens with the machine it was measured on: the CPU's model, the instruction
set torch's kernels use (``torch.backends.cpu.get_cpu_capability()``), torch's intra-op threads, the
torch build and, on a GPU, the GPU. Columns: *ours* and *peer's* are seconds (or GB of peak memory
above the baseline for the memory rows); *vs peer* is the peer's time over ours (above 1: ours is
faster), or for memory ours as a share of the peer's; *bound* is what no exact method can beat (the
bare matrix product for the scans, half of it for a symmetric one); *ours vs bound* and *peer vs bound*
are each side's time over it. The bound is measured on the same machine in the same run, so these two
ratios are the figures that travel between machines: the speed of the bare product (AVX-512 or AVX2,
threads, BLAS) moves every time of a row, and the ratio *vs peer* with it where the two sides spend
different shares of their time in the product.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from _timing import ROW_PREFIX

HERE = Path(__file__).resolve().parent

#: (script, arguments, arguments with --quick, whether it takes --device)
PLAN: list[tuple[str, list[str], list[str], bool]] = [
    ("bench_retrieval.py", ["--quick"], ["--queries", "5000"], True),
    ("bench_embedding.py", ["--big", "0"], ["--n", "4096", "--big", "0"], True),
    ("bench_neighbors.py", ["--big", "0"], ["--n", "5000", "--big", "0", "--repeat", "1"], True),
    (
        "bench_dense.py",
        ["--queries", "2000", "--docs", "200000", "--dim", "128", "--repeat", "2"],
        ["--queries", "500", "--docs", "50000", "--dim", "128", "--repeat", "1"],
        True,
    ),
    (
        "bench_dense.py",
        ["--queries", "1000", "--docs", "100000", "--dim", "768", "--repeat", "2"],
        ["--queries", "200", "--docs", "20000", "--dim", "768", "--repeat", "1"],
        True,
    ),
    (
        "bench_representation.py",
        ["--skip-spectral", "--bank", "50000", "--queries", "5000"],
        ["--skip-spectral", "--bank", "5000", "--queries", "500"],
        True,
    ),
    ("bench_trec.py", ["--repeat", "5"], ["--queries", "2000", "--repeat", "1"], False),
    ("bench_trec_twins.py", [], ["--queries", "1000", "--repeat", "1"], False),
    ("bench_comparison.py", [], ["--queries", "2000", "--big", "0", "--resamples", "2000"], False),
    (
        "bench_sentence_transformers.py",
        ["--queries", "2000", "--docs", "200000", "--dim", "384", "--repeat", "2"],
        ["--queries", "200", "--docs", "20000", "--dim", "384", "--repeat", "1"],
        False,
    ),
]


def run_script(script: str, args: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The result rows a script printed, and the tail of its output when it failed."""
    proc = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True)
    rows = [
        json.loads(line[len(ROW_PREFIX) :])
        for line in proc.stdout.splitlines()
        if line.startswith(ROW_PREFIX)
    ]
    output = (proc.stderr or proc.stdout)[-1500:] or "(no output)"
    failure = "" if proc.returncode == 0 else f"exit status {proc.returncode}: {output}"
    return rows, failure


def write_json(path: str, found: dict[str, Any]) -> None:
    """``found`` as JSON at ``path``, whole or not at all (a temporary file renamed over it: a run killed
    while writing leaves the last complete file)."""
    temporary = Path(f"{path}.part")
    temporary.write_text(json.dumps(found, indent=1) + "\n")
    os.replace(temporary, path)


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; with its family and model numbers where the name is the
    generic one a virtual machine reports), else what ``platform`` knows."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def machine(device: str = "cpu") -> dict[str, Any]:
    """Where the figures come from: the CPU, the instruction set torch uses on it, torch's intra-op threads
    (the benchmark scripts run with the same default), the torch build, and the GPU where one is used."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = torch.version.cuda
    return info


def machine_line(info: dict[str, Any]) -> str:
    """The machine as the one line printed above the table."""
    line = (
        f"Machine: {info['cpu']}, {info['cores']} cores; torch reports {info['cpu_capability']}; "
        f"{info['threads']} threads; torch {info['torch']}"
    )
    if "gpu" in info:
        line += f"; GPU {info['gpu']} (CUDA {info['cuda']})"
    return line + "."


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    return f"{value:.2f} GB" if unit == "GB" else f"{value * 1e3:.1f} ms" if value < 0.1 else f"{value:.2f} s"


def _versus_peer(row: dict[str, Any]) -> str:
    """Time: the peer's time over ours (above 1: ours is faster); memory: ours over the peer's."""
    if row["peer_value"] is None:
        return ""
    if row["unit"] == "GB":
        return f"{row['ours'] / row['peer_value']:.2f} of it"
    return f"{row['peer_value'] / row['ours']:.2f}x"


def _versus_bound(value: float | None, bound: float | None) -> str:
    """A side's time over the bound's (the bare product): the figure that travels between machines."""
    return f"{value / bound:.2f}x" if value is not None and bound else ""


#: The table's header: every row's ratios to the bound next to its times.
HEADER = (
    "| workload | device | ours | peer | peer's | vs peer | bound | ours vs bound | peer vs bound "
    "| equal values |",
    "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | :---: |",
)


def table(rows: list[dict[str, Any]], info: dict[str, Any] | None = None) -> str:
    """The rows as one Markdown table, under the line naming the machine (``info``: ``machine()``)."""
    lines = [machine_line(info), ""] if info is not None else []
    lines += HEADER
    for row in rows:
        unit = row["unit"]
        bound = row["bound_value"]
        equal = {True: "yes", False: "NO", None: ""}[row["equal"]]
        cells = [
            row["workload"], row["device"], _figure(row["ours"], unit), row["peer"] or "",
            _figure(row["peer_value"], unit), _versus_peer(row), _figure(bound, unit),
            _versus_bound(row["ours"], bound), _versus_bound(row["peer_value"], bound), equal,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the scripts that run on a GPU)")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that every script runs")
    parser.add_argument("--only", default=None, help="comma-separated script names (bench_dense, ...)")
    parser.add_argument("--json", default=None, help="also write the machine and the rows to this JSON file")
    parser.add_argument("--ranx-python", default=None, help="a Python with ranx, for bench_comparison.py")
    parser.add_argument(
        "--script-args",
        default="",
        help='more arguments for every script, e.g. "--n 1000" (the later flag wins)',
    )
    args = parser.parse_args()
    only = None if args.only is None else {name.removesuffix(".py") for name in args.only.split(",")}
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    scripts: list[dict[str, Any]] = []
    info = machine(args.device)
    if args.json:  # from the start, then after every script: a run stopped midway leaves what it has
        write_json(args.json, {"machine": info, "rows": rows, "scripts": scripts})
    for script, full, quick, takes_device in PLAN:
        if only is not None and script.removesuffix(".py") not in only:
            continue
        script_args = (quick if args.quick else full) + (["--device", args.device] if takes_device else [])
        if script == "bench_comparison.py" and args.ranx_python:
            script_args += ["--ranx-python", args.ranx_python]
        script_args += shlex.split(args.script_args)
        start = time.perf_counter()
        print(f"{script} {' '.join(script_args)} ...", end=" ", file=sys.stderr, flush=True)
        found, failure = run_script(script, script_args)
        seconds = time.perf_counter() - start
        print(f"{seconds:.0f} s", file=sys.stderr, flush=True)
        rows.extend(found)
        scripts.append(
            {"script": script, "seconds": round(seconds, 1), "failed": bool(failure), "error": failure}
        )
        if failure:
            failures.append(f"{script} failed:\n{failure}")
        if args.json:
            write_json(args.json, {"machine": info, "rows": rows, "scripts": scripts})
    print(table(rows, info))
    if failures:
        print("\n\n".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
