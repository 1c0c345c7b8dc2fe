"""Names shared by several test files (the public functions and options under test)."""

from __future__ import annotations

from embedmetrics.functional import retrieval as F

#: Every retrieval functional twin, by the metric name the oracle uses.
RETRIEVAL_FUNCTIONS = {
    "hit_rate": F.retrieval_hit_rate,
    "reciprocal_rank": F.retrieval_reciprocal_rank,
    "precision": F.retrieval_precision,
    "recall": F.retrieval_recall,
    "r_precision": F.retrieval_r_precision,
    "average_precision": F.retrieval_average_precision,
    "normalized_dcg": F.retrieval_normalized_dcg,
}

#: The tie policies, from lowest to highest value.
TIE_POLICIES = ("pessimistic", "average", "optimistic")

#: The kNN metrics of the AccuracyCalculator.
KNN_METRICS = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
    "mean_reciprocal_rank",
)
