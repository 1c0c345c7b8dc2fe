"""Module metrics of the embedding family: batches, forward, rejected updates, dtypes, plot, sync."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics import MetricCollection

from embedmetrics import Alignment, ContrastiveAccuracy, Uniformity
from embedmetrics.functional import alignment_score, contrastive_accuracy_score, uniformity_score
from oracles import embedding as ref


def _views(
    n: int, d: int, seed: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=gen)
    return z1.to(dtype), (z1 + 0.8 * torch.randn(n, d, generator=gen)).to(dtype)


def _splits(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    points = sorted({0, n, *[c % (n + 1) for c in cuts]})
    return [(a, b) for a, b in zip(points, points[1:]) if b > a]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 6),
    cuts=st.lists(st.integers(0, 40), max_size=5),
    seed=st.integers(0, 2**16),
    topk=st.sampled_from([1, 3, (1, 2, 50)]),
    ties=st.sampled_from(["average", "pessimistic", "optimistic"]),
)
def test_module_over_batches_equals_functional_on_concatenation(n, d, cuts, seed, topk, ties):
    z1, z2 = _views(n, d, seed)
    acc, uni, ali = ContrastiveAccuracy(topk=topk, ties=ties), Uniformity(t=3.0), Alignment(alpha=1.5)
    for a, b in _splits(n, cuts):
        acc.update(z1[a:b], z2[a:b])
        uni.update(z1[a:b])
        ali.update(z1[a:b], z2[a:b])
    assert torch.equal(acc.compute(), contrastive_accuracy_score(z1, z2, topk=topk, ties=ties))
    if n >= 2:
        assert torch.equal(uni.compute(), uniformity_score(z1, t=3.0))
    else:
        assert math.isnan(uni.compute())
    torch.testing.assert_close(ali.compute(), alignment_score(z1, z2, alpha=1.5), rtol=1e-6, atol=1e-7)


def test_forward_returns_batch_value_and_accumulates():
    z1, z2 = _views(30, 5, seed=1)
    acc, uni, ali = ContrastiveAccuracy(topk=2), Uniformity(), Alignment()
    for a, b in [(0, 12), (12, 30)]:
        assert torch.equal(acc(z1[a:b], z2[a:b]), contrastive_accuracy_score(z1[a:b], z2[a:b], topk=2))
        assert torch.equal(uni(z1[a:b]), uniformity_score(z1[a:b]))
        torch.testing.assert_close(ali(z1[a:b], z2[a:b]), alignment_score(z1[a:b], z2[a:b]))
    assert torch.equal(acc.compute(), contrastive_accuracy_score(z1, z2, topk=2))
    assert torch.equal(uni.compute(), uniformity_score(z1))
    torch.testing.assert_close(ali.compute(), alignment_score(z1, z2))
    acc.reset()
    # keyword arguments, in any order
    assert torch.equal(acc(z2=z2[:7], z1=z1[:7]), contrastive_accuracy_score(z1[:7], z2[:7], topk=2))
    # a single-row batch through forward: NaN batch value, the row is still accumulated
    assert math.isnan(uni(z1[:1]))
    assert uni.compute().isfinite()


def _snapshot(metric: torch.nn.Module) -> dict:
    out = {}
    for name in metric._defaults:
        value = getattr(metric, name)
        out[name] = [v.clone() for v in value] if isinstance(value, list) else value.clone()
    return out


def _assert_same_state(metric: torch.nn.Module, snap: dict) -> None:
    for name, before in snap.items():
        now = getattr(metric, name)
        if isinstance(before, list):
            assert len(now) == len(before)
            assert all(torch.equal(a, b) for a, b in zip(now, before))
        else:
            assert torch.equal(now, before)


@pytest.mark.parametrize("via_forward", [False, True])
@pytest.mark.parametrize("name", ["ContrastiveAccuracy", "Alignment", "Uniformity"])
def test_rejected_update_leaves_state_unchanged(via_forward, name):
    z1, z2 = _views(10, 4, seed=2)
    metric = {
        "ContrastiveAccuracy": ContrastiveAccuracy(topk=(1, 3)),
        "Alignment": Alignment(),
        "Uniformity": Uniformity(),
    }[name]
    pair = name != "Uniformity"
    bad = [
        (z1[0], z2[0]),  # 1-D
        (z1[:0], z2[:0]),  # no rows
        (z1.long(), z2.long()),  # not floating point
        (z1.tolist(), z2.tolist()),  # not a tensor
    ]
    if pair:
        bad.append((z1, z2[:5]))  # shape mismatch
    if name != "Alignment":  # Alignment keeps no rows, so any feature dimension is fine
        bad.append((z1[:, :3], z2[:, :3]))  # feature dimension differs from the first batch
    metric.update(z1, z2) if pair else metric.update(z1)
    expected = metric.compute()
    snap = _snapshot(metric)
    call = metric if via_forward else metric.update
    for a, b in bad:
        with pytest.raises((ValueError, TypeError)):
            call(a, b) if pair else call(a)
        _assert_same_state(metric, snap)
    assert torch.equal(metric.compute(), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes_are_stored_as_given_and_accumulated_wide(dtype):
    z1, z2 = _views(24, 6, seed=3, dtype=dtype)
    acc, uni, ali = ContrastiveAccuracy(topk=(1, 5)), Uniformity(), Alignment()
    for a, b in [(0, 10), (10, 24)]:
        acc.update(z1[a:b], z2[a:b])
        uni.update(z1[a:b])
        ali.update(z1[a:b], z2[a:b])
    assert all(s.dtype == dtype for s in acc.z1 + acc.z2 + uni.z)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    x1, x2 = z1.double().numpy(), z2.double().numpy()
    out = acc.compute()
    assert out.dtype == wide
    np.testing.assert_allclose(
        out.numpy(), [ref.contrastive_accuracy(x1, x2, True, k) for k in (1, 5)], atol=1e-6
    )
    u = uni.compute()
    assert u.dtype == wide
    assert float(u) == pytest.approx(ref.uniformity(x1), rel=1e-5)
    assert float(ali.compute()) == pytest.approx(ref.alignment(x1, x2), rel=1e-5)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_numpy_batches_and_reset():
    z1, z2 = _views(12, 3, seed=4)
    acc = ContrastiveAccuracy()
    acc.update(z1.numpy(), z2.numpy())
    assert torch.equal(acc.compute(), contrastive_accuracy_score(z1, z2))
    acc.reset()
    assert math.isnan(acc.compute())
    acc.update(z1[:, :2], z2[:, :2])  # another feature dimension is fine after a reset
    assert torch.equal(acc.compute(), contrastive_accuracy_score(z1[:, :2], z2[:, :2]))


def test_empty_metrics_compute_nan():
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(ContrastiveAccuracy().compute())
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert torch.isnan(ContrastiveAccuracy(topk=(1, 2)).compute()).all()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(Uniformity().compute())
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(Alignment().compute())


def test_invalid_options():
    with pytest.raises(ValueError, match="topk"):
        ContrastiveAccuracy(topk=0)
    with pytest.raises(ValueError, match="ties"):
        ContrastiveAccuracy(ties="first")
    with pytest.raises(ValueError, match="`t`"):
        Uniformity(t=-1.0)
    with pytest.raises(ValueError, match="alpha"):
        Alignment(alpha=0)
    with pytest.raises(ValueError, match="block_bytes"):
        Uniformity(block_bytes=0)


def test_attributes_collection_and_merge_state():
    assert ContrastiveAccuracy.higher_is_better
    assert not Uniformity.higher_is_better
    assert not Alignment.higher_is_better
    assert Alignment.is_differentiable
    assert all(m.full_state_update is False for m in (ContrastiveAccuracy, Uniformity, Alignment))
    z1, z2 = _views(20, 4, seed=5)
    coll = MetricCollection({"acc": ContrastiveAccuracy(), "ali": Alignment()})
    coll.update(z1, z2)
    out = coll.compute()
    assert torch.equal(out["acc"], contrastive_accuracy_score(z1, z2))
    a, b = Uniformity(), Uniformity()
    a.update(z1[:8])
    b.update(z1[8:])
    a.merge_state(b)
    assert torch.equal(a.compute(), uniformity_score(z1))


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_empty_rank_state_after_sync_shape():
    """What a sync leaves on every rank when one rank had no update: one ``(n, d)`` tensor (the idle
    rank contributes ``(0, d)`` rows of the right dtype, see ``SyncSafeMetric``)."""
    z1, z2 = _views(9, 3, seed=6)
    m = ContrastiveAccuracy()
    m.z1 = torch.cat([z1, z1.new_empty(0, 3)])
    m.z2 = torch.cat([z2, z2.new_empty(0, 3)])
    assert torch.equal(m.compute(), contrastive_accuracy_score(z1, z2))


def test_plot_scalar():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    z1, z2 = _views(10, 3, seed=7)
    for metric in (ContrastiveAccuracy(), Uniformity(), Alignment()):
        metric.update(z1, z2) if not isinstance(metric, Uniformity) else metric.update(z1)
        fig, ax = metric.plot()
        assert fig is not None
        assert ax is not None
    fig, ax = Uniformity().plot([torch.tensor(-1.0), torch.tensor(-2.0)])
    assert fig is not None
