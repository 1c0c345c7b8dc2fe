"""``Run`` and ``Qrels`` however they are built: names in any order are put in the order the join
needs (code order = name order), and what cannot be a table is refused with the argument's name.

The oracle is the file readers: the same rows written as TREC files and read back (the readers sort
the names themselves) must join to the same evaluated queries and rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from embedmetrics._io import trec

#: Names whose numeric order is not their sorted order ("10" < "2"): how the built-in example names
#: its digits, and what made its join evaluate 30 of 599 queries.
NAMES = np.array([str(i) for i in range(12)])


def _tables() -> tuple[trec.Run, trec.Qrels]:
    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(0, 12, 2), 5)
    docno = np.concatenate([rng.choice(12, 5, replace=False) for _ in range(6)])
    score = rng.integers(0, 4, qid.size).astype(np.float64)  # ties: the docno order decides
    run = trec.Run(qid, docno, score, np.arange(1, qid.size + 1), NAMES, NAMES)
    q_all = np.repeat(np.arange(0, 12, 2), 12)
    d_all = np.tile(np.arange(12), 6)
    rel = rng.integers(-1, 3, q_all.size)
    qrels = trec.Qrels(q_all, d_all, rel, np.arange(1, q_all.size + 1), NAMES, NAMES)
    return run, qrels


def _rows(run: trec.Run | trec.Qrels) -> list[tuple[str, str, float]]:
    value = run.score if isinstance(run, trec.Run) else run.rel
    return sorted(
        (str(run.queries[q]), str(run.docs[d]), float(v)) for q, d, v in zip(run.qid, run.docno, value)
    )


def test_names_out_of_order_are_put_in_order() -> None:
    qid = np.array([0, 1, 2, 2])
    docno = np.array([3, 2, 1, 0])
    names = np.array(["d9", "d10", "d1", "d2"])
    run = trec.Run(qid, docno, np.ones(4), np.arange(1, 5), names[:3], names)
    assert run.docs.tolist() == ["d1", "d10", "d2", "d9"]
    assert run.queries.tolist() == ["d1", "d10", "d9"]
    # each row names the same query and document as before
    assert [str(run.docs[d]) for d in run.docno] == ["d2", "d1", "d10", "d9"]
    assert [str(run.queries[q]) for q in run.qid] == ["d9", "d10", "d1", "d1"]


def test_sorted_names_are_kept_as_given() -> None:
    names = np.array(["a", "b", "c"])
    qid = np.array([2, 0, 1])
    qrels = trec.Qrels(qid, qid, np.array([1, 0, 2]), np.arange(1, 4), names, names)
    assert qrels.queries is names  # no copy, no renumbering: the readers' case
    assert qrels.qid.tolist() == [2, 0, 1]


def test_tables_built_from_unsorted_names_join_as_their_files_read(tmp_path: Path) -> None:
    run, qrels = _tables()
    assert run.docs.tolist() == sorted(NAMES.tolist())
    run_file, qrels_file = tmp_path / "run", tmp_path / "qrels"
    value_of = dict(zip(map(tuple, np.stack([run.qid, run.docno], 1).tolist()), run.score))
    run_file.write_text(
        "".join(
            f"{run.queries[q]} Q0 {run.docs[d]} 1 {value_of[(q, d)]} t\n" for q, d in zip(run.qid, run.docno)
        )
    )
    qrels_file.write_text(
        "".join(
            f"{qrels.queries[q]} 0 {qrels.docs[d]} {r}\n"
            for q, d, r in zip(qrels.qid, qrels.docno, qrels.rel)
        )
    )
    read_run, read_qrels = trec.read_run(str(run_file)), trec.read_qrels(str(qrels_file))
    assert _rows(run) == _rows(read_run)
    assert _rows(qrels) == _rows(read_qrels)
    for ties in (False, True):
        got = trec.join_run(run, qrels, trec_eval_ties=ties)
        want = trec.join_run(read_run, read_qrels, trec_eval_ties=ties)
        assert got.query_ids == want.query_ids
        assert len(got.query_ids) == 6  # every query of the run is judged
        assert (got.n_run_queries, got.n_qrels_queries) == (6, 6)
        for name in ("preds", "target", "indexes", "retrieved"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: trec.Run(
                np.array([0]), np.array([0]), np.ones(1), np.ones(1), np.array(["q", "q"]), np.array(["d"])
            ),
            "Run.queries: the name 'q' appears twice",
        ),
        (
            lambda: trec.Qrels(
                np.array([0]), np.array([2]), np.ones(1), np.ones(1), np.array(["q"]), np.array(["d", "e"])
            ),
            "Qrels.docno: code 2 is not a position in Qrels.docs (2 names)",
        ),
        (
            lambda: trec.Run(
                np.array([-1]), np.array([0]), np.ones(1), np.ones(1), np.array(["q"]), np.array(["d"])
            ),
            "Run.qid: code -1 is not a position in Run.queries",
        ),
        (
            lambda: trec.Run(
                np.array([0.0]), np.array([0]), np.ones(1), np.ones(1), np.array(["q"]), np.array(["d"])
            ),
            "Run.qid must be 1-D integer codes; got float64",
        ),
        (
            lambda: trec.Run(
                np.array([0, 0]), np.array([0]), np.ones(2), np.ones(2), np.array(["q"]), np.array(["d"])
            ),
            "Run: qid, docno, score and line must have one length; got [2, 1, 2, 2]",
        ),
    ],
)
def test_what_cannot_be_a_table_is_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()
