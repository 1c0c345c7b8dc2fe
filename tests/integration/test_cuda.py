"""On a CUDA device: ``update`` never synchronises with the host, and every metric equals its CPU value.

Skipped without a GPU (CI has none); run on a machine with one. ``torch.cuda.set_sync_debug_mode("error")``
makes any synchronising CUDA call (``.item()``, ``nonzero``, a data-dependent shape, a blocking copy) raise,
which is the real-device counterpart of the ``meta``-tensor test in ``test_no_host_sync.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor
from torchmetrics import Metric

import embedmetrics as em
from embedmetrics import functional as F

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
Inputs = list[tuple[tuple[Tensor, ...], dict[str, Any]]]


@contextmanager
def no_sync() -> Iterator[None]:
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _retrieval_batches(layout: str) -> Inputs:
    g = _gen(1)
    preds = torch.randn(12, 7, generator=g).round(decimals=1)  # ties on purpose
    target = torch.randint(0, 2, (12, 7), generator=g)
    target[3] = 0
    if layout == "2d":
        return [((preds[:5], target[:5]), {}), ((preds[5:], target[5:]), {})]
    indexes = torch.arange(12).repeat_interleave(7)
    order = torch.randperm(84, generator=g)
    p, t, i = preds.reshape(-1)[order], target.reshape(-1)[order], indexes[order]
    return [((p[:40], t[:40], i[:40]), {}), ((p[40:], t[40:], i[40:]), {})]


def _pairs(n: int = 300, d: int = 16) -> tuple[Tensor, Tensor]:
    g = _gen(2)
    x = torch.randn(n, d, generator=g)
    return x, x + 0.5 * torch.randn(n, d, generator=g)


def _labelled(n: int = 300, d: int = 16, classes: int = 7) -> tuple[Tensor, Tensor]:
    g = _gen(3)
    labels = torch.randint(0, classes, (n,), generator=g)
    return torch.randn(classes, d, generator=g)[labels] + torch.randn(n, d, generator=g), labels


def _embedding_batches(name: str) -> Inputs:
    x, y = _pairs()
    z, labels = _labelled()
    halves = (slice(0, 140), slice(140, None))
    if name in ("ContrastiveAccuracy", "Alignment", "LinearCKA"):
        return [((x[s], y[s]), {}) for s in halves]
    if name in ("Uniformity", "RankMe", "AlphaReQ"):
        return [((x[s],), {}) for s in halves]
    if name == "EmbeddingAccuracy":
        return [((z[s], labels[s]), {}) for s in halves]
    if name == "KNNAccuracy":
        return [((z[:200], labels[:200]), {"role": "bank"}), ((z[200:], labels[200:]), {"role": "query"})]
    if name == "LiDAR":  # source ids: 4 views each, one source split across the two batches
        sources = torch.arange(75).repeat_interleave(4)
        return [((z[s], sources[s]), {}) for s in (slice(0, 138), slice(138, None))]
    if name == "DenseRetrieval":
        return [((x[:50], torch.arange(50)), {"role": "query"}), ((y, torch.arange(300)), {"role": "corpus"})]
    raise KeyError(name)


def _qrels() -> Tensor:
    g = _gen(4)
    docs = torch.randint(0, 300, (50, 3), generator=g)
    docs[:, 0] = torch.arange(50)
    rel = torch.randint(0, 3, (50, 3), generator=g)
    return torch.stack([torch.arange(50).repeat_interleave(3), docs.reshape(-1), rel.reshape(-1)], dim=1)


_K = {"k": (1, 3)}
RETRIEVAL: dict[str, Callable[..., Metric]] = {
    "RetrievalHitRate": lambda **kw: em.RetrievalHitRate(**kw, **_K),
    "RetrievalMRR": lambda **kw: em.RetrievalMRR(**kw, **_K),
    "RetrievalPrecision": lambda **kw: em.RetrievalPrecision(**kw, adaptive_k=True, **_K),
    "RetrievalRecall": lambda **kw: em.RetrievalRecall(**kw, **_K),
    "RetrievalNormalizedDCG": lambda **kw: em.RetrievalNormalizedDCG(**kw, **_K),
    "RetrievalMAP": lambda **kw: em.RetrievalMAP(**kw, **_K),
    "RetrievalRPrecision": lambda **kw: em.RetrievalRPrecision(**kw),
    "RetrievalFallOut": lambda **kw: em.RetrievalFallOut(**kw, **_K),
    "RetrievalAUROC": lambda **kw: em.RetrievalAUROC(**kw, max_fpr=0.5),
    "RetrievalBpref": lambda **kw: em.RetrievalBpref(**kw),
    "RetrievalRPrecisionMultiple": lambda **kw: em.RetrievalRPrecisionMultiple(1.5, **kw),
    "RetrievalSetF": lambda **kw: em.RetrievalSetF(**kw, beta=0.5, **_K),
    "RetrievalSetMAP": lambda **kw: em.RetrievalSetMAP(**kw, **_K),
    "RetrievalSetRelativePrecision": lambda **kw: em.RetrievalSetRelativePrecision(**kw, **_K),
    "RetrievalInterpolatedPrecision": lambda **kw: em.RetrievalInterpolatedPrecision(0.5, **kw),
    "RetrievalInfAP": lambda **kw: em.RetrievalInfAP(**kw),
    "RetrievalPrecisionRecallCurve": lambda **kw: em.RetrievalPrecisionRecallCurve(**kw, max_k=4),
    "RetrievalRecallAtFixedPrecision": lambda **kw: em.RetrievalRecallAtFixedPrecision(0.5, max_k=4, **kw),
}
OTHERS: dict[str, Callable[..., Metric]] = {
    "ContrastiveAccuracy": lambda **kw: em.ContrastiveAccuracy(**kw, topk=(1, 5)),
    "Uniformity": lambda **kw: em.Uniformity(**kw),
    "Alignment": lambda **kw: em.Alignment(**kw),
    "EmbeddingAccuracy": lambda **kw: em.EmbeddingAccuracy(**kw),
    "RankMe": lambda **kw: em.RankMe(**kw),
    "AlphaReQ": lambda **kw: em.AlphaReQ(**kw),
    "LinearCKA": lambda **kw: em.LinearCKA(**kw),
    "KNNAccuracy": lambda **kw: em.KNNAccuracy(**kw, k=5, top=(1, 3)),
    "LiDAR": lambda **kw: em.LiDAR(**kw),
    "DenseRetrieval": lambda **kw: em.DenseRetrieval(_qrels(), k=(1, 10), depth=20, **kw),
}


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to(v, device) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _assert_same(cuda_value: Any, cpu_value: Any) -> None:
    if isinstance(cpu_value, dict):
        assert cuda_value.keys() == cpu_value.keys()
        for key in cpu_value:
            _assert_same(cuda_value[key], cpu_value[key])
    elif isinstance(cpu_value, (list, tuple)):
        assert len(cuda_value) == len(cpu_value)
        for a, b in zip(cuda_value, cpu_value):
            _assert_same(a, b)
    elif isinstance(cpu_value, Tensor):
        assert cuda_value.device.type == "cuda"
        assert cuda_value.dtype == cpu_value.dtype
        assert cuda_value.shape == cpu_value.shape
        got, want = cuda_value.cpu().double().numpy(), cpu_value.double().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert cuda_value == cpu_value


def _run(factory: Callable[..., Metric], batches: Inputs, device: torch.device, check_sync: bool) -> Any:
    metric = factory(validate_args=not check_sync).to(device)  # validation reads values: a sync
    for args, kwargs in batches:
        args = _to(args, device)
        torch.cuda.synchronize()
        if check_sync:
            with no_sync():
                metric.update(*args, **kwargs)
        else:
            metric.update(*args, **kwargs)
    return metric.compute()


@pytest.mark.parametrize("name", sorted(RETRIEVAL))
@pytest.mark.parametrize("layout", ["2d", "flat"])
def test_retrieval_update_is_sync_free_and_equals_cpu(name: str, layout: str) -> None:
    batches = _retrieval_batches(layout)
    cpu = _run(RETRIEVAL[name], batches, torch.device("cpu"), check_sync=False)
    _assert_same(_run(RETRIEVAL[name], batches, CUDA, check_sync=True), cpu)


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_embedding_update_is_sync_free_and_equals_cpu(name: str) -> None:
    batches = _embedding_batches(name)
    cpu = _run(OTHERS[name], batches, torch.device("cpu"), check_sync=False)
    _assert_same(_run(OTHERS[name], batches, CUDA, check_sync=True), cpu)


def test_every_module_metric_is_covered() -> None:
    exported = {
        n for n in em.__all__ if isinstance(getattr(em, n), type) and issubclass(getattr(em, n), Metric)
    }
    wrappers = {"ConfidenceInterval"}  # a wrapper of another metric: its own test below
    assert exported == set(RETRIEVAL) | set(OTHERS) | wrappers


@pytest.mark.parametrize("layout", ["2d", "flat"])
def test_confidence_interval_equals_cpu(layout: str) -> None:
    """The wrapped metric's per-query values gathered on the GPU, resampled with the CPU's random
    numbers: the same value and interval as on the CPU."""

    def run(device: torch.device) -> Any:
        metric = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=2000).to(device)
        for args, kwargs in _retrieval_batches(layout):
            metric.update(*_to(args, device), **kwargs)
        return metric.compute()

    _assert_same(run(CUDA), run(torch.device("cpu")))


def test_lidar_equals_cpu() -> None:
    z, _ = _labelled(n=400)
    sources = torch.arange(100).repeat_interleave(4)
    cpu = F.lidar(z, sources)
    _assert_same(F.lidar(z.to(CUDA), sources.to(CUDA)), cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_identical_rows_score_identically_on_cuda(dtype: torch.dtype) -> None:
    """Collapsed embeddings: every neighbour ties, on the GPU's kernels as on the CPU's."""
    z = torch.ones(257, 33, dtype=dtype)
    labels = torch.arange(257) % 5
    cpu = F.embedding_accuracy(z, labels)
    calc = em.AccuracyCalculator(include=("precision_at_1", "r_precision"), k="max_bin_count")
    want = calc.get_accuracy(z, z, labels, labels, True)
    got = calc.get_accuracy(z.to(CUDA), z.to(CUDA), labels.to(CUDA), labels.to(CUDA), True)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-12)
    _assert_same(F.embedding_accuracy(z.to(CUDA), labels.to(CUDA)), cpu)


def test_large_blocks_equal_small_blocks_on_cuda() -> None:
    """The planner's large CUDA blocks and a tiny forced block give the same contrastive accuracy."""
    x, y = _pairs(n=2000, d=32)
    big = F.contrastive_accuracy_score(x.to(CUDA), y.to(CUDA), topk=(1, 5))
    small = F.contrastive_accuracy_score(x.to(CUDA), y.to(CUDA), topk=(1, 5), block_bytes=64 * 1024)
    _assert_same(big, _to(small, torch.device("cpu")))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own, from inside inductor
def test_compiled_passes_equal_eager_on_cuda() -> None:
    """``set_compile(True)`` on the GPU (a Triton kernel): the same counts as the eager passes."""
    from embedmetrics import _config
    from embedmetrics._engine.core import fused

    x, y = _pairs(n=2000, d=32)
    kw: dict[str, Any] = {"topk": (1, 5), "block_bytes": 2000 * 4 * 300}
    eager = F.contrastive_accuracy_score(x.to(CUDA), y.to(CUDA), **kw)
    state, switches = dict(fused._STATE), dict(_config._SWITCHES)
    try:
        em.set_compile(True)
        compiled = F.contrastive_accuracy_score(x.to(CUDA), y.to(CUDA), **kw)
        assert not _config._SWITCHES["compile_failed"], "torch.compile failed on CUDA"
    finally:
        fused._STATE.clear()
        fused._STATE.update(state)
        _config._SWITCHES.update(switches)
    assert compiled.device.type == "cuda"
    assert torch.equal(compiled, eager)  # integer counts: bit for bit
