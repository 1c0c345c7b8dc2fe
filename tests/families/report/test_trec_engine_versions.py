"""trec_eval's engine (``embedmetrics._engine.trec_eval``) under both versions: its values against the
outputs trec_eval 10.0 and 9.0.8 print for their own test files (vendored in ``tests/trec_eval_suite``),
the measures 10.0 adds, the version switch, the parameters as ``meas_init.c`` reads them, and no torch.
Where ``TREC_EVAL`` (10.0) and ``TREC_EVAL_9`` (9.0.8) name built binaries, random lists are compared
with their lines too.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from embedmetrics._engine.trec_eval.names import NICKNAMES, parse_measure, parse_measures
from embedmetrics._engine.trec_eval.values import trec_eval_values
from embedmetrics._io.trec import read_qrels, read_run
from embedmetrics._io.trec_eval_lists import graded_lists

SUITE = Path(__file__).parents[2] / "trec_eval_suite"
Line = tuple[str, str, str]

#: trec_eval's own command lines (``quicktest``) that a run and qrels answer: options, qrels, run, output.
OWN_TESTS = {
    "a": (["-m", "all_trec"], "qrels.test", "results.test", "out.test.a"),
    "aq": (["-m", "all_trec", "-q"], "qrels.test", "results.test", "out.test.aq"),
    "aqc": (["-m", "all_trec", "-q", "-c"], "qrels.test", "results.trunc", "out.test.aqc"),
    "aqcM": (["-m", "all_trec", "-q", "-c", "-M", "100"], "qrels.test", "results.trunc", "out.test.aqcM"),
    "aql": (["-m", "all_trec", "-q", "-l", "2"], "qrels.rel_level", "results.test", "out.test.aql"),
    "meas_params": (
        ["-q", "-m", "iprec_at_recall..10,.20,.25,.75,.50", "-m", "P.5,7,3", "-m", "recall.20,2000",
         "-m", "Rprec_mult.5.0,0.2,0.35", "-m", "utility.2,-1,0,0", "-m", "11pt_avg..25,.5,.75",
         "-m", "ndcg.1=3,2=9,4=4.5", "-m", "ndcg_cut.10,20,23.4", "-m", "success.2,5,20"],
        "qrels.test", "results.test", "out.test.meas_params",
    ),
}  # fmt: skip


def _text(value: float, integer: bool) -> str:
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return str(int(value)) if integer else f"{value:6.4f}".strip()


def engine_lines(version: int, qrels: str, run: str, options: list[str]) -> list[Line]:
    """The engine's lines for trec_eval's ``-q -c -M -l -m`` (no ``runid``/``relstring``: text)."""
    specs, level, max_docs, complete, per_query = [], 1, None, False, False
    words = iter(options)
    for word in words:
        if word == "-m":
            specs.append(next(words))
        elif word in ("-l", "-M"):
            level, max_docs = (int(next(words)), max_docs) if word == "-l" else (level, int(next(words)))
        complete, per_query = complete or word == "-c", per_query or word == "-q"
    measures = parse_measures(specs or ["official"], version=version)
    lists = graded_lists(read_run(run), read_qrels(qrels), max_docs=max_docs)
    values, summary = trec_eval_values(lists, measures, level, complete, version=version)
    shown = [m for m in measures if m.name not in ("runid", "relstring")]
    lines = [
        (label, query, _text(float(values[label][i]), m.kind.integer))
        for i, query in enumerate(lists.query_ids if per_query else [])
        for m in shown
        if m.kind.per_query
        for label in m.labels()
    ]
    return lines + [(label, "all", _text(summary[label], m.kind.integer)) for m in shown
                    if m.kind.summary != "none" for label in m.labels()]  # fmt: skip


def printed_lines(text: str, ours: list[Line]) -> list[Line]:
    """trec_eval's lines but ``runid``/``relstring`` and (``-c`` in 10.0) the absent queries' lines."""
    keys = {line[:2] for line in ours}
    rows = [tuple(part.strip() for part in line.split("\t")) for line in text.splitlines()]
    return [row for row in rows if row[:2] in keys]  # type: ignore[misc]


@pytest.mark.parametrize("version", [10, 9])
@pytest.mark.parametrize("name", list(OWN_TESTS))
def test_engine_prints_trec_eval_s_own_expected_outputs(version: int, name: str) -> None:
    options, qrels, run, expected = OWN_TESTS[name]
    folder = SUITE / f"v{version}" / "test"
    ours = engine_lines(version, str(folder / qrels), str(folder / run), options)
    theirs = printed_lines((folder / expected).read_text(), ours)
    assert len(ours) > 20
    assert ours == theirs


def test_versions_differ_where_10_rounds_the_recall_cut_offs() -> None:
    """``lround(0.6 * R)`` (10.0) against ``(long)(0.6 * R + 0.9)`` (9.0.8): trec_eval's own outputs."""
    folder = SUITE / "v10" / "test"
    got = {}
    for version in (10, 9):
        lines = engine_lines(version, str(folder / "qrels.test"), str(folder / "results.test"),
                             ["-q", "-m", "iprec_at_recall", "-m", "rbp", "-m", "unj"] if version == 10
                             else ["-q", "-m", "iprec_at_recall"])  # fmt: skip
        got[version] = {line[:2]: line[2] for line in lines}
    assert got[10][("iprec_at_recall_0.60", "302")] == "0.1528"
    assert got[9][("iprec_at_recall_0.60", "302")] == "0.1420"
    expected_10 = {("rbp", "301"): "0.1861", ("rbp", "302"): "0.7628", ("unj_20", "301"): "0.1000",
                   ("unj_20", "all"): "0.0333", ("rbp", "all"): "0.3234"}  # out.test.aq of 10.0  # fmt: skip
    assert {key: got[10][key] for key in expected_10} == expected_10


def test_all_trec_of_each_version_and_the_measures_9_does_not_know() -> None:
    labels_10 = [label for m in parse_measures(["all_trec"]) for label in m.labels()]
    labels_9 = [label for m in parse_measures(["all_trec"], version=9) for label in m.labels()]
    assert labels_10[-5:] == ["rbp", "rbp_resid", "unj_5", "unj_10", "unj_20"]  # measures.c's order
    assert labels_10[:-5] == labels_9
    assert "yaap" not in NICKNAMES[10]["all_trec"]
    assert [m.name for m in parse_measures(["yaap", "map"], version=9)] == ["map", "yaap"]
    for name in ("rbp", "rbp_resid", "unj", "dcg", "ideal_dcg"):
        with pytest.raises(ValueError, match=f"unknown measure '{name}' in trec_eval 9"):
            parse_measure(name, version=9)
    with pytest.raises(ValueError, match="preference judgements"):
        parse_measure("prefs_simp")
    with pytest.raises(ValueError, match="version must be 10 or 9"):
        parse_measures(["map"], version=8)


@pytest.mark.parametrize(
    ("spec", "labels"),
    [
        ("ndcg_cut.10,20,23.4", ["ndcg_cut_10", "ndcg_cut_20", "ndcg_cut_23"]),  # atol: 23.4 is 23
        ("P.2.5", ["P_2"]),
        ("P.5,7,3", ["P_3", "P_5", "P_7"]),  # sorted
        ("Rprec_mult.5.0,0.2,0.35", ["Rprec_mult_0.20", "Rprec_mult_0.35", "Rprec_mult_5.00"]),
        ("iprec_at_recall..10,.20", ["iprec_at_recall_0.10", "iprec_at_recall_0.20"]),
        ("11pt_avg..25,.5,.75", ["11pt_avg_.25,.5,.75"]),
        ("ndcg.1=3,2=9,4=4.5", ["ndcg_1=3,2=9,4=4.5"]),
        ("utility.2,-1,0,0", ["utility_2,-1,0,0"]),
        ("success.2,5,20", ["success_2", "success_5", "success_20"]),
        ("recall.20,2000", ["recall_20", "recall_2000"]),
        ("relstring.20", ["relstring_20"]),
        ("map.5", ["map"]),  # a measure without parameters ignores them, as trec_eval does
        ("unj.3,1", ["unj_1", "unj_3"]),
        ("rbp.p=0.95", ["rbp_p=0.95"]),
    ],
)
def test_parameters_are_read_as_meas_init_reads_them(spec: str, labels: list[str]) -> None:
    assert [label for m in parse_measure(spec) for label in m.labels()] == labels


@pytest.mark.parametrize(
    ("specs", "fragment"),
    [
        (["P.5,5.9"], "given twice"),  # atol reads both as 5
        (["P.0"], "not positive"),
        (["P.5x"], "would read 5"),
        (["P.99999999999,5"], "misorders"),  # trec_eval's comparison of cut-offs overflows an int
        (["P."], "nothing after"),
        (["ndcg.1"], "malformed pair"),
        (["ndcg.1=2=3"], "malformed pair"),
        (["ndcg.1=2", "dcg"], "share one set of parameters"),  # trec_eval 10 crashes
    ],
)
def test_parameters_trec_eval_refuses_or_misreads_are_refused(specs: list[str], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_measures(specs)


def test_the_first_explicit_parameters_win_and_later_ones_are_not_read() -> None:
    measures = parse_measures(["P", "P.5", "P.x", "all_trec.7"])
    assert next(m for m in measures if m.name == "P").labels() == ["P_5"]
    assert len(measures) == len(NICKNAMES[10]["all_trec"])


def _files(tmp_path: Path, qrels: list[str], run: list[str]) -> tuple[str, str]:
    (tmp_path / "qrels").write_text("".join(f"{line}\n" for line in qrels))
    (tmp_path / "run").write_text("".join(f"{line}\n" for line in run))
    return str(tmp_path / "qrels"), str(tmp_path / "run")


def test_rbp_scales_gains_and_counts_the_unjudged_as_trec_eval_10(tmp_path: Path) -> None:
    """Values trec_eval 10.0 printed for these lists: gains above 1 or below 0 scaled to [0, 1] per query
    (the unjudged keep 0), ``p`` read from the pairs, ``rbp_resid`` 0 without an unjudged document."""
    qrels, run = _files(
        tmp_path,
        ["q1 0 a 2", "q1 0 b 1", "q1 0 c 0", "q2 0 a 1", "q2 0 b 0", "q3 0 a 3", "q3 0 b -1", "q3 0 c 1"],
        ["q1 0 a 1 3 t", "q1 0 x 2 2 t", "q1 0 b 3 1 t", "q2 0 a 1 3 t", "q2 0 b 2 2 t", "q3 0 b 1 5 t",
         "q3 0 c 2 4 t", "q3 0 a 3 3 t", "q3 0 z 4 2 t"],
    )  # fmt: skip
    lines = engine_lines(10, qrels, run, ["-q", "-m", "rbp", "-m", "rbp_resid", "-m", "unj", "-m", "yaap"])
    got = {line[:2]: line[2] for line in lines}
    assert [got[("rbp", q)] for q in ("q1", "q2", "q3", "all")] == ["0.1405", "0.1000", "0.1110", "0.1172"]
    assert [got[("rbp_resid", q)] for q in ("q1", "q2", "q3")] == ["0.8190", "0.0000", "0.8290"]
    assert [got[("unj_5", q)] for q in ("q1", "q2", "q3")] == ["0.2000", "0.0000", "0.4000"]
    assert [got[("yaap", q)] for q in ("q1", "q3", "all")] == ["0.6931", "0.1671", "0.5178"]
    for spec, want in (
        ("rbp.p=0.5,2=5", ["0.5250", "0.1000", "0.1250"]),
        ("rbp.1=-1", ["0.1000", "0.0900", "0.0810"]),
    ):
        got = {line[:2]: line[2] for line in engine_lines(10, qrels, run, ["-q", "-m", spec])}
        assert [got[(f"rbp_{spec[4:]}", q)] for q in ("q1", "q2", "q3")] == want


def test_gain_tables_keep_trec_eval_s_order_where_its_comparison_truncates(tmp_path: Path) -> None:
    """``comp_rel_gain`` compares gains by ``(int)(a - b)``: 0.5 and 0 are equal, and glibc's merge sort
    leaves level 1 (0.5) below level 0 (0): the ideal ranking stops at 0 (trec_eval 10.0 and 9.0.8 print
    6.8928 and 0.5758, where a sorted table gives 7.3581)."""
    qrels, run = _files(
        tmp_path, ["q1 0 a 3", "q1 0 b 2", "q1 0 c 1", "q1 0 d 1", "q1 0 e 0"],
        ["q1 0 e 1 5 t", "q1 0 c 2 4 t", "q1 0 a 3 3 t", "q1 0 b 4 2 t"],
    )  # fmt: skip
    got = {line[:2]: line[2] for line in engine_lines(10, qrels, run, ["-m", "ideal_dcg.2=5,1=0.5"])}
    assert got[("ideal_dcg_2=5,1=0.5", "all")] == "6.8928"
    for version in (10, 9):
        got = {line[:2]: line[2] for line in engine_lines(version, qrels, run, ["-m", "ndcg.1=0.5,2=5"])}
        assert got[("ndcg_1=0.5,2=5", "all")] == "0.5758"


def test_the_engine_imports_no_torch() -> None:
    code = (
        "import sys; from embedmetrics._engine.trec_eval.values import trec_eval_values; "
        "import embedmetrics._engine.trec_eval.extra; assert 'torch' not in sys.modules, 'torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def random_lists(tmp_path: Path, seed: int) -> tuple[str, str]:
    """Ties, grades -1..3 (and 0..1 only), queries without relevant documents, unjudged documents; every
    judged query in the run (10.0 exits 4 otherwise)."""
    rng = random.Random(seed)
    qrels, run = [], []
    for q in range(25):
        pool = [f"d{i}" for i in rng.sample(range(80), 40)]
        grades = [-1, 0, 0, 1, 1, 2, 3] if q % 4 else [0, 1]
        qrels += [f"q{q} 0 {d} {rng.choice(grades)}" for d in pool[: rng.randint(1, 30)]]
        ranked = rng.sample(pool, rng.randint(1, 40))
        run += [f"q{q} 0 {d} {i} {rng.choice([1.0, 2.0, rng.random()])} t" for i, d in enumerate(ranked)]
    return _files(tmp_path, qrels, run)


BINARY_CASES = [
    ["-q", "-m", "all_trec"],
    ["-q", "-c", "-M", "7", "-l", "2", "-m", "all_trec"],
    ["-q", "-m", "yaap", "-m", "11pt_avg.0.2,0.5,0.8", "-m", "G.1=0.5,2=5", "-m", "Rndcg.0=1,3=0.5",
     "-m", "ndcg_rel.1=3,3=1", "-m", "ndcg_cut.3,7.9", "-m", "Rprec_mult.0.5,2"],
    ["-q", "-m", "dcg", "-m", "ideal_dcg", "-m", "rbp_resid.p=0.5"],
    ["-q", "-m", "unj.1,3,50", "-m", "rbp.3=1,p=0.8"],  # (m_rbp.c reads its min and max uninitialized)
]  # fmt: skip


@pytest.mark.parametrize("version", [10, 9])
@pytest.mark.parametrize("options", BINARY_CASES, ids=["all_trec", "c-M-l", "parameters", "dcg", "rbp"])
def test_random_lists_equal_the_binary_s_lines(tmp_path: Path, version: int, options: list[str]) -> None:
    binary = os.environ.get("TREC_EVAL_9" if version == 9 else "TREC_EVAL")
    if binary is None:
        pytest.skip(f"no trec_eval {version} binary (set {'TREC_EVAL_9' if version == 9 else 'TREC_EVAL'})")
    if version == 9 and options[2] in ("dcg", "unj.1,3,50"):
        options = ["-q", "-m", "yaap"]  # 9.0.8 has none of these measures
    for seed in range(4):
        qrels, run = random_lists(tmp_path, seed)
        ours = engine_lines(version, qrels, run, options)
        printed = subprocess.run([binary, *options, qrels, run], capture_output=True, text=True, check=True)
        assert ours == printed_lines(printed.stdout, ours)
