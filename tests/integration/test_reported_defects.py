"""The 18 defects of the issue "Every metric keeps the same promises", one test each (each failed before
its fix). The contract suite (``tests/contracts/``) checks the same promises on every metric; these pin
the reported cases."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import embedmetrics as em
from _dist import run_distributed
from embedmetrics.cli import main
from embedmetrics.functional import (
    dense_retrieval,
    knn_accuracy,
    kruskal_similarity,
    procrustes_r2,
    procrustes_similarity,
    rankme,
)

ROOT = Path(__file__).resolve().parents[2]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _dense_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    return torch.randn(4, 3, generator=g), torch.randn(6, 3, generator=g)


# 1 ------------------------------------------------------------------------------------------------
def test_01_no_query_in_the_qrels_is_nan_not_index_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    q, c = _dense_data()
    qrels = torch.tensor([[100, 1, 1]])
    out = dense_retrieval(q, c, qrels, k=2)
    assert all(math.isnan(float(v)) for v in out.values())
    metric = em.DenseRetrieval(qrels, k=2)
    metric.update(q, torch.arange(4))
    metric.update(c, torch.arange(6), role="corpus")
    assert all(math.isnan(float(v)) for v in metric.compute().values())
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "c.npy", c.numpy())
    (tmp_path / "qrels.txt").write_text("nobody 0 0 1\n")
    args = ["--queries", str(tmp_path / "q.npy"), "--corpus", str(tmp_path / "c.npy")]
    status = main(["report", *args, "--qrels", str(tmp_path / "qrels.txt")])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1
    assert "no query" in err


# 2 ------------------------------------------------------------------------------------------------
_WIDTH_CASES = {
    "RankMe": lambda d: ((torch.randn(5, d, generator=_gen(d)),), {}),
    "AlphaReQ": lambda d: ((torch.randn(5, d, generator=_gen(d)),), {}),
    "LiDAR": lambda d: ((torch.randn(6, d, generator=_gen(d)), torch.arange(6) % 3), {}),
    "LinearCKA": lambda d: ((torch.randn(5, d, generator=_gen(d)), torch.randn(5, 2, generator=_gen(1))), {}),
    "KNNAccuracy": lambda d: ((torch.randn(5, d, generator=_gen(d)), torch.arange(5)), {}),
    "EmbeddingAccuracy": lambda d: ((torch.randn(5, d, generator=_gen(d)), torch.arange(5) % 2), {}),
    "DenseRetrieval": lambda d: ((torch.randn(5, d, generator=_gen(d)), torch.arange(5)), {"role": "corpus"}),
}


@pytest.mark.parametrize("name", sorted(_WIDTH_CASES))
def test_02_merge_of_another_width_is_refused_whole_and_load_leaves_no_stale_width(name: str) -> None:
    def make() -> Any:
        return (
            getattr(em, name)(torch.tensor([[0, 1, 1]])) if name == "DenseRetrieval" else getattr(em, name)()
        )

    ours, theirs = make(), make()
    args, kwargs = _WIDTH_CASES[name](3)
    ours.update(*args, **kwargs)
    wide_args, wide_kwargs = _WIDTH_CASES[name](4)
    theirs.update(*wide_args, **wide_kwargs)
    before = {
        k: [t.clone() for t in v] if isinstance(v, list) else v.clone() for k, v in ours.metric_state.items()
    }
    with pytest.raises(em.IncompatibleStateError, match="width"):
        ours.merge_state(theirs)
    for key, value in ours.metric_state.items():
        items, saved = (value, before[key]) if isinstance(value, list) else ([value], [before[key]])
        assert len(items) == len(saved), key
        assert all(torch.equal(a, b) for a, b in zip(items, saved)), key
    loaded = make()
    loaded.persistent(True)
    theirs.persistent(True)
    loaded.update(*args, **kwargs)
    loaded.load_state_dict(theirs.state_dict())
    with pytest.raises(ValueError, match="width"):
        loaded.update(*args, **kwargs)  # the width of the loaded state is the one checked
    more = list(wide_args)
    if name == "DenseRetrieval":
        more[1] = more[1] + 100  # new ids
    loaded.update(*more, **wide_kwargs)  # ... and a batch of that width is taken


# 3 and 6 ------------------------------------------------------------------------------------------
def _disagreeing_ranks(rank: int, world: int) -> dict[str, str]:
    out = {}
    qrels = torch.tensor([[0, 7, 1], [1, 3, 1]])

    def outcome(metric: Any) -> str:
        try:
            metric.compute()
        except Exception as err:
            return f"{type(err).__name__}: {err}"
        return "no error"

    shared = em.DenseRetrieval(qrels, k=1)  # corpus id 7 on both ranks
    shared.update(torch.eye(2), torch.arange(2), role="query") if rank == 0 else None
    shared.update(torch.ones(1, 2) * (rank + 1), torch.tensor([7]), role="corpus")
    out["3 shared corpus id"] = outcome(shared)
    wide = em.DenseRetrieval(qrels, k=1)
    wide.update(torch.eye(2 + rank), torch.tensor([7, 3, 9][: 2 + rank]), role="corpus")
    out["6 width"] = outcome(wide)
    double = em.DenseRetrieval(qrels, k=1)
    dtype = torch.float64 if rank == 1 else torch.float32
    double.update(torch.eye(2, dtype=dtype), torch.arange(2) + 10 * rank, role="query")
    out["6 float64 dense"] = outcome(double)
    knn = em.KNNAccuracy(k=1, top=1)
    knn.update(torch.eye(2, dtype=dtype), torch.arange(2), role="bank" if rank else "query")
    out["6 float64 knn"] = outcome(knn)
    return out


def test_03_06_ranks_that_disagree_raise_the_same_error_everywhere() -> None:
    results = run_distributed(_disagreeing_ranks, 2, timeout=120)
    for key in results[0]:
        assert results[0][key] == results[1][key], key
    assert results[0]["3 shared corpus id"].startswith(
        "ValueError: Argument `corpus_ids` must hold unique ids"
    )
    for key in ("6 width", "6 float64 dense", "6 float64 knn"):
        assert results[0][key].startswith("IncompatibleStateError:"), (key, results[0][key])
        assert "differ across processes" in results[0][key]


# 4 ------------------------------------------------------------------------------------------------
def test_04_query_labels_never_wrap_into_the_bank_dtype() -> None:
    bank, bank_labels = torch.eye(3), torch.tensor([0, 1, 2], dtype=torch.uint8)
    assert float(knn_accuracy(bank, bank_labels, torch.eye(3)[:1], torch.tensor([256]), k=1, top=1)) == 0.0
    assert float(knn_accuracy(bank, bank_labels, torch.eye(3)[:1], torch.tensor([0]), k=1, top=1)) == 1.0


# 5 ------------------------------------------------------------------------------------------------
def test_05_a_nul_byte_is_refused_not_read_as_another_id(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    (tmp_path / "run.txt").write_bytes(b"q1 Q0 d1\x00 1 2.0 r\nq1 Q0 d1 2 1.0 r\n")
    status = main(["report", "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt")])
    err = capsys.readouterr().err
    assert status == 2
    assert "run.txt:1: a NUL byte" in err


# 7 ------------------------------------------------------------------------------------------------
def test_07_a_huge_depth_is_clipped_to_the_corpus(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    q, c = _dense_data()
    qrels = torch.tensor([[0, 1, 1], [1, 2, 1]])
    huge = dense_retrieval(q, c, qrels, k=2, depth=10**9, return_run=True)
    whole = dense_retrieval(q, c, qrels, k=2, depth=6, return_run=True)
    assert huge.keys() == whole.keys()
    for key in huge:
        if key != "run":
            assert torch.equal(huge[key], whole[key]), key
    assert torch.equal(huge["run"][0], whole["run"][0])
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "c.npy", c.numpy())
    (tmp_path / "qrels.txt").write_text("0 0 1 1\n1 0 2 1\n")
    args = ["--queries", str(tmp_path / "q.npy"), "--corpus", str(tmp_path / "c.npy")]
    status = main(["report", *args, "--qrels", str(tmp_path / "qrels.txt"), "--depth", str(10**9)])
    assert status == 0, capsys.readouterr().err


# 8 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["update", "forward"])
def test_08_repeated_query_ids_are_refused_within_and_between_batches(path: str) -> None:
    metric = em.DenseRetrieval(torch.tensor([[0, 1, 1]]), k=1)
    step = metric.update if path == "update" else metric
    q, _ = _dense_data()
    with pytest.raises(ValueError, match="unique ids, got 0"):
        step(q, torch.tensor([0, 0, 1, 2]))
    step(q, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="new ids, got 3"):
        step(q[:2], torch.tensor([3, 4]))
    assert sum(t.shape[0] for t in metric.query) == 4


# 9 ------------------------------------------------------------------------------------------------
def _expected_vote_oracle(sims: list[float], labels: list[int], own: int, k: int, classes: int) -> Fraction:
    """Enumerate every order of the bank (ties broken every way), average each class's vote over the
    orders (the *expected vote*, weights exp(s/T) with T = 1 on these small similarities), then score the
    true class against the expected votes with classes tied in votes averaged (top = 1)."""
    votes = [Fraction(0)] * classes
    orders = list(itertools.permutations(range(len(sims))))
    for order in orders:
        ranked = sorted(order, key=lambda i: -sims[i])  # stable: ties in the order's order
        for i in ranked[:k]:
            votes[labels[i]] += Fraction(math.exp(sims[i])) / len(orders)
    above = sum(v > votes[own] for v in votes)
    tied = sum(v == votes[own] for v in votes)
    return Fraction(max(0, min(1, Fraction(1 - above, tied))))


@pytest.mark.parametrize(
    ("sims", "labels", "own", "k"),
    [
        ([1.0, 1.0, 1.0], [0, 1, 1], 0, 1),  # the reported case: 0, not 1/3 (expected vote, not accuracy)
        ([1.0, 1.0, 1.0], [0, 1, 2], 0, 1),  # three classes tied in votes: 1/3
        ([0.5, 1.0, 1.0, 1.0], [0, 0, 1, 1], 0, 2),
        ([1.0, 0.5, 0.5, 0.5], [1, 0, 0, 1], 0, 2),
    ],
)
def test_09_knn_average_is_the_expected_vote_as_documented(
    sims: list[float], labels: list[int], own: int, k: int
) -> None:
    bank = torch.tensor([[s, math.sqrt(1 - s * s)] for s in sims], dtype=torch.float64)
    query = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    classes = max(labels) + 1
    got = knn_accuracy(
        bank,
        torch.tensor(labels),
        query,
        torch.tensor([own]),
        k=k,
        top=1,
        temperature=1.0,
        num_classes=classes,
    )
    assert float(got) == pytest.approx(float(_expected_vote_oracle(sims, labels, own, k, classes)), abs=1e-12)
    for page in (ROOT / "README.md", ROOT / "docs" / "ties.md", ROOT / "docs" / "representation.md"):
        assert "expected vote" in page.read_text(encoding="utf-8"), page


# 10 -----------------------------------------------------------------------------------------------
def test_10_nan_embeddings_never_score_perfectly() -> None:
    nan = torch.full((4, 2), math.nan)
    got = knn_accuracy(
        nan, torch.tensor([0, 0, 1, 1]), nan[:2], torch.tensor([0, 1]), k=1, top=1, validate_args=False
    )
    assert math.isnan(float(got))
    metric = em.KNNAccuracy(k=1, top=1, validate_args=False)
    metric.update(nan, torch.tensor([0, 0, 1, 1]), role="bank")
    metric.update(nan[:2], torch.tensor([0, 1]), role="query")
    assert math.isnan(float(metric.compute()))


# 11 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_11_a_query_value_does_not_depend_on_its_batch_mates(ties: str, similarity: str) -> None:
    for seed in range(8):
        g = _gen(seed)
        corpus = torch.randn(6, 8, generator=g)[torch.randint(0, 6, (40,), generator=g)]  # exact ties
        queries = torch.randn(30, 8, generator=g)
        pairs = torch.randperm(30 * 40, generator=g)[:90]
        qrels = torch.stack([pairs // 40, pairs % 40, torch.randint(0, 3, (90,), generator=g)], 1)
        options = {"k": (1, 3, 5), "depth": 7, "ties": ties, "similarity": similarity, "aggregation": "none"}
        full = dense_retrieval(queries, corpus, qrels, **options)
        for lo in range(0, 30, 7):
            ids = torch.arange(lo, min(lo + 7, 30))
            part = dense_retrieval(queries[ids], corpus, qrels, query_ids=ids, **options)
            for key, values in part.items():
                assert torch.equal(values.nan_to_num(-1), full[key][ids].nan_to_num(-1)), (seed, key)


# 12: tests/test_representation.py::test_lidar_state_is_bounded_by_the_classes_when_they_recur


# 13 -----------------------------------------------------------------------------------------------
def test_13_saved_run_scores_read_back_exactly(tmp_path: Path) -> None:
    from embedmetrics._report.dense import write_run
    from embedmetrics.qrels import IdMap

    scores = torch.tensor([[0.5, 0.500000000001, 1 / 3]], dtype=torch.float64)
    write_run(
        str(tmp_path / "run.txt"),
        torch.tensor([0]),
        (torch.tensor([[0, 1, 2]]), scores),
        IdMap(["q"]),
        IdMap(["a", "b", "c"]),
    )
    read = [float(line.split()[4]) for line in (tmp_path / "run.txt").read_text().splitlines()]
    assert read == scores[0].tolist()


# 14 -----------------------------------------------------------------------------------------------
def test_14_rankme_of_collapsed_embeddings_within_1e7_of_the_svd() -> None:
    g = _gen(3)
    z = torch.randn(1000, 1, generator=g, dtype=torch.float64) @ torch.randn(
        1, 64, generator=g, dtype=torch.float64
    )
    s = np.linalg.svd(z.numpy(), compute_uv=False)
    p = s / s.sum() + 1e-7
    want = math.exp(-(p * np.log(p)).sum())
    assert float(rankme(z)) == pytest.approx(want, rel=1e-7)


# 15 -----------------------------------------------------------------------------------------------
def test_15_knn_accuracy_float64_is_bit_identical_under_query_order() -> None:
    g = _gen(4)
    bank = torch.randn(200, 8, generator=g, dtype=torch.float64)
    queries = torch.randn(300, 8, generator=g, dtype=torch.float64)
    bank_labels, query_labels = (
        torch.randint(0, 7, (200,), generator=g),
        torch.randint(0, 7, (300,), generator=g),
    )
    want = knn_accuracy(bank, bank_labels, queries, query_labels, k=9, top=(1, 3))
    for seed in range(5):
        perm = torch.randperm(300, generator=_gen(seed))
        got = knn_accuracy(bank, bank_labels, queries[perm], query_labels[perm], k=9, top=(1, 3))
        assert torch.equal(got, want), seed


# 16 -----------------------------------------------------------------------------------------------
def test_16_the_run_never_keeps_the_graph() -> None:
    q, c = _dense_data()
    out = dense_retrieval(
        q.requires_grad_(), c.requires_grad_(), torch.tensor([[0, 1, 1]]), k=2, return_run=True
    )
    assert not out["run"][1].requires_grad
    assert not any(v.requires_grad for k, v in out.items() if k != "run")


# 17 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["RankMe", "AlphaReQ", "LiDAR", "LinearCKA", "KNNAccuracy", "EmbeddingAccuracy", "Alignment"]
)
def test_17_float64_in_float64_out(name: str) -> None:
    z = torch.randn(12, 4, generator=_gen(5), dtype=torch.float64)
    labels = torch.arange(12) % 3
    metric = getattr(em, name)() if name != "AlphaReQ" else em.AlphaReQ(fit_range=(1, 4))
    if name in ("LiDAR", "EmbeddingAccuracy", "KNNAccuracy"):
        metric.update(z, labels)
        if name == "KNNAccuracy":
            metric.update(z, labels, role="query")
    elif name in ("LinearCKA", "Alignment"):
        metric.update(z, z + 1)
    else:
        metric.update(z)
    value = metric.compute()
    for v in value.values() if isinstance(value, dict) else [value]:
        assert v.dtype == torch.float64, name


# 18 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [procrustes_similarity, procrustes_r2, kruskal_similarity])
def test_18_complex_input_is_refused(fn: Any) -> None:
    x = torch.randn(5, 3, generator=_gen(6), dtype=torch.complex64)
    with pytest.raises(TypeError, match="real numbers"):
        fn(x, x)
    with pytest.raises(TypeError, match="real numbers"):
        fn(x.real, x)
