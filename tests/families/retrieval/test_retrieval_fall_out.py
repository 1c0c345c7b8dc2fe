"""RetrievalFallOut / retrieval_fall_out: torchmetrics 1.9 parity on tie-free data, exact expected values
over every tie order, the reversed bracketing of a lower-is-better metric, and its own empty case (a
query with no irrelevant document)."""

from __future__ import annotations

import pytest
import torch
import torchmetrics.functional.retrieval as tmf
import torchmetrics.retrieval as tmr
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics.functional import retrieval_fall_out
from oracles.retrieval import tie_orders

POLICIES = ("pessimistic", "average", "optimistic")


def _plain_fall_out(gains: list[float], k: int | None) -> float:
    """Irrelevant documents in the top k over all irrelevant documents (0 without any)."""
    irrelevant = [g <= 0 for g in gains]
    total = sum(irrelevant)
    if total == 0:
        return 0.0
    return sum(irrelevant[: len(gains) if k is None else k]) / total


def _brute_force(scores: list[float], gains: list[float], k: int | None, ties: str) -> float:
    if ties == "average":
        orders = tie_orders(scores)
        return sum(_plain_fall_out([gains[i] for i in o], k) for o in orders) / len(orders)
    sign = 1 if ties == "pessimistic" else -1  # pessimistic: irrelevant first
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * gains[i]))
    return _plain_fall_out([gains[i] for i in order], k)


def _data(seed: int, n_queries: int = 50, ignore: int | None = None):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 20, (n_queries,), generator=g)
    indexes = torch.repeat_interleave(torch.randperm(10 * n_queries, generator=g)[:n_queries], sizes)
    n = indexes.numel()
    preds = torch.randperm(n, generator=g).float() / n + 0.01  # distinct, positive: tie-free
    target = (torch.rand(n, generator=g) < 0.6).long()  # many relevant: some queries have no negative
    if ignore is not None:
        target = torch.where(torch.rand(n, generator=g) < 0.15, ignore, target)
    perm = torch.randperm(n, generator=g)
    return preds[perm], target[perm], indexes[perm]


@pytest.mark.parametrize("k", [None, 1, 3, 10])
@pytest.mark.parametrize("eta", ["neg", "pos", "skip"])
@pytest.mark.parametrize("ignore", [None, -1])
def test_module_equals_torchmetrics_over_shuffled_batches(
    k: int | None, eta: str, ignore: int | None
) -> None:
    preds, target, indexes = _data(seed=3, ignore=ignore)
    ours = em.RetrievalFallOut(empty_target_action=eta, ignore_index=ignore, top_k=k)
    theirs = tmr.RetrievalFallOut(empty_target_action=eta, ignore_index=ignore, top_k=k)
    for s in range(0, preds.numel(), 97):
        ours.update(preds[s : s + 97], target[s : s + 97], indexes[s : s + 97])
        theirs.update(preds[s : s + 97], target[s : s + 97], indexes[s : s + 97])
    torch.testing.assert_close(ours.compute(), theirs.compute(), rtol=0, atol=1e-6)


def test_defaults_and_direction_follow_torchmetrics() -> None:
    assert em.RetrievalFallOut().empty_target_action == "pos" == tmr.RetrievalFallOut().empty_target_action
    assert em.RetrievalFallOut.higher_is_better is False
    preds, target, indexes = _data(seed=4)
    for k in (None, 2):
        for q in indexes.unique()[:10]:
            sel = indexes == q
            ours = retrieval_fall_out(preds[sel], target[sel], k=k)
            theirs = tmf.retrieval_fall_out(preds[sel], target[sel], top_k=k)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_error_action_raises_for_a_query_without_irrelevant_documents() -> None:
    metric = em.RetrievalFallOut(empty_target_action="error")
    metric.update(torch.tensor([0.5, 0.4]), torch.tensor([1, 1]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="A query has no irrelevant document"):
        metric.compute()
    # a query without relevant documents is an ordinary query for fall-out
    assert float(retrieval_fall_out(torch.tensor([0.5, 0.4]), torch.tensor([0, 0]), k=1)) == 0.5


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_closed_form_equals_brute_force_over_all_tie_orders(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6))
    scores = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    gains = data.draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n))
    k = data.draw(st.sampled_from([None, 1, 2, 3, 5]))
    for policy in POLICIES:
        got = retrieval_fall_out(
            torch.tensor(scores, dtype=torch.float64), torch.tensor(gains), k=k, ties=policy
        )
        assert float(got) == pytest.approx(_brute_force(scores, gains, k, policy), abs=1e-9), policy


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.sampled_from([None, 1, 4, 10]))
def test_policies_bracket_each_other_the_other_way(seed: int, k: int | None) -> None:
    g = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, 3, (6, 12), generator=g).double()  # many ties
    target = torch.randint(0, 2, (6, 12), generator=g)
    pes, avg, opt = (retrieval_fall_out(preds, target, k=k, ties=p, aggregation="none") for p in POLICIES)
    assert torch.all(pes >= avg - 1e-12)  # lower is better: the worst case is the highest value
    assert torch.all(avg >= opt - 1e-12)


def test_two_d_and_flat_input_agree_with_the_module() -> None:
    g = torch.Generator().manual_seed(9)
    preds = torch.randint(0, 4, (20, 7), generator=g).float()
    target = torch.randint(0, 2, (20, 7), generator=g)
    indexes = torch.arange(20).unsqueeze(1).expand(20, 7)
    flat = retrieval_fall_out(preds.reshape(-1), target.reshape(-1), k=(1, 3), indexes=indexes.reshape(-1))
    two_d = retrieval_fall_out(preds, target, k=(1, 3))
    torch.testing.assert_close(flat, two_d)
    metric = em.RetrievalFallOut(k=(1, 3), empty_target_action="neg")
    metric.update(preds[:8], target[:8])
    metric.update(preds[8:].reshape(-1), target[8:].reshape(-1), indexes[8:].reshape(-1))
    torch.testing.assert_close(metric.compute(), two_d)
