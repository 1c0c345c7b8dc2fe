"""Near keys of one gain keep their product keys (``mixed_runs``): the measures never depend on them.

A "kernel" that rounds each product key by an amount depending on the query's place in the batch (well
within the margin the canonical keys allow for) must leave every per-query value bit for bit the same:
alone, first, last, on several ranks, and equal to the values of the fully rescored route
(``return_run=True``, whose run order must be canonical)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import embedmetrics as em
import embedmetrics._engine.dense.scan as scan_module
from _dist import run_distributed
from _skewed_kernels import place_dependent_products
from embedmetrics._engine.core.canonical import mixed_runs
from embedmetrics.functional import dense_retrieval


def _runs_oracle(keys: list[float], margin: float, classes: list[float]) -> list[bool]:
    """Plain Python: split the ascending keys where two neighbours are more than ``margin`` apart."""
    out, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or not (keys[i] - keys[i - 1] <= margin):
            members = classes[start:i]
            out += [len(set(members)) > 1] * (i - start)
            start = i
    return out


@pytest.mark.parametrize("seed", range(6))
def test_mixed_runs_equals_a_plain_oracle(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, 12, (9, 15), generator=g).double().sort(dim=1).values * 0.5
    keys[:, -2:] = torch.inf
    keys[0, 3] = torch.nan
    keys = keys.sort(dim=1).values  # NaN last
    margins = torch.rand(9, generator=g, dtype=torch.float64)
    classes = torch.randint(0, 3, (9, 15), generator=g).double()
    got = mixed_runs(keys, margins, classes)
    for row in range(9):
        want = _runs_oracle(keys[row].tolist(), float(margins[row]), classes[row].tolist())
        assert got[row].tolist() == want, row


def _tied_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer rows, permuted and repeated (ties and near ties everywhere), graded qrels 0..2 with a
    negative grade, documents of one gain next to each other and of mixed gains."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(-2, 3, (6, 8), generator=g).float()
    corpus = torch.stack([base[i % 6][torch.randperm(8, generator=g)] for i in range(120)])
    corpus[::7] += 1e-4 * torch.randn(18, 8, generator=g)  # near, not equal
    queries = torch.cat([torch.randint(-2, 3, (10, 8), generator=g).float(), torch.randn(6, 8, generator=g)])
    rows = [(q, d, int(torch.randint(-1, 3, (1,), generator=g))) for q in range(16) for d in range(q, 120, 5)]
    return queries, corpus, torch.tensor(rows)


_OPTIONS: dict[str, Any] = {"k": (1, 3, 5, 10), "depth": 15, "aggregation": "none"}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_values_never_depend_on_the_batch_nor_on_the_run_being_returned(
    seed: int, similarity: str, ties: str
) -> None:
    queries, corpus, qrels = _tied_data(seed)
    opts = {**_OPTIONS, "similarity": similarity, "ties": ties}
    full = dense_retrieval(queries, corpus, qrels, return_run=True, **opts)
    with place_dependent_products(scan_module, 2e-7):
        batch = dense_retrieval(queries, corpus, qrels, **opts)
        reversed_ids = torch.arange(15, -1, -1)
        flipped = dense_retrieval(queries.flip(0), corpus, qrels, query_ids=reversed_ids, **opts)
        alone = [
            dense_retrieval(queries[i : i + 1], corpus, qrels, query_ids=torch.tensor([i]), **opts)
            for i in (0, 7, 15)
        ]
    for key in batch:
        if key == "query_ids":
            continue
        assert torch.equal(batch[key], full[key]), key
        assert torch.equal(flipped[key], full[key]), key  # ids sorted: the same order back
        for i, one in zip((0, 7, 15), alone):
            assert torch.equal(one[key], full[key][i : i + 1]), (key, i)


def _skewed_rank_worker(rank: int, world: int, seed: int) -> dict[str, Any]:
    """The tied corpus split over the ranks, on a kernel that rounds differently on every rank and
    every place in the batch; the queries on the last rank."""
    queries, corpus, qrels = _tied_data(seed)
    with place_dependent_products(scan_module, 2e-7 * (rank + 1)):
        metric = em.DenseRetrieval(qrels, **_OPTIONS)
        if rank == world - 1:
            metric.update(queries, torch.arange(16), role="query")
        part = torch.arange(120)[rank::world]
        metric.update(corpus[part], part, role="corpus")
        return {"value": metric.compute()}


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_values_equal_one_process_on_skewed_kernels(world: int) -> None:
    for seed in range(2):
        queries, corpus, qrels = _tied_data(seed)
        expected = dense_retrieval(queries, corpus, qrels, return_run=True, **_OPTIONS)
        results = run_distributed(_skewed_rank_worker, world, timeout=180, kwargs={"seed": seed})
        for rank, res in enumerate(results):
            for key, want in expected.items():
                if key != "run":
                    assert torch.equal(res["value"][key], want), (seed, rank, key)


def test_the_returned_run_is_rescored_whole() -> None:
    """With the run returned, near documents of one gain are ordered canonically too: the same run
    whatever the batch."""
    queries, corpus, qrels = _tied_data(0)
    want = dense_retrieval(queries, corpus, qrels, return_run=True, **_OPTIONS)["run"]
    with place_dependent_products(scan_module, 2e-7):
        for i in range(0, 16, 5):
            one, ids = queries[i : i + 1], torch.tensor([i])
            got = dense_retrieval(one, corpus, qrels, query_ids=ids, return_run=True, **_OPTIONS)["run"]
            assert torch.equal(got[0], want[0][i : i + 1]), i
