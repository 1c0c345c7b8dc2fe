"""The retrieval family: one declaration per metric, and everything both faces share.

A retrieval metric is declared once, in ``METRICS``: its name, its per-query closed form (a
function of ``RankedRows``), whether its target is binary, whether
it takes a cut-off, and its docstring fragments. The functional twin
(``embedmetrics.functional.retrieval``) and the module metric (``embedmetrics.retrieval``) are
thin faces over it: they keep explicit signatures (for IDEs and the API reference), and their
docstrings are generated from the declaration by ``documented`` (one template, no copies).

Adding a metric: its closed form in ``ranking`` and its declaration here;
then a one-line face in each of the two public modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

import torch
from torch import Tensor

from embedmetrics._engine.core.arrays import numpy_io
from embedmetrics._engine.core.checks import (
    Aggregation,
    ArgumentKindError,
    KArg,
    check_bool,
    check_number,
    check_retrieval_inputs,
    check_retrieval_options,
)
from embedmetrics._engine.ranking import measures as ranking
from embedmetrics._engine.ranking.measures import RankedRows

Ks = tuple[Optional[int], ...]


@dataclass(frozen=True)
class MetricOptions:
    """Options that only some metrics take (each declares which, in ``RetrievalDeclaration.options``)."""

    adaptive_k: bool = False
    max_fpr: Optional[float] = None


PerQuery = Callable[[RankedRows, Ks, MetricOptions], Tensor]

#: The documentation of each metric-specific option.
OPTION_DOCS = {
    "adaptive_k": "divide by ``min(k, n)`` (``n`` ranked documents of the query) instead of ``k``.",
    "max_fpr": (
        "``None`` (the whole ROC curve) or a number in ``(0, 1]``: McClish's standardised partial\n"
        "    area up to this false-positive rate, as torchmetrics and scikit-learn compute it."
    ),
}


def check_options(metric_name: str, allowed: tuple[str, ...], **given: object) -> MetricOptions:
    """Validate the metric-specific options ``given`` (left at their defaults when not ``allowed``)."""
    defaults = MetricOptions()
    for name, value in given.items():
        if name not in allowed and value != getattr(defaults, name):
            raise ArgumentKindError(
                f"The {metric_name} metric has no argument `{name}`, got {name}={value!r}."
            )
    adaptive_k = check_bool("adaptive_k", given.get("adaptive_k", False))
    max_fpr = given.get("max_fpr")
    if max_fpr is not None:
        max_fpr = check_number("max_fpr", max_fpr, positive=True)
        if max_fpr > 1:
            raise ValueError(
                f"Argument `max_fpr` must be None or a number in (0, 1], got {given['max_fpr']!r}."
            )
    return MetricOptions(adaptive_k=adaptive_k, max_fpr=max_fpr)


@dataclass(frozen=True)
class RetrievalDeclaration:
    """The declaration of one retrieval metric (see the module docstring)."""

    name: str
    per_query: PerQuery
    summary: str
    functional: str
    module: str
    details: str = ""
    binary: bool = True
    cutoff: bool = True
    k_doc: str = "cut-off: ``None`` (all documents), an int, or a sequence of ints (one value per k)."
    target_doc: str = "relevance (bool or 0/1)."
    functional_example: str = ""
    module_target: str = "[False, False, True, False, True, False, True]"
    module_value: str = "tensor(0.7500)"
    module_args: str = ""
    needs: str = "relevant"  # a query without one is "empty" (empty_target_action)
    higher_is_better: bool = True
    module_empty_default: str = "neg"
    options: tuple[str, ...] = ()  # metric-specific options (see ``MetricOptions``)
    judgements: bool = True  # takes ``retrieved`` / ``num_relevant`` (documents outside the input)
    values_per_cutoff: int = 1  # per-query values for each cut-off (a curve: precision and recall)
    k_name: str = "k"  # the first cut-off argument of the faces (``top_k`` where torchmetrics has only it)

    def __reduce__(self) -> tuple[Callable[[str], RetrievalDeclaration], tuple[str]]:
        # the closed forms are lambdas: pickle by name (ddp_spawn, DataLoader workers)
        return (_metric_named, (self.name,))


def _metric_named(name: str) -> RetrievalDeclaration:
    return CURVE if name == CURVE.name else METRICS[name]


METRICS: dict[str, RetrievalDeclaration] = {
    m.name: m
    for m in (
        RetrievalDeclaration(
            "hit_rate",
            lambda st, ks, _: ranking.hit_rate(st, ks),
            "Hit rate: 1 if at least one relevant document is among the top ``k``, else 0.",
            functional="retrieval_hit_rate",
            module="RetrievalHitRate",
            functional_example=(
                ">>> retrieval_hit_rate(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)\n"
                "tensor(1.)\n"
                ">>> indexes = tensor([0, 0, 0, 1, 1, 1, 1])\n"
                ">>> preds = tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])\n"
                ">>> target = tensor([True, False, False, False, True, False, True])\n"
                ">>> retrieval_hit_rate(preds, target, k=(1, 2), indexes=indexes)\n"
                "tensor([0.0000, 0.5000])"
            ),
            module_target="[True, False, False, False, True, False, True]",
            module_args="k=2",
            module_value="tensor(0.5000)",
        ),
        RetrievalDeclaration(
            "reciprocal_rank",
            lambda st, ks, _: ranking.reciprocal_rank(st, ks),
            (
                "Reciprocal rank of the first relevant document (0 if none is in the "
                "top ``k``); MRR when averaged."
            ),
            functional="retrieval_reciprocal_rank",
            module="RetrievalMRR",
            k_doc="only ranks ``<= k`` count (``None``: all); an int or a sequence of ints.",
            functional_example=(
                ">>> retrieval_reciprocal_rank(tensor([0.2, 0.3, 0.5]), tensor([False, True, False]))\n"
                "tensor(0.5000)\n"
                ">>> retrieval_reciprocal_rank(tensor([[0.5, 0.5], [0.9, 0.1]]), tensor([[1, 0], [0, 1]]),\n"
                '...                           aggregation="none")\n'
                "tensor([0.7500, 0.5000])"
            ),
        ),
        RetrievalDeclaration(
            "precision",
            lambda st, ks, opt: ranking.precision(st, ks, opt.adaptive_k),
            "Precision at ``k``: relevant documents in the top ``k``, divided by ``k``.",
            functional="retrieval_precision",
            module="RetrievalPrecision",
            k_doc="cut-off (``None``: all ranked documents, dividing by their number); an int or a sequence.",
            functional_example=(
                ">>> retrieval_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)\n"
                "tensor(0.5000)\n"
                ">>> retrieval_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=5, "
                "adaptive_k=True)\n"
                "tensor(0.6667)"
            ),
            module_args="k=2",
            module_value="tensor(0.5000)",
            options=("adaptive_k",),
        ),
        RetrievalDeclaration(
            "recall",
            lambda st, ks, _: ranking.recall(st, ks),
            "Recall at ``k``: relevant documents in the top ``k``, divided by all relevant documents ``R``.",
            functional="retrieval_recall",
            module="RetrievalRecall",
            k_doc="cut-off (``None``: all); an int or a sequence of ints.",
            functional_example=(
                ">>> retrieval_recall(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)\n"
                "tensor(0.5000)"
            ),
            module_args="k=2",
        ),
        RetrievalDeclaration(
            "r_precision",
            lambda st, ks, _: ranking.r_precision(st),
            "R-precision: relevant documents in the top ``R``, divided by ``R`` (the number of relevant).",
            functional="retrieval_r_precision",
            module="RetrievalRPrecision",
            cutoff=False,
            functional_example=(
                ">>> retrieval_r_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]))\n"
                "tensor(0.5000)"
            ),
        ),
        RetrievalDeclaration(
            "average_precision",
            lambda st, ks, _: ranking.average_precision(st, ks),
            (
                "Average precision (MAP when averaged): precision at each relevant "
                "rank ``<= k``, summed, over ``R``."
            ),
            functional="retrieval_average_precision",
            module="RetrievalMAP",
            details=(
                "Unlike torchmetrics, AP@k divides by ``R`` (all relevant documents), as trec_eval and "
                "ranx do."
            ),
            k_doc="cut-off (``None``: all); an int or a sequence of ints.",
            functional_example=(
                ">>> retrieval_average_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]))\n"
                "tensor(0.8333)\n"
                ">>> retrieval_average_precision(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)\n"
                "tensor(0.5000)"
            ),
            module_value="tensor(0.7917)",
        ),
        RetrievalDeclaration(
            "fall_out",
            lambda st, ks, _: ranking.fall_out(st, ks),
            "Fall-out at ``k``: irrelevant documents in the top ``k``, divided by all irrelevant documents.",
            functional="retrieval_fall_out",
            module="RetrievalFallOut",
            details="Lower is better. A query with no irrelevant document is the empty case here.",
            functional_example=(
                ">>> retrieval_fall_out(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]), k=2)\n"
                "tensor(1.)"
            ),
            module_args="k=2",
            module_value="tensor(0.5000)",
            needs="irrelevant",
            higher_is_better=False,
            module_empty_default="pos",
        ),
        RetrievalDeclaration(
            "auroc",
            lambda st, ks, opt: ranking.auroc(st, ks, opt.max_fpr),
            ("Area under the ROC curve of each query's ranking (of its top ``k`` documents with ``top_k``)."),
            functional="retrieval_auroc",
            module="RetrievalAUROC",
            details=(
                "Tied scores count as halves (the Mann-Whitney statistic), which is the exact expected\n"
                "area under a random order of tied documents; with ``max_fpr`` and ``top_k`` too, the\n"
                "expectation is exact (torchmetrics interpolates the ROC curve linearly across a tie block\n"
                "instead, which differs only where ``max_fpr`` or the top ``k`` cuts one). A top ``k``\n"
                "without both a relevant and an irrelevant document scores 0, as in torchmetrics."
            ),
            k_doc=(
                "only the top ``k`` documents of each query are scored (``None``: all); an int or a\n"
                "    sequence of ints."
            ),
            functional_example=(
                ">>> retrieval_auroc(tensor([0.2, 0.3, 0.5]), tensor([True, False, True]))\n"
                "tensor(0.5000)\n"
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.4, 0.1]), tensor([1, 0, 1, 0, 0])\n"
                ">>> retrieval_auroc(preds, target, max_fpr=0.5)\n"
                "tensor(0.7778)"
            ),
            module_args="max_fpr=0.5",
            module_value="tensor(0.6667)",
            options=("max_fpr",),
            k_name="top_k",
            judgements=False,
        ),
        RetrievalDeclaration(
            "normalized_dcg",
            lambda st, ks, _: ranking.normalized_dcg(st, ks),
            (
                "Normalised DCG at ``k`` with graded relevance: ``Σ gain / log2(rank "
                "+ 1)`` over its ideal value."
            ),
            functional="retrieval_normalized_dcg",
            module="RetrievalNormalizedDCG",
            binary=False,
            k_doc="cut-off (``None``: all); an int or a sequence of ints.",
            target_doc="relevance grades (bool, int or float, ``>= 0``); the gain is the grade itself.",
            functional_example=(
                ">>> retrieval_normalized_dcg(tensor([0.1, 0.2, 0.3, 4.0, 70.0]), tensor([10, 0, 0, 1, 5]))\n"
                "tensor(0.6957)"
            ),
            module_target="[0, 1, 0, 0, 1, 0, 2]",
            module_value="tensor(0.6254)",
        ),
    )
}


#: Precision and recall at every cut-off of ``ks`` (one ranking): the curve metrics'
#: (``embedmetrics._engine.ranking.curves``) per-query values, ``(Q, 2·len(ks))``. Not in ``METRICS``:
#: their faces return several tensors and document themselves.
CURVE = RetrievalDeclaration(
    "precision_recall_curve",
    lambda st, ks, opt: torch.cat([ranking.precision(st, ks, opt.adaptive_k), ranking.recall(st, ks)], 1),
    "Precision and recall at every k.",
    functional="retrieval_precision_recall_curve",
    module="RetrievalPrecisionRecallCurve",
    options=("adaptive_k",),
    values_per_cutoff=2,
)


# --------------------------------------------------------------------------- computation


def query_values(
    metric: RetrievalDeclaration,
    preds: Tensor,
    target: Tensor,
    indexes: Tensor | None,
    *,
    ks: Ks,
    ties: str,
    ignore_index: int | None,
    options: MetricOptions = MetricOptions(),
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = False,
) -> tuple[Tensor, Tensor]:
    """Per-query values ``(Q, len(ks))`` and status ``(Q,)`` (see ``ranking.STATUS_*``).

    Without ``indexes`` (1-D or 2-D input) nothing synchronises with the host, so the module metrics
    call this from ``update``. With ``indexes`` the grouping has a dynamic shape (``compute`` only).
    """
    ignored = None if ignore_index is None else target == ignore_index
    gain = target if ignored is None else target.masked_fill(ignored, 0)
    inactive = ignored
    if retrieved is not None:
        inactive = ~retrieved if inactive is None else inactive | ~retrieved
    judged = None if ignored is None else ~ignored
    if indexes is None and preds.ndim == 1:  # one query
        preds, gain = preds.unsqueeze(0), gain.unsqueeze(0)
        inactive = None if inactive is None else inactive.unsqueeze(0)
        judged = None if judged is None else judged.unsqueeze(0)
    values, status, found = ranking.evaluate(
        lambda st: metric.per_query(st, ks, options),
        preds,
        gain,
        ks=ks,
        indexes=indexes,
        inactive=inactive,
        judged=judged,
        num_relevant=None if num_relevant is None else num_relevant.reshape(-1),
        ties=ties,
        needs=metric.needs,
    )
    if validate_args and num_relevant is not None and bool((num_relevant.reshape(-1) < found).any()):
        raise ValueError(
            "Argument `num_relevant` must be at least the number of relevant documents given, "
            f"got {num_relevant.reshape(-1).tolist()!r} for {found.tolist()!r} found."
        )
    return values, status


def out_dtype(preds: Tensor) -> torch.dtype:
    """The result dtype: float64 for float64 scores, float32 otherwise."""
    return torch.float64 if preds.dtype == torch.float64 else torch.float32


def finish(
    values: Tensor,
    status: Tensor,
    *,
    empty_target_action: str,
    aggregation: Aggregation,
    single: bool,
    dtype: torch.dtype,
    needs: str = "relevant",
) -> Tensor:
    """Apply ``empty_target_action`` and the aggregation; squeeze the k dimension for a scalar ``k``."""
    per_query = ranking.resolve_empty(values, status, empty_target_action, needs)
    out = ranking.aggregate(per_query, aggregation).to(dtype)
    return out[..., 0] if single else out


def evaluate(
    name: str,
    preds: Tensor,
    target: Tensor,
    k: KArg = None,
    *,
    indexes: Tensor | None = None,
    top_k: KArg = None,
    ties: str = "average",
    empty_target_action: str = "neg",
    ignore_index: int | None = None,
    aggregation: Aggregation = "mean",
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    validate_args: bool = True,
    adaptive_k: bool = False,
    max_fpr: float | None = None,
) -> Tensor:
    """The whole functional computation of metric ``name``: validate, rank, reduce."""
    metric = METRICS[name]
    ks, single = check_retrieval_options(k, top_k, ties, empty_target_action, ignore_index, aggregation)
    check_bool("validate_args", validate_args)
    options = check_options(metric.name, metric.options, adaptive_k=adaptive_k, max_fpr=max_fpr)
    check_retrieval_inputs(
        metric.name,
        metric.binary,
        preds,
        target,
        indexes,
        ignore_index=ignore_index,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
    values, status = query_values(
        metric,
        preds,
        target,
        indexes,
        ks=ks,
        ties=ties,
        ignore_index=ignore_index,
        options=options,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
    return finish(
        values,
        status,
        empty_target_action=empty_target_action,
        aggregation=aggregation,
        single=single,
        dtype=out_dtype(preds),
        needs=metric.needs,
    )


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
        entries += [(name, OPTION_DOCS[name]) for name in metric.options]
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
        entries += [(name, OPTION_DOCS[name]) for name in metric.options]
    entries += [
        ("ties", _TIES_DOC),
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
    entries += [(name, OPTION_DOCS[name]) for name in metric.options]
    entries.append(
        ("aggregation", _AGGREGATION_DOC + " (2-D rows in update order, then indexed queries by index).")
    )
    if metric.cutoff:
        entries.append(_alias_entry(metric))
    entries += [
        ("ties", _TIES_DOC),
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

    def decorate(obj: Face) -> Face:
        obj.__doc__ = functional_docstring(metric) if face == "functional" else module_docstring(metric)
        if face == "module":
            obj.declaration = metric
            return obj
        return numpy_io(obj)  # the library's one array convention (NumPy in, NumPy out)

    return decorate
