"""The command outputs the docs show are what the commands print: the report's JSON example and its
one-line error (``docs/report.md``), and the torchrun example's lines (``docs/distributed.md``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from embedmetrics.cli import main
from families.report.test_cli import QRELS, RUN

ROOT = Path(__file__).resolve().parents[2]


def _fence(page: str, language: str, containing: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)
    return next(b for b in blocks if containing in b)


def test_the_report_json_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    out = tmp_path / "out.json"
    args = ["--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt"), "--k", "1,5"]
    assert main(["report", *args, "--json", str(out)]) == 0, capsys.readouterr().err
    got = json.loads(out.read_text())
    shown = json.loads(_fence("report.md", "json", '"trec"'))  # abridged: a subset of the keys, rounded
    for key, value in shown["trec"].items():
        assert round(got["trec"][key], 4) == value, key
    for key, value in shown["info"]["trec"].items():
        assert got["info"]["trec"][key] == value, key
    assert got["info"]["k"] == shown["info"]["k"]


def test_the_report_error_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = _fence("report.md", "text", "embedmetrics: error:").strip()
    monkeypatch.chdir(tmp_path)
    Path("run.txt").write_text("q1 Q0 d1 1 0.9 myrun\n# a comment\nq1 Q0 d2 2 myrun\n")
    Path("qrels.txt").write_text("q1 0 d1 1\n")
    assert main(["report", "--run", "run.txt", "--qrels", "qrels.txt"]) == 2
    assert capsys.readouterr().err.strip() == shown


def test_the_torchrun_example(tmp_path: Path) -> None:
    shown = _fence("distributed.md", "text", "OK: 2 ranks agree").strip().splitlines()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    logs = tmp_path / "logs"  # one stdout file per rank: two ranks printing at once would interleave
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--log-dir={logs}",
        "--redirects=3", str(ROOT / "examples" / "distributed_eval.py"),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [
        line
        for log in sorted(logs.rglob("stdout.log"))
        for line in log.read_text().splitlines()
        if line.startswith(("rank ", "OK:"))
    ]
    assert len(printed) == len(shown), printed
    for want, got in zip(sorted(shown), sorted(printed)):
        pattern = re.escape(want).replace(r"\.\.\.", ".*")
        assert re.fullmatch(pattern, got), (want, got)


def test_the_trec_eval_format_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = _fence("trec-eval.md", "text", "ndcg_cut_3").strip("\n").splitlines()
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    args = [
        "--run",
        str(tmp_path / "run.txt"),
        "--qrels",
        str(tmp_path / "qrels.txt"),
        "--format",
        "trec_eval",
    ]
    measures = ["-q", "-m", "map", "-m", "P.1,2", "-m", "ndcg_cut.3", "-m", "num_rel"]
    assert main(["report", *args, *measures]) == 0
    assert capsys.readouterr().out.splitlines() == shown
