"""End-to-end tests of ``embedmetrics report``.

Most cases call ``main([...])`` in-process (capsys) to keep the file fast; a few run the real
command in a subprocess (``python -m embedmetrics report``) on files written by the test.
Oracles: hand-worked trec_eval examples, a small trec_eval re-implementation written here
(per-query loops, plain definitions), brute-force NumPy, and the library's own public API for the
embedding families (the report must print exactly what the API returns).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from embedmetrics.cli import main, parse_ks

SRC = str(Path(__file__).resolve().parents[3] / "src")


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


def table_rows(out: str) -> list[tuple[str, str]]:
    """(metric, value) of every row of the printed table, in order."""
    lines = out.splitlines()
    assert lines[0].split() == ["family", "metric", "value"]
    rows = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) < 2 or line.startswith(("inputs:", "trec:", "plots:", "json:")):
            break
        rows.append((parts[-2], parts[-1]))
    return rows


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


def test_help_names_the_comparing_mode(capsys: pytest.CaptureFixture[str]) -> None:
    """`embedmetrics --help` summarizes `report` with its comparing mode (two runs, paired tests, --ci)."""
    assert main(["--help"]) == 0
    summary = " ".join(capsys.readouterr().out.split())  # argparse wraps the summary over lines
    assert "compare systems" in summary
    assert "--run A --run B --qrels Q" in summary
    assert "--test" in summary
    assert "--ci" in summary
    assert main(["report", "--help"]) == 0
    description = " ".join(capsys.readouterr().out.split())
    assert "two or more runs (--run A --run B --qrels Q, nothing else)" in description


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
    one_row = tmp / "one_row.npy"
    np.save(one_row, np.ones((1, 3), dtype=np.float32))
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
        (["--embeddings", str(garbage), "--labels", lab], "garbage.npy: is not a NumPy .npy file"),
        (["--embeddings", str(bad_pt), "--labels", lab], "bad.pt: cannot read it as .pt"),
        (["--embeddings", str(flat), "--labels", lab], "must be 2-D"),
        (["--view1", str(cube), "--view2", str(cube)], "got 3-D shape (2, 3, 4)"),
        (["--embeddings", str(nan), "--labels", lab], "NaN or infinite"),
        (["--embeddings", e, "--labels", str(short)], "3 labels for 6 embeddings"),
        (["--embeddings", e, "--labels", str(emb)], "labels must be 1-D"),
        (["--embeddings", str(two), "--labels", lab], "holds 2 arrays (a, b); choose one with --key"),
        (["--embeddings", str(two), "--labels", lab, "--key", "c"], "no array named 'c'"),
        (
            ["--embeddings", e, "--labels", lab, "--reference", str(wide), "--reference-labels", lab],
            "4 features",
        ),
        (["--view1", e, "--view2", str(view5)], "the two views must pair row by row"),
        (["--view1", str(one_row), "--view2", str(one_row)], "views: Argument `z` must have at least 2 rows"),
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
    from embedmetrics._io.trec import join_run, read_qrels, read_run

    data = join_run(read_run(write(tmp_path / "r", RUN)), read_qrels(write(tmp_path / "q", QRELS))).tensors()
    assert data.query_ids == ["q1", "q2"]  # q9 (no qrels) and q3 (not in the run) are skipped
    rows = list(
        zip(data.indexes.tolist(), data.preds.tolist(), data.target.tolist(), data.retrieved.tolist())
    )
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


def test_trec_files_with_bom_crlf_comments_and_blank_lines(tmp_path: Path) -> None:
    from embedmetrics._io.trec import read_qrels, read_run

    run_path = tmp_path / "run.txt"
    run_path.write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 0.9 t\r\n\r\n# comment\r\nq1\tQ0\td2\t2\t-1.5e-3\tt\r\n")
    run = read_run(str(run_path))
    assert run.queries.tolist() == ["q1"]
    assert run.docs[run.docno].tolist() == ["d1", "d2"]
    assert run.score.tolist() == [0.9, -0.0015]
    assert run.line.tolist() == [1, 4]
    qrels = read_qrels(write(tmp_path / "qrels.txt", "q1 0 d1 -1\nq1 Q0 d2 3\n"))
    assert qrels.rel.tolist() == [-1, 3]


def test_trec_eval_ties_order_by_docno_descending(tmp_path: Path) -> None:
    from embedmetrics._io.trec import join_run, read_qrels, read_run

    run = read_run(write(tmp_path / "r", "q Q0 a 1 1.0 t\nq Q0 c 2 1.0 t\nq Q0 b 3 1.0 t\nq Q0 z 4 0.5 t\n"))
    qrels = read_qrels(write(tmp_path / "q", "q 0 a 1\nq 0 b 2\nq 0 c 3\nq 0 z 4\n"))
    data = join_run(run, qrels, trec_eval_ties=True).tensors()
    order = torch.argsort(data.preds, descending=True)
    assert data.target[order].tolist() == [3, 2, 1, 4]  # c, b, a (tie: docno descending), then z
    assert data.preds.unique().numel() == 4


# ----------------------------------------------------------------------------- TREC values
def trec_json(
    capsys: pytest.CaptureFixture[str], tmp: Path, run: str, qrels: str, *extra: str
) -> dict[str, float]:
    out_json = tmp / "out.json"
    status, out, err = call(
        capsys,
        "--run",
        write(tmp / "run.txt", run),
        "--qrels",
        write(tmp / "qrels.txt", qrels),
        "--json",
        str(out_json),
        *extra,
    )
    assert status == 0, err
    assert err == ""  # stderr is not a terminal here: no progress bar
    document = json.loads(out_json.read_text())
    assert table_rows(out) == [(k, f"{v:.4f}") for k, v in document["trec"].items()]
    return dict(document["trec"])


def test_trec_hand_worked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # q1 ranks d1 (rel 0), d2 (rel 1), d3 (rel 2); d7 (rel 1) is relevant but unretrieved: R = 3 and the
    # ideal gains are [2, 1, 1]. q2 ranks d4 (unjudged), d5 (rel 1): R = 1. q3 and q9 are skipped.
    got = trec_json(capsys, tmp_path, RUN, QRELS, "--k", "1,2,5")
    assert list(got) == list(HAND)  # exactly these keys, in this order
    for key, value in HAND.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    oracle = trec_eval_reference(RUN, QRELS, [1, 2, 5])
    for key, value in oracle.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


def test_trec_query_without_relevant_documents_scores_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RUN + "q4 Q0 d1 1 0.9 tag\nq4 Q0 d2 2 0.8 tag\n"
    qrels = QRELS + "q4 0 d1 0\n"  # judged, but nothing relevant: trec_eval 9 averages it in as 0
    got = trec_json(capsys, tmp_path, run, qrels, "--k", "1,2,5")
    for key, value in HAND.items():
        assert got[key] == pytest.approx(value * 2 / 3, abs=1e-6), key
    document_info = json.loads((tmp_path / "out.json").read_text())["info"]["trec"]
    assert document_info["queries_evaluated"] == 3
    assert document_info["run_queries_without_qrels"] == 1
    assert document_info["qrels_queries_not_in_run"] == 1
    assert document_info["relevant_not_retrieved"] == 1  # d7 of q1


@pytest.mark.parametrize(
    ("seed", "long_query"), [(0, False), (1, False), (2, False), (3, True)]
)  # long_query: one query of 300 documents, so one padded matrix would be mostly padding (flat path)
def test_trec_random_runs_match_trec_eval_reference(
    seed: int, long_query: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(seed)
    run_lines, qrels_lines = [], []
    for q in range(12):
        size = 300 if long_query and q == 0 else int(rng.integers(1, 15))
        docs = rng.choice(400 if long_query else 40, size=size, replace=False)
        scores = np.round(rng.random(docs.size), 1)  # one decimal: plenty of ties
        if q < 10:  # q10, q11 are judged only (not in the run)
            run_lines += [f"q{q} Q0 doc{d} {r + 1} {s} t" for r, (d, s) in enumerate(zip(docs, scores))]
        judged = rng.choice(40, size=int(rng.integers(0, 12)), replace=False)
        qrels_lines += [f"q{q} 0 doc{d} {rng.integers(-1, 4)}" for d in judged]
    if not any(line.startswith("q0 ") for line in qrels_lines):
        qrels_lines.append("q0 0 doc0 1")
    run, qrels = "\n".join(run_lines) + "\n", "\n".join(qrels_lines) + "\n"
    ks = [1, 3, 5, 20]
    got = trec_json(capsys, tmp_path, run, qrels, "--k", "1,3,5,20", "--ties", "trec_eval")
    oracle = trec_eval_reference(run, qrels, ks)
    assert set(got) == set(oracle)
    for key, value in oracle.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    # tie policies bracket each other; with ties in the data, average lies between the bounds
    low = trec_json(capsys, tmp_path, run, qrels, "--k", "1,3,5,20", "--ties", "pessimistic")
    mid = trec_json(capsys, tmp_path, run, qrels, "--k", "1,3,5,20")
    high = trec_json(capsys, tmp_path, run, qrels, "--k", "1,3,5,20", "--ties", "optimistic")
    for key in oracle:
        assert low[key] - 1e-9 <= mid[key] <= high[key] + 1e-9, key
        assert low[key] - 1e-9 <= got[key] <= high[key] + 1e-9, key


def test_trec_ties_average_is_the_expected_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # d1 (relevant) and d2 tie. trec_eval puts d2 first (docno descending): RR 1/2, hit@1 0.
    run = "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.5 t\n"
    qrels = "q1 0 d1 1\n"
    got = trec_json(capsys, tmp_path, run, qrels, "--k", "1", "--ties", "trec_eval")
    assert (got["mrr"], got["hit_rate@1"], got["map"]) == pytest.approx((0.5, 0.0, 0.5))
    got = trec_json(capsys, tmp_path, run, qrels, "--k", "1")
    assert (got["mrr"], got["hit_rate@1"], got["map"]) == pytest.approx((0.75, 0.5, 0.75))
    got = trec_json(capsys, tmp_path, run, qrels, "--k", "1", "--ties", "optimistic")
    assert (got["mrr"], got["hit_rate@1"]) == pytest.approx((1.0, 1.0))


# ----------------------------------------------------------------------------- views and embeddings
def _views(n: int = 40, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    return (base + 0.6 * rng.standard_normal((n, d))).astype(np.float32), (
        base + 0.6 * rng.standard_normal((n, d))
    ).astype(np.float32)


def _unit(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def test_views_from_npz_and_pt_match_brute_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    z1, z2 = _views()
    np.savez(tmp_path / "v1.npz", feats=z1, other=np.zeros(3))
    torch.save({"feats": torch.from_numpy(z2)}, tmp_path / "v2.pt")
    out_json = tmp_path / "views.json"
    status, out, err = call(
        capsys,
        *("--view1", str(tmp_path / "v1.npz"), "--view2", str(tmp_path / "v2.pt"), "--key", "feats"),
        *("--k", "1,3", "--json", str(out_json)),
    )
    assert status == 0, err
    got = json.loads(out_json.read_text())["views"]
    assert list(got) == ["contrastive_accuracy@1", "contrastive_accuracy@3", "uniformity", "alignment"]
    assert table_rows(out) == [(k, f"{v:.4f}") for k, v in got.items()]
    u1, u2 = _unit(z1), _unit(z2)
    sims = u1 @ u2.T
    diag = np.diag(sims)
    above_row = (sims > diag[:, None]).sum(axis=1)  # z1 -> z2: others scoring above the positive
    above_col = (sims > diag[None, :]).sum(axis=0)  # z2 -> z1
    for k in (1, 3):
        expected = ((above_row < k).mean() + (above_col < k).mean()) / 2
        assert got[f"contrastive_accuracy@{k}"] == pytest.approx(expected, abs=1e-6)

    def uniformity(u: np.ndarray) -> float:
        sq = ((u[:, None, :] - u[None, :, :]) ** 2).sum(-1)
        off = ~np.eye(len(u), dtype=bool)
        return float(np.log(np.exp(-2.0 * sq[off]).mean()))

    assert got["uniformity"] == pytest.approx((uniformity(u1) + uniformity(u2)) / 2, abs=1e-5)
    assert got["alignment"] == pytest.approx(float((np.linalg.norm(u1 - u2, axis=1) ** 2).mean()), abs=1e-5)


def _clusters(n_per: int = 8, n_classes: int = 4, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, d)) * 1.5
    labels = np.repeat(np.arange(n_classes), n_per)
    x = centers[labels] + rng.standard_normal((labels.size, d))
    perm = rng.permutation(labels.size)
    return x[perm].astype(np.float32), labels[perm]


def _brute_precision_at_k(
    query: np.ndarray, ql: np.ndarray, ref: np.ndarray, rl: np.ndarray, k: int, same: bool
) -> float:
    dist = ((query[:, None, :].astype(np.float64) - ref[None, :, :]) ** 2).sum(-1)
    if same:
        np.fill_diagonal(dist, np.inf)
    nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return float((rl[nearest] == ql[:, None]).mean())


def test_embeddings_match_accuracy_calculator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from embedmetrics import AccuracyCalculator

    x, y = _clusters()
    np.save(tmp_path / "emb.npy", x)
    torch.save(torch.from_numpy(y), tmp_path / "labels.pt")
    out_json = tmp_path / "emb.json"
    status, out, err = call(
        capsys,
        *("--embeddings", str(tmp_path / "emb.npy"), "--labels", str(tmp_path / "labels.pt")),
        *("--k", "1,3", "--json", str(out_json)),
    )
    assert status == 0, err
    got = json.loads(out_json.read_text())["embeddings"]
    keys = ["precision_at_1", "r_precision", "mean_average_precision_at_r", "NMI", "AMI"]
    health = ["rankme", "alpha_req", "knn_accuracy_k20_top1"]  # 4 classes: no top-5 row (always 1.0)
    assert list(got) == [*keys, *health, "precision@3"]  # precision@1 is precision_at_1: one row
    assert table_rows(out) == [(k, f"{v:.4f}") for k, v in got.items()]
    # representation health: the file's rows against themselves (leave-one-out kNN)
    from oracles import representation as rep

    assert got["rankme"] == pytest.approx(rep.rankme(x), rel=1e-5)
    fit = (6, 100) if x.shape[1] > 6 else (1, x.shape[1])
    assert got["alpha_req"] == pytest.approx(rep.alpha_req(x, fit), rel=1e-5)
    knn = rep.knn_accuracy(x, y, x, y, 20, 0.07, (1,), exclude_self=True)
    assert [got["knn_accuracy_k20_top1"]] == pytest.approx(list(knn), abs=1e-6)
    expected = AccuracyCalculator().get_accuracy(
        torch.from_numpy(x), torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(y), True
    )
    for key in keys:
        assert got[key] == pytest.approx(float(expected[key]), abs=1e-6), key
    assert got["precision@3"] == pytest.approx(_brute_precision_at_k(x, y, x, y, 3, True), abs=1e-6)
    assert got["precision_at_1"] == pytest.approx(_brute_precision_at_k(x, y, x, y, 1, True), abs=1e-6)
    # per-class precision_at_1 (JSON info): brute force nearest neighbour, averaged per class
    per_class = json.loads(out_json.read_text())["info"]["embeddings"]["precision_at_1_per_class"]
    dist = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(dist, np.inf)
    hit = y[dist.argmin(axis=1)] == y
    assert per_class == pytest.approx({str(c): float(hit[y == c].mean()) for c in range(4)}, abs=1e-9)


def test_embeddings_with_reference_set_and_string_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from embedmetrics import AccuracyCalculator

    x, y = _clusters(n_per=10, seed=1)
    names = np.array(["cat", "dog", "eel", "fox"])
    q, ql, r, rl = x[:12], y[:12], x[12:], y[12:]
    np.savez(tmp_path / "data.npz", q=q, r=r)
    np.save(tmp_path / "ql.npy", names[ql])
    np.save(tmp_path / "rl.npy", names[rl])
    out_json = tmp_path / "ref.json"
    np.save(tmp_path / "r.npy", r)
    status, _, err = call(
        capsys,
        *("--embeddings", str(tmp_path / "data.npz"), "--key", "q", "--labels", str(tmp_path / "ql.npy")),
        *("--reference", str(tmp_path / "r.npy"), "--reference-labels", str(tmp_path / "rl.npy")),
        *("--k", "1,2", "--json", str(out_json)),
    )
    assert status == 0, err
    document = json.loads(out_json.read_text())
    got = document["embeddings"]
    info = document["info"]["embeddings"]
    assert (info["n_query"], info["n_reference"], info["same_source"], info["lone_queries"]) == (
        12,
        28,
        False,
        0,
    )
    assert set(info["precision_at_1_per_class"]) <= {"cat", "dog", "eel", "fox"}  # string labels kept
    expected = AccuracyCalculator().get_accuracy(
        torch.from_numpy(q), torch.from_numpy(r), torch.from_numpy(ql), torch.from_numpy(rl), False
    )
    for key in ("precision_at_1", "r_precision", "mean_average_precision_at_r", "NMI", "AMI"):
        assert got[key] == pytest.approx(float(expected[key]), abs=1e-6), key
    assert got["precision@2"] == pytest.approx(_brute_precision_at_k(q, ql, r, rl, 2, False), abs=1e-6)
    assert got["precision_at_1"] == pytest.approx(_brute_precision_at_k(q, ql, r, rl, 1, False), abs=1e-6)


def test_lone_queries_give_null_in_json_and_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "e.npy", np.random.default_rng(0).random((4, 3)).astype(np.float32))
    np.save(tmp_path / "l.npy", np.array([0, 1, 2, 3]))  # every class once: no query has a relevant neighbour
    out_json = tmp_path / "lone.json"
    status, out, err = call(
        capsys,
        *("--embeddings", str(tmp_path / "e.npy"), "--labels", str(tmp_path / "l.npy"), "--k", "1,2"),
        *("--json", str(out_json)),
    )
    assert status == 0, err
    text = out_json.read_text()
    assert "NaN" not in text  # strict JSON
    document = json.loads(text)
    assert document["embeddings"]["precision_at_1"] is None
    assert document["embeddings"]["precision@2"] is None
    assert document["info"]["embeddings"]["lone_queries"] == 4
    assert ("precision_at_1", "nan") in table_rows(out)
    assert "4 of 4 queries have no other reference of their class" in out


# ----------------------------------------------------------------------------- plots, progress, default
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_writes_non_empty_pngs_for_every_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _clusters()
    z1, z2 = _views()
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "labels.npy", y)
    np.save(tmp_path / "z1.npy", z1)
    np.save(tmp_path / "z2.npy", z2)
    figures = tmp_path / "figures" / "nested"
    status, out, err = call(
        capsys,
        *("--embeddings", str(tmp_path / "emb.npy"), "--labels", str(tmp_path / "labels.npy")),
        *("--view1", str(tmp_path / "z1.npy"), "--view2", str(tmp_path / "z2.npy")),
        *("--run", write(tmp_path / "run.txt", RUN), "--qrels", write(tmp_path / "qrels.txt", QRELS)),
        *("--plot", str(figures)),
    )
    assert status == 0, err
    expected = {
        "precision_at_1_per_class.png",
        "embeddings_pair_similarity.png",
        "views_pair_similarity.png",
        "trec_hit_rate_recall_at_k.png",
    }
    assert {p.name for p in figures.iterdir()} == expected
    for name in expected:
        data = (figures / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 2000, name
    assert "plots:" in out
    families = [line.split()[0] for line in out.splitlines()[2:] if line and not line.startswith(" ")]
    assert families[:3] == ["embeddings", "two", "TREC"]


def test_plot_into_a_file_path_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = write(tmp_path / "not_a_dir", "x")
    status, _, err = call(
        capsys,
        "--run",
        write(tmp_path / "r.txt", RUN),
        "--qrels",
        write(tmp_path / "q.txt", QRELS),
        "--plot",
        blocker,
    )
    assert_one_line_error(status, err, "cannot create the plot directory")
    status, _, err = call(
        capsys,
        *("--run", str(tmp_path / "r.txt"), "--qrels", str(tmp_path / "q.txt")),
        *("--json", str(tmp_path / "missing_dir" / "out.json")),
    )
    assert_one_line_error(status, err, "cannot write the JSON file")


def test_similarity_samples_never_build_the_full_matrix() -> None:
    from embedmetrics._report import plots

    z1, z2 = _views(n=50)
    pos, neg = plots.view_pair_similarities(torch.from_numpy(z1), torch.from_numpy(z2))
    u1, u2 = _unit(z1), _unit(z2)
    np.testing.assert_allclose(pos, (u1 * u2).sum(1), atol=1e-6)
    full = u1 @ u2.T
    off = full[~np.eye(50, dtype=bool)]
    assert neg.size == plots.PAIR_SAMPLE
    assert np.isin(np.round(neg, 6), np.round(off, 6)).all()  # every sample is a real off-diagonal pair
    x, y = _clusters()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    pos, neg = plots.label_pair_similarities(xt, yt, xt, yt, same_source=True)
    sims = _unit(x) @ _unit(x).T
    same = (y[:, None] == y[None, :]) & ~np.eye(y.size, dtype=bool)
    assert np.isin(np.round(pos, 6), np.round(sims[same], 6)).all()
    assert np.isin(np.round(neg, 6), np.round(sims[y[:, None] != y[None, :]], 6)).all()
    assert not np.isclose(pos, 1.0).all()  # a query is never paired with itself


def test_progress_bar_only_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, qrels = write(tmp_path / "r.txt", RUN), write(tmp_path / "q.txt", QRELS)
    status, _, err = call(capsys, "--run", run, "--qrels", qrels)
    assert status == 0
    assert err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    status, _, err = call(capsys, "--run", run, "--qrels", qrels)
    assert status == 0
    assert "embedmetrics report" in err  # the tqdm bar's description
    assert "family" in err


#: What ``embedmetrics report`` (``make demo``) prints on its built-in example: every value to 4
#: decimals and the query counts. A change of the demo's numbers must be a reviewed change of this file:
#: ``embedmetrics report | grep -v '^json: ' > tests/families/report/demo_expected.txt``.
DEMO_EXPECTED = Path(__file__).with_name("demo_expected.txt")


def _demo_oracle(document: dict[str, dict[str, float]]) -> None:
    """The built-in example's TREC values equal pytrec_eval's (trec_eval itself) on the same run and
    qrels (its cosine scores have no ties, so the tie policy does not matter)."""
    import pytrec_eval

    from embedmetrics._report.default import load_default

    state = random.getstate()
    try:
        data = load_default()
    finally:
        random.setstate(state)  # the first import of scikit-learn moves Python's global generator
    run: dict[str, dict[str, float]] = {}
    for q, d, s in zip(data.run.qid, data.run.docno, data.run.score):
        run.setdefault(str(data.run.queries[q]), {})[str(data.run.docs[d])] = float(s)
    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in zip(data.qrels.qid, data.qrels.docno, data.qrels.rel):
        qrels.setdefault(str(data.qrels.queries[q]), {})[str(data.qrels.docs[d])] = int(g)
    names = {"map": "map", "mrr": "recip_rank", "r_precision": "Rprec"}
    for k in (1, 5, 10):
        names |= {f"ndcg@{k}": f"ndcg_cut_{k}", f"precision@{k}": f"P_{k}", f"recall@{k}": f"recall_{k}"}
        names[f"hit_rate@{k}"] = f"success_{k}"
    measures = {
        "map",
        "recip_rank",
        "Rprec",
        "ndcg_cut.1,5,10",
        "P.1,5,10",
        "recall.1,5,10",
        "success.1,5,10",
    }
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    assert len(per_query) == 599 == document["info"]["trec"]["queries_evaluated"]  # type: ignore[index]
    assert set(names) == set(document["trec"])
    for ours, theirs in names.items():
        want = math.fsum(values[theirs] for values in per_query.values()) / len(per_query)
        assert document["trec"][ours] == pytest.approx(want, abs=1e-12), ours


def test_default_example_in_a_real_process(tmp_path: Path) -> None:
    """``make demo``: the built-in example prints the pinned table (``demo_expected.txt``: every value
    to 4 decimals, 599 TREC queries, all judged), and its TREC values are trec_eval's."""
    done = run_cli("--json", "out.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = [line for line in done.stdout.splitlines() if not line.startswith("json: ")]
    expected = DEMO_EXPECTED.read_text(encoding="utf-8").splitlines()
    assert printed == expected, "\n".join(
        difflib.unified_diff(expected, printed, "expected", "printed", lineterm="")
    )
    assert "trec: 599 queries evaluated; skipped (as trec_eval 9 does; 10.0 stops" in done.stdout
    document = json.loads((tmp_path / "out.json").read_text())
    assert set(document) == {"embeddings", "views", "trec", "info"}
    assert document["info"]["source"] == "digits"
    assert {"precision_at_1", "NMI", "AMI", "precision@10"} <= set(document["embeddings"])
    assert {"contrastive_accuracy@5", "uniformity", "alignment"} <= set(document["views"])
    assert {"hit_rate@10", "ndcg@10", "map", "mrr", "r_precision", "recall@10"} <= set(document["trec"])
    for family in ("embeddings", "views", "trec"):
        for key, value in document[family].items():
            assert isinstance(value, float), (family, key)
            assert math.isfinite(value), (family, key)
    assert 0.8 < document["embeddings"]["precision_at_1"] <= 1.0  # digits are easy for kNN
    assert document["trec"]["recall@10"] < 0.1  # ~179 relevant per query: recall is low at 10
    hit = [document["trec"][f"hit_rate@{k}"] for k in (1, 5, 10)]
    assert hit == sorted(hit)
    rows = table_rows(done.stdout)
    assert len(rows) == sum(len(document[f]) for f in ("embeddings", "views", "trec"))
    _demo_oracle(document)


# ----------------------------------------------------------------------------- bad input: one line, early
RUN_3 = "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq1 Q0 d3 3 0.1 t\nq2 Q0 d1 1 0.3 t\n"
QRELS_3 = "q1 0 d2 1\nq2 0 d1 1\nq2 0 d4 1\n"


def test_huge_k_with_plots_caps_the_curve_at_the_run_depth(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embedmetrics._report import evaluate

    seen: list[int] = []
    real = evaluate.evaluate_trec

    def spy(data, ks, ties, curve_k=0):  # type: ignore[no-untyped-def]
        seen.append(curve_k)
        return real(data, ks, ties, curve_k)

    monkeypatch.setattr(evaluate, "evaluate_trec", spy)
    run, qrels = write(tmp_path / "run.txt", RUN_3), write(tmp_path / "qrels.txt", QRELS_3)
    status, out, err = call(
        capsys, "--run", run, "--qrels", qrels, "--k", "100000000", "--plot", str(tmp_path)
    )
    assert status == 0, err
    assert seen == [3]  # the deepest ranking of the run has 3 documents
    rows = dict(table_rows(out))
    assert float(rows["hit_rate@100000000"]) == 1.0  # the cut-off itself is still reported
    assert float(rows["recall@100000000"]) == pytest.approx(0.75, abs=1e-4)


def test_qrels_relevance_beyond_int64_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = write(tmp_path / "run.txt", RUN_3)
    qrels = write(tmp_path / "qrels.txt", "q1 0 d2 1\nq2 0 d1 99999999999999999999999\n")
    status, _, err = call(capsys, "--run", run, "--qrels", qrels)
    assert_one_line_error(status, err, "qrels.txt:2: relevance '99999999999999999999999' is out of range")


def test_pickled_objects_in_a_pt_file_are_one_line(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "objects.pt"
    path.write_bytes(pickle.dumps({"a": [1, "x"], "b": object.__name__}, protocol=4))
    done = run_cli("--view1", str(path), "--view2", str(path))  # a real process: warnings reach stderr
    assert_one_line_error(done.returncode, done.stderr, "objects.pt: cannot read it as .pt: it holds pickled")


def test_unwritable_json_path_fails_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embedmetrics._report import command

    def no_work(args):  # type: ignore[no-untyped-def]
        raise AssertionError("the inputs were loaded before the JSON path was checked")

    monkeypatch.setattr(command, "load_inputs", no_work)
    missing = str(tmp_path / "no" / "such" / "dir" / "out.json")
    status, _, err = call(capsys, "--json", missing)
    assert_one_line_error(status, err, "cannot write the JSON file: no directory")
    status, _, err = call(capsys, "--json", str(tmp_path))
    assert_one_line_error(status, err, "cannot write the JSON file: it is a directory")


def test_collapsed_views_score_the_same_in_float32_and_float64(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    z = np.repeat(np.random.default_rng(0).standard_normal((1, 16)), 50, axis=0)
    values = []
    for dtype in (np.float32, np.float64):
        path = tmp_path / f"z_{np.dtype(dtype).name}.npy"
        np.save(path, z.astype(dtype))
        status, out, err = call(capsys, "--view1", str(path), "--view2", str(path), "--json", "-")
        assert status == 0, err
        values.append(json.loads(out)["views"])
    for value in values:  # float64 used to give 0.0 (kernel-dependent ties), float32 0.02
        assert value["contrastive_accuracy@1"] == pytest.approx(0.02, abs=1e-8)
        assert value["uniformity"] == 0.0


# ----------------------------------------------------------------------------- dense retrieval
def _dense_files(tmp: Path, seed: int = 0) -> tuple[str, str, str, str]:
    """Queries (.npy + .ids.txt sidecar), corpus (.npz with an 'ids' array), the same qrels as a BEIR
    .tsv and as a TREC file; one query is unjudged, one judged document is not in the corpus."""
    rng = np.random.default_rng(seed)
    queries, corpus = rng.normal(size=(12, 6)).astype(np.float32), rng.normal(size=(40, 6)).astype(np.float32)
    np.save(tmp / "queries.npy", queries)
    write(tmp / "queries.ids.txt", "\n".join(f"q{i}" for i in range(12)) + "\n")
    np.savez(tmp / "corpus.npz", emb=corpus, ids=np.array([f"d{i}" for i in range(40)]))
    lines = [
        (f"q{i}", f"d{d}", int(rng.integers(0, 3)))
        for i in range(11)
        for d in rng.choice(40, 4, replace=False)
    ]
    lines.append(("q0", "d999", 1))
    tsv = write(
        tmp / "qrels.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in lines)
    )
    trec = write(tmp / "qrels.txt", "".join(f"{q} 0 {d} {r}\n" for q, d, r in lines))
    return str(tmp / "queries.npy"), str(tmp / "corpus.npz"), tsv, trec


def test_dense_report_equals_trec_eval_on_its_own_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries, corpus, tsv, trec = _dense_files(tmp_path)
    run, out_json = tmp_path / "run.txt", tmp_path / "dense.json"
    args = ("--queries", queries, "--corpus", corpus, "--qrels", tsv, "--k", "1,5,40", "--depth", "40")
    status, out, err = call(capsys, *args, "--save-run", str(run), "--json", str(out_json))
    assert status == 0, err
    got = json.loads(out_json.read_text())["dense"]
    assert table_rows(out) == [(k, f"{v:.4f}") for k, v in got.items()]
    expected = trec_eval_reference(run.read_text(), Path(trec).read_text(), [1, 5, 40])
    for key in ("ndcg", "precision", "recall", "hit_rate"):
        for k in (1, 5, 40):
            assert got[f"{key}@{k}"] == pytest.approx(expected[f"{key}@{k}"], abs=1e-6), f"{key}@{k}"
    assert got["map@40"] == pytest.approx(expected["map"], abs=1e-6)
    assert got["mrr@40"] == pytest.approx(expected["mrr"], abs=1e-6)
    assert got["r_precision"] == pytest.approx(expected["r_precision"], abs=1e-6)
    lines = run.read_text().splitlines()
    assert len(lines) == 12 * 40
    assert lines[0].split()[:4] == ["q0", "Q0", lines[0].split()[2], "1"]
    # the TREC file gives the same numbers as the BEIR .tsv
    status, _, err = call(capsys, *args[:4], "--qrels", trec, *args[6:], "--json", str(tmp_path / "t.json"))
    assert status == 0, err
    assert json.loads((tmp_path / "t.json").read_text())["dense"] == got


def test_dense_report_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries, corpus, tsv, _ = _dense_files(tmp_path)
    cases = [
        (["--queries", queries, "--qrels", tsv], "--queries needs --corpus too"),
        (["--queries", queries, "--corpus", corpus], "need --qrels too"),
        (
            ["--queries", queries, "--corpus", corpus, "--qrels", tsv, "--k", "10", "--depth", "5"],
            "--depth 5",
        ),
        (["--run", tsv, "--qrels", tsv, "--save-run", "x.txt"], "--save-run"),
        (["--queries", queries, "--corpus", str(tmp_path / "none.npy"), "--qrels", tsv], "no such file"),
    ]
    for args, fragment in cases:
        status, _, err = call(capsys, *args)
        assert_one_line_error(status, err, fragment)
    write(tmp_path / "queries.ids.txt", "q1\nq2\n")
    status, _, err = call(capsys, "--queries", queries, "--corpus", corpus, "--qrels", tsv)
    assert_one_line_error(status, err, "2 ids for 12 embedding rows")


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_trec_rows_per_query_equal_the_flat_rows(ties: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report evaluates one padded row per query; padding cells (copies of an item of query 0:
    relevant and retrieved, whichever it is) must count nowhere, neither ranked nor relevant: the same
    values as the flat rows with ``indexes``."""
    from embedmetrics._io.trec import TrecTensors
    from embedmetrics._report import evaluate

    data = TrecTensors(
        preds=torch.tensor([0.5, 0.9, 0.5, 0.2, 0.7, 0.1, 0.3], dtype=torch.float64),
        target=torch.tensor([3, 1, 1, 2, 0, 1, 2]),
        indexes=torch.tensor([0, 0, 0, 1, 1, 2, 0]),
        retrieved=torch.tensor([True, True, True, True, True, False, True]),
        query_ids=["a", "b", "c"],
        n_run_queries=3,
        n_qrels_queries=3,
    )
    assert evaluate.query_rows(data.indexes) is not None  # the padded layout is taken
    rows = evaluate.evaluate_trec(data, [1, 2, 5], ties, curve_k=3)
    monkeypatch.setattr(evaluate, "query_rows", lambda indexes: None)
    flat = evaluate.evaluate_trec(data, [1, 2, 5], ties, curve_k=3)
    assert rows == flat
