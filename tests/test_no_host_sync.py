"""No host synchronisation in ``update``: every module metric updates on ``meta`` tensors.

A ``meta`` tensor has a shape and a dtype but no data, so anything in ``update`` that reads values on
the host (``.item()``, ``bool(t)``, ``.tolist()``, a data-dependent shape) raises. A copy *from* the host
to the device (``torch.tensor(list, device=...)``, ``cpu_tensor.to(device)``) synchronises a CUDA
device too, yet works on ``meta``: :class:`NoHostCopies` makes those fail as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torchmetrics import Metric

import embedmetrics as em

META = torch.device("meta")


class NoHostCopies(TorchFunctionMode):
    """Fail on any tensor built from host data on, or copied from the CPU to, the ``meta`` device."""

    _FACTORIES = (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self._FACTORIES and _is_meta(kwargs.get("device")):
            raise AssertionError(f"host-to-device copy in update: {func.__name__}(..., device=meta)")
        if func in (Tensor.to, Tensor.copy_, Tensor.cuda) and args:
            source = args[1] if func is Tensor.copy_ else args[0]
            target = args[0] if func is Tensor.copy_ else _target_device(args[1:], kwargs)
            src_cpu = isinstance(source, Tensor) and source.device.type == "cpu"
            dst_meta = target is not None and (
                target.device.type == "meta" if isinstance(target, Tensor) else _is_meta(target)
            )
            if src_cpu and dst_meta:
                raise AssertionError(f"host-to-device copy in update: {func.__name__} of a CPU tensor")
        return func(*args, **kwargs)


def _is_meta(device: Any) -> bool:
    return device is not None and not isinstance(device, torch.dtype) and torch.device(device).type == "meta"


def _target_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if "device" in kwargs:
        return kwargs["device"]
    for a in args:
        if isinstance(a, (str, torch.device)):
            return a
        if isinstance(a, Tensor):
            return a
    return None


def test_the_guard_catches_host_copies() -> None:
    with NoHostCopies(), pytest.raises(AssertionError, match="host-to-device"):
        torch.tensor([1.0, 2.0], device="meta")
    with NoHostCopies(), pytest.raises(AssertionError, match="host-to-device"):
        torch.ones(3).to("meta")
    with NoHostCopies():
        torch.full((2,), 1.0, device="meta")  # a fill on the device is fine
        torch.empty(2, device="meta").to(torch.float64)


def _meta(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.empty(shape, dtype=dtype, device=META)


_K = {"k": (1, 3)}
_RETRIEVAL: dict[str, Callable[[], Metric]] = {
    "RetrievalHitRate": lambda: em.RetrievalHitRate(validate_args=False, **_K),
    "RetrievalMRR": lambda: em.RetrievalMRR(validate_args=False, **_K),
    "RetrievalPrecision": lambda: em.RetrievalPrecision(validate_args=False, adaptive_k=True, **_K),
    "RetrievalRecall": lambda: em.RetrievalRecall(validate_args=False, **_K),
    "RetrievalNormalizedDCG": lambda: em.RetrievalNormalizedDCG(validate_args=False, **_K),
    "RetrievalMAP": lambda: em.RetrievalMAP(validate_args=False, ignore_index=-1, **_K),
    "RetrievalRPrecision": lambda: em.RetrievalRPrecision(validate_args=False),
    "RetrievalFallOut": lambda: em.RetrievalFallOut(validate_args=False, **_K),
    "RetrievalAUROC": lambda: em.RetrievalAUROC(validate_args=False, max_fpr=0.5, **_K),
    "RetrievalPrecisionRecallCurve": lambda: em.RetrievalPrecisionRecallCurve(max_k=3, validate_args=False),
    "RetrievalRecallAtFixedPrecision": lambda: em.RetrievalRecallAtFixedPrecision(
        0.5, max_k=3, validate_args=False
    ),
}
_OTHERS: dict[str, tuple[Callable[[], Metric], Callable[[], tuple[Tensor, ...]]]] = {
    "ContrastiveAccuracy": (
        lambda: em.ContrastiveAccuracy(validate_args=False),
        lambda: (_meta((6, 4)),) * 2,
    ),
    "Uniformity": (lambda: em.Uniformity(validate_args=False), lambda: (_meta((6, 4)),)),
    "Alignment": (lambda: em.Alignment(validate_args=False), lambda: (_meta((6, 4)),) * 2),
    "EmbeddingAccuracy": (
        lambda: em.EmbeddingAccuracy(validate_args=False),
        lambda: (_meta((6, 4)), _meta((6,), torch.int64)),
    ),
    "RankMe": (lambda: em.RankMe(validate_args=False), lambda: (_meta((6, 4)),)),
    "AlphaReQ": (lambda: em.AlphaReQ(validate_args=False), lambda: (_meta((6, 4)),)),
    "LinearCKA": (lambda: em.LinearCKA(validate_args=False), lambda: (_meta((6, 4)), _meta((6, 3)))),
    "DenseRetrieval": (
        lambda: em.DenseRetrieval(validate_args=False),
        lambda: (_meta((6, 4)), _meta((6,), torch.int64)),
    ),
    "KNNAccuracy": (
        lambda: em.KNNAccuracy(validate_args=False),
        lambda: (_meta((6, 4)), _meta((6,), torch.int64)),
    ),
    # LiDAR groups each batch by source id into fixed slots (one per row): no data-dependent shape
    "LiDAR": (
        lambda: em.LiDAR(validate_args=False),
        lambda: (_meta((6, 4)), _meta((6,), torch.int64)),
    ),
}


def test_every_module_metric_is_covered() -> None:
    exported = {
        n for n in em.__all__ if isinstance(getattr(em, n), type) and issubclass(getattr(em, n), Metric)
    }
    assert exported == set(_RETRIEVAL) | set(_OTHERS)


@pytest.mark.parametrize("name", sorted(_RETRIEVAL))
@pytest.mark.parametrize("layout", ["2d", "flat"])
@pytest.mark.parametrize("target_dtype", [torch.bool, torch.int64])
def test_retrieval_update_never_reads_the_data(name: str, layout: str, target_dtype: torch.dtype) -> None:
    metric = _RETRIEVAL[name]().to(META)
    preds, target = _meta((8, 5)), _meta((8, 5), target_dtype)
    with NoHostCopies():
        if layout == "2d":
            metric.update(preds, target)
            metric.update(preds[0], target[0])  # 1-D: one query
        else:
            metric.update(preds.reshape(-1), target.reshape(-1), _meta((40,), torch.int64))
    stored = metric.row_values if layout == "2d" else metric.preds
    assert len(stored) == (2 if layout == "2d" else 1)
    assert all(t.device == META for t in stored)


@pytest.mark.parametrize("name", sorted(_OTHERS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_embedding_update_never_reads_the_data(name: str, dtype: torch.dtype) -> None:
    factory, batch = _OTHERS[name]
    metric = factory().to(META)
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in batch()]
    with NoHostCopies():
        metric.update(*inputs)
        metric.update(*inputs)
    assert metric._update_count == 2
