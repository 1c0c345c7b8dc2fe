"""The tie statistics: expected per-position terms under a random order of tied items (one place).

``relevance``, ``precision_terms`` and ``first_relevant`` are the closed forms every
rank-based metric is built from; the grouped-ranking engine (``embedmetrics._engine.ranking.measures``)
and the kNN scan (``embedmetrics._engine.core.knn``) both call them. ``position_stats`` derives
the block statistics of a sorted top-K neighbour list, whose last block may continue past K.

A query's neighbours, sorted by distance, form *tie blocks*: runs of equal distance occupying
positions ``[a, a + t)`` (0-based). For the item at position ``p = a + x`` of a block with ``r``
relevant items and ``c`` relevant items above the block, the formulas of docs/ties.md give the expected
value of each metric when tied items are ordered uniformly at random (``ties="average"``):

- P(relevant at p) = r / t
- precision term of AP at p: (r / t) · (c + 1 + x · (r − 1) / (t − 1)) / (p + 1)   (0 term when t = 1)
- P(first relevant item at p) = C(t − x − 1, r − 1) / C(t, r) when c = 0 and x ≤ t − r.

``"pessimistic"`` / ``"optimistic"`` put the irrelevant / relevant items of each block first,
after which every item is its own block (t = 1). Everything is linear in these per-position terms,
so metrics with a fixed denominator (R-precision, AP with denominator R, reciprocal rank) are exact
expectations, not approximations.

The last block of a top-K list may continue beyond position K (more references at the boundary
distance than slots left); its true size and relevant count are passed in by the caller, which
counts them over the full row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class PositionStats(NamedTuple):
    """Per-position tie statistics, each ``(rows, K)`` float64."""

    t: Tensor  # size of the position's tie block (the full block, also beyond K)
    r: Tensor  # relevant items in the block
    c: Tensor  # relevant items above the block
    x: Tensor  # offset of the position in its block


def position_stats(
    values: Tensor, relevant: Tensor, last_t: Tensor, last_r: Tensor, ties: str
) -> PositionStats:
    """Tie statistics of sorted neighbour lists.

    Args:
        values: ``(rows, K)`` ascending distances (finite).
        relevant: ``(rows, K)`` bool, relevance of each listed neighbour.
        last_t: ``(rows,)`` true size of the last block (the one containing position ``K - 1``).
        last_r: ``(rows,)`` relevant items in that whole block.
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
    """
    rows, k = values.shape
    dev = values.device
    f64 = torch.float64
    pos = torch.arange(k, device=dev)
    new = torch.ones(rows, k, dtype=torch.bool, device=dev)
    new[:, 1:] = values[:, 1:] != values[:, :-1]
    start = torch.where(new, pos, 0).cummax(dim=1).values
    run = new.cumsum(dim=1) - 1
    rel = relevant.to(f64)
    t = torch.zeros(rows, k, dtype=f64, device=dev).scatter_add_(1, run, torch.ones_like(rel)).gather(1, run)
    r = torch.zeros(rows, k, dtype=f64, device=dev).scatter_add_(1, run, rel).gather(1, run)
    c = (rel.cumsum(dim=1) - rel).gather(1, start)
    last = run == run[:, -1:]
    t = torch.where(last, last_t.to(f64)[:, None], t)
    r = torch.where(last, last_r.to(f64)[:, None], r)
    x = (pos - start).to(f64)
    if ties == "average":
        return PositionStats(t, r, c, x)
    # Deterministic policies: relevant-first (optimistic) or irrelevant-first (pessimistic) per block.
    eff = (x < r) if ties == "optimistic" else (x >= t - r)
    eff_f = eff.to(f64)
    ones = torch.ones_like(eff_f)
    return PositionStats(ones, eff_f, eff_f.cumsum(dim=1) - eff_f, torch.zeros_like(eff_f))


def relevance(t: Tensor, r: Tensor) -> Tensor:
    """P(the item at a position is relevant): ``r / t`` of its block."""
    return r / t


def precision_terms(t: Tensor, r: Tensor, c: Tensor, x: Tensor, p: Tensor) -> Tensor:
    """Expected ``rel(p) · precision@(p+1)``, the summands of average precision (0-based ``p``).

    ``(r/t)·(c + 1 + x·(r−1)/(t−1)) / (p+1)``: given that the item at offset ``x`` of its block is
    relevant, each of the ``x`` items above it in the block is relevant with probability
    ``(r−1)/(t−1)`` (no such term when ``t = 1``). Every argument broadcasts.
    """
    pair = torch.where(t > 1, x * (r - 1) / (t - 1).clamp_min(1), torch.zeros_like(t))
    return (r / t) * (c + 1 + pair) / (p + 1)


def first_relevant(t: Tensor, r: Tensor, x: Tensor) -> Tensor:
    """P(the first relevant item is at offset ``x`` of its block): ``C(t − x − 1, r − 1) / C(t, r)``.

    ``t`` and ``r`` (``(rows, 1)``) describe, per row, the tie block holding the first relevant item;
    ``x`` (``(rows, L)``) is each position's offset from that block's start, consecutive along the
    row (negative before the block). Zero outside ``0 <= x <= t − r`` and when ``r = 0``. Computed as a
    running product, ``w(0) = r/t`` and ``w(x)/w(x−1) = (t−x−r+1)/(t−x)``: elementwise, no host sync.
    """
    step = torch.where(x == 0, r / t, (t - x - r + 1) / (t - x).clamp_min(1))
    w = torch.cumprod(torch.where(x >= 0, step, 1.0), dim=-1)
    return torch.where((r > 0) & (x >= 0) & (x <= t - r), w, 0.0)


def _positions(s: PositionStats) -> Tensor:
    return torch.arange(s.t.shape[1], device=s.t.device, dtype=torch.float64)


def expected_relevance(s: PositionStats) -> Tensor:
    """``(rows, K)``: probability that the item at each position is relevant."""
    return relevance(s.t, s.r)


def position_precision_terms(s: PositionStats) -> Tensor:
    """``(rows, K)``: the summands of average precision at every position (``precision_terms``)."""
    return precision_terms(s.t, s.r, s.c, s.x, _positions(s))


def first_relevant_terms(s: PositionStats) -> Tensor:
    """``(rows, K)``: P(the first relevant item is at each position); their row sum is the hit rate.

    The first relevant item lies in the first block with a relevant item (``c = 0``, ``r > 0``).
    """
    p = _positions(s)
    in_first = (s.c == 0) & (s.r > 0)
    at = in_first.to(torch.int64).argmax(dim=1, keepdim=True)  # a position of that block (0 if none)
    found = in_first.any(dim=1, keepdim=True)
    t, r = s.t.gather(1, at), torch.where(found, s.r.gather(1, at), 0.0)
    start = (p - s.x).gather(1, at)
    return first_relevant(t, r, p - start)


def reciprocal_rank_terms(s: PositionStats) -> Tensor:
    """``(rows, K)``: P(first relevant item at p) / (p + 1); their row sum is the expected reciprocal rank."""
    return first_relevant_terms(s) / (_positions(s) + 1)


# --------------------------------------------------------------------------- measures of ranked lists
#
# The one place where the rank measures of fixed-width ranked lists (dense retrieval's top-``depth``
# lists, the kNN metrics' top-``k`` neighbours) are read off their per-position terms. Each measure is a
# prefix sum of one term, at a fixed cut-off (``at``) or at a per-row length (``upto``), over a
# normaliser (``ratio``: 0 where it is 0).


class ListTerms(NamedTuple):
    """``(rows, L)`` float64 per-position terms of ranked lists whose prefix sums are the measures."""

    relevance: Tensor  # P(relevant)
    precision: Tensor  # the summands of average precision
    first: Tensor  # P(the first relevant item is here)

    @classmethod
    def of(cls, s: PositionStats) -> ListTerms:
        """The terms of lists described by their tie statistics."""
        return cls(expected_relevance(s), position_precision_terms(s), first_relevant_terms(s))


def at(terms: Tensor, last: Tensor) -> Tensor:
    """``(rows, nk)``: the sum of the terms of columns ``0..last`` of each row (``last``: ``(nk,)`` for
    every row alike, or ``(rows, nk)``), i.e. at the cut-off ``k = last + 1``."""
    sums = terms.cumsum(dim=1)
    return sums.index_select(1, last) if last.ndim == 1 else sums.gather(1, last)


def upto(terms: Tensor, length: Tensor) -> Tensor:
    """``(rows,)``: the sum of the first ``length[i]`` terms of row ``i`` (``0 <= length``)."""
    last = (length - 1).clamp_min(0)[:, None]
    return torch.where(length > 0, terms.cumsum(dim=1).gather(1, last).squeeze(1), 0.0)


def ratio(num: Tensor, den: Tensor) -> Tensor:
    """``num / den``, 0 where ``den`` is 0."""
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)


def reciprocal_ranks(first: Tensor) -> Tensor:
    """``P(first relevant at p) / (p + 1)`` per position, from ``first_relevant_terms``."""
    return first / torch.arange(1, first.shape[1] + 1, dtype=first.dtype, device=first.device)
