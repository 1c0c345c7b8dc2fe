"""Moved: trec_eval's measure names are ``embedmetrics._engine.trec_eval.names`` (no torch); this name
re-exports them for the imports that still use it."""

from embedmetrics._engine.trec_eval.names import (
    MEASURES,
    NICKNAMES,
    NOT_SUPPORTED,
    VERSIONS,
    Measure,
    MeasureKind,
    parse_measure,
    parse_measures,
)

__all__ = [
    "MEASURES", "NICKNAMES", "NOT_SUPPORTED", "VERSIONS", "Measure", "MeasureKind", "parse_measure",
    "parse_measures",
]  # fmt: skip
