"""``update`` and ``forward`` reject the same bad batches, and neither changes the state (bit for bit)."""

from __future__ import annotations

import pytest

from contracts._contract import BAD_KINDS, IDS, STATEFUL, build, call, snapshot, spoiled
from embedmetrics._metric.registry import MetricSpec

_CASES = [
    pytest.param(spec, kind, id=f"{spec.key}-{kind}")
    for spec in STATEFUL
    for kind in BAD_KINDS
    if spoiled(spec.make_case(), kind) is not None
]


@pytest.mark.parametrize(("spec", "kind"), _CASES)
def test_update_and_forward_refuse_and_keep_the_state(spec: MetricSpec, kind: str) -> None:
    case = spec.make_case()
    metric = build(spec, case)
    first = case.streams[0]
    args, kwargs = call(first)
    metric.update(*args, **kwargs)  # an earlier batch: the bad one must match it
    bad_args, bad_kwargs = spoiled(case, kind)  # type: ignore[misc]
    before = snapshot(metric)
    with pytest.raises((TypeError, ValueError)) as by_update:
        metric.update(*bad_args, **bad_kwargs)
    assert snapshot(metric) == before
    with pytest.raises(type(by_update.value)):
        metric(*bad_args, **bad_kwargs)
    assert snapshot(metric) == before


def test_every_metric_meets_every_applicable_kind() -> None:
    """Each metric is tried with the kinds that apply to it: at least NaN, inf and the dtypes."""
    covered = {(spec.key, kind) for spec, kind in (p.values for p in _CASES)}
    for key in IDS:
        for kind in ("nan", "integer", "complex"):
            assert (key, kind) in covered, (key, kind)
