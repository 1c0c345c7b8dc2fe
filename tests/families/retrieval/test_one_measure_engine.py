"""The retrieval engine's cut-off closed forms and the list measures of dense retrieval and the kNN
metrics (``tie_stats.ListTerms`` read by ``at`` / ``upto`` / ``ratio``) are one set of definitions: on
tie-heavy rankings they give the same per-query values."""

from __future__ import annotations

import pytest
import torch

from embedmetrics._engine.core import tie_stats
from embedmetrics.functional import (
    retrieval_average_precision,
    retrieval_hit_rate,
    retrieval_precision,
    retrieval_r_precision,
    retrieval_recall,
    retrieval_reciprocal_rank,
)


def _list_terms(preds: torch.Tensor, target: torch.Tensor) -> tie_stats.ListTerms:
    """Each row as a complete ranked list (its last tie block ends inside it)."""
    order = torch.argsort(-preds, dim=1, stable=True)
    keys = (-preds).gather(1, order).double()
    relevant = target.gather(1, order)
    last = keys[:, -1:] == keys
    last_t = last.sum(1)
    last_r = (last & relevant).sum(1)
    return tie_stats.ListTerms.of(tie_stats.position_stats(keys, relevant, last_t, last_r, "average"))


@pytest.mark.parametrize("seed", range(5))
def test_retrieval_closed_forms_are_the_shared_list_measures(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, 4, (300, 12), generator=g).double()  # many ties
    target = torch.rand(300, 12, generator=g, dtype=torch.float64) < 0.3
    target[:, 0] |= ~target.any(1)  # every query has a relevant document
    terms = _list_terms(preds, target)
    R = target.sum(1).double()
    ks = (1, 3, 5, 12)
    last = torch.tensor(ks) - 1
    found = tie_stats.at(terms.relevance, last)
    shared = {
        retrieval_hit_rate: tie_stats.at(terms.first, last),
        retrieval_reciprocal_rank: tie_stats.at(tie_stats.reciprocal_ranks(terms.first), last),
        retrieval_precision: found / torch.tensor(ks, dtype=torch.float64),
        retrieval_recall: tie_stats.ratio(found, R[:, None]),
        retrieval_average_precision: tie_stats.ratio(tie_stats.at(terms.precision, last), R[:, None]),
    }
    for fn, want in shared.items():
        got = fn(preds, target, k=ks, aggregation="none")
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=fn.__name__)
    r_prec = tie_stats.ratio(tie_stats.upto(terms.relevance, R.long()), R)
    torch.testing.assert_close(
        retrieval_r_precision(preds, target, aggregation="none"), r_prec, rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("layout", ["2-D", "flat"])
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_measures_read_off_one_ranking_equal_each_functional(layout: str, ties: str) -> None:
    """``shared_query_values`` (the report ranks once for its seven measures) gives each metric exactly
    the values of its own functional, with graded relevance, ties, unretrieved documents and an empty
    query."""
    from embedmetrics._engine.ranking.retrieval import METRICS, query_values, shared_query_values

    g = torch.Generator().manual_seed(11)
    preds = torch.randint(0, 4, (30, 12), generator=g).double()  # many ties
    grade = torch.randint(0, 3, (30, 12), generator=g)
    grade[5] = 0  # an empty query
    retrieved = torch.rand(30, 12, generator=g) > 0.2
    indexes = None
    if layout == "flat":
        indexes = torch.arange(30).repeat_interleave(12)
        preds, grade, retrieved = preds.reshape(-1), grade.reshape(-1), retrieved.reshape(-1)
    requests = [
        ("hit_rate", (1, 5)), ("reciprocal_rank", (None,)), ("normalized_dcg", (3, 10)),
        ("average_precision", (None,)), ("precision", (1, 5)), ("recall", (5, None)),
        ("r_precision", (None,)),
    ]  # fmt: skip
    shared = shared_query_values(requests, preds, grade, indexes, ties=ties, retrieved=retrieved)
    for name, ks in requests:
        metric = METRICS[name]
        target = grade if not metric.binary else grade > 0
        want = query_values(
            metric, preds, target, indexes, ks=ks, ties=ties, ignore_index=None, retrieved=retrieved
        )
        assert torch.equal(shared[name][0], want[0]), name
        assert torch.equal(shared[name][1], want[1]), name
