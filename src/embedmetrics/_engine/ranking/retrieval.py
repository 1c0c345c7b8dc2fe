"""The retrieval family: one declaration per metric, and everything both faces share.

A retrieval metric is declared once, in ``METRICS``: its name, its per-query closed form (a
function of ``RankedRows``), whether its target is binary, whether
it takes a cut-off, and its docstring fragments. The functional twin
(``embedmetrics.functional.retrieval``) and the module metric (``embedmetrics.retrieval``) are
thin faces over it: they keep explicit signatures (for IDEs and the API reference), and their
docstrings are generated from the declaration by ``embedmetrics._metric.docstrings.documented``
(one template, no copies; documentation lives outside the engine).

Adding a metric: its closed form in ``measures`` and its declaration here; then a one-line face in
each of the two public modules and an entry in the registry (ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor
from typing_extensions import TypedDict

from embedmetrics._engine.core.checks import Aggregation, KArg, check_retrieval_inputs
from embedmetrics._engine.ranking import measures as ranking
from embedmetrics._engine.ranking import trec_twins
from embedmetrics._engine.ranking.measures import RankedRows
from embedmetrics._engine.ranking.options import COMMON, OPTIONS
from embedmetrics._engine.settings.arguments import normalize_ks
from embedmetrics._engine.settings.options import read_options, refuse_other_settings

Ks = tuple[Optional[int], ...]


@dataclass(frozen=True)
class MetricOptions:
    """Options that only some metrics take (each declares which, in ``RetrievalDeclaration.options``)."""

    adaptive_k: bool = False
    max_fpr: Optional[float] = None
    multiple: float = 1.0
    beta: float = 1.0
    recall_level: float = 0.0


PerQuery = Callable[[RankedRows, Ks, MetricOptions], Tensor]


class CurveOptions(TypedDict, total=False):
    """The keyword-only options of every retrieval functional (their table is ``ranking.options``)."""

    indexes: Tensor | None
    ties: str
    empty_target_action: str
    ignore_index: int | None
    aggregation: Aggregation
    validate_args: bool


class JudgedOptions(CurveOptions, total=False):
    """And the judgements of documents outside the input."""

    retrieved: Tensor | None
    num_relevant: Tensor | None


class RetrievalOptions(JudgedOptions, total=False):
    """And the torchmetrics name of ``k``."""

    top_k: KArg


class AurocOptions(CurveOptions, total=False):
    """AUROC's: ``top_k`` is positional (torchmetrics' order), ``k`` its alias."""

    k: KArg


@dataclass(frozen=True)
class RetrievalSettings:
    """The checked settings of one retrieval face: every option of its table, the cut-offs, and
    whether ``k`` was a scalar."""

    values: dict[str, Any]
    ks: Ks
    single: bool

    @property
    def options(self) -> MetricOptions:
        """The metric-specific options, as the closed forms take them."""
        return MetricOptions(
            self.values.get("adaptive_k", False),
            self.values.get("max_fpr"),
            self.values.get("multiple", 1.0),
            self.values.get("beta", 1.0),
            self.values.get("recall_level", 0.0),
        )


def read_settings(owner: str, module: str, given: dict[str, Any], top_k: KArg = None) -> RetrievalSettings:
    """Check ``given`` against the option table of metric ``module`` (``top_k``: the alias of ``k``); a
    setting the metric does not have raises ``ArgumentKindError`` (``no_setting_reasons`` says why)."""
    table = OPTIONS[module]
    alias = {"top_k": top_k} if top_k is not None and all(o.name != "k" for o in table) else {}
    refuse_other_settings(owner, table, {**given, **alias}, no_setting_reasons(module))
    if top_k is not None:
        k = given.get("k")
        if k is not None and k != top_k:
            raise ValueError(f"Arguments `k` and its alias `top_k` disagree: k={k!r}, top_k={top_k!r}.")
        given = {**given, "k": top_k}
    values = read_options(owner, OPTIONS[module], given)
    ks, single = normalize_ks("k", values.get("k"))
    return RetrievalSettings(values, ks, single)


def no_setting_reasons(module: str) -> dict[str, str]:
    """Why metric ``module`` (a registry name) takes no cut-off (``k``, ``top_k``), read off its option
    table and declaration; empty where it takes one."""
    names = {o.name for o in OPTIONS[module]}
    if "k" in names:
        return {}
    if "max_k" in names:
        why = "it reads every cut-off from 1 to `max_k`"
    else:
        summary = next((m.summary for m in METRICS.values() if m.module == module), "")
        why = "it takes no cut-off" + (f" ({summary.replace('``', '`').rstrip('.')})" if summary else "")
    return {"k": why, "top_k": why}


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
    judgements: bool = True  # takes ``retrieved`` / ``num_relevant`` (documents outside the input)
    values_per_cutoff: int = 1  # per-query values for each cut-off (a curve: precision and recall)
    unjudged: bool = False  # the target may hold -1 (not in the qrels) and -2 (in the pool, not judged)
    k_name: str = "k"  # the first cut-off argument of the faces (``top_k`` where torchmetrics has only it)

    @property
    def options(self) -> tuple[str, ...]:
        """The metric-specific options (beyond ``k`` and the options of every retrieval metric)."""
        common = {"k", *(o.name for o in COMMON)}
        return tuple(o.name for o in OPTIONS[self.module] if o.name not in common)

    def __reduce__(self) -> tuple[Callable[[str], RetrievalDeclaration], tuple[str]]:
        # the closed forms are lambdas: pickle by name (ddp_spawn, DataLoader workers)
        return (_metric_named, (self.name,))


def _metric_named(name: str) -> RetrievalDeclaration:
    return CURVE if name == CURVE.name else METRICS[name]


_SET_K = "the retrieved set: the top ``k`` documents (``None``: every ranked one); an int or a sequence."
_SET_DETAILS = (
    "A set measure of trec_eval's, of the top ``k`` (trec_eval's ``-M k``); trec_eval's ``set_P`` and\n"
    "``set_recall`` are ``retrieval_precision(k, adaptive_k=True)`` and ``retrieval_recall(k)``. With\n"
    "``ties='average'`` it is the exact expected value where a tie block straddles the ``k``-th place.\n"
    "Equals pytrec_eval where no scores tie."
)

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
            "r_precision_multiple",
            lambda st, ks, opt: ranking.r_precision_multiple(st, opt.multiple),
            (
                "trec_eval's ``Rprec_mult``: relevant documents in the top ``k = ⌊multiple·R + 0.9⌋``, "
                "divided by ``k``."
            ),
            functional="retrieval_r_precision_multiple",
            module="RetrievalRPrecisionMultiple",
            details=(
                "``multiple=1`` is R-precision; trec_eval 9 rounds ``multiple·R`` as ``⌊multiple·R + 0.9⌋``\n"
                "(0 relevant: 0). Equals pytrec_eval's ``Rprec_mult_x`` where no scores tie."
            ),
            cutoff=False,
            functional_example=(
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.6]), tensor([1, 0, 1, 0])\n"
                ">>> retrieval_r_precision_multiple(preds, target, multiple=2.0)  # top 4\n"
                "tensor(0.5000)\n"
                ">>> retrieval_r_precision_multiple(preds, target, multiple=0.5)  # top 1\n"
                "tensor(1.)"
            ),
            module_args="multiple=2.0",
            module_value="tensor(0.5000)",
        ),
        RetrievalDeclaration(
            "set_relative_precision",
            lambda st, ks, _: trec_twins.set_relative_precision(st, ks),
            "trec_eval's ``set_relative_P``: relevant documents retrieved over ``min(retrieved, R)``.",
            functional="retrieval_set_relative_precision",
            module="RetrievalSetRelativePrecision",
            details=_SET_DETAILS,
            k_doc=_SET_K,
            functional_example=(
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.6]), tensor([0, 1, 1, 0])\n"
                ">>> retrieval_set_relative_precision(preds, target, k=(1, 2, 4))\n"
                "tensor([0.0000, 0.5000, 1.0000])"
            ),
            module_value="tensor(1.)",
        ),
        RetrievalDeclaration(
            "set_f",
            lambda st, ks, opt: trec_twins.set_f(st, ks, opt.beta),
            "trec_eval's ``set_F``: ``(β + 1)·P·Rc / (β·P + Rc)`` of the retrieved set's precision, recall.",
            functional="retrieval_set_f",
            module="RetrievalSetF",
            details=_SET_DETAILS + "\n``beta`` is trec_eval's parameter (``set_F.0.5``: ``beta=0.5``).",
            k_doc=_SET_K,
            functional_example=(
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.6]), tensor([0, 1, 1, 0])\n"
                ">>> retrieval_set_f(preds, target)  # P = 1/2, recall 1\n"
                "tensor(0.6667)\n"
                ">>> retrieval_set_f(preds, target, k=2, beta=0.5)\n"
                "tensor(0.5000)"
            ),
            module_value="tensor(0.5833)",
        ),
        RetrievalDeclaration(
            "set_map",
            lambda st, ks, _: trec_twins.set_map(st, ks),
            "trec_eval's ``set_map``: set precision times set recall, ``X² / (retrieved·R)``.",
            functional="retrieval_set_map",
            module="RetrievalSetMAP",
            details=_SET_DETAILS,
            k_doc=_SET_K,
            functional_example=(
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.6]), tensor([0, 1, 1, 0])\n"
                ">>> retrieval_set_map(preds, target, k=(2, 3, 4))\n"
                "tensor([0.2500, 0.6667, 0.5000])"
            ),
            module_value="tensor(0.4167)",
        ),
        RetrievalDeclaration(
            "interpolated_precision",
            lambda st, ks, opt: trec_twins.interpolated_precision(st, opt.recall_level),
            (
                "trec_eval's ``iprec_at_recall``: the best precision at or below the rank where recall "
                "reaches ``recall_level``."
            ),
            functional="retrieval_interpolated_precision",
            module="RetrievalInterpolatedPrecision",
            details=(
                "Recall ``recall_level`` is reached at the ``⌊recall_level·R + 0.9⌋``-th relevant document\n"
                "(trec_eval 9's rounding); 0 if fewer are ranked. Tied scores are ordered with relevant\n"
                "documents last (``ties='pessimistic'``, the default) or first (``'optimistic'``);\n"
                "``'average'`` is the exact expected maximum over the orders of tied documents, a sum over\n"
                "each tie block's arrangements (a host sync; a block too large for it raises\n"
                "``TieBlockTooLargeError``, see docs/ties.md). Equals pytrec_eval's ``iprec_at_recall_x``\n"
                "where no scores tie."
            ),
            cutoff=False,
            functional_example=(
                ">>> preds, target = tensor([0.9, 0.8, 0.7, 0.6]), tensor([0, 1, 0, 1])\n"
                ">>> retrieval_interpolated_precision(preds, target, recall_level=0.1)  # max(1/2, 2/4)\n"
                "tensor(0.5000)\n"
                ">>> tied, relevant_second = tensor([0.5, 0.5]), tensor([0, 1])\n"
                '>>> retrieval_interpolated_precision(tied, relevant_second, ties="optimistic")\n'
                "tensor(1.)\n"
                '>>> retrieval_interpolated_precision(tied, relevant_second, ties="average")  # (1 + 1/2)/2\n'
                "tensor(0.7500)"
            ),
            module_args="recall_level=1.0",
            module_value="tensor(0.8333)",
        ),
        RetrievalDeclaration(
            "infap",
            lambda st, ks, _: trec_twins.infap(st),
            "trec_eval's ``infAP``: average precision inferred from the judgements of a sample of the pool.",
            functional="retrieval_infap",
            module="RetrievalInfAP",
            details=(
                "The target is trec_eval's judgement of each ranked document: 1 relevant, 0 judged\n"
                "non-relevant, -1 not in the qrels, -2 in the pool but not judged (a negative grade in the\n"
                "qrels). Tied scores are ordered with relevant documents last (``ties='pessimistic'``, the\n"
                "default) or first (``'optimistic'``); ``'average'`` is the exact expected value over the\n"
                "orders of tied documents (a sum over each tie block's arrangements, a host sync; see\n"
                "docs/ties.md). Equals pytrec_eval's ``infAP`` where no scores tie."
            ),
            cutoff=False,
            unjudged=True,
            target_doc="1 relevant, 0 judged non-relevant, -1 not in the qrels, -2 in the pool, not judged.",
            functional_example=(
                ">>> preds = tensor([0.9, 0.8, 0.7, 0.6])\n"
                ">>> retrieval_infap(preds, tensor([1, 0, 1, 0]))  # every document judged: AP\n"
                "tensor(0.8333)\n"
                ">>> retrieval_infap(preds, tensor([1, -2, 1, 0]))  # the second is in the pool, not judged\n"
                "tensor(1.0000)\n"
                ">>> tied = tensor([0.5, 0.5])  # relevant first: 1; second, under the unjudged one: 3/4\n"
                '>>> retrieval_infap(tied, tensor([1, -2]), ties="average")\n'
                "tensor(0.8750)"
            ),
            module_value="tensor(0.7917)",
        ),
        RetrievalDeclaration(
            "bpref",
            lambda st, ks, _: trec_twins.bpref(st),
            (
                "trec_eval's bpref: over the relevant documents ranked, ``1 − min(n, R) / min(N, R)`` "
                "summed, over ``R``."
            ),
            functional="retrieval_bpref",
            module="RetrievalBpref",
            details=(
                "``n`` is the number of judged non-relevant documents ranked above the relevant one, ``N``\n"
                "the number of judged non-relevant documents. A document the qrels do not judge is given\n"
                "the target ``ignore_index`` (e.g. ``ignore_index=-1`` and target ``-1``): it is dropped,\n"
                "as trec_eval's bpref skips unjudged documents. Judged documents that were not retrieved\n"
                "count in ``N`` (target 0) or ``R`` (target 1) through ``retrieved=False`` (functional);\n"
                "``num_relevant`` adds relevant ones. Equals pytrec_eval's ``bpref`` where no scores tie."
            ),
            cutoff=False,
            target_doc="relevance (bool or 0/1); ``ignore_index`` marks unjudged documents.",
            functional_example=(
                ">>> preds = tensor([0.9, 0.8, 0.7, 0.6, 0.5])\n"
                ">>> retrieval_bpref(preds, tensor([0, -1, 1, 0, 1]), ignore_index=-1)  # (1 - 1/2 + 0) / 2\n"
                "tensor(0.2500)\n"
                ">>> retrieval_bpref(tensor([0.5, 0.5, 0.1]), tensor([1, 0, 1]))  # the tie: 1 - 1/2\n"
                "tensor(0.2500)"
            ),
            module_value="tensor(0.7500)",
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


def shared_query_values(
    requests: Sequence[tuple[str, Ks]],
    preds: Tensor,
    gain: Tensor,
    indexes: Tensor | None,
    *,
    ties: str,
    retrieved: Tensor | None = None,
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per-query values and status (as ``query_values``) of several metrics of one ranking, ranked
    once: every metric reads the same ``RankedRows``, whose relevance is ``gain > 0`` (what the binary
    metrics see of their target) and whose gain is the grade (what nDCG sees).

    ``requests``: ``(metric name, cut-offs)`` pairs, metrics that call the same queries empty (``needs``).
    """
    metrics = [(METRICS[name], ks) for name, ks in requests]
    needs = {m.needs for m, _ in metrics}
    if len(needs) != 1:
        raise ValueError(
            f"Metrics that call other queries empty cannot share a ranking, got {sorted(needs)}."
        )
    widths = [len(ks) * m.values_per_cutoff for m, ks in metrics]

    def every_metric(st: RankedRows) -> Tensor:
        return torch.cat([m.per_query(st, ks, MetricOptions()) for m, ks in metrics], dim=1)

    values, status, _ = ranking.evaluate(
        every_metric,
        preds,
        gain,
        ks=tuple(k for _, ks in metrics for k in ks),
        indexes=indexes,
        inactive=None if retrieved is None else ~retrieved,
        ties=ties,
        needs=needs.pop(),
    )
    return {name: (part, status) for (name, _), part in zip(requests, torch.split(values, widths, dim=1))}


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
    retrieved: Tensor | None = None,
    num_relevant: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """The whole functional computation of metric ``name``: validate, rank, reduce.

    ``options``: the settings of the metric's option table (``embedmetrics._engine.ranking.options``).
    """
    metric = METRICS[name]
    given = {**options, "k": k} if metric.cutoff or k is not None else options
    settings = read_settings(metric.functional, metric.module, given, top_k)
    ties, ignore_index = settings.values["ties"], settings.values["ignore_index"]
    validate_args = settings.values["validate_args"]
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
        unjudged=metric.unjudged,
    )
    values, status = query_values(
        metric,
        preds,
        target,
        indexes,
        ks=settings.ks,
        ties=ties,
        ignore_index=ignore_index,
        options=settings.options,
        retrieved=retrieved,
        num_relevant=num_relevant,
        validate_args=validate_args,
    )
    return finish(
        values,
        status,
        empty_target_action=settings.values["empty_target_action"],
        aggregation=settings.values["aggregation"],
        single=settings.single,
        dtype=out_dtype(preds),
        needs=metric.needs,
    )
