"""The three "Coming from" pages list every class and function of the peer, and ours exist.

torchmetrics is a dependency, so its names are read from the installed package; the names of
pytorch-metric-learning 2.9 (``utils.accuracy_calculator``) and nidl (``nidl.metrics``) are written out
here, since neither is a dependency.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchmetrics.functional.retrieval as tm_functional
import torchmetrics.retrieval as tm_modules

import embedmetrics
import embedmetrics.functional
import embedmetrics.neighbors

DOCS = Path(__file__).resolve().parents[2] / "docs"

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


# ------------------------------------------------------------ the lines that give torchmetrics' number


def _tied_free(seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g), torch.rand(n, generator=g) < 0.5, torch.arange(n) // 8


@pytest.mark.parametrize("seed", range(6))
def test_the_page_lines_give_torchmetrics_numbers(seed: int) -> None:
    """Every value the torchmetrics page lists as different, with its line, equals torchmetrics 1.9."""
    import torchmetrics.retrieval as tm

    from embedmetrics import RetrievalHitRate
    from embedmetrics.functional import (
        retrieval_average_precision,
        retrieval_hit_rate,
        retrieval_precision,
        retrieval_recall,
        retrieval_reciprocal_rank,
    )

    scores, relevant, query = _tied_free(seed)
    positive = scores > 0
    # scores <= 0: retrieved=scores > 0 (MAP: relevant & positive too)
    cases = [
        (
            tm.RetrievalMAP(),
            retrieval_average_precision(scores, relevant & positive, indexes=query, retrieved=positive),
        ),
        (tm.RetrievalMRR(), retrieval_reciprocal_rank(scores, relevant, indexes=query, retrieved=positive)),
        (
            tm.RetrievalPrecision(top_k=3),
            retrieval_precision(scores, relevant, k=3, indexes=query, retrieved=positive),
        ),
        (
            tm.RetrievalRecall(top_k=3),
            retrieval_recall(scores, relevant, k=3, indexes=query, retrieved=positive),
        ),
    ]
    for metric, ours in cases:
        metric.update(scores, relevant, query)
        assert float(ours) == pytest.approx(float(metric.compute()), abs=1e-6), type(metric).__name__
    # AP@k over the found relevant documents, one query of positive scores
    p, t = scores[:8].abs() + 0.01, relevant[:8]
    if bool(t.any()):
        found = t[p.topk(3).indices].sum()
        if int(found) > 0:
            ours_ap = retrieval_average_precision(p, t, k=3) * t.sum() / found
            assert float(ours_ap) == pytest.approx(
                float(tm_functional.retrieval_average_precision(p, t, top_k=3)), abs=1e-6
            )
    # 2-D functional input: flattened, as torchmetrics reads it
    grid_p, grid_t = scores.abs().reshape(5, 8) + 0.01, relevant.reshape(5, 8)
    flat = retrieval_hit_rate(grid_p.reshape(-1), grid_t.reshape(-1), k=2)
    assert float(flat) == float(tm_functional.retrieval_hit_rate(grid_p, grid_t, top_k=2))
    # the module without indexes equals torchmetrics given one query id per row
    ours_module, theirs = RetrievalHitRate(k=2), tm.RetrievalHitRate(top_k=2)
    ours_module.update(grid_p, grid_t)
    theirs.update(grid_p.reshape(-1), grid_t.reshape(-1), indexes=torch.arange(5).repeat_interleave(8))
    assert float(ours_module.compute()) == pytest.approx(float(theirs.compute()), abs=1e-6)
