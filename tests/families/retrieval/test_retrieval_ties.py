"""Tie policies: hand-worked cases, a brute-force oracle over all tie orders, and bracketing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _cases import RETRIEVAL_FUNCTIONS, TIE_POLICIES
from embedmetrics.functional import retrieval as F
from oracles.retrieval import METRICS, brute_force

FUNCS = RETRIEVAL_FUNCTIONS
POLICIES = TIE_POLICIES


def ours(name, scores, gains, k=None, ties="average", **kw):
    fn = FUNCS[name]
    args = {} if name == "r_precision" else {"k": k}
    preds = torch.as_tensor(scores, dtype=torch.float32)
    target = torch.as_tensor(gains)
    return fn(preds, target, ties=ties, **args, **kw)


def test_all_equal_one_relevant_among_ten():
    preds, target = torch.full((10,), 0.5), torch.zeros(10, dtype=torch.bool)
    target[4] = True
    assert F.retrieval_hit_rate(preds, target, k=3).item() == pytest.approx(0.3)
    mrr = sum(1 / i for i in range(1, 11)) / 10
    assert F.retrieval_reciprocal_rank(preds, target).item() == pytest.approx(mrr)
    assert F.retrieval_hit_rate(preds, target, k=3, ties="pessimistic").item() == 0.0
    assert F.retrieval_hit_rate(preds, target, k=3, ties="optimistic").item() == 1.0
    assert F.retrieval_reciprocal_rank(preds, target, ties="pessimistic").item() == pytest.approx(0.1)


# Hand-worked: scores [0.9, 0.5, 0.5, 0.5, 0.1], relevance [0, 1, 1, 0, 1]; the tie block is
# positions 2..4 (1-based) holding 2 relevant of 3. Values worked out on paper:
#   pessimistic order 0 | 0 1 1 | 1     optimistic order 0 | 1 1 0 | 1
HAND = {
    # name, k: (pessimistic, average, optimistic)
    ("hit_rate", 2): (0.0, 2 / 3, 1.0),
    ("hit_rate", 3): (1.0, 1.0, 1.0),  # C(1,2)=0: two slots cannot both miss
    ("reciprocal_rank", None): (1 / 3, 2 / 3 * 1 / 2 + 1 / 3 * 1 / 3, 1 / 2),
    ("precision", 2): (0.0, (2 / 3) / 2, 0.5),
    ("precision", 3): (1 / 3, (4 / 3) / 3, 2 / 3),
    ("recall", 3): (1 / 3, (4 / 3) / 3, 2 / 3),
    ("r_precision", None): (1 / 3, (1 * 2 / 3 + 0 + 0) / 3 + (2 / 3) / 3, 2 / 3),
    # AP: pessimistic ranks of relevant 3,4,5 -> (1/3 + 2/4 + 3/5)/3; optimistic 2,3,5 -> (1/2+2/3+3/5)/3
    ("average_precision", None): (
        (1 / 3 + 2 / 4 + 3 / 5) / 3,
        # McSherry & Najork by hand: x=0: (2/3)(1)/2, x=1: (2/3)(1 + 1/2)/3, x=2: (2/3)(1 + 1)/4, then 3/5
        ((2 / 3) * 1 / 2 + (2 / 3) * 1.5 / 3 + (2 / 3) * 2 / 4 + 3 / 5) / 3,
        (1 / 2 + 2 / 3 + 3 / 5) / 3,
    ),
}


@pytest.mark.parametrize(("case", "expected"), list(HAND.items()), ids=[f"{n}@{k}" for n, k in HAND])
def test_hand_worked_ties(case, expected):
    name, k = case
    scores, gains = [0.9, 0.5, 0.5, 0.5, 0.1], [0, 1, 1, 0, 1]
    for policy, value in zip(POLICIES, expected):
        assert ours(name, scores, gains, k, policy).item() == pytest.approx(value, abs=1e-6), policy


def test_hand_worked_ndcg_ties():
    # scores [1, 1, 0], gains [3, 0, 1]: block of two with mean gain 1.5
    d = [1 / torch.log2(torch.tensor(i + 2.0)).item() for i in range(3)]
    idcg = 3 * d[0] + 1 * d[1]
    expected = {
        "pessimistic": (0 * d[0] + 3 * d[1] + 1 * d[2]) / idcg,
        "average": (1.5 * d[0] + 1.5 * d[1] + 1 * d[2]) / idcg,
        "optimistic": (3 * d[0] + 0 * d[1] + 1 * d[2]) / idcg,
    }
    for policy, value in expected.items():
        assert ours("normalized_dcg", [1.0, 1.0, 0.0], [3, 0, 1], None, policy).item() == pytest.approx(value)


@st.composite
def small_query(draw, graded=False):
    n = draw(st.integers(1, 6))
    scores = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, -1.0]), min_size=n, max_size=n))
    values = [0, 1, 2, 3] if graded else [0, 1]
    gains = draw(st.lists(st.sampled_from(values), min_size=n, max_size=n))
    k = draw(st.sampled_from([None, 1, 2, 3, 5]))
    return scores, gains, k


@pytest.mark.parametrize("name", METRICS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_closed_forms_equal_brute_force_over_all_tie_orders(name, data):
    scores, gains, k = data.draw(small_query(graded=name == "normalized_dcg"))
    for policy in POLICIES:
        expected = brute_force(name, scores, gains, k, policy)
        assert ours(name, scores, gains, k, policy).item() == pytest.approx(expected, abs=1e-5), policy


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_adaptive_precision_brute_force(data):
    scores, gains, k = data.draw(small_query())
    expected = brute_force("precision", scores, gains, k, "average", adaptive_k=True)
    got = F.retrieval_precision(torch.tensor(scores), torch.tensor(gains), k, adaptive_k=True)
    assert got.item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", METRICS)
@settings(max_examples=25, deadline=None)
@given(
    q=st.integers(1, 6),
    d=st.integers(1, 30),
    levels=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    k=st.sampled_from([None, 1, 4, 10]),
)
def test_policies_bracket_each_other(name, q, d, levels, seed, k):
    g = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, levels, (q, d), generator=g).double()  # many ties
    high = 4 if name == "normalized_dcg" else 2
    target = torch.randint(0, high, (q, d), generator=g)
    args = {} if name == "r_precision" else {"k": k}
    vals = [FUNCS[name](preds, target, ties=p, aggregation="none", **args) for p in POLICIES]
    assert torch.all(vals[0] <= vals[1] + 1e-9)
    assert torch.all(vals[1] <= vals[2] + 1e-9)


@pytest.mark.parametrize("name", METRICS)
def test_flat_float32_float64_and_2d_agree_under_ties(name):
    g = torch.Generator().manual_seed(5)
    q, d = 30, 9
    preds = torch.randint(0, 3, (q, d), generator=g).float() - 1.0
    target = torch.randint(0, 4 if name == "normalized_dcg" else 2, (q, d), generator=g)
    indexes = torch.arange(q).unsqueeze(1).expand(q, d)
    for policy in POLICIES:
        a = FUNCS[name](preds, target, ties=policy, aggregation="none")
        b = FUNCS[name](preds.double(), target, indexes=indexes, ties=policy, aggregation="none")
        perm = torch.randperm(q * d, generator=g)
        c = FUNCS[name](
            preds.reshape(-1)[perm],
            target.reshape(-1)[perm],
            indexes=indexes.reshape(-1)[perm],
            ties=policy,
            aggregation="none",
        )
        assert torch.allclose(a.double(), b, atol=1e-6)
        assert torch.allclose(a, c, atol=1e-6)


def test_negative_zero_ties_with_zero():
    preds = torch.tensor([0.0, -0.0])
    target = torch.tensor([0, 1])
    assert F.retrieval_reciprocal_rank(preds, target).item() == pytest.approx(0.75)
    assert F.retrieval_reciprocal_rank(preds.double(), target).item() == pytest.approx(0.75)


def test_large_tie_block_is_accurate():
    # 100000 tied documents, 3 relevant: hit@10 = 1 - C(99997, 10) / C(100000, 10)
    n, r, k = 100_000, 3, 10
    preds = torch.zeros(n)
    target = torch.zeros(n, dtype=torch.long)
    target[:r] = 1
    miss = 1.0
    for i in range(k):
        miss *= (n - r - i) / (n - i)
    assert F.retrieval_hit_rate(preds, target, k=k).item() == pytest.approx(1 - miss, rel=1e-5)
    # recall@k = k/n, precision@k = r/n
    assert F.retrieval_recall(preds, target, k=k).item() == pytest.approx(k / n, rel=1e-5)
    assert F.retrieval_precision(preds, target, k=k).item() == pytest.approx(r / n, rel=1e-5)
