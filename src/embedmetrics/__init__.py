"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation.

The public names are imported on first use (PEP 562 ``__getattr__``): ``import embedmetrics`` loads
neither torch nor torchmetrics, and a command or script that needs only a functional metric does not
pay for the module metrics' imports. ``from embedmetrics import RankMe`` and ``embedmetrics.RankMe``
work as with eager imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from embedmetrics._metric.registry import HELPERS, REGISTRY

__version__ = "0.1.0"


#: public name -> the module that defines it (imported when the name is first used): every module
#: metric of the registry, then the helpers.
_EXPORTS: dict[str, str] = {spec.name: spec.module for spec in REGISTRY if spec.name is not None} | HELPERS
#: Reachable as attributes too, but not part of ``from embedmetrics import *``.
_EXTRAS = {"RetrievalMetric": "embedmetrics.retrieval"}
_SUBMODULES = frozenset(
    (
        "cli",
        "comparison",
        "dense",
        "embedding",
        "functional",
        "integrations",
        "losses",
        "neighbors",
        "qrels",
        "representation",
        "retrieval",
        "trec",
    )
)

__all__: list[str] = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"embedmetrics.{name}")
    where = _EXPORTS.get(name) or _EXTRAS.get(name)
    if where is None:
        raise AttributeError(f"module 'embedmetrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_EXTRAS) | _SUBMODULES)


# For type checkers and the API docs: the same names imported eagerly (``X as X``: re-exported).
if TYPE_CHECKING:
    from embedmetrics._config import set_compile as set_compile
    from embedmetrics._engine.comparison.systems import ComparisonTooLargeError as ComparisonTooLargeError
    from embedmetrics._engine.core.checks import IncompatibleStateError as IncompatibleStateError
    from embedmetrics._engine.ranking.trec_twin_ties import TieBlockTooLargeError as TieBlockTooLargeError
    from embedmetrics._engine.settings.arguments import ArgumentKindError as ArgumentKindError
    from embedmetrics.comparison import ConfidenceInterval as ConfidenceInterval
    from embedmetrics.dense import DenseRetrieval as DenseRetrieval
    from embedmetrics.embedding import Alignment as Alignment
    from embedmetrics.embedding import ContrastiveAccuracy as ContrastiveAccuracy
    from embedmetrics.embedding import Uniformity as Uniformity
    from embedmetrics.losses import ContrastiveLoss as ContrastiveLoss
    from embedmetrics.neighbors import AccuracyCalculator as AccuracyCalculator
    from embedmetrics.neighbors import EmbeddingAccuracy as EmbeddingAccuracy
    from embedmetrics.representation import AlphaReQ as AlphaReQ
    from embedmetrics.representation import KNNAccuracy as KNNAccuracy
    from embedmetrics.representation import LiDAR as LiDAR
    from embedmetrics.representation import LinearCKA as LinearCKA
    from embedmetrics.representation import RankMe as RankMe
    from embedmetrics.retrieval import RetrievalAUROC as RetrievalAUROC
    from embedmetrics.retrieval import RetrievalBpref as RetrievalBpref
    from embedmetrics.retrieval import RetrievalFallOut as RetrievalFallOut
    from embedmetrics.retrieval import RetrievalHitRate as RetrievalHitRate
    from embedmetrics.retrieval import RetrievalInfAP as RetrievalInfAP
    from embedmetrics.retrieval import RetrievalInterpolatedPrecision as RetrievalInterpolatedPrecision
    from embedmetrics.retrieval import RetrievalMAP as RetrievalMAP
    from embedmetrics.retrieval import RetrievalMetric as RetrievalMetric
    from embedmetrics.retrieval import RetrievalMRR as RetrievalMRR
    from embedmetrics.retrieval import RetrievalNormalizedDCG as RetrievalNormalizedDCG
    from embedmetrics.retrieval import RetrievalPrecision as RetrievalPrecision
    from embedmetrics.retrieval import RetrievalPrecisionRecallCurve as RetrievalPrecisionRecallCurve
    from embedmetrics.retrieval import RetrievalRecall as RetrievalRecall
    from embedmetrics.retrieval import RetrievalRecallAtFixedPrecision as RetrievalRecallAtFixedPrecision
    from embedmetrics.retrieval import RetrievalRPrecision as RetrievalRPrecision
    from embedmetrics.retrieval import RetrievalRPrecisionMultiple as RetrievalRPrecisionMultiple
    from embedmetrics.retrieval import RetrievalSetF as RetrievalSetF
    from embedmetrics.retrieval import RetrievalSetMAP as RetrievalSetMAP
    from embedmetrics.retrieval import RetrievalSetRelativePrecision as RetrievalSetRelativePrecision
