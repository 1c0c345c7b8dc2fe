"""Flat input in each row layout of the engine (equal sizes, padded, bucketed by size) vs brute force."""

from __future__ import annotations

import pytest
import torch

from _cases import RETRIEVAL_FUNCTIONS, TIE_POLICIES
from embedmetrics._engine.ranking import measures as ranking
from embedmetrics.functional import retrieval as F
from oracles.retrieval import METRICS, brute_force, plain

FUNCS = RETRIEVAL_FUNCTIONS
POLICIES = TIE_POLICIES
KS = (1, 3, 8)  # one call for all; k=None separately
IGNORE = -1


def _queries(layout: str, graded: bool, seed: int) -> list[tuple[list[float], list[int]]]:
    """Per query (scores, gains): small queries with many ties; 'bucketed' adds long tie-free ones."""
    g = torch.Generator().manual_seed(seed)
    sizes = {"equal": [5] * 12, "padded": [4, 5, 6] * 4, "bucketed": [1, 2, 3, 5, 6] * 2 + [40, 33]}[layout]
    out = []
    for size in sizes:
        if size > 6:  # long queries: distinct scores, so the tie-free definition is the oracle
            scores = (torch.randperm(size, generator=g).double() / size - 0.5).tolist()
        else:
            levels = [0.0, 0.5, -float("inf"), -1.0]  # -inf ties with nothing but itself, not padding
            scores = [levels[int(i)] for i in torch.randint(0, 4, (size,), generator=g)]
        gains = torch.randint(0, 4 if graded else 2, (size,), generator=g).tolist()
        out.append((scores, gains))
    return out


def _expected(name: str, scores: list[float], gains: list[int], k: int | None, policy: str) -> float:
    if len(scores) > 6:
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return plain(name, [gains[i] for i in order], k)
    return brute_force(name, scores, gains, k, policy)


def _flatten(queries, seed, ignored=None):
    preds, target, indexes = [], [], []
    for q, (scores, gains) in enumerate(queries):
        preds += scores
        target += gains
        indexes += [10**12 + 7 * q if seed % 2 else 3 + 7 * q] * len(scores)  # int64-only and int32 ranges
    preds_t, target_t, indexes_t = torch.tensor(preds), torch.tensor(target), torch.tensor(indexes)
    if ignored is not None:
        target_t = torch.where(ignored, IGNORE, target_t)
    perm = torch.randperm(preds_t.numel(), generator=torch.Generator().manual_seed(seed))
    return preds_t[perm], target_t[perm], indexes_t[perm], perm


def _layout_of(indexes: torch.Tensor) -> str:
    _, starts, counts = ranking._group_layout(indexes)
    buckets = ranking._buckets(counts)
    if len(buckets) > 1:
        return "bucketed"
    _, pad = ranking._bucket_items(torch.arange(indexes.numel()), starts, counts, None, buckets[0][1])
    return "equal" if pad is None else "padded"


@pytest.mark.parametrize("layout", ["equal", "padded", "bucketed"])
@pytest.mark.parametrize("name", METRICS)
@pytest.mark.parametrize("seed", [0, 1])
def test_flat_layouts_equal_brute_force(layout, name, seed):
    queries = _queries(layout, name == "normalized_dcg", seed)
    preds, target, indexes, _ = _flatten(queries, seed)
    assert _layout_of(indexes) == layout
    for policy in POLICIES:
        if name == "r_precision":
            got = FUNCS[name](preds, target, indexes=indexes, ties=policy, aggregation="none")
            want = [_expected(name, s, g, None, policy) for s, g in queries]
            assert got.tolist() == pytest.approx(want, abs=1e-6), policy
            continue
        got = FUNCS[name](preds, target, KS, indexes=indexes, ties=policy, aggregation="none")
        everything = FUNCS[name](preds, target, indexes=indexes, ties=policy, aggregation="none")
        for k, values in [*zip(KS, got.T), (None, everything)]:
            want = [_expected(name, s, g, k, policy) for s, g in queries]
            assert values.tolist() == pytest.approx(want, abs=1e-6), (policy, k)


@pytest.mark.parametrize("name", METRICS)
def test_bucketed_layout_with_ignored_documents(name):
    queries = _queries("bucketed", name == "normalized_dcg", 3)
    g = torch.Generator().manual_seed(4)
    drop = [[j > 0 and bool(torch.rand(1, generator=g) < 0.3) for j in range(len(s))] for s, _ in queries]
    ignored = torch.tensor([d for q in drop for d in q])
    preds, target, indexes, _ = _flatten(queries, 4, ignored)
    assert _layout_of(indexes) == "bucketed"
    args = {} if name == "r_precision" else {"k": 3}
    got = FUNCS[name](preds, target, indexes=indexes, ignore_index=IGNORE, aggregation="none", **args)
    want = []
    for (scores, gains), d in zip(queries, drop):
        kept = [i for i in range(len(scores)) if not d[i]]
        sub_s, sub_g = [scores[i] for i in kept], [gains[i] for i in kept]
        want.append(_expected(name, sub_s, sub_g, args.get("k"), "average"))
    assert got.tolist() == pytest.approx(want, abs=1e-6)


def test_bucketed_layout_keeps_num_relevant_and_status_per_query():
    # a long query with nothing relevant among short ones: statuses and num_relevant follow the rows
    preds = torch.cat([torch.linspace(1, 0, 50), torch.tensor([0.3, 0.9, 0.5, 0.1])])
    target = torch.cat([torch.zeros(50, dtype=torch.long), torch.tensor([1, 0, 0, 1])])
    indexes = torch.cat([torch.full((50,), 9), torch.tensor([2, 2, 4, 4])])
    assert _layout_of(indexes) == "bucketed"
    got = F.retrieval_recall(
        preds, target, k=2, indexes=indexes, aggregation="none", num_relevant=torch.tensor([2, 1, 3])
    )
    assert got.tolist() == pytest.approx([0.5, 1.0, 0.0])  # ascending index: 2, 4, 9
    got = F.retrieval_recall(
        preds, target, k=2, indexes=indexes, aggregation="none", empty_target_action="skip"
    )
    assert got.tolist() == pytest.approx([1.0, 1.0])  # index 9 (no relevant) skipped
