"""Every trec_eval measure of ``-m all_trec`` that a run and its qrels determine, per query, as trec_eval 9
computes it (its ``m_*.c`` files), on ranked lists of grades (``trec_lists``), and the summary over queries.

The inputs are what trec_eval's ``form_res_rels`` gives: each query's ranked grades (``-1``: not in the
qrels, ``-2``: a negative grade, in the pool but not judged) cut at ``-M``, and per query the number of
judged documents at each grade. Every measure is a few segment operations over all the queries at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.ranking.trec_lists import F64, Segments, suffix_max
from embedmetrics._engine.ranking.trec_names import Measure

__all__ = ["Measure", "Ranked"]

#: trec_eval's floor of the geometric means (``MIN_GEO_MEAN``) and infAP's smoothing (``INFAP_EPSILON``).
MIN_GEO_MEAN = 1e-5
INFAP_EPSILON = 1e-5


def _div(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` where ``den`` is not 0, else 0 (trec_eval leaves such a value at 0)."""
    den = den.to(F64)
    return torch.where(den != 0, num.to(F64) / torch.where(den != 0, den, torch.ones_like(den)), 0.0)


class Ranked:
    """The ranked lists and what most measures read off them, computed once."""

    def __init__(self, starts: Tensor, grade: Tensor, levels: tuple[Tensor, Tensor, Tensor], level: int):
        self.seg = Segments(starts)
        self.grade, self.level = grade, level
        self.level_query, self.level_grade, self.level_count = levels
        self.n_ret = self.seg.sizes
        self.is_rel = grade >= level
        self.cum_rel = self.seg.cumsum(self.is_rel.long())
        self.n_rel_ret = self.seg.sum(self.is_rel).long()
        counted = self.level_count * (self.level_grade >= level)
        q = self.seg.n_queries
        self.n_rel = torch.zeros(q, dtype=torch.long).index_add_(0, self.level_query, counted)
        judged_nonrel = self.level_count * (self.level_grade < level)
        self.n_nonrel = torch.zeros(q, dtype=torch.long).index_add_(0, self.level_query, judged_nonrel)
        self._ideal: dict[tuple[tuple[int, float], ...], tuple[Segments, Tensor]] = {}
        self._memo: dict[object, Any] = {}

    def memo(self, key: object, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per key: what several measures share (``map`` and ``gm_map``, the gains)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def rows(self, key: object, mask: Tensor) -> tuple[Tensor, Segments]:
        """The rows where ``mask`` holds, in order, and their segments (once per ``key``): the few rows
        a measure adds up (relevant ones, non-zero gains); their sums add the same terms in the same
        order as a loop over every row would (the others add 0)."""

        def build() -> tuple[Tensor, Segments]:
            rows = torch.nonzero(mask).reshape(-1)
            sizes = torch.zeros(self.seg.n_queries, dtype=torch.long)
            sizes.index_add_(0, self.seg.row_query[rows], torch.ones_like(rows))
            return rows, Segments.of_sizes(sizes)

        found: tuple[Tensor, Segments] = self.memo(("rows", key), build)
        return found

    def gain(self, pairs: tuple[tuple[int, float], ...]) -> Tensor:
        found: Tensor = self.memo(("gain", pairs), lambda: self.gains(pairs))
        return found

    def dcg(self, pairs: tuple[tuple[int, float], ...]) -> tuple[Tensor, Segments, Tensor, Tensor]:
        """The rows of non-zero gain and their segments, the discounted gain so far at each, and per row
        of the lists how many rows of non-zero gain it ends."""

        def build() -> tuple[Tensor, Segments, Tensor, Tensor]:
            gain = self.gain(pairs)
            nonzero = gain != 0
            rows, seg = self.rows(("gain", pairs), nonzero)
            discounted = gain[rows] / torch.log2((self.seg.position[rows] + 2).to(F64))
            return rows, seg, seg.cumsum(discounted), self.seg.cumsum(nonzero.long())

        found: tuple[Tensor, Segments, Tensor, Tensor] = self.memo(("dcg", pairs), build)
        return found

    def dcg_at(self, pairs: tuple[tuple[int, float], ...], query: Tensor, count: Tensor) -> Tensor:
        """The DCG of the first ``count`` documents of ``query``'s list (at most its size), elementwise."""
        _, seg, cumulative, nonzero = self.dcg(pairs)
        return seg.at_query(cumulative, query, self.seg.at_query(nonzero, query, count))

    def dcg_total(self, pairs: tuple[tuple[int, float], ...]) -> Tensor:
        _, seg, cumulative, _ = self.dcg(pairs)
        return seg.at(cumulative, seg.sizes)

    def idcg(self, pairs: tuple[tuple[int, float], ...]) -> tuple[Tensor, Tensor]:
        """Per ideal position the ideal discounted gain so far, and per query the ideal DCG."""
        seg, gain = self.ideal(pairs)
        cumulative = self.memo(("idcg", pairs), lambda: seg.cumsum(_discounted(gain, seg)))
        return cumulative, seg.at(cumulative, seg.sizes)

    def prefix(self, cumulative: Tensor, k: Tensor) -> Tensor:
        """A cumulative after the first ``min(k, n_ret)`` rows of each query (``k``: ``(Q,)`` or
        ``(Q, C)``)."""
        n = self.n_ret.reshape(-1, *([1] * (k.dim() - 1)))
        return self.seg.at(cumulative, torch.minimum(k, n))

    def cutoffs(self, measure: Measure) -> Tensor:
        return torch.tensor([int(c) for c in measure.params], dtype=torch.long).expand(self.seg.n_queries, -1)

    def gains(self, pairs: tuple[tuple[int, float], ...]) -> Tensor:
        """Each row's gain: the pair's gain for its grade (the first pair naming it), else the grade
        itself where judged, else 0 (trec_eval's ``get_gain``)."""
        gain = torch.where(self.grade >= 0, self.grade, 0).to(F64)
        for grade, value in reversed(pairs):
            gain = torch.where(self.grade == grade, value, gain)
        return gain

    def ideal(self, pairs: tuple[tuple[int, float], ...]) -> tuple[Segments, Tensor]:
        """The ideal ranking's positive gains, best first, per query (``setup_gains``: a judged grade's
        gain is the pair's, else the grade)."""
        if pairs not in self._ideal:
            gain = self.level_grade.to(F64)
            for grade, value in reversed(pairs):
                gain = torch.where(self.level_grade == grade, value, gain)
            keep = (gain > 0) & (self.level_count > 0)
            query, gain, count = self.level_query[keep], gain[keep], self.level_count[keep]
            order = torch.argsort(-gain, stable=True)
            order = order[torch.argsort(query[order], stable=True)]
            query, gain, count = query[order], gain[order], count[order]
            sizes = torch.zeros(self.seg.n_queries, dtype=torch.long).index_add_(0, query, count)
            self._ideal[pairs] = (Segments.of_sizes(sizes), torch.repeat_interleave(gain, count))
        return self._ideal[pairs]


def _counts(r: Ranked, m: Measure) -> list[Tensor]:
    values = {"num_ret": r.n_ret, "num_rel": r.n_rel, "num_rel_ret": r.n_rel_ret, "num_q": r.n_ret * 0 + 1}
    if m.name == "num_nonrel_judged_ret":
        unjudged = r.seg.sum(r.grade < 0).long()
        return [(r.n_ret - unjudged - r.n_rel_ret).to(F64)]
    return [values[m.name].to(F64)]


def _average_precision(r: Ranked) -> tuple[Segments, Tensor]:
    """The relevant rows' segments, and the precision so far at each, added up."""

    def build() -> tuple[Segments, Tensor]:
        rows, seg = r.rows("rel", r.is_rel)
        return seg, seg.cumsum(r.cum_rel[rows] / (r.seg.position[rows] + 1).to(F64))

    found: tuple[Segments, Tensor] = r.memo("ap_terms", build)
    return found


def _map(r: Ranked, m: Measure) -> list[Tensor]:
    seg, terms = _average_precision(r)
    ap = r.memo("ap", lambda: _div(seg.at(terms, seg.sizes), r.n_rel))
    if m.name == "gm_map":
        return [ap.clamp(min=MIN_GEO_MEAN).log()]
    return [ap]


def _map_cut(r: Ranked, m: Measure) -> list[Tensor]:
    seg, terms = _average_precision(r)
    found = r.prefix(r.cum_rel, r.cutoffs(m))  # relevant documents among the first k
    return list(_div(seg.at(terms, found), r.n_rel[:, None]).T)


def _rprec(r: Ranked, m: Measure) -> list[Tensor]:
    return [_div(r.prefix(r.cum_rel, r.n_rel), r.n_rel)]


def _recip_rank(r: Ranked, m: Measure) -> list[Tensor]:
    first = torch.full((r.seg.n_queries,), -math.inf, dtype=F64)
    rank = (r.seg.position + 1).to(F64)
    first = first.scatter_reduce(0, r.seg.row_query[r.is_rel], -rank[r.is_rel], "amax")
    return [torch.where(first > -math.inf, -1.0 / first, 0.0)]


def _at_k(r: Ranked, m: Measure) -> list[Tensor]:
    k = r.cutoffs(m)
    found = r.prefix(r.cum_rel, k)
    if m.name == "P":
        out = found / k.to(F64)
    elif m.name == "recall":
        out = _div(found, r.n_rel[:, None].expand_as(k))
    elif m.name == "relative_P":
        out = _div(found, torch.minimum(k, r.n_rel[:, None]) * (r.n_rel[:, None] > 0))
    else:  # success
        out = (found > 0).to(F64)
    return list(out.T)


def _judged_preferences(r: Ranked) -> tuple[Tensor, Segments, Tensor, Tensor, Tensor]:
    """The judged relevant rows and their segments, and at each the judged non-relevant, judged relevant
    and in-pool unjudged documents so far (bpref and infAP skip documents the qrels do not list)."""

    def build() -> tuple[Tensor, Segments, Tensor, Tensor, Tensor]:
        judged = r.grade >= 0
        rows, seg = r.rows("judged_rel", judged & r.is_rel)
        nonrel = r.seg.cumsum((judged & ~r.is_rel).long())[rows]
        unjudged = r.seg.cumsum((r.grade == -2).long())[rows]
        return rows, seg, nonrel, seg.position + 1, unjudged

    found: tuple[Tensor, Segments, Tensor, Tensor, Tensor] = r.memo("judged", build)
    return found


def _bpref(r: Ranked, m: Measure) -> list[Tensor]:
    bpref = r.memo("bpref", lambda: _bpref_values(r))
    if m.name == "gm_bpref":
        return [bpref.clamp(min=MIN_GEO_MEAN).log()]
    return [bpref]


def _bpref_values(r: Ranked) -> Tensor:
    _, seg, nonrel_so_far, _, _ = _judged_preferences(r)
    big_r = r.n_rel[seg.row_query]
    denominator = torch.minimum(r.n_nonrel[seg.row_query], big_r).clamp(min=1).to(F64)
    term = torch.where(nonrel_so_far > 0, 1.0 - torch.minimum(nonrel_so_far, big_r) / denominator, 1.0)
    total = seg.sum(term)
    return torch.where(r.n_rel > 0, total / r.n_rel.clamp(min=1), total)


def _infap(r: Ranked, m: Measure) -> list[Tensor]:
    rows, seg, nonrel, rel_so_far, unjudged = _judged_preferences(r)
    j = r.seg.position[rows].to(F64)
    above = (rel_so_far - 1).to(F64)
    seen = (above + nonrel + unjudged) / j.clamp(min=1)
    smoothed = (above + INFAP_EPSILON) / (above + nonrel + 2 * INFAP_EPSILON)
    term = 1.0 / (j + 1.0) + (j / (j + 1.0)) * seen * smoothed
    total = seg.sum(torch.where(j == 0, 1.0, term))
    return [torch.where(r.n_rel > 0, total / r.n_rel.clamp(min=1), total)]


def _interpolated(r: Ranked, counts: Tensor) -> Tensor:
    """trec_eval's interpolated precision when ``counts`` relevant documents are found (``(Q, C)``): the best
    precision at or below the rank of the ``count``-th relevant document; 0 past the relevant retrieved;
    for ``count`` 0 the best precision of the list (``NaN`` for an empty list, as trec_eval's 0/0)."""
    rows = torch.nonzero(r.is_rel).reshape(-1)
    rel_seg = Segments.of_sizes(r.n_rel_ret)
    precision = r.cum_rel[rows].to(F64) / (r.seg.position[rows] + 1).to(F64)
    best = suffix_max(precision, rel_seg)
    found = r.n_rel_ret[:, None]
    index = rel_seg.starts[:-1, None] + counts.clamp(min=1) - 1
    value = torch.cat([best, best.new_zeros(1)])[torch.where(counts.clamp(min=1) <= found, index, -1)]
    empty = _div(r.n_rel_ret, r.n_ret).masked_fill(r.n_ret == 0, math.nan)[:, None].expand_as(value)
    return torch.where((counts == 0) & (found == 0), empty, torch.where(counts > found, 0.0, value))


def _recall_counts(r: Ranked, fractions: Sequence[float]) -> Tensor:
    """``(long)(p * R + 0.9)`` for each fraction ``p`` (trec_eval 9's conversion)."""
    p = torch.tensor(list(fractions), dtype=F64)
    return (p[None, :] * r.n_rel[:, None].to(F64) + 0.9).long()


def _iprec(r: Ranked, m: Measure) -> list[Tensor]:
    values = r.memo(("iprec", m.params), lambda: _interpolated(r, _recall_counts(r, m.params)))
    if m.name == "11pt_avg":
        return [values.sum(1) / len(m.params)]
    return list(values.T)


def _rprec_mult(r: Ranked, m: Measure) -> list[Tensor]:
    cut = _recall_counts(r, m.params)
    return list(_div(r.prefix(r.cum_rel, cut), cut).T)


def _sets(r: Ranked, m: Measure) -> list[Tensor]:
    ret, rel, both = r.n_ret.to(F64), r.n_rel.to(F64), r.n_rel_ret.to(F64)
    if m.name == "set_P":
        return [_div(both, ret)]
    if m.name == "set_recall":
        return [_div(both, rel)]
    if m.name == "set_relative_P":
        return [_div(both, torch.minimum(ret, rel))]
    if m.name == "set_map":
        return [_div(both * both, ret * rel)]
    if m.name == "set_F":
        x = float(m.params[0])
        p, recall = _div(both, ret), _div(both, rel)
        return [torch.where(both > 0, _div((x + 1.0) * p * recall, x * p + recall), 0.0)]
    a, b, c, d = (float(v) for v in m.params)  # utility
    value = a * both + b * (ret - both) + c * (rel - both) + d * (both - ret - rel)
    return [value.masked_fill(r.n_ret == 0, 0.0)]  # -c: trec_eval clears it for an absent query


def _bin_g(r: Ranked, m: Measure) -> list[Tensor]:
    rows, seg = r.rows("rel", r.is_rel)
    term = 1.0 / torch.log2((3 + r.seg.position[rows] - r.cum_rel[rows]).to(F64))
    return [_div(seg.sum(term), r.n_rel)]


def _discounted(gain: Tensor, seg: Segments) -> Tensor:
    return torch.where(gain != 0, gain / torch.log2((seg.position + 2).to(F64)), 0.0)


def _ndcg(r: Ranked, m: Measure) -> list[Tensor]:
    dcg, idcg = r.dcg_total(m.pairs), r.idcg(m.pairs)[1]
    return [_div(dcg, idcg) * (idcg > 0)]


def _ndcg_cut(r: Ranked, m: Measure) -> list[Tensor]:
    k = r.cutoffs(m)
    ideal_seg, _ = r.ideal(())
    count = torch.minimum(k, r.n_ret[:, None])
    dcg = r.dcg_at((), torch.arange(r.seg.n_queries)[:, None].expand_as(count), count)
    ideal_cum = r.idcg(())[0]
    idcg = ideal_seg.at(ideal_cum, torch.minimum(k, ideal_seg.sizes[:, None]))
    return list(torch.where(idcg > 0, dcg / torch.where(idcg > 0, idcg, 1.0), dcg).T)


def _no_value(r: Ranked, m: Measure) -> list[Tensor]:
    """``relstring`` is text (the grades of the first documents), not a value: NaN here."""
    return [torch.full((r.seg.n_queries,), math.nan, dtype=F64)]


MeasureFunction = Callable[[Ranked, Measure], list[Tensor]]
