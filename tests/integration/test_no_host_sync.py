"""No host synchronisation in ``update``: every module metric updates on ``meta`` tensors.

A ``meta`` tensor has a shape and a dtype but no data, so anything in ``update`` that reads values on
the host (``.item()``, ``bool(t)``, ``.tolist()``, a data-dependent shape) raises. A copy *from* the host
to the device (``torch.tensor(list, device=...)``, ``cpu_tensor.to(device)``) synchronises a CUDA
device too, yet works on ``meta``: :class:`NoHostCopies` makes those fail as well. Every metric of the
registry is run on ``meta`` tensors by ``tests/contracts/test_meta.py``; this file holds the guard and
the retrieval metrics' second (2-D) input layout.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from embedmetrics._metric.registry import REGISTRY, MetricSpec

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


_RETRIEVAL = [s for s in REGISTRY if s.family == "retrieval"]


@pytest.mark.parametrize("spec", _RETRIEVAL, ids=lambda s: s.key)
@pytest.mark.parametrize("layout", ["2d", "flat"])
@pytest.mark.parametrize("target_dtype", [torch.bool, torch.int64])
def test_retrieval_update_never_reads_the_data(
    spec: MetricSpec, layout: str, target_dtype: torch.dtype
) -> None:
    """Both input layouts of the retrieval metrics (every metric's flat rows: ``tests/contracts``)."""
    metric = spec.load_class()(**spec.make_case().init, validate_args=False).to(META)
    preds, target = _meta((8, 5)), _meta((8, 5), target_dtype)
    with NoHostCopies():
        if layout == "2d":
            metric.update(preds, target)
            metric.update(preds[0], target[0])  # 1-D: one query
        else:
            metric.update(preds.reshape(-1), target.reshape(-1), _meta((40,), torch.int64))
    stored = metric.row_values if layout == "2d" else metric.preds
    assert sum(t.shape[0] for t in stored) == (9 if layout == "2d" else 40)  # 8 queries + 1, or 40 rows
    assert all(t.device == META for t in stored)
