"""DenseRetrieval / dense_retrieval: against a brute-force full-matrix trec_eval reference, with ties,
any batch split and order, a corpus sharded over gloo processes, and a corpus too large for one matrix."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from _dist import run_distributed
from embedmetrics.functional import dense_retrieval
from oracles.dense import dense_reference

ALL_KEYS_DEPTH_10 = ("ndcg", "recall", "precision", "mrr", "map", "hit_rate", "r_precision")


def _keys(ks: tuple[int, ...], metrics: tuple[str, ...] = ALL_KEYS_DEPTH_10) -> list[str]:
    out: list[str] = []
    for m in metrics:
        out += [m] if m == "r_precision" else [f"{m}@{k}" for k in ks]
    return out


def _data(seed: int, n_q: int = 15, n_c: int = 60, d: int = 6) -> dict[str, Any]:
    """Tie-free embeddings, scattered ids, graded qrels with -1/0 grades, documents outside the corpus
    and two unjudged queries."""
    rng = np.random.default_rng(seed)
    q, c = rng.normal(size=(n_q, d)), rng.normal(size=(n_c, d))
    qids, dids = rng.permutation(1000)[:n_q], rng.permutation(10_000)[:n_c] + 5
    qrels = []
    for qi in qids[:-2]:
        for doc in rng.choice(dids, 7, replace=False):
            qrels.append((int(qi), int(doc), int(rng.integers(-1, 4))))
        qrels.append((int(qi), -7 - int(qi), 2))  # relevant, not in the corpus
    qrels.append((99_999, int(dids[0]), 1))  # a query that does not exist
    return {"q": q, "c": c, "qids": qids, "dids": dids, "qrels": qrels}


def _assert_matches(result: dict[str, Any], expected: dict[str, list[float]], where: str) -> None:
    for key, values in expected.items():
        np.testing.assert_allclose(
            np.asarray(result[key], dtype=np.float64), values, rtol=1e-9, atol=1e-12, err_msg=f"{where} {key}"
        )


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize(("ks", "depth"), [((1, 3, 5), None), ((1, 5, 10), 40), ((2,), 7)])
def test_equals_full_matrix_reference(similarity: str, ks: tuple[int, ...], depth: int | None) -> None:
    data = _data(sum(ks) + len(similarity))
    out = dense_retrieval(
        data["q"], data["c"], np.asarray(data["qrels"]), query_ids=data["qids"], corpus_ids=data["dids"],
        k=ks, depth=depth, similarity=similarity, aggregation="none", block_bytes=4096,
    )  # fmt: skip
    expected = dense_reference(
        data["q"], data["c"], data["qrels"], _keys(ks), depth=depth or max(ks), similarity_kind=similarity,
        query_ids=data["qids"], corpus_ids=data["dids"],
    )  # fmt: skip
    _assert_matches(out, expected, similarity)
    assert np.array_equal(out["query_ids"], np.sort(data["qids"]))
    assert np.isnan(out[f"ndcg@{ks[0]}"]).sum() == 2  # the unjudged queries


def test_mean_skips_unjudged_queries_and_keys_are_in_order() -> None:
    data = _data(3)
    t = {n: torch.as_tensor(v) for n, v in data.items()}
    args = (t["q"], t["c"], t["qrels"])
    kw = {"query_ids": t["qids"], "corpus_ids": t["dids"], "k": (5, 1)}
    per_query = dense_retrieval(*args, aggregation="none", **kw)
    mean = dense_retrieval(*args, **kw)
    assert list(mean) == _keys((1, 5))
    for key, value in mean.items():
        assert value.ndim == 0
        assert value.dtype == torch.float64
        torch.testing.assert_close(value, per_query[key].nanmean())
    median = dense_retrieval(*args, aggregation="median", **kw)
    assert float(median["ndcg@5"]) == float(per_query["ndcg@5"].nanmedian())


def test_exclude_self_is_beirs_ignore_identical_ids() -> None:
    rng = np.random.default_rng(5)
    corpus = rng.normal(size=(30, 4))
    queries = corpus[:10] + 0.01 * rng.normal(size=(10, 4))  # each query is (almost) its own document
    qrels = [(i, (i + 1) % 30, 1) for i in range(10)] + [(i, i, 1) for i in range(0, 10, 3)]
    keys = _keys((1, 5))
    for exclude in (False, True):
        out = dense_retrieval(
            queries, corpus, np.asarray(qrels), k=(1, 5), exclude_self=exclude, aggregation="none"
        )
        expected = dense_reference(queries, corpus, qrels, keys, depth=5, exclude_self=exclude)
        _assert_matches(out, expected, f"exclude_self={exclude}")
    run = dense_retrieval(queries, corpus, np.asarray(qrels), k=3, exclude_self=True, return_run=True)["run"][
        0
    ]
    assert not (run == np.arange(10)[:, None]).any()


def _tie_data(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, size=(7, 2)).astype(np.float64)
    q = rng.integers(0, 2, size=(4, 2)).astype(np.float64)
    q[q.sum(1) == 0] = 1.0
    qrels = [
        (int(i), int(doc), int(rng.integers(0, 4)))
        for i in range(3)
        for doc in rng.choice(7, 4, replace=False)
    ]
    return {"q": q, "c": c, "qrels": qrels, "depth": int(rng.integers(1, 8))}


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("seed", range(12))
def test_ties_equal_every_order_reference(ties: str, seed: int) -> None:
    data = _tie_data(seed)
    similarity = ("dot", "euclidean")[seed % 2]
    depth = data["depth"]
    ks = tuple(sorted({1, depth}))
    expected = dense_reference(
        data["q"], data["c"], data["qrels"], _keys(ks), depth=depth, similarity_kind=similarity,
        exclude_self=seed % 3 == 0, ties=ties,
    )  # fmt: skip
    for block_bytes in (None, 64):
        out = dense_retrieval(
            data["q"], data["c"], np.asarray(data["qrels"]), k=ks, depth=depth, similarity=similarity,
            exclude_self=seed % 3 == 0, ties=ties, aggregation="none", block_bytes=block_bytes,
        )  # fmt: skip
        _assert_matches(out, expected, f"{ties} block_bytes={block_bytes}")


def test_constant_scorer_scores_a_random_order() -> None:
    """Every document ties: the expected value of a random ranking, not 1.0 and not 0."""
    n, relevant = 1000, 4
    corpus = torch.ones(n, 8, dtype=torch.float64)
    qrels = torch.tensor([[0, d, 1] for d in range(relevant)])
    out = dense_retrieval(torch.ones(1, 8, dtype=torch.float64), corpus, qrels, k=(1, 10), depth=100)
    hit10 = 1 - math.comb(n - relevant, 10) / math.comb(n, 10)
    assert float(out["hit_rate@1"]) == pytest.approx(relevant / n, rel=1e-12)
    assert float(out["hit_rate@10"]) == pytest.approx(hit10, rel=1e-12)
    assert float(out["precision@10"]) == pytest.approx(relevant / n, rel=1e-12)
    assert float(out["recall@10"]) == pytest.approx(10 / n, rel=1e-12)
    mrr10 = sum(math.comb(n - p, relevant - 1) / math.comb(n, relevant) / p for p in range(1, 11))
    assert float(out["mrr@10"]) == pytest.approx(mrr10, rel=1e-12)
    assert float(out["r_precision"]) == pytest.approx(relevant / n, rel=1e-12)
    pess = dense_retrieval(torch.ones(1, 8, dtype=torch.float64), corpus, qrels, k=10, ties="pessimistic")
    opt = dense_retrieval(torch.ones(1, 8, dtype=torch.float64), corpus, qrels, k=10, ties="optimistic")
    assert float(pess["hit_rate@10"]) == 0.0
    assert float(opt["hit_rate@10"]) == 1.0
    assert float(opt["ndcg@10"]) == pytest.approx(1.0)


def test_duplicates_straddling_the_cutoff_by_hand() -> None:
    """Documents 0-1 strictly first, 2-5 identical (one relevant, grade 2) across the cut-off k=3."""
    corpus = torch.tensor([[1.0, 0.0], [0.9, 0.1], *([[0.5, 0.5]] * 4), [0.0, 1.0]])
    qrels = torch.tensor([[0, 1, 1], [0, 4, 2], [0, 6, 1]])
    out = dense_retrieval(torch.tensor([[1.0, 0.0]]), corpus, qrels, k=3, return_run=True)
    # position 3 holds one of the 4 tied documents: the relevant one with probability 1/4
    assert float(out["precision@3"]) == pytest.approx((1 + 0.25) / 3)
    assert float(out["recall@3"]) == pytest.approx((1 + 0.25) / 3)
    assert float(out["mrr@3"]) == pytest.approx(0.5)
    assert float(out["map@3"]) == pytest.approx((1 / 2 + 0.25 * 2 / 3) / 3)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert float(out["ndcg@3"]) == pytest.approx((1 / math.log2(3) + 0.5 / math.log2(4)) / idcg)
    ids, scores = out["run"]
    assert ids.tolist() == [[0, 1, 2]]  # the tie block at the cut-off by lowest id
    assert scores[0, 2] == scores[0, 2]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_corpus_order_block_size_and_batches_give_the_same(data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    base = rng.normal(size=(6, 3)).astype(np.float32)
    corpus = base[rng.integers(0, 6, size=40)]  # many identical documents
    queries = rng.normal(size=(9, 3)).astype(np.float32)
    qrels = torch.tensor(
        [
            (int(q), int(d), int(rng.integers(0, 3)))
            for q in range(9)
            for d in rng.choice(40, 5, replace=False)
        ]
    )
    ref = dense_retrieval(
        torch.from_numpy(queries), torch.from_numpy(corpus), qrels, k=(1, 4), depth=6, return_run=True
    )
    perm = rng.permutation(40)
    qperm = rng.permutation(9)
    metric = em.DenseRetrieval(
        qrels, k=(1, 4), depth=6, return_run=True, block_bytes=data.draw(st.sampled_from([None, 200, 1000]))
    )
    cuts = sorted(data.draw(st.lists(st.integers(1, 39), max_size=4, unique=True)))
    for lo, hi in zip([0, *cuts], [*cuts, 40]):
        metric.update(torch.from_numpy(corpus[perm[lo:hi]]), torch.from_numpy(perm[lo:hi]), role="corpus")
    metric.update(torch.from_numpy(queries[qperm]), torch.from_numpy(qperm), role="query")
    out = metric.compute()
    for key in ref:
        if key == "run":
            assert torch.equal(out["run"][0], ref["run"][0])
            assert torch.equal(out["run"][1], ref["run"][1])
        elif key == "query_ids":
            assert torch.equal(out[key], ref[key])
        else:
            assert float(out[key]) == float(ref[key]), key


class _EdgeKernelTorch:
    """``torch`` whose ``mm`` rounds the last output column one ulp up, as CPU edge kernels may: the
    products' bits then depend on the block shape (seen with MKL and oneDNN on Xeon and EPYC)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        torch.mm(a, b, out=out)
        out[:, -1] = torch.nextafter(out[:, -1], torch.full_like(out[:, -1], math.inf))
        return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_wide_blocks_keep_the_tie_block_that_spans_them(ties: str, dtype: type) -> None:
    """Blocks wide enough for the candidate filter, each bounded by the running lists' last keys: a
    tie block at the cut-off spread over every block is still counted whole (keys equal to the bound
    are candidates), and the lists hold its lowest ids: the same as one block, and the reference."""
    rng = np.random.default_rng(11)
    c = rng.integers(-2, 3, size=(3000, 3)).astype(dtype)  # 125 distinct rows, dot products tie
    q = rng.integers(-2, 3, size=(6, 3)).astype(dtype)
    q[np.abs(q).sum(1) == 0] = 1.0
    judged = [rng.choice(3000, 40, replace=False) for _ in range(5)]
    qrels = [(i, int(doc), int(rng.integers(0, 4))) for i in range(5) for doc in judged[i]]
    ks, depth = (1, 5), 5
    kw: dict[str, Any] = {"k": ks, "depth": depth, "similarity": "dot", "ties": ties, "return_run": True}
    whole = dense_retrieval(q, c, np.asarray(qrels), aggregation="none", **kw)
    for columns in (256, 700):  # column_groups needs >= 4 * (depth + 1) * 8 = 192 columns per block
        got = dense_retrieval(q, c, np.asarray(qrels), aggregation="none", block_bytes=6 * 8 * columns, **kw)
        for key in _keys(ks):
            assert np.array_equal(got[key], whole[key], equal_nan=True), (columns, key)
        assert np.array_equal(got["run"][0], whole["run"][0]), columns
    if ties != "average":  # every order of 3000 documents is out of reach; the bounds are exact
        expected = dense_reference(q, c, qrels, _keys(ks), depth=depth, similarity_kind="dot", ties=ties)
        for key, values in expected.items():  # float32 in: float32 out
            np.testing.assert_allclose(whole[key], values, rtol=1e-6, err_msg=f"{ties} {key}")


@pytest.mark.parametrize(
    ("n_cols", "budget", "depth"),
    [(200_000, 7872, 100), (100_000, 30_000, 10), (9_000, 2_000, 5), (500, 500, 3)],
)
def test_blocks_are_even_whole_coarse_groups(n_cols: int, budget: int, depth: int) -> None:
    """Blocks share the columns evenly (no narrow last block left to a plain ``topk``: 200k columns in
    blocks of at most 7,872 once left 3,200 in the last), never exceed the budget, never need padding
    columns and are no more than the budget's count."""
    from embedmetrics._engine.core.knn import GROUP_SIZE, column_groups
    from embedmetrics._engine.dense.scan import _block_width, _padded_width

    width = _block_width(n_cols, budget, depth)
    groups = column_groups(budget, depth + 1)
    unit = 1 if groups is None else groups[0] * GROUP_SIZE // groups[1]
    columns = budget - budget % unit  # the widest block of whole coarse groups within the budget
    n_blocks = math.ceil(n_cols / width)
    assert width <= columns
    assert n_blocks == math.ceil(n_cols / columns)
    assert _padded_width(width, depth)[0] == width  # whole coarse groups: no padding columns
    last = n_cols - (n_blocks - 1) * width
    assert last > width // 2
    if column_groups(columns, depth + 1) is not None:
        assert column_groups(last, depth + 1) is not None  # the last block keeps the candidate filter


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_run_scores_do_not_depend_on_the_kernel_or_the_block_size(
    monkeypatch: pytest.MonkeyPatch, similarity: str, dtype: torch.dtype
) -> None:
    from embedmetrics._engine.dense import scan as dense_scan

    data = _data(5, n_q=7, n_c=50, d=5)
    q, c = torch.from_numpy(data["q"]).to(dtype), torch.from_numpy(data["c"]).to(dtype)
    qrels = torch.tensor(data["qrels"])
    kw: dict[str, Any] = {"k": (1, 5), "depth": 8, "similarity": similarity, "return_run": True}
    kw.update(query_ids=torch.from_numpy(data["qids"]), corpus_ids=torch.from_numpy(data["dids"]))
    ref = dense_retrieval(q, c, qrels, **kw)
    monkeypatch.setattr(dense_scan, "torch", _EdgeKernelTorch())
    for block_bytes in (7 * 8 * 3, 7 * 8 * 11, None):
        got = dense_retrieval(q, c, qrels, block_bytes=block_bytes, **kw)
        assert torch.equal(got["run"][0], ref["run"][0]), block_bytes
        assert torch.equal(got["run"][1], ref["run"][1]), block_bytes  # bit for bit
        assert all(float(got[key]) == float(ref[key]) for key in ref if "@" in key)
    # the scores are the exact similarities (float64 products), rounded once
    qn, cn = data["q"], data["c"]
    if similarity == "cosine":
        qn = qn / np.linalg.norm(qn, axis=1, keepdims=True)
        cn = cn / np.linalg.norm(cn, axis=1, keepdims=True)
    col = {int(d): i for i, d in enumerate(data["dids"])}
    order = np.argsort(data["qids"])
    for row, qi in enumerate(order):
        for doc, score in zip(ref["run"][0][row].tolist(), ref["run"][1][row].tolist()):
            if similarity == "euclidean":
                want = -np.linalg.norm(data["q"][qi] - data["c"][col[doc]])
            else:
                want = float(qn[qi] @ cn[col[doc]])
            assert score == pytest.approx(want, rel=1e-6 if dtype == torch.float32 else 1e-12)


def test_module_matches_functional_and_keeps_qrels_across_reset() -> None:
    data = _data(11)
    t = {n: torch.as_tensor(v) for n, v in data.items()}
    expected = dense_retrieval(
        t["q"], t["c"], t["qrels"], query_ids=t["qids"], corpus_ids=t["dids"], k=(1, 10)
    )
    metric = em.DenseRetrieval(k=(1, 10))
    metric.update(t["q"], t["qids"])
    with pytest.raises(ValueError, match="needs qrels"):
        metric.compute()
    metric.reset()
    metric.set_qrels(t["qrels"])
    for _ in range(2):
        metric.update(t["c"][:20], t["dids"][:20], role="corpus")
        metric.update(t["q"], t["qids"], role="query")
        metric.update(t["c"][20:], t["dids"][20:], role="corpus")
        out = metric.compute()
        assert out.keys() == expected.keys()
        for key in expected:
            assert float(out[key]) == pytest.approx(float(expected[key]), rel=1e-6), key
        metric.reset()
    assert metric.qrels is not None


def test_errors_name_the_argument() -> None:
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g)
    qrels = torch.tensor([[0, 1, 1]])
    with pytest.raises(ValueError, match="`depth`"):
        dense_retrieval(q, c, qrels, k=10, depth=5)
    with pytest.raises(ValueError, match="`metrics`"):
        dense_retrieval(q, c, qrels, metrics=["ndcg", "auc"])
    with pytest.raises(ValueError, match="`similarity`"):
        dense_retrieval(q, c, qrels, similarity="l2")
    with pytest.raises(ValueError, match="`qrels`"):
        dense_retrieval(q, c, torch.tensor([0, 1, 1]))
    with pytest.raises(TypeError, match="`qrels`"):
        dense_retrieval(q, c, torch.tensor([[0.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match=r"pair \(query_id=0, doc_id=1\)"):
        dense_retrieval(q, c, torch.tensor([[0, 1, 1], [0, 1, 2]]))
    with pytest.raises(ValueError, match="`corpus_ids` must hold unique ids, got 4"):
        dense_retrieval(q, c, qrels, corpus_ids=torch.tensor([0, 4, 2, 4, 1]))
    with pytest.raises(ValueError, match="`query_ids`"):
        dense_retrieval(q, c, qrels, query_ids=torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="`corpus_ids`"):
        dense_retrieval(q, c, qrels, corpus_ids=torch.arange(5.0))
    with pytest.raises(ValueError, match="same number of features"):
        dense_retrieval(q, c[:, :3], qrels)
    with pytest.raises(ValueError, match="finite"):
        dense_retrieval(q, c.clone().fill_(float("nan")), qrels)
    metric = em.DenseRetrieval(qrels)
    with pytest.raises(ValueError, match="`role`"):
        metric.update(q, torch.arange(3), role="documents")
    with pytest.raises(ValueError, match="`ids`"):
        metric.update(q, torch.arange(4))


def test_no_query_gives_nan_and_no_corpus_gives_zero() -> None:
    qrels = torch.tensor([[0, 0, 1]])
    metric = em.DenseRetrieval(qrels, k=2, metrics=("recall",))
    metric.update(torch.ones(3, 2), torch.arange(3), role="corpus")
    assert math.isnan(float(metric.compute()["recall@2"]))
    metric.reset()
    metric.update(torch.ones(2, 2), torch.arange(2), role="query")
    assert float(metric.compute()["recall@2"]) == 0.0  # a judged query that retrieved nothing


def test_numpy_in_numpy_out() -> None:
    data = _data(2)
    out = dense_retrieval(
        data["q"],
        data["c"],
        np.asarray(data["qrels"]),
        query_ids=data["qids"],
        corpus_ids=data["dids"],
        k=3,
        return_run=True,
    )
    assert isinstance(out["ndcg@3"], np.float64)
    ids, scores = out["run"]
    assert isinstance(ids, np.ndarray)
    assert ids.shape == (15, 3)
    assert scores.dtype == np.float64


def test_run_lists_the_nearest_documents() -> None:
    data = _data(4)
    out = dense_retrieval(
        data["q"],
        data["c"],
        np.asarray(data["qrels"]),
        query_ids=data["qids"],
        corpus_ids=data["dids"],
        k=5,
        return_run=True,
        similarity="euclidean",
    )
    ids, scores = out["run"]
    order = np.argsort(data["qids"])
    dist = np.sqrt(((data["q"][order, None, :] - data["c"][None]) ** 2).sum(-1))
    nearest = np.argsort(dist, axis=1)[:, :5]
    assert np.array_equal(ids, data["dids"][nearest])
    np.testing.assert_allclose(scores, -np.take_along_axis(dist, nearest, 1), rtol=1e-5)


def test_no_queries_by_corpus_matrix() -> None:
    """A corpus whose full similarity matrix (2.4 GB) exceeds the address space the process may still
    grow by (1 GB): the scan must run in blocks."""
    code = textwrap.dedent(
        """
        import resource, torch
        from embedmetrics.functional import dense_retrieval
        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(0)
        q, c = torch.randn(3000, 16, generator=g), torch.randn(200_000, 16, generator=g)
        ones = torch.ones(3000, dtype=torch.long)
        qrels = torch.stack([torch.arange(3000), torch.arange(3000) * 7, ones], 1)
        dense_retrieval(q[:10], c[:100], qrels)  # warm up the libraries before measuring
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))
        try:
            torch.empty(3000, 200_000)
            raise SystemExit("the limit does not bind")
        except RuntimeError:
            pass
        out = dense_retrieval(q, c, qrels, k=(1, 10), depth=20, block_bytes=64 * 2**20)
        print(float(out["recall@10"]) >= 0)
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "True"


# ----------------------------------------------------------------------------- distributed

_DIST_QRELS = [(q, d, (q * 7 + d) % 4 - 1) for q in range(0, 60, 2) for d in range(q % 5, 90, 11)]


def _dist_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    base = torch.randn(30, 5, generator=g)
    corpus = base[torch.randint(0, 30, (90,), generator=g)] + (torch.rand(90, 1, generator=g) < 0.5) * 0.1
    return torch.randn(60, 5, generator=g), corpus


#: per world size, per rank: (query rows, corpus rows) - uneven, a rank without corpus, one without queries
_DIST_PLANS = {
    2: [((0, 60), (0, 0)), ((60, 60), (0, 90))],
    3: [((0, 10), (0, 70)), ((10, 10), (70, 90)), ((10, 60), (90, 90))],
}
_DIST_OPTIONS: dict[str, Any] = {"k": (1, 3, 10), "depth": 12, "return_run": True, "exclude_self": True}


def _dense_worker(rank: int, world: int) -> dict[str, Any]:
    from torch.utils.flop_counter import FlopCounterMode

    queries, corpus = _dist_data()
    (q0, q1), (c0, c1) = _DIST_PLANS[world][rank]
    out: dict[str, Any] = {}
    for ties in ("average", "pessimistic"):
        metric = em.DenseRetrieval(torch.tensor(_DIST_QRELS), ties=ties, block_bytes=2048, **_DIST_OPTIONS)
        half = (c0 + c1) // 2
        metric.update(corpus[half:c1], torch.arange(half, c1), role="corpus")
        metric.update(queries[q0:q1], torch.arange(q0, q1), role="query")
        metric.update(corpus[c0:half], torch.arange(c0, half), role="corpus")
        with FlopCounterMode(display=False) as counter:
            out[ties] = metric.compute()
        out[f"{ties}_flops"] = counter.get_total_flops()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_corpus_equals_one_process(world: int) -> None:
    queries, corpus = _dist_data()
    results = run_distributed(_dense_worker, world, timeout=180)
    for ties in ("average", "pessimistic"):
        expected = dense_retrieval(queries, corpus, torch.tensor(_DIST_QRELS), ties=ties, **_DIST_OPTIONS)
        for rank, res in enumerate(results):
            got = res[ties]
            assert got.keys() == expected.keys()
            for key in expected:
                if key == "run":
                    assert torch.equal(got["run"][0], expected["run"][0]), (rank, ties)
                    torch.testing.assert_close(got["run"][1], expected["run"][1])
                elif key == "query_ids":
                    assert torch.equal(got[key], expected[key])
                else:
                    assert float(got[key]) == pytest.approx(float(expected[key]), rel=1e-6), (rank, ties, key)
        # each rank multiplies all queries by its own distinct corpus rows only (identical rows on several
        # ranks get the same canonical keys wherever they are scanned), every distinct row at least once
        flops = [res[f"{ties}_flops"] for res in results]
        shares = [torch.unique(corpus[c0:c1], dim=0).shape[0] for _, (c0, c1) in _DIST_PLANS[world]]
        for f, share in zip(flops, shares):  # tiny blocks: each adds one padding row to its product
            assert f <= 1.35 * 2 * 60 * share * 5, (flops, shares)
        assert sum(flops) >= 2 * 60 * torch.unique(corpus, dim=0).shape[0] * 5, flops


@contextlib.contextmanager
def _products_skewed_by(rank: int) -> Iterator[None]:
    """The dense scan's products shifted by ``rank`` ulps-worth: a "kernel" that rounds differently on
    every rank (in the worker process only)."""
    import embedmetrics._engine.dense.scan as scan_module

    real_mm = torch.mm

    def skewed_mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        result = real_mm(a, b, out=out) if out is not None else real_mm(a, b)
        return result.add_(rank * 1e-6)

    scan_module.torch.mm = skewed_mm  # type: ignore[attr-defined]
    try:
        yield
    finally:
        scan_module.torch.mm = real_mm  # type: ignore[attr-defined]


def _rank_skewed_worker(rank: int, world: int) -> dict[str, Any]:
    """A corpus of identical documents spread over the ranks, on a "kernel" that rounds differently on
    every rank (each product's result shifted by ``rank`` ulps-worth): ties must still be ties."""
    with _products_skewed_by(rank):
        g = torch.Generator().manual_seed(3)
        queries = torch.randn(8, 4, generator=g)
        shares = [(0, 5), (5, 30), (30, 30)] if world == 3 else [(0, 12), (12, 30)]
        start, stop = shares[rank]
        metric = em.DenseRetrieval(torch.tensor(_SKEW_QRELS), k=(1, 5), depth=10, return_run=True)
        if rank == world - 1:  # the queries on the last rank (which may hold no document)
            metric.update(queries, torch.arange(8), role="query")
        metric.update(torch.ones(stop - start, 4), torch.arange(start, stop), role="corpus")
        return {"value": metric.compute()}


_SKEW_QRELS = [(q, d, 1 + (q + d) % 2) for q in range(8) for d in range(q, 30, 7)]


@pytest.mark.parametrize("world", [2, 3])
def test_identical_rows_on_different_ranks_stay_tied(world: int) -> None:
    corpus = torch.ones(30, 4)
    g = torch.Generator().manual_seed(3)
    queries = torch.randn(8, 4, generator=g)
    expected = dense_retrieval(
        queries, corpus, torch.tensor(_SKEW_QRELS), k=(1, 5), depth=10, return_run=True
    )
    for rank, res in enumerate(run_distributed(_rank_skewed_worker, world, timeout=120)):
        got = res["value"]
        assert torch.equal(got["run"][0], expected["run"][0]), rank  # lowest ids of the one tie block
        for key in expected:
            if key not in ("run", "query_ids"):
                assert float(got[key]) == pytest.approx(float(expected[key]), rel=1e-6), (rank, key)


def _split_twins_worker(rank: int, world: int) -> dict[str, Any]:
    """Every rank holds a copy of the same distinct rows under its own ids, on a "kernel" that rounds
    differently on every rank: within a rank no two keys are near, so only the union of the ranks' lists
    shows which product keys must be rescored for the copies to tie."""
    with _products_skewed_by(rank):
        queries, rows = _twins_data()
        out: dict[str, Any] = {}
        for ties in ("average", "optimistic"):
            metric = em.DenseRetrieval(torch.tensor(_TWIN_QRELS), ties=ties, **_TWIN_OPTIONS)
            if rank == 0:  # the queries are gathered: one rank holds them
                metric.update(queries, torch.arange(queries.shape[0]), role="query")
            n = rows.shape[0]
            metric.update(rows, torch.arange(rank * n, (rank + 1) * n), role="corpus")
            out[ties] = metric.compute()
        return out


def _twins_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return torch.randn(6, 8, generator=g), torch.randn(40, 8, generator=g)


_TWIN_QRELS = [(q, d, 1 + (q + d) % 3) for q in range(6) for d in range(q, 80, 9)]
_TWIN_OPTIONS: dict[str, Any] = {"k": (1, 2, 5, 10), "depth": 10, "aggregation": "none", "return_run": True}


@pytest.mark.parametrize("world", [2])
def test_copies_on_different_ranks_tie_though_no_rank_sees_a_near_key(world: int) -> None:
    queries, rows = _twins_data()
    corpus = rows.repeat(world, 1)
    for rank, res in enumerate(run_distributed(_split_twins_worker, world, timeout=120)):
        for ties in ("average", "optimistic"):
            expected = dense_retrieval(queries, corpus, torch.tensor(_TWIN_QRELS), ties=ties, **_TWIN_OPTIONS)
            got = res[ties]
            assert torch.equal(got["run"][0], expected["run"][0]), (rank, ties)
            for key in expected:
                if key not in ("run", "query_ids"):
                    assert torch.equal(got[key], expected[key]), (rank, ties, key)
