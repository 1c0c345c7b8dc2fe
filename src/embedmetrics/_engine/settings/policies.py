"""The named choices shared by several metrics and the report, defined once (no torch imported here:
the command line reads them before anything heavy is loaded)."""

from __future__ import annotations

#: Tie policies of every rank-based metric (see docs/ties.md).
TIES = ("average", "pessimistic", "optimistic")
#: Similarities of dense retrieval (``"euclidean"``: minus the distance).
SIMILARITIES = ("cosine", "dot", "euclidean")
