"""Runs and qrels read as each trec_eval version reads them (``read_run`` / ``read_qrels`` with
``trec_eval=10|9``, through ``embedmetrics trec_eval``): scores as doubles (10.0) or floats (9.0.8),
infinite scores, decimal grades truncated (``atol``), ``#`` comments (10.0 only), a byte-order mark.

Each case's lines were printed by trec_eval 10.0 and 9.0.8 built from their sources (quoted here); where
``TREC_EVAL`` / ``TREC_EVAL_9`` name those binaries, the cases are compared with them too.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from embedmetrics._io import trec
from embedmetrics._io.errors import ReportInputError
from embedmetrics.cli import main

BINARIES = {"10": "TREC_EVAL", "9": "TREC_EVAL_9"}
QRELS_AB = "q1 0 a 1\nq1 0 b 0\n"
RUN_INF = "q1 Q0 a 1 -inf t\nq1 Q0 b 2 inf t\nq1 Q0 c 3 0.5 t\n"
RUN_ABC = "q1 Q0 a 1 1 t\nq1 Q0 b 2 0.5 t\nq1 Q0 c 3 0.2 t\n"

#: name -> (qrels, run, relstring under 10, relstring under 9)
CASES = {
    # equal in single precision only: 10.0 ranks a first, 9.0.8 ties them and ranks b (docno descending)
    "double vs float": (QRELS_AB, "q1 Q0 a 1 0.1000000002 t\nq1 Q0 b 2 0.1000000001 t\n", "'10'", "'01'"),
    # past float's range: infinite (and tied) in 9.0.8, finite in 10.0
    "1e39": (QRELS_AB, "q1 Q0 a 1 2e39 t\nq1 Q0 b 2 1e39 t\n", "'10'", "'01'"),
    "infinities": ("q1 0 c 1\nq1 0 b 2\n", RUN_INF, "'21-'", "'21-'"),
    # atol: 1.7 -> 1, 0.9 -> 0, -0.5 -> 0
    "decimal grades": ("q1 0 a 1.7\nq1 0 b 0.9\nq1 0 c -0.5\n", RUN_ABC, "'100'", "'100'"),
}  # fmt: skip


def files(tmp_path: Path, qrels: str, run: str) -> list[str]:
    (tmp_path / "qrels").write_text(qrels, encoding="utf-8")
    (tmp_path / "run").write_text(run, encoding="utf-8")
    return [str(tmp_path / "qrels"), str(tmp_path / "run")]


@pytest.mark.parametrize("version", ["10", "9"])
@pytest.mark.parametrize("name", list(CASES))
def test_scores_and_grades_as_trec_eval_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, version: str
) -> None:
    qrels, run, relstring_10, relstring_9 = CASES[name]
    args = ["-q", "-m", "relstring", "-m", "num_rel", *files(tmp_path, qrels, run)]
    status = main(["trec_eval", "--trec-eval", version, *args])
    captured = capsys.readouterr()
    assert (status, captured.err) == (0, "")  # no "overflow encountered in cast" for 1e39 (issue 49)
    relstring = relstring_10 if version == "10" else relstring_9
    assert captured.out.splitlines()[1] == f"relstring             \tq1\t{relstring}"
    program = os.environ.get(BINARIES[version], "")
    if program and os.access(program, os.X_OK):
        want = subprocess.run([program, *args], capture_output=True, text=True, timeout=60)
        assert captured.out == want.stdout


def test_the_order_of_single_precision_scores_warns_of_nothing() -> None:
    """``report --ties trec_eval`` and ``--trec-eval 9`` order 1e39 as float32's infinity, silently."""
    score, doc, query = np.array([2e39, 1e39]), np.array([0, 1]), np.array([0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trec._trec_eval_order(score, doc, 2, query).tolist() == [1, 0]  # tied: docno descending
        assert trec._trec_eval_order(score, doc, 2, query, single=False).tolist() == [0, 1]


def test_comments_are_skipped_under_10_and_refused_under_9(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("# written by a toolkit\nq1 Q0 a 1 0.5 t\n   # indented\nq1 Q0 b 2 0.4 t\n")
    run = trec.read_run(str(path), trec_eval=10)
    assert run.docs.tolist() == ["a", "b"]
    assert run.line.tolist() == [2, 4]
    with pytest.raises(ReportInputError, match=r"run:1: a '#' comment line: trec_eval 9\.0\.8"):
        trec.read_run(str(path), trec_eval=9)
    (tmp_path / "qrels").write_text("q1 0 a 1\nq1 0 b 1\n# judged later\n")
    with pytest.raises(ReportInputError, match=r"qrels:3: a '#' comment line"):
        trec.read_qrels(str(tmp_path / "qrels"), trec_eval=9)


def test_a_nan_score_is_refused_with_its_line(tmp_path: Path) -> None:
    """trec_eval compares a NaN with nothing (its sort's order of it is undefined): refused, one line."""
    path = tmp_path / "run"
    path.write_text("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 nan t\n")
    for version in (10, 9):
        with pytest.raises(ReportInputError, match=r"run:2: score 'nan' is not a number \(NaN\)"):
            trec.read_run(str(path), trec_eval=version)


def test_decimal_grades_are_truncated_for_trec_eval_only(tmp_path: Path) -> None:
    path = tmp_path / "qrels"
    path.write_text("q1 0 a 1.7\nq1 0 b -1.5\nq1 0 c .5\nq1 0 d 2.\n")
    assert trec.read_qrels(str(path), trec_eval=10).rel.tolist() == [1, -1, 0, 2]
    with pytest.raises(ReportInputError, match=r"relevance '1\.7' is not an integer"):
        trec.read_qrels(str(path))  # the report's reading: grades are integers


def test_a_byte_order_mark_is_stripped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """trec_eval keeps it in the first query id (``\\ufeffq1`` matches no run query); we read ``q1``."""
    qrels, run = files(tmp_path, "\ufeffq1 0 a 1\n", "q1 Q0 a 1 0.5 t\n")
    assert main(["trec_eval", "-m", "num_q", qrels, run]) == 0
    assert capsys.readouterr().out == "num_q                 \tall\t1\n"
