"""A setting a metric does not have is refused by name: every registered class, given any other
metric's setting (``k`` first among them), raises a ``TypeError`` naming the class and the setting,
never an internal name (``RetrievalMetric.__init__() got multiple values for argument 'k'``) nor
torchmetrics' "Unexpected keyword arguments"; the functional twins likewise name themselves."""

from __future__ import annotations

import functools
import inspect
import re

import pytest

from embedmetrics._engine.settings.options import ALIASES
from embedmetrics._metric.registry import REGISTRY, MetricSpec, every_setting

WITH_CLASS = [s for s in REGISTRY if s.name is not None]
WITH_FUNCTIONAL = [s for s in REGISTRY if s.functional is not None and s.inputs]


def _missing(spec: MetricSpec) -> list[str]:
    """The settings of other metrics (and their aliases) that ``spec``'s metric does not take, ``k``
    first."""
    own = {o.name for o in spec.options}
    names = [n for n in every_setting() if n not in own and ALIASES.get(n) not in own]
    return sorted(names, key=lambda n: (n != "k", n))


def _named(owner: str, name: str) -> str:
    """The message names the owner, then the argument (our refusal: `k`; Python's: 'k')."""
    return rf"{re.escape(owner)}\b.*[`']{name}[`']"


def test_every_class_lacks_some_setting_and_k_is_tested() -> None:
    lacking_k = [s.key for s in WITH_CLASS if "k" in _missing(s)]
    assert {"RetrievalBpref", "RetrievalRPrecision", "RetrievalPrecisionRecallCurve", "Uniformity"} <= set(
        lacking_k
    )
    assert all(_missing(s) for s in WITH_CLASS)


@pytest.mark.parametrize("spec", WITH_CLASS, ids=lambda s: s.key)
def test_a_setting_the_class_does_not_have_is_refused_naming_the_class(spec: MetricSpec) -> None:
    init = spec.make_case().init if spec.inputs else {}
    for name in _missing(spec):
        with pytest.raises(TypeError, match=_named(str(spec.name), name)) as raised:
            spec.load_class()(**{**init, name: 1})
        text = str(raised.value)
        assert "multiple values" not in text, (spec.key, name, text)
        assert "RetrievalMetric" not in text, (spec.key, name, text)
        if not spec.loss:  # our refusal (a loss is a plain nn.Module: Python's own message)
            assert f"has no argument `{name}`, got {name}=1" in text, (spec.key, name, text)


@pytest.mark.parametrize("name", ["k", "top_k"])
@pytest.mark.parametrize(
    "cls", ["RetrievalRPrecision", "RetrievalBpref", "RetrievalInfAP", "RetrievalRPrecisionMultiple"]
)
def test_a_metric_without_a_cut_off_says_why(cls: str, name: str) -> None:
    import embedmetrics

    with pytest.raises(
        TypeError, match=rf"{cls} has no argument `{name}`, got {name}=5: it takes no cut-off"
    ):
        getattr(embedmetrics, cls)(**{name: 5})


@pytest.mark.parametrize("spec", WITH_FUNCTIONAL, ids=lambda s: str(s.functional))
def test_a_setting_the_functional_does_not_have_is_refused_naming_it(
    spec: MetricSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = MetricSpec.load_functional
    takes = inspect.signature(plain(spec)).parameters  # a twin's own arguments beyond the table
    for name in (n for n in _missing(spec) if n not in takes):
        # the case's own call of the twin, with the other setting added
        with_setting = functools.partialmethod(lambda self, n: functools.partial(plain(self), **{n: 1}), name)
        monkeypatch.setattr(MetricSpec, "load_functional", with_setting)
        case = spec.make_case()
        with pytest.raises(TypeError, match=_named(str(spec.functional), name)) as raised:
            case.functional(case.streams)
        assert "multiple values" not in str(raised.value), (spec.key, name)


def test_the_refusal_lists_the_settings_the_class_has() -> None:
    from embedmetrics import RetrievalBpref, Uniformity

    with pytest.raises(
        TypeError, match=r"Its settings: ties, empty_target_action, ignore_index, aggregation"
    ):
        RetrievalBpref(k=1)
    with pytest.raises(TypeError, match=r"Uniformity has no argument `topk`, got topk=3\. Its settings: t,"):
        Uniformity(topk=3)


@pytest.mark.parametrize("spec", WITH_CLASS, ids=lambda s: s.key)
def test_an_unknown_keyword_is_refused_naming_the_class_and_its_settings(spec: MetricSpec) -> None:
    """Not only another metric's setting: any keyword that is neither a setting nor torchmetrics
    ``Metric``'s own (torchmetrics said only "Unexpected keyword arguments: `bogus`")."""
    if spec.loss:  # a plain nn.Module: Python's own message
        pytest.skip("a loss takes no torchmetrics keywords")
    init = spec.make_case().init if spec.inputs else {}
    with pytest.raises(TypeError, match=_named(str(spec.name), "bogus")) as raised:
        spec.load_class()(**{**init, "bogus": 1})
    assert isinstance(raised.value, ValueError)  # ``except ValueError`` (torchmetrics' error) still works
    text = str(raised.value)
    assert f"{spec.name} has no argument `bogus`, got bogus=1. Its settings: " in text, text
    assert all(o.name in text for o in spec.options), text
    assert "Unexpected keyword" not in text, text


@pytest.mark.parametrize("spec", WITH_CLASS, ids=lambda s: s.key)
def test_torchmetrics_metric_keywords_are_still_taken(spec: MetricSpec) -> None:
    if spec.loss:
        pytest.skip("a loss takes no torchmetrics keywords")
    init = spec.make_case().init if spec.inputs else {}
    metric = spec.load_class()(**{**init, "compute_on_cpu": True, "sync_on_compute": False})
    assert metric.compute_on_cpu is True
    assert metric.sync_on_compute is False


def test_the_keywords_let_through_are_exactly_those_torchmetrics_metric_takes() -> None:
    """``METRIC_KEYWORDS`` follows torchmetrics: each is taken by a bare ``Metric``, another is not."""
    from torchmetrics import Metric

    from embedmetrics._metric.registry import METRIC_KEYWORDS

    class Bare(Metric):
        def update(self) -> None: ...

        def compute(self) -> None: ...

    values = {"process_group": None, "dist_sync_fn": None, "distributed_available_fn": None}
    for name in METRIC_KEYWORDS:
        Bare(**{name: values.get(name, False)})
    with pytest.raises(ValueError, match="Unexpected keyword"):
        Bare(bogus=1)
