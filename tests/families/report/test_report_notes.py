"""What the report's table says about itself (issue 49, items 10 and 11): one row per measure, names that
cannot be read as another cut-off, notes on what the two views are and on a run shorter than its qrels,
and the default ``--k`` clipped to small data (an explicit one refused instead)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from embedmetrics.cli import main


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``embedmetrics report ARGS`` in-process; return (status, stdout, stderr)."""
    status = main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def rows_and_notes(out: str) -> tuple[dict[str, str], list[str]]:
    """The table's ``metric -> value`` (the last family's row of a name wins) and the lines under it."""
    lines = out.splitlines()
    assert lines[0].split() == ["family", "metric", "value"]
    start = next(i for i, line in enumerate(lines) if line.startswith("inputs: "))
    rows = {line.split()[-2]: line.split()[-1] for line in lines[2:start]}
    return rows, lines[start:]


def _small_files(tmp_path: Path, n: int = 10) -> list[str]:
    """``n`` labelled embeddings of two classes and two ``n``-row views, as report arguments."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.normal(size=(n, 4)).astype(np.float32))
    np.save(tmp_path / "l.npy", np.arange(n) % 2)
    np.save(tmp_path / "z1.npy", rng.normal(size=(n, 4)).astype(np.float32))
    np.save(tmp_path / "z2.npy", rng.normal(size=(n, 4)).astype(np.float32))
    return [
        *("--embeddings", str(tmp_path / "e.npy"), "--labels", str(tmp_path / "l.npy")),
        *("--view1", str(tmp_path / "z1.npy"), "--view2", str(tmp_path / "z2.npy")),
    ]


def _brute_contrastive(z1: np.ndarray, z2: np.ndarray, k: int) -> float:
    """Both directions of contrastive accuracy@k by brute force (cosine; the pair ranks among the k
    most similar when fewer than k rows are strictly more similar)."""
    a = z1 / np.linalg.norm(z1, axis=1, keepdims=True)
    b = z2 / np.linalg.norm(z2, axis=1, keepdims=True)
    s = a.astype(np.float64) @ b.T.astype(np.float64)
    pair = np.diag(s)[:, None]
    found = [((m - pair > 0).sum(1) < k).mean() for m in (s, s.T)]  # rows strictly more similar than the pair
    return float(sum(found)) / 2


def test_default_k_is_clipped_to_ten_rows_with_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A 10-row file: the default ``--k`` (1,5,10) used to fail ("--k 10 asks for more neighbours than the
    9 reference embeddings") for a ``--k`` never given, and two 10-row views read
    ``contrastive_accuracy@10`` = 1.0000 whatever they were."""
    out_json = tmp_path / "small.json"
    status, out, err = call(capsys, *_small_files(tmp_path), "--json", str(out_json))
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert [k for k in rows if k.startswith("precision@")] == ["precision@5", "precision@9"]
    assert [k for k in rows if k.startswith("contrastive_accuracy@")] == [
        "contrastive_accuracy@1",
        "contrastive_accuracy@5",
    ]
    assert (
        "embeddings: --k not given: its default clipped to 1,5,9, at most the 9 reference embeddings "
        "available to each query"
    ) in notes
    assert (
        "views: --k not given: its default clipped to 1,5, at most half the 10 rows of a view (unrelated "
        "views score k/10 on average)"
    ) in notes
    document = json.loads(out_json.read_text())
    assert document["info"]["embeddings"]["k"] == [1, 5, 9]
    assert document["info"]["views"]["k"] == [1, 5]
    z1, z2 = np.load(tmp_path / "z1.npy"), np.load(tmp_path / "z2.npy")
    for k in (1, 5):
        want = _brute_contrastive(z1, z2, k)
        assert document["views"][f"contrastive_accuracy@{k}"] == pytest.approx(want, abs=1e-6)
    assert document["views"]["contrastive_accuracy@5"] < 1.0


def test_enough_rows_keep_the_default_k_and_no_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = call(capsys, *_small_files(tmp_path, n=20))
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert {"precision@10", "contrastive_accuracy@10"} <= set(rows)
    assert not [line for line in notes if "--k not given" in line]


@pytest.mark.parametrize(
    ("family", "message"),
    [
        ("embeddings", "the 9 reference embeddings available to each query"),
        (
            "views",
            "the 9 rows of the other view besides a row's pair (its candidates are the other view's 10 "
            "rows, the pair included: k = 10 scores 1 whatever the embeddings)",
        ),
    ],
)
def test_an_explicit_k_too_large_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, family: str, message: str
) -> None:
    """An explicit ``--k`` is never clipped: too large, it is one clear error (views included, where
    ``k >= n`` used to score 1 silently)."""
    files = _small_files(tmp_path)
    args = files[:4] if family == "embeddings" else files[4:]
    status, _, err = call(capsys, *args, "--k", "1,10")
    assert status == 2
    assert err == f"embedmetrics: error: --k 10 asks for more neighbours than {message}; lower --k.\n"
    status, out, err = call(capsys, *args, "--k", "1,9")  # as large as the data allows: kept as given
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert ("precision@9" if family == "embeddings" else "contrastive_accuracy@9") in rows
    assert not [line for line in notes if "--k not given" in line]


def test_one_row_per_measure_and_the_vote_named_by_its_k(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``precision@1`` of the embeddings is ``precision_at_1``: one row; the weighted kNN vote's rows name
    the vote's k (20) and the class rank (top 1), so that neither reads as a cut-off ``@1``; two classes
    give no top-5 row (the true class is always among the top 5: 1.0 by construction), and the note says
    so."""
    status, out, err = call(capsys, *_small_files(tmp_path, n=30)[:4], "--json", "-")
    assert status == 0, err
    got = json.loads(out)["embeddings"]
    assert "precision@1" not in got
    assert "precision_at_1" in got
    assert [key for key in got if key.startswith("knn_accuracy")] == ["knn_accuracy_k20_top1"]
    status, out, err = call(capsys, *_small_files(tmp_path, n=30)[:4])
    assert status == 0, err
    assert (
        "embeddings: no top-5 row: with 2 classes the query's class is always among the 5 with the most "
        "votes (1.0 by construction)"
    ) in rows_and_notes(out)[1]


def test_the_vote_takes_the_references_there_are(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """10 rows of 2 classes: the vote of 20 had only 9 references (leave-one-out) and no note, and its
    top-5 row was 1.0 by construction; now it is a vote of 9, named so, against the oracle's, one note."""
    from oracles import representation as rep

    status, out, err = call(capsys, *_small_files(tmp_path)[:4])
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert [key for key in rows if key.startswith("knn_accuracy")] == ["knn_accuracy_k9_top1"]
    x, y = np.load(tmp_path / "e.npy"), np.load(tmp_path / "l.npy")
    (want,) = rep.knn_accuracy(x, y, x, y, 9, 0.07, (1,), exclude_self=True)
    assert rows["knn_accuracy_k9_top1"] == f"{want:.4f}"
    assert [line for line in notes if "kNN vote" in line] == [
        "embeddings: the weighted kNN vote takes the 9 references available to each query (20 by default); "
        "no top-5 row: with 2 classes the query's class is always among the 5 with the most votes (1.0 by "
        "construction)"
    ]


def test_six_classes_keep_the_top5_row(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """More than 5 classes and more than 20 references: both rows, the default k, no vote note."""
    rng = np.random.default_rng(1)
    np.save(tmp_path / "e.npy", rng.normal(size=(30, 4)).astype(np.float32))
    np.save(tmp_path / "l.npy", np.arange(30) % 6)
    status, out, err = call(
        capsys, "--embeddings", str(tmp_path / "e.npy"), "--labels", str(tmp_path / "l.npy")
    )
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert [key for key in rows if key.startswith("knn_accuracy")] == [
        "knn_accuracy_k20_top1",
        "knn_accuracy_k20_top5",
    ]
    assert not [line for line in notes if "kNN vote" in line or "top-5" in line]


def test_report_help_counts_its_modes_and_names_choices_as_words(capsys: pytest.CaptureFixture[str]) -> None:
    """``report --help`` said "Four modes" and then described a fifth (comparing runs); ``--test`` printed
    a Python tuple and ``--correction`` said ``None`` where the flag takes ``none``."""
    assert main(["report", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Four modes" not in text
    assert "Four input families, combinable" in text
    assert "Comparing systems is a mode of its own" in text
    assert not re.search(r"\('[^']*', '", text)  # no Python tuple of choices
    comparing = text[text.index("comparing runs (") :]
    assert "None" not in comparing[: comparing.index("--ci")]
    assert "the paired test: t, wilcoxon, randomization or bootstrap (default: t)" in text
    assert "multiple-comparison correction: holm, bonferroni or none (no correction) (default: holm)" in text


RUN = "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 d1 1 0.3 t\n"
QRELS = "q1 0 d2 1\nq1 0 d3 1\nq1 0 d4 1\nq2 0 d1 1\nq2 0 d5 1\n"


def test_a_run_shorter_than_its_qrels_is_said_under_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The run lists at most 2 documents a query, the qrels judge 5 / 2 = 2.5 relevant a query: the 3
    relevant documents it does not list are misses, which only the JSON said (issue 49, item 10)."""
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    status, out, err = call(
        capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt")
    )
    assert status == 0, err
    _, notes = rows_and_notes(out)
    assert notes[-1] == (
        "trec: the qrels judge 2.5 documents a query relevant on average, the run lists at most 2: "
        "recall@k is about k/2.5 at best, and map and r_precision count the 3 relevant documents not in the "
        "run as misses"
    )
    (tmp_path / "all.txt").write_text("q1 0 d2 1\nq2 0 d1 1\n")  # every relevant document retrieved: no note
    status, out, err = call(capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "all.txt"))
    assert status == 0, err
    assert not [line for line in rows_and_notes(out)[1] if "not in the run" in line]


def test_the_views_note_says_what_the_two_views_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = call(capsys, *_small_files(tmp_path, n=20)[4:])
    assert status == 0, err
    assert rows_and_notes(out)[1][1] == (
        "views: the two views are --view1 and --view2 (row i of each: one item); contrastive_accuracy@k: how "
        "often a row's pair is among its k most similar of the other view's 20 rows (its pair and the 19 "
        "others)"
    )


def test_dense_default_k_stays_below_a_small_corpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A 5-document corpus: the default cut-offs 1,5,10 became 1,4 (at 5 and 10 every query retrieves the
    whole corpus, so recall and hit rate are 1 whatever the embeddings); a given --k 10 is kept, as
    trec_eval keeps a cut-off past the list."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "q.npy", rng.normal(size=(3, 4)).astype(np.float32))
    np.save(tmp_path / "c.npy", rng.normal(size=(5, 4)).astype(np.float32))
    (tmp_path / "qrels.txt").write_text("".join(f"{i} 0 {i} 1\n" for i in range(3)))
    args = ["--queries", str(tmp_path / "q.npy"), "--corpus", str(tmp_path / "c.npy")]
    args += ["--qrels", str(tmp_path / "qrels.txt")]
    status, out, err = call(capsys, *args)
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert [k for k in rows if k.startswith("recall@")] == ["recall@1", "recall@4"]
    assert (
        "dense: --k not given: its default clipped to 1,4, at most 4, below the 5 documents of the corpus "
        "(at k = 5 a query retrieves them all)"
    ) in notes
    status, out, err = call(capsys, *args, "--k", "1,10")
    assert status == 0, err
    rows, notes = rows_and_notes(out)
    assert float(rows["recall@10"]) == 1.0
    assert not [line for line in notes if "--k not given" in line]


def test_the_recall_bound_is_said_only_where_it_binds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """MS MARCO's shape: about one relevant document a query, one of them not retrieved. Recall reaches 1
    from k = 1 on, so "recall@k is about k/1.x at best" would be false (issue 57, item 7): the note keeps
    the misses and drops the bound."""
    (tmp_path / "run.txt").write_text(
        "q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 d1 1 0.3 t\nq3 Q0 d7 1 0.2 t\n"
    )
    (tmp_path / "qrels.txt").write_text("q1 0 d2 1\nq2 0 d1 1\nq3 0 d9 1\n")
    status, out, err = call(
        capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt")
    )
    assert status == 0, err
    note = next(line for line in rows_and_notes(out)[1] if "not in the run" in line)
    assert note == (
        "trec: the qrels judge 1.0 documents a query relevant on average, the run lists at most 2: map and "
        "r_precision count the 1 relevant documents not in the run as misses"
    )


def test_the_recall_bound_needs_every_query_above_the_cut_off(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Nine queries of one relevant document found first and one of 200: the mean (20.9) is above k = 1, but
    recall@1 is 0.9, not about 1/20.9: the bound is not said (the review of issue 57)."""
    run = "".join(f"q{q} Q0 d{q} 1 0.9 t\n" for q in range(9)) + "q9 Q0 r0 1 0.5 t\n"
    qrels = "".join(f"q{q} 0 d{q} 1\n" for q in range(9)) + "".join(f"q9 0 r{d} 1\n" for d in range(200))
    (tmp_path / "run.txt").write_text(run)
    (tmp_path / "qrels.txt").write_text(qrels)
    status, out, err = call(
        capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt")
    )
    assert status == 0, err
    note = next(line for line in rows_and_notes(out)[1] if "not in the run" in line)
    assert "k/" not in note
    assert "199 relevant documents not in the run" in note
