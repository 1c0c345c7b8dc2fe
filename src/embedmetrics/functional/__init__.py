"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

from embedmetrics._metric.registry import FUNCTIONAL_HELPERS, functional_names
from embedmetrics.functional.comparison import bootstrap_ci as bootstrap_ci
from embedmetrics.functional.comparison import compare as compare
from embedmetrics.functional.comparison import paired_test as paired_test
from embedmetrics.functional.dense import dense_retrieval as dense_retrieval
from embedmetrics.functional.dense import dense_search as dense_search
from embedmetrics.functional.embedding import alignment_score as alignment_score
from embedmetrics.functional.embedding import contrastive_accuracy_score as contrastive_accuracy_score
from embedmetrics.functional.embedding import uniformity_score as uniformity_score
from embedmetrics.functional.losses import contrastive_loss as contrastive_loss
from embedmetrics.functional.neighbors import embedding_accuracy as embedding_accuracy
from embedmetrics.functional.representation import alpha_req as alpha_req
from embedmetrics.functional.representation import knn_accuracy as knn_accuracy
from embedmetrics.functional.representation import lidar as lidar
from embedmetrics.functional.representation import linear_cka as linear_cka
from embedmetrics.functional.representation import rankme as rankme
from embedmetrics.functional.retrieval import retrieval_auroc as retrieval_auroc
from embedmetrics.functional.retrieval import retrieval_average_precision as retrieval_average_precision
from embedmetrics.functional.retrieval import retrieval_bpref as retrieval_bpref
from embedmetrics.functional.retrieval import retrieval_fall_out as retrieval_fall_out
from embedmetrics.functional.retrieval import retrieval_hit_rate as retrieval_hit_rate
from embedmetrics.functional.retrieval import retrieval_infap as retrieval_infap
from embedmetrics.functional.retrieval import (
    retrieval_interpolated_precision as retrieval_interpolated_precision,
)
from embedmetrics.functional.retrieval import retrieval_normalized_dcg as retrieval_normalized_dcg
from embedmetrics.functional.retrieval import retrieval_precision as retrieval_precision
from embedmetrics.functional.retrieval import (
    retrieval_precision_recall_curve as retrieval_precision_recall_curve,
)
from embedmetrics.functional.retrieval import retrieval_r_precision as retrieval_r_precision
from embedmetrics.functional.retrieval import retrieval_r_precision_multiple as retrieval_r_precision_multiple
from embedmetrics.functional.retrieval import retrieval_recall as retrieval_recall
from embedmetrics.functional.retrieval import (
    retrieval_recall_at_fixed_precision as retrieval_recall_at_fixed_precision,
)
from embedmetrics.functional.retrieval import retrieval_reciprocal_rank as retrieval_reciprocal_rank
from embedmetrics.functional.retrieval import retrieval_set_f as retrieval_set_f
from embedmetrics.functional.retrieval import retrieval_set_map as retrieval_set_map
from embedmetrics.functional.retrieval import (
    retrieval_set_relative_precision as retrieval_set_relative_precision,
)
from embedmetrics.functional.shape_similarity import kruskal_similarity as kruskal_similarity
from embedmetrics.functional.shape_similarity import procrustes_r2 as procrustes_r2
from embedmetrics.functional.shape_similarity import procrustes_similarity as procrustes_similarity

#: Every functional twin of the registry (``embedmetrics._metric.registry``), in its order, then the
#: functions that are not metrics (``FUNCTIONAL_HELPERS``).
__all__: list[str] = [*functional_names(), *FUNCTIONAL_HELPERS]
