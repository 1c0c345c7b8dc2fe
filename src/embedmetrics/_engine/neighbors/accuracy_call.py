"""The two call forms of ``AccuracyCalculator.get_accuracy``, told apart without guessing.

- pytorch-metric-learning 1.x (the seed): ``get_accuracy(query, reference, query_labels,
  reference_labels, embeddings_come_from_same_source, include=(), exclude=())``;
- pytorch-metric-learning 2.x: ``get_accuracy(query, query_labels, reference=None,
  reference_labels=None, ref_includes_query=False, include=(), exclude=())``.

The rule (documented on ``get_accuracy``): the keyword ``embeddings_come_from_same_source`` selects
1.x and ``ref_includes_query`` selects 2.x (both: an error). Without either keyword, a call with at
most two positional arguments, or whose second argument is 1-D (labels; 1.x's second argument is a
2-D embedding matrix), or whose third is ``None``, is 2.x; one whose third argument is 1-D (1.x's
query labels; 2.x's third is a 2-D reference) or whose second argument is the query itself is 1.x.
With 2-D labels in both places, the shapes decide when they fit one form only (a reference has the
query's width; the query labels have the query's rows), then floating-point embeddings next to integer
labels (a float second argument is 1.x's reference). Anything else is ambiguous and rejected with an
error saying which keyword to add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from embedmetrics._engine.core.checks import ArgumentKindError, check_bool

_V1 = ("query", "reference", "query_labels", "reference_labels", "embeddings_come_from_same_source")
_V2 = ("query", "query_labels", "reference", "reference_labels", "ref_includes_query")


@dataclass(frozen=True)
class AccuracyCall:
    """One ``get_accuracy`` call, normalised."""

    query: Any
    reference: Any
    query_labels: Any
    reference_labels: Any
    same_source: bool
    version: int  # 1 or 2: the call form (decides what custom metrics receive as label_counts)
    include: Sequence[str]
    exclude: Sequence[str]


def _ndim(x: Any) -> int | None:
    shape = getattr(x, "shape", None)
    return None if shape is None else len(shape)


def _shape_fit(args: tuple[Any, ...]) -> int | None:
    """1 or 2 when only one form fits the shapes of the first three arguments, else ``None``."""
    shapes = [tuple(getattr(a, "shape", ())) for a in args[:3]]
    if len(shapes) < 3 or any(len(s) != 2 for s in shapes):
        return None
    query, second, third = shapes
    fits_v1 = second[1] == query[1] and third[0] == query[0]  # (reference, query_labels)
    fits_v2 = third[1] == query[1] and second[0] == query[0]  # (query_labels, reference)
    return None if fits_v1 == fits_v2 else (1 if fits_v1 else 2)


def _is_float(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and (
        getattr(dtype, "is_floating_point", False) or getattr(dtype, "kind", "") == "f"
    )


def call_version(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """1 or 2 (see the module docstring); raises on an ambiguous call."""
    v1, v2 = "embeddings_come_from_same_source" in kwargs, "ref_includes_query" in kwargs
    if v1 and v2:
        raise ValueError(
            "get_accuracy got both `embeddings_come_from_same_source` (the 1.x call form) and "
            "`ref_includes_query` (the 2.x call form); pass one."
        )
    if v1 or v2:
        return 1 if v1 else 2
    if len(args) <= 1:
        return 2  # 1.x by keywords would have named embeddings_come_from_same_source
    if _ndim(args[1]) == 1:
        return 2
    if len(args) == 2:
        return 1 if "query_labels" in kwargs else 2
    if args[2] is None:
        return 2
    if _ndim(args[2]) == 1 or args[1] is args[0]:  # 1.x query labels, or the query as its reference
        return 1
    fitting = _shape_fit(args)
    if fitting is not None:
        return fitting
    first, second = _is_float(args[1]), _is_float(args[2])
    if first != second:  # embeddings are floating point, labels are not
        return 1 if first else 2
    raise ValueError(
        "get_accuracy cannot tell the 1.x call form (query, reference, query_labels, reference_labels, "
        "embeddings_come_from_same_source) from the 2.x one (query, query_labels, reference, "
        "reference_labels, ref_includes_query) for this call (2-D labels): pass "
        "`embeddings_come_from_same_source=` (1.x) or `ref_includes_query=` (2.x) by keyword."
    )


def parse_accuracy_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AccuracyCall:
    """Normalise the arguments of ``get_accuracy(*args, **kwargs)`` (either call form)."""
    version = call_version(args, kwargs)
    names = _V1 if version == 1 else _V2
    if len(args) > len(names) + 2:
        raise ArgumentKindError(
            f"get_accuracy takes at most {len(names) + 2} positional arguments, got {len(args)}."
        )
    bound = dict(zip((*names, "include", "exclude"), args))
    for name, value in kwargs.items():
        if name in bound:
            raise ArgumentKindError(f"get_accuracy got multiple values for argument `{name}`.")
        if name not in (*names, "include", "exclude"):
            raise ArgumentKindError(f"get_accuracy got an unexpected keyword argument `{name}`.")
        bound[name] = value
    if "query" not in bound or "query_labels" not in bound:
        raise ArgumentKindError("get_accuracy needs `query` and `query_labels`.")
    if version == 1:
        if "reference" not in bound or "reference_labels" not in bound or names[4] not in bound:
            raise ArgumentKindError(
                "get_accuracy (1.x call form) needs `reference`, `reference_labels` and "
                "`embeddings_come_from_same_source`."
            )
        same = check_bool("embeddings_come_from_same_source", bound[names[4]])
        reference, reference_labels = bound["reference"], bound["reference_labels"]
    else:
        reference, reference_labels = bound.get("reference"), bound.get("reference_labels")
        same = check_bool("ref_includes_query", bound.get("ref_includes_query", False))
        if reference is None:  # 2.x: the query set against itself
            if reference_labels is not None:
                raise ValueError("Argument `reference_labels` was given without `reference`.")
            reference, reference_labels, same = bound["query"], bound["query_labels"], True
        elif reference_labels is None:
            raise ValueError("Argument `reference` was given without `reference_labels`.")
    return AccuracyCall(
        bound["query"],
        reference,
        bound["query_labels"],
        reference_labels,
        same,
        version,
        bound.get("include", ()),
        bound.get("exclude", ()),
    )
