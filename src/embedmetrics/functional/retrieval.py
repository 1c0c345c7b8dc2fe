"""Functional retrieval metrics: thin faces over the retrieval engine
(``embedmetrics._engine.ranking.retrieval``).

Every function accepts

- 1-D ``preds``/``target`` without ``indexes``: one query;
- 2-D ``(queries, documents)`` without ``indexes``: one query per row;
- any shape with ``indexes`` (flattened): the query id of every document.

Each metric is declared once in the engine (its closed form and options; its docstring is written from
the declaration by ``embedmetrics._metric.docstrings``); this module
gives it an explicit signature. The module metrics in ``embedmetrics.retrieval`` compute through
the same engine functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from embedmetrics._engine.ranking.curves import evaluate_curve, evaluate_recall_at_precision
from embedmetrics._engine.ranking.retrieval import evaluate
from embedmetrics._metric.docstrings import documented, documented_curve

__all__ = [
    "retrieval_auroc",
    "retrieval_average_precision",
    "retrieval_fall_out",
    "retrieval_hit_rate",
    "retrieval_normalized_dcg",
    "retrieval_precision",
    "retrieval_precision_recall_curve",
    "retrieval_r_precision",
    "retrieval_recall",
    "retrieval_recall_at_fixed_precision",
    "retrieval_reciprocal_rank",
]


@documented("hit_rate", "functional")
def retrieval_hit_rate(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("hit_rate", **locals())


@documented("reciprocal_rank", "functional")
def retrieval_reciprocal_rank(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("reciprocal_rank", **locals())


@documented("precision", "functional")
def retrieval_precision(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    adaptive_k: bool = False,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("precision", **locals())


@documented("recall", "functional")
def retrieval_recall(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("recall", **locals())


@documented("r_precision", "functional")
def retrieval_r_precision(
    preds: Tensor,
    target: Tensor,
    *,
    indexes: Tensor | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("r_precision", **locals())


@documented("average_precision", "functional")
def retrieval_average_precision(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("average_precision", **locals())


@documented("normalized_dcg", "functional")
def retrieval_normalized_dcg(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("normalized_dcg", **locals())


@documented("fall_out", "functional")
def retrieval_fall_out(
    preds: Tensor,
    target: Tensor,
    k: int | Sequence[int] | None = None,
    *,
    indexes: Tensor | None = None,
    top_k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
) -> Tensor:
    return evaluate("fall_out", **locals())


@documented("auroc", "functional")
def retrieval_auroc(
    preds: Tensor,
    target: Tensor,
    top_k: int | Sequence[int] | None = None,
    max_fpr: float | None = None,
    *,
    indexes: Tensor | None = None,
    k: int | Sequence[int] | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    validate_args: bool = True,
) -> Tensor:
    return evaluate("auroc", **locals())


@documented_curve("functional", fixed_precision=False)
def retrieval_precision_recall_curve(
    preds: Tensor,
    target: Tensor,
    max_k: int | None = None,
    adaptive_k: bool = False,
    *,
    indexes: Tensor | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    validate_args: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    return evaluate_curve(**locals())


@documented_curve("functional", fixed_precision=True)
def retrieval_recall_at_fixed_precision(
    preds: Tensor,
    target: Tensor,
    min_precision: float = 0.0,
    max_k: int | None = None,
    adaptive_k: bool = False,
    *,
    indexes: Tensor | None = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: str | Callable[..., Tensor] = "mean",
    validate_args: bool = True,
) -> tuple[Tensor, Tensor]:
    return evaluate_recall_at_precision(**locals())
