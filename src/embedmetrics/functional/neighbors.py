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
    TIES,
    ArgumentKindError,
    check_block_bytes,
    check_bool,
    check_choice,
    check_finite,
    check_metric_names,
    check_neighbor_inputs,
    to_tensors,
)
from embedmetrics._engine.neighbors.statistics import (
    KNN_STATS,
    average,
    check_k,
    finite,
    neighbor_statistics,
    scan_k,
)

__all__ = ["embedding_accuracy"]

DEFAULT_METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")


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
    references and each query's own row is never its neighbour (an identical copy of it still is).
    Queries with no relevant reference ("lone") are left out of the averages (NaN per query).

    Args:
        query: ``(n_q, d)`` embeddings, tensor or NumPy array.
        query_labels: ``(n_q,)`` labels (``(n_q, w)`` with a ``label_comparison_fn``).
        reference: ``(n_r, d)`` embeddings the neighbours come from; ``None``: the queries themselves.
        reference_labels: their labels (required with ``reference``).
        include: metric names among ``"precision_at_1"``, ``"r_precision"``,
            ``"mean_average_precision_at_r"``, ``"mean_average_precision"``, ``"mean_reciprocal_rank"``.
        k: neighbours to retrieve, as for [`AccuracyCalculator`][embedmetrics.AccuracyCalculator]: an int,
            ``"max_bin_count"`` (the largest number of relevant references of a query: exact
            R-precision and MAP@R), ``"all"``, or ``None`` (the largest relevant count, but every
            reference for mean_average_precision and mean_reciprocal_rank).
        distance: ``"euclidean"`` or ``"cosine"`` (``1 - cos``).
        ties: neighbours at equal distance: ``"average"`` (expected value under a random order),
            ``"pessimistic"`` or ``"optimistic"``.
        label_comparison_fn: ``fn(x, y) -> bool tensor`` for broadcast label tensors.
        avg_of_avgs: average per query label first, then over labels.
        per_query: return each query's value (``(n_q,)``, NaN for lone queries) instead of the mean.
        block_bytes: memory budget of one block of the scan; ``None`` chooses it for the device.
        validate_args: reject NaN and infinite embeddings (``ValueError``; reads the data).

    Returns:
        ``{name: value}``: 0-dim tensors (or ``(n_q,)`` with ``per_query``) for torch input, float64 for
        float64 embeddings, else the default dtype; NumPy ``float64`` values (or arrays) for NumPy input.

    Raises:
        TypeError: inputs of the wrong kind (not tensors/arrays, non-floating embeddings, options).
        ValueError: shapes that do not match, an unknown metric or option.

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
    metrics = check_metric_names("include", include, tuple(KNN_STATS), allow_empty=False)
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
    check_choice("distance", distance, ("euclidean", "cosine"))
    check_choice("ties", ties, TIES)
    k = check_k(k)
    if label_comparison_fn is not None and not callable(label_comparison_fn):
        raise ArgumentKindError(
            f"Argument `label_comparison_fn` must be callable, got {label_comparison_fn!r}."
        )
    check_bool("avg_of_avgs", avg_of_avgs)
    check_bool("per_query", per_query)
    if check_bool("validate_args", validate_args):
        check_finite("query", q)
        check_finite("reference", r)
    found = neighbor_statistics(
        q,
        r,
        ql.to(q.device),
        rl.to(q.device),
        self_index=torch.arange(q.shape[0], device=q.device) if same_source else None,
        k=scan_k(k, metrics, r.shape[0] - int(same_source)),
        stats=tuple(KNN_STATS[m] for m in metrics),
        distance=distance,
        ties=ties,
        label_comparison_fn=label_comparison_fn,
        block_bytes=check_block_bytes(block_bytes),
    )
    usable = finite(q, r)
    wide = numpy or torch.float64 in (q.dtype, r.dtype)  # NumPy results are float64 (NumPy's default)
    dtype = torch.float64 if wide else torch.get_default_dtype()
    out: dict[str, Any] = {}
    for m in metrics:
        values = found.result.stats.get(KNN_STATS[m], torch.zeros(q.shape[0], dtype=torch.float64))
        keep = found.not_lone.to(values.device)
        if per_query:
            value = torch.where(keep & usable, values, math.nan).to(dtype)
        else:
            mean = average(values[keep], ql.to(values.device)[keep], avg_of_avgs) if usable else math.nan
            value = torch.tensor(mean, dtype=dtype, device=values.device)
        out[m] = value.cpu().numpy() if numpy and per_query else (np.float64(value) if numpy else value)
    return out
