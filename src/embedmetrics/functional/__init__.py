"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

from embedmetrics.functional import retrieval
from embedmetrics.functional.dense import dense_retrieval
from embedmetrics.functional.embedding import alignment_score, contrastive_accuracy_score, uniformity_score
from embedmetrics.functional.losses import contrastive_loss
from embedmetrics.functional.neighbors import embedding_accuracy
from embedmetrics.functional.representation import alpha_req, knn_accuracy, lidar, linear_cka, rankme
from embedmetrics.functional.retrieval import *  # noqa: F403 (see embedmetrics.functional.retrieval.__all__)
from embedmetrics.functional.shape_similarity import kruskal_similarity, procrustes_r2, procrustes_similarity

__all__: list[str] = []
__all__ += ["contrastive_loss"]
__all__ += ["embedding_accuracy"]
__all__ += retrieval.__all__

__all__ += ["alignment_score", "contrastive_accuracy_score", "uniformity_score"]
__all__ += ["alpha_req", "knn_accuracy", "lidar", "linear_cka", "rankme"]
__all__ += ["dense_retrieval"]
__all__ += ["kruskal_similarity", "procrustes_r2", "procrustes_similarity"]
