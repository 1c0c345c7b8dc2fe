"""The measures trec_eval 10.0 adds to ``all_trec`` (``rbp``, ``rbp_resid``: ``m_rbp.c``,
``m_rbp_resid.c``; ``unj``: ``m_unjudged.c``) and ``yaap`` (``m_yaap.c``, both versions, not in
``all_trec``), on ``measures.Ranked``."""

from __future__ import annotations

import numpy as np

from embedmetrics._engine.trec_eval.lists import F64, Array, Segments
from embedmetrics._engine.trec_eval.measures import Measure, Ranked, average_precision_terms

#: rbp's persistence when no ``p=`` pair is given.
DEFAULT_PERSISTENCE = 0.9


def yaap(r: Ranked, m: Measure) -> list[Array]:
    """``log((1 + S) / (1 + R - S))``, ``S`` the sum of the precisions at the relevant retrieved."""
    seg, terms = average_precision_terms(r)
    total = seg.at(terms, seg.sizes)
    with np.errstate(divide="ignore", invalid="ignore"):
        return [np.log((1.0 + total) / (1.0 + r.n_rel.astype(F64) - total))]


def unjudged(r: Ranked, m: Measure) -> list[Array]:
    """``unj_k``: the documents the qrels do not judge (absent or negative) among the first ``k``, over
    ``k`` (a list shorter than ``k`` is filled with judged ones)."""
    k = r.cutoffs(m)
    found = r.prefix(r.seg.cumsum(r.grade < 0), k)
    return list((found / k.astype(F64)).T)


def persistence(m: Measure) -> float:
    """rbp's ``p``: the last pair named ``p`` (trec_eval reads them all in order), else 0.9."""
    p = DEFAULT_PERSISTENCE
    for name, value in m.named:
        if name == "p":
            p = value
    return p


def _powers(p: float, n: int) -> Array:
    """``p ** i`` for ``i < n`` as trec_eval forms them: one multiplication after the other."""
    out: Array = np.concatenate([[1.0], np.multiply.accumulate(np.full(max(n - 1, 0), p, dtype=F64))])
    return out[:n]


def _gain_range(r: Ranked, pairs: tuple[tuple[int, float], ...]) -> tuple[Array, Array]:
    """Per query the smallest and largest gain of ``setup_gains``' table: the pairs' gains and the grades
    0 to the highest judged one that no pair names (their gain is the grade)."""
    q = r.seg.n_queries
    top = np.full(q, -1, dtype=np.int64)
    np.maximum.at(top, r.level_query, r.level_grade)
    named = np.array([level for level, _ in pairs], dtype=np.int64)
    low = next(level for level in range(len(pairs) + 1) if level not in named.tolist())
    high = top.copy()
    for _ in pairs:
        high = np.where(np.isin(high, named), high - 1, high)
    values = np.array([gain for _, gain in pairs], dtype=F64)
    lo = np.full(q, values.min() if values.size else np.inf)
    hi = np.full(q, values.max() if values.size else -np.inf)
    lo = np.where(low <= top, np.minimum(lo, low), lo)
    hi = np.where(high >= 0, np.maximum(hi, high), hi)
    return lo, hi


def rbp(r: Ranked, m: Measure) -> list[Array]:
    """Rank-biased precision: ``(1 - p)`` times the gains discounted by ``p`` per rank; a query's gains
    scaled to ``[0, 1]`` (``(g - min) / (max - min)``) where one is outside, the unjudged' 0 kept."""
    p, pairs = persistence(m), m.pairs
    lo, hi = _gain_range(r, pairs)
    query = r.seg.row_query
    scale = (lo < 0) | (hi > 1)
    gain = r.gains(pairs)
    listed = (r.grade >= 0) | np.isin(r.grade, [level for level, _ in pairs])
    with np.errstate(divide="ignore", invalid="ignore"):
        normal = (gain - lo[query]) / (hi[query] - lo[query])
    gain = np.where(listed & scale[query], normal, gain)
    rows = np.flatnonzero(gain != 0)
    seg = Segments.of_sizes(r.seg.count(rows))
    terms = gain[rows] * _powers(p, int(r.n_ret.max(initial=0)))[r.seg.position[rows]]
    return [(1.0 - p) * seg.sum(terms)]


def rbp_resid(r: Ranked, m: Measure) -> list[Array]:
    """rbp's residual: ``p ** n`` plus ``(1 - p)`` times the discounts of the unjudged documents, where
    the list has one (else 0)."""
    p = persistence(m)
    rows = np.flatnonzero(r.grade < 0)
    seg = Segments.of_sizes(r.seg.count(rows))
    powers = _powers(p, int(r.n_ret.max(initial=0)) + 1)
    total = seg.sum(powers[r.seg.position[rows]])
    return [np.where(seg.sizes > 0, powers[r.n_ret] + (1 - p) * total, 0.0)]
