"""The one list of public metrics: class, functional twin, family, settings and a valid-input factory.

Everything that needs the names of the metrics reads them here: the lazy package table and ``__all__``
of ``embedmetrics``, ``__all__`` of ``embedmetrics.retrieval``, the settings every process must
agree on at a sync (``BaseMetric``), the docs' tables and the
"Coming from" pages' tests, and the contract suite (``tests/contracts/``), which runs every promise of
the README on every entry. Importing this module costs nothing (no torch): the classes, functions and
input factories are named by their dotted paths and loaded on use.

A metric added to the registry gets every contract test without writing one: add its
``MetricSpec`` below and, where no existing factory fits its ``update``, an input factory to
``embedmetrics._metric.cases``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

#: The families, in the order the docs list them.
FAMILIES = (
    "retrieval",
    "embedding",
    "metric-learning",
    "representation",
    "dense",
    "shape-similarity",
    "losses",
    "comparison",
)

#: Where each family declares its option tables (``OPTIONS``: registry name -> ``Option``s).
OPTION_TABLES = {
    "retrieval": "embedmetrics._engine.ranking.options",
    "embedding": "embedmetrics._engine.embedding.options",
    "metric-learning": "embedmetrics._engine.neighbors.options",
    "representation": "embedmetrics._engine.spectral.options",
    "dense": "embedmetrics._engine.dense.options",
    "shape-similarity": "embedmetrics._engine.embedding.options",
    "losses": "embedmetrics._engine.embedding.options",
    "comparison": "embedmetrics._engine.comparison.options",
}


@dataclass(frozen=True)
class MetricSpec:
    """One public metric.

    ``name``: the module class (``None`` for a functional-only metric); ``module``: where the class lives;
    ``functional``: its twin in ``embedmetrics.functional`` (``None`` if it has none); its settings
    are its option table (``options``, in the family's ``OPTION_TABLES`` module), from which come
    ``settings`` and ``state_settings``; ``inputs``: the valid-input factory in
    ``embedmetrics._metric.cases`` (for tests and examples); ``loss``: a loss (an ``nn.Module``
    without state); ``differentiable``: the values keep the autograd graph (losses and metrics used as
    loss terms); every other value is detached. ``route``: another route of the same metric (``ROUTES``:
    ``"streamed"``, whose case fixes the queries with ``set_queries`` first); ``""`` for the metric itself.
    """

    name: Optional[str]
    module: str
    functional: Optional[str]
    family: str
    inputs: str = ""
    loss: bool = False
    differentiable: bool = False
    route: str = ""

    @property
    def key(self) -> str:
        """The class name, or the functional's name for a functional-only metric; ``[route]`` after it
        for a route of ``ROUTES``."""
        base = self.name or str(self.functional)
        return f"{base}[{self.route}]" if self.route else base

    @property
    def options(self) -> tuple[Any, ...]:
        """The option table (``Option``s of ``embedmetrics._engine.settings.options``; imports it)."""
        return _option_table(self.family, self.name or str(self.functional))

    @property
    def settings(self) -> tuple[str, ...]:
        """The options that change the result: every process must agree on them."""
        return tuple(o.name for o in self.options if o.effect != "none")

    @property
    def state_settings(self) -> tuple[str, ...]:
        """The options that change the meaning of the stored state (``merge_state`` and
        ``load_state_dict`` refuse a state of other values); a streamed route's running lists depend on
        its class's ``_running_settings`` too."""
        own = tuple(o.name for o in self.options if o.effect == "state")
        if self.route != "streamed":
            return own
        running = getattr(self.load_class(), "_running_settings", ())
        return own + tuple(n for n in running if n not in own)

    def load_class(self) -> Any:
        """The module class (imports it)."""
        return getattr(importlib.import_module(self.module), str(self.name))

    def load_functional(self) -> Any:
        """The functional twin (imports ``embedmetrics.functional``)."""
        return getattr(importlib.import_module("embedmetrics.functional"), str(self.functional))

    def make_case(self, **kwargs: Any) -> Any:
        """A small valid input (``embedmetrics._metric.cases.Case``) for this metric."""
        factory = getattr(importlib.import_module("embedmetrics._metric.cases"), self.inputs)
        return factory(self, **kwargs)


@functools.cache
def _option_table(family: str, key: str) -> tuple[Any, ...]:
    return tuple(importlib.import_module(OPTION_TABLES[family]).OPTIONS[key])


def _retrieval(name: str, functional: str) -> MetricSpec:
    return MetricSpec(name, "embedmetrics.retrieval", functional, "retrieval", inputs="retrieval_case")


REGISTRY: tuple[MetricSpec, ...] = (
    _retrieval("RetrievalAUROC", "retrieval_auroc"),
    _retrieval("RetrievalBpref", "retrieval_bpref"),
    _retrieval("RetrievalFallOut", "retrieval_fall_out"),
    _retrieval("RetrievalHitRate", "retrieval_hit_rate"),
    _retrieval("RetrievalInfAP", "retrieval_infap"),
    _retrieval("RetrievalInterpolatedPrecision", "retrieval_interpolated_precision"),
    _retrieval("RetrievalMAP", "retrieval_average_precision"),
    _retrieval("RetrievalMRR", "retrieval_reciprocal_rank"),
    _retrieval("RetrievalNormalizedDCG", "retrieval_normalized_dcg"),
    _retrieval("RetrievalPrecision", "retrieval_precision"),
    _retrieval("RetrievalPrecisionRecallCurve", "retrieval_precision_recall_curve"),
    _retrieval("RetrievalRPrecision", "retrieval_r_precision"),
    _retrieval("RetrievalRPrecisionMultiple", "retrieval_r_precision_multiple"),
    _retrieval("RetrievalRecall", "retrieval_recall"),
    _retrieval("RetrievalSetF", "retrieval_set_f"),
    _retrieval("RetrievalSetMAP", "retrieval_set_map"),
    _retrieval("RetrievalSetRelativePrecision", "retrieval_set_relative_precision"),
    _retrieval("RetrievalRecallAtFixedPrecision", "retrieval_recall_at_fixed_precision"),
    MetricSpec(
        "ContrastiveAccuracy",
        "embedmetrics.embedding",
        "contrastive_accuracy_score",
        "embedding",
        inputs="paired_case",
    ),
    MetricSpec(
        "Uniformity",
        "embedmetrics.embedding",
        "uniformity_score",
        "embedding",
        inputs="single_view_case",
    ),
    MetricSpec(
        "Alignment",
        "embedmetrics.embedding",
        "alignment_score",
        "embedding",
        inputs="paired_case",
        differentiable=True,
    ),
    MetricSpec(
        "EmbeddingAccuracy",
        "embedmetrics.neighbors",
        "embedding_accuracy",
        "metric-learning",
        inputs="labelled_case",
    ),
    MetricSpec(
        "RankMe",
        "embedmetrics.representation",
        "rankme",
        "representation",
        inputs="single_view_case",
    ),
    MetricSpec(
        "AlphaReQ",
        "embedmetrics.representation",
        "alpha_req",
        "representation",
        inputs="single_view_case",
    ),
    MetricSpec(
        "LiDAR",
        "embedmetrics.representation",
        "lidar",
        "representation",
        inputs="labelled_case",
    ),
    MetricSpec(
        "LinearCKA", "embedmetrics.representation", "linear_cka", "representation", inputs="paired_case"
    ),
    MetricSpec(
        "KNNAccuracy",
        "embedmetrics.representation",
        "knn_accuracy",
        "representation",
        inputs="knn_case",
    ),
    MetricSpec(
        "DenseRetrieval",
        "embedmetrics.dense",
        "dense_retrieval",
        "dense",
        inputs="dense_case",
    ),
    MetricSpec(
        None, "embedmetrics.functional", "procrustes_similarity", "shape-similarity", inputs="shape_case"
    ),
    MetricSpec(None, "embedmetrics.functional", "procrustes_r2", "shape-similarity", inputs="shape_case"),
    MetricSpec(
        None,
        "embedmetrics.functional",
        "kruskal_similarity",
        "shape-similarity",
        inputs="shape_case",
    ),
    MetricSpec(
        "ContrastiveLoss",
        "embedmetrics.losses",
        "contrastive_loss",
        "losses",
        loss=True,
        differentiable=True,
    ),
    MetricSpec(None, "embedmetrics.functional", "paired_test", "comparison", inputs="paired_values_case"),
    MetricSpec(None, "embedmetrics.functional", "compare", "comparison", inputs="systems_case"),
    MetricSpec(
        "ConfidenceInterval", "embedmetrics.comparison", "bootstrap_ci", "comparison", inputs="interval_case"
    ),
)

#: The other routes of registered metrics, each a case of its own for the contract suite: the streamed
#: corpus of ``DenseRetrieval`` and the streamed bank of ``KNNAccuracy`` (``set_queries`` first, then
#: chunks). A metric with ``set_queries`` has an entry here (``tests/contracts/test_registry.py``).
ROUTES: tuple[MetricSpec, ...] = (
    MetricSpec("DenseRetrieval", "embedmetrics.dense", "dense_retrieval", "dense", "dense_stream_case",
               route="streamed"),
    MetricSpec("KNNAccuracy", "embedmetrics.representation", "knn_accuracy", "representation",
               "knn_stream_case", route="streamed"),
)  # fmt: skip

#: Public functions of ``embedmetrics.functional`` that are not metrics (no value to accumulate, no module
#: twin): the run-only search of dense retrieval.
FUNCTIONAL_HELPERS: tuple[str, ...] = ("dense_search",)

#: Public names of the package that are not metrics: name -> the module that defines it.
HELPERS: dict[str, str] = {
    "AccuracyCalculator": "embedmetrics.neighbors",
    "ArgumentKindError": "embedmetrics._engine.settings.arguments",
    "ComparisonTooLargeError": "embedmetrics._engine.comparison.systems",
    "IncompatibleStateError": "embedmetrics._engine.core.checks",
    "set_compile": "embedmetrics._config",
    "TieBlockTooLargeError": "embedmetrics._engine.ranking.trec_twin_ties",
}

_BY_NAME = {spec.name: spec for spec in REGISTRY if spec.name is not None}


def spec_of(class_name: str) -> Optional[MetricSpec]:
    """The entry of a module class, or ``None`` for a class that is not a public metric."""
    return _BY_NAME.get(class_name)


@functools.cache
def every_setting() -> frozenset[str]:
    """The name of every option of every registered metric, and the aliases the faces take
    (``top_k``): the settings one metric may be given by mistake for another's (the contract tests try
    each; any keyword a class does not take is refused by name: ``refuse_other_settings_of``)."""
    from embedmetrics._engine.settings.options import ALIASES

    return frozenset({o.name for spec in REGISTRY for o in spec.options} | set(ALIASES))


def spec_of_class(cls: type) -> Optional[MetricSpec]:
    """The entry of ``cls`` or of its nearest registered base (a user's subclass of a metric), or ``None``."""
    return next((s for c in cls.__mro__ if (s := spec_of(c.__name__)) is not None), None)


#: The keyword arguments of torchmetrics ``Metric.__init__`` (1.x: the names it pops from ``**kwargs``):
#: every module metric takes them beyond its settings.
METRIC_KEYWORDS = (
    "compute_on_cpu",
    "dist_sync_on_step",
    "process_group",
    "dist_sync_fn",
    "distributed_available_fn",
    "sync_on_compute",
    "compute_with_cache",
)


def refuse_other_settings_of(
    cls: type, given: dict[str, Any], options: Optional[Sequence[Any]] = None
) -> None:
    """``ArgumentKindError`` naming ``cls`` where a constructor's ``**kwargs`` (``given``, what is left
    for torchmetrics ``Metric.__init__``) hold a keyword that is neither one of its settings (``options``;
    default: those of ``cls``'s entry, ``spec_of_class``, and nothing refused for a class without one)
    nor one of ``METRIC_KEYWORDS``, where torchmetrics would say only "Unexpected keyword arguments"."""
    from embedmetrics._engine.settings.options import refuse_other_settings

    if not given:  # no keyword: no option table imported
        return
    if options is None:
        spec = spec_of_class(cls)
        if spec is None:
            return
        options = spec.options
    refuse_other_settings(cls.__name__, options, given, also=METRIC_KEYWORDS)


def class_names(family: Optional[str] = None) -> tuple[str, ...]:
    """The module classes (of one family), in registry order."""
    return tuple(s.name for s in REGISTRY if s.name is not None and family in (None, s.family))


def functional_names(family: Optional[str] = None) -> tuple[str, ...]:
    """The functional twins (of one family), in registry order."""
    return tuple(s.functional for s in REGISTRY if s.functional is not None and family in (None, s.family))
