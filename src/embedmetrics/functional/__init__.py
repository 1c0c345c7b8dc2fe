"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

from embedmetrics.functional.embedding import alignment_score, contrastive_accuracy_score, uniformity_score
from embedmetrics.functional.losses import contrastive_loss
from embedmetrics.functional.neighbors import embedding_accuracy
from embedmetrics.functional.retrieval import (
    retrieval_average_precision,
    retrieval_fall_out,
    retrieval_hit_rate,
    retrieval_normalized_dcg,
    retrieval_precision,
    retrieval_r_precision,
    retrieval_recall,
    retrieval_reciprocal_rank,
)

__all__: list[str] = []
__all__ += ["contrastive_loss"]
__all__ += ["embedding_accuracy"]
__all__ += [
    "retrieval_average_precision",
    "retrieval_fall_out",
    "retrieval_hit_rate",
    "retrieval_normalized_dcg",
    "retrieval_precision",
    "retrieval_r_precision",
    "retrieval_recall",
    "retrieval_reciprocal_rank",
]

__all__ += ["alignment_score", "contrastive_accuracy_score", "uniformity_score"]
