"""``embedmetrics report --run R --qrels Q`` on the files trec_eval reads, and on those it refuses.

Both reader routes run every case: Arrow's (pyarrow installed: plain files) and the NumPy reader /
line parser (pyarrow hidden). The oracle for values is pytrec_eval (trec_eval itself), fed the first
six fields of every run line, as trec_eval's run reader (``get_trec_results.c``) reads them.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from embedmetrics.cli import main

KS = (1, 3, 5, 20)
#: the report's names of pytrec_eval's measures
MEASURES = {"map": "map", "mrr": "recip_rank", "r_precision": "Rprec"} | {
    f"{ours}@{k}": f"{theirs}_{k}"
    for k in KS
    for ours, theirs in (
        ("ndcg", "ndcg_cut"),
        ("precision", "P"),
        ("recall", "recall"),
        ("hit_rate", "success"),
    )
}


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _files(seed: int, layout: str) -> tuple[str, str]:
    """A run with ties (scores of one decimal) whose lines have fields after the sixth (``uniform``: two
    on every line, Arrow's plain layout; ``ragged``: zero to three, and a tab), and qrels with graded,
    zero and negative grades, a query without relevant documents and a judged query absent from the run."""
    rng = np.random.default_rng(seed)
    run_lines, qrels_lines = [], []
    for q in range(12):
        docs = rng.choice(40, size=int(rng.integers(1, 25)), replace=False)
        scores = np.round(rng.random(docs.size), 1)
        if q < 11:  # q11 is judged only
            for rank, (d, s) in enumerate(zip(docs, scores), start=1):
                extra = ["x", str(rank)] if layout == "uniform" else ["c"] * int(rng.integers(0, 4))
                gap = "\t" if layout == "ragged" and rank == 2 else " "
                run_lines.append(gap.join([f"q{q}", "Q0", f"doc{d}", str(rank), str(s), "run", *extra]))
        judged = rng.choice(40, size=int(rng.integers(1, 15)), replace=False)
        grades = rng.integers(-1, 4, judged.size) if q != 3 else np.zeros(judged.size, dtype=int)
        qrels_lines += [f"q{q} 0 doc{d} {g}" for d, g in zip(judged, grades)]
    return "\n".join(run_lines) + "\n", "\n".join(qrels_lines) + "\n"


def _pytrec_eval_means(run: str, qrels: str) -> dict[str, float]:
    judged: dict[str, dict[str, int]] = {}
    for line in qrels.splitlines():
        q, _, d, g = line.split()
        judged.setdefault(q, {})[d] = int(g)
    ranked: dict[str, dict[str, float]] = {}
    for line in run.splitlines():
        q, _, d, _, s, _ = line.split()[:6]  # trec_eval ignores every field after the sixth
        ranked.setdefault(q, {})[d] = float(s)
    names = {"map", "recip_rank", "Rprec"} | {
        f"{m}.{','.join(map(str, KS))}" for m in ("ndcg_cut", "P", "recall", "success")
    }
    per_query = pytrec_eval.RelevanceEvaluator(judged, names).evaluate(ranked)
    assert len(per_query) == 11
    return {
        ours: math.fsum(v[theirs] for v in per_query.values()) / len(per_query)
        for ours, theirs in MEASURES.items()
    }


@pytest.mark.parametrize("layout", ["uniform", "ragged"])
@pytest.mark.parametrize("pyarrow", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_runs_with_trailing_fields_equal_pytrec_eval(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    layout: str,
    pyarrow: bool,
) -> None:
    run, qrels = _files(seed, layout)
    (tmp_path / "run").write_text(run)
    (tmp_path / "qrels").write_text(qrels)
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    ks = ",".join(map(str, KS))
    args = (
        "--run",
        str(tmp_path / "run"),
        "--qrels",
        str(tmp_path / "qrels"),
        "--k",
        ks,
        "--ties",
        "trec_eval",
    )
    status, _, err = _report(capsys, *args, "--json", str(tmp_path / "out.json"))
    assert status == 0, err
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["info"]["trec"]["queries_evaluated"] == 11
    want = _pytrec_eval_means(run, qrels)
    assert set(document["trec"]) == set(want)
    for name, value in want.items():
        assert document["trec"][name] == pytest.approx(value, abs=1e-12), name


#: ``(file kind, text, what stderr names)``: every kind of bad line, each in a plain file (Arrow's route
#: first, then the others') and, where it makes sense, among run lines with trailing fields.
BAD = [
    ("run", "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8\n", ":2: expected 6 fields (qid Q0 docno rank score tag"),
    ("run", "q1 Q0 d1 1 0.9 t x y\nq1 Q0 d2 2\n", ":2: expected 6 fields"),
    ("run", "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 high t\n", ":2: score 'high' is not a number."),
    ("run", "q1 Q0 d1 1 0.9 t 7\nq1 Q0 d2 2 0,8 t 8\n", ":2: score '0,8' is not a number."),
    ("run", "q1 Q0 d1 1 nan t\n", ":1: score 'nan' is not finite."),
    (
        "run",
        "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8 t\nq1 Q0 d1 3 0.7 t\n",
        ":3: document 'd1' appears twice for query 'q1' (first on line 1)",
    ),
    ("run", "q1 Q0 d1 1 0.9 t a\nq1 Q0 d1 2 0.8 t b\n", ":2: document 'd1' appears twice for query 'q1'"),
    ("qrels", "q1 0 d1 1\nq1 0 d2\n", ":2: expected 4 fields (qid iter docno rel), got 3"),
    ("qrels", "q1 0 d1 1 extra\n", ":1: expected 4 fields (qid iter docno rel), got 5"),
    ("qrels", "q1 0 d1 1\nq1 0 d2 yes\n", ":2: relevance 'yes' is not an integer."),
    ("qrels", "q1 0 d1 1\nq1 0 d2 1.5\n", ":2: relevance '1.5' is not an integer."),
    (
        "qrels",
        "q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 0\n",
        ":3: document 'd1' appears twice for query 'q1' (first on line 1)",
    ),
]


@pytest.mark.parametrize("pyarrow", [True, False])
@pytest.mark.parametrize(("kind", "text", "message"), BAD)
def test_bad_lines_exit_2_with_one_line_naming_the_file_and_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    text: str,
    message: str,
    pyarrow: bool,
) -> None:
    good = {"run": "q1 Q0 d1 1 0.9 t\n", "qrels": "q1 0 d1 1\n"}
    paths = {}
    for name in ("run", "qrels"):
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text(text if name == kind else good[name])
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    status, out, err = _report(capsys, "--run", str(paths["run"]), "--qrels", str(paths["qrels"]))
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert err.startswith(f"embedmetrics: error: {paths[kind]}{message}"), err
