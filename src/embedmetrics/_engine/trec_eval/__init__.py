"""trec_eval's measures on ranked lists of grades, in NumPy alone (no torch: ``embedmetrics report
--format trec_eval`` starts without importing it): the names and parameters (``names``), segment
operations (``lists``), the measures (``measures``, ``gains``, ``extra``) and the summary (``values``).
"""
