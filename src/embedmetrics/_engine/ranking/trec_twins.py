"""trec_eval's rank measures that the report computes (``_engine/trec_eval``) as closed forms of the
grouped-ranking engine's ``RankedRows``, for the retrieval family's faces: with ``ties="average"`` each is
the exact expected value under a uniformly random order of tied documents (docs/ties.md), and with
``"pessimistic"`` / ``"optimistic"`` its value when relevant documents come last / first among ties.
``interpolated_precision`` (a maximum) and ``infap`` (products of counts) are not linear in a tie block's
counts: their expectations are sums over each block's arrangements (``trec_twin_ties``).

How unjudged documents are written: bpref skips them, so they are *ignored* ones (``ignore_index``: not
ranked, counted nowhere); infAP tells apart a document the qrels do not list (gain -1: it takes a rank)
and one of the pool left unjudged (gain -2), as trec_eval does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from embedmetrics._engine.core import tie_stats
from embedmetrics._engine.ranking.measures import Ks, RankedRows, cutoff_block, cutoff_row, relevant_in_top
from embedmetrics._engine.ranking.trec_twin_ties import infap_average, interpolated_precision_average


def _capped_sum(start: Tensor, count: Tensor, cap: Tensor) -> Tensor:
    """``Σ_{v = start}^{start + count − 1} min(v, cap)`` elementwise (``count >= 1``)."""
    below = (torch.minimum(start + count - 1, cap) - start + 1).clamp_min(0)  # terms with v <= cap
    return below * (2 * start + below - 1) / 2 + (count - below) * cap


def bpref(st: RankedRows) -> Tensor:
    """trec_eval's bpref: ``Σ_{relevant ranked d} (1 − min(n_d, R) / min(N, R)) / R``, ``n_d`` the judged
    non-relevant documents ranked above ``d`` and ``N`` all judged non-relevant documents (ranked or not).

    A relevant document of a tie block ``[a, e)`` (``r`` relevant, ``t − r`` non-relevant, ``a − c``
    non-relevant above the block) has ``n_d = a − c + X`` with ``X`` uniform on ``0..t − r`` under a random
    order of the block, so its expected term is a finite sum (``_capped_sum``). Needs every column.
    """
    fdt = st.fdt
    L = st.columns
    a_i, e_i = st.blocks()
    c = st.crel.gather(1, a_i)
    t, r = (e_i - a_i).to(fdt), st.crel.gather(1, e_i) - c
    p = torch.arange(L, dtype=fdt, device=st.gain.device)
    relevant = (st.crel[:, 1 : L + 1] > st.crel[:, :L]) & (p < st.n.unsqueeze(1))
    R = st.R.to(fdt).unsqueeze(1)
    bound = torch.minimum(st.nonrelevant.to(fdt).unsqueeze(1), R)
    above = a_i.to(fdt) - c
    nonrel_in_block = t - r
    expected = _capped_sum(above, nonrel_in_block + 1, R) / (nonrel_in_block + 1)
    term = torch.where(bound > 0, 1.0 - expected / bound.clamp_min(1.0), 1.0)
    total = torch.where(relevant, term, 0.0).sum(1, keepdim=True)
    return tie_stats.ratio(total, R)


def _retrieved_set(st: RankedRows, ks: Ks) -> tuple[Tensor, Tensor, Tensor]:
    """Per row and cut-off: the size ``m = min(k, n)`` of the retrieved set, the expected relevant documents
    in it, and ``R``."""
    k = cutoff_row(ks, st)
    size = torch.minimum(k, st.n.to(st.fdt).unsqueeze(1))
    return size, relevant_in_top(st, k), st.R.to(st.fdt).unsqueeze(1)


def set_relative_precision(st: RankedRows, ks: Ks) -> Tensor:
    """trec_eval's ``set_relative_P``: relevant retrieved over ``min(retrieved, R)`` (linear: exact)."""
    size, found, R = _retrieved_set(st, ks)
    return tie_stats.ratio(found, torch.minimum(size, R))


def set_f(st: RankedRows, ks: Ks, beta: float) -> Tensor:
    """trec_eval's ``set_F``: ``(β + 1)·P·Rc / (β·P + Rc)``, which is ``(β + 1)·X / (β·R + m)`` for ``X``
    relevant among ``m`` retrieved (0 for ``X = 0`` too): linear in ``X``, so exact in expectation."""
    size, found, R = _retrieved_set(st, ks)
    return tie_stats.ratio((beta + 1.0) * found, beta * R + size)


def set_map(st: RankedRows, ks: Ks) -> Tensor:
    """trec_eval's ``set_map``: ``X² / (m·R)``. Under a random order of the block at the cut-off (``t``
    documents, ``r`` relevant, ``o`` of its places inside the set), its relevant documents inside are
    hypergeometric, so ``E[X²] = E[X]² + o·(r/t)·(1 − r/t)·(t − o)/(t − 1)``."""
    k = cutoff_row(ks, st)
    m, a, t, r, _ = cutoff_block(st, k)
    o = (m - a).clamp(min=0.0)
    o = torch.minimum(o, t)
    share = r / t
    variance = torch.where(t > 1, o * share * (1 - share) * (t - o) / (t - 1).clamp_min(1.0), 0.0)
    found = relevant_in_top(st, k)
    return tie_stats.ratio(found * found + variance, m * st.R.to(st.fdt).unsqueeze(1))


def interpolated_precision(st: RankedRows, level: float) -> Tensor:
    """trec_eval's ``iprec_at_recall``: the best precision at or below the rank of the ``count``-th
    relevant document, ``count = ⌊level·R + 0.9⌋`` (at least 1); 0 when fewer relevant documents are
    ranked. Precision is read at the relevant documents' ranks, as trec_eval does.

    With ``ties="average"`` (``st.keys`` set) the expected maximum over the tie orders
    (``trec_twin_ties.interpolated_precision_average``). Needs every column.
    """
    if st.keys is not None:
        return interpolated_precision_average(st, level).unsqueeze(1)
    fdt, L = st.fdt, st.columns
    p = torch.arange(L, dtype=fdt, device=st.gain.device)
    after = st.crel[:, 1 : L + 1]
    relevant = (after > st.crel[:, :L]) & (p < st.n.unsqueeze(1))
    precision = torch.where(relevant, after / (p + 1), 0.0)
    best_below = precision.flip(1).cummax(1).values.flip(1)  # max over this rank and the ones below
    count = torch.floor(level * st.R.to(fdt) + 0.9).clamp_min(1.0).unsqueeze(1)
    ranked_relevant = st.crel.gather(1, st.n.unsqueeze(1))
    column = (torch.searchsorted(st.crel.contiguous(), count) - 1).clamp(0, max(L - 1, 0))
    return torch.where(count <= ranked_relevant, best_below.gather(1, column), 0.0)


#: infAP's smoothing of the precision among judged documents (trec_eval's ``INFAP_EPSILON``).
INFAP_EPSILON = 1e-5


def infap(st: RankedRows) -> Tensor:
    """trec_eval's ``infAP`` over gains 1 (relevant), 0 (judged non-relevant), -1 (not in the qrels), -2 (in
    the pool, not judged): a relevant document at 0-based rank ``j > 0`` adds
    ``1/(j+1) + j/(j+1) · (pool above)/j · (rel + ε)/(rel + nonrel + 2ε)`` (``rel``, ``nonrel``: the judged
    documents above it, pool: those and the unjudged ones of the pool), at rank 0 it adds 1; the sum is
    divided by ``R``.

    With ``ties="average"`` (``st.keys`` set) the expected value over the tie orders, summed over each tie
    block's arrangements (``trec_twin_ties.infap_average``). Needs every column.
    """
    fdt, L = st.fdt, st.columns
    if st.keys is not None:
        return tie_stats.ratio(infap_average(st, INFAP_EPSILON).unsqueeze(1), st.R.to(fdt).unsqueeze(1))
    j = torch.arange(L, dtype=fdt, device=st.gain.device)
    g = st.gain[:, :L]
    ranked = j < st.n.unsqueeze(1)
    rel = st.crel[:, :L]
    relevant = (st.crel[:, 1 : L + 1] > rel) & ranked
    nonrel = torch.cumsum((g == 0) & ranked, 1, dtype=fdt) - ((g == 0) & ranked).to(fdt)
    pool_unjudged = torch.cumsum((g == -2) & ranked, 1, dtype=fdt) - ((g == -2) & ranked).to(fdt)
    seen = (rel + nonrel + pool_unjudged) / j.clamp_min(1.0)
    smoothed = (rel + INFAP_EPSILON) / (rel + nonrel + 2 * INFAP_EPSILON)
    term = torch.where(j == 0, 1.0, 1.0 / (j + 1.0) + (j / (j + 1.0)) * seen * smoothed)
    total = torch.where(relevant, term, 0.0).sum(1, keepdim=True)
    return tie_stats.ratio(total, st.R.to(fdt).unsqueeze(1))
