"""The registry lists every public metric once, and everything that lists metrics reads it."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest
from torch import nn

import embedmetrics
import embedmetrics.functional
from embedmetrics._metric.base import BaseMetric
from embedmetrics._metric.registry import (
    FAMILIES,
    FUNCTIONAL_HELPERS,
    HELPERS,
    REGISTRY,
    ROUTES,
    class_names,
    functional_names,
)

from ._contract import docs_hook as _hook

DOCS = Path(__file__).resolve().parents[2] / "docs"
_MODULES = ("retrieval", "embedding", "neighbors", "representation", "dense", "losses", "comparison")


def test_names_are_unique_and_families_known() -> None:
    keys = [s.key for s in REGISTRY]
    assert len(keys) == len(set(keys))
    assert {s.family for s in REGISTRY} <= set(FAMILIES)
    for spec in REGISTRY:
        assert set(spec.state_settings) <= set(spec.settings), spec.key


def test_every_streamed_route_is_a_case_of_its_own() -> None:
    """A metric with ``set_queries`` (a streamed route) has a ``ROUTES`` entry, so the contract suite runs
    every contract on that route too; each route names a registered metric and a case factory."""
    streamed = {s.name for s in REGISTRY if s.name is not None and hasattr(s.load_class(), "set_queries")}
    assert streamed == {"DenseRetrieval", "KNNAccuracy"}
    assert {s.name for s in ROUTES if s.route == "streamed"} == streamed
    registered = {s.name: s for s in REGISTRY}
    for route in ROUTES:
        metric = registered[route.name]
        assert (route.module, route.functional, route.family) == (
            metric.module,
            metric.functional,
            metric.family,
        )
        assert route.options == metric.options
        assert route.make_case().setup is not None, route.key
    assert len({s.key for s in (*REGISTRY, *ROUTES)}) == len(REGISTRY) + len(ROUTES)


def test_every_public_metric_class_is_registered() -> None:
    found = set()
    for module in _MODULES:
        mod = importlib.import_module(f"embedmetrics.{module}")
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if (
                inspect.isclass(obj)
                and issubclass(obj, (BaseMetric, nn.Module))
                and name != "RetrievalMetric"
            ):
                found.add(name)
    assert found == set(class_names())


def test_package_tables_read_the_registry() -> None:
    assert set(embedmetrics.__all__) == {"__version__", *class_names(), *HELPERS}
    assert embedmetrics.functional.__all__ == [*functional_names(), *FUNCTIONAL_HELPERS]
    for name in embedmetrics.functional.__all__:
        assert callable(getattr(embedmetrics.functional, name))
    assert importlib.import_module("embedmetrics.retrieval").__all__[1:] == list(class_names("retrieval"))


@pytest.mark.parametrize("spec", [s for s in REGISTRY if s.name is not None], ids=lambda s: s.key)
def test_settings_are_constructor_arguments(spec) -> None:  # type: ignore[no-untyped-def]
    cls = spec.load_class()
    params = set(inspect.signature(cls.__init__).parameters)
    for setting in spec.settings:
        assert setting in params or setting == "k", (spec.key, setting)
    assert spec.load_functional() is getattr(embedmetrics.functional, str(spec.functional))


def test_the_api_reference_documents_every_metric() -> None:
    """Each family's API sections are generated from the registry, on exactly one API page."""
    hook = _hook()
    pages = [p.read_text(encoding="utf-8") for p in (DOCS / "api").glob("*.md")]
    for family in FAMILIES:
        marker = f"<!-- registry-api: {family} -->"
        assert sum(marker in page for page in pages) == 1, family
        sections = hook.registry_api(family)
        for spec in REGISTRY:
            if spec.family == family:
                if spec.name is not None:
                    assert f"::: embedmetrics.{spec.name}\n" in sections + "\n", spec.name
                assert f"::: embedmetrics.functional.{spec.functional}\n" in sections + "\n", spec.key


def test_the_index_table_is_generated_from_the_registry() -> None:
    hook = _hook()
    table = hook.registry_table()
    for entry in REGISTRY:
        if entry.name is not None:
            assert f"`{entry.name}`" in table, entry.name
        assert f"`{entry.functional}`" in table, entry.functional
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert hook.MARKER in index
    assert "`RetrievalHitRate`" not in index  # no hand-kept list beside the generated one
