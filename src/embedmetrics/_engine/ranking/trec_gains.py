"""trec_eval's measures of gains against the ideal ranking that step with it position by position: ``G``,
``ndcg_rel`` and ``Rndcg`` (``m_G.c``, ``m_ndcg_rel.c``, ``m_Rndcg.c``), on ``trec_measures.Ranked``."""

from __future__ import annotations

import torch
from torch import Tensor

from embedmetrics._engine.ranking.trec_lists import F64
from embedmetrics._engine.ranking.trec_measures import Measure, Ranked, _div


def _ideal_by_row(r: Ranked, pairs: tuple[tuple[int, float], ...]) -> Tensor:
    """Each ranked row's ideal gain at its position (0 past the ideal ranking)."""
    ideal_seg, ideal_gain = r.ideal(pairs)
    inside = r.seg.position < ideal_seg.sizes[r.seg.row_query]
    index = torch.where(inside, ideal_seg.starts[:-1][r.seg.row_query] + r.seg.position, -1)
    return torch.cat([ideal_gain, ideal_gain.new_zeros(1)])[index]


def g_measure(r: Ranked, m: Measure) -> list[Tensor]:
    """``G``: gains discounted by the log of the cost so far (the ideal gain at each position, at least 1)
    less the gain so far, over the ideal ranking's total gain."""
    pairs = m.pairs
    gain = r.memo(("gain", pairs), lambda: r.gains(pairs))
    cost = r.seg.cumsum(_ideal_by_row(r, pairs).clamp(min=1.0))
    term = torch.where(gain != 0, gain / torch.log2(2 + cost - r.seg.cumsum(gain)), 0.0)
    ideal_seg, ideal_gain = r.ideal(pairs)
    return [_div(r.seg.sum(term), ideal_seg.sum(ideal_gain))]


def ndcg_rel(r: Ranked, m: Measure) -> list[Tensor]:
    """``ndcg_rel``: nDCG at each retrieved document of positive gain, and the final nDCG for each relevant
    document not retrieved, averaged over the ideal ranking's size."""
    pairs = m.pairs
    ideal_seg, _ = r.ideal(pairs)
    gain = r.memo(("gain", pairs), lambda: r.gains(pairs))
    (dcg, dcg_all), (ideal_cum, idcg_all) = r.dcg(pairs), r.idcg(pairs)
    sizes = ideal_seg.sizes[r.seg.row_query]
    capped = ideal_seg.starts[:-1][r.seg.row_query] + torch.minimum(r.seg.position, sizes - 1)
    at = torch.cat([ideal_cum, ideal_cum.new_zeros(1)])[torch.where(sizes > 0, capped, -1)]
    total = r.seg.sum(torch.where(gain > 0, dcg / at, 0.0))
    missing = (ideal_seg.sizes - r.seg.sum(gain > 0)).to(F64)
    total = total + missing * dcg_all / idcg_all
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
    (dcg_cum, dcg_all), (ideal_cum, idcg_all) = r.dcg(pairs), r.idcg(pairs)
    query, b = _boundaries(r, pairs)
    idcg = ideal_cum[ideal_seg.starts[:-1][query] + b - 1]
    shown = torch.minimum(b, r.n_ret[query])
    padded = torch.cat([dcg_cum.new_zeros(1), dcg_cum])
    dcg = padded[torch.where(shown > 0, r.seg.starts[:-1][query] + shown, 0)]
    q = r.seg.n_queries
    total = torch.zeros(q, dtype=F64).index_add_(0, query, dcg / idcg)
    count = torch.zeros(q, dtype=F64).index_add_(0, query, torch.ones_like(idcg))
    extra = (r.n_ret > ideal_seg.sizes + 1) & (idcg_all > 0)
    total = total + torch.where(extra, dcg_all / idcg_all, 0.0)
    count = count + extra
    return [torch.where(r.n_rel > 0, total / count, 0.0)]
