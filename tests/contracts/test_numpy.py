"""One array convention: every metric takes NumPy arrays wherever it takes tensors, module and functional
alike, with the same values; a functional given NumPy answers in NumPy (float64)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from contracts._contract import STATEFUL, build, feed, leaves, whole_calls
from embedmetrics._metric.cases import Stream
from embedmetrics._metric.registry import REGISTRY, MetricSpec

#: The functional twins (a route's functional is its metric's: tested once; the module of every route
#: takes NumPy batches below).
_METRICS = [s for s in REGISTRY if s.inputs and not s.loss]


def _numpy(streams: list[Stream]) -> list[Stream]:
    return [Stream(tuple(a.numpy() for a in s.args), s.kwargs, s.embeddings, s.unique) for s in streams]


def _values(result: Any) -> dict[str, np.ndarray]:
    return {
        k: np.asarray(v.detach().double() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
        for k, v in leaves(result)
    }


@pytest.mark.parametrize("spec", _METRICS, ids=lambda s: s.key)
def test_the_functional_takes_numpy_and_answers_numpy(spec: MetricSpec) -> None:
    case = spec.make_case(dtype=torch.float64)
    want = case.functional(case.streams)
    got = case.functional(_numpy(case.streams))
    for key, value in leaves(got):
        assert not isinstance(value, torch.Tensor), (spec.key, key)
        assert isinstance(value, (np.ndarray, np.generic, float, int)), (spec.key, key, type(value))
    a, b = _values(got), _values(want)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{spec.key} {key}")


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
def test_the_module_takes_numpy_batches(spec: MetricSpec) -> None:
    case = spec.make_case(dtype=torch.float64)
    with_tensors, with_arrays = build(spec, case), build(spec, case)
    feed(with_tensors, whole_calls(case))
    feed(with_arrays, [(s.args, s.kwargs) for s in _numpy(case.streams)])
    a, b = _values(with_arrays.compute()), _values(with_tensors.compute())
    for key in b:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{spec.key} {key}")
