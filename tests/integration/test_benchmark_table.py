"""``make bench``: every script ``benchmarks/run_all.py`` plans exists and takes its arguments, and the
rows the scripts print come back as one table (the peers are not installed here: their cells stay
empty)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _parser_of(script: Path) -> set[str]:
    """The ``--flags`` a benchmark script's parser declares (read from its source)."""
    text = script.read_text()
    parts = (part.lstrip() for part in text.split("add_argument(")[1:])
    return {part.split('"')[1] for part in parts if part.startswith('"--')}


def test_every_planned_script_exists_and_takes_its_arguments() -> None:
    run_all = _load("run_all")
    for script, full, quick, takes_device in run_all.PLAN:
        path = BENCHMARKS / script
        assert path.exists(), script
        flags = _parser_of(path)
        given = {a for a in (*full, *quick) if a.startswith("--")} | ({"--device"} if takes_device else set())
        assert given <= flags, (script, given - flags)


def test_rows_become_one_table() -> None:
    run_all = _load("run_all")
    rows = [
        {"workload": "kNN", "unit": "s", "ours": 1.0, "peer": "PML", "peer_value": 1.5, "bound": "product",
         "bound_value": 0.5, "equal": True, "device": "cpu"},
        {"workload": "dense, peak memory", "unit": "GB", "ours": 0.1, "peer": "chunked", "peer_value": 0.4,
         "bound": None, "bound_value": None, "equal": False, "device": "cpu"},
        {"workload": "test", "unit": "s", "ours": 0.002, "peer": None, "peer_value": None, "bound": None,
         "bound_value": None, "equal": None, "device": "cuda"},
        {"workload": "scan", "unit": "s", "ours": 0.3, "peer": None, "peer_value": None, "bound": "product",
         "bound_value": 0.1, "equal": None, "device": "cpu"},
    ]  # fmt: skip
    lines = run_all.table(rows).splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == [
        "workload", "device", "ours", "peer", "peer's", "vs peer", "bound", "ours vs bound", "peer vs bound",
        "equal values",
    ]  # fmt: skip
    assert all(line.count("|") == len(header) + 1 for line in lines)
    assert lines[2] == "| kNN | cpu | 1.00 s | PML | 1.50 s | 1.50x | 0.50 s | 2.00x | 3.00x | yes |"
    assert lines[3] == "| dense, peak memory | cpu | 0.10 GB | chunked | 0.40 GB | 0.25 of it |  |  |  | NO |"
    assert lines[4] == "| test | cuda | 2.0 ms |  |  |  |  |  |  |  |"
    assert lines[5] == "| scan | cpu | 0.30 s |  |  |  | 0.10 s | 3.00x |  |  |"


def test_the_table_and_the_json_name_the_machine(tmp_path: Path) -> None:
    """Times are machine-bound: the table opens with the CPU, the instruction set torch uses, the threads and
    the torch build, and the JSON holds the same next to the rows."""
    import torch

    run_all = _load("run_all")
    info = run_all.machine("cpu")
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["threads"] == torch.get_num_threads()
    assert info["torch"] == torch.__version__
    assert info["cpu"]
    assert info["cores"] >= 1
    row = {"workload": "kNN", "unit": "s", "ours": 1.0, "peer": None, "peer_value": None, "bound": "product",
           "bound_value": 0.5, "equal": None, "device": "cpu"}  # fmt: skip
    lines = run_all.table([row], info).splitlines()
    assert lines[0] == run_all.machine_line(info)
    for part in (info["cpu"], f"torch reports {info['cpu_capability']}", f"{info['threads']} threads",
                 f"torch {info['torch']}"):  # fmt: skip
        assert part in lines[0], part
    assert lines[1] == ""
    assert lines[2:4] == list(run_all.HEADER)
    assert "GPU" not in lines[0]
    gpu = run_all.machine_line({**info, "device": "cuda", "gpu": "NVIDIA H100", "cuda": "12.8"})
    assert gpu.endswith("; GPU NVIDIA H100 (CUDA 12.8).")

    out = tmp_path / "rows.json"
    script = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import run_all; "
        "run_all.run_script = lambda script, args: ([], ''); "
        "sys.argv = ['run_all.py', '--only', 'bench_comparison', '--json', sys.argv[2]]; run_all.main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(BENCHMARKS), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == run_all.machine_line(info)
    saved = json.loads(out.read_text())
    assert saved == {"machine": info, "rows": [], "scripts": saved["scripts"]}
    assert [s["script"] for s in saved["scripts"]] == ["bench_comparison.py"]


def test_every_table_of_the_benchmarks_page_names_its_machine() -> None:
    """docs/benchmarks.md: every table has make bench's columns (the ratios to the bound included) and a
    machine line above it (CPU, the instruction set torch reports, threads, torch build)."""
    run_all = _load("run_all")
    page = (BENCHMARKS.parent / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    blocks = page.split("\n\n")
    tables = [i for i, block in enumerate(blocks) if block.startswith("| workload")]
    assert tables
    for i in tables:
        lines = blocks[i].splitlines()
        assert tuple(lines[:2]) == run_all.HEADER
        assert all(line.count("|") == lines[0].count("|") for line in lines)
        above = blocks[i - 1]
        assert above.startswith("Machine: "), above
        for part in ("torch reports ", " threads", "torch 2."):
            assert part in above, (part, above)


@pytest.mark.timeout(120)
def test_a_script_prints_rows_that_run_all_collects() -> None:
    """The row protocol end to end, on the one script that needs no peer (ranx is optional: its row comes
    first where it is installed)."""
    run_all = _load("run_all")
    small = ["--queries", "2000", "--sizes", "1000,2000", "--big", "0", "--resamples", "200", "--repeat", "1"]
    rows, failure = run_all.run_script("bench_comparison.py", small)
    assert failure == ""
    names = [r["workload"].split(",")[0] for r in rows]
    assert names[-3:] == ["randomization test", "randomization test", "bootstrap test"]  # one a size
    assert names[:-3] in ([], ["randomization test"] * 2)  # ranx: the small pair and the large one
    assert all(r["ours"] > 0 for r in rows)
    assert all(r["unit"] == "s" for r in rows)


def test_the_json_is_written_after_every_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A run stopped during a script (``gpu_check.py``'s time limit) leaves the rows and the times of the
    scripts before it in ``--json``."""
    run_all = _load("run_all")
    row = {"workload": "w", "unit": "s", "ours": 1.0, "peer": None, "peer_value": None}
    row |= {"bound": None, "bound_value": None, "equal": None, "device": "cpu"}
    done: list[str] = []

    def run_script(script: str, args: list[str]) -> tuple[list[dict[str, object]], str]:
        if done:
            raise KeyboardInterrupt  # stopped during the second script
        done.append(script)
        return [row], ""

    out = tmp_path / "rows.json"
    monkeypatch.setattr(run_all, "run_script", run_script)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--quick", "--json", str(out)])
    with pytest.raises(KeyboardInterrupt):
        run_all.main()
    found = json.loads(out.read_text())
    assert found["rows"] == [row]
    assert [s["script"] for s in found["scripts"]] == done
    assert found["machine"]["device"] == "cpu"


def test_the_embedding_bench_s_peer_algorithm_stays_on_the_data_s_device() -> None:
    """Without nidl, ``bench_embedding.py --device cuda`` times the full-matrix algorithm on the GPU: its
    tensors are made on the data's device (a ``meta`` device here; a CPU ``arange`` made it fail)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        bench = _load("bench_embedding")
        z = torch.randn(8, 4, device="meta")
        assert bench.full_contrastive(z, z, (1, 2)).device.type == "meta"
        assert bench.full_uniformity(z, z).device.type == "meta"
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_a_script_that_fails_silently_is_a_failure(tmp_path: Path) -> None:
    """A script that exits non-zero without a word (killed, ``os._exit``) is recorded as failed, with
    its exit status."""
    run_all = _load("run_all")
    silent = tmp_path / "silent.py"
    silent.write_text("import os\nos._exit(3)\n")
    rows, failure = run_all.run_script(str(silent), [])
    assert rows == []
    assert failure.startswith("exit status 3")


def test_the_json_is_written_when_no_script_matches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_all = _load("run_all")
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--only", "bench_nothing", "--json", str(out)])
    run_all.main()
    found = json.loads(out.read_text())
    assert found["rows"] == []
    assert found["scripts"] == []
    assert not (tmp_path / "rows.json.part").exists()  # written whole, then renamed
