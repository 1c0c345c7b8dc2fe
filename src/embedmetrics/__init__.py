"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation."""

from __future__ import annotations

__version__ = "0.1.0"

__all__: list[str] = ["__version__"]

from embedmetrics.embedding import Alignment, ContrastiveAccuracy, Uniformity

__all__ += ["Alignment", "ContrastiveAccuracy", "Uniformity"]
