"""Argument and input validation shared by every family: one validator per rule.

Every error names the argument and the value received. One exception type per kind of mistake:

- ``TypeError``: the argument is of the wrong kind (a float where an int is needed, a string array
  where numbers are needed, an integer tensor where embeddings must be floating point);
- ``ValueError``: the kind is right but the value is not (``k=0``, a NaN embedding, a shape that
  does not match).

Checks of tensor *values* (NaN, ranges) read the data on the host; callers run them only when
``validate_args`` is true, so that ``update`` can stay free of host synchronisation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Union

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.settings.arguments import (  # the torch-free checks of scalar arguments
    ArgumentKindError as ArgumentKindError,
)
from embedmetrics._engine.settings.arguments import (
    check_block_bytes as check_block_bytes,
)
from embedmetrics._engine.settings.arguments import (
    check_bool as check_bool,
)
from embedmetrics._engine.settings.arguments import (
    check_choice as check_choice,
)
from embedmetrics._engine.settings.arguments import (
    check_number as check_number,
)
from embedmetrics._engine.settings.arguments import (
    check_positive_int as check_positive_int,
)
from embedmetrics._engine.settings.arguments import (
    normalize_ks as normalize_ks,
)
from embedmetrics._engine.settings.policies import TIES as TIES  # re-exported for the checks of ties

ArrayLike = Union[Tensor, np.ndarray]


class IncompatibleStateError(ValueError, RuntimeError):
    """States that cannot be combined: another feature width, dtype or setting, in ``merge_state``,
    across processes at a sync, or between a batch and the rows accumulated before it. A
    ``ValueError`` (also a ``RuntimeError``, which a sync raised before)."""


def check_numeric_array(name: str, value: np.ndarray) -> None:
    """Reject NumPy arrays that torch cannot hold as numbers (strings, objects)."""
    if value.dtype.kind not in "biufc":
        raise ArgumentKindError(
            f"Argument `{name}` must hold numbers (bool, integer or floating point), got a NumPy array of "
            f"dtype {value.dtype}."
        )


def as_tensor(name: str, value: Any) -> Tensor:
    """A torch tensor or NumPy array (numbers) as a tensor; anything else is a ``TypeError``."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        check_numeric_array(name, value)
        return torch.from_numpy(np.ascontiguousarray(value))
    raise ArgumentKindError(
        f"Argument `{name}` must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}."
    )


def to_tensors(names: Sequence[str], *arrays: Any) -> tuple[list[Tensor], bool]:
    """Convert inputs that are all torch tensors or all NumPy arrays to tensors.

    Returns:
        The tensors, and whether the inputs were NumPy arrays (so results go back as NumPy).

    Raises:
        TypeError: if the inputs mix types, are neither tensors nor arrays, or are arrays of strings.
    """
    all_torch = all(isinstance(a, Tensor) for a in arrays)
    all_numpy = all(isinstance(a, np.ndarray) for a in arrays)
    if not (all_torch or all_numpy):
        kinds = ", ".join(f"`{n}`: {type(a).__name__}" for n, a in zip(names, arrays))
        raise ArgumentKindError(f"Inputs must be all torch.Tensor or all numpy.ndarray, got {kinds}.")
    return [as_tensor(n, a) for n, a in zip(names, arrays)], all_numpy


def as_output(value: Tensor, numpy: bool, single: bool = True) -> Any:
    """A functional's result: a 0-dim (``single``) or 1-D tensor, or NumPy float64 scalar / array when
    the inputs were NumPy (see ``to_tensors``)."""
    if single:
        value = value.reshape(())
    if numpy:
        array = value.detach().cpu().to(torch.float64).numpy()
        return np.float64(array) if single else array
    return value


def check_embeddings(name: str, z: Tensor, *, allow_empty: bool = False) -> None:
    """Check that ``z`` is a 2-D floating-point tensor of embeddings with at least one row."""
    if z.ndim != 2:
        raise ValueError(
            f"Argument `{name}` must be 2-D (n_samples, n_features), got shape {tuple(z.shape)}."
        )
    if not z.is_floating_point():
        raise ArgumentKindError(f"Argument `{name}` must be a floating-point tensor, got dtype {z.dtype}.")
    if not allow_empty and z.shape[0] == 0:
        raise ValueError(f"Argument `{name}` must have at least one row, got shape {tuple(z.shape)}.")


def check_embedding_rows(names: tuple[str, ...], tensors: list[Tensor], *, validate_args: bool) -> None:
    """Each tensor is ``(n, d)`` embeddings; with ``validate_args`` (checked as a bool), also finite."""
    validate = check_bool("validate_args", validate_args)
    for name, t in zip(names, tensors):
        check_embeddings(name, t)
        if validate:
            check_finite(name, t)


def finite_values(x: Tensor) -> Tensor:
    """Whether every value of ``x`` is finite (0-dim bool, on ``x``'s device): one pass, no temporary
    (``aminmax``: NaN propagates, an infinity is an extreme)."""
    if x.numel() == 0 or not x.is_floating_point():
        return torch.ones((), dtype=torch.bool, device=x.device)
    low, high = torch.aminmax(x)
    return torch.isfinite(low) & torch.isfinite(high)


def largest_magnitude(x: Tensor) -> Tensor:
    """``max |x|`` as a 0-dim tensor (0 for an empty ``x``), in one pass without a temporary."""
    if x.numel() == 0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    low, high = torch.aminmax(x)
    return torch.maximum(high, -low)


def check_score_range(
    names: tuple[str, str], magnitudes: tuple[float, float], width: int, similarity: str, dtype: torch.dtype
) -> None:
    """Raise ``ValueError`` where the ``"dot"`` or ``"euclidean"`` keys of rows of widths ``width`` whose
    largest magnitudes are ``magnitudes`` could overflow ``dtype`` (cosine rows are normalised first).
    Every key would be infinite or NaN there, ties everywhere: a wrong value, never an error otherwise."""
    a, b = magnitudes
    if similarity == "cosine" or not (math.isfinite(a) and math.isfinite(b)):
        return  # cosine rows are normalised first; non-finite embeddings give NaN where not refused
    reach = width * (a + b) * (a + b) if similarity == "euclidean" else width * a * b
    if reach * 16 <= torch.finfo(dtype).max:
        return
    hint = "; pass float64 embeddings" if dtype != torch.float64 else ""
    raise ValueError(
        f"Arguments `{names[0]}` and `{names[1]}` hold values too large for {similarity} scores in "
        f"{str(dtype).replace('torch.', '')}: largest magnitudes {a:.3g} and {b:.3g} over {width} features "
        f"can overflow it; scale the embeddings down{hint}."
    )


def check_finite(name: str, x: Tensor) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or an infinity (reads the data: a host sync)."""
    if bool(finite_values(x)):
        return
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        first = bad.reshape(-1).nonzero()[0, 0]
        value = x.reshape(-1)[first].item()
        raise ValueError(
            f"Argument `{name}` must hold finite values, got {value!r} "
            f"(at flat position {int(first)}, shape {tuple(x.shape)})."
        )


def check_same_device(names: tuple[str, str], a: Tensor, b: Tensor) -> None:
    """Raise ``ValueError`` when two tensors live on different devices."""
    if a.device != b.device:
        raise ValueError(
            f"Arguments `{names[0]}` and `{names[1]}` must be on the same device, "
            f"got {a.device} and {b.device}."
        )


def check_same_shape(names: tuple[str, str], a: Tensor, b: Tensor) -> None:
    """Raise ``ValueError`` when two tensors differ in shape."""
    if a.shape != b.shape:
        raise ValueError(
            f"Arguments `{names[0]}` and `{names[1]}` must have the same shape, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}."
        )


def check_paired_embeddings(names: tuple[str, str], a: Tensor, b: Tensor, *, validate_args: bool) -> None:
    """Two views of the same rows: 2-D floating point, at least one row each, same shape and device;
    finite values when ``validate_args`` (a host sync)."""
    check_embeddings(names[0], a)
    check_embeddings(names[1], b)
    check_same_shape(names, a, b)
    check_same_device(names, a, b)
    if check_bool("validate_args", validate_args):
        check_finite(names[0], a)
        check_finite(names[1], b)


# --------------------------------------------------------------------------- retrieval

KArg = Union[int, Sequence[int], None]
Aggregation = Union[str, Callable[..., Tensor]]


def check_retrieval_inputs(
    name: str,
    binary: bool,
    preds: Any,
    target: Any,
    indexes: Any,
    *,
    ignore_index: int | None,
    retrieved: Any = None,
    num_relevant: Any = None,
    validate_args: bool = True,
    unjudged: bool = False,
) -> None:
    """Retrieval inputs of metric ``name``: type and shape checks (always, no host sync); value checks
    when ``validate_args`` (a host sync). ``binary``: the target must be 0/1 (else graded, ``>= 0``);
    ``unjudged``: -1 and -2 are allowed too (trec_eval's unjudged documents, for infAP)."""
    _check_scores_and_relevance(preds, target)
    _check_query_layout(preds, indexes)
    _check_judged(preds, indexes, retrieved, num_relevant)
    if validate_args:
        allowed = "binary (bool or 0/1)"
        if unjudged and target.dtype != torch.bool:
            target = torch.where((target == -1) | (target == -2), torch.zeros((), dtype=target.dtype), target)
            allowed = "1 (relevant), 0 (judged non-relevant), -1 (not in the qrels) or -2 (not judged)"
        _check_retrieval_values(name, binary, preds, target, ignore_index, num_relevant, allowed)


def _check_scores_and_relevance(preds: Any, target: Any) -> None:
    """Tensors: floating-point scores, bool / integer / float relevance of the same shape."""
    for arg, value in (("preds", preds), ("target", target)):
        if not isinstance(value, Tensor):
            raise ArgumentKindError(f"Argument `{arg}` must be a torch.Tensor, got {type(value).__name__}.")
    if not preds.is_floating_point():
        raise ArgumentKindError(f"Argument `preds` must be a floating-point tensor, got dtype {preds.dtype}.")
    if target.is_complex() or not (
        target.dtype == torch.bool or is_integer(target) or target.is_floating_point()
    ):
        raise ArgumentKindError(
            f"Argument `target` must be a bool, integer or float tensor, got dtype {target.dtype}."
        )
    if preds.shape != target.shape:
        raise ValueError(
            f"Arguments `preds` and `target` must have the same shape, got {tuple(preds.shape)} "
            f"and {tuple(target.shape)}."
        )


def check_ranking_batch(
    batch: dict[str, Any],
    *,
    validate_args: bool,
    metric: str,
    binary: bool,
    ignore_index: int | None,
    unjudged: bool = False,
) -> None:
    """The batch rule of the retrieval metrics' ``update`` (``preds``, ``target``, ``indexes``):
    ``check_retrieval_inputs`` under the metric's settings."""
    check_retrieval_inputs(
        metric, binary, batch["preds"], batch["target"], batch["indexes"],
        ignore_index=ignore_index, validate_args=validate_args, unjudged=unjudged,
    )  # fmt: skip


def _check_query_layout(preds: Tensor, indexes: Any) -> None:
    """1-D or 2-D input without ``indexes``; with them, integer ids of ``preds``' shape; not empty."""
    if indexes is None:
        if preds.ndim not in (1, 2):
            raise ValueError(
                "Without `indexes`, `preds` must be 1-D (one query) or 2-D (queries, documents), "
                f"got shape {tuple(preds.shape)}."
            )
    else:
        if not isinstance(indexes, Tensor):
            raise ArgumentKindError(
                f"Argument `indexes` must be a torch.Tensor or None, got {type(indexes).__name__}."
            )
        if not is_integer(indexes):
            raise ArgumentKindError(
                f"Argument `indexes` must be an integer tensor, got dtype {indexes.dtype}."
            )
        if indexes.shape != preds.shape:
            raise ValueError(
                f"Argument `indexes` must have the shape of `preds` {tuple(preds.shape)}, "
                f"got {tuple(indexes.shape)}."
            )
    if preds.numel() == 0:
        raise ValueError(f"Arguments `preds` and `target` must not be empty, got shape {tuple(preds.shape)}.")


def _check_judged(preds: Tensor, indexes: Any, retrieved: Any, num_relevant: Any) -> None:
    """The trec_eval-style ``retrieved`` mask and ``num_relevant`` counts (functional only)."""
    if retrieved is not None:
        if not isinstance(retrieved, Tensor) or retrieved.dtype != torch.bool:
            got = retrieved.dtype if isinstance(retrieved, Tensor) else type(retrieved).__name__
            raise ArgumentKindError(f"Argument `retrieved` must be a bool tensor, got {got}.")
        if retrieved.shape != preds.shape:
            raise ValueError(
                f"Argument `retrieved` must have the shape of `preds` {tuple(preds.shape)}, "
                f"got {tuple(retrieved.shape)}."
            )
    if num_relevant is not None:
        if not isinstance(num_relevant, Tensor) or not is_integer(num_relevant):
            got = num_relevant.dtype if isinstance(num_relevant, Tensor) else type(num_relevant).__name__
            raise ArgumentKindError(f"Argument `num_relevant` must be an integer tensor, got {got}.")
        if indexes is None:
            queries = preds.shape[0] if preds.ndim == 2 else 1
            if num_relevant.numel() != queries or num_relevant.ndim > 1:
                raise ValueError(
                    f"Argument `num_relevant` must have one entry per query ({queries}), "
                    f"got shape {tuple(num_relevant.shape)}."
                )


def _check_retrieval_values(
    name: str,
    binary: bool,
    preds: Tensor,
    target: Tensor,
    ignore_index: int | None,
    num_relevant: Any,
    allowed: str = "binary (bool or 0/1)",
) -> None:
    """Value checks (a host sync): no NaN score, a binary (``allowed`` says which values) or graded
    (``>= 0``) target, counts ``>= 0``."""
    if bool(torch.isnan(preds).any()):
        raise ValueError("Argument `preds` must not contain NaN, got a tensor with NaN values.")
    if ignore_index is None:
        counted = target
    else:
        counted = torch.where(target == ignore_index, torch.zeros((), dtype=target.dtype), target)
    if counted.dtype == torch.bool:
        pass  # always binary and non-negative
    elif binary:
        lo, hi = torch.aminmax(counted)
        bad_value = bool(lo < 0) or bool(hi > 1)
        if not bad_value and counted.is_floating_point():
            bad_value = bool(((counted != 0) & (counted != 1)).any())
        if bad_value:
            bad = (counted != 0) & (counted != 1)
            raise ValueError(
                f"Argument `target` must be {allowed} for `{name}`, "
                f"got the value {counted[bad].reshape(-1)[0].item()!r}."
            )
    else:
        lo, hi = torch.aminmax(counted)
        if bool(lo < 0) or not bool(torch.isfinite(hi.double())):
            bad = ~torch.isfinite(counted.double()) | (counted < 0)
            raise ValueError(
                f"Argument `target` must hold finite relevance grades >= 0 for `{name}`, "
                f"got the value {counted[bad].reshape(-1)[0].item()!r}."
            )
    if num_relevant is not None and bool((num_relevant < 0).any()):
        raise ValueError(f"Argument `num_relevant` must be >= 0, got {num_relevant.tolist()!r}.")


def is_integer(x: Tensor) -> bool:
    """An integer (not bool, not floating, not complex) tensor."""
    return not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool


# --------------------------------------------------------------------------- neighbours


def check_labels(name: str, labels: Tensor, n_rows: int, rows_name: str) -> None:
    """Labels of ``n_rows`` rows: 1-D ``(n,)`` or 2-D ``(n, w)``, real numbers."""
    if labels.ndim not in (1, 2):
        raise ValueError(
            f"Argument `{name}` must be 1-D (n,) or 2-D (n, w) labels, got shape {tuple(labels.shape)}."
        )
    if labels.shape[0] != n_rows:
        raise ValueError(
            f"Argument `{name}` must have one label per row of `{rows_name}` ({n_rows} rows), "
            f"got shape {tuple(labels.shape)}."
        )
    if labels.is_complex():
        raise ArgumentKindError(f"Argument `{name}` must hold real numbers, got dtype {labels.dtype}.")


def check_neighbor_inputs(q: Tensor, r: Tensor, ql: Tensor, rl: Tensor) -> None:
    """Query and reference embeddings with their labels, as the kNN metrics take them."""
    check_embeddings("query", q)
    check_embeddings("reference", r)
    if q.shape[1] != r.shape[1]:
        raise ValueError(
            f"Arguments `query` and `reference` must have the same number of features, "
            f"got {q.shape[1]} and {r.shape[1]}."
        )
    check_labels("query_labels", ql, q.shape[0], "query")
    check_labels("reference_labels", rl, r.shape[0], "reference")
    if ql.ndim != rl.ndim or (ql.ndim == 2 and ql.shape[1] != rl.shape[1]):
        raise ValueError(
            "Arguments `query_labels` and `reference_labels` must have the same label shape, "
            f"got {tuple(ql.shape)} and {tuple(rl.shape)}."
        )


def check_metric_names(
    name: str, names: Any, known: Sequence[str], *, allow_empty: bool = True
) -> tuple[str, ...]:
    """A tuple or list of metric names, each one of ``known``."""
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or (not allow_empty and not names):
        what = "a non-empty tuple or list" if not allow_empty else "a tuple or list"
        raise ArgumentKindError(f"Argument `{name}` must be {what} of metric names, got {names!r}.")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"Argument `{name}` names unknown metrics {unknown}; known metrics: {sorted(known)}."
        )
    return tuple(names)


class UnsupportedCombinationError(ValueError, NotImplementedError):
    """Options that cannot be combined; also a ``NotImplementedError``, which pytorch-metric-learning
    raises for clustering metrics with a custom label comparison."""


def check_no_clustering_with_custom_labels(label_comparison_fn: Any, clustering: Sequence[str]) -> None:
    """Clustering metrics compare cluster ids with labels by equality: not with a custom comparison."""
    if label_comparison_fn is not None and clustering:
        raise UnsupportedCombinationError(
            f"Argument `label_comparison_fn` cannot be used with clustering metrics {list(clustering)}: "
            f"exclude them, e.g. AccuracyCalculator(exclude={tuple(clustering)!r}, "
            "label_comparison_fn=...)."
        )


def check_same_settings(owner: str, ours: Mapping[str, str], theirs: Mapping[str, str], action: str) -> None:
    """A state computed with other settings (``ValueError`` naming each differing setting)."""
    differ = [n for n in sorted(set(ours) | set(theirs)) if ours.get(n) != theirs.get(n)]
    if not differ:
        return
    detail = ", ".join(f"`{n}`: {theirs.get(n, '(absent)')} (ours: {ours.get(n)})" for n in differ)
    raise ValueError(
        f"{owner}.{action}: the incoming state was computed with different settings ({detail}); states "
        "of different settings cannot be mixed. Was it saved before a setting such as `k` changed?"
    )


def as_float(x: Tensor) -> Tensor:
    """Embeddings as floating point: integer (and bool) embeddings become float32, as pytorch-metric-
    learning casts them; floating-point ones are kept."""
    return x if x.is_floating_point() else x.to(torch.float32)


def check_query_rows_first(q: Tensor, r: Tensor, ql: Tensor, rl: Tensor) -> None:
    """``ref_includes_query=True``: the first ``len(query)`` reference rows and labels are the queries."""
    n = q.shape[0]
    # a NaN row (validation off) is its own row
    if n > r.shape[0] or not (
        torch.allclose(q, r[:n].to(q.dtype), equal_nan=True) and torch.equal(ql, rl[:n])
    ):
        raise ValueError(
            "Argument `ref_includes_query` is True, so the first len(query) rows of `reference` (and of "
            f"`reference_labels`) must equal `query` (and `query_labels`); they differ (query: {n} rows, "
            f"reference: {r.shape[0]} rows)."
        )


def check_class_labels(name: str, labels: Any, rows: Tensor) -> Tensor:
    """One integer label per row of ``rows`` (``(n,)``), as a tensor on ``rows``' device."""
    t = as_tensor(name, labels)
    if not is_integer(t):
        raise ArgumentKindError(f"Argument `{name}` must hold integer labels, got dtype {t.dtype}.")
    if t.ndim != 1 or t.shape[0] != rows.shape[0]:
        raise ValueError(
            f"Argument `{name}` must be 1-D with one label per row ({rows.shape[0]} rows), "
            f"got shape {tuple(t.shape)}."
        )
    return t.to(rows.device)


def check_ids(name: str, ids: Tensor, n_rows: int) -> Tensor:
    """``(n_rows,)`` integer ids as int64 (no uniqueness check: that needs every batch)."""
    if ids.ndim != 1 or ids.shape[0] != n_rows:
        raise ValueError(
            f"Argument `{name}` must be 1-D with one id per embedding row ({n_rows}), "
            f"got shape {tuple(ids.shape)}."
        )
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ArgumentKindError(f"Argument `{name}` must hold integer ids, got dtype {ids.dtype}.")
    return ids.to(torch.int64)


def check_row_pair(names: tuple[str, str], x: Tensor, y: Tensor) -> None:
    """Two representations of the same samples: the same number of rows, on the same device."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"Arguments `{names[0]}` and `{names[1]}` must have the same number of rows (one per sample), "
            f"got shapes {tuple(x.shape)} and {tuple(y.shape)}."
        )
    if x.device != y.device:
        raise ValueError(
            f"Arguments `{names[0]}` and `{names[1]}` must be on the same device, "
            f"got {x.device} and {y.device}."
        )


def check_per_query_metric(name: str, options: Sequence[Any] | None, aggregation: Any) -> None:
    """A metric wrapped for per-query values (``ConfidenceInterval``): ``name`` is its class,
    ``options`` its option table (``None``: not a registered metric) and ``aggregation`` the value it
    was built with. Only a table with ``aggregation``, built with ``aggregation="none"``, returns one
    value per query (the retrieval and dense metrics); anything else is a ``ValueError``."""
    if options is None or not any(o.name == "aggregation" for o in options):
        raise ValueError(
            "Argument `metric` must be an embedmetrics metric that returns per-query values (one with an "
            f"`aggregation` argument: retrieval and dense metrics), got {name}."
        )
    if not (isinstance(aggregation, str) and aggregation == "none"):
        raise ValueError(
            "Argument `metric` must return per-query values: build it with aggregation='none', "
            f"got aggregation={aggregation!r}."
        )


def check_corpus_embeddings(given: Any, n_documents: int) -> Tensor | None:
    """``corpus_embeddings`` (sentence-transformers' evaluator) as a tensor of one row per corpus
    document (``None`` kept): strided, or sparse COO (densified chunk by chunk by its caller); other
    layouts are densified. Another shape is a ``ValueError`` naming the argument and the shape."""
    if given is None:
        return None
    rows = torch.as_tensor(given)
    if rows.layout not in (torch.strided, torch.sparse_coo):
        rows = rows.to_dense()
    if rows.ndim != 2 or rows.shape[0] != n_documents:
        raise ValueError(
            f"Argument `corpus_embeddings` must have one row per corpus document ({n_documents} "
            f"rows), got a tensor of shape {tuple(rows.shape)}."
        )
    return rows
