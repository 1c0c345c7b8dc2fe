"""Measures by the names PyTerrier and ir_measures users type (issue 57, item 2): every ir_measures name
that ir_measures hands to pytrec_eval equals ``ir_measures.calc_aggregate`` and ``iter_calc`` (trec_eval
9.0.8, ``all_judged_queries=True``: ir_measures scores a judged query the run lacks 0); ``Judged@k`` and
``RR@k`` equal ir_measures' own code on tie-free runs and trec_eval's order (an oracle here) on tied ones;
an unknown name gets the nearest spellings of both vocabularies."""

from __future__ import annotations

import functools
import operator
import re

import ir_measures
import numpy as np
import pytest

from embedmetrics.trec import evaluate

PYTREC_NAMES = [
    "nDCG@10", "nDCG", "AP", "AP@100", "P@5", "P(rel=2)@5", "R@1000", "R@5", "RR", "RR(rel=2)", "Rprec",
    "Rprec(rel=2)", "Bpref", "infAP", "SetP", "SetR", "SetF", "SetF(beta=0.5)", "SetAP", "NumQ", "NumRet",
    "NumRel", "NumRelRet", "NumRet(rel=2)", "Success@10", "IPrec@0.5", "IPrec@0.0", "P(judged_only=True)@10",
    "AP(rel=2)", "SetP(relative=True)", "MAP", "NDCG@5", "Precision@10", "Recall@20", "MRR",
]  # fmt: skip
OWN_NAMES = ["Judged@10", "Judged@3", "Judged", "RR@10", "RR@3", "RR(rel=2)@10"]


def _data(seed: int, tied: bool, every_query: bool) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(25):
        docs = [f"d{d}" for d in rng.choice(300, size=60, replace=False)]
        grades = rng.integers(-1, 4, 20) if q % 5 else np.zeros(20, dtype=np.int64)
        if q < 23:
            qrels[f"q{q}"] = {d: int(g) for d, g in zip(docs[:20], grades)}
        if every_query or q > 2:
            scores = rng.integers(0, 8, 50) / 8 if tied else rng.permutation(50) + rng.random()
            run[f"q{q}"] = {d: float(s) for d, s in zip(docs[8:58], scores)}
    return qrels, run


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("every_query", [True, False])
def test_names_handed_to_pytrec_eval_equal_ir_measures(seed: int, tied: bool, every_query: bool) -> None:
    qrels, run = _data(seed, tied, every_query)
    parsed = [ir_measures.parse_measure(n) for n in PYTREC_NAMES]
    theirs = ir_measures.calc_aggregate(parsed, qrels, run)
    ours = evaluate(qrels, run, PYTREC_NAMES, trec_eval="9", all_judged_queries=True)
    assert list(ours) == PYTREC_NAMES
    for name, measure in zip(PYTREC_NAMES, parsed):
        assert ours[name] == pytest.approx(theirs[measure], rel=1e-12, abs=1e-12), name
    per_query = evaluate(qrels, run, PYTREC_NAMES, trec_eval="9", per_query=True)
    for metric in ir_measures.iter_calc(parsed, qrels, run):
        name = PYTREC_NAMES[parsed.index(metric.measure)]
        if metric.query_id in run:  # the run's queries (an absent one is ir_measures' 0, not evaluated)
            assert per_query[name][metric.query_id] == pytest.approx(metric.value, rel=1e-12, abs=1e-12)


def _trec_order(row: dict[str, float]) -> list[str]:
    return [d for d, _ in sorted(row.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def _oracle(name: str, judged: dict[str, int], ranked: list[str]) -> float:
    cut = int(name.split("@")[1]) if "@" in name else len(ranked)
    top = ranked[:cut]
    if name.startswith("Judged"):
        return sum(d in judged for d in top) / len(top)
    level = 2 if "rel=2" in name else 1
    return next((1.0 / (i + 1) for i, d in enumerate(top) if judged.get(d, -1) >= level), 0.0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tied", [False, True])
def test_judged_and_rr_at_k(seed: int, tied: bool) -> None:
    qrels, run = _data(seed, tied, every_query=True)
    ours = evaluate(qrels, run, OWN_NAMES, trec_eval="9", per_query=True)
    for name in OWN_NAMES:
        for query in qrels:
            expected = _oracle(name, qrels[query], _trec_order(run[query]))
            assert ours[name][query] == pytest.approx(expected, rel=1e-15), (name, query)
    if not tied:  # no tie: ir_measures' own code (docno ascending among ties) ranks as trec_eval does
        parsed = [ir_measures.parse_measure(n) for n in OWN_NAMES]
        theirs = ir_measures.calc_aggregate(parsed, qrels, run)
        means = evaluate(qrels, run, OWN_NAMES, trec_eval="9")
        for name, measure in zip(OWN_NAMES, parsed):
            assert means[name] == pytest.approx(theirs[measure], rel=1e-12), name


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [("nDGC@10", ["nDCG@10", "ndcg_cut.10"]), ("ndcg@10", ["nDCG@10", "ndcg_cut.10"]),
     ("mrr", ["MRR", "recip_rank"]), ("precision@5", ["Precision@5", "P.5"]),
     ("ndgc_cut.10", ["ndcg_cut.10"])],
)  # fmt: skip
def test_unknown_name_names_the_nearest_spellings(typed: str, suggested: list[str]) -> None:
    qrels, run = _data(0, False, True)
    with pytest.raises(ValueError, match="unknown measure") as err:
        evaluate(qrels, run, [typed])
    message = str(err.value)
    assert "\n" not in message
    for name in suggested:
        assert name in message, (name, message)
    assert "nicknames" not in message


@pytest.mark.parametrize(
    ("typed", "words"),
    [("IPrec", "needs a cut-off"), ("Rprec@5", "takes no cut-off"), ("nDCG(rel=2)@10", "parameter"),
     ("P(rel=x)@5", "rel must be"), ("AP(judged_only=yes)", "True or False"), ("RR@0", "cut-off")],
)  # fmt: skip
def test_bad_parameters_are_named(typed: str, words: str) -> None:
    qrels, run = _data(0, False, True)
    with pytest.raises(ValueError, match=words):
        evaluate(qrels, run, [typed])


def _files(tmp_path, qrels: dict, run: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    q, r = tmp_path / "qrels", tmp_path / "run"
    q.write_text("".join(f"{qid} 0 {d} {g}\n" for qid, row in qrels.items() for d, g in row.items()))
    r.write_text("".join(f"{qid} Q0 {d} 0 {s!r} sys\n" for qid, row in run.items() for d, s in row.items()))
    return str(q), str(r)


def test_report_takes_ir_measures_names(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``report -m`` with ir_measures' names prints trec_eval's columns under the names as typed, each value
    ``evaluate``'s (itself equal to ir_measures above); counts as integers; each query's lines with -q."""
    from embedmetrics.cli import main

    qrels, run = _data(1, True, True)
    q, r = _files(tmp_path, qrels, run)
    names = ["nDCG@10", "P(rel=2)@5", "map", "RR@10", "NumQ"]
    assert (
        main(
            [
                "report",
                "--run",
                r,
                "--qrels",
                q,
                "--format",
                "trec_eval",
                "-q",
                *functools.reduce(operator.iadd, (["-m", n] for n in names), []),
            ]
        )
        == 0
    )
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    per_query = evaluate(qrels, run, names, per_query=True)
    means = evaluate(qrels, run, names)
    assert [c[0].strip() for c in lines[-5:]] == ["nDCG@10", "P(rel=2)@5", "map", "RR@10", "NumQ"]
    assert lines[-1] == ["NumQ                  ", "all", "23"]
    for label, query, text in lines:
        value = means[label.strip()] if query == "all" else per_query[label.strip()][query]
        assert text == (str(int(value)) if label.strip() == "NumQ" else f"{value:6.4f}"), (label, query)
    assert len(lines) == 5 * 23 + 5


def test_report_unknown_name_is_one_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from embedmetrics.cli import main

    q, r = _files(tmp_path, *_data(0, False, True))
    assert main(["report", "--run", r, "--qrels", q, "-m", "nDGC@10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "nDCG@10" in err
    assert "ndcg_cut.10" in err


@pytest.mark.parametrize(
    ("typed", "words"),
    [("P(rel=2)@5,10", "cut-off '5,10'"), ("P@5.5", "cut-off '5.5'"), ("AP@0", "'AP@0': cut-off"),
     ("IPrec@2", "'IPrec@2': recall point"), ("P@5 P@10", "one name per item"), ("P_5", "P@5 or"),
     ("bpref@10", "takes no cut-off"), ("recip_rank@10", "RR@10"), ("nDCG(gains={0:0,1:1})@10", "ndcg.0=0")],
)  # fmt: skip
def test_malformed_names_are_refused_as_typed(typed: str, words: str) -> None:
    qrels, run = _data(0, False, True)
    with pytest.raises(ValueError, match=re.escape(words)):
        evaluate(qrels, run, [typed])


def test_rel_on_recall_and_iprec_and_the_log2_discount() -> None:
    """``R(rel=2)@10`` and ``IPrec(rel=2)@0.5`` as trec_eval with ``-l 2`` (ir_measures computes them so);
    ``nDCG(dcg=log2)`` is ``nDCG``."""
    qrels, run = _data(2, False, True)
    parsed = [
        ir_measures.parse_measure(n) for n in ["R(rel=2)@10", "IPrec(rel=2)@0.5", "nDCG(dcg='log2')@10"]
    ]
    theirs = ir_measures.calc_aggregate(parsed, qrels, run)
    ours = evaluate(qrels, run, ["R(rel=2)@10", "IPrec(rel=2)@0.5", "nDCG(dcg='log2')@10"], trec_eval="9",
                    all_judged_queries=True)  # fmt: skip
    for (name, value), measure in zip(ours.items(), parsed):
        assert value == pytest.approx(theirs[measure], rel=1e-12), name


def test_the_trec_eval_command_points_an_ir_measures_name_to_its_trec_eval_name(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from embedmetrics.cli import main

    q, r = _files(tmp_path, *_data(0, False, True))
    assert main(["trec_eval", "-m", "nDCG@10", q, r]) == 1
    err = capsys.readouterr().err
    assert "-m ndcg_cut.10" in err
    assert len(err.strip().splitlines()) == 1
