"""MkDocs hook: the lists of metrics in the docs, generated from the metric registry.

Read from ``embedmetrics._metric.registry`` (the one list of metrics), in place of these lines of a page:

- ``<!-- registry-table -->``: the index page's table, one row per family with its module metrics and
  functional twins;
- ``<!-- registry-api: FAMILY -->``: an API page's sections ``## Module metrics`` and ``## Functional``
  with one mkdocstrings directive per metric of the family (``## Functional`` alone for a family
  without module metrics), then ``## Settings``: each metric's option table (its ``Option``s: name,
  type, default, what a change affects, meaning).
"""

from __future__ import annotations

import re
from typing import Any

from embedmetrics._metric.registry import FAMILIES, HELPERS, REGISTRY

MARKER = "<!-- registry-table -->"
API_MARKER = re.compile(r"<!-- registry-api: ([a-z-]+) -->")

#: family -> (title, user guide page)
PAGES = {
    "retrieval": ("Retrieval", "retrieval.md"),
    "embedding": ("Embeddings", "embedding.md"),
    "metric-learning": ("Metric learning", "metric-learning.md"),
    "representation": ("Representation health", "representation.md"),
    "dense": ("Dense retrieval", "dense.md"),
    "shape-similarity": ("Shape similarity (nidl)", "representation.md"),
    "losses": ("Losses", "losses.md"),
    "comparison": ("Comparing systems", "comparing.md"),
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
    rows.append(
        "| [The report command](report.md) | `embedmetrics report`: labelled embeddings, two views, "
        "a TREC run, dense retrieval | `embedmetrics.cli.main(argv)` |"
    )
    return "\n".join(rows)


def registry_api(family: str) -> str:
    """The API sections of one family: its module metrics, then its functional twins."""
    specs = [s for s in REGISTRY if s.family == family]
    if not specs:
        raise ValueError(f"registry-api: unknown family {family!r}; families: {FAMILIES}")
    parts = []
    classes = [s.name for s in specs if s.name is not None]
    if classes:
        parts.append("## Module metrics\n\n" + "\n\n".join(f"::: embedmetrics.{name}" for name in classes))
    functions = [s.functional for s in specs if s.functional is not None]
    parts.append("## Functional\n\n" + "\n\n".join(f"::: embedmetrics.functional.{f}" for f in functions))
    parts.append(settings_section(specs))
    return "\n\n".join(parts)


#: What a change of a setting affects (``Option.effect``).
EFFECTS = {
    "state": "the stored state: merging or loading a state of another value is refused",
    "result": "the result: every process must agree",
    "none": "nothing but speed or checks",
}


def settings_table(options: Any) -> str:
    """The Markdown table of one option table."""
    rows = ["| setting | type | default | a change affects | meaning |", "| --- | --- | --- | --- | --- |"]
    for o in options:
        doc = o.doc.replace("|", "\\|")
        rows.append(f"| `{o.name}` | `{o.annotation}` | `{o.default!r}` | {EFFECTS[o.effect]} | {doc} |")
    return "\n".join(rows)


def settings_section(specs: Any) -> str:
    """``## Settings``: the option table of every metric of a family (``_engine/<family>/options.py``)."""
    blocks = [
        "## Settings\n\nEvery setting is declared once, with its check, default and effect; the "
        "constructors, the functional twins, the sync agreement and `merge_state` read the same declaration."
    ]
    blocks += [f"**`{spec.key}`**\n\n{settings_table(spec.options)}" for spec in specs]
    return "\n\n".join(blocks)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    markdown = markdown.replace(MARKER, registry_table()) if MARKER in markdown else markdown
    return API_MARKER.sub(lambda m: registry_api(m.group(1)), markdown)
