"""KNNAccuracy with a sharded bank: lists of disjoint bank parts merge exactly (ties included).

Tie-heavy data: bank rows are drawn from a few distinct vectors with different labels, so tie blocks
straddle the cut-off and run past the ``k + 1`` keys a part keeps ("spill"). The merged lists of any
split of the bank (parts empty, uneven, identical rows in several parts) must give the value of the
whole bank, which must equal the NumPy oracle; across gloo processes every rank returns it too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics._engine.core.exact_sum import order_free_sum
from embedmetrics._engine.neighbors import vote as knn_vote
from embedmetrics.functional import knn_accuracy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _dist import run_distributed
from oracles import representation as ref

TOPS = (1, 2, 3)


def _tied_data(seed: int, n_bank: int = 48, n_query: int = 11) -> tuple[torch.Tensor, ...]:
    """Bank rows from 5 distinct vectors (so every key is shared by many rows), 4 classes."""
    g = torch.Generator().manual_seed(seed)
    atoms = torch.randn(5, 3, generator=g, dtype=torch.float64)
    bank = atoms[torch.randint(0, 5, (n_bank,), generator=g)]
    labels = torch.randint(0, 4, (n_bank,), generator=g)
    queries = atoms[torch.randint(0, 5, (n_query,), generator=g)] + 0.3 * torch.randn(
        n_query, 3, generator=g, dtype=torch.float64
    )
    return bank, labels, queries, torch.randint(0, 4, (n_query,), generator=g)


def _merged_hits(
    bank: torch.Tensor,
    labels: torch.Tensor,
    queries: torch.Tensor,
    qlab: torch.Tensor,
    cuts: list[int],
    k: int,
    ties: str,
) -> torch.Tensor:
    """Scan each part of the bank on its own, stack the lists, merge them, vote."""
    bank_cls, query_cls, n_classes = knn_vote.class_indices(labels, qlab, None)
    k = min(k, bank.shape[0])
    bounds = [0, *sorted(cuts), bank.shape[0]]
    parts = [
        knn_vote.scan_votes(bank[a:b], bank_cls[a:b], queries, k=k, n_classes=n_classes, block_bytes=64)
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    n_q = queries.shape[0]
    extra = torch.cat([p.extra + torch.tensor([i * n_q, 0, 0]) for i, p in enumerate(parts)])
    stacked = knn_vote.VoteLists(
        torch.cat([p.keys for p in parts]),
        torch.cat([p.classes for p in parts]),
        torch.cat([p.tail for p in parts]),
        extra,
    )
    merged = knn_vote.merge_votes(stacked, len(parts), n_classes)
    hits = knn_vote.vote_hits(merged, query_cls, temperature=0.07, tops=TOPS, ties=ties, n_classes=n_classes)
    return order_free_sum(hits)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10**6),
    cuts=st.lists(st.integers(0, 48), max_size=4),
    k=st.integers(1, 30),
    ties=st.sampled_from(["average", "pessimistic", "optimistic"]),
)
def test_merged_parts_equal_the_whole_bank_and_the_oracle(
    seed: int, cuts: list[int], k: int, ties: str
) -> None:
    bank, labels, queries, qlab = _tied_data(seed)
    whole = knn_vote.knn_vote_hits(bank, labels, queries, qlab, k=k, temperature=0.07, tops=TOPS, ties=ties)
    merged = _merged_hits(bank, labels, queries, qlab, cuts, k, ties)
    assert torch.equal(merged, whole)
    want = ref.knn_accuracy(
        bank.numpy(), labels.numpy(), queries.numpy(), qlab.numpy(), k, 0.07, TOPS, ties=ties
    )
    np.testing.assert_allclose(whole.numpy() / queries.shape[0], want, rtol=1e-12, atol=1e-12)


def test_a_tie_block_spilling_in_every_part_is_counted_whole() -> None:
    """Every bank row identical, 30 of class 0 and 18 of class 1, k = 4: each part keeps 5 keys of its
    block; the merged block has all 48 members, so the vote is 30 : 18 for every query."""
    bank = torch.ones(48, 3, dtype=torch.float64)
    labels = torch.tensor([0, 1] * 18 + [0] * 12)
    queries = torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    qlab = torch.tensor([0, 0, 0, 1, 1, 1])
    for cuts in ([], [10], [7, 20, 33], [0, 0, 48]):
        hits = _merged_hits(bank, labels, queries, qlab, cuts, 4, "average")
        assert hits.tolist() == [3.0, 6.0, 6.0]


def _worker(rank: int, world: int, plan: list[list[tuple[int, int]]], seed: int) -> dict[str, Any]:
    """This rank's bank slices and query slices (``plan[rank]``) into a synced metric and a local one."""
    bank, labels, queries, qlab = _tied_data(seed)
    bank[:6] = bank[-6:]  # identical rows at both ends of the bank: held by the first and last rank
    labels[:6] = (labels[-6:] + 1) % 4
    out: dict[str, Any] = {}
    for ties in ("average", "pessimistic"):
        metric = em.KNNAccuracy(k=7, top=TOPS, ties=ties, block_bytes=256)
        (b0, b1), (q0, q1) = plan[rank]
        if b1 > b0:
            metric.update(bank[b0:b1], labels[b0:b1], role="bank")
        if q1 > q0:
            metric.update(queries[q0:q1], qlab[q0:q1], role="query")
        out[ties] = metric.compute()
    return out


PLANS = {
    2: [[(0, 30), (0, 0)], [(30, 48), (0, 11)]],  # rank 0: no queries
    3: [[(0, 20), (0, 4)], [(20, 20), (4, 11)], [(20, 48), (11, 11)]],  # rank 1: no bank, rank 2: no queries
}


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_equals_one_process_and_the_oracle(world: int) -> None:
    seed = 5
    results = run_distributed(_worker, world, kwargs={"plan": PLANS[world], "seed": seed}, timeout=120)
    bank, labels, queries, qlab = _tied_data(seed)
    bank[:6] = bank[-6:]
    labels[:6] = (labels[-6:] + 1) % 4
    for ties in ("average", "pessimistic"):
        one = knn_accuracy(bank, labels, queries, qlab, k=7, top=TOPS, ties=ties)
        want = ref.knn_accuracy(
            bank.numpy(), labels.numpy(), queries.numpy(), qlab.numpy(), 7, 0.07, TOPS, ties=ties
        )
        np.testing.assert_allclose(one.numpy(), want, rtol=1e-12)
        for rank, res in enumerate(results):
            assert torch.equal(res[ties], one.to(res[ties].dtype)), (ties, rank, res[ties], one)
