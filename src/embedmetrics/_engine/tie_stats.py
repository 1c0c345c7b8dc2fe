"""Tie-aware rank statistics of a sorted top-K neighbour list (the kNN metrics' closed forms).

A query's neighbours, sorted by distance, form *tie blocks*: runs of equal distance occupying
positions ``[a, a + t)`` (0-based). For the item at position ``p = a + x`` of a block with ``r``
relevant items and ``c`` relevant items above the block, DESIGN.md's formulas give the expected
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


def expected_relevance(s: PositionStats) -> Tensor:
    """``(rows, K)``: probability that the item at each position is relevant."""
    return s.r / s.t


def precision_terms(s: PositionStats) -> Tensor:
    """``(rows, K)``: expected ``rel(p) · precision@(p+1)`` (the summands of average precision)."""
    k = s.t.shape[1]
    p1 = torch.arange(1, k + 1, device=s.t.device, dtype=torch.float64)
    pair = torch.where(s.t > 1, s.x * (s.r - 1) / (s.t - 1).clamp_min(1), torch.zeros_like(s.t))
    return (s.r / s.t) * (s.c + 1 + pair) / p1


def _log_comb(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def reciprocal_rank_terms(s: PositionStats) -> Tensor:
    """``(rows, K)``: P(first relevant item at p) / (p + 1); their row sum is the expected reciprocal rank."""
    k = s.t.shape[1]
    p1 = torch.arange(1, k + 1, device=s.t.device, dtype=torch.float64)
    ok = (s.c == 0) & (s.r > 0) & (s.x <= s.t - s.r)
    n = (s.t - s.x - 1).clamp_min(0)
    kk = (s.r - 1).clamp_min(0)
    log_p = _log_comb(n, kk.clamp(max=n)) - _log_comb(s.t, s.r.clamp(max=s.t))
    return torch.where(ok, torch.exp(log_p), torch.zeros_like(log_p)) / p1


def prefix_sum(terms: Tensor, length: Tensor) -> Tensor:
    """Row sums of ``terms[:, :length]`` with a per-row ``length`` (``(rows,)`` int)."""
    k = terms.shape[1]
    mask = torch.arange(k, device=terms.device)[None, :] < length[:, None]
    return (terms * mask).sum(dim=1)
