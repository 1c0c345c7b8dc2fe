"""Docstrings of the retrieval faces, written from one declaration per metric (and the curves'), and
the decorators that attach them: the module class and the functional twin of a metric share every
sentence, so they cannot drift apart. Documentation only: nothing here computes."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any, TypeVar, cast

from embedmetrics._engine.core.inputs import numpy_io
from embedmetrics._engine.ranking.options import OPTIONS
from embedmetrics._engine.ranking.retrieval import CURVE, METRICS, RetrievalDeclaration


def option_doc(metric: RetrievalDeclaration, name: str) -> str:
    """The document line of option ``name`` of ``metric``, from its option table (wrapped)."""
    (option,) = (o for o in OPTIONS[metric.module] if o.name == name)
    return "\n    ".join(textwrap.wrap(option.doc + ".", 96))


def options_signature(
    fn: Callable[..., Any], options: Any, extra: tuple[tuple[str, Any, str], ...] = ()
) -> inspect.Signature:
    """``fn``'s signature with every option of ``options`` (and the ``(name, default, annotation)``
    of ``extra``) it takes through ``**kwargs`` written out as keyword-only parameters: what
    ``inspect.signature``, ``help`` and the API reference show."""
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    rest = [p for p in params if p.kind is p.VAR_KEYWORD]
    named = [p for p in params if p.kind is not p.VAR_KEYWORD]
    taken = {p.name for p in named}
    written = [*extra, *((o.name, o.default, o.annotation) for o in options)]
    for name, default, annotation in written:
        if name not in taken:
            named.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
                )
            )
            taken.add(name)
    keep_rest = rest if fn.__name__ == "__init__" else []  # a module passes the rest to torchmetrics
    return signature.replace(parameters=[*named, *keep_rest])


def _inputs_and_alias(metric: RetrievalDeclaration, face: str) -> tuple[tuple[str, Any, str], ...]:
    """The keyword-only parameters besides the options: ``indexes``, the alias of ``k``, the judgements."""
    extra: list[tuple[str, Any, str]] = [("indexes", None, "Tensor | None")] if face == "functional" else []
    if metric.cutoff and metric is not CURVE:
        extra.append(("top_k" if metric.k_name == "k" else "k", None, "int | Sequence[int] | None"))
    if metric.judgements and face == "functional" and metric is not CURVE:
        extra += [("retrieved", None, "Tensor | None"), ("num_relevant", None, "Tensor | None")]
    return tuple(extra)


def _module_signature(cls: Any, metric: RetrievalDeclaration) -> Any:
    """A module class whose own ``__init__`` takes options through ``**kwargs``: its signature with them
    written out."""
    init = vars(cls).get("__init__")
    if init is not None:
        init.__signature__ = options_signature(
            init, OPTIONS[cls.__name__], _inputs_and_alias(metric, "module")
        )
    return cls


def full_signature(
    fn: Callable[..., Any], metric: RetrievalDeclaration, table: str = ""
) -> inspect.Signature:
    """A face's signature with its options written out (``table``: the option table's name)."""
    return options_signature(fn, OPTIONS[table or metric.module], _inputs_and_alias(metric, "functional"))


# --------------------------------------------------------------------------- docstrings

_JUDGEMENT_ENTRIES = [
    (
        "retrieved",
        "bool mask, same shape as ``preds``; ``False`` marks a judged document the system\n"
        "    did not return: it counts in ``R`` (and the ideal DCG) but is never ranked.",
    ),
    (
        "num_relevant",
        "per query, the total number of relevant documents, including ones absent from\n"
        "    the input (one entry per row, or per distinct index in ascending order); must be at least\n"
        "    the relevant documents given.",
    ),
]


def _alias_entry(metric: RetrievalDeclaration) -> tuple[str, str]:
    """The doc entry of the cut-off's alias (``top_k`` for ``k``, or ``k`` for ``top_k``)."""
    if metric.k_name == "k":
        return ("top_k", "alias of ``k`` (torchmetrics 1.x name); an error if both are given and differ.")
    return ("k", "alias of ``top_k`` (the name of the other metrics); an error if both are given and differ.")


_TIES_DOC = (
    "``'average'`` (expected value over a uniformly random order of tied scores),\n"
    "    ``'pessimistic'`` (irrelevant first) or ``'optimistic'`` (relevant first)."
)


def _ties_doc(metric: RetrievalDeclaration) -> str:
    """The tie policies of ``metric``: every one, or its own option's line where it offers fewer."""
    (option,) = (o for o in OPTIONS[metric.module] if o.name == "ties")
    return _TIES_DOC if option.default == "average" else option_doc(metric, "ties")


def _empty_doc(metric: RetrievalDeclaration, raises: str = "raises") -> str:
    return (
        f"a query with no {metric.needs} document counts as 0 (``'neg'``), 1\n"
        f"    (``'pos'``), is left out (``'skip'``; 0 if all are) or {raises} (``'error'``)."
    )


_AGGREGATION_DOC = (
    "``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or\n"
    "    ``'none'`` for the per-query values"
)


def args_section(entries: list[tuple[str, str]]) -> str:
    lines = ["Args:"]
    for name, text in entries:
        first, *rest = text.split("\n")
        lines.append(f"    {name}: {first}")
        lines.extend(f"    {line}" for line in rest)
    return "\n".join(lines)


def _indent(text: str, spaces: int = 4) -> str:
    return "\n".join(" " * spaces + line if line else line for line in text.split("\n"))


def functional_docstring(metric: RetrievalDeclaration) -> str:
    """The functional twin's docstring, from the declaration."""
    entries = [("preds", "scores (float), higher is better."), ("target", metric.target_doc)]
    if metric.cutoff:
        entries.append((metric.k_name, metric.k_doc))
    if metric.k_name == "top_k":
        entries += [(name, option_doc(metric, name)) for name in metric.options]
    entries.append(
        (
            "indexes",
            "query id of every document (integer tensor, same shape as ``preds``). ``None``: 1-D\n"
            "    input is one query, 2-D input ``(queries, documents)`` is one query per row.",
        )
    )
    if metric.cutoff:
        entries.append(_alias_entry(metric))
    if metric.k_name == "k":
        entries += [(name, option_doc(metric, name)) for name in metric.options]
    entries += [
        ("ties", _ties_doc(metric)),
        ("empty_target_action", _empty_doc(metric)),
        ("ignore_index", "documents whose target equals this value are removed."),
        (
            "aggregation",
            _AGGREGATION_DOC + " (in row order for 2-D input, ascending index otherwise).",
        ),
    ]
    if metric.judgements:
        entries += _JUDGEMENT_ENTRIES
    entries += [
        (
            "validate_args",
            "check values (NaN, binary target, ...); needs a host sync. Shapes and dtypes are\n"
            "    always checked.",
        ),
    ]
    returns = "The aggregated value"
    returns += " (scalar, or one value per k for a sequence ``k``)" if metric.cutoff else ""
    returns += "; per-query values for ``aggregation='none'``."
    body = [metric.summary]
    if metric.details:
        body += ["", metric.details]
    body += [
        "",
        args_section(entries),
        "",
        "Returns:",
        f"    {returns}",
        "",
        "Raises:",
        "    ValueError: bad shapes or values, an unknown option, or a query with no relevant document",
        "        under ``empty_target_action='error'``.",
        "    TypeError: wrong dtypes or argument types.",
        "",
        "Examples:",
        "    >>> from torch import tensor",
        f"    >>> from embedmetrics.functional import {metric.functional}",
        _indent(metric.functional_example),
    ]
    return "\n".join(body) + "\n"


def module_docstring(metric: RetrievalDeclaration) -> str:
    """The module metric's docstring, from the declaration."""
    entries = [("empty_target_action", _empty_doc(metric, "makes ``compute`` raise"))]
    entries.append(("ignore_index", "documents whose target equals this value are removed."))
    if metric.cutoff:
        entries.append((metric.k_name, metric.k_doc))
    entries += [(name, option_doc(metric, name)) for name in metric.options]
    entries.append(
        ("aggregation", _AGGREGATION_DOC + " (2-D rows in update order, then indexed queries by index).")
    )
    if metric.cutoff:
        entries.append(_alias_entry(metric))
    entries += [
        ("ties", _ties_doc(metric)),
        (
            "validate_args",
            "check values in ``update`` (needs a host sync); shapes/dtypes are always checked.",
        ),
        ("kwargs", "passed to ``torchmetrics.Metric``."),
    ]
    summary = metric.summary.replace("Hit rate: 1 if", "Hit rate at ``k``: 1 if")
    args = f"({metric.module_args})" if metric.module_args else "()"
    body = [f"{summary} Averaged over queries (a ``torchmetrics.Metric``)."]
    if metric.details:
        body += ["", metric.details]
    body += [
        "",
        "``update(preds, target, indexes)`` takes flat input (queries may span batches and processes:",
        "``indexes`` must then be globally unique) or 2-D ``(queries, documents)`` input without",
        "``indexes`` (each row one query, ranked at once: the state is one value per query). The",
        f"functional twin is [`{metric.functional}`][embedmetrics.functional.{metric.functional}].",
        "",
        args_section(entries),
        "",
        "Examples:",
        "    >>> from torch import tensor",
        f"    >>> from embedmetrics import {metric.module}",
        "    >>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])",
        "    >>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])",
        f"    >>> target = tensor({metric.module_target})",
        f"    >>> {metric.module}{args}(preds, target, indexes=indexes)",
        f"    {metric.module_value}",
    ]
    return "\n".join(body) + "\n"


Face = TypeVar("Face", bound=Any)


def documented(name: str, face: str) -> Callable[[Face], Face]:
    """Decorator of a face (``face="functional"`` or ``"module"``) of metric ``name``: sets its docstring
    from the declaration (and, for a module class, which metric it computes)."""
    metric = METRICS[name]
    doc = functional_docstring(metric) if face == "functional" else module_docstring(metric)
    return _attach(metric, face, doc)


def documented_curve(face: str, fixed_precision: bool) -> Callable[[Face], Face]:
    """Decorator setting a curve face's docstring (and, for a module class, its declaration)."""
    return _attach(CURVE, face, curve_docstring(face, fixed_precision))


def _attach(metric: RetrievalDeclaration, face: str, doc: str) -> Callable[[Face], Face]:
    """Give a face its docstring and its written-out signature; a module class also its declaration, a
    functional the array convention (``numpy_io``)."""

    def decorate(obj: Face) -> Face:
        obj.__doc__ = doc
        if face == "module":
            obj.declaration = metric
            return cast(Face, _module_signature(obj, metric))
        wrapped = numpy_io(obj)  # the library's one array convention (NumPy in, NumPy out)
        # the options written out, on the face and on the function it wraps (which docs tools unwrap to)
        obj.__signature__ = wrapped.__signature__ = full_signature(obj, metric)
        return wrapped

    return decorate


# --------------------------------------------------------------------------- docstrings

_SUMMARY = {
    False: "Precision and recall of each query's top ``k`` documents for every ``k = 1..max_k``.",
    True: (
        "The largest recall at any ``k <= max_k`` whose precision is at least ``min_precision``, and "
        "that ``k``."
    ),
}
_DETAILS = {
    False: (
        "One ranking per query, read at every cut-off (no per-query loop); ties as in every\n"
        "retrieval metric. Over several queries the curves are aggregated point by point."
    ),
    True: (
        "Computed on the aggregated precision-recall curve (per query with ``aggregation='none'``).\n"
        "Equal recalls go to the larger ``k``; when no ``k`` qualifies or the best recall is 0, the\n"
        "recall is 0 and ``k`` is ``max_k`` (as torchmetrics)."
    ),
}
_OPTION_ENTRIES = [
    (
        "max_k",
        "the last cut-off; ``None``: the most documents of any query (ignored ones excluded).\n"
        "    A module fed 2-D input needs it (its per-query state has one value per ``k``).",
    ),
    ("adaptive_k", "precision at ``k`` divides by ``min(k, n)`` (``n`` documents of the query)."),
]
_COMMON_ENTRIES = [
    (
        "ties",
        "``'average'`` (expected value over a random order of tied scores), ``'pessimistic'``\n"
        "    or ``'optimistic'``.",
    ),
    (
        "empty_target_action",
        "a query with no relevant document has the curve 0 (``'neg'``), 1 (``'pos'``), is\n"
        "    left out (``'skip'``) or raises (``'error'``).",
    ),
    ("ignore_index", "documents whose target equals this value are removed."),
    (
        "aggregation",
        "``'mean'``, ``'median'``, ``'min'``, ``'max'``, a callable ``f(values, dim)`` or ``'none'``\n"
        "    (one curve per query), applied to each ``k``.",
    ),
]


def curve_docstring(face: str, fixed_precision: bool) -> str:
    """The docstring of a curve face (``face="functional"`` or ``"module"``)."""
    entries: list[tuple[str, str]] = []
    if face == "functional":
        entries += [("preds", "scores (float), higher is better."), ("target", "relevance (bool or 0/1).")]
    if fixed_precision:
        entries.append(("min_precision", "the precision a cut-off must reach, in ``[0, 1]``."))
    entries += _OPTION_ENTRIES
    if face == "functional":
        entries.append(
            (
                "indexes",
                "query id of every document; ``None``: 1-D input is one query, 2-D input one query\n"
                "    per row.",
            )
        )
    entries += _COMMON_ENTRIES
    entries.append(("validate_args", "check values (needs a host sync); shapes and dtypes always."))
    if face == "module":
        entries.append(("kwargs", "passed to ``torchmetrics.Metric``."))
    returns = (
        "The tuple ``(recall, k)`` of 0-dim tensors (one entry per query with ``aggregation='none'``)."
        if fixed_precision
        else "The tuple ``(precision, recall, top_k)`` of ``(max_k,)`` tensors (precision and recall\n"
        "    ``(queries, max_k)`` with ``aggregation='none'``); for one query with ``adaptive_k``,\n"
        "    ``top_k`` stops at its number of documents."
    )
    body = [_SUMMARY[fixed_precision], "", _DETAILS[fixed_precision], "", args_section(entries), ""]
    if face == "functional":
        body += ["Returns:", f"    {returns}", ""]
    else:  # a class documents what ``compute`` returns in its text (no Returns section)
        body += ["``compute()`` returns t" + returns[1:].replace("\n    ", "\n"), ""]
    body += ["Examples:", *(f"    {line}" for line in _example(face, fixed_precision))]
    return "\n".join(body) + "\n"


def _example(face: str, fixed_precision: bool) -> list[str]:
    name = {
        ("functional", False): "retrieval_precision_recall_curve",
        ("functional", True): "retrieval_recall_at_fixed_precision",
        ("module", False): "RetrievalPrecisionRecallCurve",
        ("module", True): "RetrievalRecallAtFixedPrecision",
    }[face, fixed_precision]
    where = "embedmetrics.functional" if face == "functional" else "embedmetrics"
    lines = [">>> from torch import tensor", f">>> from {where} import {name}"]
    if face == "functional":
        preds, target = "tensor([0.2, 0.3, 0.5])", "tensor([True, False, True])"
        if fixed_precision:
            return [*lines, f">>> {name}({preds}, {target}, min_precision=0.6)", "(tensor(1.), tensor(3))"]
        return [
            *lines,
            f">>> precision, recall, top_k = {name}({preds}, {target}, max_k=2)",
            ">>> precision, recall, top_k",
            "(tensor([1.0000, 0.5000]), tensor([0.5000, 0.5000]), tensor([1, 2]))",
        ]
    lines += [
        ">>> indexes = tensor([0, 0, 0, 0, 1, 1, 1])",
        ">>> preds = tensor([0.4, 0.01, 0.5, 0.6, 0.2, 0.3, 0.5])",
        ">>> target = tensor([True, False, False, True, True, False, True])",
    ]
    if fixed_precision:
        return [
            *lines,
            f">>> {name}(min_precision=0.8, max_k=4)(preds, target, indexes=indexes)",
            "(tensor(0.5000), tensor(1))",
        ]
    return [
        *lines,
        f">>> precision, recall, top_k = {name}(max_k=4)(preds, target, indexes=indexes)",
        ">>> precision",
        "tensor([1.0000, 0.5000, 0.6667, 0.5000])",
        ">>> recall",
        "tensor([0.5000, 0.5000, 1.0000, 1.0000])",
    ]
