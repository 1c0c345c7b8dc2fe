"""EmbeddingAccuracy (stateful) against AccuracyCalculator, and the sharded scan."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _cases import KNN_METRICS
from embedmetrics import AccuracyCalculator, EmbeddingAccuracy
from embedmetrics._engine.core.knn import STAT_NAMES, knn_scan, relevant_counts

KNN = KNN_METRICS


def _data(n=48, dim=4, classes=5, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (n, dim), generator=g).float() if ties else torch.randn(n, dim, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


@settings(max_examples=30, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 48), max_size=5),
    seed=st.integers(0, 3),
    ties=st.booleans(),
)
def test_any_batch_split_equals_calculator_on_concatenation(cuts, seed, ties):
    x, y = _data(seed=seed, ties=ties)
    metric = EmbeddingAccuracy(include=KNN)
    bounds = [0, *sorted(cuts), 48]
    for a, b in zip(bounds[:-1], bounds[1:]):
        metric.update(x[a:b], y[a:b])
    got = metric.compute()
    ref = AccuracyCalculator(include=KNN).get_accuracy(x, x, y, y, True)
    assert list(got) == list(ref)
    for m in KNN:
        assert float(got[m]) == pytest.approx(ref[m], abs=1e-6)


def test_separate_reference_set_with_roles():
    xq, yq = _data(n=30, seed=1)
    xr, yr = _data(n=50, seed=2)
    metric = EmbeddingAccuracy(include=KNN, k=4)
    metric.update(xq[:10], yq[:10], role="query")
    metric.update(xr[:25], yr[:25], role="reference")
    metric.update(xq[10:], yq[10:], role="query")
    metric.update(xr[25:], yr[25:], role="reference")
    got = metric.compute()
    ref = AccuracyCalculator(include=KNN, k=4).get_accuracy(xq, xr, yq, yr, False)
    for m in KNN:
        assert float(got[m]) == pytest.approx(ref[m], abs=1e-6)


def test_both_role_mixed_with_extra_references():
    # "both" rows are queries and references (never their own neighbour); extra "reference" rows
    # only enlarge the gallery.
    xb, yb = _data(n=20, seed=3)
    xr, yr = _data(n=15, seed=4)
    metric = EmbeddingAccuracy(include=KNN)
    metric.update(xb, yb)
    metric.update(xr, yr, role="reference")
    got = metric.compute()
    ref = AccuracyCalculator(include=KNN).get_accuracy(xb, torch.cat([xb, xr]), yb, torch.cat([yb, yr]), True)
    for m in KNN:
        assert float(got[m]) == pytest.approx(ref[m], abs=1e-6)


def test_clustering_metrics_when_asked():
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 6, generator=g) * 20
    y = torch.arange(4).repeat_interleave(30)
    x = centers[y] + 0.3 * torch.randn(120, 6, generator=g)
    metric = EmbeddingAccuracy(include=("NMI", "AMI", "precision_at_1"))
    metric.update(x[:50], y[:50])
    metric.update(x[50:], y[50:])
    out = metric.compute()
    assert float(out["NMI"]) > 0.99
    assert float(out["AMI"]) > 0.99
    assert float(out["precision_at_1"]) == 1.0


def test_rejected_update_leaves_state_unchanged():
    x, y = _data(n=10)
    metric = EmbeddingAccuracy(include=KNN)
    metric.update(x, y)
    before = {
        k: [t.clone() for t in v] if isinstance(v, list) else v.clone()
        for k, v in metric.metric_state.items()
    }
    bad = [
        (x[:, :2], y),  # wrong feature count
        (x, y[:5]),  # length mismatch
        (x[:, 0], y),  # 1-D embeddings
        (x, y.float()),  # float labels
    ]
    for emb, lab in bad:
        with pytest.raises((ValueError, TypeError)):
            metric.update(emb, lab)
    with pytest.raises(ValueError, match="role"):
        metric.update(x, y, role="gallery")
    for k, v in metric.metric_state.items():
        if isinstance(v, list):  # row stores: the same batches, unchanged
            assert len(v) == len(before[k]), k
            assert all(torch.equal(a, b) for a, b in zip(v, before[k])), k
        else:
            assert torch.equal(v, before[k]), k


def test_error_messages_name_the_argument():
    metric = EmbeddingAccuracy()
    with pytest.raises(ValueError, match=r"`labels` must have one label per row of `embeddings` \(3 rows\)"):
        metric.update(torch.zeros(3, 2), torch.arange(2))
    with pytest.raises(ValueError, match=r"`embeddings` must be 2-D"):
        metric.update(torch.zeros(3), torch.arange(3))
    with pytest.raises(ValueError, match="unknown metrics"):
        EmbeddingAccuracy(include=("precision_at_5",))


def test_no_reference_gives_nan_and_empty_metric_gives_nan():
    metric = EmbeddingAccuracy(include=KNN)
    metric.update(torch.arange(8.0).view(4, 2), torch.arange(4), role="query")
    assert all(math.isnan(float(v)) for v in metric.compute().values())
    metric = EmbeddingAccuracy(include=KNN)
    with pytest.warns(UserWarning, match="compute"):  # torchmetrics: compute before update
        out = metric.compute()
    assert all(math.isnan(float(v)) for v in out.values())


def test_reset_and_state_dict_roundtrip():
    x, y = _data(n=16)
    metric = EmbeddingAccuracy(include=KNN)
    metric.update(x, y)
    value = metric.compute()
    metric.reset()
    metric.update(x[:, :3], y)  # a new feature size is fine after reset
    metric.reset()
    metric.update(x, y)
    assert {k: float(v) for k, v in metric.compute().items()} == {k: float(v) for k, v in value.items()}


def test_plot_dict_output():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    x, y = _data(n=16)
    metric = EmbeddingAccuracy(include=("precision_at_1", "r_precision"))
    metric.update(x, y)
    fig, _ax = metric.plot()
    assert fig is not None
    fig, _ax = metric.plot([metric.compute(), metric.compute()])
    assert fig is not None


# --------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("same_source", [True, False])
def test_sharded_scan_partials_sum_to_unsharded(world, same_source):
    x, y = _data(n=61, seed=5, ties=True)
    r, rl = (x, y) if same_source else _data(n=40, seed=6)
    self_index = torch.arange(61) if same_source else None
    counts, _, _ = relevant_counts(y, rl, self_index, None)
    kwargs = {
        "k": int(counts.max()),
        "counts": counts,
        "self_index": self_index,
        "return_neighbors": True,
        "block_bytes": 4 * 40 * 7,
    }
    full = knn_scan(x, r, y, rl, **kwargs)
    parts = [knn_scan(x, r, y, rl, shard=(rank, world), **kwargs) for rank in range(world)]
    for name in STAT_NAMES:
        combined = sum(p.stats[name] for p in parts)
        assert torch.equal(combined, full.stats[name]), name
    assert torch.equal(sum(p.indices for p in parts), full.indices)
    assert torch.equal(sum(p.distances for p in parts), full.distances)
    # Each query is scanned by exactly one rank.
    touched = torch.stack([(p.indices != 0).any(dim=1) | (p.stats["r_precision"] != 0) for p in parts])
    assert int(touched.sum(0).max()) <= 1


def test_calculator_compute_with_combined_shards_equals_unsharded(monkeypatch: pytest.MonkeyPatch):
    from embedmetrics._engine.neighbors import statistics as engine

    x, y = _data(n=45, seed=8, ties=True)
    calc = AccuracyCalculator(include=KNN, block_bytes=4 * 45 * 4)
    ref = calc.get_accuracy(x, x, y, y, True)
    world = 3
    partials = []
    real_scan = engine.knn_scan

    def sharded_scan(*args, **kwargs):  # every rank's share, summed: what the all-reduce does
        kwargs.pop("shard", None)
        parts = [real_scan(*args, shard=(rank, world), **kwargs) for rank in range(world)]
        partials.append(parts)
        first = parts[0]
        first.stats = {n: sum(p.stats[n] for p in parts) for n in first.stats}
        return first

    monkeypatch.setattr(engine, "knn_scan", sharded_scan)
    got = AccuracyCalculator(include=KNN, block_bytes=4 * 45 * 4).get_accuracy(x, x, y, y, True)
    assert len(partials) == 1
    for m in KNN:
        assert got[m] == pytest.approx(ref[m], abs=1e-12)


def test_numpy_inputs_match_torch_inputs():
    x, y = _data(n=30, seed=9)
    a = AccuracyCalculator(include=KNN).get_accuracy(x, x, y, y, True)
    b = AccuracyCalculator(include=KNN).get_accuracy(x.numpy(), x.numpy(), np.asarray(y), np.asarray(y), True)
    assert a == b
