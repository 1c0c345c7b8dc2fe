"""Rank fusion of runs: ``fuse.py``. No torch."""
