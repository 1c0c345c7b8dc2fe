"""torchmetrics 1.9 as the oracle: tie-free data, positive scores, queries scattered over shuffled batches."""

from __future__ import annotations

import pytest
import torch
import torchmetrics.retrieval as tmr

import embedmetrics as em
from embedmetrics.functional import retrieval as F

# (ours, torchmetrics, functional, has k, graded target)
PAIRS = [
    (em.RetrievalHitRate, tmr.RetrievalHitRate, F.retrieval_hit_rate, True, False),
    (em.RetrievalMRR, tmr.RetrievalMRR, F.retrieval_reciprocal_rank, True, False),
    (em.RetrievalPrecision, tmr.RetrievalPrecision, F.retrieval_precision, True, False),
    (em.RetrievalRecall, tmr.RetrievalRecall, F.retrieval_recall, True, False),
    (em.RetrievalNormalizedDCG, tmr.RetrievalNormalizedDCG, F.retrieval_normalized_dcg, True, True),
    (em.RetrievalMAP, tmr.RetrievalMAP, F.retrieval_average_precision, True, False),
    (em.RetrievalRPrecision, tmr.RetrievalRPrecision, F.retrieval_r_precision, False, False),
]
IDS = [p[0].__name__ for p in PAIRS]


def _data(seed: int, n_queries: int = 60, graded: bool = False, ignore: int | None = None):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 25, (n_queries,), generator=g)
    indexes = torch.repeat_interleave(torch.randperm(10 * n_queries, generator=g)[:n_queries], sizes)
    n = indexes.numel()
    preds = torch.randperm(n, generator=g).float() / n + 0.01  # distinct and positive: tie-free
    if graded:
        target = torch.randint(0, 4, (n,), generator=g) * (torch.rand(n, generator=g) < 0.4)
    else:
        target = (torch.rand(n, generator=g) < 0.25).long()
    if ignore is not None:
        target = torch.where(torch.rand(n, generator=g) < 0.15, ignore, target)
    perm = torch.randperm(n, generator=g)  # shuffle: a query's documents scatter over batches
    return preds[perm], target[perm], indexes[perm]


def _kwargs(has_k: bool, k, eta, ignore):
    kw = {"empty_target_action": eta, "ignore_index": ignore}
    if has_k:
        kw["top_k"] = k
    return kw


def _cases(ks):
    """(pair, k) combinations where the definitions agree: R-precision has no k; torchmetrics' AP@k
    divides by the relevant found in the top k, ours by R (documented difference), so MAP only at k=None."""
    return [
        pytest.param(*p, k, id=f"{p[0].__name__}-k{k}")
        for p in PAIRS
        for k in ks
        if k is None or (p[3] and p[0] is not em.RetrievalMAP)
    ]


@pytest.mark.parametrize(("ours", "theirs", "fn", "has_k", "graded", "k"), _cases([None, 1, 3, 10]))
@pytest.mark.parametrize("eta", ["neg", "pos", "skip"])
@pytest.mark.parametrize("ignore", [None, -100])
def test_module_equals_torchmetrics_over_shuffled_batches(ours, theirs, fn, has_k, graded, k, eta, ignore):
    seed = 100 * (k or 0) + 10 * ["neg", "pos", "skip"].index(eta) + (ignore is None)
    preds, target, indexes = _data(seed, graded=graded, ignore=ignore)
    kw = _kwargs(has_k, k, eta, ignore)
    m, t = ours(**kw), theirs(**kw)
    for chunk in torch.split(torch.arange(preds.numel()), 37):
        m.update(preds[chunk], target[chunk], indexes=indexes[chunk])
        t.update(preds[chunk], target[chunk], indexes=indexes[chunk])
    expected = t.compute()
    assert torch.allclose(m.compute(), expected, atol=1e-6)
    fkw = {"k": k} if has_k else {}
    got = fn(preds, target, indexes=indexes, empty_target_action=eta, ignore_index=ignore, **fkw)
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize(("ours", "theirs", "fn", "has_k", "graded"), PAIRS, ids=IDS)
def test_error_action_raises_like_torchmetrics(ours, theirs, fn, has_k, graded):
    preds, target, indexes = _data(3, graded=graded)
    target[indexes == indexes[0]] = 0  # one query without relevant documents
    t = theirs(empty_target_action="error")
    t.update(preds, target, indexes=indexes)
    with pytest.raises(ValueError, match="no positive target"):
        t.compute()
    m = ours(empty_target_action="error")
    m.update(preds, target, indexes=indexes)
    with pytest.raises(ValueError, match="no relevant document"):
        m.compute()
    # ... and without empty queries both agree
    preds, target, indexes = _data(4, n_queries=5, graded=graded)
    keep = torch.isin(indexes, indexes[target > 0])
    m2, t2 = ours(empty_target_action="error"), theirs(empty_target_action="error")
    m2.update(preds[keep], target[keep], indexes[keep])
    t2.update(preds[keep], target[keep], indexes[keep])
    assert torch.allclose(m2.compute(), t2.compute(), atol=1e-6)


@pytest.mark.parametrize(("ours", "theirs", "fn", "has_k", "graded", "k"), _cases([None, 3]))
def test_2d_input_equals_torchmetrics_on_flat_input(ours, theirs, fn, has_k, graded, k):
    g = torch.Generator().manual_seed(7)
    q, d = 40, 12
    preds = (torch.randperm(q * d, generator=g).float() / (q * d) + 0.01).reshape(q, d)
    target = torch.randint(0, 4 if graded else 2, (q, d), generator=g) * (torch.rand(q, d, generator=g) < 0.3)
    indexes = torch.arange(q).unsqueeze(1).expand(q, d)
    kw = _kwargs(has_k, k, "neg", None)
    expected = theirs(**kw)(preds, target, indexes=indexes)
    m = ours(**kw)
    m.update(preds[:15], target[:15])
    m.update(preds[15:], target[15:])
    assert torch.allclose(m.compute(), expected, atol=1e-6)
    fkw = {"k": k} if has_k else {}
    assert torch.allclose(fn(preds, target, **fkw), expected, atol=1e-6)


def test_precision_adaptive_k_equals_torchmetrics():
    preds, target, indexes = _data(11)
    for k in (1, 5, 30):
        t = tmr.RetrievalPrecision(top_k=k, adaptive_k=True)(preds, target, indexes=indexes)
        m = em.RetrievalPrecision(k=k, adaptive_k=True)(preds, target, indexes=indexes)
        assert torch.allclose(m, t, atol=1e-6)


@pytest.mark.parametrize("aggregation", ["median", "min", "max"])
def test_aggregations_equal_torchmetrics(aggregation):
    preds, target, indexes = _data(12)
    t = tmr.RetrievalRecall(top_k=5, aggregation=aggregation)(preds, target, indexes=indexes)
    m = em.RetrievalRecall(k=5, aggregation=aggregation)(preds, target, indexes=indexes)
    assert torch.allclose(m, t, atol=1e-6)


def test_multi_k_equals_one_call_per_k():
    preds, target, indexes = _data(13)
    for ours, theirs, _, has_k, graded in PAIRS:
        if not has_k or ours is em.RetrievalMAP or graded:
            continue
        got = ours(k=(1, 3, 10))(preds, target, indexes=indexes)
        expected = torch.stack([theirs(top_k=k)(preds, target, indexes=indexes) for k in (1, 3, 10)])
        assert got.shape == (3,)
        assert torch.allclose(got, expected, atol=1e-6)


def test_map_at_k_divides_by_all_relevant():
    # relevant at ranks 1 and 3, k=2: trec_eval/ranx AP@2 = (1/1) / 2; torchmetrics gives 1.0
    preds, target = torch.tensor([0.9, 0.8, 0.7]), torch.tensor([1, 0, 1])
    assert F.retrieval_average_precision(preds, target, k=2).item() == pytest.approx(0.5)
    assert tmr.RetrievalMAP(top_k=2)(preds, target, indexes=torch.zeros(3, dtype=torch.long)).item() == 1.0


def test_non_positive_scores_are_ranked():
    # torchmetrics >= 1.7.4 drops scores <= 0 in MRR; a cosine similarity of -0.1 is a real ranking
    preds, target = torch.tensor([-0.1, -0.5, -0.9]), torch.tensor([0, 1, 0])
    assert F.retrieval_reciprocal_rank(preds, target).item() == pytest.approx(0.5)
    assert F.retrieval_hit_rate(preds, target, k=2).item() == 1.0
