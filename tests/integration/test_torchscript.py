"""``torch.jit.script(metric)`` works for every module metric, as for torchmetrics' (its test helper
scripts each retrieval metric); ``forward`` stays a Python method (``torch.jit.unused``), as there."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torchmetrics import Metric

import embedmetrics as em

_ARGS: dict[str, tuple[Any, ...]] = {
    "RetrievalRecallAtFixedPrecision": (0.5,),
    "DenseRetrieval": (torch.tensor([[0, 0, 1]]),),
    "ConfidenceInterval": (em.RetrievalMRR(aggregation="none"),),
}
_METRICS = sorted(
    n for n in em.__all__ if isinstance(getattr(em, n), type) and issubclass(getattr(em, n), Metric)
)


def test_every_module_metric_is_listed() -> None:
    assert len(_METRICS) == 29


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", _METRICS)
def test_module_metric_scripts(name: str) -> None:
    metric = getattr(em, name)(*_ARGS.get(name, ()))
    scripted = torch.jit.script(metric)
    assert isinstance(scripted, torch.jit.ScriptModule)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_scripting_leaves_the_metric_usable() -> None:
    metric = em.RetrievalMRR()
    torch.jit.script(metric)
    value = metric(torch.tensor([0.2, 0.9, 0.4]), torch.tensor([0, 0, 1]), indexes=torch.tensor([0, 0, 0]))
    assert float(value) == pytest.approx(0.5)
    assert float(metric.compute()) == pytest.approx(0.5)
