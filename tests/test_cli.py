"""End-to-end tests of ``embedmetrics report``.

Most cases call ``main([...])`` in-process (capsys) to keep the file fast; a few run the real
command in a subprocess (``python -m embedmetrics report``) on files written by the test.
Oracles: hand-worked trec_eval examples, a small trec_eval re-implementation written here
(per-query loops, plain definitions), brute-force NumPy, and the library's own public API for the
embedding families (the report must print exactly what the API returns).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from embedmetrics.cli import main, parse_ks

SRC = str(Path(__file__).resolve().parents[1] / "src")


# ----------------------------------------------------------------------------- helpers
def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``embedmetrics report ARGS`` in-process; return (status, stdout, stderr)."""
    status = main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m embedmetrics report ARGS`` in a subprocess (stderr is a pipe, not a tty)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(
        [sys.executable, "-m", "embedmetrics", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=240,
    )


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def assert_one_line_error(status: int, err: str, fragment: str) -> None:
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("embedmetrics: error: ")
    assert fragment in lines[0], lines[0]


# ----------------------------------------------------------------------------- a trec_eval oracle
def trec_eval_reference(run: str, qrels: str, ks: list[int]) -> dict[str, float]:
    """trec_eval 9 semantics, written plainly: per query, sort by (score desc, docno desc)."""
    judged: dict[str, dict[str, int]] = {}
    for line in qrels.strip().splitlines():
        q, _, d, r = line.split()
        judged.setdefault(q, {})[d] = int(r)
    retrieved: dict[str, list[tuple[float, str]]] = {}
    for line in run.strip().splitlines():
        q, _, d, _, s, _ = line.split()
        retrieved.setdefault(q, []).append((float(s), d))
    per_query: dict[str, list[float]] = {}
    for q, docs in retrieved.items():
        if q not in judged:
            continue  # trec_eval: queries without relevance information are ignored
        docs = sorted(docs, key=lambda sd: (sd[0], sd[1]), reverse=True)
        rels = [judged[q].get(d, 0) for _, d in docs]
        n_rel = sum(1 for r in judged[q].values() if r >= 1)
        hits = [1 if r >= 1 else 0 for r in rels]
        m: dict[str, float] = {}
        for k in ks:
            m[f"hit_rate@{k}"] = float(any(hits[:k]))
            m[f"precision@{k}"] = sum(hits[:k]) / k
            m[f"recall@{k}"] = sum(hits[:k]) / n_rel if n_rel else 0.0
            dcg = sum(max(r, 0) / math.log2(i + 2) for i, r in enumerate(rels[:k]))
            ideal = sorted((r for r in judged[q].values() if r > 0), reverse=True)[:k]
            idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
            m[f"ndcg@{k}"] = dcg / idcg if idcg > 0 else 0.0
        first = next((i for i, h in enumerate(hits) if h), None)
        m["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
        found, total = 0, 0.0
        for i, h in enumerate(hits):
            if h:
                found += 1
                total += found / (i + 1)
        m["map"] = total / n_rel if n_rel else 0.0
        m["r_precision"] = sum(hits[:n_rel]) / n_rel if n_rel else 0.0
        for key, value in m.items():
            per_query.setdefault(key, []).append(value)
    return {key: float(np.mean(values)) for key, values in per_query.items()}


RUN = """\
q1 Q0 d1 1 0.9 tag
q1 Q0 d2 2 0.8 tag
q1 Q0 d3 3 0.7 tag
q2 Q0 d4 1 0.5 tag
q2 Q0 d5 2 0.4 tag
q9 Q0 d1 1 0.3 tag
"""
# q1: d7 is relevant but retrieved by no run; d3 has graded relevance 2; d1 is judged non-relevant.
# q3 is judged but absent from the run (skipped); q9 is in the run without judgements (skipped).
QRELS = """\
q1 0 d2 1
q1 0 d3 2
q1 0 d7 1
q1 0 d1 0
q2 0 d5 1
q3 0 d1 1
"""
L3, L4 = math.log2(3), math.log2(4)
# hand-worked, mean over q1 and q2 (see the comments in test_trec_hand_worked)
HAND = {
    "hit_rate@1": 0.0,
    "hit_rate@2": 1.0,
    "hit_rate@5": 1.0,
    "mrr": 0.5,
    "ndcg@1": 0.0,
    "ndcg@2": ((1 / L3) / (2 + 1 / L3) + 1 / L3) / 2,
    "ndcg@5": ((1 / L3 + 2 / L4) / (2 + 1 / L3 + 1 / L4) + 1 / L3) / 2,
    "map": ((1 / 2 + 2 / 3) / 3 + 1 / 2) / 2,
    "precision@1": 0.0,
    "precision@2": 0.5,
    "precision@5": (2 / 5 + 1 / 5) / 2,
    "recall@1": 0.0,
    "recall@2": (1 / 3 + 1) / 2,
    "recall@5": (2 / 3 + 1) / 2,
    "r_precision": (2 / 3 + 0) / 2,
}


# ----------------------------------------------------------------------------- argument parsing
def test_parse_ks() -> None:
    assert parse_ks("1,5,10") == [1, 5, 10]
    assert parse_ks(" 10 , 1 ") == [1, 10]


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--embeddings", "--view1", "--run", "--qrels", "--json", "--plot", "--k", "--ties"):
        assert option in out
    assert main(["--version"]) == 0
    assert "embedmetrics" in capsys.readouterr().out


# ----------------------------------------------------------------------------- bad input: exit 2, one line
def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    emb = tmp / "emb.npy"
    np.save(emb, np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32))
    labels = tmp / "labels.npy"
    np.save(labels, np.array([0, 0, 1, 1, 2, 2]))
    short = tmp / "short.npy"
    np.save(short, np.array([0, 1, 2]))
    flat = tmp / "flat.npy"
    np.save(flat, np.arange(6, dtype=np.float32))
    cube = tmp / "cube.pt"
    torch.save(torch.zeros(2, 3, 4), cube)
    nan = tmp / "nan.npy"
    np.save(nan, np.array([[0.0, np.nan], [1.0, 2.0]]))
    garbage = tmp / "garbage.npy"
    garbage.write_bytes(b"this is not a numpy file")
    bad_pt = tmp / "bad.pt"
    bad_pt.write_bytes(b"not a torch file either")
    txt = write(tmp / "emb.txt", "1 2 3\n")
    two = tmp / "two.npz"
    np.savez(two, a=np.zeros((6, 3)), b=np.zeros((6, 3)))
    wide = tmp / "wide.npy"
    np.save(wide, np.zeros((6, 4), dtype=np.float32))
    view5 = tmp / "view5.npy"
    np.save(view5, np.zeros((5, 3), dtype=np.float32))
    run = write(tmp / "run.txt", RUN)
    qrels = write(tmp / "qrels.txt", QRELS)
    bad_run = write(tmp / "bad_run.txt", "q1 Q0 d1 1 0.9 tag\n\nq1 Q0 d2 2 tag\n")
    bad_score = write(tmp / "bad_score.txt", "q1 Q0 d1 1 high tag\n")
    dup_run = write(tmp / "dup_run.txt", "q1 Q0 d1 1 0.9 tag\nq1 Q0 d2 2 0.8 tag\nq1 Q0 d1 3 0.7 tag\n")
    bad_qrels = write(tmp / "bad_qrels.txt", "# judgements\nq1 0 d1 1\nq1 0 d2 yes\n")
    other_qrels = write(tmp / "other_qrels.txt", "x1 0 d1 1\n")
    empty_run = write(tmp / "empty_run.txt", "\n# nothing\n")
    latin1 = tmp / "latin1.txt"
    latin1.write_bytes("q1 Q0 d\xe9 1 0.5 t\n".encode("latin-1"))
    e, lab = str(emb), str(labels)
    return [
        (["--embeddings", str(tmp / "missing.npy"), "--labels", lab], "missing.npy: no such file"),
        (["--embeddings", str(tmp), "--labels", lab], "is a directory"),
        (["--embeddings", txt, "--labels", lab], "unsupported file type '.txt'"),
        (["--embeddings", str(garbage), "--labels", lab], "garbage.npy: cannot read it as .npy"),
        (["--embeddings", str(bad_pt), "--labels", lab], "bad.pt: cannot read it as .pt"),
        (["--embeddings", str(flat), "--labels", lab], "must be 2-D"),
        (["--view1", str(cube), "--view2", str(cube)], "got 3-D shape (2, 3, 4)"),
        (["--embeddings", str(nan), "--labels", lab], "NaN or infinite"),
        (["--embeddings", e, "--labels", str(short)], "3 labels for 6 embeddings"),
        (["--embeddings", e, "--labels", str(emb)], "labels must be 1-D"),
        (["--embeddings", str(two), "--labels", lab], "holds 2 arrays (a, b); choose one with --key"),
        (["--embeddings", str(two), "--labels", lab, "--key", "c"], "no array named 'c'"),
        (["--embeddings", e, "--labels", lab, "--reference", str(wide), "--reference-labels", lab], "4 features"),
        (["--view1", e, "--view2", str(view5)], "the two views must pair row by row"),
        (["--embeddings", e, "--labels", lab, "--k", "1,10"], "--k 10 asks for more neighbours"),
        (["--run", bad_run, "--qrels", qrels], "bad_run.txt:3: expected 6 fields"),
        (["--run", bad_score, "--qrels", qrels], "bad_score.txt:1: score 'high' is not a number"),
        (["--run", dup_run, "--qrels", qrels], "dup_run.txt:3: document 'd1' appears twice"),
        (["--run", run, "--qrels", bad_qrels], "bad_qrels.txt:3: relevance 'yes' is not an integer"),
        (["--run", run, "--qrels", other_qrels], "no query of the run has relevance judgements"),
        (["--run", empty_run, "--qrels", qrels], "the run is empty"),
        (["--run", str(latin1), "--qrels", qrels], "not a UTF-8 text file"),
        # options that do not go together
        (["--embeddings", e], "--embeddings needs --labels"),
        (["--labels", lab], "--labels needs --embeddings"),
        (["--embeddings", e, "--labels", lab, "--reference", e], "--reference needs --reference-labels"),
        (["--reference", e, "--reference-labels", lab], "--reference needs --embeddings"),
        (["--view1", e], "--view1 needs --view2"),
        (["--run", run], "--run needs --qrels"),
        (["--key", "x"], "no input file was given"),
        (["--k", "0"], "--k must be positive integers"),
        (["--k", "1,five"], "--k must be positive integers"),
        (["--ties", "random", "--run", run, "--qrels", qrels], "invalid choice: 'random'"),
        (["--no-such-option"], "unrecognized arguments"),
    ]


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, fragment in _bad_cases(tmp_path):
        status, out, err = call(capsys, *args)
        assert_one_line_error(status, err, fragment)
        assert out == "", (args, out)


def test_bad_input_in_a_real_process(tmp_path: Path) -> None:
    run = write(tmp_path / "run.txt", "q1 Q0 d1 1 0.9 tag\nq1 Q0 d2 two 0.8\n")
    qrels = write(tmp_path / "qrels.txt", QRELS)
    done = run_cli("--run", run, "--qrels", qrels)
    assert_one_line_error(done.returncode, done.stderr, "run.txt:2: expected 6 fields")
    assert done.stdout == ""


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    status = main([])
    assert_one_line_error(status, capsys.readouterr().err, "choose a command")


# ----------------------------------------------------------------------------- TREC join (no metrics)
def test_trec_join_keeps_unretrieved_relevant_and_skips_queries(tmp_path: Path) -> None:
    from embedmetrics._report.trec import build_tensors, read_qrels, read_run

    data = build_tensors(read_run(write(tmp_path / "r", RUN)), read_qrels(write(tmp_path / "q", QRELS)))
    assert data.query_ids == ["q1", "q2"]  # q9 (no qrels) and q3 (not in the run) are skipped
    rows = list(zip(data.indexes.tolist(), data.preds.tolist(), data.target.tolist(), data.retrieved.tolist()))
    assert sorted((q, p, t) for q, p, t, r in rows if r) == [
        (0, 0.7, 2),
        (0, 0.8, 1),
        (0, 0.9, 0),
        (1, 0.4, 1),
        (1, 0.5, 0),
    ]
    # d7 of q1: judged relevant, retrieved by no run -> counts in R and the ideal DCG, never ranked
    assert [(q, t) for q, p, t, r in rows if not r] == [(0, 1)]
    assert (data.n_run_queries, data.n_qrels_queries) == (3, 3)


def test_trec_eval_order_breaks_ties_by_docno_descending() -> None:
    from embedmetrics._report.trec import trec_eval_order

    docno = np.array(["a", "c", "b", "z"])
    score = np.array([1.0, 1.0, 1.0, 0.5])
    order = np.argsort(-trec_eval_order(np.zeros(4), docno, score), kind="stable")
    assert docno[order].tolist() == ["c", "b", "a", "z"]
