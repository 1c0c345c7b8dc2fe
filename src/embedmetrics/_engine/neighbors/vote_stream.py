"""The weighted kNN vote over a bank streamed chunk by chunk against fixed queries (running vote lists).

The queries are fixed first; each bank chunk is then scanned against every query at once
(``scan_votes``) and folded into **running vote lists** (``VoteStream``): per query the ``k`` nearest
bank rows seen so far, the size of the whole tie block at the last key and that block's members the
list does not hold, counted by label. No bank row is kept: memory is ``O(queries × k)`` plus one
similarity block, whatever the bank size.

Class indices (``class_indices``) depend on the set of distinct labels, which grows as chunks arrive,
so the running lists keep the raw int64 labels; they are mapped to class indices only to merge (over
the union of the labels present: an order-preserving map, so ``merge_votes`` picks the same entries)
and at the end, over the labels of the whole bank and the queries, as the stored route maps them.

Every key a chunk's scan lists is a canonical key (``KeyBlocks.nearest`` ranks by
``embedmetrics._engine.core.canonical``'s keys and returns them): a function of the query row and the
bank row alone, whatever else shares the chunk's product. The key of a pair in one chunk is thus the
key it gets in the scan of the whole bank (or of any other split), identical rows in different chunks
tie exactly, and lists of disjoint bank parts merge exactly (``merge_votes``). The running lists after
any chunks, of any sizes and in any order, are therefore the lists of their union, and ``stream_hits``
equals ``knn_vote_hits`` on the whole bank bit for bit. ``k`` is clipped to the bank size at the end
only (``k = min(k, n_bank)``, as the stored route clips it): the running lists stay ``k`` wide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Optional

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import finite_values
from embedmetrics._engine.core.exact_sum import order_free_sum
from embedmetrics._engine.core.row_owners import gather_rows, gather_same
from embedmetrics._engine.neighbors.vote import (
    VoteLists,
    class_indices,
    merge_votes,
    scan_votes,
    vote_hits,
)

__all__ = ["VoteStream", "fold_bank_chunk", "gather_stream", "merge_streams", "stream_hits"]


@dataclass
class VoteStream:
    """Per query (rows), the running vote lists of the bank rows seen so far.

    ``keys`` ``(Q, k)`` float64 canonical keys, ascending (``+inf`` pads a list that is not full),
    ``labels`` ``(Q, k)`` their raw int64 labels (0 in the padding), ``tail`` ``(Q,)`` the whole tie
    block at the last key (0 while the list is not full), ``extra`` ``(m, 3)`` int64 rows
    ``(query, label, count)``: members of that block the list does not hold, ``bank_labels`` the
    distinct labels seen (ascending), ``n_bank`` (0-dim) the rows seen, ``nonfinite`` (0-dim) 1 once
    a non-finite embedding was seen (the value is NaN then, as the stored route's).
    """

    keys: Tensor
    labels: Tensor
    tail: Tensor
    extra: Tensor
    bank_labels: Tensor
    n_bank: Tensor
    nonfinite: Tensor

    @classmethod
    def empty(cls, n_queries: int, k: int, device: torch.device) -> VoteStream:
        """The running lists before any bank row."""
        lists = VoteLists.empty(n_queries, k, device)
        none = torch.zeros((), dtype=torch.int64, device=device)
        labels = torch.zeros(0, dtype=torch.int64, device=device)
        return cls(lists.keys, lists.classes, lists.tail, lists.extra, labels, none, none.clone())

    def as_dict(self) -> dict[str, Tensor]:
        """The tensors by field name (metric states, checkpoints)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_width(state: VoteStream, k: int) -> None:
    if k != state.keys.shape[1]:
        raise ValueError(f"Argument `k` must be the running lists' width ({state.keys.shape[1]}), got {k}.")


def fold_bank_chunk(
    state: VoteStream,
    queries: Tensor,
    chunk: Tensor,
    chunk_labels: Tensor,
    k: int,
    block_bytes: Optional[int] = None,
) -> VoteStream:
    """The running lists after one more bank chunk (``(n, d)`` rows, ``(n,)`` integer labels; the
    caller checks them). Pure: ``state`` is left as it was, so a chunk that raises changes nothing.
    A non-finite chunk (or query) is only counted: the value is NaN from then on."""
    _check_width(state, k)
    chunk, labels = chunk.detach(), chunk_labels.detach().reshape(-1).to(torch.int64)
    if chunk.shape[0] == 0:
        return replace(state)
    seen = torch.unique(torch.cat([state.bank_labels, labels.to(state.bank_labels.device)]))
    counted = replace(state, bank_labels=seen, n_bank=state.n_bank + chunk.shape[0])
    if not bool(finite_values(chunk) & finite_values(queries)):
        return replace(counted, nonfinite=torch.ones_like(state.nonfinite))
    if bool(state.nonfinite) or queries.shape[0] == 0:
        return counted  # the value is NaN (or has no query): nothing to list
    own = torch.unique(labels)
    lists = scan_votes(
        chunk, torch.searchsorted(own, labels), queries, k=k, n_classes=own.numel(), block_bytes=block_bytes
    )
    n = torch.tensor(chunk.shape[0], dtype=torch.int64, device=state.n_bank.device)
    part = _with_labels(lists, own, own, n, torch.zeros_like(state.nonfinite))
    return merge_streams([state, part])


def _with_labels(
    lists: VoteLists, label_of: Tensor, seen: Tensor, n_bank: Tensor, nonfinite: Tensor
) -> VoteStream:
    """``lists`` (class ``c`` is label ``label_of[c]``) as running lists of raw labels; a list that is
    not full (its last key ``+inf``) holds every row of its part: no tie block is recorded for it."""
    listed = torch.isfinite(lists.keys)
    if label_of.numel() == 0:
        labels = torch.zeros_like(lists.classes)
    else:
        labels = torch.where(listed, label_of[lists.classes.clamp(0, label_of.numel() - 1)], 0)
    full = listed[:, -1]
    e = lists.extra[full[lists.extra[:, 0]]]
    extra = _relabelled(e, label_of[e[:, 1]])
    tail = torch.where(full, lists.tail, 0)
    return VoteStream(lists.keys, labels, tail, extra, seen, n_bank, nonfinite)


def _relabelled(extra: Tensor, second: Tensor, shift: int = 0) -> Tensor:
    """``extra`` rows ``(query, x, count)`` with ``second`` for ``x`` (and the queries moved by ``shift``)."""
    return torch.stack([extra[:, 0] + shift, second, extra[:, 2]], dim=1)


def _classes_of(state: VoteStream, labels: Tensor) -> Tensor:
    """The state's listed labels as indices into the ascending ``labels`` (0 in the padding)."""
    at = torch.searchsorted(labels, state.labels.contiguous()).clamp_max(max(labels.numel() - 1, 0))
    return torch.where(torch.isfinite(state.keys), at, 0)


def merge_streams(parts: Sequence[VoteStream]) -> VoteStream:
    """The running lists of disjoint bank parts (each ``(Q, k)``, the same queries) merged exactly."""
    seen = torch.unique(torch.cat([p.bank_labels for p in parts]))
    n_bank = torch.stack([p.n_bank for p in parts]).sum()
    nonfinite = torch.stack([p.nonfinite for p in parts]).amax()
    first = parts[0]
    if len(parts) == 1 or first.keys.shape[0] == 0 or seen.numel() == 0:
        return replace(first, bank_labels=seen, n_bank=n_bank, nonfinite=nonfinite)
    n_q = first.keys.shape[0]
    extras = [
        _relabelled(p.extra, torch.searchsorted(seen, p.extra[:, 1].contiguous()), i * n_q)
        for i, p in enumerate(parts)
    ]
    stacked = VoteLists(
        torch.cat([p.keys for p in parts]),
        torch.cat([_classes_of(p, seen) for p in parts]),
        torch.cat([p.tail for p in parts]),
        torch.cat(extras),
    )
    merged = merge_votes(stacked, len(parts), seen.numel())
    return _with_labels(merged, seen, seen, n_bank, nonfinite)


def gather_stream(local: VoteStream) -> VoteStream:
    """Every process's running lists merged (a collective; every process returns the same). The
    processes hold the same queries and disjoint bank parts."""
    gathered = {
        "keys": gather_same(local.keys),
        "labels": gather_same(local.labels),
        "tail": gather_same(local.tail),
        "extra": gather_rows(local.extra),
        "bank_labels": gather_rows(local.bank_labels),
        "n_bank": [t.reshape(()) for t in gather_same(local.n_bank.reshape(1))],
        "nonfinite": [t.reshape(()) for t in gather_same(local.nonfinite.reshape(1))],
    }
    world = len(gathered["keys"])
    return merge_streams([VoteStream(**{name: ts[r] for name, ts in gathered.items()}) for r in range(world)])


def stream_hits(
    state: VoteStream,
    query_labels: Tensor,
    *,
    k: int,
    temperature: float,
    tops: tuple[int, ...],
    num_classes: Optional[int] = None,
    ties: str = "average",
) -> Tensor:
    """Sum of the hits of every query at each ``top`` (float64 ``(len(tops),)``) from the running lists
    of the whole bank: ``knn_vote_hits`` of the bank seen, bit for bit (NaN without a bank row or after
    a non-finite embedding; ``ValueError`` where ``num_classes`` is below the number of labels)."""
    _check_width(state, k)
    nan = torch.full((len(tops),), math.nan, dtype=torch.float64, device=state.keys.device)
    n_bank = int(state.n_bank)
    if bool(state.nonfinite) or n_bank == 0:
        return nan
    query_labels = query_labels.to(device=state.keys.device, dtype=torch.int64)
    _, query_cls, n_classes = class_indices(state.bank_labels, query_labels, num_classes)
    k = min(k, n_bank)
    if k < 1 or query_labels.shape[0] == 0:
        return torch.zeros_like(nan)
    every = torch.unique(torch.cat([state.bank_labels, query_labels]))
    lists = _clipped(state, every, k)
    hits = vote_hits(lists, query_cls, temperature=temperature, tops=tops, ties=ties, n_classes=n_classes)
    return order_free_sum(hits)


def _clipped(state: VoteStream, labels: Tensor, k: int) -> VoteLists:
    """The lists ``k`` wide with class indices into ``labels``. Where the bank has fewer rows than the
    running lists' width, every list holds the whole bank: its tie block at the clipped last key is in
    it (nothing extra)."""
    keys, classes = state.keys[:, :k], _classes_of(state, labels)[:, :k]
    extra = _relabelled(state.extra, torch.searchsorted(labels, state.extra[:, 1].contiguous()))
    if k == state.keys.shape[1]:
        return VoteLists(keys, classes, state.tail, extra)
    tail = (keys == keys[:, -1:]).sum(dim=1)
    return VoteLists(keys, classes, tail, extra[:0])
