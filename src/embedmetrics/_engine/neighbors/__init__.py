"""kNN over labelled embeddings: per-query statistics of the metric-learning accuracy
(``statistics``), pytorch-metric-learning's list helpers (``lists``), the weighted kNN vote
(``vote``; its running lists over a streamed bank: ``vote_stream``), k-means for NMI/AMI
(``clustering``), and ``AccuracyCalculator``'s call forms
(``accuracy_call``), decisions and compute path (``calculator``), kNN inputs (``calculator_knn``) and
built-in metrics (``calculator_metrics``).
"""
