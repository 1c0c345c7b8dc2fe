"""Rank fusion (issue 57, item 5): on tie-free runs, the fused order and scores equal ranx's ``fuse`` for
every method and normalisation; tied fused scores are ranked as trec_eval ranks them; the fused run is the
same bits under any order of the input runs; bad arguments are named; the command writes a TREC run."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from ranx import Run
from ranx import fuse as ranx_fuse

from embedmetrics.trec import evaluate, fuse

SCORE_METHODS = ["sum", "mnz", "max", "min", "anz"]
NORMS = ["min-max", "max", "sum", "zmuv", "rank"]


def _runs(seed: int, n_runs: int = 3, tied: bool = False) -> list[dict[str, dict[str, float]]]:
    """Runs over shared queries with partly overlapping documents; distinct scores within a list (or
    scores on a coarse grid with ``tied``)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n_runs):
        run: dict[str, dict[str, float]] = {}
        for q in range(12):
            docs = rng.choice(60, size=int(rng.integers(5, 30)), replace=False)
            scores = (
                rng.integers(0, 4, docs.size) / 4
                if tied
                else rng.permutation(docs.size) * 0.37 + r + rng.random()
            )
            run[f"q{q}"] = {f"d{d}": float(s) for d, s in zip(docs, scores)}
        out.append(run)
    return out


def _write_runs(tmp_path: Path, runs: list[dict[str, dict[str, float]]]) -> list[str]:
    paths = []
    for i, run in enumerate(runs):
        path = tmp_path / f"run{i}.trec"
        path.write_text(
            "".join(f"{q} Q0 {d} 0 {s!r} r{i}\n" for q, row in run.items() for d, s in row.items())
        )
        paths.append(str(path))
    return paths


def _ranx(runs: list[dict], method: str, norm: str | None, params: dict) -> dict[str, dict[str, float]]:
    return ranx_fuse([Run(r) for r in runs], norm=norm, method=method, params=params).to_dict()


def _assert_same(ours: dict, theirs: dict) -> None:
    assert ours.keys() == theirs.keys()
    for query, row in theirs.items():
        assert ours[query].keys() == row.keys(), query
        for doc, value in row.items():
            assert ours[query][doc] == pytest.approx(value, rel=1e-12, abs=1e-12), (query, doc)
        expected = sorted(row, key=lambda d: -row[d])
        got = list(ours[query])
        for a, b in zip(expected, got):  # the order, where ranx's scores are not within rounding
            if a != b:
                assert row[a] == pytest.approx(row[b], rel=1e-12), (query, a, b)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("method", SCORE_METHODS)
@pytest.mark.parametrize("norm", NORMS)
def test_score_methods_equal_ranx(seed: int, method: str, norm: str) -> None:
    runs = _runs(seed)
    _assert_same(fuse(runs, method, norm=norm), _ranx(runs, method, norm, {}))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("method", "params"),
    [("rrf", {}), ("rrf", {"k": 10}), ("isr", {}), ("bordafuse", {}), ("wsum", {"weights": [0.2, 0.5, 0.3]})],
)
def test_rank_methods_and_wsum_equal_ranx(seed: int, method: str, params: dict) -> None:
    runs = _runs(seed)
    _assert_same(fuse(runs, method, **params), _ranx(runs, method, "min-max", params))


@pytest.mark.parametrize("method", ["rrf", "isr", "bordafuse", "sum", "mnz", "max", "min", "anz"])
def test_tied_fused_scores_rank_as_trec_eval_and_input_order_does_not_matter(method: str) -> None:
    runs = _runs(7, n_runs=3, tied=True)
    fused = [fuse(list(p), method) for p in itertools.permutations(runs)]
    for other in fused[1:]:
        assert other == fused[0]
        assert all(list(other[q]) == list(fused[0][q]) for q in other)
    for row in fused[0].values():
        ranked = sorted(row, key=lambda d: (row[d], d), reverse=True)  # score, then docno, descending
        assert list(row) == ranked


def test_arrival_order_of_documents_does_not_matter() -> None:
    runs = _runs(3, tied=True)
    shuffled = [{q: dict(reversed(list(row.items()))) for q, row in run.items()} for run in runs]
    assert fuse(runs, "rrf") == fuse(shuffled, "rrf")
    assert [list(r) for r in fuse(runs, "rrf").values()] == [list(r) for r in fuse(shuffled, "rrf").values()]


def test_bad_arguments_are_named() -> None:
    runs = _runs(0, n_runs=2)
    with pytest.raises(ValueError, match="Argument `method`"):
        fuse(runs, "combfoo")
    with pytest.raises(ValueError, match="Argument `norm`"):
        fuse(runs, "sum", norm="l2")
    with pytest.raises(ValueError, match="Argument `weights`"):
        fuse(runs, "wsum", weights=[1.0])
    with pytest.raises(ValueError, match="Argument `weights`"):
        fuse(runs, "sum", weights=[1.0, 2.0])
    with pytest.raises(TypeError, match="alpha"):
        fuse(runs, "rrf", alpha=1)
    with pytest.raises(ValueError, match="at least 2 runs"):
        fuse(runs[:1], "rrf")
    assert list(fuse(runs, "CombMNZ", depth=3)["q0"]) == list(fuse(runs, "mnz")["q0"])[:3]


def test_fuse_command_writes_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from embedmetrics.cli import main

    runs = _runs(1, n_runs=2)
    paths = _write_runs(tmp_path, runs)
    out = tmp_path / "fused.trec"
    assert main(["fuse", "--method", "rrf", "--k", "20", *paths, "-o", str(out)]) == 0
    expected = fuse(runs, "rrf", k=20)
    lines = [line.split() for line in out.read_text().splitlines()]
    assert [(q, d) for q, _, d, *_ in lines] == [(q, d) for q, row in expected.items() for d in row]
    assert all(float(s) == expected[q][d] for q, _, d, _, s, _ in lines)
    assert [int(r) for *_, r, _, _ in lines][:3] == [1, 2, 3]
    qrels = {q: dict.fromkeys(list(row)[:3], 1) for q, row in runs[0].items()}
    assert evaluate(qrels, str(out), ["map"]) == evaluate(qrels, expected, ["map"])


def test_review_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The review of issue 57: bad depth, k with a score method, a path for runs, -o onto an input, a tag
    with a space, -o - on stdout, one run."""
    from embedmetrics.cli import main

    runs = _runs(2, n_runs=2)
    for bad in (0, -3, 1.5):
        with pytest.raises(ValueError, match="Argument `depth`"):
            fuse(runs, "rrf", depth=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Argument `k` is read by method 'rrf' only"):
        fuse(runs, "sum", k=10)
    with pytest.raises(TypeError, match="Argument `runs`"):
        fuse("bm25.trec", "rrf")
    paths = _write_runs(tmp_path, runs)
    before = Path(paths[0]).read_bytes()
    assert main(["fuse", "--method", "rrf", *paths, "-o", paths[0]]) == 2
    assert Path(paths[0]).read_bytes() == before
    assert main(["fuse", "--method", "rrf", *paths, "-o", str(tmp_path / "f"), "--tag", "a b"]) == 2
    assert main(["fuse", "--method", "sum", "--k", "10", *paths, "-o", str(tmp_path / "f")]) == 2
    assert "--k is read by method 'rrf' only" in capsys.readouterr().err
    assert main(["fuse", "--method", "rrf", paths[0], "-o", str(tmp_path / "f")]) == 2
    assert "at least 2 runs, got 1" in capsys.readouterr().err
    assert main(["fuse", "--method", "rrf", *paths, "-o", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = fuse(runs, "rrf")
    assert len(lines) == sum(len(row) for row in expected.values())
