"""``merge_state`` and ``load_state_dict`` across settings, feature widths and dtypes.

A state of other settings is refused (``ValueError`` naming the setting, state unchanged) where the
setting changes what the state means (the registry's ``state_settings``); elsewhere the merged value is
the receiver's settings on the union of the rows. Another width or dtype is always refused. After
``load_state_dict`` the width and dtype are those of the loaded state (nothing cached goes stale).
Where ``update`` refuses an id given before (a stream of ``unique`` ids), ``merge_state`` refuses a
state holding one of ours with other rows (a changed copy of itself, say) and ``load_state_dict`` a
state repeating one, with the state bit for bit unchanged; a row repeated exactly (the same id and the
same rows: a sampler's padding) is merged once; states of disjoint ids merge into the functional's value.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from contracts._contract import (
    STATEFUL,
    assert_same,
    build,
    cut,
    feed,
    snapshot,
    whole_calls,
    widened,
    widened_setup,
)
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
    other = spec.make_case(dtype=torch.float64) if change == "dtype" else widened_setup(case)
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
    source = build(spec, widened_setup(case))
    source.persistent(True)
    feed(source, [(s.args, s.kwargs) for s in wide])
    target = build(spec, case)
    target.persistent(True)
    feed(target, whole_calls(case))
    target.load_state_dict(source.state_dict())
    if case.setup is not None:  # a route: lists of other queries unfix ours until theirs are set
        with pytest.raises(ValueError, match="set_queries"):
            target.compute()
        target.set_queries(*widened_setup(case).setup.args)  # type: ignore[union-attr]
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


_UNIQUE = [s for s in STATEFUL if any(st.unique is not None for st in s.make_case().streams)]


def test_the_metrics_with_unique_ids_declare_their_states() -> None:
    """A metric whose ``update`` refuses known ids declares their states, so merges refuse them too."""
    assert _UNIQUE, "no registered metric keeps unique ids"
    for spec in STATEFUL:
        declared = getattr(spec.load_class(), "_unique_id_states", ())  # a wrapper: its metric's
        assert bool(declared) == (spec in _UNIQUE), spec.key
        assert set(declared) <= set(build(spec, spec.make_case())._defaults), spec.key


def _states(metric: Any) -> dict[str, list[torch.Tensor]]:
    """Every state tensor of ``metric``, cloned (a list state as its tensors)."""
    out = {}
    for name in metric._defaults:
        value = getattr(metric, name)
        out[name] = [t.clone() for t in (value if isinstance(value, list) else [value])]
    return out


def _assert_unchanged(metric: Any, states: dict[str, list[torch.Tensor]], snap: dict[str, Any]) -> None:
    assert snapshot(metric) == snap
    for name, tensors in _states(metric).items():
        assert len(tensors) == len(states[name]), name
        for got, want in zip(tensors, states[name]):
            assert got.dtype == want.dtype, name
            assert torch.equal(got, want), name


def _overlapping(case: Case, index: int, changed: bool = True) -> tuple[list[tuple], list[tuple], int]:
    """The first halves of the streams, and the second halves with the first row of stream ``index``'s
    first half added, its id kept and ``changed`` its embedding: the two states share exactly that row's
    id (returned)."""
    first, second = [], []
    shared = 0
    for i, s in enumerate(case.streams):
        a, b = cut(s, [s.rows // 2])
        first.append((a.args, a.kwargs))
        if i == index:
            b = s.take(torch.cat([torch.arange(s.rows // 2, s.rows), torch.tensor([0])]))
            shared = int(s.args[s.unique][0])  # type: ignore[index]
            if changed and s.embeddings is not None:
                b.args[s.embeddings][-1] += 1  # the same id, another row
        second.append((b.args, b.kwargs))
    return first, second, shared


def _refusals(spec: MetricSpec) -> list[tuple[str, Any, Any, str]]:
    """(what, receiver, incoming metric, the ids the message must name) of every refused merge: a
    state sharing one id of each stream of unique ids, with another row."""
    case = spec.make_case()
    out = []
    for index, stream in enumerate(case.streams):
        if stream.unique is None:
            continue
        first, second, shared = _overlapping(case, index)
        ours, theirs = build(spec, case), build(spec, case)
        feed(ours, first)
        feed(theirs, second)
        out.append((f"one id of stream {index}", ours, theirs, f"got {shared} "))
    return out


@pytest.mark.parametrize("spec", _UNIQUE, ids=lambda s: s.key)
@pytest.mark.parametrize("form", ["metric", "state dict"])
def test_merge_of_known_ids_is_refused_and_keeps_the_state(spec: MetricSpec, form: str) -> None:
    for what, ours, theirs, named in _refusals(spec):
        value = copy.deepcopy(ours).compute()  # on a copy: ``ours`` keeps no cached value
        states, snap = _states(ours), snapshot(ours)
        incoming = theirs if form == "metric" else {n: getattr(theirs, n) for n in theirs._defaults}
        with pytest.raises(ValueError, match=r"argument `incoming_state` .*must hold unique ids") as refused:
            ours.merge_state(incoming)
        assert named in str(refused.value), (what, str(refused.value))
        _assert_unchanged(ours, states, snap)
        assert_same(ours.compute(), value, exact=True, what=f"{spec.key} {what}")


@pytest.mark.parametrize("spec", _UNIQUE, ids=lambda s: s.key)
def test_merge_of_exactly_repeated_rows_counts_them_once(spec: MetricSpec) -> None:
    """A copy of itself, or a state sharing one row (id and rows) of each stream, merges into the value
    of the distinct rows (issue 49, item 9: a DistributedSampler's padding, merged)."""
    case = spec.make_case()
    whole = build(spec, case)
    feed(whole, whole_calls(case))
    value = copy.deepcopy(whole).compute()
    whole.merge_state(copy.deepcopy(whole))
    assert_same(whole.compute(), value, exact=True, what=f"{spec.key} copy")
    for index, stream in enumerate(case.streams):
        if stream.unique is None:
            continue
        first, second, _ = _overlapping(case, index, changed=False)
        ours, theirs = build(spec, case), build(spec, case)
        feed(ours, first)
        feed(theirs, second)
        ours.merge_state(theirs)
        assert_same(ours.compute(), case.functional(case.streams), exact=case.exact, what=spec.key)


def _holds(state: Any, ids: torch.Tensor) -> bool:
    return (
        isinstance(state, list)
        and len(state) == 1
        and state[0].dtype == ids.dtype
        and torch.equal(state[0], ids)
    )


@pytest.mark.parametrize("spec", _UNIQUE, ids=lambda s: s.key)
def test_load_state_dict_of_repeated_ids_is_refused_and_keeps_the_state(spec: MetricSpec) -> None:
    case = spec.make_case()
    source, target = build(spec, case), build(spec, case)
    for metric in (source, target):
        metric.persistent(True)
        feed(metric, whole_calls(case))
    value = copy.deepcopy(target).compute()
    states, snap = _states(target), snapshot(target)
    for stream in case.streams:
        if stream.unique is None:
            continue
        saved = source.state_dict()
        ids = stream.args[stream.unique]
        key = next(k for k, v in saved.items() if _holds(v, ids))  # the state of the stream's ids
        saved[key] = [torch.cat([ids[:-1], ids[:1]])]  # its first id twice (in the last id's place)
        with pytest.raises(ValueError, match=rf"argument `state_dict` must hold unique ids in `{key}`"):
            target.load_state_dict(saved)
        _assert_unchanged(target, states, snap)
        assert_same(target.compute(), value, exact=True, what=f"{spec.key} {key}")
    target.load_state_dict(source.state_dict())  # a state of unique ids loads
    assert_same(target.compute(), value, exact=True, what=spec.key)


@pytest.mark.parametrize("spec", _UNIQUE, ids=lambda s: s.key)
@pytest.mark.parametrize("form", ["metric", "state dict"])
@pytest.mark.parametrize("forward", [False, True], ids=["update", "forward"])
def test_merge_of_disjoint_ids_equals_the_functional(spec: MetricSpec, form: str, forward: bool) -> None:
    case = spec.make_case()
    first, second = _halves(case)
    ours, theirs = build(spec, case), build(spec, case)
    feed(ours, first, forward=forward)  # ``forward`` merges each batch into the state itself
    feed(theirs, second, forward=forward)
    ours.merge_state(theirs if form == "metric" else {n: getattr(theirs, n) for n in theirs._defaults})
    assert_same(ours.compute(), case.functional(case.streams), exact=case.exact, what=spec.key)


#: A streamed route stores no rows (its lists hold none to misalign): the stored routes only.
ALIGNED = [s for s in STATEFUL if getattr(s.load_class(), "_aligned_row_stores", ()) and not s.route]


def test_the_metrics_with_row_aligned_inputs_declare_their_groups() -> None:
    declared = {s.key for s in ALIGNED}
    expected = {"DenseRetrieval", "KNNAccuracy", "EmbeddingAccuracy", "ContrastiveAccuracy"}
    assert expected | {s.key for s in STATEFUL if s.family == "retrieval"} <= declared


def _unaligned(metric: Any) -> tuple[dict[str, Any], str]:
    """The metric's state with one row dropped from the first store of its first group holding rows."""
    state = {
        name: list(value) if isinstance(value, list) else value for name, value in metric.metric_state.items()
    }
    for group in metric._aligned_row_stores:
        rows = torch.cat(list(state[group[0]])) if state[group[0]] else None
        if rows is not None and rows.shape[0] > 0:
            state[group[0]] = [rows[:-1]]
            return state, group[0]
    raise AssertionError("no group holds rows")


@pytest.mark.parametrize("spec", ALIGNED, ids=lambda s: s.key)
@pytest.mark.parametrize("form", ["merge_state", "load_state_dict"])
def test_a_state_of_unaligned_rows_is_refused_and_keeps_the_state(spec: MetricSpec, form: str) -> None:
    """Rows that belong together (embeddings and ids or labels, scores and relevance) stay together: a
    state whose stores of one group differ in rows is refused, the state bit for bit as it was."""
    case = spec.make_case()
    source = build(spec, case)
    feed(source, whole_calls(case))
    bad, store = _unaligned(source)
    metric = build(spec, case)
    feed(metric, whole_calls(case))
    before, value = snapshot(metric), metric.compute()
    action = (
        metric.merge_state if form == "merge_state" else lambda s: metric.load_state_dict(s, strict=False)
    )
    with pytest.raises(ValueError, match="as many rows") as err:
        action(bad)
    assert f"`{store}`" in str(err.value)
    assert snapshot(metric) == before
    assert_same(metric.compute(), value, exact=True, what=spec.key)
