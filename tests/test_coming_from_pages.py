"""The three "Coming from" pages list every class and function of the peer, and ours exist.

torchmetrics is a dependency, so its names are read from the installed package; the names of
pytorch-metric-learning 2.9 (``utils.accuracy_calculator``) and nidl (``nidl.metrics``) are written out
here, since neither is a dependency.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torchmetrics.functional.retrieval as tm_functional
import torchmetrics.retrieval as tm_modules

import embedmetrics
import embedmetrics.functional
import embedmetrics.neighbors

DOCS = Path(__file__).resolve().parents[1] / "docs"

PML_NAMES = (
    "AccuracyCalculator", "EQUALITY", "get_unique_labels", "maybe_get_avg_of_avgs", "get_relevance_mask",
    "r_precision", "mean_average_precision", "mean_reciprocal_rank", "precision_at_k",
    "get_label_match_counts", "get_lone_query_labels", "try_getting_not_lone_labels", "nan_accuracy",
)  # fmt: skip
NIDL_EMBEDDING_METRICS = (
    "alignment_score", "contrastive_accuracy_score", "uniformity_score", "procrustes_similarity",
    "procrustes_r2", "kruskal_similarity",
)  # fmt: skip
NIDL_OTHER = ("pearson_r", "regression_report", "MetricsCallback")


def _page(name: str) -> str:
    return (DOCS / f"coming-from-{name}.md").read_text(encoding="utf-8")


def test_torchmetrics_page_lists_every_retrieval_class_and_function() -> None:
    page = _page("torchmetrics")
    classes = [n for n in dir(tm_modules) if n.startswith("Retrieval")]
    functions = [n for n in dir(tm_functional) if n.startswith("retrieval_")]
    assert len(classes) >= 11
    assert len(functions) >= 10
    for name in classes:
        assert f"`{name}" in page, name
        assert hasattr(embedmetrics, name), name
    for name in functions:
        assert f"`{name}(" in page, name
        assert hasattr(embedmetrics.functional, name), name


@pytest.mark.parametrize("name", PML_NAMES)
def test_pml_page_lists_every_accuracy_calculator_name(name: str) -> None:
    assert f"`{name}" in _page("pytorch-metric-learning")
    assert hasattr(embedmetrics.neighbors, name)


def test_nidl_page_lists_every_metric() -> None:
    page = _page("nidl")
    for name in NIDL_EMBEDDING_METRICS:
        assert f"`{name}(" in page, name
        assert hasattr(embedmetrics.functional, name), name
    for name in NIDL_OTHER:
        assert name in page, name
