"""Dense retrieval's two routes to canonical lists agree: the fast scan rescored (``exact_lists``) and
the block-by-block canonical scan of the queries whose near ties overflow the fast list."""

from __future__ import annotations

import pytest
import torch

from embedmetrics._engine.dense import exact_lists
from embedmetrics.functional import dense_retrieval


def _data(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        corpus = torch.randn(300, 16, generator=g)
    else:  # permutations and small integers: near ties everywhere
        base = torch.randint(-2, 3, (3, 16), generator=g).float()
        corpus = torch.stack([base[i % 3][torch.randperm(16, generator=g)] for i in range(300)])
    queries = torch.cat([torch.ones(1, 16), torch.randn(20, 16, generator=g)])
    qrels = torch.stack(
        [
            torch.arange(21).repeat(3),
            torch.randint(0, 300, (63,), generator=g),
            torch.ones(63, dtype=torch.long),
        ],
        1,
    )
    return queries, corpus, qrels


@pytest.mark.parametrize("kind", ["random", "tied"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_the_fast_route_equals_the_canonical_scan(kind, similarity, monkeypatch):
    queries, corpus, qrels = _data(kind, seed=3)
    args = {"k": (1, 5, 20), "depth": 30, "similarity": similarity, "aggregation": "none", "return_run": True}
    fast = dense_retrieval(queries, corpus, qrels, **args, block_bytes=4096)
    calls = []
    scan = exact_lists.CorpusScan.lists

    def counted(self, q, depth, self_pos, *, canonical):
        calls.append((q.shape[0], canonical))
        return scan(self, q, depth, self_pos, canonical=canonical)

    monkeypatch.setattr(exact_lists.CorpusScan, "lists", counted)
    monkeypatch.setattr(exact_lists, "FAST_EXTRA", 0)  # every full list overflows: all rows scanned again
    slow = dense_retrieval(queries, corpus, qrels, **args, block_bytes=4096)
    assert (21, True) in calls  # the canonical scan ran for every query
    for key in fast:
        want, got = (fast[key], slow[key]) if key != "run" else (torch.cat(fast[key]), torch.cat(slow[key]))
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=key)


@pytest.mark.parametrize("kind", ["random", "tied"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_lists_with_only_the_near_keys_canonical_rank_as_all_canonical(kind, similarity, monkeypatch):
    """One process rescores only the entries near a neighbour or the boundary: the same order, tie blocks
    and boundary key (all the measures read) as lists whose every key is canonical."""
    from embedmetrics._engine.dense.qrels import Judgements

    queries, corpus, qrels = _data(kind, seed=5)
    query_ids, corpus_ids = torch.arange(21), torch.arange(300)
    judgements = Judgements.build(qrels, query_ids)
    args = {"depth": 30, "similarity": similarity, "exclude_self": False, "block_bytes": 4096}
    near = exact_lists.scan_corpus(queries, query_ids, corpus, corpus_ids, judgements, **args)
    rescored = exact_lists.exact_lists
    monkeypatch.setattr(exact_lists, "exact_lists", lambda *a, **k: rescored(*a, **{**k, "values": True}))
    every = exact_lists.scan_corpus(queries, query_ids, corpus, corpus_ids, judgements, **args)
    every, near = every.canonical(), near.canonical()
    assert torch.equal(near.ids, every.ids)
    assert torch.equal(near.tail, every.tail)
    assert torch.equal(near.keys[:, -1], every.keys[:, -1])
    assert torch.equal(near.judged_keys, every.judged_keys)
    tied = near.keys[:, 1:] == near.keys[:, :-1]
    assert torch.equal(tied, every.keys[:, 1:] == every.keys[:, :-1])
    if kind == "tied":
        assert bool(tied.any())  # the case has tie blocks inside the lists
    if kind == "random":  # isolated entries kept their product keys (not the same bits everywhere)
        assert not torch.equal(near.keys, every.keys)
