"""Exact blocked k-nearest-neighbour scan with tie-aware label metrics.

For each block of query rows: one matrix product against all references (Euclidean ranking key
``||r||² − 2 q·r``, or ``−cos`` for cosine), the query's own reference column masked by index,
and one ``topk`` of ``K + 1`` per row. The extra neighbour tells whether the tie block at the
cut-off continues past position ``K`` ("spill"); only for those rows the full row is scanned again
to count the whole boundary block and its relevant items. From the list the per-query
metric values (precision@1, R-precision, AP@R, AP, reciprocal rank) are reduced at once with the
closed forms of :mod:`embedmetrics._engine.tie_stats`, so per-query state is O(1), never O(K),
unless the caller asks for the neighbour lists themselves.

Nothing allocates an ``n_query × n_reference`` matrix: peak extra memory is one block
(``block_bytes``) plus ``O(block · K)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine import tie_stats
from embedmetrics._engine.scan import (
    DEFAULT_BLOCK_BYTES,
    all_reduce_sum,
    block_ranges,
    block_rows,
    compute_dtype,
    l2_normalize,
    shard_blocks,
)

LabelComparison = Callable[[Tensor, Tensor], Tensor]

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
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: Optional[tuple[int, int]] = None,
) -> KnnResult:
    """Exact kNN of every query among the references and the per-query label statistics.

    Args:
        query: ``(n_q, d)`` query embeddings.
        reference: ``(n_r, d)`` reference embeddings.
        query_labels: ``(n_q,)`` or ``(n_q, w)`` labels.
        reference_labels: ``(n_r,)`` or ``(n_r, w)`` labels.
        k: neighbours to keep, ``1 <= k <=`` number of references a query can see.
        counts: ``(n_q,)`` relevant references of each query (see :func:`relevant_counts`);
            R-precision and AP@R use ``min(count, k)`` positions and divide AP by ``count``.
        self_index: ``(n_q,)`` reference index of each query itself (``-1``: none), masked out.
        distance: ``"euclidean"`` or ``"cosine"`` (cosine distance ``1 − cos``).
        ties: tie policy, see :mod:`embedmetrics._engine.tie_stats`.
        label_comparison_fn: relevance of a (query label, reference label) pair; ``None``: equality.
        return_neighbors: also return the neighbour indices and distances (``(n_q, k)``).
        stats: which per-query statistics to compute (a subset of :data:`STAT_NAMES`).
        block_bytes: memory budget of one similarity block.
        shard: ``(rank, world)``: scan only this rank's share of the query blocks.

    Returns:
        Per-query statistics (see :data:`STAT_NAMES`), zero outside the scanned share.
    """
    dtype = compute_dtype(query, reference)
    q = query.to(dtype)
    ref = reference.to(dtype)
    n_q, n_r = q.shape[0], ref.shape[0]
    dev = q.device
    if distance == "cosine":
        q = -l2_normalize(q, 1e-12)
        ref = l2_normalize(ref, 1e-12)
        bias: Optional[Tensor] = None
        q_sq = None
    else:
        q = q * -2.0
        bias = (ref * ref).sum(dim=1)[None, :]
        q_sq = (query.to(dtype) ** 2).sum(dim=1)
    ref_t = ref.T
    kk = min(k + 1, n_r)
    out = {n: torch.zeros(n_q, dtype=torch.float64, device=dev) for n in STAT_NAMES if n in stats}
    indices = torch.zeros(n_q, k, dtype=torch.int64, device=dev) if return_neighbors else None
    distances = torch.zeros(n_q, k, dtype=dtype, device=dev) if return_neighbors else None
    rows = block_rows(n_r, block_bytes=block_bytes, itemsize=q.element_size())
    cmp_fn = label_comparison_fn
    for start, stop in shard_blocks(block_ranges(n_q, rows), shard):
        # ranking key, ascending = nearer: ||r||² − 2 q·r (Euclidean) or −cos
        s = q[start:stop] @ ref_t if bias is None else torch.addmm(bias, q[start:stop], ref_t)
        nb = stop - start
        if self_index is not None:
            own = self_index[start:stop]
            valid = own >= 0
            s[torch.arange(nb, device=dev)[valid], own[valid]] = float("inf")
        vals, idx = s.topk(kk, dim=1, largest=False, sorted=True)
        v_k = vals[:, k - 1]
        qlab = query_labels[start:stop]
        rel = compare_labels(cmp_fn, qlab, reference_labels[idx[:, :k]])
        spill = vals[:, k] == v_k if kk > k else torch.zeros(nb, dtype=torch.bool, device=dev)
        spill_rows = spill.nonzero().flatten()
        # Size and relevant count of the last block; full-row counts where it spills past K.
        in_last = vals[:, :k] == v_k[:, None]
        last_t = in_last.sum(dim=1)
        last_r = (in_last & rel).sum(dim=1)
        sub = None
        if spill_rows.numel() > 0:
            sub = s[spill_rows]
            eq = sub == v_k[spill_rows, None]
            full_rel = compare_labels(cmp_fn, qlab[spill_rows], reference_labels[None])
            last_t[spill_rows] = eq.sum(dim=1)
            last_r[spill_rows] = (eq & full_rel).sum(dim=1)
        cnt = counts[start:stop]
        length = cnt.clamp(max=k)
        denom_r = cnt.clamp_min(1).to(torch.float64)
        need_prec = "map_at_r" in out or "average_precision" in out
        exp_rel, prec, rr = _position_terms(
            vals[:, :k], rel, spill, last_t, last_r, ties, need_prec, "reciprocal_rank" in out
        )
        if "precision_at_1" in out:
            out["precision_at_1"][start:stop] = exp_rel[:, 0]
        if "r_precision" in out:
            out["r_precision"][start:stop] = tie_stats.prefix_sum(exp_rel, length) / length.clamp_min(1)
        if prec is not None and "map_at_r" in out:
            out["map_at_r"][start:stop] = tie_stats.prefix_sum(prec, length) / denom_r
        if prec is not None and "average_precision" in out:
            out["average_precision"][start:stop] = prec.sum(dim=1) / denom_r
        if rr is not None:
            out["reciprocal_rank"][start:stop] = rr.sum(dim=1)
        if indices is not None and distances is not None:
            sel_idx, sel_key = _deterministic_neighbors(vals, idx, k, spill_rows, sub, v_k)
            indices[start:stop] = sel_idx
            if q_sq is None:
                distances[start:stop] = 1.0 + sel_key
            else:
                distances[start:stop] = (sel_key + q_sq[start:stop, None]).clamp_min(0).sqrt()
    return KnnResult(out, indices, distances, k)


def _position_terms(
    vals: Tensor,
    rel: Tensor,
    spill: Tensor,
    last_t: Tensor,
    last_r: Tensor,
    ties: str,
    need_prec: bool,
    need_rr: bool,
) -> tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Per-position expected relevance, AP summands and reciprocal-rank terms of a block of rows.

    Rows without any tie among their neighbours (the common case with real-valued embeddings) use
    the plain definitions; only rows with ties go through :mod:`tie_stats`.
    """
    k = vals.shape[1]
    f64 = torch.float64
    p1 = torch.arange(1, k + 1, device=vals.device, dtype=f64)
    exp_rel = rel.to(f64)
    cum = exp_rel.cumsum(dim=1)
    prec = exp_rel * cum / p1 if need_prec else None
    rr = exp_rel * (cum == 1) / p1 if need_rr else None
    tied = spill.clone()
    if k > 1:
        tied |= (vals[:, 1:] == vals[:, :-1]).any(dim=1)
    rows = tied.nonzero().flatten()
    if rows.numel() > 0:
        ps = tie_stats.position_stats(vals[rows], rel[rows], last_t[rows], last_r[rows], ties)
        exp_rel[rows] = tie_stats.expected_relevance(ps)
        if prec is not None:
            prec[rows] = tie_stats.precision_terms(ps)
        if rr is not None:
            rr[rows] = tie_stats.reciprocal_rank_terms(ps)
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
