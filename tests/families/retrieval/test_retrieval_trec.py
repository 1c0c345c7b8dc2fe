"""Judged documents that were not retrieved (`retrieved`) and relevant counts (`num_relevant`).

Hand-worked trec_eval-style cases: a run retrieves d1 (relevant), d2, d3 (relevant) in that order; the
qrels also judge d4 relevant, but the run did not return it.
"""

from __future__ import annotations

import math

import pytest
import torch

from embedmetrics import functional as F

# d4 has the highest score on purpose: unretrieved documents are never ranked, whatever their score
PREDS = torch.tensor([0.9, 0.8, 0.7, 5.0])
TARGET = torch.tensor([1, 0, 1, 1])
RETRIEVED = torch.tensor([True, True, True, False])


@pytest.mark.parametrize(
    ("fn", "kwargs", "expected"),
    [
        (F.retrieval_precision, {"k": 2}, 1 / 2),
        (F.retrieval_precision, {}, 2 / 3),  # k=None: all retrieved documents
        (F.retrieval_precision, {"k": 10}, 2 / 10),  # trec_eval P@10 divides by 10
        (F.retrieval_recall, {"k": 3}, 2 / 3),
        (F.retrieval_recall, {}, 2 / 3),
        (F.retrieval_average_precision, {}, (1 / 1 + 2 / 3) / 3),
        (F.retrieval_r_precision, {}, 2 / 3),
        (F.retrieval_reciprocal_rank, {}, 1.0),
        (F.retrieval_hit_rate, {"k": 1}, 1.0),
    ],
)
def test_unretrieved_relevant_counts_in_R_only(fn, kwargs, expected):
    assert fn(PREDS, TARGET, retrieved=RETRIEVED, **kwargs).item() == pytest.approx(expected)
    # the same through indexes, with another query around, and as a 2-D row
    preds = torch.cat([PREDS, torch.tensor([0.3, 0.2])])
    target = torch.cat([TARGET, torch.tensor([0, 1])])
    retrieved = torch.cat([RETRIEVED, torch.tensor([True, True])])
    indexes = torch.tensor([4, 4, 4, 4, 2, 2])
    per_query = fn(preds, target, indexes=indexes, retrieved=retrieved, aggregation="none", **kwargs)
    assert per_query[1].item() == pytest.approx(expected)
    row = fn(PREDS[None], TARGET[None], retrieved=RETRIEVED[None], aggregation="none", **kwargs)
    assert row.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("fn", "kwargs", "expected"),
    [
        (F.retrieval_recall, {}, 2 / 4),
        (F.retrieval_average_precision, {}, (1 / 1 + 2 / 3) / 4),
        (F.retrieval_r_precision, {}, 2 / 4),  # only 3 retrieved: 2 relevant in the "top 4"
        (F.retrieval_precision, {"k": 2}, 1 / 2),  # unaffected
        (F.retrieval_hit_rate, {"k": 2}, 1.0),
    ],
)
def test_num_relevant(fn, kwargs, expected):
    # 4 relevant in total: d1, d3, d4 (given, unretrieved) and one more that is not in the input at all
    got = fn(PREDS, TARGET, retrieved=RETRIEVED, num_relevant=torch.tensor([4]), **kwargs)
    assert got.item() == pytest.approx(expected)
    # without d4 in the input: num_relevant=4 still means 4 relevant documents
    got = fn(PREDS[:3], TARGET[:3], num_relevant=torch.tensor([4]), **kwargs)
    assert got.item() == pytest.approx(expected)


def test_ndcg_with_unretrieved_graded_and_extra_relevant():
    preds = torch.tensor([0.9, 0.8, 0.7, 0.1])
    gains = torch.tensor([2, 0, 1, 3])
    retrieved = torch.tensor([True, True, True, False])
    dcg = 2 / math.log2(2) + 1 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    got = F.retrieval_normalized_dcg(preds, gains, retrieved=retrieved)
    assert got.item() == pytest.approx(dcg / idcg)
    # num_relevant: 3 found (gains 2, 1, 3) + 2 extra relevant with gain 1 -> ideal [3, 2, 1, 1, 1]
    idcg2 = sum(g / math.log2(i + 2) for i, g in enumerate([3, 2, 1, 1, 1]))
    got = F.retrieval_normalized_dcg(preds, gains, retrieved=retrieved, num_relevant=torch.tensor([5]))
    assert got.item() == pytest.approx(dcg / idcg2)
    # cut-off 2: ideal top 2 = [3, 2]; DCG@2 = 2
    got = F.retrieval_normalized_dcg(preds, gains, k=2, retrieved=retrieved, num_relevant=torch.tensor([5]))
    assert got.item() == pytest.approx(2 / (3 + 2 / math.log2(3)))
    # extra relevant documents sort between grades >= 1 and grades < 1
    fractional = torch.tensor([0.5, 2.0])
    got = F.retrieval_normalized_dcg(torch.tensor([0.9, 0.1]), fractional, num_relevant=torch.tensor([3]))
    ideal = 2 / math.log2(2) + 1 / math.log2(3) + 0.5 / math.log2(4)
    assert got.item() == pytest.approx((0.5 + 2 / math.log2(3)) / ideal)


def test_query_with_nothing_retrieved_scores_zero_not_empty():
    preds = torch.tensor([0.5, 0.4, 0.9, 0.8])
    target = torch.tensor([1, 0, 1, 0])
    indexes = torch.tensor([0, 0, 1, 1])
    retrieved = torch.tensor([False, False, True, True])
    got = F.retrieval_hit_rate(
        preds, target, indexes=indexes, retrieved=retrieved, aggregation="none", empty_target_action="pos"
    )
    assert got.tolist() == [0.0, 1.0]


def test_num_relevant_per_sorted_index_and_validation():
    preds = torch.tensor([0.9, 0.8, 0.7, 0.6])
    target = torch.tensor([1, 0, 0, 1])
    indexes = torch.tensor([9, 3, 9, 3])
    got = F.retrieval_recall(
        preds, target, indexes=indexes, num_relevant=torch.tensor([2, 4]), aggregation="none"
    )
    assert got.tolist() == pytest.approx([1 / 2, 1 / 4])  # index 3 first (sorted), then index 9
    with pytest.raises(ValueError, match="num_relevant"):
        F.retrieval_recall(preds, target, indexes=indexes, num_relevant=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="num_relevant"):
        F.retrieval_recall(preds, target, indexes=indexes, num_relevant=torch.tensor([2, 4, 1]))
    with pytest.raises(TypeError, match="num_relevant"):
        F.retrieval_recall(preds, target, indexes=indexes, num_relevant=torch.tensor([2.0, 4.0]))
    with pytest.raises(TypeError, match="retrieved"):
        F.retrieval_recall(preds, target, indexes=indexes, retrieved=torch.ones(4))
    with pytest.raises(ValueError, match="retrieved"):
        F.retrieval_recall(preds, target, indexes=indexes, retrieved=torch.ones(3, dtype=torch.bool))
    # num_relevant = 0 for a query without relevant documents: an empty query
    got = F.retrieval_recall(
        torch.tensor([0.5]), torch.tensor([0]), num_relevant=torch.tensor([0]), empty_target_action="pos"
    )
    assert got.item() == 1.0
