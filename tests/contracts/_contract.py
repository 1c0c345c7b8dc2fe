"""What the contract suite needs beyond the registry: build a metric from a case, cut the streams into
batches, spoil a batch, snapshot a state, compare results. Nothing here names a metric."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from embedmetrics._metric.cases import Case, Stream
from embedmetrics._metric.registry import REGISTRY, ROUTES, MetricSpec

#: The device of the suite's inputs and metrics: ``EMBEDMETRICS_TEST_DEVICE`` (``cpu`` when unset; ``make
#: gpu-check`` runs the suite with ``cuda``). Off the CPU, every ``make_case`` gives its case on the device.
DEVICE = torch.device(os.environ.get("EMBEDMETRICS_TEST_DEVICE", "cpu"))


def on_device(value: Any) -> Any:
    """``value`` with every tensor (and metric) in it moved to ``DEVICE``: dicts, tuples, lists walked."""
    if isinstance(value, dict):
        return {k: on_device(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(on_device(v) for v in value)
    return value.to(DEVICE) if isinstance(value, (Tensor, torch.nn.Module)) else value


def _case_on_device(case: Case) -> Case:
    streams = [
        dataclasses.replace(s, args=on_device(s.args), kwargs=on_device(s.kwargs)) for s in case.streams
    ]
    setup = None if case.setup is None else dataclasses.replace(case.setup, args=on_device(case.setup.args))
    return dataclasses.replace(case, init=on_device(case.init), streams=streams, setup=setup)


_PLAIN_MAKE_CASE = MetricSpec.make_case


def _make_case_on_device(spec: MetricSpec, **kwargs: Any) -> Any:
    return _case_on_device(_PLAIN_MAKE_CASE(spec, **kwargs))


if DEVICE.type != "cpu":  # every test that asks the registry for a case gets it on the device
    MetricSpec.make_case = _make_case_on_device  # type: ignore[method-assign]

#: Every module metric that accumulates a state (a ``torchmetrics.Metric``), and every other route of one
#: (``ROUTES``: the streamed corpus and bank), each a case of its own.
STATEFUL = [s for s in REGISTRY if s.name is not None and not s.loss] + list(ROUTES)
IDS = [s.key for s in STATEFUL]

Call = tuple[tuple[Any, ...], dict[str, Any]]


def build(spec: MetricSpec, case: Case, **overrides: Any) -> Any:
    # a copy of the arguments: a wrapped metric (``ConfidenceInterval``) is never shared between builds
    init = copy.deepcopy({**case.init, **overrides})
    inner = init.get("metric")
    if (
        inner is not None
        and "validate_args" in overrides
        and "validate_args" not in {o.name for o in spec.options}
    ):
        inner.validate_args = init.pop("validate_args")  # a wrapper: the setting is its metric's
    metric = spec.load_class()(**init)
    metric = metric if DEVICE.type == "cpu" else metric.to(DEVICE)
    if case.setup is not None:  # a streamed route: the queries fixed before any batch
        metric.set_queries(*(a.to(metric.device) for a in case.setup.args))
    return metric


def call(stream: Stream) -> Call:
    return stream.args, dict(stream.kwargs)


def cut(stream: Stream, bounds: list[int]) -> list[Stream]:
    """The stream's rows ``[b_i, b_{i+1})`` for consecutive bounds (empty pieces included)."""
    edges = [0, *sorted(min(max(b, 0), stream.rows) for b in bounds), stream.rows]
    return [stream.take(torch.arange(a, b)) for a, b in zip(edges[:-1], edges[1:])]


def split_calls(case: Case, seed: int, pieces: int = 3) -> list[Call]:
    """Every stream cut at ``pieces - 1`` seeded places; the pieces of the streams interleaved."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for s in case.streams:
        bounds = torch.randint(0, s.rows + 1, (pieces - 1,), generator=g).tolist()
        parts.append([p for p in cut(s, bounds) if p.rows > 0])
    calls: list[Call] = []
    for i in range(max(len(p) for p in parts)):
        calls += [call(p[i]) for p in parts if i < len(p)]
    return calls


def whole_calls(case: Case) -> list[Call]:
    return [call(s) for s in case.streams]


def permuted(case: Case, seed: int) -> list[Stream]:
    g = torch.Generator().manual_seed(seed)
    return [s.take(torch.randperm(s.rows, generator=g)) for s in case.streams]


def feed(metric: Any, calls: list[Call], *, forward: bool = False) -> None:
    for args, kwargs in calls:
        (metric if forward else metric.update)(*args, **kwargs)


# --------------------------------------------------------------------------- spoiled batches


def _with(stream: Stream, index: int, value: Tensor) -> Call:
    args = list(stream.args)
    args[index] = value
    return tuple(args), dict(stream.kwargs)


def _first_float(stream: Stream) -> int:
    return next(i for i, a in enumerate(stream.args) if a.is_floating_point())


def widened_setup(case: Case) -> Case:
    """``case`` with one more feature in its fixed queries too (a streamed route's ``set_queries``)."""
    if case.setup is None:
        return case
    return dataclasses.replace(case, setup=dataclasses.replace(case.setup, args=widened(case.setup)[0]))


def widened(stream: Stream) -> Call:
    """The stream with one more feature in every embedding argument (2-D floating point)."""
    args = tuple(
        torch.cat([a, a[:, :1]], dim=1) if a.is_floating_point() and a.ndim == 2 else a for a in stream.args
    )
    return args, dict(stream.kwargs)


def spoiled(case: Case, kind: str) -> Optional[Call]:
    """A bad batch of ``kind`` made from the first stream's first rows, or ``None`` where the kind does
    not apply to the metric (no feature width, no ids that must be unique)."""
    s = case.streams[0].take(torch.arange(min(4, case.streams[0].rows)))
    i = _first_float(s)
    x = s.args[i]
    if kind == "nan":
        bad = x.clone()
        bad.reshape(-1)[1] = math.nan
        return _with(s, i, bad)
    if kind == "inf":  # a valid score (never retrieved) where the rows are scores, not embeddings
        if s.embeddings is None:
            return None
        bad = x.clone()
        bad.reshape(-1)[0] = -math.inf
        return _with(s, i, bad)
    if kind == "length":
        if len(s.args) < 2:
            return None
        j = next(j for j in range(len(s.args)) if j != i)
        return _with(s, j, s.args[j][:-1])
    if kind == "width":
        return None if s.embeddings is None else widened(s)
    if kind == "integer":
        return _with(s, i, x.round().to(torch.int64))
    if kind == "complex":
        return _with(s, i, x.to(torch.complex64))
    if kind == "other_float_dtype":
        if s.embeddings is None:
            return None
        e = s.args[s.embeddings]
        return _with(s, s.embeddings, e.to(torch.float64 if e.dtype != torch.float64 else torch.float32))
    if kind == "repeated_id":
        if s.unique is None:
            return None
        ids = s.args[s.unique].clone()
        ids[-1] = ids[0]
        return _with(s, s.unique, ids)
    if kind == "known_id":
        if s.unique is None:
            return None
        return call(s)  # the same ids again, after the first update gave them
    raise AssertionError(kind)


BAD_KINDS = (
    "nan", "inf", "length", "width", "integer", "complex", "other_float_dtype", "repeated_id", "known_id"
)  # fmt: skip


# --------------------------------------------------------------------------- states and results


def snapshot(metric: Any) -> dict[str, Any]:
    """Every state of ``metric`` as bytes (bitwise comparison), with the update counter."""
    out: dict[str, Any] = {"_update_count": metric._update_count}
    for child_name, child in metric.named_children():  # a wrapper's metric
        if hasattr(child, "_defaults"):
            out.update({f"{child_name}.{k}": v for k, v in snapshot(child).items()})
    for name in metric._defaults:
        value = getattr(metric, name)
        items = value if isinstance(value, list) else [value]
        out[name] = [
            (t.dtype, tuple(t.shape), t.detach().cpu().contiguous().numpy().tobytes()) for t in items
        ]
    return out


def leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The tensors (and numbers) of a result: a tensor, a tuple of them, a dict of them."""
    if isinstance(value, dict):
        for key in sorted(value):
            yield from leaves(value[key], f"{prefix}{key}.")
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from leaves(v, f"{prefix}{i}.")
    else:
        yield prefix, value


def as_array(value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.detach().cpu().to(torch.float64 if value.is_floating_point() else value.dtype).numpy()
    return np.asarray(value, dtype=np.float64)


def assert_same(got: Any, want: Any, *, exact: bool, what: str = "") -> None:
    """Results equal leaf by leaf: bit for bit (NaN where NaN) with ``exact``, else to 1e-10 relative."""
    a, b = dict(leaves(got)), dict(leaves(want))
    assert a.keys() == b.keys(), (what, sorted(a), sorted(b))
    for key in a:
        x, y = as_array(a[key]), as_array(b[key])
        assert x.shape == y.shape, (what, key, x.shape, y.shape)
        if exact:
            np.testing.assert_array_equal(x, y, err_msg=f"{what} {key}")
        else:  # float sums in another order: a few units in the last place of the value's dtype
            single = any(isinstance(v, Tensor) and v.dtype == torch.float32 for v in (a[key], b[key]))
            tol = 1e-6 if single else 1e-10
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol * 1e-2, err_msg=f"{what} {key}")


def float_leaves(value: Any) -> list[Tensor]:
    """The floating-point tensors of a result (the values, not ids or run document ids)."""
    return [v for _, v in leaves(value) if isinstance(v, Tensor) and v.is_floating_point()]


def docs_hook() -> Any:
    """The MkDocs hook that writes the registry's tables (``docs/hooks/registry_tables.py``), loaded."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "registry_tables.py"
    spec = importlib.util.spec_from_file_location("registry_tables", path)
    assert spec is not None
    assert spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook
