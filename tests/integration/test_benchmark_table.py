"""``make bench``: every script ``benchmarks/run_all.py`` plans exists and takes its arguments, and the
rows the scripts print come back as one table (the peers are not installed here: their cells stay
empty)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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
    ]  # fmt: skip
    lines = run_all.table(rows).splitlines()
    assert lines[2] == "| kNN | cpu | 1.00 s | PML | 1.50 s | 1.50x | 0.50 s | 2.00x | yes |"
    assert lines[3] == "| dense, peak memory | cpu | 0.10 GB | chunked | 0.40 GB | 0.25 of it |  |  | NO |"
    assert lines[4] == "| test | cuda | 2.0 ms |  |  |  |  |  |  |"


@pytest.mark.timeout(120)
def test_a_script_prints_rows_that_run_all_collects() -> None:
    """The row protocol end to end, on the one script that needs no peer (ranx is optional)."""
    run_all = _load("run_all")
    rows, failure = run_all.run_script("bench_comparison.py", ["--resamples", "200", "--repeat", "1"])
    assert failure == ""
    assert [r["workload"].split(",")[0] for r in rows] == ["randomization test"] * 2
    assert all(r["ours"] > 0 for r in rows)
    assert all(r["unit"] == "s" for r in rows)
