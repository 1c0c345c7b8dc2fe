"""RetrievalAUROC, RetrievalPrecisionRecallCurve, RetrievalRecallAtFixedPrecision and their functional
twins: torchmetrics 1.9 parity on tie-free data with positive scores (every argument combination,
queries scattered over shuffled batches), exact expected values over every tie order against a
plain-Python brute force, and the bracketing of the tie policies."""

from __future__ import annotations

import itertools

import pytest
import torch
import torchmetrics.functional.retrieval as tmf
import torchmetrics.retrieval as tmr
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics.functional import (
    retrieval_auroc,
    retrieval_precision_recall_curve,
    retrieval_recall_at_fixed_precision,
)
from oracles.retrieval import tie_orders

POLICIES = ("pessimistic", "average", "optimistic")


# --------------------------------------------------------------------------- brute-force references


def _strict_auroc(gains: list[int], k: int | None, max_fpr: float | None) -> float:
    """AUROC of the top k of one strict ranking (the ROC step curve), McClish-standardised."""
    top = gains[: len(gains) if k is None else k]
    P = sum(1 for g in top if g > 0)
    N = len(top) - P
    if P == 0 or N == 0:
        return 0.0
    x = N if max_fpr is None else max_fpr * N  # irrelevant documents inside the area
    area, tp, neg = 0.0, 0, 0
    for g in top:
        if g > 0:
            tp += 1
        else:
            neg += 1
            area += min(max(x - (neg - 1), 0.0), 1.0) * tp
    auc = area / (P * N)
    if max_fpr is None or max_fpr == 1.0:
        return auc
    lo = 0.5 * max_fpr**2
    return 0.5 * (1 + (auc - lo) / (max_fpr - lo))


def _strict_curve(gains: list[int], max_k: int, adaptive_k: bool) -> tuple[list[float], list[float]]:
    R = sum(1 for g in gains if g > 0)
    precision, recall = [], []
    for k in range(1, max_k + 1):
        hits = sum(1 for g in gains[:k] if g > 0)
        precision.append(hits / (min(k, len(gains)) if adaptive_k else k))
        recall.append(hits / R if R else 0.0)
    return precision, recall


def _orders(scores: list[float], gains: list[int], ties: str) -> list[list[int]]:
    if ties == "average":
        return [[gains[i] for i in o] for o in tie_orders(scores)]
    sign = 1 if ties == "pessimistic" else -1  # pessimistic: irrelevant first
    return [[gains[i] for i in sorted(range(len(scores)), key=lambda i: (-scores[i], sign * gains[i]))]]


def _brute_auroc(scores: list[float], gains: list[int], k: int | None, mf: float | None, ties: str) -> float:
    orders = _orders(scores, gains, ties)
    return sum(_strict_auroc(o, k, mf) for o in orders) / len(orders)


def _brute_curve(scores: list[float], gains: list[int], max_k: int, adaptive_k: bool, ties: str):
    orders = _orders(scores, gains, ties)
    curves = [_strict_curve(o, max_k, adaptive_k) for o in orders]
    return [[sum(c[part][i] for c in curves) / len(curves) for i in range(max_k)] for part in (0, 1)]


# --------------------------------------------------------------------------- data


def _data(seed: int, n_queries: int = 40, ignore: int | None = None, max_size: int = 15):
    """Tie-free positive scores, queries scattered (shuffled); some queries single-class."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_size, (n_queries,), generator=g)
    indexes = torch.repeat_interleave(torch.randperm(10 * n_queries, generator=g)[:n_queries], sizes)
    n = indexes.numel()
    preds = torch.randperm(n, generator=g).float() / n + 0.01
    target = (torch.rand(n, generator=g) < 0.4).long()
    if ignore is not None:
        target = torch.where(torch.rand(n, generator=g) < 0.15, ignore, target)
    perm = torch.randperm(n, generator=g)
    return preds[perm], target[perm], indexes[perm]


def _batches(metric, preds, target, indexes, step: int = 37):
    for s in range(0, preds.numel(), step):
        metric.update(preds[s : s + step], target[s : s + step], indexes[s : s + step])
    return metric.compute()


# --------------------------------------------------------------------------- AUROC


@pytest.mark.parametrize("top_k", [None, 1, 3, 10])
@pytest.mark.parametrize("max_fpr", [None, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("eta", ["neg", "pos", "skip"])
@pytest.mark.parametrize("ignore", [None, -1])
def test_auroc_module_equals_torchmetrics(top_k, max_fpr, eta, ignore) -> None:
    preds, target, indexes = _data(seed=5, ignore=ignore)
    kwargs = {"empty_target_action": eta, "ignore_index": ignore, "top_k": top_k, "max_fpr": max_fpr}
    ours = _batches(em.RetrievalAUROC(**kwargs), preds, target, indexes)
    theirs = _batches(tmr.RetrievalAUROC(**kwargs), preds, target, indexes)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("top_k", [None, 2, 5])
@pytest.mark.parametrize("max_fpr", [None, 0.25, 0.7])
def test_auroc_functional_equals_torchmetrics_per_query(top_k, max_fpr) -> None:
    preds, target, indexes = _data(seed=6)
    for q in indexes.unique()[:25]:
        sel = indexes == q
        if target[sel].sum() == 0:
            continue
        ours = retrieval_auroc(preds[sel], target[sel], top_k, max_fpr)
        theirs = tmf.retrieval_auroc(preds[sel], target[sel], top_k=top_k, max_fpr=max_fpr)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_auroc_hand_worked() -> None:
    # ranking 1 0 1 0 0: pairs (pos, neg) correctly ordered: 3 + 2 = 5 of 6
    preds, target = torch.tensor([0.9, 0.8, 0.7, 0.4, 0.1]), torch.tensor([1, 0, 1, 0, 0])
    assert float(retrieval_auroc(preds, target)) == pytest.approx(5 / 6)
    # max_fpr = 1/3: the first negative only, TPR 1/2 there: area 1/6; McClish (1/6 - 1/18)/(1/3 - 1/18)
    expected = 0.5 * (1 + (1 / 6 - 1 / 18) / (1 / 3 - 1 / 18))
    assert float(retrieval_auroc(preds, target, max_fpr=1 / 3)) == pytest.approx(expected)
    # one tie block holding everything: every pair is a coin flip
    assert float(retrieval_auroc(torch.ones(4), torch.tensor([1, 0, 1, 0]))) == pytest.approx(0.5)
    # top 2 = {1, 0}: 1 pair, correct
    assert float(retrieval_auroc(preds, target, top_k=2)) == 1.0
    # top 1 is single-class: 0, as torchmetrics
    assert float(retrieval_auroc(preds, target, top_k=1)) == 0.0


def test_auroc_tie_block_straddling_the_cut_off_by_hand() -> None:
    # scores 1, then a block of three (relevant, irrelevant, irrelevant) tied; top 2 takes one of them.
    # Above: one relevant document. The block member entering is relevant w.p. 1/3 (single-class top:
    # 0) and irrelevant w.p. 2/3 (AUROC 1): 2/3.
    preds, target = torch.tensor([2.0, 1.0, 1.0, 1.0]), torch.tensor([1, 1, 0, 0])
    assert float(retrieval_auroc(preds, target, top_k=2)) == pytest.approx(2 / 3)
    # max_fpr = 0.5 over the whole block: the i-th irrelevant of a block of (1 rel, 2 irr) has
    # 1 + i/3 relevant before it in expectation; x = 1: area (1 + 1/3) / (2·2) = 1/3
    expected = 0.5 * (1 + (1 / 3 - 0.125) / (0.5 - 0.125))
    assert float(retrieval_auroc(preds, target, max_fpr=0.5)) == pytest.approx(expected)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_auroc_equals_brute_force_over_all_tie_orders(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 7))
    scores = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    gains = data.draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n))
    k = data.draw(st.sampled_from([None, 1, 2, 3, 5]))
    mf = data.draw(st.sampled_from([None, 0.1, 0.3, 0.5, 0.77, 1.0]))
    if sum(gains) == 0:
        return
    for policy in POLICIES:
        got = retrieval_auroc(
            torch.tensor(scores, dtype=torch.float64), torch.tensor(gains), k, mf, ties=policy
        )
        assert float(got) == pytest.approx(_brute_auroc(scores, gains, k, mf, policy), abs=1e-9), policy


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.sampled_from([None, 4, 10]), mf=st.sampled_from([None, 0.3]))
def test_auroc_policies_bracket_the_average(seed: int, k: int | None, mf: float | None) -> None:
    g = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, 3, (6, 12), generator=g).double()
    target = torch.randint(0, 2, (6, 12), generator=g)
    if k is not None:  # a top k ties can change the class mix of: brackets hold without a cut
        return
    pes, avg, opt = (retrieval_auroc(preds, target, k, mf, ties=p, aggregation="none") for p in POLICIES)
    assert torch.all(pes <= avg + 1e-12)
    assert torch.all(avg <= opt + 1e-12)


def test_auroc_sequence_of_cut_offs_and_two_d_input() -> None:
    g = torch.Generator().manual_seed(2)
    preds = torch.randint(0, 5, (30, 9), generator=g).float()
    target = torch.randint(0, 2, (30, 9), generator=g)
    both = retrieval_auroc(preds, target, (3, 9), 0.5)
    for i, k in enumerate((3, 9)):
        torch.testing.assert_close(both[i], retrieval_auroc(preds, target, k, 0.5))
    indexes = torch.arange(30).unsqueeze(1).expand(30, 9).reshape(-1)
    flat = retrieval_auroc(preds.reshape(-1), target.reshape(-1), (3, 9), 0.5, indexes=indexes)
    torch.testing.assert_close(flat, both)
    metric = em.RetrievalAUROC(top_k=(3, 9), max_fpr=0.5)
    metric.update(preds[:10], target[:10])
    metric.update(preds[10:].reshape(-1), target[10:].reshape(-1), indexes[90:])
    torch.testing.assert_close(metric.compute(), both)


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, float("nan")])
def test_auroc_rejects_max_fpr_outside_the_unit_interval(bad: float) -> None:
    with pytest.raises(ValueError, match="max_fpr"):
        em.RetrievalAUROC(max_fpr=bad)
    with pytest.raises(ValueError, match="max_fpr"):
        retrieval_auroc(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 0, 1]), max_fpr=bad)


def test_auroc_rejects_a_max_fpr_of_the_wrong_kind_as_type_and_value_error() -> None:
    for exc in (TypeError, ValueError):
        with pytest.raises(exc, match="max_fpr"):
            em.RetrievalAUROC(max_fpr="0.5")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- precision-recall curve


@pytest.mark.parametrize("max_k", [None, 1, 4, 20])
@pytest.mark.parametrize("adaptive_k", [False, True])
@pytest.mark.parametrize("eta", ["neg", "pos", "skip"])
@pytest.mark.parametrize("ignore", [None, -1])
def test_curve_module_equals_torchmetrics(max_k, adaptive_k, eta, ignore) -> None:
    preds, target, indexes = _data(seed=7, ignore=ignore)
    kwargs = {"max_k": max_k, "adaptive_k": adaptive_k, "empty_target_action": eta, "ignore_index": ignore}
    ours = _batches(em.RetrievalPrecisionRecallCurve(**kwargs), preds, target, indexes)
    theirs = _batches(tmr.RetrievalPrecisionRecallCurve(**kwargs), preds, target, indexes)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b.to(a.dtype), rtol=0, atol=1e-6)


@pytest.mark.parametrize("max_k", [None, 1, 3, 30])
@pytest.mark.parametrize("adaptive_k", [False, True])
def test_curve_functional_equals_torchmetrics_per_query(max_k, adaptive_k) -> None:
    preds, target, indexes = _data(seed=8)
    for q in indexes.unique()[:25]:
        sel = indexes == q
        ours = retrieval_precision_recall_curve(preds[sel], target[sel], max_k, adaptive_k)
        theirs = tmf.retrieval_precision_recall_curve(preds[sel], target[sel], max_k, adaptive_k)
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b.to(a.dtype), rtol=0, atol=1e-6)


@pytest.mark.parametrize("min_precision", [0.0, 0.3, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("max_k", [None, 2, 8])
@pytest.mark.parametrize("adaptive_k", [False, True])
@pytest.mark.parametrize("eta", ["neg", "pos", "skip"])
def test_recall_at_fixed_precision_module_equals_torchmetrics(min_precision, max_k, adaptive_k, eta) -> None:
    preds, target, indexes = _data(seed=9)
    kwargs = {
        "min_precision": min_precision,
        "max_k": max_k,
        "adaptive_k": adaptive_k,
        "empty_target_action": eta,
    }
    ours = _batches(em.RetrievalRecallAtFixedPrecision(**kwargs), preds, target, indexes)
    theirs = _batches(tmr.RetrievalRecallAtFixedPrecision(**kwargs), preds, target, indexes)
    torch.testing.assert_close(ours[0], theirs[0].to(ours[0].dtype), rtol=0, atol=1e-6)
    assert int(ours[1]) == int(theirs[1])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_curve_equals_brute_force_over_all_tie_orders(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6))
    scores = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    gains = data.draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n))
    max_k = data.draw(st.integers(1, 8))
    adaptive_k = data.draw(st.booleans())
    for policy in POLICIES:
        p, r, _ = retrieval_precision_recall_curve(
            torch.tensor(scores, dtype=torch.float64), torch.tensor(gains), max_k, adaptive_k, ties=policy
        )
        bp, br = _brute_curve(scores, gains, max_k, adaptive_k, policy)
        assert p.tolist() == pytest.approx(bp, abs=1e-9)
        assert r.tolist() == pytest.approx(br, abs=1e-9)


def test_curve_policies_bracket_the_average() -> None:
    g = torch.Generator().manual_seed(4)
    preds = torch.randint(0, 3, (8, 10), generator=g).double()
    target = torch.randint(0, 2, (8, 10), generator=g)
    curves = [
        retrieval_precision_recall_curve(preds, target, 10, ties=p, aggregation="none") for p in POLICIES
    ]
    for part in (0, 1):
        assert torch.all(curves[0][part] <= curves[1][part] + 1e-12)
        assert torch.all(curves[1][part] <= curves[2][part] + 1e-12)


def test_curve_per_query_and_two_d_input() -> None:
    g = torch.Generator().manual_seed(3)
    preds = torch.randint(0, 6, (12, 7), generator=g).float()
    target = torch.randint(0, 2, (12, 7), generator=g)
    p, r, top = retrieval_precision_recall_curve(preds, target, 5, aggregation="none")
    assert p.shape == r.shape == (12, 5)
    assert top.tolist() == [1, 2, 3, 4, 5]
    for i in range(12):
        pi, ri, _ = retrieval_precision_recall_curve(preds[i], target[i], 5, empty_target_action="neg")
        torch.testing.assert_close(p[i], pi)
        torch.testing.assert_close(r[i], ri)
    metric = em.RetrievalPrecisionRecallCurve(max_k=5)
    metric.update(preds[:4], target[:4])
    indexes = torch.arange(4, 12).unsqueeze(1).expand(8, 7).reshape(-1)
    metric.update(preds[4:].reshape(-1), target[4:].reshape(-1), indexes)
    mean = retrieval_precision_recall_curve(preds, target, 5)
    for a, b in zip(metric.compute(), mean):
        torch.testing.assert_close(a, b)


def test_recall_at_fixed_precision_per_query_matches_each_query() -> None:
    g = torch.Generator().manual_seed(5)
    preds = torch.rand(10, 8, generator=g)
    target = torch.randint(0, 2, (10, 8), generator=g)
    recall, k = retrieval_recall_at_fixed_precision(preds, target, 0.5, 6, aggregation="none")
    for i in range(10):
        ri, ki = retrieval_recall_at_fixed_precision(preds[i], target[i], 0.5, 6)
        assert float(recall[i]) == pytest.approx(float(ri))
        assert int(k[i]) == int(ki)


def test_recall_at_fixed_precision_rules_by_hand() -> None:
    preds, target = torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 0, 1, 0])
    # precision 1, .5, .667, .5; recall .5, .5, 1, 1: at 0.6 the best recall is 1 at k = 3
    recall, k = retrieval_recall_at_fixed_precision(preds, target, 0.6)
    assert (float(recall), int(k)) == (1.0, 3)
    # at 0.5 recall 1 is reached at k = 3 and k = 4: the larger k
    assert int(retrieval_recall_at_fixed_precision(preds, target, 0.5)[1]) == 4
    # nothing qualifies: recall 0 and k = max_k
    recall, k = retrieval_recall_at_fixed_precision(torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.9, 3)
    assert (float(recall), int(k)) == (0.0, 3)


def test_curve_module_needs_max_k_for_two_d_input() -> None:
    metric = em.RetrievalPrecisionRecallCurve()
    with pytest.raises(ValueError, match="max_k"):
        metric.update(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long))
    metric.update(
        torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 0, 1]), torch.tensor([0, 0, 1])
    )  # flat: fine
    assert metric.compute()[2].tolist() == [1, 2]


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"max_k": 0}, ValueError),
        ({"max_k": 2.0}, TypeError),
        ({"adaptive_k": 1}, TypeError),
        ({"min_precision": 1.5}, ValueError),
        ({"min_precision": "high"}, TypeError),
    ],
)
def test_curve_argument_errors(kwargs: dict, exc: type) -> None:
    cls = (
        em.RetrievalRecallAtFixedPrecision if "min_precision" in kwargs else em.RetrievalPrecisionRecallCurve
    )
    name = next(iter(kwargs))
    with pytest.raises(exc, match=name):
        cls(**kwargs)
    with pytest.raises(ValueError, match=name):  # every argument error is also a ValueError (torchmetrics')
        cls(**kwargs)


def test_all_tie_orders_helper_is_exhaustive() -> None:
    # the brute force above relies on tie_orders enumerating every tie permutation
    assert len(tie_orders([1.0, 1.0, 1.0, 0.0])) == len(list(itertools.permutations(range(3))))
