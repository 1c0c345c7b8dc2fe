"""A corpus streamed chunk by chunk (``DenseRetrieval.set_queries``, ``dense_retrieval`` of an iterable):
the stored route's values bit for bit on tie-heavy data, for every tie policy, similarity, dtype, chunking
and order of chunks, merged, resumed and across gloo processes; errors change nothing; memory does not
grow with the corpus."""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import torch

import embedmetrics as em
from _dist import run_distributed
from embedmetrics.functional import dense_retrieval


def _tied_data(seed: int, n_q: int, n_c: int, d: int, dtype: torch.dtype) -> dict[str, Any]:
    """Small integer embeddings (every key tied with many), some nudged; scattered ids; graded qrels with
    -1/0 grades, documents outside the corpus, unjudged queries."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-2, 3, (n_q, d), generator=g).to(dtype)
    c = torch.randint(-2, 3, (n_c, d), generator=g).to(dtype)
    if seed % 3 == 0:
        c[: n_c // 3] += 1e-3 * torch.randn(n_c // 3, d, generator=g, dtype=dtype)
    c[n_c // 2 :: 7] = c[1]  # identical rows
    q_ids = torch.randperm(n_q, generator=g) * 3 + 5
    c_ids = torch.randperm(n_c, generator=g) * 2
    n_j = 4 * n_q + n_c
    pairs = torch.stack(
        [
            q_ids[torch.randint(0, max(1, n_q - 1), (n_j,), generator=g)],
            torch.randint(0, 2 * n_c + 9, (n_j,), generator=g),
        ],
        dim=1,
    )
    pairs = torch.unique(pairs, dim=0)
    qrels = torch.cat([pairs, torch.randint(-1, 4, (pairs.shape[0], 1), generator=g)], dim=1)
    return {"q": q, "c": c, "q_ids": q_ids, "c_ids": c_ids, "qrels": qrels, "g": g}


def _assert_same(got: dict[str, Any], expected: dict[str, Any], where: Any) -> None:
    assert got.keys() == expected.keys(), where
    for key, value in expected.items():
        if key == "run":
            for a, b in zip(got[key], value):
                assert a.dtype == b.dtype, (where, key)
                assert torch.equal(a, b), (where, key)
        else:
            assert got[key].dtype == value.dtype, (where, key)
            assert torch.equal(got[key].isnan(), value.isnan()), (where, key)
            assert torch.equal(got[key].nan_to_num(7.0), value.nan_to_num(7.0)), (where, key)


def _chunks(n: int, g: torch.Generator) -> list[torch.Tensor]:
    """A random order of the rows cut at random places (empty chunks and single rows included)."""
    order = torch.randperm(n, generator=g)
    cuts = sorted(torch.randint(0, n + 1, (4,), generator=g).tolist())
    return [order[a:b] for a, b in zip([0, *cuts], [*cuts, n])]


CONFIGS = list(
    itertools.product(("cosine", "dot", "euclidean"), ("average", "pessimistic", "optimistic"), (False, True))
)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streamed_lists_equal_the_stored_route(seed: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(100 + seed)
    n_q, n_c, d = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((2, 25), (1, 260), (1, 7)))
    data = _tied_data(seed, n_q, n_c, d, dtype)
    for similarity, ties, exclude_self in CONFIGS:
        depth = int(torch.randint(3, 40, (1,), generator=g))
        options = {
            "k": (1, 3), "depth": depth, "similarity": similarity, "ties": ties, "exclude_self": exclude_self,
            "aggregation": "none", "return_run": bool(seed % 2),
        }  # fmt: skip
        expected = dense_retrieval(
            data["q"], data["c"], data["qrels"], query_ids=data["q_ids"], corpus_ids=data["c_ids"], **options
        )
        chunks = [(data["c"][p], data["c_ids"][p]) for p in _chunks(n_c, g)]
        got = dense_retrieval(data["q"], iter(chunks), data["qrels"], query_ids=data["q_ids"], **options)
        _assert_same(got, expected, (similarity, ties, exclude_self, depth))


def test_a_bounded_chunk_scan_keeps_every_key_tied_with_the_boundary() -> None:
    """Later chunks are filtered by the running last key plus the margin: near-tied keys (a nudge far
    below the float32 margin) of every chunk still enter or count in the boundary block."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(1, 64, generator=g)
    c = base.repeat(400, 1) + 1e-7 * torch.randn(400, 64, generator=g)
    q = torch.randn(30, 64, generator=g)
    qrels = torch.stack([torch.arange(30) % 30, torch.arange(30) * 13, torch.ones(30, dtype=torch.int64)], 1)
    for ties in ("average", "optimistic"):
        expected = dense_retrieval(q, c, qrels, k=(1, 10), depth=20, ties=ties, aggregation="none")
        ids = torch.arange(400)
        got = dense_retrieval(
            q, [(c[p], ids[p]) for p in torch.arange(400).split(17)], qrels, k=(1, 10), depth=20, ties=ties,
            aggregation="none",
        )  # fmt: skip
        _assert_same(got, expected, ties)


def _module_pair(data: dict[str, Any], **options: Any) -> tuple[em.DenseRetrieval, dict[str, Any]]:
    stored = em.DenseRetrieval(data["qrels"], **options)
    stored.update(data["q"], data["q_ids"], role="query")
    stored.update(data["c"], data["c_ids"], role="corpus")
    stream = em.DenseRetrieval(data["qrels"], **options)
    stream.set_queries(data["q"], data["q_ids"])
    return stream, stored.compute()


OPTIONS = {"k": (1, 5, 10), "depth": 25, "aggregation": "none", "return_run": True}


def test_module_stream_update_and_forward_equal_the_stored_module() -> None:
    data = _tied_data(3, 20, 300, 4, torch.float32)
    stream, expected = _module_pair(data, **OPTIONS)
    for p in _chunks(300, data["g"]):
        stream.update(data["c"][p], data["c_ids"][p], role="corpus")
    _assert_same(stream.compute(), expected, "update")
    forward, _ = _module_pair(data, **OPTIONS)
    for p in torch.arange(300).split(64):
        batch_value = forward(data["c"][p], data["c_ids"][p], role="corpus")
        assert set(batch_value) == set(expected)
    _assert_same(forward.compute(), expected, "forward")
    assert not stream.corpus  # no row kept
    assert not stream.query
    assert stream.stored_rows("streamed_ids").numel() == 300


def test_merge_state_of_disjoint_streams_equals_one_stream() -> None:
    data = _tied_data(4, 12, 200, 3, torch.float64)
    a, expected = _module_pair(data, **OPTIONS)
    b, _ = _module_pair(data, **OPTIONS)
    a.update(data["c"][:70], data["c_ids"][:70], role="corpus")
    b.update(data["c"][70:], data["c_ids"][70:], role="corpus")
    a.merge_state(b)
    _assert_same(a.compute(), expected, "merge_state")
    c, _ = _module_pair(data, **OPTIONS)
    c.update(data["c"][:5], data["c_ids"][:5], role="corpus")
    a.merge_state(c)  # the same documents with the same rows again: counted once (test_stream_repeats.py)
    _assert_same(a.compute(), expected, "a merge of repeats")
    c.reset()
    c.update(data["c"][:5] + 1.0, data["c_ids"][:5], role="corpus")
    with pytest.raises(ValueError, match=r"unique ids, got .* with different rows"):  # other rows: refused
        a.merge_state(c)
    _assert_same(a.compute(), expected, "after a refused merge")


@pytest.mark.parametrize("load_first", [False, True])
def test_a_persistent_state_dict_resumes_the_stream(load_first: bool) -> None:
    data = _tied_data(5, 15, 240, 5, torch.float32)
    first, expected = _module_pair(data, **OPTIONS)
    first.persistent(True)
    first.update(data["c"][:100], data["c_ids"][:100], role="corpus")
    saved = copy.deepcopy(first.state_dict())
    resumed = em.DenseRetrieval(data["qrels"], **OPTIONS)
    resumed.persistent(True)
    if load_first:
        resumed.load_state_dict(saved)
        resumed.set_queries(data["q"], data["q_ids"])
    else:
        resumed.set_queries(data["q"], data["q_ids"])
        resumed.load_state_dict(saved)
    resumed.update(data["c"][100:], data["c_ids"][100:], role="corpus")
    _assert_same(resumed.compute(), expected, load_first)
    with pytest.raises(ValueError, match="other queries"):  # lists of these queries: another set refused
        resumed.set_queries(data["q"][:3], data["q_ids"][:3])


def test_bad_chunks_raise_and_leave_the_lists_as_they_were() -> None:
    data = _tied_data(6, 10, 120, 4, torch.float32)
    stream, _ = _module_pair(data, **OPTIONS)
    stream.update(data["c"][:60], data["c_ids"][:60], role="corpus")
    before = {k: v.clone() for k, v in stream.running_lists().items()}
    fresh = data["c_ids"][60:63]
    bad = [
        (lambda: stream.update(data["q"], data["q_ids"], role="query"), ValueError, "set_queries"),
        (lambda: stream.update(data["c"][60:63, :2], fresh, role="corpus"), ValueError, "width"),
        (lambda: stream.update(data["c"][60:63].double(), fresh, role="corpus"), ValueError, "dtype"),
        (lambda: stream.update(data["c"][60:63], data["c_ids"][:3], role="corpus"), ValueError, "new ids"),
        (lambda: stream(data["c"][60:63], data["c_ids"][:3], role="corpus"), ValueError, "new ids"),
        (lambda: stream.set_qrels(data["qrels"][:3]), ValueError, "reset"),
    ]
    for call, kind, match in bad:
        with pytest.raises(kind, match=match):
            call()
        for key, value in stream.running_lists().items():
            assert torch.equal(value, before[key]), (match, key)
    stream.reset()  # empties the lists, keeps the queries and the qrels
    assert int(stream.stream_n_docs) == 0
    stream.update(data["c"], data["c_ids"], role="corpus")
    _, expected = _module_pair(data, **OPTIONS)
    _assert_same(stream.compute(), expected, "after reset")


def test_set_queries_refuses_a_metric_holding_rows_or_without_qrels() -> None:
    data = _tied_data(7, 5, 20, 2, torch.float32)
    metric = em.DenseRetrieval(data["qrels"])
    metric.update(data["c"], data["c_ids"], role="corpus")
    with pytest.raises(ValueError, match="stores corpus rows"):
        metric.set_queries(data["q"], data["q_ids"])
    with pytest.raises(ValueError, match="needs qrels"):
        em.DenseRetrieval().set_queries(data["q"], data["q_ids"])
    with pytest.raises(ValueError, match="unique"):
        em.DenseRetrieval(data["qrels"]).set_queries(data["q"][:2], torch.tensor([1, 1]))


def test_functional_iterable_errors_and_numpy() -> None:
    data = _tied_data(8, 6, 50, 3, torch.float64)
    q, c, ids, qrels = data["q"], data["c"], data["c_ids"], data["qrels"]
    expected = dense_retrieval(q.numpy(), c.numpy(), qrels.numpy(), corpus_ids=ids.numpy())
    got = dense_retrieval(
        q.numpy(), ((c[p].numpy(), ids[p].numpy()) for p in torch.arange(50).split(9)), qrels
    )
    assert got.keys() == expected.keys()
    for key in expected:
        assert isinstance(got[key], np.float64), key
        assert got[key] == expected[key] or np.isnan(expected[key]), key
    with pytest.raises(ValueError, match="corpus chunk 1` must hold new ids, got"):
        dense_retrieval(q, iter([(c[:5], ids[:5]), (c[5:9], ids[3:7])]), qrels)
    with pytest.raises(ValueError, match="dtype and width"):
        dense_retrieval(q, iter([(c[:5].float(), ids[:5])]), qrels)
    with pytest.raises(TypeError, match="pairs"):
        dense_retrieval(q, iter([c[:5]]), qrels)
    with pytest.raises(ValueError, match="corpus_ids"):
        dense_retrieval(q, iter([(c[:5], ids[:5])]), qrels, corpus_ids=ids[:5])


_DIST_DATA = {"seed": 11, "n_q": 18, "n_c": 150, "d": 3}


def _stream_worker(rank: int, world: int) -> dict[str, Any]:
    data = _tied_data(**_DIST_DATA, dtype=torch.float32)
    out = {}
    for ties in ("average", "pessimistic"):
        metric = em.DenseRetrieval(data["qrels"], ties=ties, block_bytes=2048, **OPTIONS)
        metric.set_queries(data["q"], data["q_ids"])
        mine = torch.arange(rank, data["c"].shape[0], world)  # interleaved shares, two chunks each
        for part in mine.chunk(2):
            metric.update(data["c"][part], data["c_ids"][part], role="corpus")
        out[ties] = metric.compute()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_streams_on_gloo_processes_equal_one_process(world: int) -> None:
    data = _tied_data(**_DIST_DATA, dtype=torch.float32)
    results = run_distributed(_stream_worker, world, timeout=180)
    for ties in ("average", "pessimistic"):
        expected = dense_retrieval(
            data["q"],
            data["c"],
            data["qrels"],
            query_ids=data["q_ids"],
            corpus_ids=data["c_ids"],
            ties=ties,
            **OPTIONS,
        )
        for rank, res in enumerate(results):
            _assert_same(res[ties], expected, (world, rank, ties))


def test_streaming_memory_does_not_grow_with_the_corpus() -> None:
    """600,000 × 256 float32 rows (614 MB) through ``DenseRetrieval`` with 200 queries, depth 100, in
    chunks of 20,000: the peak resident memory grows by far less than the rows (held, they would add
    614 MB; the issue's bound is 160 MB above the start)."""
    script = textwrap.dedent(
        """
        import resource, sys, torch
        import embedmetrics as em
        torch.manual_seed(0)
        n, width, chunk = int(sys.argv[1]), 256, 20_000
        ones = torch.ones(200, dtype=torch.int64)
        qrels = torch.stack([torch.arange(200), torch.arange(200) * 997, ones], 1)
        metric = em.DenseRetrieval(qrels, k=(10, 100), depth=100)
        metric.set_queries(torch.randn(200, width), torch.arange(200))
        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        for start in range(0, 2 * chunk, chunk):  # warm-up: buffers and allocator settle
            metric.update(torch.randn(chunk, width), torch.arange(start, start + chunk), role="corpus")
        start_peak = peak()
        for start in range(2 * chunk, n, chunk):
            metric.update(torch.randn(chunk, width), torch.arange(start, start + chunk), role="corpus")
        metric.compute()
        print(peak() - start_peak)
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    out = subprocess.run(
        [sys.executable, "-c", script, "600000"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    growth = int(out.stdout.split()[-1])
    held = 600_000 * 256 * 4
    assert growth < 160 * 2**20, (
        f"peak grew by {growth / 2**20:.0f} MiB streaming {held / 2**20:.0f} MiB of rows"
    )


def test_a_stream_and_stored_rows_are_never_merged() -> None:
    data = _tied_data(9, 6, 40, 3, torch.float32)
    stream, expected = _module_pair(data, **OPTIONS)
    stream.update(data["c"], data["c_ids"], role="corpus")
    stored = em.DenseRetrieval(data["qrels"], **OPTIONS)
    stored.update(data["q"], data["q_ids"], role="query")
    with pytest.raises(em.IncompatibleStateError, match="cannot be merged"):
        stream.merge_state(stored)
    with pytest.raises(em.IncompatibleStateError, match="cannot be merged"):
        stored.merge_state(stream)
    _assert_same(stream.compute(), expected, "after refused merges")


@pytest.mark.parametrize(("setting", "value"), [("similarity", "dot"), ("return_run", False), ("depth", 40)])
def test_lists_of_other_settings_are_never_merged_or_loaded(setting: str, value: Any) -> None:
    data = _tied_data(10, 8, 60, 3, torch.float32)
    ours, _ = _module_pair(data, **OPTIONS)
    ours.persistent(True)
    ours.update(data["c"][:30], data["c_ids"][:30], role="corpus")
    theirs, _ = _module_pair(data, **{**OPTIONS, setting: value})
    theirs.persistent(True)
    theirs.update(data["c"][30:], data["c_ids"][30:], role="corpus")
    before = {k: v.clone() for k, v in ours.running_lists().items()}
    with pytest.raises(ValueError, match=setting):
        ours.merge_state(theirs)
    with pytest.raises(ValueError, match=setting):
        ours.load_state_dict(copy.deepcopy(theirs.state_dict()))
    for key, value_now in ours.running_lists().items():
        assert torch.equal(value_now, before[key]), key


def test_the_lists_belong_to_the_query_rows_not_only_their_ids() -> None:
    data = _tied_data(11, 8, 40, 3, torch.float32)
    stream, _ = _module_pair(data, **OPTIONS)
    stream.update(data["c"], data["c_ids"], role="corpus")
    with pytest.raises(ValueError, match="reset"):
        stream.set_queries(data["q"] + 1, data["q_ids"])


def test_loaded_lists_without_their_queries_raise_instead_of_nan() -> None:
    data = _tied_data(12, 8, 40, 3, torch.float32)
    stream, _ = _module_pair(data, **OPTIONS)
    stream.persistent(True)
    stream.update(data["c"], data["c_ids"], role="corpus")
    loaded = em.DenseRetrieval(data["qrels"], **OPTIONS)
    loaded.persistent(True)
    loaded.load_state_dict(copy.deepcopy(stream.state_dict()))
    with pytest.raises(ValueError, match="set_queries"):
        loaded.compute()
    with pytest.raises(ValueError, match="set_queries"):
        loaded.update(data["q"], data["q_ids"], role="query")
