"""kNN label metrics from given neighbour lists: the module-level helpers of pytorch-metric-learning 2.x.

[`AccuracyCalculator`][embedmetrics.AccuracyCalculator] normally computes its kNN metrics inside the exact
scan (ties handled exactly, no lists kept). These functions compute them from neighbour label lists
someone else produced (a user's ``knn_func``, or code that calls ``_get_accuracy`` with
``knn_labels``), with the semantics and call signatures of ``pytorch_metric_learning.utils.
accuracy_calculator`` 2.x, so calculators and tests written against it run unchanged:

- ``label_counts`` is ``(unique query labels, relevant references of each)``; with
  ``ref_includes_query`` one of those references is the query itself and does not count;
- r-precision and MAP@R look at the first ``R`` listed neighbours, MAP at the whole list divided by
  ``R``, MRR at the first relevant neighbour of the list (0 without one);
- results are floats, or one float per class (ascending label) with ``return_per_class``.

Everything is vectorised; the only loop is over distinct labels for a custom
``label_comparison_fn`` (one comparison call per label, as the function is opaque).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import check_positive_int
from embedmetrics._engine.core.knn import LabelComparison
from embedmetrics._engine.neighbors.statistics import average, class_means

LabelCounts = tuple[Any, Any]
Accuracy = Union[float, list[float]]

#: The default relevance rule: equal labels.
EQUALITY: LabelComparison = torch.eq


def _all_after(x: Tensor, dim: int) -> Tensor:
    """``x`` reduced by ``all`` over dimensions ``dim`` and later (a no-op when there are none)."""
    return x if x.ndim <= dim else torch.all(x.flatten(dim), dim=-1)


def get_unique_labels(labels: Tensor) -> Tensor:
    """Distinct labels (rows, for multi-dimensional labels), ascending."""
    unique: Tensor = torch.unique(labels, dim=0)
    return unique


def _as_tensor(values: Any, like: Tensor) -> Tensor:
    return values.to(like.device) if isinstance(values, Tensor) else torch.tensor(values, device=like.device)


def maybe_get_avg_of_avgs(
    accuracy_per_sample: Tensor, sample_labels: Tensor, avg_of_avgs: bool, return_per_class: bool
) -> Accuracy:
    """The mean of per-sample accuracies, or of per-class means, or the per-class means as a list
    (classes in ascending label order). Order-independent: summed in ascending order of value."""
    values = accuracy_per_sample.to(torch.float64)
    if return_per_class:
        return class_means(values, sample_labels).cpu().tolist()
    return average(values, sample_labels, avg_of_avgs)


def get_label_match_counts(
    query_labels: Tensor, reference_labels: Tensor, label_comparison_fn: LabelComparison = EQUALITY
) -> tuple[Tensor, Tensor]:
    """Distinct query labels and, for each, how many references are relevant to it."""
    unique = get_unique_labels(query_labels)
    if label_comparison_fn is EQUALITY:
        match = _all_after(unique[:, None] == reference_labels[None], 2)
        return unique, match.sum(1)
    counts = [label_comparison_fn(unique[i : i + 1], reference_labels).sum() for i in range(len(unique))]
    device = query_labels.device
    return unique, torch.stack(counts).to(torch.long) if counts else torch.zeros(
        0, dtype=torch.long, device=device
    )


def get_lone_query_labels(
    query_labels: Tensor,
    label_counts: LabelCounts,
    ref_includes_query: bool,
    label_comparison_fn: LabelComparison = EQUALITY,
) -> tuple[Tensor, Tensor]:
    """Query labels with no relevant reference (the query itself aside), and the mask of other queries."""
    unique, counts = (_as_tensor(v, query_labels) for v in label_counts)
    if ref_includes_query:
        itself = label_comparison_fn(unique, unique)
        lone = unique[counts - _all_after(itself, 1).to(torch.long) <= 0]
    else:
        lone = unique[counts == 0]
    if len(lone) == 0:
        return lone, torch.ones(query_labels.shape[0], dtype=torch.bool, device=query_labels.device)
    is_lone = _all_after(query_labels[:, None] == lone[None], 2).any(1)
    return lone, ~is_lone


def get_relevance_mask(
    shape: Sequence[int], gt_labels: Tensor, ref_includes_query: bool, label_counts: LabelCounts
) -> tuple[Tensor, Tensor]:
    """Per query, the first ``R`` list positions (``R``: its relevant references) and ``R`` itself."""
    unique, counts = (_as_tensor(v, gt_labels) for v in label_counts)
    labels = gt_labels.reshape(gt_labels.shape[0], -1)
    hit = (labels[:, None, :] == unique.reshape(unique.shape[0], -1)[None]).all(-1)  # (n, labels)
    R = (hit.to(torch.long) * (counts.to(torch.long) - int(ref_includes_query))[None]).sum(1)
    cols = torch.arange(shape[1], device=gt_labels.device)
    return cols[None] < R[:, None], R


def precision_at_k(
    knn_labels: Tensor,
    gt_labels: Tensor,
    k: int,
    avg_of_avgs: bool = False,
    return_per_class: Any = False,
    label_comparison_fn: LabelComparison | None = None,
) -> Accuracy:
    """Relevant neighbours among the first ``k`` listed, over ``k``.

    The 2.x order is ``(…, avg_of_avgs, return_per_class, label_comparison_fn)``; the 1.x order
    ``(…, avg_of_avgs, label_comparison_fn)`` is recognised by a callable in the fifth place.
    """
    if callable(return_per_class):  # 1.x positional order
        label_comparison_fn, return_per_class = return_per_class, False
    k = check_positive_int("k", k)
    if k > knn_labels.shape[1]:
        raise ValueError(
            f"Argument `k` must be at most the number of neighbours {knn_labels.shape[1]}, got {k}."
        )
    same = _same(knn_labels[:, :k], gt_labels, label_comparison_fn or EQUALITY)
    values = same.to(torch.float64).sum(1) / k
    labels = gt_labels[:, 0] if gt_labels.ndim == knn_labels.ndim else gt_labels
    return maybe_get_avg_of_avgs(values, labels, avg_of_avgs, return_per_class)


def _same(knn_labels: Tensor, gt_labels: Tensor, fn: LabelComparison) -> Tensor:
    q = gt_labels if gt_labels.ndim == knn_labels.ndim else gt_labels[:, None]
    return _all_after(fn(q, knn_labels), 2)


def r_precision(
    knn_labels: Tensor,
    gt_labels: Tensor,
    ref_includes_query: bool,
    label_counts: LabelCounts,
    avg_of_avgs: bool,
    return_per_class: bool,
    label_comparison_fn: LabelComparison,
) -> Accuracy:
    """Relevant neighbours among the first ``R`` listed, over ``R`` (or over the list if shorter)."""
    mask, _ = get_relevance_mask(knn_labels.shape[:2], gt_labels, ref_includes_query, label_counts)
    same = _same(knn_labels, gt_labels, label_comparison_fn)
    values = (same & mask).sum(1).to(torch.float64) / mask.sum(1)
    return maybe_get_avg_of_avgs(values, gt_labels, avg_of_avgs, return_per_class)


def mean_average_precision(
    knn_labels: Tensor,
    gt_labels: Tensor,
    ref_includes_query: bool,
    label_counts: LabelCounts,
    avg_of_avgs: bool,
    return_per_class: bool,
    label_comparison_fn: LabelComparison,
    at_r: bool = False,
) -> Accuracy:
    """Average precision over the listed neighbours (the first ``R`` with ``at_r``), over ``R``."""
    mask, R = get_relevance_mask(knn_labels.shape[:2], gt_labels, ref_includes_query, label_counts)
    hits = _same(knn_labels, gt_labels, label_comparison_fn)
    if at_r:
        hits = hits & mask
    ranks = torch.arange(1, hits.shape[1] + 1, device=hits.device, dtype=torch.float64)
    precision = hits.cumsum(1).to(torch.float64) / ranks
    values = (precision * hits).sum(1) / R.to(torch.float64)
    return maybe_get_avg_of_avgs(values, gt_labels, avg_of_avgs, return_per_class)


def mean_reciprocal_rank(
    knn_labels: Tensor,
    gt_labels: Tensor,
    avg_of_avgs: bool,
    return_per_class: bool,
    label_comparison_fn: LabelComparison,
) -> Accuracy:
    """One over the position of the first relevant listed neighbour (0 without one)."""
    hits = _same(knn_labels, gt_labels, label_comparison_fn)
    first = hits.to(torch.int8).argmax(1).to(torch.float64) + 1
    values = torch.where(hits.any(1), 1.0 / first, 0.0)
    return maybe_get_avg_of_avgs(values, gt_labels, avg_of_avgs, return_per_class)


def try_getting_not_lone_labels(
    knn_labels: Tensor, query_labels: Tensor, not_lone_query_mask: Tensor
) -> tuple[Tensor | None, Tensor | None]:
    """The neighbour lists and labels of the queries that are not lone (``None`` if all are)."""
    if not bool(not_lone_query_mask.any()):
        return None, None
    return knn_labels[not_lone_query_mask], query_labels[not_lone_query_mask]


def nan_accuracy(unique_labels: Any, return_per_class: bool) -> Accuracy:
    """NaN, or one NaN per class."""
    return [math.nan] * len(unique_labels) if return_per_class else math.nan
