"""``make gpu-check`` (``benchmarks/gpu_check.py``) runs on the CPU as well, so it cannot rot while no GPU
is lent: the dry run runs every part at small sizes and ends in the one table; without CUDA the check says
so in one line and exits 0; the plan runs the NCCL contracts only where two GPUs are present."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
HEADER = "| workload | device | ours | bare product | ours / bare | equal values |"


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )


def test_dry_run_on_the_cpu_runs_every_part_and_ends_in_one_table() -> None:
    proc = _run("--device", "cpu", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    parts = [
        line for line in lines if line.startswith(("CUDA tests:", "contract suite", "distributed", "bench"))
    ]
    assert [p.split(":")[1].split()[0] for p in parts] == ["passed", "passed", "skipped", "passed"], parts
    assert "needs two CUDA devices, 0 found" in parts[2]
    assert " benchmark rows" in parts[3], parts[3]
    assert any(line.startswith("Times of the benchmark scripts: bench_") for line in lines), lines
    start = lines.index(HEADER)  # the table ends the output: header, rule, one row per benchmark row
    rows = lines[start + 2 :]
    assert rows, lines
    assert all(row.startswith("| ") and row.count(" | ") == HEADER.count(" | ") for row in rows), rows
    assert rows[0].split(" | ")[1] == "cpu"
    assert rows[0].split(" | ")[-1] in ("yes |", "NO |", "- |")


def test_without_cuda_it_says_so_in_one_line_and_exits_0() -> None:
    if torch.cuda.is_available():
        return  # the GPU machine runs the real check instead
    proc = _run()
    assert proc.returncode == 0
    assert proc.stdout.strip().splitlines() == [
        "gpu-check: no CUDA device on this machine (torch sees none): nothing to check."
    ]


def test_the_nccl_part_runs_where_two_gpus_are_present_only() -> None:
    check = _gpu_check()
    for gpus, skipped in ((0, True), (1, True), (2, False)):
        nccl = check.plan("cuda", gpus, dry_run=False, bench_json="rows.json")[2]
        assert bool(nccl.skip) == skipped, (gpus, nccl)
        assert nccl.env == {"EMBEDMETRICS_TEST_DEVICE": "cuda", "EMBEDMETRICS_TEST_BACKEND": "nccl"}
        assert nccl.argv[-1] == "tests/contracts/test_distributed.py"
    parts = check.plan("cuda", 1, dry_run=False, bench_json="rows.json")
    assert parts[1].env == {"EMBEDMETRICS_TEST_DEVICE": "cuda"}
    assert parts[3].argv[-5:] == ["--device", "cuda", "--quick", "--json", "rows.json"]


def test_the_table_has_the_bare_product_and_the_ratio() -> None:
    row = {"workload": "scan", "unit": "s", "ours": 0.3, "bound": "the bare product", "bound_value": 0.1,
           "equal": True, "device": "cuda"}  # fmt: skip
    memory = {"workload": "scan, peak memory", "unit": "GB", "ours": 0.1, "bound": None, "bound_value": None,
              "equal": None, "device": "cuda"}  # fmt: skip
    lines = _gpu_check().table([row, memory]).splitlines()
    assert lines[0] == HEADER
    assert lines[2] == "| scan | cuda | 0.300 s | 0.100 s | 3.00x | yes |"
    assert lines[3] == "| scan, peak memory | cuda | 0.100 GB | - | - | - |"


def test_the_benchmark_part_has_the_rest_of_the_budget() -> None:
    """The test parts have limits of their own; the benchmarks take whatever the budget has left (on an
    H200 the quick scripts took more than a fixed 240 s)."""
    check = _gpu_check()
    parts = check.plan("cuda", 1, dry_run=False, bench_json="rows.json")
    assert parts[-1].name.startswith("benchmarks")
    assert parts[-1].seconds == float("inf")
    assert all(part.seconds < float("inf") for part in parts[:-1])


def test_an_unbounded_budget_runs_every_part_without_a_limit() -> None:
    """``--budget inf``: the benchmark part's limit (the rest of the budget) is no limit, not an error."""
    check = _gpu_check()
    part = check.Part("echo", [sys.executable, "-c", "print(1)"], {}, float("inf"))
    assert check.run_part(part, float("inf"))[0] == "passed"


def test_a_stopped_benchmark_part_shows_its_rows_times_and_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmark part stopped by the time limit: the rows and times of the scripts it finished, and
    the error of one that failed (which run_all, stopped, never printed); a part that fails (run_all
    printed its errors itself) does not print them again."""
    import json

    check = _gpu_check()
    row = {"workload": "scan", "unit": "s", "ours": 0.3, "bound": "the bare product", "bound_value": 0.1,
           "equal": True, "device": "cuda"}  # fmt: skip
    scripts = [
        {"script": "bench_a.py", "seconds": 12.0, "failed": False, "error": ""},
        {"script": "bench_b.py", "seconds": 3.0, "failed": True, "error": "exit status 1: boom"},
    ]
    plan = check.plan
    for status, printed in (("TIMED OUT", True), ("FAILED", False)):

        def run_part(part: object, left: float, status: str = status) -> tuple[str, str]:
            json_path = part.argv[part.argv.index("--json") + 1]  # type: ignore[attr-defined]
            Path(json_path).write_text(json.dumps({"rows": [row], "scripts": scripts}))
            return status, "stopped"

        monkeypatch.setattr(check, "plan", lambda *a, **k: plan(*a, **k)[3:])  # the benchmark part
        monkeypatch.setattr(check, "run_part", run_part)
        monkeypatch.setattr(check, "cuda_devices", lambda device: 1)
        assert check.main(["--budget", "10"]) == 1
        out, err = capsys.readouterr()
        assert "Times of the benchmark scripts: bench_a.py 12 s, bench_b.py 3 s (FAILED)" in out
        assert "| scan | cuda |" in out
        assert ("boom" in err) == printed, status
        monkeypatch.undo()
