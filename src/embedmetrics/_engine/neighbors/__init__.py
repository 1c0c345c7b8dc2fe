"""kNN over labelled embeddings: per-query statistics of the metric-learning accuracy
(``statistics``), pytorch-metric-learning's list helpers (``lists``), the weighted kNN vote
(``vote``), the calculator's call forms (``accuracy_call``) and k-means for NMI/AMI (``clustering``).
"""
