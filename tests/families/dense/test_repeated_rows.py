"""A row given twice with the same id and the same values counts once (issue 49, item 9).

Under DDP, a ``DistributedSampler`` pads an evaluation set by repeating its first items on other
processes: after the sync ``DenseRetrieval`` holds query ``0`` twice and every process's corpus part may
hold document ``0`` (docs/lightning.md, "Repeated items under DDP"). Such exact repeats are dropped,
keeping the first, so the value is that of the distinct items: checked against the brute-force
reference (``tests/oracles/dense.py``) on the distinct rows, through the functional, ``merge_state`` and
a 2-process gloo sync. The same id with another row still raises the error naming the id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import embedmetrics as em
from _dist import run_distributed
from embedmetrics._engine.dense.repeats import keep_first
from embedmetrics.functional import dense_retrieval
from oracles.dense import dense_reference

KS = (1, 3)
KEYS = [f"{m}@{k}" for m in ("ndcg", "recall", "precision", "mrr", "map", "hit_rate") for k in KS]
KEYS.append("r_precision")


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """6 queries, 9 documents (ids 0..8 each), graded qrels; tie-free float64 rows."""
    g = torch.Generator().manual_seed(3)
    queries = torch.randn(6, 4, generator=g, dtype=torch.float64)
    corpus = torch.randn(9, 4, generator=g, dtype=torch.float64)
    qrels = torch.tensor([[q, (2 * q + j) % 9, 1 + (q + j) % 3] for q in range(6) for j in range(3)])
    return queries, corpus, qrels


def _reference() -> dict[str, float]:
    """The mean of each measure over the distinct rows, by the brute-force reference."""
    queries, corpus, qrels = _data()
    per_query = dense_reference(
        queries.numpy(), corpus.numpy(), [tuple(r) for r in qrels.tolist()], KEYS, depth=max(KS),
        similarity_kind="cosine", query_ids=np.arange(6), corpus_ids=np.arange(9),
    )  # fmt: skip
    return {key: float(np.mean(values)) for key, values in per_query.items()}


def _assert_reference(result: dict[str, Any], where: str) -> None:
    expected = _reference()
    for key in KEYS:
        assert float(result[key]) == pytest.approx(expected[key], rel=1e-12, abs=1e-12), (where, key)


def test_keep_first_drops_exact_repeats_and_names_a_changed_one() -> None:
    ids = torch.tensor([5, 2, 5, 7, 2, 5])
    rows = torch.tensor([[1.0], [2.0], [1.0], [3.0], [2.0], [1.0]])
    keep = keep_first("Argument `ids`", ids, [rows])
    assert keep is not None
    assert keep.tolist() == [True, True, False, True, False, False]
    assert keep_first("Argument `ids`", torch.tensor([3, 1, 2]), [rows[:3]]) is None  # distinct: no copy
    changed = rows.clone()
    changed[4] = -0.5
    with pytest.raises(ValueError, match="`ids` must hold unique ids, got 2 more than once with different"):
        keep_first("Argument `ids`", ids, [rows, changed])  # equal in one tensor, not in the other


def test_functional_counts_an_exact_repeat_once() -> None:
    queries, corpus, qrels = _data()
    qids, dids = torch.tensor([0, 1, 2, 3, 4, 5, 0]), torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3])
    out = dense_retrieval(
        torch.cat([queries, queries[:1]]), torch.cat([corpus, corpus[[0, 3]]]), qrels, k=KS,
        query_ids=qids, corpus_ids=dids,
    )  # fmt: skip
    _assert_reference(out, "functional")
    with pytest.raises(ValueError, match="`corpus_ids` must hold unique ids, got 3 more than once"):
        dense_retrieval(
            queries, torch.cat([corpus, corpus[:1]]), qrels, k=KS, corpus_ids=dids[[*range(9), 10]]
        )
    with pytest.raises(ValueError, match="`query_ids` must hold unique ids, got 0 more than once"):
        dense_retrieval(torch.cat([queries, queries[1:2]]), corpus, qrels, k=KS, query_ids=qids)


def _fed(queries: torch.Tensor, qids: torch.Tensor, corpus: torch.Tensor, dids: torch.Tensor) -> Any:
    metric = em.DenseRetrieval(_data()[2], k=KS)
    metric.update(queries, qids, role="query")
    metric.update(corpus, dids, role="corpus")
    return metric


def test_merge_state_merges_an_exact_repeat_once_and_refuses_a_changed_one() -> None:
    queries, corpus, _ = _data()
    ours = _fed(queries[:4], torch.arange(4), corpus[:5], torch.arange(5))
    # the other half, with query 0 and document 0 again (the sampler's padding)
    theirs = _fed(
        queries[[4, 5, 0]], torch.tensor([4, 5, 0]), corpus[[5, 6, 7, 8, 0]], torch.tensor([5, 6, 7, 8, 0])
    )
    changed = _fed(queries[[4, 5, 0]] + 1, torch.tensor([4, 5, 0]), corpus[5:], torch.arange(5, 9))
    with pytest.raises(
        ValueError,
        match=r"merge_state: argument `incoming_state` \(`query_ids`\) must hold unique ids, got 0",
    ):
        ours.merge_state(changed)
    ours.merge_state(theirs)
    assert sum(t.shape[0] for t in ours.corpus) == 9
    _assert_reference(ours.compute(), "merge_state")


def _padded(rank: int, change: bool) -> dict[str, Any]:
    """Rank ``r`` holds items ``r, r + 2, ...`` of 9 documents and of the first 6 as queries: rank 1 gets
    item 0 again, as ``DistributedSampler`` pads 9 items for 2 processes; ``change``: rank 1's copy of
    document 0 (and its own documents) differ."""
    queries, corpus, qrels = _data()
    metric = em.DenseRetrieval(qrels, k=KS)
    items = torch.tensor([0, 2, 4, 6, 8]) if rank == 0 else torch.tensor([1, 3, 5, 7, 0])
    q_items = items[items < 6]
    metric.update(queries[q_items], q_items, role="query")
    metric.update(corpus[items] + (change and rank == 1), items, role="corpus")
    try:
        return {key: float(v) for key, v in metric.compute().items()}
    except ValueError as err:
        return {"error": str(err)}


def _padded_ranks(rank: int, world: int) -> dict[str, Any]:
    return {"exact": _padded(rank, False), "changed": _padded(rank, True)}


def test_two_processes_count_the_padded_item_once() -> None:
    results = run_distributed(_padded_ranks, 2, timeout=120)
    for rank, result in enumerate(results):
        _assert_reference(result["exact"], f"rank {rank}")
    assert results[0]["changed"] == results[1]["changed"]  # the same error everywhere
    error = results[0]["changed"]["error"]
    assert error.startswith("Argument `corpus_ids` must hold unique ids, got 0 more than once")
