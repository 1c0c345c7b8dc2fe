"""Functional kNN metrics of metric learning: the twin of
[`EmbeddingAccuracy`][embedmetrics.EmbeddingAccuracy].

One call on the whole data, on the same engine as [`AccuracyCalculator`][embedmetrics.AccuracyCalculator]
(``embedmetrics._engine.neighbors.statistics``): an exact blocked kNN scan with exact ties, no faiss, no
1023 cap. ``per_query=True`` returns the value of every query instead of the average.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import (
    ArgumentKindError,
    check_bool,
    check_finite,
    check_metric_names,
    check_neighbor_inputs,
    to_tensors,
)
from embedmetrics._engine.neighbors.options import DEFAULT_METRICS, OPTIONS
from embedmetrics._engine.neighbors.statistics import (
    KNN_STATS,
    average,
    finite,
    neighbor_statistics,
    scan_k,
)
from embedmetrics._engine.settings.options import read_options

__all__ = ["embedding_accuracy"]


def embedding_accuracy(
    query: Any,
    query_labels: Any,
    reference: Any = None,
    reference_labels: Any = None,
    *,
    include: Sequence[str] = DEFAULT_METRICS,
    k: int | str | None = None,
    distance: str = "euclidean",
    ties: str = "average",
    label_comparison_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
    avg_of_avgs: bool = False,
    per_query: bool = False,
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> dict[str, Any]:
    """kNN label metrics of embeddings: precision@1, R-precision, MAP@R (and MAP, MRR on request).

    Each query's nearest references are found exactly; a reference is relevant when its label equals
    the query's (or ``label_comparison_fn`` says so). Without ``reference``, the queries are their own
    references, each query's own row excluded. Queries without a relevant reference are left out.

    Args:
        query: ``(n_q, d)`` embeddings, tensor or NumPy array.
        query_labels: ``(n_q,)`` labels (``(n_q, w)`` with a ``label_comparison_fn``).
        reference: ``(n_r, d)`` embeddings the neighbours come from; ``None``: the queries themselves.
        reference_labels: their labels (required with ``reference``).
        include: metric names (precision_at_1, r_precision, mean_average_precision_at_r, and on request
            mean_average_precision, mean_reciprocal_rank).
        k: neighbours to retrieve, as for [`AccuracyCalculator`][embedmetrics.AccuracyCalculator]: an int,
            ``"max_bin_count"``, ``"all"`` or ``None``.
        distance: ``"euclidean"`` or ``"cosine"`` (``1 - cos``).
        ties: neighbours at equal distance: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        label_comparison_fn: ``fn(x, y) -> bool tensor`` for broadcast label tensors.
        avg_of_avgs: average per query label first, then over labels.
        per_query: each query's value (NaN for queries without a relevant reference), not the mean.
        block_bytes: memory budget of one block of the scan; ``None`` chooses it for the device.
        validate_args: reject NaN and infinite embeddings (reads the data).

    Returns:
        ``{name: value}``: 0-dim tensors (``(n_q,)`` with ``per_query``) in the embeddings' dtype, or NumPy.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import embedding_accuracy
        >>> x = torch.tensor([[0.0], [0.1], [5.0], [5.2], [5.3]])
        >>> y = torch.tensor([0, 0, 1, 1, 0])
        >>> out = embedding_accuracy(x, y, include=("precision_at_1", "r_precision"))
        >>> {name: round(float(value), 4) for name, value in out.items()}
        {'precision_at_1': 0.6, 'r_precision': 0.4}
        >>> embedding_accuracy(x, y, include=("precision_at_1",), per_query=True)["precision_at_1"]
        tensor([1., 1., 1., 1., 0.])
    """
    opts = read_options("embedding_accuracy", OPTIONS["embedding_accuracy"], {
        "include": include, "k": k, "distance": distance, "ties": ties,
        "label_comparison_fn": label_comparison_fn, "avg_of_avgs": avg_of_avgs, "per_query": per_query,
        "block_bytes": block_bytes, "validate_args": validate_args,
    })  # fmt: skip
    metrics = check_metric_names("include", include, tuple(KNN_STATS), allow_empty=False)
    (q, ql, r, rl), same_source, numpy = _rows(
        query, query_labels, reference, reference_labels, validate_args
    )
    k = opts["k"]
    found = neighbor_statistics(
        q, r, ql.to(q.device), rl.to(q.device),
        self_index=torch.arange(q.shape[0], device=q.device) if same_source else None,
        k=scan_k(k, metrics, r.shape[0] - int(same_source)), stats=tuple(KNN_STATS[m] for m in metrics),
        distance=distance, ties=ties, label_comparison_fn=label_comparison_fn,
        block_bytes=opts["block_bytes"],
    )  # fmt: skip
    wide = numpy or torch.float64 in (q.dtype, r.dtype)  # NumPy results are float64 (NumPy's default)
    dtype = torch.float64 if wide else torch.get_default_dtype()
    shape = (finite(q, r), dtype, numpy, per_query, avg_of_avgs)
    return {m: _value(found.result.stats.get(KNN_STATS[m]), found.not_lone, ql, *shape) for m in metrics}


def _rows(
    query: Any, query_labels: Any, reference: Any, reference_labels: Any, validate_args: Any
) -> tuple[tuple[Tensor, ...], bool, bool]:
    """``(q, ql, r, rl)`` as checked tensors (the queries are the references without ``reference``;
    finite embeddings with ``validate_args``), whether they are the same source, and whether the inputs
    were NumPy."""
    same_source = reference is None
    if same_source != (reference_labels is None):
        raise ArgumentKindError(
            "Arguments `reference` and `reference_labels` go together: give both or neither."
        )
    names: tuple[str, ...] = ("query", "query_labels")
    arrays = [query, query_labels]
    if not same_source:
        names, arrays = (*names, "reference", "reference_labels"), [*arrays, reference, reference_labels]
    tensors, numpy = to_tensors(names, *arrays)
    q, ql = tensors[0].detach(), tensors[1]
    r, rl = (q, ql) if same_source else (tensors[2].detach(), tensors[3])
    check_neighbor_inputs(q, r, ql, rl)
    if check_bool("validate_args", validate_args):
        check_finite("query", q)
        check_finite("reference", r)
    return (q, ql, r, rl), same_source, numpy


def _value(
    values: Tensor | None,
    not_lone: Tensor,
    query_labels: Tensor,
    usable: bool,
    dtype: torch.dtype,
    numpy: bool,
    per_query: bool,
    avg_of_avgs: bool,
) -> Any:
    """One metric's result: per query (NaN for lone queries) or averaged, as a tensor or NumPy."""
    if values is None:
        values = torch.zeros(not_lone.shape[0], dtype=torch.float64)
    keep = not_lone.to(values.device)
    if per_query:
        value = torch.where(keep & usable, values, math.nan).to(dtype)
        return value.cpu().numpy() if numpy else value
    mean = average(values[keep], query_labels.to(values.device)[keep], avg_of_avgs) if usable else math.nan
    value = torch.tensor(mean, dtype=dtype, device=values.device)
    return np.float64(value) if numpy else value
