"""Moved: trec_eval's engine is ``embedmetrics._engine.trec_eval`` (NumPy, no torch); this name re-exports
its ``values`` module for the imports that still use it."""

from embedmetrics._engine.trec_eval.values import FUNCTIONS, evaluate, summarize, trec_eval_values

__all__ = ["FUNCTIONS", "evaluate", "summarize", "trec_eval_values"]
