"""Every benchmark in one run, and one table of ratios: ours against the peer and against the bound.

Each script runs in a process of its own (and runs its faiss-based peers in processes of their own);
every figure in a row was measured side by side in the same run. The peers are benchmark-only
extras: ``pip install -e ".[bench]"`` and ``pip install --no-deps nidl==0.0.2`` (``make bench`` installs
them); a peer that is not installed leaves its cells empty. Usage::

    python benchmarks/run_all.py                  # the CPU sizes (about 6 minutes on 2 cores)
    python benchmarks/run_all.py --device cuda    # the same rows on a GPU (CPU-only peers stay on the CPU)
    python benchmarks/run_all.py --quick          # smaller sizes, a minute: checks that everything runs
    python benchmarks/run_all.py --json out.json  # the rows, machine-readable

Columns: *ours* and *peer's* are seconds (or GB of peak memory above the baseline for the memory rows);
*vs peer* is the peer's time over ours (above 1: ours is faster), or for memory ours as a share of the
peer's; *vs bound* is ours over the bound (the bare matrix product for the scans: no exact method can take
less).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
    ("bench_trec.py", ["--repeat", "5"], ["--queries", "2000", "--repeat", "1"], False),
    ("bench_comparison.py", [], ["--resamples", "2000", "--repeat", "1"], False),
]


def run_script(script: str, args: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The result rows a script printed, and the tail of its output when it failed."""
    proc = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True)
    rows = [
        json.loads(line[len(ROW_PREFIX) :])
        for line in proc.stdout.splitlines()
        if line.startswith(ROW_PREFIX)
    ]
    failure = "" if proc.returncode == 0 else (proc.stderr or proc.stdout)[-1500:]
    return rows, failure


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


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as one Markdown table."""
    lines = [
        "| workload | device | ours | peer | peer's | vs peer | bound | vs bound | equal values |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | :---: |",
    ]
    for row in rows:
        unit = row["unit"]
        bound = row["bound_value"]
        equal = {True: "yes", False: "NO", None: ""}[row["equal"]]
        cells = [
            row["workload"], row["device"], _figure(row["ours"], unit), row["peer"] or "",
            _figure(row["peer_value"], unit), _versus_peer(row), _figure(bound, unit),
            f"{row['ours'] / bound:.2f}x" if bound else "", equal,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the scripts that run on a GPU)")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that every script runs")
    parser.add_argument("--only", default=None, help="comma-separated script names (bench_dense, ...)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--ranx-python", default=None, help="a Python with ranx, for bench_comparison.py")
    args = parser.parse_args()
    only = None if args.only is None else {name.removesuffix(".py") for name in args.only.split(",")}
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    for script, full, quick, takes_device in PLAN:
        if only is not None and script.removesuffix(".py") not in only:
            continue
        script_args = (quick if args.quick else full) + (["--device", args.device] if takes_device else [])
        if script == "bench_comparison.py" and args.ranx_python:
            script_args += ["--ranx-python", args.ranx_python]
        start = time.perf_counter()
        print(f"{script} {' '.join(script_args)} ...", end=" ", file=sys.stderr, flush=True)
        found, failure = run_script(script, script_args)
        print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        rows.extend(found)
        if failure:
            failures.append(f"{script} failed:\n{failure}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if failures:
        print("\n\n".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
