"""The report's outputs: its table (stdout) and JSON file (the same numbers, the same keys), and the
formats of its figures."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from embedmetrics._io.errors import ReportInputError

#: Formats of the figures (``--plot-format``).
PLOT_FORMATS = ("png", "svg", "pdf")

#: Families in the order the table lists them (also the top-level JSON keys).
FAMILIES = ("embeddings", "views", "trec", "dense")
TITLES = {
    "embeddings": "embeddings + labels",
    "views": "two views",
    "trec": "TREC run + qrels",
    "dense": "dense retrieval",
}


def format_table(results: dict[str, dict[str, float]], notes: list[str]) -> str:
    """One table: family, metric, value (4 decimals), then one line per note."""
    rows = [(TITLES[f], key, value) for f in FAMILIES if f in results for key, value in results[f].items()]
    w_family = max([len("family"), *(len(r[0]) for r in rows)])
    w_metric = max([len("metric"), *(len(r[1]) for r in rows)])
    lines = [f"{'family':<{w_family}}  {'metric':<{w_metric}}  {'value':>8}"]
    lines.append(f"{'-' * w_family}  {'-' * w_metric}  {'-' * 8}")
    previous = None
    for family, key, value in rows:
        shown = family if family != previous else ""
        previous = family
        text = "nan" if math.isnan(value) else f"{value:.4f}"
        lines.append(f"{shown:<{w_family}}  {key:<{w_metric}}  {text:>8}")
    lines.extend(notes)
    return "\n".join(lines)


def clipped_k_note(family: str, ks: list[int], why: str) -> str:
    """The note of a family whose default cut-offs were clipped to its data."""
    return f"{family}: --k not given: its default clipped to {','.join(map(str, ks))}, at most {why}"


def knn_vote_note(k: int, default_k: int, n_classes: int) -> str:
    """The note of a kNN vote smaller than its default (``k`` references available to each query) or
    with too few classes for a top-5 row; empty when neither."""
    said = []
    if k < default_k:
        said.append(
            f"the weighted kNN vote takes the {k} references available to each query ({default_k} by default)"
        )
    if n_classes <= 5:
        said.append(
            f"no top-5 row: with {n_classes} classes the query's class is always among the 5 with the most "
            "votes (1.0 by construction)"
        )
    return f"embeddings: {'; '.join(said)}" if said else ""


def views_note(views_are: str, n: int) -> str:
    """The note that says what the two views are and what contrastive accuracy counts."""
    return (
        f"views: the two views are {views_are}; contrastive_accuracy@k: how often a row's pair is among "
        f"its k most similar of the other view's {n} rows (its pair and the {n - 1} others)"
    )


def run_depth_note(depth: int, relevant_per_query: float, not_retrieved: int, smallest_k: int = 1,
                   fewest_relevant: int | None = None) -> str:  # fmt: skip
    """The note of a run shorter than its qrels: relevant documents it does not list count as misses. The
    bound on recall (``k/R`` at best) is said only where it binds: where every query with relevant
    documents has more of them (``fewest_relevant``) than the smallest cut-off reported (a query of one
    relevant document, MS MARCO's, reaches recall 1 from ``k = 1`` on)."""
    r = f"{relevant_per_query:.1f}"
    fewest = relevant_per_query if fewest_relevant is None else fewest_relevant
    bound = f"recall@k is about k/{r} at best, and " if fewest > smallest_k else ""
    return (
        f"trec: the qrels judge {r} documents a query relevant on average, the run lists at most {depth}: "
        f"{bound}map and r_precision count the {not_retrieved} relevant documents not in the run as misses"
    )


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # strict JSON has no NaN
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def to_json(results: dict[str, dict[str, float]], info: dict[str, Any]) -> str:
    """``{"embeddings": {...}, "views": {...}, "trec": {...}, "info": {...}}`` (families present only)."""
    document: dict[str, Any] = {f: results[f] for f in FAMILIES if f in results}
    document["info"] = info
    return dump(document)


def dump(document: dict[str, Any]) -> str:
    """A document as the report's JSON (NaN and infinities as ``null``)."""
    return json.dumps(_clean(document), indent=2, allow_nan=False)


def check_writable(path: str) -> None:
    """Fail early (bad input, exit status 2) when the JSON file could not be written."""
    target = os.path.abspath(path)
    parent = os.path.dirname(target)
    if os.path.isdir(target):
        raise ReportInputError(f"{path}: cannot write the JSON file: it is a directory.")
    if not os.path.isdir(parent):
        raise ReportInputError(f"{path}: cannot write the JSON file: no directory {parent}.")
    writable = os.access(target, os.W_OK) if os.path.exists(target) else os.access(parent, os.W_OK | os.X_OK)
    if not writable:
        raise ReportInputError(f"{path}: cannot write the JSON file: permission denied.")


def write_json(path: str, text: str) -> None:
    """Write the JSON document to ``path``; a write failure is bad input (exit status 2)."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError as err:
        raise ReportInputError(f"{path}: cannot write the JSON file: {err.strerror or err}.") from None
