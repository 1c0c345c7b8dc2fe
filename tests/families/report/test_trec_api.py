"""``embedmetrics.trec.evaluate`` (issue 57, item 1, in part): trec_eval's measures from Python, the same
values for a dict of dicts, a DataFrame and a file, equal to pytrec_eval (trec_eval 9.0.8) query by query
under ``trec_eval="9"``; several runs at once; bad input named; no torch imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytrec_eval

from embedmetrics.trec import evaluate

MEASURES = ["map", "P.5,10", "ndcg_cut.10", "recip_rank", "Rprec", "bpref", "recall.100", "ndcg"]
PYTREC = {"map", "P_5", "P_10", "ndcg_cut_10", "recip_rank", "Rprec", "bpref", "recall_100", "ndcg"}


def _data(seed: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Graded qrels and a run with tied scores (a tenth of a grid), judged queries the run lacks and run
    queries without qrels."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(30):
        docs = [f"d{d}" for d in rng.choice(200, size=40, replace=False)]
        if q < 27:
            qrels[f"q{q}"] = {d: int(g) for d, g in zip(docs[:15], rng.integers(0, 3, 15))}
        if q > 1:
            run[f"q{q}"] = {d: float(np.round(s, 1)) for d, s in zip(docs[5:], rng.random(35))}
    return qrels, run


@pytest.mark.parametrize("seed", range(3))
def test_per_query_values_equal_pytrec_eval(seed: int) -> None:
    qrels, run = _data(seed)
    ours = evaluate(qrels, run, MEASURES, per_query=True, trec_eval="9")
    theirs = pytrec_eval.RelevanceEvaluator(qrels, PYTREC).evaluate(run)
    assert set(ours) == PYTREC
    for measure in PYTREC:
        assert ours[measure].keys() == theirs.keys(), measure
        for query, values in theirs.items():
            assert ours[measure][query] == pytest.approx(values[measure], rel=1e-12, abs=1e-15), (
                measure,
                query,
            )
    means = evaluate(qrels, run, MEASURES, trec_eval="9")
    for measure in PYTREC:
        expected = sum(v[measure] for v in theirs.values()) / len(theirs)
        assert means[measure] == pytest.approx(expected, rel=1e-12), measure


def _write(tmp: Path, qrels: dict[str, Any], run: dict[str, Any]) -> tuple[Path, Path]:
    q, r = tmp / "qrels", tmp / "run"
    q.write_text("".join(f"{qid} 0 {d} {g}\n" for qid, row in qrels.items() for d, g in row.items()))
    r.write_text("".join(f"{qid} Q0 {d} 0 {s!r} tag\n" for qid, row in run.items() for d, s in row.items()))
    return q, r


def test_paths_dicts_and_frames_give_the_same_values(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    qrels, run = _data(7)
    q_path, r_path = _write(tmp_path, qrels, run)
    frame_q = pd.DataFrame(
        [(q, d, g) for q, row in qrels.items() for d, g in row.items()],
        columns=["query_id", "doc_id", "relevance"],
    )
    frame_r = pd.DataFrame(
        [(q, d, s) for q, row in run.items() for d, s in row.items()], columns=["query_id", "doc_id", "score"]
    )
    expected = evaluate(qrels, run, MEASURES, per_query=True)
    assert evaluate(str(q_path), r_path, MEASURES, per_query=True) == expected
    assert evaluate(frame_q, frame_r, MEASURES, per_query=True) == expected
    several = evaluate(q_path, {"a": run, "b": str(r_path), "c": frame_r}, MEASURES)
    assert list(several) == ["a", "b", "c"]
    assert several["a"] == several["b"] == several["c"] == evaluate(qrels, run, MEASURES)


def test_bad_input_is_named() -> None:
    qrels, run = _data(1)
    with pytest.raises(ValueError, match="`trec_eval` must be '10' or '9', got '8'"):
        evaluate(qrels, run, ["map"], trec_eval="8")
    with pytest.raises(TypeError, match="`measures` must be a list of measure names"):
        evaluate(qrels, run, "map")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN score"):
        evaluate(qrels, {"q3": {"d1": float("nan")}}, ["map"])
    with pytest.raises(
        TypeError, match=r"`run` as a dict must map each query id .* got float for query 'q1'"
    ):
        evaluate(qrels, {"q1": 0.5}, ["map"])


def test_evaluate_imports_no_torch() -> None:
    code = (
        "import sys\nfrom embedmetrics.trec import evaluate\n"
        "evaluate({'q': {'d': 1}}, {'q': {'d': 1.0}}, ['map'])\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("version", ["10", "9"])
def test_values_equal_the_trec_eval_binary_s(tmp_path: Path, version: str) -> None:
    """Every value of ``all_trec``, per query and in the summary, printed as trec_eval prints it, equals the
    binary's line (``TREC_EVAL`` / ``TREC_EVAL_9``: trec_eval 10.0 / 9.0.8 built from source)."""
    import os

    from embedmetrics._report.trec_eval_mode import four_decimals

    binary = os.environ.get("TREC_EVAL_9" if version == "9" else "TREC_EVAL")
    if not binary:
        pytest.skip(f"no trec_eval {version} binary (set {'TREC_EVAL_9' if version == '9' else 'TREC_EVAL'})")
    for seed in range(3):
        qrels, run = _data(seed)
        qrels = {q: row for q, row in qrels.items() if q in run}  # 10.0 stops at a judged query absent
        q_path, r_path = _write(tmp_path, qrels, run)
        out = subprocess.run([binary, "-q", "-m", "all_trec", str(q_path), str(r_path)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        per_query = evaluate(str(q_path), str(r_path), ["all_trec"], per_query=True, trec_eval=version)
        means = evaluate(qrels, run, ["all_trec"], trec_eval=version)
        checked = 0
        for line in out.splitlines():
            label, query, text = (field.strip() for field in line.split("\t"))
            if label in ("runid", "relstring") or label.startswith("relstring"):
                continue
            value = means[label] if query == "all" else per_query[label][query]
            integer = text.lstrip("-").isdigit()
            assert (str(int(value)) if integer else four_decimals(np.array([value]))[0]) == text, (
                label,
                query,
            )
            checked += 1
        assert checked > 1000
