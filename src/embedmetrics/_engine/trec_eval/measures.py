"""Every trec_eval measure of ``-m all_trec`` that a run and its qrels determine, per query, as trec_eval
computes it (its ``m_*.c`` files), on ranked lists of grades (``lists``).

The inputs are what trec_eval's ``form_res_rels`` gives: each query's ranked grades (``-1``: not in the
qrels, ``-2``: a negative grade, in the pool but not judged) cut at ``-M``, and per query the number of
judged documents at each grade. Every measure is a few segment operations over all the queries at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from embedmetrics._engine.trec_eval.lists import F64, Array, Segments, divide, group_sum, suffix_max
from embedmetrics._engine.trec_eval.names import Measure

__all__ = ["Measure", "Ranked"]

#: trec_eval's floor of the geometric means (``MIN_GEO_MEAN``) and infAP's smoothing (``INFAP_EPSILON``).
MIN_GEO_MEAN = 1e-5
INFAP_EPSILON = 1e-5

Pairs = tuple[tuple[int, float], ...]


class Ranked:
    """The ranked lists and what most measures read off them, computed once; ``version``: trec_eval's
    (10 or 9), for the measures whose computation changed."""

    def __init__(self, starts: Array, grade: Array, levels: tuple[Array, Array, Array], level: int,
                 version: int = 10):  # fmt: skip
        self.seg = Segments(starts)
        self.grade, self.level, self.version = np.asarray(grade, dtype=np.int64), level, version
        self.level_query, self.level_grade, self.level_count = (np.asarray(x, dtype=np.int64) for x in levels)
        self.n_ret: Array = self.seg.sizes
        self.is_rel: Array = self.grade >= level
        self.cum_rel: Array = self.seg.cumsum(self.is_rel)
        self.n_rel_ret: Array = self.seg.count(np.flatnonzero(self.is_rel))
        q = self.seg.n_queries
        counted = self.level_count * (self.level_grade >= level)
        self.n_rel: Array = group_sum(self.level_query, counted, q).astype(np.int64)
        judged_nonrel = self.level_count * (self.level_grade < level)
        self.n_nonrel: Array = group_sum(self.level_query, judged_nonrel, q).astype(np.int64)
        self._ideal: dict[Pairs, tuple[Segments, Array]] = {}
        self._memo: dict[object, Any] = {}

    def memo(self, key: object, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per key: what several measures share (``map`` and ``gm_map``, the gains)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def rows(self, key: object, mask: Array) -> tuple[Array, Segments]:
        """The rows where ``mask`` holds, in order, and their segments (once per ``key``): the few rows
        a measure adds up (relevant ones, non-zero gains); their sums add the same terms in the same
        order as a loop over every row would (the others add 0)."""

        def build() -> tuple[Array, Segments]:
            rows = np.flatnonzero(mask)
            return rows, Segments.of_sizes(self.seg.count(rows))

        found: tuple[Array, Segments] = self.memo(("rows", key), build)
        return found

    def gain(self, pairs: Pairs) -> Array:
        found: Array = self.memo(("gain", pairs), lambda: self.gains(pairs))
        return found

    def dcg(self, pairs: Pairs) -> tuple[Array, Segments, Array, Array]:
        """The rows of non-zero gain and their segments, the discounted gain so far at each, and per row
        of the lists how many rows of non-zero gain it ends."""

        def build() -> tuple[Array, Segments, Array, Array]:
            gain = self.gain(pairs)
            nonzero = gain != 0
            rows, seg = self.rows(("gain", pairs), nonzero)
            discounted = gain[rows] / np.log2((self.seg.position[rows] + 2).astype(F64))
            return rows, seg, seg.cumsum(discounted), self.seg.cumsum(nonzero)

        found: tuple[Array, Segments, Array, Array] = self.memo(("dcg", pairs), build)
        return found

    def dcg_at(self, pairs: Pairs, query: Array, count: Array) -> Array:
        """The DCG of the first ``count`` documents of ``query``'s list (at most its size), elementwise."""
        _, seg, cumulative, nonzero = self.dcg(pairs)
        return seg.at_query(cumulative, query, self.seg.at_query(nonzero, query, count))

    def dcg_total(self, pairs: Pairs) -> Array:
        _, seg, cumulative, _ = self.dcg(pairs)
        return seg.at(cumulative, seg.sizes)

    def idcg(self, pairs: Pairs) -> tuple[Array, Array]:
        """Per ideal position the ideal discounted gain so far, and per query the ideal DCG."""
        seg, gain = self.ideal(pairs)
        cumulative = self.memo(("idcg", pairs), lambda: seg.cumsum(_discounted(gain, seg)))
        return cumulative, seg.at(cumulative, seg.sizes)

    def prefix(self, cumulative: Array, k: Array) -> Array:
        """A cumulative after the first ``min(k, n_ret)`` rows of each query (``k``: ``(Q,)`` or
        ``(Q, C)``)."""
        n = self.n_ret.reshape(-1, *([1] * (k.ndim - 1)))
        return self.seg.at(cumulative, np.minimum(k, n))

    def cutoffs(self, measure: Measure) -> Array:
        cuts = np.array([int(c) for c in measure.params], dtype=np.int64)
        return np.broadcast_to(cuts, (self.seg.n_queries, cuts.size))

    def gains(self, pairs: Pairs) -> Array:
        """Each row's gain: the pair's gain for its grade (the first pair naming it), else the grade
        itself where judged, else 0 (trec_eval's ``get_gain``)."""
        gain = np.where(self.grade >= 0, self.grade, 0).astype(F64)
        for grade, value in reversed(pairs):
            gain = np.where(self.grade == grade, value, gain)
        return gain

    def ideal(self, pairs: Pairs) -> tuple[Segments, Array]:
        """The ideal ranking's gains, per query, in the order trec_eval walks ``setup_gains``' table: from
        its top down, each judged grade's gain (the pair's, else the grade) as many times as it is judged,
        up to the first gain not above 0. Without pairs the table is sorted by gain; with pairs it is in
        the order glibc's merge sort leaves it under trec_eval's comparison, which truncates the difference
        of two gains to an integer (``comp_rel_gain``: 0.5 and 0 compare equal)."""
        if pairs not in self._ideal:
            gain = self.level_grade.astype(F64)
            for grade, value in reversed(pairs):
                gain = np.where(self.level_grade == grade, value, gain)
            rank, empty = self._table_ranks(pairs)
            keep = (self.level_count > 0) & ~empty[self.level_query]
            query, gain, count = self.level_query[keep], gain[keep], self.level_count[keep]
            order = np.lexsort((-rank[keep], query))  # by query, then from the table's top down
            query, gain, count = query[order], gain[order], count[order]
            stop = np.concatenate([[0], np.cumsum(gain <= 0)])
            start = np.searchsorted(query, np.arange(self.seg.n_queries))
            keep = (stop[1:] - stop[start[query]]) == 0  # nothing at or past the first gain <= 0
            query, gain, count = query[keep], gain[keep], count[keep]
            sizes = group_sum(query, count, self.seg.n_queries).astype(np.int64)
            self._ideal[pairs] = (Segments.of_sizes(sizes), np.repeat(gain, count))
        return self._ideal[pairs]

    def _table_ranks(self, pairs: Pairs) -> tuple[Array, Array]:
        """Each judged (query, grade)'s place in its query's sorted table of gains (higher: nearer the top;
        by gain, then grade, where no pair is given), and per query whether the table's top gain is not
        above 0 (trec_eval's walk then stops at once)."""
        if not pairs:
            top_gain = np.full(self.seg.n_queries, -1.0)
            np.maximum.at(top_gain, self.level_query, self.level_grade.astype(F64))
            return self.level_grade.astype(F64), top_gain <= 0
        top = np.full(self.seg.n_queries, -1, dtype=np.int64)
        np.maximum.at(top, self.level_query, self.level_grade)
        rank = np.zeros(self.level_grade.size, dtype=F64)
        empty = np.zeros(self.seg.n_queries, dtype=bool)
        for highest in np.unique(top).tolist():
            table = _sorted_table(pairs, highest)
            place = {level: i for i, (level, _) in enumerate(table)}
            rows = top[self.level_query] == highest
            rank[rows] = [place[g] for g in self.level_grade[rows].tolist()]
            empty[top == highest] = not table or table[-1][1] <= 0
        return rank, empty


def _sorted_table(pairs: Pairs, highest: int) -> list[tuple[int, float]]:
    """``setup_gains``' table of (grade, gain) for a query judged up to grade ``highest``: the pairs, then
    the grades 0 to ``highest`` no pair names (gain: the grade), merge-sorted as glibc's ``qsort`` sorts
    it (``msort.c``: halves, then a stable merge) under ``comp_rel_gain`` (``(int)(a - b)``)."""
    named = {level for level, _ in pairs}
    table = [*pairs, *((g, float(g)) for g in range(highest + 1) if g not in named)]
    return _merge_sort(table)


def _merge_sort(items: list[tuple[int, float]]) -> list[tuple[int, float]]:
    if len(items) <= 1:
        return items
    half = len(items) // 2
    left, right = _merge_sort(items[:half]), _merge_sort(items[half:])
    out: list[tuple[int, float]] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if int(left[i][1] - right[j][1]) <= 0:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out + left[i:] + right[j:]


def _counts(r: Ranked, m: Measure) -> list[Array]:
    if m.name == "num_nonrel_judged_ret":
        unjudged = r.seg.count(np.flatnonzero(r.grade < 0))
        return [(r.n_ret - unjudged - r.n_rel_ret).astype(F64)]
    values = {"num_ret": r.n_ret, "num_rel": r.n_rel, "num_rel_ret": r.n_rel_ret, "num_q": r.n_ret * 0 + 1}
    return [values[m.name].astype(F64)]


def average_precision_terms(r: Ranked) -> tuple[Segments, Array]:
    """The relevant rows' segments, and the precision so far at each, added up."""

    def build() -> tuple[Segments, Array]:
        rows, seg = r.rows("rel", r.is_rel)
        return seg, seg.cumsum(r.cum_rel[rows] / (r.seg.position[rows] + 1).astype(F64))

    found: tuple[Segments, Array] = r.memo("ap_terms", build)
    return found


def _map(r: Ranked, m: Measure) -> list[Array]:
    seg, terms = average_precision_terms(r)
    ap = r.memo("ap", lambda: divide(seg.at(terms, seg.sizes), r.n_rel))
    if m.name == "gm_map":
        return [np.log(np.maximum(ap, MIN_GEO_MEAN))]
    return [ap]


def _map_cut(r: Ranked, m: Measure) -> list[Array]:
    seg, terms = average_precision_terms(r)
    found = r.prefix(r.cum_rel, r.cutoffs(m))  # relevant documents among the first k
    return list(divide(seg.at(terms, found), r.n_rel[:, None]).T)


def _rprec(r: Ranked, m: Measure) -> list[Array]:
    return [divide(r.prefix(r.cum_rel, r.n_rel), r.n_rel)]


def _recip_rank(r: Ranked, m: Measure) -> list[Array]:
    rows = np.flatnonzero(r.is_rel)
    query, first = np.unique(r.seg.row_query[rows], return_index=True)  # rows run query by query
    out = np.zeros(r.seg.n_queries, dtype=F64)
    out[query] = 1.0 / (r.seg.position[rows[first]] + 1).astype(F64)
    return [out]


def _at_k(r: Ranked, m: Measure) -> list[Array]:
    k = r.cutoffs(m)
    found = r.prefix(r.cum_rel, k)
    if m.name == "P":
        out = found / k.astype(F64)
    elif m.name == "recall":
        out = divide(found, np.broadcast_to(r.n_rel[:, None], k.shape))
    elif m.name == "relative_P":
        out = divide(found, np.minimum(k, r.n_rel[:, None]) * (r.n_rel[:, None] > 0))
    else:  # success
        out = (found > 0).astype(F64)
    return list(out.T)


def _judged_preferences(r: Ranked) -> tuple[Array, Segments, Array, Array, Array]:
    """The judged relevant rows and their segments, and at each the judged non-relevant, judged relevant
    and in-pool unjudged documents so far (bpref and infAP skip documents the qrels do not list)."""

    def build() -> tuple[Array, Segments, Array, Array, Array]:
        judged = r.grade >= 0
        rows, seg = r.rows("judged_rel", judged & r.is_rel)
        nonrel = r.seg.cumsum(judged & ~r.is_rel)[rows]
        unjudged = r.seg.cumsum(r.grade == -2)[rows]
        return rows, seg, nonrel, seg.position + 1, unjudged

    found: tuple[Array, Segments, Array, Array, Array] = r.memo("judged", build)
    return found


def _bpref(r: Ranked, m: Measure) -> list[Array]:
    bpref = r.memo("bpref", lambda: _bpref_values(r))
    if m.name == "gm_bpref":
        return [np.log(np.maximum(bpref, MIN_GEO_MEAN))]
    return [bpref]


def _bpref_values(r: Ranked) -> Array:
    _, seg, nonrel_so_far, _, _ = _judged_preferences(r)
    big_r = r.n_rel[seg.row_query]
    denominator = np.maximum(np.minimum(r.n_nonrel[seg.row_query], big_r), 1).astype(F64)
    term = np.where(nonrel_so_far > 0, 1.0 - np.minimum(nonrel_so_far, big_r) / denominator, 1.0)
    total = seg.sum(term)
    out: Array = np.where(r.n_rel > 0, total / np.maximum(r.n_rel, 1), total)
    return out


def _infap(r: Ranked, m: Measure) -> list[Array]:
    rows, seg, nonrel, rel_so_far, unjudged = _judged_preferences(r)
    j = r.seg.position[rows].astype(F64)
    above = (rel_so_far - 1).astype(F64)
    seen = (above + nonrel + unjudged) / np.maximum(j, 1)
    smoothed = (above + INFAP_EPSILON) / (above + nonrel + 2 * INFAP_EPSILON)
    term = 1.0 / (j + 1.0) + (j / (j + 1.0)) * seen * smoothed
    total = seg.sum(np.where(j == 0, 1.0, term))
    return [np.where(r.n_rel > 0, total / np.maximum(r.n_rel, 1), total)]


def _interpolated(r: Ranked, counts: Array) -> Array:
    """trec_eval's interpolated precision when ``counts`` relevant documents are found (``(Q, C)``): the best
    precision at or below the rank of the ``count``-th relevant document; 0 past the relevant retrieved;
    for ``count`` 0 the best precision of the list (``-NaN`` for an empty list, ``-M 0``: trec_eval's 0/0,
    negative on x86, printed ``-nan``)."""
    rows = np.flatnonzero(r.is_rel)
    rel_seg = Segments.of_sizes(r.n_rel_ret)
    precision = r.cum_rel[rows].astype(F64) / (r.seg.position[rows] + 1).astype(F64)
    best = suffix_max(precision, rel_seg)
    found = r.n_rel_ret[:, None]
    index = rel_seg.starts[:-1, None] + np.maximum(counts, 1) - 1
    value = np.append(best, 0.0)[np.where(np.maximum(counts, 1) <= found, index, -1)]
    empty = np.where(r.n_ret == 0, -math.nan, divide(r.n_rel_ret, r.n_ret))[:, None]
    return np.where((counts == 0) & (found == 0), empty, np.where(counts > found, 0.0, value))


def recall_counts(r: Ranked, fractions: Sequence[float], rounded: bool) -> Array:
    """Each fraction ``p`` of ``R`` as a number of documents: ``lround(p * R)`` (trec_eval 10's
    interpolated precision, ``rounded``), else ``(long)(p * R + 0.9)`` (trec_eval 9; ``Rprec_mult`` in
    both)."""
    product = np.asarray(fractions, dtype=F64)[None, :] * r.n_rel[:, None].astype(F64)
    if rounded:  # C's lround: the nearest integer, halves away from zero (x - trunc(x) is exact)
        whole = np.trunc(product)
        away = np.where(np.abs(product - whole) >= 0.5, np.sign(product), 0.0)
        out: Array = (whole + away).astype(np.int64)
        return out
    return np.trunc(product + 0.9).astype(np.int64)


def _iprec(r: Ranked, m: Measure) -> list[Array]:
    rounded = r.version >= 10
    values: Array = r.memo(("iprec", m.params), lambda: _interpolated(r, recall_counts(r, m.params, rounded)))
    if m.name == "11pt_avg":  # added from the last recall point to the first, as m_11pt_avg.c adds them
        return [np.cumsum(values[:, ::-1], axis=1)[:, -1] / len(m.params)]
    return list(values.T)


def _rprec_mult(r: Ranked, m: Measure) -> list[Array]:
    cut = recall_counts(r, m.params, rounded=False)
    return list(divide(r.prefix(r.cum_rel, cut), cut).T)


def _sets(r: Ranked, m: Measure) -> list[Array]:
    ret, rel, both = r.n_ret.astype(F64), r.n_rel.astype(F64), r.n_rel_ret.astype(F64)
    if m.name == "set_P":
        return [divide(both, ret)]
    if m.name == "set_recall":
        return [divide(both, rel)]
    if m.name == "set_relative_P":
        return [divide(both, np.minimum(ret, rel))]
    if m.name == "set_map":
        return [divide(both * both, ret * rel)]
    if m.name == "set_F":
        x = float(m.params[0])
        p, recall = divide(both, ret), divide(both, rel)
        return [np.where(both > 0, divide((x + 1.0) * p * recall, x * p + recall), 0.0)]
    a, b, c, d = (float(v) for v in m.params[:4])  # utility
    value = a * both + b * (ret - both) + c * (rel - both) + d * (both - ret - rel)
    return [np.where(r.n_ret == 0, 0.0, value)]  # -c: trec_eval clears it for an absent query


def _bin_g(r: Ranked, m: Measure) -> list[Array]:
    rows, seg = r.rows("rel", r.is_rel)
    term = 1.0 / np.log2((3 + r.seg.position[rows] - r.cum_rel[rows]).astype(F64))
    return [divide(seg.sum(term), r.n_rel)]


def _discounted(gain: Array, seg: Segments) -> Array:
    out: Array = np.where(gain != 0, gain / np.log2((seg.position + 2).astype(F64)), 0.0)
    return out


def _ndcg(r: Ranked, m: Measure) -> list[Array]:
    dcg, idcg = r.dcg_total(m.pairs), r.idcg(m.pairs)[1]
    if m.name == "dcg":
        return [dcg]
    if m.name == "ideal_dcg":
        return [idcg]
    return [divide(dcg, idcg) * (idcg > 0)]


def _ndcg_cut(r: Ranked, m: Measure) -> list[Array]:
    k = r.cutoffs(m)
    ideal_seg, _ = r.ideal(())
    count = np.minimum(k, r.n_ret[:, None])
    dcg = r.dcg_at((), np.broadcast_to(np.arange(r.seg.n_queries)[:, None], count.shape), count)
    ideal_cum = r.idcg(())[0]
    idcg = ideal_seg.at(ideal_cum, np.minimum(k, ideal_seg.sizes[:, None]))
    return list(np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), dcg).T)


def _no_value(r: Ranked, m: Measure) -> list[Array]:
    """``relstring`` is text (the grades of the first documents), not a value: NaN here."""
    return [np.full(r.seg.n_queries, math.nan, dtype=F64)]


MeasureFunction = Callable[[Ranked, Measure], list[Array]]
