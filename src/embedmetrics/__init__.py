"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation."""

from __future__ import annotations

from embedmetrics import retrieval as _retrieval
from embedmetrics._engine.checks import ArgumentKindError
from embedmetrics.dense import DenseRetrieval
from embedmetrics.embedding import Alignment, ContrastiveAccuracy, Uniformity
from embedmetrics.losses import ContrastiveLoss
from embedmetrics.neighbors import AccuracyCalculator, EmbeddingAccuracy
from embedmetrics.representation import AlphaReQ, KNNAccuracy, LiDAR, LinearCKA, RankMe
from embedmetrics.retrieval import *  # noqa: F403 (every retrieval metric: see embedmetrics.retrieval.__all__)

__version__ = "0.1.0"

__all__: list[str] = ["ArgumentKindError", "__version__"]
__all__ += ["ContrastiveLoss"]
__all__ += ["AccuracyCalculator", "EmbeddingAccuracy"]
__all__ += [name for name in _retrieval.__all__ if name != "RetrievalMetric"]  # the metrics, not the base

__all__ += ["Alignment", "ContrastiveAccuracy", "Uniformity"]
__all__ += ["AlphaReQ", "KNNAccuracy", "LiDAR", "LinearCKA", "RankMe"]
__all__ += ["DenseRetrieval"]
