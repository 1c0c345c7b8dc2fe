"""trec_eval's measures of gains against the ideal ranking that step with it position by position: ``G``,
``ndcg_rel`` and ``Rndcg`` (``m_G.c``, ``m_ndcg_rel.c``, ``m_Rndcg.c``), on ``measures.Ranked``."""

from __future__ import annotations

import numpy as np

from embedmetrics._engine.trec_eval.lists import F64, Array, Segments, divide, group_sum
from embedmetrics._engine.trec_eval.measures import Measure, Pairs, Ranked


def g_measure(r: Ranked, m: Measure) -> list[Array]:
    """``G``: gains discounted by the log of the cost so far (the ideal gain at each position, at least 1)
    less the gain so far, over the ideal ranking's total gain."""
    pairs = m.pairs
    rows, seg, _, _ = r.dcg(pairs)  # the rows of non-zero gain: the others add nothing
    gain = r.gain(pairs)[rows]
    ideal_seg, ideal_gain = r.ideal(pairs)
    above_one = ideal_seg.cumsum(np.maximum(ideal_gain - 1.0, 0.0))  # a cost is the ideal gain, at least 1
    position = r.seg.position[rows]
    query = seg.row_query
    cost = (position + 1).astype(F64) + ideal_seg.at_query(
        above_one, query, np.minimum(position + 1, ideal_seg.sizes[query])
    )
    term = gain / np.log2(2 + cost - seg.cumsum(gain))
    return [divide(seg.sum(term), ideal_seg.sum(ideal_gain))]


def ndcg_rel(r: Ranked, m: Measure) -> list[Array]:
    """``ndcg_rel``: nDCG at each retrieved document of positive gain, and the final nDCG for each relevant
    document not retrieved, averaged over the ideal ranking's size."""
    pairs = m.pairs
    ideal_seg, _ = r.ideal(pairs)
    rows, _, dcg, _ = r.dcg(pairs)
    positive = r.gain(pairs)[rows] > 0
    rows, dcg = rows[positive], dcg[positive]
    query = r.seg.row_query[rows]
    counted = Segments.of_sizes(np.bincount(query, minlength=r.seg.n_queries))
    ideal_cum, idcg_all = r.idcg(pairs)
    sizes = ideal_seg.sizes[query]
    capped = ideal_seg.starts[:-1][query] + np.minimum(r.seg.position[rows], sizes - 1)
    at = np.append(ideal_cum, 0.0)[np.where(sizes > 0, capped, -1)]
    total = counted.sum(dcg / at)
    missing = (ideal_seg.sizes - counted.sizes).astype(F64)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = total + missing * r.dcg_total(pairs) / idcg_all
        return [np.where(total > 0, total / np.maximum(ideal_seg.sizes, 1), 0.0)]


def _boundaries(r: Ranked, pairs: Pairs) -> tuple[Array, Array]:
    """The positions where the ideal gain changes value (the end of each run of equal gains, the last one
    the end of the ideal ranking), and their queries."""
    ideal_seg, ideal_gain = r.ideal(pairs)
    last = np.ones(ideal_gain.shape, dtype=bool)
    if ideal_gain.size > 1:
        same_query = ideal_seg.row_query[1:] == ideal_seg.row_query[:-1]
        last[:-1] = ~(same_query & (ideal_gain[1:] == ideal_gain[:-1]))
    rows = np.flatnonzero(last)
    return ideal_seg.row_query[rows], ideal_seg.position[rows] + 1


def rndcg(r: Ranked, m: Measure) -> list[Array]:
    """``Rndcg``: nDCG averaged over the positions where the ideal gain changes (at the position, before it
    counts), plus the full lists' nDCG when more than one document is ranked past the ideal ranking."""
    pairs = m.pairs
    ideal_seg, _ = r.ideal(pairs)
    dcg_all, (ideal_cum, idcg_all) = r.dcg_total(pairs), r.idcg(pairs)
    query, b = _boundaries(r, pairs)
    idcg = ideal_cum[ideal_seg.starts[:-1][query] + b - 1]
    dcg = r.dcg_at(pairs, query, np.minimum(b, r.n_ret[query]))
    q = r.seg.n_queries
    with np.errstate(divide="ignore", invalid="ignore"):
        total = group_sum(query, dcg / idcg, q)
        count = group_sum(query, np.ones(idcg.shape), q)
        extra = (r.n_ret > ideal_seg.sizes + 1) & (idcg_all > 0)
        total = total + np.where(extra, dcg_all / np.where(extra, idcg_all, 1.0), 0.0)
        count = count + extra
        return [np.where(r.n_rel > 0, total / count, 0.0)]
