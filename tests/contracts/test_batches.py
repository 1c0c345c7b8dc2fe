"""Any batch split, ``update`` or ``forward``, any row order, empty batches: the same value as the
functional twin on all the rows; float64 in gives float64 out; values never keep the autograd graph."""

from __future__ import annotations

import pytest
import torch

from contracts._contract import (
    STATEFUL,
    assert_same,
    build,
    call,
    feed,
    float_leaves,
    permuted,
    split_calls,
    whole_calls,
)
from embedmetrics._metric.cases import Stream
from embedmetrics._metric.registry import REGISTRY, ROUTES, MetricSpec

_BY_KEY = {s.key: s for s in (*REGISTRY, *ROUTES)}


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("path", ["update", "forward"])
def test_any_batch_split_equals_the_functional(spec: MetricSpec, seed: int, path: str) -> None:
    case = spec.make_case(seed=seed)
    metric = build(spec, case)
    feed(metric, split_calls(case, seed, pieces=2 + seed), forward=path == "forward")
    assert_same(metric.compute(), case.functional(case.streams), exact=case.exact, what=spec.key)


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
@pytest.mark.parametrize("seed", [3, 4])
def test_any_row_order_gives_the_same_value(spec: MetricSpec, seed: int) -> None:
    case = spec.make_case(seed=seed)
    shuffled = permuted(case, seed)
    want = case.functional(case.streams)
    assert_same(case.functional(shuffled), want, exact=case.order_exact, what=spec.key)
    metric = build(spec, case)
    feed(metric, [call(s) for s in shuffled])
    assert_same(metric.compute(), want, exact=case.order_exact, what=spec.key)


def _refusal(metric: object, args: tuple, kwargs: dict) -> str | None:
    """``None`` when ``update`` accepts the batch, else the text of its ``ValueError``."""
    try:
        metric.update(*args, **kwargs)  # type: ignore[attr-defined]
    except ValueError as err:
        return str(err)
    return None


def _empty(stream: Stream) -> tuple:
    return stream.take(torch.arange(0)).args, dict(stream.kwargs)


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
@pytest.mark.parametrize("where", ["first", "last"])
def test_an_empty_batch_changes_nothing(spec: MetricSpec, where: str) -> None:
    """An empty batch is a no-op, or a clear error that leaves the state as it was."""
    case = spec.make_case()
    metric = build(spec, case)
    calls = whole_calls(case)
    empties = [_empty(s) for s in case.streams]
    if where == "last":
        feed(metric, calls)
    for args, kwargs in empties:
        refused = _refusal(metric, args, kwargs)
        assert refused is None or "empty" in refused or "at least one row" in refused, refused
    if where == "first":
        feed(metric, calls)
    reference = build(spec, case)
    feed(reference, calls)
    assert_same(metric.compute(), reference.compute(), exact=True, what=spec.key)


@pytest.mark.parametrize("spec", [s for s in (*REGISTRY, *ROUTES) if s.inputs], ids=lambda s: s.key)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_value_has_the_dtype_of_the_embeddings(spec: MetricSpec, dtype: torch.dtype) -> None:
    case = spec.make_case(dtype=dtype)
    values = [case.functional(case.streams)]
    if spec.name is not None:
        metric = build(spec, case)
        feed(metric, whole_calls(case))
        values.append(metric.compute())
    for value in values:
        leaves = float_leaves(value)
        assert leaves, spec.key
        names = ("p_value", "p_value_corrected")
        if isinstance(value, dict):
            p_values = [value[name] for name in names if name in value]
        else:
            p_values = [getattr(value, name) for name in names if hasattr(value, name)]
        if p_values:  # p-values are float64 whatever the values: a far tail is no float32 number
            assert all(p.dtype == torch.float64 for p in p_values), spec.key
            leaves = [t for t in leaves if not any(t is p for p in p_values)]
        assert {t.dtype for t in leaves} == {dtype}, (spec.key, [t.dtype for t in leaves])


@pytest.mark.parametrize("spec", [s for s in (*REGISTRY, *ROUTES) if s.inputs], ids=lambda s: s.key)
def test_values_are_detached_unless_differentiable(spec: MetricSpec) -> None:
    case = spec.make_case(dtype=torch.float64)
    streams = [
        Stream(
            tuple(a.clone().requires_grad_() if a.is_floating_point() else a for a in s.args),
            s.kwargs,
            s.embeddings,
            s.unique,
        )
        for s in case.streams
    ]
    for t in float_leaves(case.functional(streams)):
        assert t.requires_grad == spec.differentiable, spec.key
    if spec.name is None:
        return
    metric = build(spec, case)
    feed(metric, [call(s) for s in streams])
    for t in float_leaves(build(spec, case)(*streams[0].args, **streams[0].kwargs)):  # forward
        assert t.requires_grad == spec.differentiable, spec.key
    for t in float_leaves(metric.compute()):  # the accumulated value may drop the graph
        assert spec.differentiable or not t.requires_grad, spec.key


def test_a_loss_keeps_the_graph() -> None:
    spec = _BY_KEY["ContrastiveLoss"]
    a = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64).requires_grad_()
    b, y = torch.zeros(4, 3, dtype=torch.float64), torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    for value in (spec.load_class()()(a, b, y), spec.load_functional()(a, b, y)):
        assert value.requires_grad
        assert value.dtype == torch.float64


def _blocked(spec: MetricSpec) -> bool:
    import inspect

    return "block_bytes" in inspect.signature(spec.load_class().__init__).parameters


@pytest.mark.parametrize("spec", [s for s in STATEFUL if _blocked(s)], ids=lambda s: s.key)
@pytest.mark.parametrize("block_bytes", [64, 1000, 2**16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_any_block_size_gives_the_same_bits(spec: MetricSpec, block_bytes: int, dtype: torch.dtype) -> None:
    case = spec.make_case(dtype=dtype, seed=7)
    values = []
    for size in (None, block_bytes):
        metric = build(spec, case, block_bytes=size)
        feed(metric, whole_calls(case))
        values.append(metric.compute())
    assert_same(values[1], values[0], exact=True, what=spec.key)
