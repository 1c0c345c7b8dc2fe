"""Exact blocked k-nearest-neighbour scan with tie-aware label metrics.

For each block of query rows: one matrix product against all references (Euclidean ranking key
``||r||² − 2 q·r``, or ``−cos`` for cosine) into a reused buffer, the query's own reference column
masked by index, and the exact ``K + 1`` smallest keys of each row (``smallest_keys``: a
threshold from group minima leaves a few candidates per row to rank, instead of a ``topk`` over
every reference). The extra neighbour tells whether the tie block at the cut-off continues past
position ``K`` ("spill"); only for those rows the full row is scanned again to count the whole
boundary block and its relevant items. From the list the per-query
metric values (precision@1, R-precision, AP@R, AP, reciprocal rank) are reduced at once with the
closed forms of ``embedmetrics._engine.core.tie_stats``, so per-query state is O(1), never O(K),
unless the caller asks for the neighbour lists themselves.

Nothing allocates an ``n_query × n_reference`` matrix: peak extra memory is one block
(``block_bytes``), the filter's temporaries (typically half a block; rows whose candidates would
exceed a quarter of the groups take a plain ``topk`` instead, which caps them at a few blocks) and
``O(block · K)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.core import tie_stats
from embedmetrics._engine.core.canonical import (
    ListReader,
    Rescorer,
    canonical_candidates,
    canonical_smallest,
    key_margins,
)
from embedmetrics._engine.core.checks import check_score_range, largest_magnitude
from embedmetrics._engine.core.distinct import distinct_rows
from embedmetrics._engine.core.scan import (
    all_reduce_sum,
    block_budget,
    compute_dtype,
    l2_normalize,
    plan_blocks,
    rows_at,
)

LabelComparison = Callable[[Tensor, Tensor], Tensor]

#: Default budget of one block of the kNN scan on the CPU (bytes of the key block): small enough that
#: the block stays in the core's cache between the product and the selection's passes over it (and
#: that no block is fresh memory: 256 MiB blocks cost 1.3x more, measured on 20k x 20k).
KNN_BLOCK_BYTES = 12 * 2**20
#: Fewest query rows of a default block (unless that passes ``KNN_MAX_BLOCK_BYTES``): the matrix product
#: runs below its speed on thin blocks (each block packs the whole reference side again), and every
#: block pays a fixed cost of small passes (canonical keys). On a 2-core Xeon, 50,000 x 512 references
#: and 5,000 queries: 1.66 s with 128-row blocks, 1.51 s with 512; 20,000 x 128, k = 244: 3.9 s and 3.4 s.
KNN_MIN_ROWS = 512
#: Most bytes of a default block that ``KNN_MIN_ROWS`` may ask for (very long reference sides).
KNN_MAX_BLOCK_BYTES = 256 * 2**20

#: Per-query statistics the scan produces (float64, one value per query).
STAT_NAMES = ("precision_at_1", "r_precision", "map_at_r", "average_precision", "reciprocal_rank")


def default_label_comparison(x: Tensor, y: Tensor) -> Tensor:
    """Equality of labels; 2-D labels (one row per sample) are equal when all their columns are."""
    eq = x == y
    return eq.all(dim=-1) if eq.ndim > 2 else eq


def compare_labels(fn: Optional[LabelComparison], query_labels: Tensor, ref_labels: Tensor) -> Tensor:
    """``(rows, cols)`` relevance: ``query_labels`` (rows, ...) against ``ref_labels`` (rows|1, cols, ...)."""
    q = query_labels[:, None]
    out = (fn or default_label_comparison)(q, ref_labels)
    if out.dtype != torch.bool:
        out = out.bool()
    return out


def relevant_counts(
    query_labels: Tensor,
    reference_labels: Tensor,
    self_index: Optional[Tensor],
    fn: Optional[LabelComparison],
    *,
    chunk_elements: int = 2**24,
) -> tuple[Tensor, Tensor, Tensor]:
    """Number of relevant references of each query, the query itself excluded.

    Returns:
        ``(counts, unique_query_labels, matches_per_unique_label)``: ``counts`` is ``(n_query,)``
        int64; the other two describe how many references match each distinct query label.
    """
    dim = 0 if query_labels.ndim > 1 else None
    if dim is None:
        uq, inv = torch.unique(query_labels, return_inverse=True)
    else:
        uq, inv = torch.unique(query_labels, dim=0, return_inverse=True)
    if fn is None:
        both = torch.cat([uq, reference_labels.to(uq.dtype)])
        if dim is None:
            _, inv_all = torch.unique(both, return_inverse=True)
        else:
            _, inv_all = torch.unique(both, dim=0, return_inverse=True)
        n_u = uq.shape[0]
        hits = torch.bincount(inv_all[n_u:], minlength=int(inv_all.max().item()) + 1)
        matches = hits[inv_all[:n_u]]
    else:
        per = max(1, chunk_elements // max(1, reference_labels.shape[0]))
        parts = [
            compare_labels(fn, uq[s : s + per], reference_labels[None]).sum(dim=1)
            for s in range(0, uq.shape[0], per)
        ]
        matches = torch.cat(parts)
    counts = matches[inv].to(torch.int64)
    if self_index is not None:
        has_self = self_index >= 0
        if fn is not None:
            own = compare_labels(fn, query_labels, query_labels[:, None]).reshape(-1)
            has_self = has_self & own
        counts = counts - has_self.to(torch.int64)
    return counts, uq, matches.to(torch.int64)


@dataclass
class KnnResult:
    """What the scan returns; every tensor is indexed by query and zero for unscanned queries."""

    stats: dict[str, Tensor]
    indices: Optional[Tensor] = None  # (n_query, K) int64, sorted by (distance, index)
    distances: Optional[Tensor] = None  # (n_query, K) distances of those neighbours
    k: int = 0
    extra: dict[str, Tensor] = field(default_factory=dict)

    def all_reduce(self, shard: Optional[tuple[int, int]]) -> KnnResult:
        """Combine the partial results of a sharded scan (each query is scanned by one rank)."""
        stats = {n: all_reduce_sum(v, shard) for n, v in self.stats.items()}
        idx = all_reduce_sum(self.indices, shard) if self.indices is not None else None
        dst = all_reduce_sum(self.distances, shard) if self.distances is not None else None
        return KnnResult(stats, idx, dst, self.k)


@dataclass
class KeyBlocks:
    """Ranking keys of query blocks against all references (ascending = nearer), one block at a time.

    Euclidean: ``||r||² − 2 q·r`` as one product ``[−2q, 1] · [r, ||r||²]``; cosine: ``−cos``; dot:
    ``−q·r``. Identical
    reference rows get bit-identical keys in every row (each distinct row is multiplied once and its
    key copied to every column that holds it). Columns past ``n_r`` (padding for
    ``smallest_keys``' groups) and each query's own column (``self_index``) are ``+inf``.
    """

    q: Tensor
    ref_t: Tensor
    inverse: Optional[Tensor]
    q_sq: Optional[Tensor]
    n_r: int
    n_cols: int
    kk: int
    groups: Optional[tuple[int, int]]
    self_index: Optional[Tensor]
    margins: Tensor
    buffer: Optional[Tensor] = None

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def dtype(self) -> torch.dtype:
        return self.q.dtype

    @classmethod
    def prepare(
        cls, query: Tensor, reference: Tensor, distance: str, kk: int, self_index: Optional[Tensor] = None
    ) -> KeyBlocks:
        """Normalise or extend the rows once; ``kk`` keys per row will be asked of ``smallest_keys``."""
        dtype = compute_dtype(query, reference)
        q = query.detach().to(dtype)
        if distance != "cosine":  # cosine rows are normalised: any finite scale
            magnitudes = (float(largest_magnitude(q)), float(largest_magnitude(reference.detach())))
            check_score_range(("query", "reference"), magnitudes, q.shape[1], distance, dtype)
        # identical reference rows must get identical keys in every row: compute each distinct one once
        distinct = distinct_rows(reference.detach().to(dtype))
        ref = distinct.rows
        n_q, n_r = q.shape[0], reference.shape[0]
        q_sq: Optional[Tensor] = None
        if distance == "cosine":
            q = -l2_normalize(q, 1e-12)
            ref = l2_normalize(ref, 1e-12)
        elif distance == "dot":
            q = -q
        else:
            q_sq = (q * q).sum(dim=1)
            ref = torch.cat([ref, (ref * ref).sum(dim=1, keepdim=True)], dim=1)
            q = torch.cat([q * -2.0, q.new_ones(n_q, 1)], dim=1)
        groups = column_groups(n_r, kk)
        n_cols = n_r if groups is None else groups[0] * GROUP_SIZE
        margins = key_margins(q, ref, euclidean=q_sq is not None)
        return cls(q, ref.T, distinct.inverse, q_sq, n_r, n_cols, kk, groups, self_index, margins)

    def plan(
        self, block_bytes: int | None, shard: Optional[tuple[int, int]], extra_row_bytes: int = 0
    ) -> list[tuple[int, int]]:
        """This shard's query blocks (``extra_row_bytes``: the caller's own memory per query row)."""
        row_bytes = self.n_cols * self.q.element_size() + extra_row_bytes
        budget = block_budget(block_bytes, self.device, KNN_BLOCK_BYTES)
        if block_bytes is None:  # the default: at least KNN_MIN_ROWS rows, within KNN_MAX_BLOCK_BYTES
            budget = max(budget, min(KNN_MIN_ROWS * row_bytes, KNN_MAX_BLOCK_BYTES))
        rows, ranges = plan_blocks(self.q.shape[0], row_bytes, budget, shard)
        self.buffer = torch.empty(
            min(rows, self.q.shape[0]), self.n_cols, dtype=self.dtype, device=self.device
        )
        return ranges

    def rescorer(self, start: int, stop: int) -> Rescorer:
        """Canonical keys of the queries ``start:stop`` (``embedmetrics._engine.core.canonical``)."""
        return Rescorer(self.q[start:stop], self.ref_t.T, self.inverse, self.margins[start:stop])

    def nearest(
        self, start: int, stop: int, values: bool = True, reader: Optional[ListReader] = None
    ) -> tuple[Tensor, Tensor, Tensor, Rescorer]:
        """The block's product keys (valid until the next call), its ``kk`` smallest canonical keys
        (float64, ascending) and their columns, and the block's ``Rescorer`` (whole rows:
        ``Rescorer.rows``): what a query gets never depends on the other queries of its block."""
        s = self.block(start, stop)
        rescore = self.rescorer(start, stop)
        vals, idx = smallest_keys(
            s, self.kk, self.groups, rescore=rescore, values=values, reader=reader, n_real=self.n_r
        )
        return s, vals, idx, rescore

    def block(self, start: int, stop: int) -> Tensor:
        """The ``(stop − start, n_cols)`` keys of queries ``start:stop`` (valid until the next call)."""
        assert self.buffer is not None, "call plan() first"
        nb = stop - start
        s = self.buffer[:nb]
        if self.inverse is None:  # into the buffer's first columns (a strided output: no copy)
            torch.mm(self.q[start:stop], self.ref_t, out=s[:, : self.n_r])
        else:  # keys of the distinct rows, then every reference column takes its row's key
            s[:, : self.n_r] = torch.mm(self.q[start:stop], self.ref_t).index_select(1, self.inverse)
        s[:, self.n_r :] = float("inf")  # padding columns
        if self.self_index is not None:
            own = self.self_index[start:stop]
            valid = own >= 0
            s[torch.arange(nb, device=s.device)[valid], own[valid]] = float("inf")
        return s


def knn_scan(
    query: Tensor,
    reference: Tensor,
    query_labels: Tensor,
    reference_labels: Tensor,
    *,
    k: int,
    counts: Tensor,
    self_index: Optional[Tensor] = None,
    distance: str = "euclidean",
    ties: str = "average",
    label_comparison_fn: Optional[LabelComparison] = None,
    return_neighbors: bool = False,
    stats: Sequence[str] = STAT_NAMES,
    block_bytes: int | None = None,
    shard: Optional[tuple[int, int]] = None,
) -> KnnResult:
    """Exact kNN of every query among the references and the per-query label statistics.

    Args:
        query: ``(n_q, d)`` query embeddings.
        reference: ``(n_r, d)`` reference embeddings.
        query_labels: ``(n_q,)`` or ``(n_q, w)`` labels.
        reference_labels: ``(n_r,)`` or ``(n_r, w)`` labels.
        k: neighbours to keep, ``1 <= k <=`` number of references a query can see.
        counts: ``(n_q,)`` relevant references of each query (see ``relevant_counts``);
            R-precision and AP@R use ``min(count, k)`` positions and divide AP by ``count``.
        self_index: ``(n_q,)`` reference index of each query itself (``-1``: none), masked out.
        distance: ``"euclidean"`` or ``"cosine"`` (cosine distance ``1 − cos``).
        ties: tie policy, see ``embedmetrics._engine.core.tie_stats``.
        label_comparison_fn: relevance of a (query label, reference label) pair; ``None``: equality.
        return_neighbors: also return the neighbour indices and distances (``(n_q, k)``).
        stats: which per-query statistics to compute (a subset of ``STAT_NAMES``).
        block_bytes: memory budget of one similarity block (``None``: chosen for the device).
        shard: ``(rank, world)``: scan only this rank's share of the query blocks.

    Returns:
        Per-query statistics (see ``STAT_NAMES``), zero outside the scanned share.
    """
    keys = KeyBlocks.prepare(query, reference, distance, min(k + 1, reference.shape[0]), self_index)
    n_q, dev, dtype = query.shape[0], keys.device, keys.dtype
    n_r = keys.n_r
    out = {n: torch.zeros(n_q, dtype=torch.float64, device=dev) for n in STAT_NAMES if n in stats}
    indices = torch.zeros(n_q, k, dtype=torch.int64, device=dev) if return_neighbors else None
    distances = torch.zeros(n_q, k, dtype=dtype, device=dev) if return_neighbors else None
    ranges = keys.plan(block_bytes, shard)
    q_sq = keys.q_sq
    cmp_fn = label_comparison_fn
    for start, stop in ranges:
        # rank statistics read only the order and the tie blocks: canonical values only where asked for
        qlab = query_labels[start:stop]
        reader = (
            None
            if return_neighbors
            else _statistics_reader(out, cmp_fn, qlab, reference_labels, counts[start:stop], k)
        )
        s, vals, idx, rescore = keys.nearest(start, stop, values=return_neighbors, reader=reader)
        v_k = vals[:, k - 1]
        rel = compare_labels(cmp_fn, qlab, rows_at(reference_labels, idx[:, :k]))
        spill = _spills(vals, k, reader)

        relevant_in_row = partial(_relevant_in_rows, cmp_fn, qlab, reference_labels)
        row_keys = partial(_canonical_rows, rescore, s[:, :n_r], v_k)
        tied_rows, last_t, last_r, spill_rows, sub = _last_tie_block(
            vals, v_k, rel, spill, row_keys, k, relevant_in_row
        )
        need_prec = "map_at_r" in out or "average_precision" in out
        terms = _position_terms(
            vals[:, :k], rel, tied_rows, last_t, last_r, ties, need_prec, "reciprocal_rank" in out
        )
        _store_stats(out, (start, stop), terms, counts[start:stop], k)
        if indices is not None and distances is not None:
            sel_idx, sel_key = _deterministic_neighbors(vals, idx, k, spill_rows, sub, v_k)
            indices[start:stop] = sel_idx
            if q_sq is None:
                distances[start:stop] = 1.0 + sel_key
            else:
                distances[start:stop] = (sel_key + q_sq[start:stop, None]).clamp_min(0).sqrt()
    return KnnResult(out, indices, distances, k)


def _statistics_reader(
    out: dict[str, Tensor],
    cmp_fn: Optional[LabelComparison],
    query_labels: Tensor,
    reference_labels: Tensor,
    counts: Tensor,
    k: int,
) -> ListReader:
    """What the statistics ``out`` read of a block's lists: the neighbours' relevance (``_pair_classes``)
    within each query's ``_reach``."""
    return ListReader(partial(_pair_classes, cmp_fn, query_labels, reference_labels), _reach(out, counts, k))


#: The statistics that read only a prefix of a query's list (``_store_stats``): the first place, or the
#: first ``min(count, k)``. Any other statistic reads every place.
PREFIX_READERS = {"precision_at_1": "first", "r_precision": "upto_r", "map_at_r": "upto_r"}


def _reach(out: dict[str, Tensor], counts: Tensor, k: int) -> Tensor:
    """Per query, the leading places of its neighbour list that the statistics ``out`` read: the first
    for precision@1, ``min(count, k)`` for R-precision and MAP@R, every place for any other."""
    reads = {PREFIX_READERS.get(name, "all") for name in out}
    if "all" in reads:
        return torch.full_like(counts, k)
    reach = counts.clamp(0, k) if "upto_r" in reads else torch.zeros_like(counts)
    return reach.clamp_min(1) if "first" in reads else reach


def _spills(vals: Tensor, k: int, reader: Optional[ListReader]) -> Tensor:
    """Per row of ``vals`` (ascending, ``k`` or more keys), whether the tie block of its ``k``-th key
    continues past it (the ``k + 1``-th key is equal) and is read (``_spills_read``)."""
    if vals.shape[1] <= k:
        return torch.zeros(vals.shape[0], dtype=torch.bool, device=vals.device)
    spill = vals[:, k] == vals[:, k - 1]
    if reader is None or reader.reach is None:
        return spill
    return _spills_read(spill, vals[:, :k], vals[:, k - 1], reader.reach)


def _spills_read(spill: Tensor, vals: Tensor, v_k: Tensor, reach: Tensor) -> Tensor:
    """``spill`` where the list's last tie block starts within the row's ``reach``. A block that starts
    past it is never read, and its keys may be the product's (``canonical.ListReader``): its size is
    then taken as listed rather than counted on the canonical row, which might not hold ``v_k``."""
    rows = spill.nonzero().view(-1)
    if rows.numel() == 0:
        return spill
    start = (vals.index_select(0, rows) == v_k.index_select(0, rows)[:, None]).to(torch.int8).argmax(dim=1)
    return spill.index_put((rows,), start < reach.index_select(0, rows))


def _canonical_rows(rescore: Rescorer, s: Tensor, v_k: Tensor, rows: Tensor) -> Tensor:
    """Whole rows of the block, canonical up to each row's ``k``-th key (``Rescorer.rows``)."""
    return rescore.rows(s, rows, v_k[rows])


def _relevant_in_rows(
    cmp_fn: Optional[LabelComparison], query_labels: Tensor, reference_labels: Tensor, rows: Tensor
) -> Tensor:
    """Relevance of every reference for the queries ``rows`` (whole rows)."""
    return compare_labels(cmp_fn, query_labels[rows], reference_labels[None])


def _last_tie_block(
    vals: Tensor,
    v_k: Tensor,
    rel: Tensor,
    spill: Tensor,
    row_keys: Callable[[Tensor], Tensor],
    k: int,
    relevant_in_row: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Optional[Tensor]]:
    """The rows with a tie among their ``k`` neighbours, and for each the size and relevant count of its
    last tie block (counted on the whole row ``row_keys`` where the block spills past the kept keys).

    Returns ``(tied_rows, last_t, last_r, spill_rows, spill_keys)``; ``last_*`` are read only for the
    tied rows."""
    tied_rows = (spill | (vals[:, 1:k] == vals[:, : k - 1]).any(dim=1)).nonzero().flatten()
    spill_rows, sub = tied_rows[:0], None
    last_t = last_r = tied_rows  # placeholders, read only for tied rows
    if tied_rows.numel() > 0:
        in_last = vals[tied_rows, :k] == v_k[tied_rows, None]
        last_t = in_last.sum(dim=1)
        last_r = (in_last & rel[tied_rows]).sum(dim=1)
        spill_at = spill[tied_rows].nonzero().flatten()
        if spill_at.numel() > 0:
            spill_rows = tied_rows[spill_at]
            sub = row_keys(spill_rows)
            eq = sub == v_k[spill_rows, None]
            last_t[spill_at] = eq.sum(dim=1)
            last_r[spill_at] = (eq & relevant_in_row(spill_rows)).sum(dim=1)
    return tied_rows, last_t, last_r, spill_rows, sub


def _store_stats(
    out: dict[str, Tensor],
    rows: tuple[int, int],
    terms: tuple[Tensor, Optional[Tensor], Optional[Tensor]],
    counts: Tensor,
    k: int,
) -> None:
    """Per-query statistics of rows ``[start, stop)`` from their position terms."""
    start, stop = rows
    exp_rel, prec, rr = terms
    length = counts.clamp(max=k)  # pytorch-metric-learning's: R-precision of the first min(R, k)
    denom_r = counts.to(torch.float64)
    if "precision_at_1" in out:
        out["precision_at_1"][start:stop] = exp_rel[:, 0]
    if "r_precision" in out:
        out["r_precision"][start:stop] = tie_stats.ratio(tie_stats.upto(exp_rel, length), length.double())
    if prec is not None and "map_at_r" in out:
        out["map_at_r"][start:stop] = tie_stats.ratio(tie_stats.upto(prec, length), denom_r)
    if prec is not None and "average_precision" in out:
        out["average_precision"][start:stop] = tie_stats.ratio(prec.sum(dim=1), denom_r)
    if rr is not None:
        out["reciprocal_rank"][start:stop] = rr.sum(dim=1)


#: Columns per group of ``smallest_keys``' candidate filter.
GROUP_SIZE = 8


def column_groups(n_cols: int, kk: int) -> Optional[tuple[int, int]]:
    """``(n_groups, n_coarse)`` for ``smallest_keys`` on rows of ``n_cols`` keys, or ``None``.

    ``n_groups`` strided groups of ``GROUP_SIZE`` columns (the columns are padded up to a
    multiple), merged into ``n_coarse >= 2 kk`` coarse groups of a power-of-two number of groups.
    ``None`` where the rows are too short for the filter to pay off: a plain ``topk`` then.
    """
    if n_cols < 4 * kk * GROUP_SIZE:
        return None
    per_coarse = 1
    while n_cols >= 4 * kk * GROUP_SIZE * per_coarse:
        per_coarse *= 2
    n_coarse = -(-n_cols // (GROUP_SIZE * per_coarse))
    return n_coarse * per_coarse, n_coarse


def _coarse_bound(coarse_min: Tensor, kk: int, bound: Optional[Tensor]) -> Tensor:
    """Per row, ``min(bound, the kk-th smallest coarse minimum)``: a key no smaller than the row's
    ``kk``-th smallest wanted key. Rows with fewer than ``kk`` coarse minima ``<= bound`` keep ``bound``
    (their ``kk``-th coarse minimum is larger), so only the others need the ``topk``."""
    if bound is None:
        return coarse_min.topk(kk, dim=1, largest=False, sorted=False).values.amax(dim=1)
    tau = bound.to(coarse_min.dtype, copy=True)
    rows = ((coarse_min <= tau[:, None]).sum(dim=1) >= kk).nonzero().flatten()
    if rows.numel() > 0:
        kth = coarse_min[rows].topk(kk, dim=1, largest=False, sorted=False).values.amax(dim=1)
        tau[rows] = torch.minimum(tau[rows], kth)
    return tau


def smallest_keys(
    s: Tensor,
    kk: int,
    groups: Optional[tuple[int, int]],
    bound: Optional[Tensor] = None,
    rescore: Optional[Rescorer] = None,
    values: bool = True,
    reader: Optional[ListReader] = None,
    n_real: Optional[int] = None,
) -> tuple[Tensor, Tensor]:
    """The ``kk`` smallest keys of each row of ``s`` and their columns, ascending.

    With ``rescore``, the ``kk`` smallest *canonical* keys (float64; ``s`` holds the product's keys,
    ``embedmetrics._engine.core.canonical``): the filter's threshold is widened by the margin, and the
    candidates within the margin of each row's ``kk``-th product key are rescored before the final
    ranking, so no extra pass over the block is needed.

    Equal to ``s.topk(kk, dim=1, largest=False, sorted=True)`` up to the order of equal keys.
    ``bound`` (``(rows,)``, optional): only keys ``<= bound`` of a row are wanted (a running list's last
    key: no larger key can enter it); the row's places past its keys ``<= bound`` may then hold
    ``+inf`` instead of larger keys, and the result has fewer than ``kk`` columns when no row has that
    many keys ``<= bound``.
    With ``groups = (n_groups, n_coarse)`` (see ``column_groups``; ``s`` has
    ``n_groups * GROUP_SIZE`` columns), column ``c`` belongs to group ``c % n_groups`` and group
    ``g`` to coarse group ``g % n_coarse``. The minima of ``kk`` coarse groups are ``kk`` distinct
    keys, so the largest of the ``kk`` smallest coarse minima, ``tau``, is at least the ``kk``-th
    smallest key of the row. Every key ``<= tau`` lies in a group whose minimum is ``<= tau``: only
    those groups are gathered, and their keys ``<= tau`` (at least ``kk``, all keys tied with the
    ``kk``-th included) are ranked exactly. Rows holding NaN or an infinite ``tau``, and rows whose
    bound leaves more than a quarter of the groups, take a plain ``topk`` of their first ``n_real`` columns
    (``None``: all; the others are padding, ``+inf``, and a row's NaN keys would rank after them).
    """
    real = s if n_real is None else s[:, :n_real]
    if groups is None and bound is not None and rescore is None:
        return _bounded_smallest(real, kk, bound)
    if groups is None:
        vals, idx = real.topk(kk, dim=1, largest=False, sorted=True)
        if rescore is None:
            return vals, idx
        return canonical_smallest(vals, idx, real, rescore, values=values, reader=reader)
    n_groups, n_coarse = groups
    nb, n_cols = s.shape
    size = n_cols // n_groups
    group_min = s.view(nb, size, n_groups).amin(dim=1)
    coarse_min = group_min.view(nb, -1, n_coarse).amin(dim=1)
    tau = _coarse_bound(coarse_min, kk, bound)
    if rescore is not None:
        tau = rescore.widened(tau)
    flat, row, per_row, plain_rows = _candidate_groups(group_min, coarse_min, tau)
    # the keys of every candidate group (its ``size`` columns ``group + n_groups · j``), one per row
    group = flat - row * n_groups
    keys = s.view(nb, size, n_groups).permute(0, 2, 1)[row, group]
    hit = (keys <= tau.index_select(0, row)[:, None]).view(-1).nonzero().view(-1)
    at = hit // size
    hit_row = row.index_select(0, at)
    hit_col = group.index_select(0, at) + n_groups * (hit - at * size)
    count = _counts_per_row(hit, (per_row * size).cumsum(0))  # each row's groups hold its hits
    most = int(count.max())
    if bound is not None and plain_rows.numel() == 0:
        kk = min(kk, max(most, 1))
    width = max(most, kk)
    first = (count.cumsum(0) - count).index_select(0, hit_row)
    slot = hit_row * width + torch.arange(hit.numel(), device=s.device) - first
    hit_key = keys.view(-1).index_select(0, hit)
    cand_key = s.new_full((nb * width,), float("inf")).index_copy_(0, slot, hit_key)
    cand_col = torch.zeros(nb * width, dtype=torch.int64, device=s.device).index_copy_(0, slot, hit_col)
    if rescore is None:
        vals, pick = cand_key.view(nb, width).topk(kk, dim=1, largest=False, sorted=True)
        idx = cand_col.view(nb, width).gather(1, pick)
    else:
        vals, idx = canonical_candidates(
            cand_key.view(nb, width), cand_col.view(nb, width), kk, rescore, values, reader
        )
    if plain_rows.numel() > 0:
        vals[plain_rows], idx[plain_rows] = _plain_smallest(real, plain_rows, kk, rescore, values, reader)
    return vals, idx


def _bounded_smallest(s: Tensor, kk: int, bound: Tensor) -> tuple[Tensor, Tensor]:
    """``smallest_keys`` of rows too short for the group filter, with a ``bound``: each row's keys
    ``<= bound`` are gathered (one pass) and only they are ranked; ``+inf`` pads the rows with fewer,
    and the result is as wide as the most a row keeps (at most ``kk``)."""
    nb, n = s.shape
    wide = bound.to(s.dtype)
    wide = torch.where(
        wide.double() < bound.double(), torch.nextafter(wide, torch.full_like(wide, math.inf)), wide
    )
    hit = (s <= wide[:, None]).view(-1).nonzero().view(-1)
    row = hit // n
    count = _counts_per_row(hit, torch.arange(1, nb + 1, device=s.device) * n)
    width = max(1, int(count.max()) if nb else 1)
    first = (count.cumsum(0) - count).index_select(0, row)
    slot = row * width + torch.arange(hit.numel(), device=s.device) - first
    keys = s.new_full((nb * width,), math.inf).index_copy_(0, slot, s.view(-1).index_select(0, hit))
    cols = torch.zeros(nb * width, dtype=torch.int64, device=s.device).index_copy_(0, slot, hit - row * n)
    vals, pick = keys.view(nb, width).topk(min(kk, width), dim=1, largest=False, sorted=True)
    return vals, cols.view(nb, width).gather(1, pick)


def _candidate_groups(
    group_min: Tensor, coarse_min: Tensor, tau: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``smallest_keys``' groups whose minimum is ``<= tau`` (flat places ``row * n_groups + group``,
    ascending; their rows; how many each row has) and the rows that take a plain ``topk`` instead (NaN,
    an infinite ``tau``, more than a quarter of the groups), whose groups are dropped."""
    nb, n_groups = group_min.shape
    flat = (group_min <= tau[:, None]).view(-1).nonzero().view(-1)
    row = flat // n_groups
    per_row = _counts_per_row(flat, torch.arange(1, nb + 1, device=flat.device) * n_groups)
    plain = coarse_min.isnan().any(dim=1) | (tau == float("inf")) | (per_row * 4 > n_groups)
    plain_rows = plain.nonzero().view(-1)
    if plain_rows.numel() > 0:
        keep = ~plain[row]
        flat, row, per_row = flat[keep], row[keep], per_row.masked_fill(plain, 0)
    return flat, row, per_row, plain_rows


def _counts_per_row(places: Tensor, ends: Tensor) -> Tensor:
    """How many of the ascending flat ``places`` fall in each row, row ``i`` ending (exclusive) at
    ``ends[i]`` (ascending): one binary search per row instead of a pass over the places."""
    return torch.searchsorted(places, ends).diff(prepend=ends.new_zeros(1))


def _plain_smallest(
    s: Tensor,
    rows: Tensor,
    kk: int,
    rescore: Optional[Rescorer],
    values: bool,
    reader: Optional[ListReader],
) -> tuple[Tensor, Tensor]:
    """``smallest_keys`` of the block rows ``rows`` by a plain ``topk`` of their whole rows."""
    vals, idx = s[rows].topk(kk, dim=1, largest=False, sorted=True)
    if rescore is None:
        return vals, idx
    of_rows = None if reader is None else reader.take(rows)
    return canonical_smallest(vals, idx, s[rows], rescore.take(rows), None, values, of_rows)


def _pair_classes(
    cmp_fn: Optional[LabelComparison],
    query_labels: Tensor,
    reference_labels: Tensor,
    rows: Tensor,
    cols: Tensor,
) -> Tensor:
    """Relevance of the (block row, reference) pairs: all that the kNN statistics read of a neighbour."""
    return compare_labels(cmp_fn, query_labels.index_select(0, rows), rows_at(reference_labels, cols))


def _position_terms(
    vals: Tensor,
    rel: Tensor,
    tied_rows: Tensor,
    last_t: Tensor,
    last_r: Tensor,
    ties: str,
    need_prec: bool,
    need_rr: bool,
) -> tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Per-position expected relevance, AP summands and reciprocal-rank terms of a block of rows.

    Rows without any tie among their neighbours (the common case with real-valued embeddings) use
    the plain definitions; only ``tied_rows`` (with ``last_t`` / ``last_r`` of their last block)
    go through ``tie_stats``.
    """
    k = vals.shape[1]
    f64 = torch.float64
    p1 = torch.arange(1, k + 1, device=vals.device, dtype=f64)
    exp_rel = rel.to(f64)
    cum = exp_rel.cumsum(dim=1)
    prec = exp_rel * cum / p1 if need_prec else None
    rr = exp_rel * (cum == 1) / p1 if need_rr else None
    if tied_rows.numel() > 0:
        ps = tie_stats.position_stats(vals[tied_rows], rel[tied_rows], last_t, last_r, ties)
        exp_rel[tied_rows] = tie_stats.expected_relevance(ps)
        if prec is not None:
            prec[tied_rows] = tie_stats.position_precision_terms(ps)
        if rr is not None:
            rr[tied_rows] = tie_stats.reciprocal_rank_terms(ps)
    return exp_rel, prec, rr


def _deterministic_neighbors(
    vals: Tensor, idx: Tensor, k: int, spill_rows: Tensor, sub: Optional[Tensor], v_k: Tensor
) -> tuple[Tensor, Tensor]:
    """The top-``k`` ordered by (distance, index), ties at the cut-off resolved by lowest index."""
    idx = idx[:, :k].clone()
    key = vals[:, :k].clone()
    if sub is not None:
        less = sub < v_k[spill_rows, None]
        eq = sub == v_k[spill_rows, None]
        room = k - less.sum(dim=1, keepdim=True)
        chosen = less | (eq & (eq.cumsum(dim=1) <= room))
        cols = chosen.nonzero()[:, 1].view(spill_rows.shape[0], k)
        idx[spill_rows] = cols
        key[spill_rows] = sub.gather(1, cols)
    order = idx.argsort(dim=1)
    idx, key = idx.gather(1, order), key.gather(1, order)
    order = key.argsort(dim=1, stable=True)
    return idx.gather(1, order), key.gather(1, order)
