"""trec_eval's measures on ranked lists of grades: each query's values and the summary line ``all``.

``evaluate`` computes the requested measures (``names.parse_measures``) for every query at once;
``summarize`` combines them as trec_eval does (``meas_avg.c``): means over the queries, sums for the
``num_*`` counts, geometric means (of values floored at 1e-5) for ``gm_map`` and ``gm_bpref``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np

from embedmetrics._engine.trec_eval import extra, gains
from embedmetrics._engine.trec_eval import measures as m
from embedmetrics._engine.trec_eval.lists import Array
from embedmetrics._engine.trec_eval.measures import MIN_GEO_MEAN
from embedmetrics._engine.trec_eval.names import Measure, _check_version

#: The function computing each measure (its values: one per cut-off, or one).
FUNCTIONS: dict[str, m.MeasureFunction] = {
    "num_q": m._counts, "num_ret": m._counts, "num_rel": m._counts, "num_rel_ret": m._counts,
    "num_nonrel_judged_ret": m._counts, "map": m._map, "gm_map": m._map, "Rprec": m._rprec,
    "bpref": m._bpref, "gm_bpref": m._bpref, "recip_rank": m._recip_rank, "iprec_at_recall": m._iprec,
    "11pt_avg": m._iprec, "P": m._at_k, "recall": m._at_k, "relative_P": m._at_k, "success": m._at_k,
    "infAP": m._infap, "Rprec_mult": m._rprec_mult, "utility": m._sets, "set_P": m._sets,
    "set_relative_P": m._sets, "set_recall": m._sets, "set_map": m._sets, "set_F": m._sets,
    "binG": m._bin_g, "G": gains.g_measure, "ndcg": m._ndcg, "dcg": m._ndcg, "ideal_dcg": m._ndcg,
    "ndcg_rel": gains.ndcg_rel, "Rndcg": gains.rndcg, "ndcg_cut": m._ndcg_cut, "map_cut": m._map_cut,
    "relstring": m._no_value, "runid": m._no_value, "yaap": extra.yaap, "rbp": extra.rbp,
    "rbp_resid": extra.rbp_resid, "unj": extra.unjudged,
}  # fmt: skip


def evaluate(
    starts: Array,
    grade: Array,
    levels: tuple[Array, Array, Array],
    measures: Sequence[Measure],
    relevance_level: int = 1,
    version: int = 10,
) -> dict[str, Array]:
    """Each measure's values per query: ``{label: (Q,) float64}`` in trec_eval's print order.

    ``starts`` (``Q + 1`` row offsets), ``grade`` (each ranked row's grade, ``-1`` not in the qrels, ``-2``
    a negative grade), ``levels`` (``query``, ``grade``, ``count`` of the judged documents per grade, by
    query then grade) as ``embedmetrics._io.trec_eval_lists.GradedLists`` gives them; ``version``:
    trec_eval's, 10 (10.0) or 9 (9.0.8), for the measures whose computation changed.
    """
    _check_version(version)
    ranked = m.Ranked(starts, grade, levels, relevance_level, version)
    out: dict[str, Array] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for measure in measures:
            values = FUNCTIONS[measure.name](ranked, measure)
            out.update(zip(measure.labels(), values))
    return out


def _sequential_sums(columns: list[Array]) -> list[float]:
    """Each column's values added one after the other in query order, as trec_eval adds them (a pairwise
    sum can differ in the last bit, enough to print another fourth decimal)."""
    if not columns or not columns[0].size:
        return [0.0] * len(columns)
    return np.cumsum(np.stack(columns), axis=1)[:, -1].tolist()  # type: ignore[no-any-return]


def summarize(
    values: dict[str, Array],
    measures: Sequence[Measure],
    n_queries: Optional[int] = None,
    positive_judged: Optional[int] = None,
) -> dict[str, float]:
    """The ``all`` line: ``n_queries`` is trec_eval's divisor (with ``-c``, the qrels' queries, those absent
    from the run scoring 0, and ``log(1e-5)`` in the geometric means; by default the evaluated ones),
    ``positive_judged`` its ``num_rel`` with ``-c`` (every qrels line of grade > 0)."""
    labels = [(ms, label) for ms in measures if ms.kind.summary != "none" for label in ms.labels()]
    totals = dict(zip((label for _, label in labels), _sequential_sums([values[lb] for _, lb in labels])))
    out: dict[str, float] = {}
    for measure, label in labels:
        summary, n_rows = measure.kind.summary, values[label].size
        n = n_rows if n_queries is None else n_queries
        if summary == "count":
            out[label] = float(n)
        elif summary == "sum":
            use = positive_judged if label == "num_rel" and positive_judged is not None else None
            out[label] = totals[label] if use is None else float(use)
        elif summary == "gm":
            out[label] = math.exp((totals[label] + (n - n_rows) * math.log(MIN_GEO_MEAN)) / n) if n else 0.0
        else:
            out[label] = totals[label] / n if n else 0.0
    return out


#: The values trec_eval 10.0 clears for a judged query the run lacks (``-c``; ``trec_eval.c``): the
#: labels, and the prefix of ``unj_5`` and its cut-offs.
CLEARED, CLEARED_PREFIX = ("num_ret", "utility", "rbp_resid"), "unj"

#: A change of the per-query values before they are averaged (``-Z``'s z-scores).
Transform = Callable[[dict[str, Array]], dict[str, Array]]


def trec_eval_values(lists: object, measures: Sequence[Measure], relevance_level: int = 1,
                     all_judged: bool = False, *, version: int = 10, num_docs: int = 0,
                     absent: Optional[Array] = None, transform: Optional[Transform] = None,
                     ) -> tuple[dict[str, Array], dict[str, float]]:  # fmt: skip
    """Per-query values (float64 arrays) and the summary of a ``GradedLists``
    (``embedmetrics._io.trec_eval_lists``), as trec_eval ``version`` (10 or 9) computes them: ``num_docs``
    is ``-N`` (read by ``utility``'s fourth coefficient), ``absent`` marks the queries the run lacks whose
    values trec_eval 10.0 clears (``-c``), ``transform`` changes the values before they are averaged."""
    data: object = lists
    levels = (data.level_query, data.level_grade, data.level_count)  # type: ignore[attr-defined]
    values = evaluate(data.starts, data.grade, levels, measures, relevance_level, version)  # type: ignore[attr-defined]
    values = _adjusted(values, measures, num_docs, absent, transform)
    summary = summarize(
        values, measures, data.n_qrels_queries if all_judged else None,  # type: ignore[attr-defined]
        data.positive_judged if all_judged else None,  # type: ignore[attr-defined]
    )  # fmt: skip
    return values, summary


def _adjusted(values: dict[str, Array], measures: Sequence[Measure], num_docs: int, absent: Optional[Array],
              transform: Optional[Transform]) -> dict[str, Array]:  # fmt: skip
    """The values as trec_eval prints and averages them where they need more than the measures: ``-N`` in
    ``utility`` (its fourth coefficient times the collection's size: the measures read N = 0), the values
    trec_eval 10.0 clears for a query the run lacks, then ``transform``."""
    utility = [m for m in measures if m.name == "utility" and m.params[3] and num_docs]
    cleared = absent if absent is not None and absent.size and absent.any() else None
    if not utility and cleared is None and transform is None:
        return values
    out = {label: np.array(column, dtype=np.float64) for label, column in values.items()}
    for measure in utility:  # trec_eval: p4 * (N + rel_ret - ret - rel)
        out[measure.labels()[0]] += measure.params[3] * num_docs
    for label in out if cleared is not None else ():
        if label in CLEARED or label.startswith(CLEARED_PREFIX):
            out[label][cleared] = 0.0
    return out if transform is None else transform(out)
