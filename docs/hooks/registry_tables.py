"""MkDocs hook: the "What is in it" table of the index page, generated from the metric registry.

A page that holds the line ``<!-- registry-table -->`` gets, in its place, one row per family with its
module metrics and functional twins, read from :mod:`embedmetrics._registry` (the one list of metrics).
"""

from __future__ import annotations

from typing import Any

from embedmetrics._registry import FAMILIES, HELPERS, REGISTRY

MARKER = "<!-- registry-table -->"

#: family -> (title, user guide page)
PAGES = {
    "retrieval": ("Retrieval", "retrieval.md"),
    "embedding": ("Embeddings", "embedding.md"),
    "metric-learning": ("Metric learning", "metric-learning.md"),
    "representation": ("Representation health", "representation.md"),
    "dense": ("Dense retrieval", "dense.md"),
    "shape-similarity": ("Shape similarity (nidl)", "representation.md"),
    "losses": ("Losses", "losses.md"),
}


def registry_table() -> str:
    """The Markdown table of every family, its module metrics and its functional twins."""
    rows = ["| family | module metrics | functional twins |", "| --- | --- | --- |"]
    for family in FAMILIES:
        specs = [s for s in REGISTRY if s.family == family]
        classes = [f"`{s.name}`" for s in specs if s.name is not None]
        if family == "metric-learning":
            classes += [
                f"`{name}` (pytorch-metric-learning API)" for name in HELPERS if name == "AccuracyCalculator"
            ]
        functions = [f"`{s.functional}`" for s in specs if s.functional is not None]
        title, page = PAGES[family]
        rows.append(f"| [{title}]({page}) | {', '.join(classes) or '—'} | {', '.join(functions) or '—'} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return markdown.replace(MARKER, registry_table()) if MARKER in markdown else markdown
