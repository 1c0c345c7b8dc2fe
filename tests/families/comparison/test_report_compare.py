"""``embedmetrics report --run A --run B --run C --qrels Q``: the systems compared from TREC files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import scipy.stats

from embedmetrics._io.trec import join_run, read_qrels, read_run
from embedmetrics._report.evaluate import per_query_trec
from embedmetrics.cli import main
from oracles.trec_runs import write_runs


def _args(runs: list[Path], qrels: Path) -> list[str]:
    return ["report", *(a for p in runs for a in ("--run", str(p))), "--qrels", str(qrels), "--k", "5,10"]


def test_the_table_marks_the_significant_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, qrels = write_runs(tmp_path)
    assert main([*_args(runs, qrels), "--ci", "--json", str(tmp_path / "out.json")]) == 0
    table = capsys.readouterr().out
    rows = {line.split()[1]: line for line in table.splitlines() if line[:2] in ("a ", "b ", "c ")}
    assert set(rows) == {"bm25", "dense", "hybrid"}
    document = json.loads((tmp_path / "out.json").read_text())["comparison"]
    ndcg = document["ndcg@10"]
    assert ndcg["test"] == "t"
    assert ndcg["correction"] == "holm"
    for pair in ndcg["pairs"]:  # every p-value is scipy's paired t-test on the per-query values
        values = {
            n: per_query_trec(
                join_run(read_run(str(tmp_path / f"{n}.trec")), read_qrels(str(qrels))).tensors(),
                [5, 10],
                "average",
            )["ndcg@10"].numpy()
            for n in (pair["a"], pair["b"])
        }
        assert pair["p_value"] == pytest.approx(
            scipy.stats.ttest_rel(values[pair["a"]], values[pair["b"]]).pvalue, rel=1e-9
        )
    beaten = document["ndcg@10"]["beats"]["hybrid"]
    assert "bm25" in beaten
    assert "^a" in rows["hybrid"]  # bm25 is system a
    assert "[" in rows["bm25"]  # the interval with --ci
    low, high = document["ndcg@10"]["ci"]["dense"]
    assert low < document["ndcg@10"]["means"]["dense"] < high


def test_different_query_sets_are_refused_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, qrels = write_runs(tmp_path)
    lines = runs[1].read_text().splitlines(keepends=True)
    runs[1].write_text("".join(line for line in lines if not line.startswith(("q3 ", "q17 "))))
    assert main(_args(runs, qrels)) == 2
    error = capsys.readouterr().err
    assert "dense lacks 2 (q17, q3)" in error
    assert "--query-set intersection" in error
    assert main([*_args(runs, qrels), "--query-set", "intersection", "--json", "-"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["info"]["queries_compared"] == 78


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--alpha", "1.5"], "--alpha must be a number in (0, 1), got 1.5"),
        (["--test", "z"], "invalid choice"),
        (["--correction", "sidak"], "invalid choice"),
        (["--embeddings", "x.npy"], "runs and --qrels only"),
    ],
)
def test_bad_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    runs, qrels = write_runs(tmp_path)
    assert main([*_args(runs, qrels), *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_comparison_needs_qrels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, _ = write_runs(tmp_path)
    assert main(["report", "--run", str(runs[0]), "--run", str(runs[1])]) == 2
    assert "needs --qrels" in capsys.readouterr().err


def test_figures_of_a_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, qrels = write_runs(tmp_path)
    assert main([*_args(runs, qrels), "--test", "randomization", "--plot", str(tmp_path / "fig")]) == 0
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [
        "comparison_means_ci.png",
        "comparison_paired_differences.png",
    ]
    assert "randomization test" in capsys.readouterr().out


def test_per_query_values_follow_the_query_ids(tmp_path: Path) -> None:
    """Value ``i`` is query ``query_ids[i]``'s (the runs are aligned by query id on this order)."""
    from embedmetrics.functional import retrieval_normalized_dcg

    runs, qrels = write_runs(tmp_path)
    data = join_run(read_run(str(runs[0])), read_qrels(str(qrels))).tensors()
    values = per_query_trec(data, [10], "average")["ndcg@10"]
    assert values.shape == (len(data.query_ids),)
    for i in range(len(data.query_ids)):
        rows = data.indexes == i
        one = retrieval_normalized_dcg(
            data.preds[rows], data.target[rows], k=10, retrieved=data.retrieved[rows]
        )
        assert float(values[i]) == pytest.approx(float(one), abs=1e-12), data.query_ids[i]


def test_the_same_run_twice_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, qrels = write_runs(tmp_path)
    same = tmp_path / "." / runs[0].name
    assert main(_args([runs[0], runs[1], Path(str(same))], qrels)) == 2
    error = capsys.readouterr().err
    assert "is the same file as --run" in error
    assert "Traceback" not in error


def test_more_runs_than_queries_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three runs on two judged queries: one line naming the counts (``compare`` refuses more systems than
    queries), no traceback; two runs on two queries are compared."""
    (tmp_path / "qrels").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    runs = []
    for name, score in (("a", 0.3), ("b", 0.6), ("c", 0.9)):
        path = tmp_path / f"{name}.trec"
        path.write_text(f"q1 Q0 d1 1 {score} {name}\nq1 Q0 d2 2 0.1 {name}\nq2 Q0 d2 1 0.5 {name}\n")
        runs.append(path)
    assert main(_args(runs, tmp_path / "qrels")) == 2
    error = capsys.readouterr().err
    assert "comparing 3 runs needs at least 3 queries" in error
    assert "got 2" in error
    assert "Traceback" not in error
    assert main(_args(runs[:2], tmp_path / "qrels")) == 0
