"""Functional retrieval metrics: thin faces over the retrieval engine
(``embedmetrics._engine.ranking.retrieval``).

Every function accepts

- 1-D ``preds``/``target`` without ``indexes``: one query;
- 2-D ``(queries, documents)`` without ``indexes``: one query per row;
- any shape with ``indexes`` (flattened): the query id of every document.

Each metric is declared once in the engine (its closed form and its option table; its docstring and
the full signature ``inspect.signature`` shows are written from them by
``embedmetrics._metric.docstrings``); this module names its positional arguments (torchmetrics' order)
and takes the keyword-only options as ``**options`` (typed for IDEs and mypy by ``RetrievalOptions``).
The module metrics in ``embedmetrics.retrieval`` compute through the same engine functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from torch import Tensor
from typing_extensions import Unpack

from embedmetrics._engine.ranking.curves import evaluate_curve, evaluate_recall_at_precision
from embedmetrics._engine.ranking.retrieval import (
    METRICS,
    AurocOptions,
    CurveOptions,
    JudgedOptions,
    RetrievalOptions,
    evaluate,
)
from embedmetrics._metric.docstrings import documented, documented_curve

__all__ = [
    "retrieval_auroc",
    "retrieval_average_precision",
    "retrieval_bpref",
    "retrieval_fall_out",
    "retrieval_hit_rate",
    "retrieval_infap",
    "retrieval_interpolated_precision",
    "retrieval_normalized_dcg",
    "retrieval_precision",
    "retrieval_precision_recall_curve",
    "retrieval_r_precision",
    "retrieval_r_precision_multiple",
    "retrieval_recall",
    "retrieval_recall_at_fixed_precision",
    "retrieval_reciprocal_rank",
    "retrieval_set_f",
    "retrieval_set_map",
    "retrieval_set_relative_precision",
]


class CutoffFace(Protocol):
    """The signature of a retrieval functional with a cut-off (``inspect.signature`` of each one writes
    out its options)."""

    def __call__(
        self,
        preds: Tensor,
        target: Tensor,
        k: int | Sequence[int] | None = None,
        **options: Unpack[RetrievalOptions],
    ) -> Tensor: ...


def _cutoff_face(name: str) -> CutoffFace:
    """The functional twin of retrieval metric ``name`` (one whose only positional option is ``k``)."""

    def face(preds: Tensor, target: Tensor, k: int | Sequence[int] | None = None, **options: Any) -> Tensor:
        return evaluate(name, preds, target, k=k, **options)

    face.__name__ = face.__qualname__ = METRICS[name].functional
    face.__module__ = __name__
    return cast(CutoffFace, documented(name, "functional")(face))


@documented("precision", "functional")
def retrieval_precision(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    adaptive_k: bool = False,
    **options: Unpack[RetrievalOptions],
) -> Tensor:
    return evaluate("precision", preds, target, k=k, adaptive_k=adaptive_k, **options)


@documented("r_precision", "functional")
def retrieval_r_precision(preds: Tensor, target: Tensor, **options: Unpack[JudgedOptions]) -> Tensor:
    return evaluate("r_precision", preds, target, **options)


@documented("r_precision_multiple", "functional")
def retrieval_r_precision_multiple(
    preds: Tensor, target: Tensor, multiple: float = 1.0, **options: Unpack[JudgedOptions]
) -> Tensor:
    return evaluate("r_precision_multiple", preds, target, multiple=multiple, **options)


@documented("set_f", "functional")
def retrieval_set_f(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    beta: float = 1.0,
    **options: Unpack[RetrievalOptions],
) -> Tensor:
    return evaluate("set_f", preds, target, k=k, beta=beta, **options)


@documented("interpolated_precision", "functional")
def retrieval_interpolated_precision(
    preds: Tensor, target: Tensor, recall_level: float = 0.0, **options: Unpack[JudgedOptions]
) -> Tensor:
    return evaluate("interpolated_precision", preds, target, recall_level=recall_level, **options)


@documented("infap", "functional")
def retrieval_infap(preds: Tensor, target: Tensor, **options: Unpack[JudgedOptions]) -> Tensor:
    return evaluate("infap", preds, target, **options)


@documented("bpref", "functional")
def retrieval_bpref(preds: Tensor, target: Tensor, **options: Unpack[JudgedOptions]) -> Tensor:
    return evaluate("bpref", preds, target, **options)


@documented("auroc", "functional")
def retrieval_auroc(
    preds: Tensor,
    target: Tensor,
    top_k: int | Sequence[int] | None = None,
    max_fpr: float | None = None,
    **options: Unpack[AurocOptions],
) -> Tensor:
    return evaluate("auroc", preds, target, top_k=top_k, max_fpr=max_fpr, **options)


@documented_curve("functional", fixed_precision=False)
def retrieval_precision_recall_curve(
    preds: Tensor,
    target: Tensor,
    max_k: int | None = None,
    adaptive_k: bool = False,
    **options: Unpack[CurveOptions],
) -> tuple[Tensor, Tensor, Tensor]:
    return evaluate_curve(preds, target, max_k, adaptive_k, **options)


@documented_curve("functional", fixed_precision=True)
def retrieval_recall_at_fixed_precision(
    preds: Tensor,
    target: Tensor,
    min_precision: float = 0.0,
    max_k: int | None = None,
    adaptive_k: bool = False,
    **options: Unpack[CurveOptions],
) -> tuple[Tensor, Tensor]:
    return evaluate_recall_at_precision(preds, target, min_precision, max_k, adaptive_k, **options)


retrieval_hit_rate = _cutoff_face("hit_rate")
retrieval_reciprocal_rank = _cutoff_face("reciprocal_rank")
retrieval_recall = _cutoff_face("recall")
retrieval_average_precision = _cutoff_face("average_precision")
retrieval_normalized_dcg = _cutoff_face("normalized_dcg")
retrieval_fall_out = _cutoff_face("fall_out")
retrieval_set_relative_precision = _cutoff_face("set_relative_precision")
retrieval_set_map = _cutoff_face("set_map")
