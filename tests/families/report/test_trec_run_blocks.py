"""A run file evaluated in blocks of whole queries (issue 57, item 6): the same bytes as the whole file
read at once, for any block size, every trec_eval option the blocks serve and both versions; a file whose
queries come back, or a judged query the run lacks where trec_eval 10.0 stops or ``-c`` ranks it, read
whole instead; a bad line named by its line in the file; the whole run never read where it is grouped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedmetrics._io import trec_run_blocks
from embedmetrics._io.trec import read_qrels, read_run
from embedmetrics._io.trec_run_blocks import NotGrouped, run_blocks
from embedmetrics._report.trec_eval_mode import Settings, file_lines, measures_of, run_lines
from embedmetrics.trec import evaluate


def _files(tmp_path: Path, seed: int, *, grouped: bool = True, absent: bool = False) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    qrels, run = [], []
    queries = [f"q{q}" for q in rng.permutation(40)]  # not in name order: trec_eval sorts them
    for i, q in enumerate(queries):
        docs = rng.choice(200, 50, replace=False)
        if not (absent and i % 7 == 0) or True:
            qrels += [f"{q} 0 d{d} {int(g)}\n" for d, g in zip(docs[:12], rng.integers(-1, 4, 12))]
        if absent and i % 7 == 0:
            continue
        n = int(rng.integers(1, 45))
        scores = np.round(rng.random(n) * 4, 1)  # many ties
        run += [f"{q} Q0 d{d} {r} {s} tag{seed}\n" for r, (d, s) in enumerate(zip(docs[5 : 5 + n], scores))]
        if i == 3:
            run.append("# a comment line\n")
    if not grouped:
        run = [run[i] for i in rng.permutation(len(run))]
    (tmp_path / "qrels").write_text("".join(qrels) + "qx 0 d1 1\n" * (not absent))
    (tmp_path / "run").write_text("".join(run) + "qy Q0 d1 1 0.5 tagz\n")
    return str(tmp_path / "qrels"), str(tmp_path / "run")


OPTIONS = [
    {}, {"per_query": True}, {"complete": True}, {"max_docs": 7, "per_query": True}, {"relevance_level": 2},
    {"judged_only": True, "per_query": True}, {"summary": False, "per_query": True},
]  # fmt: skip


@pytest.mark.parametrize("block_bytes", [1, 300, 2000, 1 << 20])
@pytest.mark.parametrize("version", [10, 9])
@pytest.mark.parametrize("options", OPTIONS)
def test_blocks_print_the_whole_file_s_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int, version: int, options: dict
) -> None:
    qrels_path, run_path = _files(tmp_path, block_bytes % 7)
    if version == 9:  # 9.0.8 reads no comment lines
        text = Path(run_path).read_text().splitlines(keepends=True)
        Path(run_path).write_text("".join(x for x in text if not x.startswith("#")))
    monkeypatch.setattr(trec_run_blocks, "BLOCK_BYTES", block_bytes)
    qrels = read_qrels(qrels_path, trec_eval=version)
    settings = Settings(measures_of(["all_trec"], version), version=version, **options)
    whole = run_lines(read_run(run_path, trec_eval=version), qrels, settings)
    if not (version == 10 and options.get("complete")):  # (10's -c ranks a bogus document for "qx": whole)
        monkeypatch.setattr("embedmetrics._io.trec.read_run", _refused)  # the blocks never read it whole
    assert file_lines(run_path, qrels, settings) == whole


def _refused(*args: object, **kwargs: object) -> None:
    raise AssertionError("the whole run was read")


def test_a_file_whose_queries_come_back_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels_path, run_path = _files(tmp_path, 3, grouped=False)
    with pytest.raises(NotGrouped):
        list(run_blocks(run_path, 10, block_bytes=500))
    monkeypatch.setattr(trec_run_blocks, "BLOCK_BYTES", 500)
    qrels = read_qrels(qrels_path, trec_eval=10)
    settings = Settings(measures_of(["official"], 10), per_query=True)
    assert file_lines(run_path, qrels, settings) == run_lines(
        read_run(run_path, trec_eval=10), qrels, settings
    )


@pytest.mark.parametrize(
    "options", [{"refuse_absent": True, "per_query": True}, {"complete": True, "per_query": True}]
)
def test_a_judged_query_the_run_lacks_under_10_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict
) -> None:
    """trec_eval 10.0 stops there (its lines before, then the error), or ``-c`` ranks a bogus document for
    it: the whole file's path, the same output."""
    from embedmetrics._io.trec_eval_lists import AbsentQuery

    qrels_path, run_path = _files(tmp_path, 4, absent=True)
    monkeypatch.setattr(trec_run_blocks, "BLOCK_BYTES", 700)
    qrels = read_qrels(qrels_path, trec_eval=10)
    settings = Settings(measures_of(["official"], 10), **options)
    try:
        expected: object = run_lines(read_run(run_path, trec_eval=10), qrels, settings)
    except AbsentQuery as err:
        expected = (str(err), err.partial)
    try:
        got: object = file_lines(run_path, qrels, settings)
    except AbsentQuery as err:
        got = (str(err), err.partial)
    assert got == expected


@pytest.mark.parametrize("bad", ["notanumber", "twice"])
def test_a_refused_block_is_refused_as_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """A malformed line or a document listed twice far into the file: the same message (its line in the
    file) and the same kind of error (trec_eval's status) as the whole file read at once."""
    from embedmetrics._io.errors import ReportInputError

    qrels_path, run_path = _files(tmp_path, 5)
    lines = Path(run_path).read_text().splitlines(keepends=True)
    if bad == "twice":
        lines.insert(401, lines[400])
    else:
        lines[400] = " ".join(lines[400].split()[:4]) + " notanumber tag\n"
    Path(run_path).write_text("".join(lines))
    qrels = read_qrels(qrels_path, trec_eval=10)
    settings = Settings(measures_of(["official"], 10))
    with pytest.raises(ReportInputError) as whole:
        run_lines(read_run(run_path, trec_eval=10), qrels, settings)
    with pytest.raises(NotGrouped):
        list(run_blocks(run_path, 10, block_bytes=1000))
    monkeypatch.setattr(trec_run_blocks, "BLOCK_BYTES", 1000)
    with pytest.raises(ReportInputError) as blocks:
        file_lines(run_path, qrels, settings)
    assert (type(blocks.value), str(blocks.value)) == (type(whole.value), str(whole.value))
    assert ":401:" in str(blocks.value) or ":402:" in str(blocks.value)


def test_evaluate_reads_a_path_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qrels_path, run_path = _files(tmp_path, 6)
    names = ["map", "ndcg_cut.10", "nDCG@10", "RR@10", "Judged@5", "P(rel=2)@5"]
    whole = evaluate(
        qrels_path, read_run(run_path, trec_eval=10) and _as_dict(run_path), names, per_query=True
    )
    monkeypatch.setattr(trec_run_blocks, "BLOCK_BYTES", 900)
    monkeypatch.setattr("embedmetrics._io.trec.read_run", _refused)
    assert evaluate(qrels_path, run_path, names, per_query=True) == whole


def _as_dict(path: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            q, _, d, _, s, _ = line.split()
            out.setdefault(q, {})[d] = float(s)
    return out
