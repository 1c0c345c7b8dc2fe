"""trec_eval's measures of gains against the ideal ranking that step with it position by position: ``G``,
``ndcg_rel`` and ``Rndcg`` (``m_G.c``, ``m_ndcg_rel.c``, ``m_Rndcg.c``), on ``trec_measures.Ranked``."""

from __future__ import annotations

import torch
from torch import Tensor

from embedmetrics._engine.ranking.trec_lists import F64, Segments
from embedmetrics._engine.ranking.trec_measures import Measure, Ranked, _div


def g_measure(r: Ranked, m: Measure) -> list[Tensor]:
    """``G``: gains discounted by the log of the cost so far (the ideal gain at each position, at least 1)
    less the gain so far, over the ideal ranking's total gain."""
    pairs = m.pairs
    rows, seg, _, _ = r.dcg(pairs)  # the rows of non-zero gain: the others add nothing
    gain = r.gain(pairs)[rows]
    ideal_seg, ideal_gain = r.ideal(pairs)
    above_one = ideal_seg.cumsum((ideal_gain - 1.0).clamp(min=0.0))  # a cost is the ideal gain, at least 1
    position = r.seg.position[rows]
    query = seg.row_query
    cost = (position + 1).to(F64) + ideal_seg.at_query(
        above_one, query, torch.minimum(position + 1, ideal_seg.sizes[query])
    )
    term = gain / torch.log2(2 + cost - seg.cumsum(gain))
    return [_div(seg.sum(term), ideal_seg.sum(ideal_gain))]


def ndcg_rel(r: Ranked, m: Measure) -> list[Tensor]:
    """``ndcg_rel``: nDCG at each retrieved document of positive gain, and the final nDCG for each relevant
    document not retrieved, averaged over the ideal ranking's size."""
    pairs = m.pairs
    ideal_seg, _ = r.ideal(pairs)
    rows, _, dcg, _ = r.dcg(pairs)
    positive = r.gain(pairs)[rows] > 0
    rows, dcg = rows[positive], dcg[positive]
    query = r.seg.row_query[rows]
    counted = Segments.of_sizes(
        torch.zeros(r.seg.n_queries, dtype=torch.long).index_add_(0, query, torch.ones_like(query))
    )
    ideal_cum, idcg_all = r.idcg(pairs)
    sizes = ideal_seg.sizes[query]
    capped = ideal_seg.starts[:-1][query] + torch.minimum(r.seg.position[rows], sizes - 1)
    at = torch.cat([ideal_cum, ideal_cum.new_zeros(1)])[torch.where(sizes > 0, capped, -1)]
    total = counted.sum(dcg / at)
    missing = (ideal_seg.sizes - counted.sizes).to(F64)
    total = total + missing * r.dcg_total(pairs) / idcg_all
    return [torch.where(total > 0, total / ideal_seg.sizes.clamp(min=1), 0.0)]


def _boundaries(r: Ranked, pairs: tuple[tuple[int, float], ...]) -> tuple[Tensor, Tensor]:
    """The positions where the ideal gain changes value (the end of each run of equal gains, the last one
    the end of the ideal ranking), and their queries."""
    ideal_seg, ideal_gain = r.ideal(pairs)
    last = torch.ones_like(ideal_gain, dtype=torch.bool)
    if ideal_gain.numel() > 1:
        same_query = ideal_seg.row_query[1:] == ideal_seg.row_query[:-1]
        last[:-1] = ~(same_query & (ideal_gain[1:] == ideal_gain[:-1]))
    rows = torch.nonzero(last).reshape(-1)
    return ideal_seg.row_query[rows], ideal_seg.position[rows] + 1


def rndcg(r: Ranked, m: Measure) -> list[Tensor]:
    """``Rndcg``: nDCG averaged over the positions where the ideal gain changes (at the position, before it
    counts), plus the full lists' nDCG when more than one document is ranked past the ideal ranking."""
    pairs = m.pairs
    ideal_seg, _ = r.ideal(pairs)
    dcg_all, (ideal_cum, idcg_all) = r.dcg_total(pairs), r.idcg(pairs)
    query, b = _boundaries(r, pairs)
    idcg = ideal_cum[ideal_seg.starts[:-1][query] + b - 1]
    dcg = r.dcg_at(pairs, query, torch.minimum(b, r.n_ret[query]))
    q = r.seg.n_queries
    total = torch.zeros(q, dtype=F64).index_add_(0, query, dcg / idcg)
    count = torch.zeros(q, dtype=F64).index_add_(0, query, torch.ones_like(idcg))
    extra = (r.n_ret > ideal_seg.sizes + 1) & (idcg_all > 0)
    total = total + torch.where(extra, dcg_all / idcg_all, 0.0)
    count = count + extra
    return [torch.where(r.n_rel > 0, total / count, 0.0)]
