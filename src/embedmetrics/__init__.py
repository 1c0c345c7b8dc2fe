"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation."""

from __future__ import annotations

from embedmetrics.embedding import Alignment, ContrastiveAccuracy, Uniformity
from embedmetrics.losses import ContrastiveLoss
from embedmetrics.neighbors import AccuracyCalculator, EmbeddingAccuracy
from embedmetrics.retrieval import (
    RetrievalFallOut,
    RetrievalHitRate,
    RetrievalMAP,
    RetrievalMRR,
    RetrievalNormalizedDCG,
    RetrievalPrecision,
    RetrievalRecall,
    RetrievalRPrecision,
)

__version__ = "0.1.0"

__all__: list[str] = ["__version__"]
__all__ += ["ContrastiveLoss"]
__all__ += ["AccuracyCalculator", "EmbeddingAccuracy"]
__all__ += [
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRPrecision",
    "RetrievalRecall",
]

__all__ += ["Alignment", "ContrastiveAccuracy", "Uniformity"]
