"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation."""

from __future__ import annotations

from embedmetrics.neighbors import AccuracyCalculator, EmbeddingAccuracy

__version__ = "0.1.0"

__all__: list[str] = ["AccuracyCalculator", "EmbeddingAccuracy", "__version__"]
