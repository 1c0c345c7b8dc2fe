"""The comparison a paper needs (issue 57, items 3-4): ``compare_runs`` on any measure names, each
system against all or against a baseline, its p-values equal to scipy's paired t test on ir_measures'
per-query values, Holm's correction over the pairs tested; the tables (text, Markdown, LaTeX, CSV) carry
the best value in bold, the marks and a caption; the command line's ``-m``, ``--baseline``, ``--seed``,
``--n-resamples`` and ``--table-format``, and a JSON that records what the marks depend on."""

from __future__ import annotations

import csv
import functools
import io
import json
import operator
import re
from pathlib import Path

import ir_measures
import numpy as np
import pytest
import torch
from scipy import stats

from embedmetrics.functional import compare
from embedmetrics.trec import compare_runs, evaluate

MEASURES = ["nDCG@10", "AP@100", "P@5", "R@20"]


def _systems(seed: int = 0, n_systems: int = 4, n_queries: int = 40) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    qrels = {
        f"q{q}": {f"d{d}": int(rng.integers(0, 3)) for d in rng.choice(80, 15, replace=False)}
        for q in range(n_queries)
    }
    runs = {}
    for s in range(n_systems):
        run = {}
        for q, judged in qrels.items():
            docs = rng.choice(80, 30, replace=False)
            run[q] = {f"d{d}": float(rng.random() + s * 0.15 * (f"d{d}" in judged)) for d in docs}
        runs[f"sys_{s}"] = run
    return qrels, runs


def _write_files(tmp_path: Path, qrels: dict, runs: dict) -> tuple[Path, list[str]]:
    """The qrels and each run as TREC files (a run named by its file)."""
    qrels_path = tmp_path / "qrels"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, row in qrels.items() for d, g in row.items()))
    paths = []
    for name, run in runs.items():
        path = tmp_path / f"{name}.trec"
        lines = (f"{q} Q0 {d} 0 {s!r} {name}\n" for q, row in run.items() for d, s in row.items())
        path.write_text("".join(lines))
        paths.append(str(path))
    return qrels_path, paths


def _holm(p: np.ndarray) -> np.ndarray:
    order = np.argsort(p, kind="stable")
    m = p.size
    out = np.empty(m)
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[j]))
        out[j] = running
    return out


@pytest.mark.parametrize("baseline", [None, "sys_0", "sys_2"])
def test_p_values_equal_scipy_on_ir_measures_values(baseline: str | None) -> None:
    qrels, runs = _systems()
    result = compare_runs(qrels, runs, MEASURES, baseline=baseline, trec_eval="9")
    names = list(runs)
    for name in MEASURES:
        measure = ir_measures.parse_measure(name)
        per_query = {
            s: {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels, run)}
            for s, run in runs.items()
        }
        queries = sorted(qrels)
        values = {s: np.array([per_query[s][q] for q in queries]) for s in names}
        comparison = result.comparisons[name]
        pairs = (
            [(a, baseline) for a in names if a != baseline]
            if baseline
            else [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
        )
        assert comparison.pairs == pairs
        raw = np.array([stats.ttest_rel(values[a], values[b]).pvalue for a, b in pairs])
        np.testing.assert_allclose(comparison.p_value.numpy(), raw, rtol=1e-9, atol=1e-300)
        np.testing.assert_allclose(comparison.p_value_corrected.numpy(), _holm(raw), rtol=1e-9, atol=1e-300)
        np.testing.assert_allclose(comparison.means.numpy(), [values[s].mean() for s in names], rtol=1e-12)


def _cells(table: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| ")
    ]


def test_tables_mark_the_best_and_the_significant() -> None:
    qrels, runs = _systems(1)
    result = compare_runs(qrels, runs, MEASURES)
    letters = result.letters
    rows = _cells(result.to_markdown())[1:]
    assert [r[1] for r in rows] == [n.replace("_", "\\_") for n in runs]
    for j, name in enumerate(MEASURES):
        comparison = result.comparisons[name]
        best = max(comparison.means.tolist())
        for row, system in zip(rows, runs):
            cell = row[2 + j]
            mean = comparison.means[comparison.names.index(system)].item()
            sup = "".join("ᵃᵇᶜᵈ"["abcd".index(letters[t])] for t in comparison.beats(system))
            assert cell == (f"**{mean:.4f}**" if mean == best else f"{mean:.4f}") + sup, cell
    assert "<" not in result.to_markdown()  # no HTML: GitHub renders it as it is
    latex = result.to_latex()
    assert latex.startswith("\\begin{table}")
    assert latex.endswith("\\end{table}")
    assert latex.count("{") == latex.count("}")
    assert "\\toprule" in latex
    assert "\\bottomrule" in latex
    commands = set(re.findall(r"\\([A-Za-z]+)", latex))
    assert commands <= {
        "begin",
        "end",
        "centering",
        "caption",
        "label",
        "toprule",
        "midrule",
        "bottomrule",
        "textbf",
    }
    assert "sys\\_0" in latex
    assert "sys_0" not in latex.replace("sys\\_0", "")
    assert "Holm correction, alpha = 0.05" in latex
    assert "paired t test" in latex
    for system in runs:  # bold where the mean is the column's best
        line = next(r for r in latex.splitlines() if f"sys\\_{system[-1]} &" in r)
        for j, name in enumerate(MEASURES):
            comparison = result.comparisons[name]
            is_best = comparison.means.max().item() == comparison.means[comparison.names.index(system)].item()
            assert ("\\textbf" in line.split("&")[2 + j]) == is_best


def test_baseline_marks_and_csv_p_values() -> None:
    qrels, runs = _systems(2)
    result = compare_runs(qrels, runs, MEASURES, baseline="sys_0")
    table = list(csv.reader(io.StringIO(result.to_csv())))
    assert table[0] == ["system", *MEASURES, *(f"{m} p" for m in MEASURES)]
    for row in table[1:]:
        for j, name in enumerate(MEASURES):
            comparison = result.comparisons[name]
            assert float(row[1 + j]) == comparison.means[comparison.names.index(row[0])].item()
            p = row[1 + len(MEASURES) + j]
            if row[0] == "sys_0":
                assert p == ""
            else:
                i = comparison.pairs.index((row[0], "sys_0"))
                assert float(p) == comparison.p_value_corrected[i].item()
    text = result.to_text()
    for name in MEASURES:
        comparison = result.comparisons[name]
        for system in runs:
            dagger = "sys_0" in comparison.beats(system)
            line = next(r for r in text.splitlines() if f" {system} " in r)
            mean = comparison.means[comparison.names.index(system)].item()
            assert (f"{mean:.4f}\u2020" in line) == dagger
    assert "against the baseline, sys_0" in text


def test_randomization_settings_are_honoured_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from embedmetrics.cli import main

    qrels, runs = _systems(3, n_systems=3, n_queries=25)
    qrels_path, paths = _write_files(tmp_path, qrels, runs)
    argv = [
        "report",
        *functools.reduce(operator.iadd, (["--run", p] for p in paths), []),
        "--qrels",
        str(qrels_path),
        "-m",
        "RR@10",
        "-m",
        "AP@100",
        "--test",
        "randomization",
        "--seed",
        "7",
        "--n-resamples",
        "3000",
        "--baseline",
        "sys_1",
        "--json",
        "-",
    ]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    info = document["info"]
    assert (
        info["test"],
        info["seed"],
        info["n_resamples"],
        info["baseline"],
        info["correction"],
        info["alpha"],
        info["ties"],
    ) == ("randomization", 7, 3000, "sys_1", "holm", 0.05, "trec_eval")
    per_query = evaluate(qrels, runs, ["RR@10"], per_query=True)
    values = {
        s: torch.tensor([per_query[s]["RR@10"][q] for q in sorted(qrels)], dtype=torch.float64) for s in runs
    }
    expected = compare(values, test="randomization", seed=7, n_resamples=3000, baseline="sys_1")
    got = [p["p_value_corrected"] for p in document["comparison"]["RR@10"]["pairs"]]
    assert got == expected.p_value_corrected.tolist()
    assert main([*argv[:-2], "--table-format", "csv"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0] == "system,RR@10,AP@100,RR@10 p,AP@100 p"
    assert "queries compared" in out.err


def test_bad_comparison_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels, runs = _systems(4, n_systems=2, n_queries=10)
    with pytest.raises(ValueError, match="baseline"):
        compare_runs(qrels, runs, ["AP"], baseline="nope")
    with pytest.raises(ValueError, match="did you mean nDCG@10"):
        compare_runs(qrels, runs, ["nDGC@10"])
    with pytest.raises(ValueError, match="at least 2 runs"):
        compare_runs(qrels, {"a": runs["sys_0"]}, ["AP"])
    with pytest.raises(ValueError, match="Argument `table_format`"):
        compare_runs(qrels, runs, ["AP"]).table("html")


def test_review_findings_on_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the demanding-user review of issue 57 found: each refused in one line naming the argument, or
    done as the user meant it."""
    from embedmetrics.cli import main

    qrels, runs = _systems(5, n_systems=2, n_queries=10)
    with pytest.raises(ValueError, match="Argument `query_set`"):
        compare_runs(qrels, runs, ["AP"], query_set="union")
    listed = compare_runs(qrels, list(runs.values()), ["AP"])
    assert listed.names == ["run1", "run2"]
    numbered = compare_runs(qrels, {1: runs["sys_0"], 2: runs["sys_1"]}, ["AP"], baseline=1)
    assert numbered.comparisons["AP"].pairs == [("2", "1")]
    with pytest.raises(ValueError, match="no such file"):
        evaluate(qrels, str(tmp_path / "missing.trec"), ["AP"])
    odd = {"bm25_v2&x%": runs["sys_0"], "<b>x</b>|`y`": runs["sys_1"]}
    result = compare_runs(qrels, odd, ["AP"])
    latex = result.to_latex()
    assert "bm25\\_v2\\&x\\%" in latex
    assert "\\textless{}b\\textgreater{}x\\textless{}/b\\textgreater{}\\textbar{}" in latex
    markdown = result.to_markdown()
    assert "\\<b\\>x\\</b\\>\\|\\`y\\`" in markdown
    assert "<b>" not in markdown
    with pytest.raises(ValueError, match="Argument `label`"):
        result.to_latex(label="tab:a%b")
    assert result.to_dict()["info"]["systems"] == list(odd)
    # the command line: --ci with a paper table, comparison flags with one run, the option's own name
    qrels_path, paths = _write_files(tmp_path, qrels, runs)
    both = ["report", "--run", paths[0], "--run", paths[1], "--qrels", str(qrels_path), "-m", "AP"]
    for extra, words in [
        (["--ci", "--table-format", "latex"], "--ci"),
        (["--n-resamples", "0"], "--n-resamples must"),
    ]:
        assert main([*both, *extra]) == 2
        assert words in capsys.readouterr().err
    assert main(["report", "--run", paths[0], "--qrels", str(qrels_path), "--baseline", "sys_0"]) == 2
    assert "two or more --run" in capsys.readouterr().err
    assert main([*both, "--baseline", paths[0], "--table-format", "csv"]) == 0  # the --run as given
    assert capsys.readouterr().out.splitlines()[0] == "system,AP,AP p"


def test_a_dataframe_with_a_repeated_row_is_refused() -> None:
    pandas = pytest.importorskip("pandas")
    qrels = pandas.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d1", "d2"], "relevance": [1, 1]})
    run = pandas.DataFrame({"query_id": ["q1"] * 3, "doc_id": ["d1", "d1", "d2"], "score": [0.5, 0.3, 0.1]})
    with pytest.raises(ValueError, match="Argument `run` lists document 'd1' twice for query 'q1'"):
        evaluate(qrels, run, ["AP"])
    with pytest.raises(ValueError, match="Argument `qrels` lists document 'd1' twice"):
        evaluate(pandas.concat([qrels, qrels.iloc[:1]]), run.iloc[1:], ["AP"])
    with pytest.raises(ValueError, match="whole-number grades, got nan"):
        evaluate(qrels.assign(relevance=[1.0, float("nan")]), run.iloc[1:], ["AP"])
