"""Weighted k-NN classification (Wu et al., CVPR 2018; used by DINO and solo-learn to monitor SSL).

Each query takes the ``k`` bank rows most cosine-similar to it; neighbour ``j`` votes for its label
with weight ``exp(s_j / T)``; a query is a hit at ``top`` when its true class is among the ``top``
classes with the largest vote. Computed on the exact blocked kNN scan
(:class:`~embedmetrics._engine.knn.KeyBlocks`, :func:`~embedmetrics._engine.knn.smallest_keys`): no
``queries x bank`` matrix, one block at a time.

Ties, decided by the data and never by the kernel or the row order:

- **Neighbours tied at the cut-off.** When the ``k``-th similarity is shared by ``t`` bank rows of
  which only ``o`` fit in the top ``k``, each of the ``t`` votes with weight ``exp(s/T) · o / t``: its
  probability of being among the ``k`` under a random order of tied rows (so the votes are the
  expected votes). The whole tie block is counted, also where it extends past the ``k + 1`` keys the
  scan keeps ("spill").
- **Classes tied in votes.** With ``g`` classes of strictly larger vote than the true class and ``t``
  classes of equal vote (the true class included; classes without a vote tie at 0), ``"average"``
  scores ``clamp((top - g) / t, 0, 1)``, the expected hit of a ``topk`` over the ``C`` class votes
  under a random order of tied classes; ``"pessimistic"``: hit iff ``g + t <= top``;
  ``"optimistic"``: hit iff ``g < top``.

Votes are accumulated in float64 one neighbour position at a time, in ascending (distance, column)
order, without atomics: the same data gives the same bits on every device.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.knn import KeyBlocks, smallest_keys


def class_indices(
    bank_labels: Tensor, query_labels: Tensor, num_classes: Optional[int]
) -> tuple[Tensor, Tensor, int]:
    """Labels as class indices ``0..C-1`` (sorted label order) and ``C``: ``num_classes`` when given
    (at least the number of distinct labels), else the number of distinct bank and query labels."""
    both = torch.cat([bank_labels, query_labels.to(bank_labels.dtype)])
    unique, inverse = torch.unique(both, return_inverse=True)
    n_distinct = unique.shape[0]
    if num_classes is not None and num_classes < n_distinct:
        raise ValueError(
            f"Argument `num_classes` must be at least the number of distinct labels ({n_distinct}), "
            f"got {num_classes}."
        )
    n_bank = bank_labels.shape[0]
    return inverse[:n_bank], inverse[n_bank:], num_classes or n_distinct


def expected_hits(votes: Tensor, true: Tensor, tops: tuple[int, ...], ties: str) -> Tensor:
    """``(rows, len(tops))`` hit of the true class among the ``top`` largest votes, ties by ``ties``."""
    own = votes.gather(1, true[:, None])
    above = (votes > own).sum(dim=1, keepdim=True).to(torch.float64)
    tied = (votes == own).sum(dim=1, keepdim=True).to(torch.float64)
    top = torch.tensor(tops, dtype=torch.float64, device=votes.device)[None]
    if ties == "pessimistic":
        return (above + tied <= top).to(torch.float64)
    if ties == "optimistic":
        return (above < top).to(torch.float64)
    return ((top - above) / tied).clamp(0.0, 1.0)


def _tie_block_counts(
    s: Tensor,
    vals: Tensor,
    v_k: Tensor,
    spill: Tensor,
    bank_cls: Tensor,
    idx: Tensor,
    n_r: int,
    n_classes: int,
) -> Tensor:
    """``(rows, C)`` number of bank rows of each class whose key equals the cut-off key ``v_k``."""
    k = idx.shape[1]
    counts = torch.zeros(s.shape[0], n_classes, dtype=torch.int64, device=s.device)
    in_list = (vals[:, :k] == v_k[:, None]) & ~spill[:, None]
    counts.scatter_add_(1, bank_cls[idx], in_list.to(torch.int64))
    spill_rows = spill.nonzero().flatten()
    if spill_rows.numel() > 0:  # the tie block runs past the kept keys: count it on the full row
        where = (s[spill_rows, :n_r] == v_k[spill_rows, None]).nonzero()
        rows, cols = spill_rows[where[:, 0]], where[:, 1]
        counts.index_put_((rows, bank_cls[cols]), torch.ones_like(cols), accumulate=True)
    return counts


def knn_vote_hits(
    bank: Tensor,
    bank_labels: Tensor,
    queries: Tensor,
    query_labels: Tensor,
    *,
    k: int,
    temperature: float,
    tops: tuple[int, ...],
    num_classes: Optional[int] = None,
    ties: str = "average",
    exclude_self: bool = False,
    block_bytes: int | None = None,
    shard: Optional[tuple[int, int]] = None,
) -> Tensor:
    """Sum of the hits of this shard's queries at each ``top`` (float64 ``(len(tops),)``).

    ``k`` is clipped to the bank rows a query sees (all of them, or all but its own row with
    ``exclude_self``, where ``queries`` are the bank rows themselves).
    """
    bank_cls, query_cls, n_classes = class_indices(bank_labels, query_labels, num_classes)
    n_q, n_r = queries.shape[0], bank.shape[0]
    self_index = torch.arange(n_q, device=queries.device) if exclude_self else None
    k = min(k, n_r - int(exclude_self))
    hits = torch.zeros(len(tops), dtype=torch.float64, device=queries.device)
    if k < 1:
        return hits
    keys = KeyBlocks.prepare(queries, bank, "cosine", min(k + 1, n_r), self_index)
    for start, stop in keys.plan(block_bytes, shard, extra_row_bytes=16 * n_classes):
        s = keys.block(start, stop)
        vals, idx = smallest_keys(s, keys.kk, keys.groups)
        v_k = vals[:, k - 1]
        spill = vals[:, k] == v_k if keys.kk > k else torch.zeros_like(v_k, dtype=torch.bool)
        key64 = vals[:, :k].to(torch.float64)
        # exp(cos / T) scaled by the row's largest weight (never overflows; the argmax is unchanged)
        weight = torch.exp((key64[:, :1] - key64) / temperature)
        labels = bank_cls[idx[:, :k]]
        strict = (vals[:, :k] < v_k[:, None]).to(torch.float64)
        votes = torch.zeros(stop - start, n_classes, dtype=torch.float64, device=s.device)
        for j in range(k):  # one position at a time: no two adds to one cell in a kernel
            votes.scatter_add_(1, labels[:, j : j + 1], (weight[:, j] * strict[:, j])[:, None])
        tie_counts = _tie_block_counts(s, vals, v_k, spill, bank_cls, idx[:, :k], keys.n_r, n_classes)
        places = k - strict.sum(dim=1)
        share = weight[:, k - 1] * places / tie_counts.sum(dim=1).to(torch.float64)
        votes += share[:, None] * tie_counts.to(torch.float64)
        hits += expected_hits(votes, query_cls[start:stop], tops, ties).sum(dim=0)
    return hits
