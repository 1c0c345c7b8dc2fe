"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

__all__: list[str] = []

from embedmetrics.functional.embedding import alignment_score, contrastive_accuracy_score, uniformity_score

__all__ += ["alignment_score", "contrastive_accuracy_score", "uniformity_score"]
