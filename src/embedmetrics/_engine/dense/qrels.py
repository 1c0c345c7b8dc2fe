"""Relevance judgements (qrels) as int64 tensors, indexed against a set of queries.

A qrels tensor is ``(n, 3)`` int64, one judgement per row: ``(query_id, doc_id, relevance)``. As in
trec_eval (default options): a document is relevant when ``relevance >= 1``; the gain of nDCG is
the relevance itself, negative grades counting as 0; judged-irrelevant (0) and negative lines still
make a query *judged*. Queries without any line are skipped by every metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import ArgumentKindError, as_tensor
from embedmetrics._metric.seen_ids import SeenIds


def check_qrels(qrels: object) -> Tensor:
    """The qrels as a ``(n, 3)`` int64 tensor; raise on another shape, dtype or a repeated pair."""
    t = as_tensor("qrels", qrels)
    if t.ndim != 2 or t.shape[1] != 3:
        raise ValueError(
            f"Argument `qrels` must have shape (n, 3): (query_id, doc_id, relevance) per row, "
            f"got shape {tuple(t.shape)}."
        )
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ArgumentKindError(f"Argument `qrels` must hold integers, got dtype {t.dtype}.")
    t = t.to(torch.int64)
    if t.shape[0] > 1:
        pairs = t[:, :2]
        order = torch.argsort(pairs[:, 1], stable=True)
        order = order[torch.argsort(pairs[order, 0], stable=True)]
        p = pairs[order]
        same = (p[1:] == p[:-1]).all(dim=1)
        if bool(same.any()):
            q, d = p[int(same.nonzero()[0, 0])].tolist()
            raise ValueError(
                f"Argument `qrels` judges the pair (query_id={q}, doc_id={d}) more than once; each "
                "(query, document) pair may appear in one row only."
            )
    return t


def check_new_ids(name: str, ids: Tensor, stored: list[Tensor], seen: SeenIds) -> None:
    """``ids`` must be unique and none of ``stored`` (the ids of the earlier batches, looked up through
    ``seen``). Host sync."""
    check_unique_ids(name, torch.sort(ids).values)
    known = seen.first_known(stored, ids)
    if known is not None:
        raise ValueError(
            f"Argument `{name}` must hold new ids, got {known}, already given in an earlier batch."
        )


def check_unique_ids(name: str, sorted_ids: Tensor) -> None:
    """Raise ``ValueError`` naming a repeated id of ``sorted_ids`` (ascending). Host sync."""
    same = sorted_ids[1:] == sorted_ids[:-1]
    if bool(same.any()):
        value = int(sorted_ids[int(same.nonzero()[0, 0])])
        raise ValueError(f"Argument `{name}` must hold unique ids, got {value} more than once.")


def find_sorted(sorted_values: Tensor, values: Tensor) -> Tensor:
    """Position of each of ``values`` in the ascending ``sorted_values``, ``-1`` where absent."""
    if sorted_values.numel() == 0:
        return torch.full_like(values, -1)
    at = torch.searchsorted(sorted_values, values.contiguous()).clamp_max(sorted_values.numel() - 1)
    return torch.where(sorted_values[at] == values, at, -1)


@dataclass
class Judgements:
    """The qrels of a set of queries (ascending ids), entries sorted by (query row, doc id).

    ``entry_row``, ``entry_doc``, ``entry_rel``: ``(E,)`` the judgements of those queries;
    ``judged`` ``(Q,)``: the query has at least one line; ``num_relevant`` ``(Q,)``: lines with
    ``relevance >= 1`` (trec_eval's R, whether the corpus holds the document or not).
    """

    entry_row: Tensor
    entry_doc: Tensor
    entry_rel: Tensor
    judged: Tensor
    num_relevant: Tensor
    _docs: Tensor  # distinct judged doc ids, ascending
    _keys: Tensor  # row * len(_docs) + position of the doc in _docs, ascending (one per entry)

    @classmethod
    def build(cls, qrels: Tensor, query_ids: Tensor) -> Judgements:
        """Index ``qrels`` against ``query_ids`` (ascending, unique); other queries' lines are dropped."""
        qrels = qrels.to(query_ids.device)
        row = find_sorted(query_ids, qrels[:, 0])
        mine = qrels[row >= 0]
        row = row[row >= 0]
        docs = torch.unique(mine[:, 1])
        keys = row * max(1, docs.numel()) + torch.searchsorted(docs, mine[:, 1].contiguous())
        keys, order = torch.sort(keys)
        n_q = query_ids.shape[0]
        entry_row, entry_rel = row[order], mine[order, 2]
        judged = torch.bincount(entry_row, minlength=n_q) > 0
        num_relevant = torch.bincount(entry_row, weights=(entry_rel >= 1).double(), minlength=n_q)
        return cls(entry_row, mine[order, 1], entry_rel, judged, num_relevant.long(), docs, keys)

    def relevance(self, rows: Tensor, doc_ids: Tensor) -> Tensor:
        """Relevance of ``doc_ids`` (any shape) for the queries ``rows`` (broadcast); 0 when unjudged."""
        rows = rows.expand_as(doc_ids)
        at = find_sorted(self._docs, doc_ids)
        keys = rows * max(1, self._docs.numel()) + at.clamp_min(0)
        entry = find_sorted(self._keys, keys)
        found = (at >= 0) & (entry >= 0)
        if self.entry_rel.numel() == 0:  # no query of the set is judged: nothing is relevant
            return torch.zeros_like(doc_ids)
        return torch.where(found, self.entry_rel[entry.clamp_min(0)], 0)

    def gains(self) -> Tensor:
        """``(E,)`` float64 nDCG gain of every entry: its relevance, negative grades as 0."""
        return self.entry_rel.clamp_min(0).to(torch.float64)

    def ideal_dcg(self, ks: tuple[int, ...], discount: Tensor) -> Tensor:
        """``(Q, len(ks))`` DCG@k of the ideal ranking of each query's judged documents.

        ``discount``: ``(max(ks),)`` float64 ``1 / log2(p + 2)``.
        """
        n_q, width = self.judged.shape[0], max(ks)
        best = per_row_sorted(self.entry_row, self.gains(), n_q, width, descending=True)
        if best.shape[1] == 0:  # no judged document: no ideal gain
            return torch.zeros(n_q, len(ks), dtype=torch.float64, device=best.device)
        dcg = (best * discount[: best.shape[1]]).cumsum(dim=1)
        cols = torch.tensor([min(k, best.shape[1]) - 1 for k in ks], device=dcg.device)
        return dcg.index_select(1, cols.clamp_min(0))


def per_row_sorted(rows: Tensor, values: Tensor, n_rows: int, width: int, *, descending: bool) -> Tensor:
    """``(n_rows, w)`` the ``values`` of each row (``rows`` ascending) sorted, 0-padded, cut at ``width``.

    ``w = min(width, largest row count)``; a host sync (the count).
    """
    count = torch.bincount(rows, minlength=n_rows)
    w = min(width, int(count.max())) if rows.numel() else 0
    full = int(count.max()) if rows.numel() else 0
    start = count.cumsum(0) - count
    slot = torch.arange(rows.numel(), device=rows.device) - start[rows]
    pad = -float("inf") if descending else float("inf")
    table = values.new_full((n_rows, max(full, 1)), pad)
    table[rows, slot] = values
    table = table.sort(dim=1, descending=descending).values[:, :w]
    return table.nan_to_num(0.0, posinf=0.0, neginf=0.0)
