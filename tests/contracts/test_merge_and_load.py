"""``merge_state`` and ``load_state_dict`` across settings, feature widths and dtypes.

A state of other settings is refused (``ValueError`` naming the setting, state unchanged) where the
setting changes what the state means (the registry's ``state_settings``); elsewhere the merged value is
the receiver's settings on the union of the rows. Another width or dtype is always refused. After
``load_state_dict`` the width and dtype are those of the loaded state (nothing cached goes stale).
"""

from __future__ import annotations

import pytest
import torch

from contracts._contract import STATEFUL, assert_same, build, cut, feed, snapshot, whole_calls, widened
from embedmetrics import IncompatibleStateError
from embedmetrics._metric.cases import Case, Stream
from embedmetrics._metric.registry import MetricSpec


def _halves(case: Case) -> tuple[list[tuple], list[tuple]]:
    first, second = [], []
    for s in case.streams:
        a, b = cut(s, [s.rows // 2])
        first.append((a.args, a.kwargs))
        second.append((b.args, b.kwargs))
    return first, second


def _widened(stream: Stream) -> Stream:
    return Stream(widened(stream)[0], stream.kwargs, stream.embeddings, stream.unique)


_WIDTH = [s for s in STATEFUL if s.make_case().streams[0].embeddings is not None]


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
def test_merge_from_other_settings(spec: MetricSpec) -> None:
    case = spec.make_case()
    if not case.other_settings:
        pytest.skip("no setting changes the result")  # LinearCKA has none
    first, second = _halves(case)
    ours, theirs = build(spec, case), build(spec, case, **case.other_settings)
    feed(ours, first)
    feed(theirs, second)
    (setting,) = case.other_settings
    if setting in spec.state_settings:
        before = snapshot(ours)
        with pytest.raises(ValueError, match=setting):
            ours.merge_state(theirs)
        assert snapshot(ours) == before
        return
    ours.merge_state(theirs)
    union = build(spec, case)
    feed(union, whole_calls(case))
    assert_same(ours.compute(), union.compute(), exact=case.exact, what=spec.key)


@pytest.mark.parametrize("spec", _WIDTH, ids=lambda s: s.key)
@pytest.mark.parametrize("change", ["width", "dtype"])
def test_merge_from_another_width_or_dtype_is_refused(spec: MetricSpec, change: str) -> None:
    case = spec.make_case()
    other = spec.make_case(dtype=torch.float64) if change == "dtype" else case
    ours, theirs = build(spec, case), build(spec, other)
    feed(ours, whole_calls(case))
    streams = other.streams if change == "dtype" else [_widened(s) for s in case.streams]
    feed(theirs, [(s.args, s.kwargs) for s in streams])
    before = snapshot(ours)
    with pytest.raises(IncompatibleStateError):
        ours.merge_state(theirs)
    assert snapshot(ours) == before
    with pytest.raises(IncompatibleStateError):
        ours.merge_state({name: getattr(theirs, name) for name in theirs._defaults})
    assert snapshot(ours) == before


@pytest.mark.parametrize("spec", _WIDTH, ids=lambda s: s.key)
def test_load_state_dict_of_another_width_leaves_nothing_stale(spec: MetricSpec) -> None:
    case = spec.make_case()
    wide = [_widened(s) for s in case.streams]
    source = build(spec, case)
    source.persistent(True)
    feed(source, [(s.args, s.kwargs) for s in wide])
    target = build(spec, case)
    target.persistent(True)
    feed(target, whole_calls(case))
    target.load_state_dict(source.state_dict())
    assert_same(target.compute(), source.compute(), exact=True, what=spec.key)
    narrow = case.streams[0].take(torch.arange(2))
    with pytest.raises(ValueError, match=r"width|features"):
        target.update(*narrow.args, **narrow.kwargs)  # the loaded width is the one checked


@pytest.mark.parametrize("spec", [s for s in STATEFUL if s.state_settings], ids=lambda s: s.key)
def test_load_state_dict_of_other_settings_is_refused(spec: MetricSpec) -> None:
    case = spec.make_case()
    (setting,) = case.other_settings
    if setting not in spec.state_settings:
        pytest.skip("the setting does not change the state's meaning")
    source = build(spec, case, **case.other_settings)
    source.persistent(True)
    feed(source, whole_calls(case))
    target = build(spec, case)
    target.persistent(True)
    before = snapshot(target)
    with pytest.raises(ValueError, match=setting):
        target.load_state_dict(source.state_dict())
    assert snapshot(target) == before
