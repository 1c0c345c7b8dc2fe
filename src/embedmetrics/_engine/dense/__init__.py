"""Dense retrieval: the exact top-``depth`` scan of a corpus (``scan``), qrels (``qrels``) and
trec_eval's measures on the lists (``measures``).
"""
