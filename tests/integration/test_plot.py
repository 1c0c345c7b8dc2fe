"""``plot()`` works for every module metric, and a value per ``k`` is drawn as a curve over k."""

from __future__ import annotations

from typing import Any, Callable

import matplotlib
import pytest
import torch

import embedmetrics as em

matplotlib.use("Agg")
import matplotlib.pyplot as plt

_G = torch.Generator().manual_seed(0)
_PREDS, _TARGET = torch.rand(60, generator=_G), torch.rand(60, generator=_G) < 0.3
_INDEXES = torch.arange(6).repeat_interleave(10)
_Z1 = torch.randn(30, 8, generator=_G)
_Z2 = _Z1 + 0.3 * torch.randn(30, 8, generator=_G)
_LABELS = torch.arange(30) % 3


def _retrieval(metric: Any) -> Any:
    metric.update(_PREDS, _TARGET, indexes=_INDEXES)
    return metric


def _views(metric: Any) -> Any:
    metric.update(_Z1, _Z2)
    return metric


CASES: dict[str, Callable[[], Any]] = {
    "RetrievalHitRate": lambda: _retrieval(em.RetrievalHitRate(k=3)),
    "RetrievalMRR": lambda: _retrieval(em.RetrievalMRR()),
    "RetrievalPrecision": lambda: _retrieval(em.RetrievalPrecision(k=3)),
    "RetrievalRecall": lambda: _retrieval(em.RetrievalRecall(k=3)),
    "RetrievalNormalizedDCG": lambda: _retrieval(em.RetrievalNormalizedDCG(k=3)),
    "RetrievalMAP": lambda: _retrieval(em.RetrievalMAP()),
    "RetrievalRPrecision": lambda: _retrieval(em.RetrievalRPrecision()),
    "RetrievalFallOut": lambda: _retrieval(em.RetrievalFallOut(k=(1, 3))),
    "RetrievalAUROC": lambda: _retrieval(em.RetrievalAUROC(max_fpr=0.5)),
    "RetrievalPrecisionRecallCurve": lambda: _retrieval(em.RetrievalPrecisionRecallCurve(max_k=3)),
    "RetrievalRecallAtFixedPrecision": lambda: _retrieval(em.RetrievalRecallAtFixedPrecision(0.5, max_k=3)),
    "ContrastiveAccuracy": lambda: _views(em.ContrastiveAccuracy(topk=1)),
    "Alignment": lambda: _views(em.Alignment()),
    "Uniformity": lambda: _uniformity(),
    "EmbeddingAccuracy": lambda: _embedding_accuracy(),
}


def _uniformity() -> Any:
    metric = em.Uniformity()
    metric.update(_Z1)
    return metric


def _embedding_accuracy() -> Any:
    metric = em.EmbeddingAccuracy(include=("precision_at_1", "r_precision"))
    metric.update(_Z1, _LABELS)
    return metric


@pytest.mark.parametrize("name", sorted(CASES))
def test_plot_draws_for_every_module_metric(name: str) -> None:
    metric = CASES[name]()
    fig, ax = metric.plot()
    assert fig is not None
    assert ax.lines or ax.patches or ax.collections, f"{name}.plot() drew nothing"
    _, ax2 = metric.plot([metric.compute(), metric.compute()])  # a sequence of values (epochs)
    assert ax2.lines or ax2.patches or ax2.collections
    plt.close("all")


@pytest.mark.parametrize(
    ("factory", "update"),
    [
        (lambda: em.RetrievalHitRate(k=(1, 5, 10)), _retrieval),
        (lambda: em.RetrievalNormalizedDCG(k=(1, 5, 10)), _retrieval),
        (lambda: em.ContrastiveAccuracy(topk=(1, 5, 10)), _views),
    ],
)
def test_multi_k_value_is_a_curve_over_k(factory: Callable[[], Any], update: Callable[[Any], Any]) -> None:
    metric = update(factory())
    value = metric.compute()
    _, ax = metric.plot()
    (line,) = ax.lines
    assert list(line.get_ydata()) == pytest.approx(value.tolist())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "5", "10"]
    assert ax.get_xlabel() == "k"
    _, ax_seq = metric.plot([value, value])  # one line per k over steps
    assert [line.get_label() for line in ax_seq.lines] == ["k=1", "k=5", "k=10"]
    plt.close("all")
