"""trec_eval's measures and options (``-m``, ``-q``, ``-c``, ``-M``, ``-l``, ``--format trec_eval``) against
pytrec_eval, which wraps trec_eval 9 itself (``version=9``, ``--trec-eval 9``), on seeded random runs: ties,
graded and negative grades, queries without relevant documents, run queries without qrels and judged
queries absent from the run. Where trec_eval binaries are named by ``TREC_EVAL`` (10.0, or on ``PATH``)
and ``TREC_EVAL_9`` (9.0.8), the printed lines are compared with their stdout too.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from embedmetrics._engine.trec_eval.names import parse_measure, parse_measures
from embedmetrics._engine.trec_eval.values import evaluate, summarize
from embedmetrics._io.trec import read_qrels, read_run
from embedmetrics._io.trec_eval_lists import graded_lists
from embedmetrics.cli import main

pytrec_eval = pytest.importorskip("pytrec_eval")
pytrec_eval_ext = pytest.importorskip("pytrec_eval_ext")

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

#: Measures with parameters other than the defaults (pytrec_eval names them without the parameters).
WITH_PARAMETERS = (
    "P.3,7",
    "recall.2",
    "ndcg.1=0,2=1,3=5",
    "G.0=1,2=3",
    "Rndcg.2=1",
    "ndcg_rel.1=3,3=1",
    "Rprec_mult.0.5,2",
    "set_F.0.5",
    "iprec_at_recall.0.25,0.5",
    "11pt_avg.0.2,0.5,0.8",
    "success.1,3",
    "map_cut.3,100",
    "ndcg_cut.2,4",
    "relative_P.2",
    "utility.2,-1,0.5,0",
    "bpref",
    "infAP",
    "binG",
)


def random_case(seed: int, n_queries: int = 14) -> tuple[Run, Qrels]:
    """A run with many tied scores and its qrels: grades -1..3, some queries with no relevant document,
    some run queries without qrels, some judged queries absent from the run; the ids of every third case
    longer than 8 bytes (the readers code those as strings, shorter ones as integers)."""
    rng = random.Random(seed)
    long_ids = "-long-document-id" if seed % 3 == 2 else ""
    run: Run = {}
    qrels: Qrels = {}
    for i in range(n_queries):
        query = f"q{i}" if rng.random() < 0.8 else f"topic-{i}"
        pool = list(
            dict.fromkeys(
                f"d{rng.randrange(60)}{long_ids}" if rng.random() < 0.7 else f"doc_{rng.randrange(99)}x"
                for _ in range(40)
            )
        )
        kind = rng.random()
        if kind > 0.1:
            scores = [0.5, 1.0, 1.5, 2.0]
            run[query] = {
                d: rng.choice([*scores, rng.random()]) for d in rng.sample(pool, rng.randint(1, len(pool)))
            }
        if kind < 0.93:
            grades = [-1, 0, 0, 1, 1, 2, 3] if rng.random() < 0.8 else [-1, 0]
            qrels[query] = {d: rng.choice(grades) for d in rng.sample(pool, rng.randint(1, len(pool)))}
    if not set(run) & set(qrels):
        qrels[next(iter(run))] = {next(iter(run[next(iter(run))])): 1}
    return run, qrels


def write_files(tmp: Path, run: Run, qrels: Qrels) -> tuple[str, str]:
    run_lines = [
        f"{q} Q0 {d} {i + 1} {s!r} tag" for q, docs in run.items() for i, (d, s) in enumerate(docs.items())
    ]
    qrels_lines = [f"{q} 0 {d} {g}" for q, docs in qrels.items() for d, g in docs.items()]
    (tmp / "run.txt").write_text("\n".join(run_lines) + "\n")
    (tmp / "qrels.txt").write_text("\n".join(qrels_lines) + "\n")
    return str(tmp / "run.txt"), str(tmp / "qrels.txt")


def truncated(run: Run, max_docs: int | None) -> Run:
    """Each query's first ``max_docs`` documents in trec_eval's order (score descending, then docno
    descending), written plainly: the oracle of ``-M``."""
    if max_docs is None:
        return run
    out = {}
    for query, docs in run.items():
        by_docno = sorted(docs.items(), key=lambda item: item[0], reverse=True)
        ranked = sorted(by_docno, key=lambda item: -item[1])
        out[query] = dict(ranked[:max_docs])
    return out


def pytrec_values(run: Run, qrels: Qrels, specs: list[str], level: int) -> dict[str, dict[str, float]]:
    """pytrec_eval's values per query (its extension directly: its wrapper does not pass gain pairs)."""
    judged = {q: docs for q, docs in qrels.items() if docs}
    names = {name for spec in specs for name in pytrec_eval.supported_nicknames.get(spec, [spec])}
    evaluator = pytrec_eval_ext.RelevanceEvaluator(
        query_relevance=judged, measures=names, relevance_level=level, judged_docs_only_flag=False
    )
    return evaluator.evaluate(run)


def ours(run_path: str, qrels_path: str, specs: list[str], level: int, max_docs: int | None):
    lists = graded_lists(read_run(run_path), read_qrels(qrels_path), max_docs=max_docs)
    measures = parse_measures(specs, version=9)
    levels = (lists.level_query, lists.level_grade, lists.level_count)
    values = evaluate(lists.starts, lists.grade, levels, measures, level, version=9)
    return lists, measures, values


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9


@pytest.mark.parametrize("seed", range(6))
# (pytrec_eval refuses -l 0: the binary test has it)
@pytest.mark.parametrize(("level", "max_docs"), [(1, None), (2, None), (1, 5), (3, 12), (4, None), (5, 1)])
@pytest.mark.parametrize("specs", [["all_trec"], list(WITH_PARAMETERS)], ids=["all_trec", "parameters"])
def test_every_measure_equals_pytrec_eval_per_query(
    tmp_path: Path, seed: int, level: int, max_docs: int | None, specs: list[str]
) -> None:
    run, qrels = random_case(seed)
    lists, measures, values = ours(*write_files(tmp_path, run, qrels), specs, level, max_docs)
    reference = pytrec_values(truncated(run, max_docs), qrels, specs, level)
    assert lists.query_ids == sorted(set(run) & {q for q, d in qrels.items() if d})
    compared = 0
    for measure in measures:
        if measure.name in ("runid", "relstring"):
            continue
        for label in measure.labels():
            key = measure.name if measure.given is not None else label
            for i, query in enumerate(lists.query_ids):
                expected = reference[query][key]
                assert same(float(values[label][i]), expected), (
                    label,
                    query,
                    float(values[label][i]),
                    expected,
                )
                compared += 1
    assert compared >= len(lists.query_ids) * 10


def trec_eval_summary(per_query: dict[str, dict[str, float]], label: str, n: int, qrels: Qrels) -> float:
    """trec_eval 9's summary of one measure (``meas_avg.c``, ``m_num_q.c``, ``m_num_rel.c``) from
    pytrec_eval's per-query values, ``n`` its divisor (the judged queries with ``-c``)."""
    column = [values[label] for values in per_query.values()]
    if label == "num_q":
        return float(n)
    if label.startswith("num_"):
        if label == "num_rel" and n != len(column):  # -c: every relevant qrels line
            return float(sum(g > 0 for docs in qrels.values() for g in docs.values()))
        return float(sum(column))
    if label.startswith("gm_"):
        return math.exp((sum(column) + (n - len(column)) * math.log(1e-5)) / n)
    return sum(column) / n


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("all_judged", [False, True], ids=["evaluated", "-c"])
@pytest.mark.parametrize(("level", "max_docs"), [(1, None), (2, 4)])
def test_summary_is_trec_eval_s(
    tmp_path: Path, seed: int, all_judged: bool, level: int, max_docs: int | None
) -> None:
    run, qrels = random_case(seed + 10)
    lists, measures, values = ours(*write_files(tmp_path, run, qrels), ["all_trec"], level, max_docs)
    reference = pytrec_values(truncated(run, max_docs), qrels, ["all_trec"], level)
    reference = {q: reference[q] for q in lists.query_ids}
    n = lists.n_qrels_queries if all_judged else len(lists.query_ids)
    summary = summarize(
        values, measures, n if all_judged else None, lists.positive_judged if all_judged else None
    )
    assert n > len(lists.query_ids) or not all_judged or seed > 0  # -c counts an absent query
    assert len(summary) > 90
    for label, value in summary.items():
        assert same(value, trec_eval_summary(reference, label, n, qrels)), label


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", "--trec-eval", "9", *args])  # pytrec_eval computes trec_eval 9's values
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def expected_lines(run: Run, qrels: Qrels, specs: list[str], per_query: bool) -> list[tuple[str, str, str]]:
    """trec_eval's lines from pytrec_eval's values: each query's (sorted ids), then ``all``; integers for the
    counts, four decimals otherwise; no per-query line for num_q and the geometric means."""
    raw = pytrec_values(run, qrels, specs, 1)
    queries = sorted(raw)
    measures = parse_measures(specs, version=9)
    keys = {label: (m.name if m.given is not None else label) for m in measures for label in m.labels()}
    reference = {q: {label: raw[q][key] for label, key in keys.items() if key in raw[q]} for q in queries}
    lines = []
    for query in queries if per_query else []:
        for m in measures:
            if m.kind.per_query and m.name != "relstring":
                value = reference[query]
                lines += [(label, query, fmt(value[label], m.kind.integer)) for label in m.labels()]
    for m in measures:
        if m.name == "runid":
            lines.append(("runid", "all", "tag"))
        if m.kind.summary != "none":
            lines += [
                (
                    label,
                    "all",
                    fmt(
                        trec_eval_summary({q: reference[q] for q in queries}, label, len(queries), qrels),
                        m.kind.integer,
                    ),
                )
                for label in m.labels()
            ]
    return lines


def fmt(value: float, integer: bool) -> str:
    return str(int(value)) if integer else f"{value:6.4f}".strip()


@pytest.mark.parametrize("seed", range(3))
def test_format_trec_eval_prints_trec_eval_s_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    run, qrels = random_case(seed + 20)
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    specs = ["official", "ndcg_cut.10", "infAP", "set_F.0.5"]
    status, out, err = call(
        capsys,
        "--run",
        run_path,
        "--qrels",
        qrels_path,
        "--format",
        "trec_eval",
        "-q",
        *[x for s in specs for x in ("-m", s)],
    )
    assert status == 0, err
    lines = out.splitlines()
    assert all(len(line.split("\t")) == 3 and len(line.split("\t")[0]) >= 22 for line in lines)
    printed = [tuple(part.strip() for part in line.split("\t")) for line in lines]
    expected = expected_lines(run, qrels, specs, per_query=True)
    assert len(printed) == len(expected)
    for got, want in zip(printed, expected):
        assert got[:2] == want[:2]
        # the last decimal may differ where the two sums round on either side of it
        assert got[2] == want[2] or abs(float(got[2]) - float(want[2])) <= 1.00001e-4, (got, want)


def test_json_carries_every_query_s_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = random_case(31)
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    status, out, err = call(
        capsys,
        "--run",
        run_path,
        "--qrels",
        qrels_path,
        "-q",
        "-m",
        "P.5",
        "-m",
        "gm_map",
        "-m",
        "num_ret",
        "--json",
        "-",
    )
    assert status == 0, err
    document = json.loads(out)["trec_eval"]
    reference = pytrec_values(run, qrels, ["P.5", "gm_map", "num_ret"], 1)
    assert sorted(document["per_query"]) == sorted(reference)
    for query, values in document["per_query"].items():
        assert set(values) == {"P_5", "num_ret"}  # trec_eval prints gm_map in the summary only
        assert same(values["P_5"], reference[query]["P_5"])
        assert values["num_ret"] == reference[query]["num_ret"]
    logs = [v["gm_map"] for v in reference.values()]
    assert same(document["all"]["gm_map"], math.exp(sum(logs) / len(logs)))


def test_max_docs_and_relevance_level_change_the_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, qrels = random_case(5)
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    outs = []
    for extra in ([], ["-M", "3"], ["-l", "2"], ["-c"]):
        status, out, err = call(
            capsys,
            "--run",
            run_path,
            "--qrels",
            qrels_path,
            "--format",
            "trec_eval",
            "-m",
            "map",
            "-m",
            "num_ret",
            "-m",
            "num_q",
            *extra,
        )
        assert status == 0, err
        outs.append({line.split("\t")[0].strip(): line.split("\t")[2] for line in out.splitlines()})
    base, cut, strict, complete = outs
    assert int(cut["num_ret"]) < int(base["num_ret"])
    assert cut["map"] != base["map"]
    assert strict["map"] != base["map"]
    assert int(complete["num_q"]) > int(base["num_q"])
    assert float(complete["map"]) < float(base["map"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-m", "P.-3"], "'P'"),
        (["-m", "ndcg_cut.x"], "'ndcg_cut'"),
        (["-m", "P.5,5"], "'P'"),
        (["-m", "nosuch"], "'nosuch'"),
        (["-m", "ndcg.1"], "'ndcg'"),
        (["-m", "utility.1,2"], "'utility'"),
        (["-m", "prefs_simp"], "'prefs_simp'"),
        (["-m", "ndcg.a=1"], "'ndcg'"),
        (["-m", "ndcg.1=2,1=3"], "'ndcg'"),
        (["-m", "iprec_at_recall.2"], "'iprec_at_recall'"),
        (["-m", "iprec_at_recall.-0.1"], "'iprec_at_recall'"),
        (["-m", "11pt_avg.1.5"], "'11pt_avg'"),
        (["-m", "Rprec_mult.-1"], "'Rprec_mult'"),
        (["-m", "set_F.-1"], "'set_F'"),
        (["-M", "-1"], "-M"),  # -M 0 is taken, as trec_eval takes it
        (["-l", "-1"], "-l"),
        (["-q", "--ties", "pessimistic"], "--ties"),
        (["-q", "--view1", "a.npy", "--view2", "b.npy"], "--view1"),
    ],
)
def test_bad_measures_and_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    run_path, qrels_path = write_files(tmp_path, *random_case(1))
    status, out, err = call(capsys, "--run", run_path, "--qrels", qrels_path, *args)
    assert status == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert fragment in err, err


def test_two_runs_with_per_query_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_path, qrels_path = write_files(tmp_path, *random_case(1))
    status, out, err = call(capsys, "--run", run_path, "--run", run_path, "--qrels", qrels_path, "-q")
    assert status == 2
    assert out == ""
    assert "one run's values" in err
    assert "embedmetrics trec_eval QRELS RUN1 RUN2" in err


def test_measure_names_and_parameters() -> None:
    assert [m.labels() for m in parse_measure("P.10,5")] == [["P_5", "P_10"]]
    assert parse_measure("iprec_at_recall.0.25,.5")[0].labels() == [
        "iprec_at_recall_0.25",
        "iprec_at_recall_0.50",
    ]
    assert parse_measure("ndcg.1=0,2=1")[0].labels() == ["ndcg_1=0,2=1"]
    with pytest.raises(ValueError, match="not an integer"):  # trec_eval 9 would read x as level 0
        parse_measure("ndcg.1=0,x=2", version=9)
    assert parse_measure("ndcg.1=0,x=2")[0].pairs == ((1, 0.0),)  # trec_eval 10 skips it
    official = [m.name for m in parse_measures(["official"])]
    assert official[:3] == ["runid", "num_q", "num_ret"]
    assert official[-1] == "P"
    assert [m.name for m in parse_measures(["P", "map"])] == ["map", "P"]  # trec_eval's print order


def trec_eval_binary(version: int) -> str | None:
    """A built trec_eval: ``TREC_EVAL`` (10.0, else ``trec_eval`` on ``PATH``) or ``TREC_EVAL_9`` (9.0.8)."""
    if version == 9:
        return os.environ.get("TREC_EVAL_9")
    return os.environ.get("TREC_EVAL") or shutil.which("trec_eval")


BINARY_OPTIONS = {
    "all_trec": ["-q", "-m", "all_trec"],
    "official": ["-q"],
    "c-M": ["-q", "-c", "-M", "5", "-m", "all_trec"],
    "l-M": ["-q", "-l", "2", "-M", "3", "-m", "all_trec"],
    "l0": ["-q", "-l", "0", "-m", "all_trec"],
    "c-l5-M1": ["-q", "-c", "-l", "5", "-M", "1", "-m", "all_trec"],
    "parameters": ["-q", "-m", "P.3,7", "-m", "ndcg.1=0,2=1,3=5", "-m", "G.0=1,2=3", "-m", "relstring.4",
                   "-m", "set_F.0.5", "-m", "yaap", "-m", "ndcg_cut.2,23.4", "-m", "Rndcg.1=0.5,2=2"],
}  # fmt: skip


@pytest.mark.parametrize("version", [10, 9])
@pytest.mark.parametrize("options", list(BINARY_OPTIONS.values()), ids=list(BINARY_OPTIONS))
def test_lines_equal_the_trec_eval_binary_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], version: int
) -> None:
    binary = trec_eval_binary(version)
    if binary is None:
        pytest.skip(f"no trec_eval {version} binary (set {'TREC_EVAL_9' if version == 9 else 'TREC_EVAL'})")
    for seed in range(3):
        run, qrels = random_case(seed + 40, n_queries=30)
        if version == 10:  # 10 exits 4 where a judged query is absent from the run (without -c)
            qrels = {q: docs for q, docs in qrels.items() if q in run}
        run_path, qrels_path = write_files(tmp_path, run, qrels)
        theirs = subprocess.run(
            [binary, *options, qrels_path, run_path], capture_output=True, text=True, check=True
        )
        status = main(["report", "--trec-eval", str(version), "--run", run_path, "--qrels", qrels_path,
                       "--format", "trec_eval", *options])  # fmt: skip
        out, err = capsys.readouterr()
        assert status == 0, err
        assert out.splitlines() == theirs.stdout.splitlines()


def test_four_decimals_is_printf_s() -> None:
    import numpy as np

    from embedmetrics._report.trec_eval_mode import four_decimals

    rng = np.random.default_rng(7)
    ties = np.arange(4000) / 32  # exact binary fractions: rounding ties at the fourth decimal
    odd = [math.inf, -0.5, -1e-9, 12.34567, 9.99995, 9.99994999, 0.00005, 0.00015, 1 / 3, 1e9]
    values = np.concatenate([rng.random(20000), np.arange(10001) / 10000, ties, odd])
    assert four_decimals(values) == [f"{v:6.4f}" for v in values.tolist()]
    nans = np.array([math.nan, -math.nan])  # glibc's printf writes the sign of a NaN
    assert four_decimals(nans) == ["   nan", "  -nan"]


def test_scores_equal_in_single_precision_are_tied_as_in_trec_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trec_eval keeps a score as a C ``float``: 1.000000011 and 1.00000001 tie, docno descending decides."""
    run, qrels = {"q1": {"d1": 1.000000011, "d2": 1.00000001}}, {"q1": {"d1": 1}}
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    status, out, _ = call(
        capsys, "--run", run_path, "--qrels", qrels_path, "--format", "trec_eval", "-m", "P.1"
    )
    assert status == 0
    want = pytrec_eval.RelevanceEvaluator(qrels, {"P.1"}).evaluate(run)["q1"]["P_1"]
    assert want == 0.0
    assert out.split() == ["P_1", "all", "0.0000"]


def test_per_query_with_only_summary_measures_prints_no_blank_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_path, qrels_path = write_files(tmp_path, *random_case(2))
    for measure in ("gm_map", "num_q", "runid"):
        status, out, _ = call(capsys, "--run", run_path, "--qrels", qrels_path, "--format", "trec_eval", "-q",
                              "-m", measure)  # fmt: skip
        assert status == 0
        assert "" not in out.splitlines(), (measure, out)
        assert len(out.splitlines()) == 1


def test_a_measure_given_twice_keeps_its_first_parameters_as_trec_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_path, qrels_path = write_files(tmp_path, *random_case(2))
    status, out, _ = call(capsys, "--run", run_path, "--qrels", qrels_path, "--format", "trec_eval",
                          "-m", "P.5", "-m", "P.10", "-m", "official")  # fmt: skip
    assert status == 0
    labels = [line.split()[0] for line in out.splitlines()]
    assert "P_5" in labels
    assert "P_10" not in labels


def test_json_carries_the_run_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_path, qrels_path = write_files(tmp_path, *random_case(2))
    status, out, _ = call(capsys, "--run", run_path, "--qrels", qrels_path, "-m", "runid", "-m", "map",
                          "--json", "-")  # fmt: skip
    assert status == 0
    assert json.loads(out)["trec_eval"]["all"]["runid"] == "tag"


#: The table's TREC measures and trec_eval's names for them (``--ties trec_eval``, cut-offs 1, 3, 10).
TABLE_NAMES = {"mrr": "recip_rank", "map": "map", "r_precision": "Rprec"} | {
    f"{ours}@{k}": f"{theirs}_{k}"
    for k in (1, 3, 10)
    for ours, theirs in (
        ("precision", "P"),
        ("ndcg", "ndcg_cut"),
        ("recall", "recall"),
        ("hit_rate", "success"),
    )
}


def single_precision_ties_case(seed: int) -> tuple[Run, Qrels]:
    """``random_case``, every third score moved to a neighbour equal to it in single precision only."""
    run, qrels = random_case(seed, n_queries=20)
    rng = random.Random(seed)
    near = {q: {d: (s + 1e-9 * rng.randint(1, 9) if rng.random() < 0.33 else s) for d, s in docs.items()}
            for q, docs in run.items()}  # fmt: skip
    return near, {q: docs for q, docs in qrels.items() if q in near}


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_table_with_trec_eval_ties_follows_the_trec_eval_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """``report --ties trec_eval`` (the table) ranks as ``--trec-eval`` says: 10.0's doubles, 9.0.8's
    single precision; each version's table equals that version's trec_eval lines, and 9's equals
    pytrec_eval (which wraps 9). The versions differ on these runs (the case has teeth)."""
    run, qrels = single_precision_ties_case(seed)
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    files = ["--run", run_path, "--qrels", qrels_path]
    specs = ["-m", "recip_rank", "-m", "map", "-m", "Rprec", "-m", "P.1,3,10", "-m", "ndcg_cut.1,3,10",
             "-m", "recall.1,3,10", "-m", "success.1,3,10"]  # fmt: skip
    lines = {}
    for version in ("10", "9"):
        status = main(["report", *files, "--ties", "trec_eval", "--trec-eval", version, "--k", "1,3,10",
                       "--json", "-"])  # fmt: skip
        table = json.loads(capsys.readouterr().out)
        assert status == 0
        assert table["info"]["trec"]["trec_eval"] == int(version)
        status = main(["report", *files, "--format", "trec_eval", "--trec-eval", version, *specs])
        lines[version] = {
            row.split()[0]: float(row.split()[2]) for row in capsys.readouterr().out.splitlines()
        }
        assert status == 0
        for ours_name, theirs in TABLE_NAMES.items():
            assert table["trec"][ours_name] == pytest.approx(lines[version][theirs], abs=5e-5), (
                version,
                ours_name,
            )
    assert lines["10"] != lines["9"]
    judged = {q: d for q, d in qrels.items() if d}
    per_query = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank", "P.1"}).evaluate(run)
    mean = sum(v["recip_rank"] for v in per_query.values()) / len(per_query)
    assert lines["9"]["recip_rank"] == pytest.approx(mean, abs=5e-5)
