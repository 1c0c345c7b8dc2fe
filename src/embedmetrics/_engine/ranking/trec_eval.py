"""trec_eval's measures on ranked lists of grades: each query's values and the summary line ``all``.

``evaluate`` computes the requested measures (``trec_names.parse_measures``) for every query at once;
``summarize`` combines them as trec_eval 9 does (``meas_avg.c``): means over the queries, sums for the
``num_*`` counts, geometric means (of values floored at 1e-5) for ``gm_map`` and ``gm_bpref``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.ranking import trec_gains as gains
from embedmetrics._engine.ranking import trec_measures as m
from embedmetrics._engine.ranking.trec_measures import MIN_GEO_MEAN
from embedmetrics._engine.ranking.trec_names import Measure

#: The function computing each measure (its values: one per cut-off, or one).
FUNCTIONS: dict[str, m.MeasureFunction] = {
    "num_q": m._counts, "num_ret": m._counts, "num_rel": m._counts, "num_rel_ret": m._counts,
    "num_nonrel_judged_ret": m._counts, "map": m._map, "gm_map": m._map, "Rprec": m._rprec,
    "bpref": m._bpref, "gm_bpref": m._bpref, "recip_rank": m._recip_rank, "iprec_at_recall": m._iprec,
    "11pt_avg": m._iprec, "P": m._at_k, "recall": m._at_k, "relative_P": m._at_k, "success": m._at_k,
    "infAP": m._infap, "Rprec_mult": m._rprec_mult, "utility": m._sets, "set_P": m._sets,
    "set_relative_P": m._sets, "set_recall": m._sets, "set_map": m._sets, "set_F": m._sets,
    "binG": m._bin_g, "G": gains.g_measure, "ndcg": m._ndcg, "ndcg_rel": gains.ndcg_rel,
    "Rndcg": gains.rndcg, "ndcg_cut": m._ndcg_cut, "map_cut": m._map_cut, "relstring": m._no_value,
    "runid": m._no_value,
}  # fmt: skip


def evaluate(
    starts: Tensor,
    grade: Tensor,
    levels: tuple[Tensor, Tensor, Tensor],
    measures: Sequence[Measure],
    relevance_level: int = 1,
) -> dict[str, Tensor]:
    """Each measure's values per query: ``{label: (Q,) float64}`` in trec_eval's print order.

    ``starts`` (``Q + 1`` row offsets), ``grade`` (each ranked row's grade, ``-1`` not in the qrels, ``-2``
    a negative grade), ``levels`` (``query``, ``grade``, ``count`` of the judged documents per grade, by
    query then grade) as ``embedmetrics._io.trec_eval_lists.GradedLists`` gives them.
    """
    ranked = m.Ranked(starts, grade, levels, relevance_level)
    out: dict[str, Tensor] = {}
    for measure in measures:
        values = FUNCTIONS[measure.name](ranked, measure)
        out.update(zip(measure.labels(), values))
    return out


def _sequential_sum(column: Tensor) -> float:
    """The values added one after the other in query order, as trec_eval adds them (a pairwise sum can
    differ in the last bit, enough to print another fourth decimal)."""
    return float(np.cumsum(column.numpy())[-1]) if column.numel() else 0.0


def summarize(
    values: dict[str, Tensor],
    measures: Sequence[Measure],
    n_queries: Optional[int] = None,
    positive_judged: Optional[int] = None,
) -> dict[str, float]:
    """The ``all`` line: ``n_queries`` is trec_eval's divisor (with ``-c``, the qrels' queries, those absent
    from the run scoring 0, and ``log(1e-5)`` in the geometric means; by default the evaluated ones),
    ``positive_judged`` its ``num_rel`` with ``-c`` (every qrels line of grade > 0)."""
    out: dict[str, float] = {}
    for measure in measures:
        summary = measure.kind.summary
        for label in measure.labels():
            column = values[label]
            n = column.numel() if n_queries is None else n_queries
            missing = n - column.numel()
            if summary == "none":
                continue
            if summary == "count":
                out[label] = float(n)
            elif summary == "sum":
                use = positive_judged if label == "num_rel" and positive_judged is not None else None
                out[label] = _sequential_sum(column) if use is None else float(use)
            elif summary == "gm":
                total = _sequential_sum(column) + missing * math.log(MIN_GEO_MEAN)
                out[label] = math.exp(total / n) if n else 0.0
            else:
                out[label] = _sequential_sum(column) / n if n else 0.0
    return out


def trec_eval_values(lists: object, measures: Sequence[Measure], relevance_level: int = 1,
                     all_judged: bool = False) -> tuple[dict[str, Tensor], dict[str, float]]:  # fmt: skip
    """Per-query values and the summary of a ``GradedLists`` (``embedmetrics._io.trec_eval_lists``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # ~100 small passes over the rows: a pool's wake-ups cost more than they save
    try:
        return _values(lists, measures, relevance_level, all_judged)
    finally:
        torch.set_num_threads(threads)


def _values(data: object, measures: Sequence[Measure], relevance_level: int, all_judged: bool
            ) -> tuple[dict[str, Tensor], dict[str, float]]:  # fmt: skip
    as_tensor = torch.from_numpy
    levels = (as_tensor(data.level_query), as_tensor(data.level_grade), as_tensor(data.level_count))  # type: ignore[attr-defined]
    values = evaluate(as_tensor(data.starts), as_tensor(data.grade), levels, measures, relevance_level)  # type: ignore[attr-defined]
    summary = summarize(
        values, measures, data.n_qrels_queries if all_judged else None,  # type: ignore[attr-defined]
        data.positive_judged if all_judged else None,  # type: ignore[attr-defined]
    )  # fmt: skip
    return values, summary
