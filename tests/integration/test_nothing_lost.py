"""Nothing lost: a rejected batch never costs accumulated state, on ``update`` and on ``forward``.

Property (every module class): for any sequence of good and bad batches sent through ``update`` or
``forward``, the state afterwards equals the state of a fresh metric that received, through
``update``, exactly the batches whose call succeeded. A batch is "bad" when the call raised: bad input,
or (``forward`` only) a batch value that cannot be computed. Also: settings are checked on
``merge_state`` / ``load_state_dict``, and inputs that require grad are detached.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics import Metric

import embedmetrics as em
from embedmetrics import AccuracyCalculator

Batch = tuple[tuple[Any, ...], dict[str, Any]]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _retrieval_pool(binary: bool) -> list[Batch]:
    g = _gen(0)
    preds = torch.rand(12, generator=g)
    target = torch.tensor([1, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0])
    indexes = torch.arange(4).repeat_interleave(3)
    no_relevant = torch.zeros(12, dtype=torch.long)  # fine for update; forward's value raises ('error')
    bad_value = torch.tensor([2] * 12) if binary else torch.tensor([-1] * 12)
    return [
        ((preds, target, indexes), {}),
        ((preds.view(4, 3), target.view(4, 3)), {}),
        ((torch.rand(5, 6, generator=g), (torch.rand(5, 6, generator=g) < 0.5).long()), {}),
        ((preds, no_relevant, indexes + 100), {}),
        ((preds.clone().fill_(float("nan")), target, indexes), {}),  # NaN scores
        ((preds, target[:5], indexes), {}),  # shapes differ
        ((preds, target, indexes.float()), {}),  # float indexes
        ((preds, bad_value, indexes), {}),  # not a valid relevance
        ((preds.long(), target, indexes), {}),  # integer scores
    ]


def _views_pool(pair: bool) -> list[Batch]:
    g = _gen(1)
    z1 = torch.randn(7, 4, generator=g)
    z2 = z1 + 0.3 * torch.randn(7, 4, generator=g)
    nan = z1.clone()
    nan[2, 1] = float("nan")
    wide = torch.randn(5, 3, generator=g)
    views = (lambda a, b: (a, b)) if pair else (lambda a, b: (a,))
    pool = [
        (views(z1, z2), {}),
        (views(z2[:4], z1[:4]), {}),
        (views(nan, z2), {}),  # NaN (validate_args)
        (views(z1.long(), z2.long()), {}),  # not floating point
        (views(wide, wide), {}),  # another feature dimension (fine as the first batch)
        (views(z1[0], z2[0]), {}),  # 1-D
    ]
    if pair:
        pool.append(((z1, z2[:3]), {}))  # shapes differ
    return pool


def _accuracy_pool() -> list[Batch]:
    g = _gen(2)
    emb = torch.randn(9, 3, generator=g)
    labels = torch.tensor([0, 1, 2] * 3)
    nan = emb.clone()
    nan[0, 0] = float("inf")
    return [
        ((emb, labels), {}),
        ((emb[:4], labels[:4]), {"role": "query"}),
        ((emb[4:], labels[4:]), {"role": "reference"}),
        ((nan, labels), {}),  # infinite embedding (validate_args)
        ((emb, labels.float()), {}),  # float labels
        ((emb, labels[:3]), {}),  # one label per row
        ((torch.randn(4, 5, generator=g), labels[:4]), {}),  # another dimension (fine as the first batch)
        ((emb, labels), {"role": "gallery"}),  # unknown role
    ]


def _dense_pool() -> list[Batch]:
    g = _gen(3)
    emb = torch.randn(6, 3, generator=g)
    ids = torch.arange(6)
    nan = emb.clone()
    nan[1, 2] = float("nan")
    return [
        ((emb, ids), {}),
        ((emb[:4], ids[:4] + 10), {"role": "corpus"}),
        ((emb, ids), {"role": "corpus"}),
        ((nan, ids), {}),  # NaN embedding (validate_args)
        ((emb, ids.float()), {}),  # float ids
        ((emb, ids[:3]), {}),  # one id per row
        ((torch.randn(4, 5, generator=g), ids[:4]), {}),  # another dimension (fine as the first batch)
        ((emb, ids), {"role": "documents"}),  # unknown role
    ]


CASES: dict[str, tuple[Callable[[], Metric], list[Batch]]] = {
    "RetrievalHitRate": (
        lambda: em.RetrievalHitRate(k=2, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalMRR": (lambda: em.RetrievalMRR(empty_target_action="error"), _retrieval_pool(True)),
    "ConfidenceInterval": (
        lambda: em.ConfidenceInterval(em.RetrievalMRR(empty_target_action="error", aggregation="none")),
        _retrieval_pool(True),
    ),
    "RetrievalPrecision": (
        lambda: em.RetrievalPrecision(k=2, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalRecall": (
        lambda: em.RetrievalRecall(k=(1, 2), empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalNormalizedDCG": (
        lambda: em.RetrievalNormalizedDCG(empty_target_action="error"),
        _retrieval_pool(False),
    ),
    "RetrievalMAP": (lambda: em.RetrievalMAP(empty_target_action="error"), _retrieval_pool(True)),
    "RetrievalFallOut": (
        lambda: em.RetrievalFallOut(k=2, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalRPrecision": (
        lambda: em.RetrievalRPrecision(empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalBpref": (lambda: em.RetrievalBpref(empty_target_action="error"), _retrieval_pool(True)),
    "RetrievalRPrecisionMultiple": (
        lambda: em.RetrievalRPrecisionMultiple(0.5, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalSetF": (
        lambda: em.RetrievalSetF(k=2, beta=0.5, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalSetMAP": (lambda: em.RetrievalSetMAP(k=2, empty_target_action="error"), _retrieval_pool(True)),
    "RetrievalSetRelativePrecision": (
        lambda: em.RetrievalSetRelativePrecision(empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalInterpolatedPrecision": (
        lambda: em.RetrievalInterpolatedPrecision(0.5, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalInfAP": (lambda: em.RetrievalInfAP(empty_target_action="error"), _retrieval_pool(True)),
    "RetrievalAUROC": (
        lambda: em.RetrievalAUROC(top_k=2, max_fpr=0.5, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalPrecisionRecallCurve": (
        lambda: em.RetrievalPrecisionRecallCurve(max_k=3, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "RetrievalRecallAtFixedPrecision": (
        lambda: em.RetrievalRecallAtFixedPrecision(0.5, max_k=3, empty_target_action="error"),
        _retrieval_pool(True),
    ),
    "ContrastiveAccuracy": (lambda: em.ContrastiveAccuracy(topk=(1, 2)), _views_pool(True)),
    "Uniformity": (em.Uniformity, _views_pool(False)),
    "Alignment": (em.Alignment, _views_pool(True)),
    "EmbeddingAccuracy": (lambda: em.EmbeddingAccuracy(include=("precision_at_1",)), _accuracy_pool()),
    "RankMe": (em.RankMe, _views_pool(False)),
    "AlphaReQ": (em.AlphaReQ, _views_pool(False)),
    "LinearCKA": (em.LinearCKA, _views_pool(True)),
    "LiDAR": (em.LiDAR, _accuracy_pool()[:7]),
    "KNNAccuracy": (lambda: em.KNNAccuracy(k=3), _accuracy_pool()),
    "DenseRetrieval": (lambda: em.DenseRetrieval(torch.tensor([[0, 10, 1], [2, 12, 2]]), k=2), _dense_pool()),
}


def test_every_module_metric_is_covered() -> None:
    exported = {
        n for n in em.__all__ if isinstance(getattr(em, n), type) and issubclass(getattr(em, n), Metric)
    }
    assert exported == set(CASES)


def _assert_same_state(actual: Metric, expected: Metric) -> None:
    for attr in expected._defaults:
        a, e = getattr(actual, attr), getattr(expected, attr)
        if isinstance(e, list):
            assert len(a) == len(e), attr
            for x, y in zip(a, e):
                assert torch.equal(x, y), attr
        else:
            assert torch.equal(a, e), attr
    assert actual._update_count == expected._update_count


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_sequence_keeps_exactly_the_good_batches(name: str, data: st.DataObject) -> None:
    factory, pool = CASES[name]
    steps = data.draw(
        st.lists(st.tuples(st.integers(0, len(pool) - 1), st.booleans()), min_size=1, max_size=7),
        label="steps",
    )
    metric, reference = factory(), factory()
    for index, via_forward in steps:
        args, kwargs = pool[index]
        call = metric if via_forward else metric.update
        try:
            call(*args, **kwargs)
        except (ValueError, TypeError):
            continue
        reference.update(*args, **kwargs)
    _assert_same_state(metric, reference)


def test_reported_case_a_nan_batch_in_forward_keeps_the_epoch() -> None:
    indexes = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    preds = torch.tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
    target = torch.tensor([True, False, False, False, True, False, True])
    metric = em.RetrievalHitRate(k=2)
    metric.update(preds, target, indexes)
    before = metric.compute()
    with pytest.raises(ValueError, match="NaN"):
        metric(torch.full_like(preds, float("nan")), target, indexes + 10)
    assert len(metric.preds) == 1
    assert torch.equal(metric.compute(), before)
    assert float(before) == 0.5


# --------------------------------------------------------------------------- settings


def _fill(metric: Metric, two_d: bool) -> Metric:
    g = _gen(5)
    preds, target = torch.rand(6, 8, generator=g), torch.rand(6, 8, generator=g) < 0.4
    if two_d:
        metric.update(preds, target)
    else:
        metric.update(preds.reshape(-1), target.reshape(-1), torch.arange(6).repeat_interleave(8))
    return metric


DIFFERENT_SETTINGS: list[tuple[Callable[[], Metric], Callable[[], Metric], str]] = [
    (lambda: em.RetrievalRecall(k=1), lambda: em.RetrievalRecall(k=3), "k"),
    (lambda: em.RetrievalPrecision(k=2), lambda: em.RetrievalPrecision(k=2, adaptive_k=True), "adaptive_k"),
    (lambda: em.RetrievalMAP(), lambda: em.RetrievalMAP(ties="optimistic"), "ties"),
    (lambda: em.RetrievalHitRate(), lambda: em.RetrievalHitRate(ignore_index=-1), "ignore_index"),
    (lambda: em.Alignment(alpha=2), lambda: em.Alignment(alpha=1), "alpha"),
]


def _filled(factory: Callable[[], Metric], two_d: bool) -> Metric:
    metric = factory()
    if isinstance(metric, em.Alignment):
        g = _gen(6)
        metric.update(torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g))
        return metric
    return _fill(metric, two_d)


@pytest.mark.parametrize(("ours", "theirs", "setting"), DIFFERENT_SETTINGS)
@pytest.mark.parametrize("two_d", [True, False])
def test_merge_state_refuses_other_settings(ours: Any, theirs: Any, setting: str, two_d: bool) -> None:
    metric, other = _filled(ours, two_d), _filled(theirs, two_d)
    before = copy.deepcopy(metric.metric_state)
    for incoming in (other, other.metric_state):
        with pytest.raises(ValueError, match=f"`{setting}`"):
            metric.merge_state(incoming)
    for attr, value in before.items():
        now = getattr(metric, attr)
        pairs = zip(now, value) if isinstance(value, list) else [(now, value)]
        assert len(now) == len(value) if isinstance(value, list) else True
        assert all(torch.equal(a, b) for a, b in pairs), attr


@pytest.mark.parametrize(("ours", "theirs", "setting"), DIFFERENT_SETTINGS)
@pytest.mark.parametrize("two_d", [True, False])
def test_load_state_dict_refuses_other_settings(ours: Any, theirs: Any, setting: str, two_d: bool) -> None:
    saved = _filled(theirs, two_d)
    saved.persistent(True)
    metric = ours()
    metric.persistent(True)
    with pytest.raises(ValueError, match=f"`{setting}`"):  # e.g. resuming after changing `k`
        metric.load_state_dict(copy.deepcopy(saved.state_dict()))
    assert metric._update_count == 0
    # a state dict holding only the fingerprint (saved without the readable settings) is refused too
    fingerprint_only = {k: v for k, v in saved.state_dict().items() if k != "_settings"}
    with pytest.raises(ValueError, match="different settings"):
        ours().load_state_dict(copy.deepcopy(fingerprint_only))


def test_equal_settings_still_merge_and_load() -> None:
    a, b = _fill(em.RetrievalRecall(k=3), True), _fill(em.RetrievalRecall(k=3), True)
    a.merge_state(b)
    b.persistent(True)
    fresh = em.RetrievalRecall(k=3)
    fresh.persistent(True)
    fresh.load_state_dict(b.state_dict())
    torch.testing.assert_close(fresh.compute(), b.compute())
    # non-persistent metrics add nothing to a module's state_dict (torchmetrics-compatible checkpoints)
    assert em.RetrievalRecall(k=3).state_dict() == {}


def test_raw_row_metrics_stay_compatible_across_settings() -> None:
    # ContrastiveAccuracy keeps raw rows: a state saved with topk=5 is a valid state for topk=1
    g = _gen(8)
    z = torch.randn(10, 4, generator=g)
    saved = em.ContrastiveAccuracy(topk=5)
    saved.update(z, z + 0.1)
    saved.persistent(True)
    metric = em.ContrastiveAccuracy(topk=1)
    metric.persistent(True)
    metric.load_state_dict(saved.state_dict())
    expected = em.ContrastiveAccuracy(topk=1)
    expected.update(z, z + 0.1)
    assert torch.equal(metric.compute(), expected.compute())


# --------------------------------------------------------------------------- inputs that require grad


def test_embeddings_that_require_grad_are_detached() -> None:
    g = _gen(9)
    emb = torch.randn(12, 4, generator=g).requires_grad_()
    labels = torch.arange(12) % 3
    metric = em.EmbeddingAccuracy(include=("precision_at_1", "r_precision"))
    value = metric(emb, labels)
    assert not value["precision_at_1"].requires_grad
    assert not any(t.requires_grad for t in metric.both_embeddings)
    calc = AccuracyCalculator(include=("precision_at_1",))
    out = calc.get_accuracy(emb, emb, labels, labels, True)
    assert out == calc.get_accuracy(emb.detach(), emb.detach(), labels, labels, True)
    for cls in (em.ContrastiveAccuracy, em.Uniformity):
        m = cls()
        args = (emb, emb * 2) if cls is em.ContrastiveAccuracy else (emb,)
        m(*args)
        assert all(not t.requires_grad for t in m.metric_state[next(iter(m._defaults))])


@pytest.mark.parametrize("two_d", [True, False])
def test_retrieval_scores_that_require_grad_are_detached(two_d: bool) -> None:
    g = _gen(10)
    preds = torch.rand(4, 6, generator=g).requires_grad_()
    target = torch.rand(4, 6, generator=g) < 0.5
    metric = em.RetrievalNormalizedDCG()
    if two_d:
        metric(preds, target)
        stored = metric.row_values
    else:
        metric(preds.reshape(-1), target.reshape(-1), torch.arange(4).repeat_interleave(6))
        stored = metric.preds
    assert stored
    assert all(not t.requires_grad and t.grad_fn is None for t in stored)


def test_alignment_stays_differentiable() -> None:
    z = torch.randn(5, 3, generator=_gen(11)).requires_grad_()
    value = em.Alignment()(z, z.detach() + 1.0)
    value.backward()
    assert z.grad is not None
