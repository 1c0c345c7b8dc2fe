"""One ``Option`` per setting: the constructors, the functional twins, the merge guards, the docs tables
and the command line flags are all derived from each metric's option table, and agree with it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from embedmetrics._engine.dense.options import OPTIONS as DENSE_OPTIONS
from embedmetrics._engine.settings.arguments import ArgumentKindError
from embedmetrics._engine.settings.options import Option, read_options
from embedmetrics._metric.registry import REGISTRY, MetricSpec
from embedmetrics.cli import build_parser

from ._contract import STATEFUL, build
from ._contract import docs_hook as _hook

DOCS = Path(__file__).resolve().parents[2] / "docs"
WITH_CLASS = [s for s in REGISTRY if s.name is not None]


def _bad_value(option: Option) -> Any:
    """A value the option's check must refuse, or ``None`` when it accepts anything."""
    if option.choices:
        return "no-such-choice"
    if option.annotation == "bool":
        return "yes"
    if option.annotation in {"float", "int"}:
        return -1
    return None


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.key)
def test_every_table_is_well_formed(spec: MetricSpec) -> None:
    names = [o.name for o in spec.options]
    assert len(names) == len(set(names)), spec.key
    for option in spec.options:
        assert option.effect in {"state", "result", "none"}
        assert option.doc, (spec.key, option.name)
        assert option.annotation, (spec.key, option.name)
        if option.name != "qrels":  # a tensor default would be a shared mutable value
            assert option.read(option.default) == option.default, (spec.key, option.name)
    assert set(spec.state_settings) <= set(spec.settings)


@pytest.mark.parametrize("spec", WITH_CLASS, ids=lambda s: s.key)
def test_the_constructor_takes_every_option(spec: MetricSpec) -> None:
    params = inspect.signature(spec.load_class().__init__).parameters
    for option in spec.options:
        assert option.name in params, (spec.key, option.name)
        if option.name != "empty_target_action":  # fall-out's default differs, as in torchmetrics
            assert params[option.name].default == option.default, (spec.key, option.name)


@pytest.mark.parametrize("spec", WITH_CLASS, ids=lambda s: s.key)
def test_the_constructor_refuses_a_bad_value_naming_the_option(spec: MetricSpec) -> None:
    checked = [(o, _bad_value(o)) for o in spec.options if _bad_value(o) is not None]
    assert checked or spec.key in {"EmbeddingAccuracy"}, spec.key
    init = spec.make_case().init if spec.inputs else {}
    required = {k: v for k, v in init.items() if k == "metric"}  # a wrapper's metric
    for option, bad in checked:
        with pytest.raises((ValueError, TypeError), match=f"`{option.name}`"):
            spec.load_class()(**required, **{option.name: bad})


@pytest.mark.parametrize("spec", [s for s in STATEFUL if s.state_settings], ids=lambda s: s.key)
def test_the_state_settings_are_recorded_for_the_merge_guard(spec: MetricSpec) -> None:
    metric = build(spec, spec.make_case())
    recorded = set(metric._settings)
    if spec.route == "streamed":  # the running lists record a code of each of their settings
        running = type(metric)._running_settings
        assert metric.stream_settings.numel() == len(running), spec.key
        recorded |= set(running)
    for name in spec.state_settings:
        assert name in recorded, (spec.key, name, recorded)


def test_an_unknown_option_is_refused_by_name() -> None:
    table = REGISTRY[0].options
    with pytest.raises(ArgumentKindError, match="no argument `nope`"):
        read_options("metric", table, {"nope": 1})
    from embedmetrics.functional import retrieval_hit_rate

    with pytest.raises(TypeError, match="no argument `adaptive_k`"):
        retrieval_hit_rate(*_retrieval_inputs(), adaptive_k=True)  # type: ignore[call-arg]


def _retrieval_inputs() -> tuple[Any, Any]:
    import torch

    return torch.tensor([0.2, 0.9]), torch.tensor([True, False])


def test_functional_signatures_show_every_option() -> None:
    for spec in REGISTRY:
        if spec.family != "retrieval":
            continue
        params = inspect.signature(spec.load_functional()).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), spec.key
        for option in spec.options:
            assert option.name in params, (spec.key, option.name)


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.key)
def test_the_docs_settings_table_is_the_option_table(spec: MetricSpec) -> None:
    section = _hook().registry_api(spec.family)
    table = section.split(f"**`{spec.key}`**", 1)[1].split("**`", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [o.name for o in spec.options]
    for row, option in zip(rows, spec.options):
        assert f"`{option.default!r}`" in row
        assert _hook().EFFECTS[option.effect] in row


def test_the_command_line_flags_are_the_options_marked_for_it() -> None:
    flags = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["report"]._actions}  # type: ignore[union-attr]
    marked = [o for o in DENSE_OPTIONS["DenseRetrieval"] if o.cli]
    assert {o.name for o in marked} == {"depth", "similarity"}
    for option in marked:
        action = flags[option.name]
        assert action.option_strings == [option.flag]
        assert action.default == option.default
        assert tuple(action.choices or ()) == option.choices
    assert (
        tuple(flags["ties"].choices)[:3]
        == next(o for o in DENSE_OPTIONS["DenseRetrieval"] if o.name == "ties").choices
    )
