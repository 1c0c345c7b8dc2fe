"""Names of the public classes, kept where importing them costs nothing: ``embedmetrics/__init__``
serves them lazily and ``embedmetrics.retrieval`` exports them (``__all__``)."""

from __future__ import annotations

#: The retrieval metric modules of :mod:`embedmetrics.retrieval`.
RETRIEVAL_METRICS = (
    "RetrievalAUROC",
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalPrecisionRecallCurve",
    "RetrievalRPrecision",
    "RetrievalRecall",
    "RetrievalRecallAtFixedPrecision",
)
