"""Rows given twice: the same id with the same data counts once, the same id with other data is refused.

Under DDP, a ``DistributedSampler`` pads an evaluation set to a multiple of the processes by repeating
its first items (docs/lightning.md, "Repeated items under DDP"), so after a sync a metric keyed by ids
can hold one id twice, with the same row each time. Such an exact repeat (the same id, every value of
its rows equal) is one item evaluated twice: it is dropped, keeping the first occurrence (the lowest
rank, then the earliest row), and the value is that of the distinct items. The same id with rows that
differ anywhere is two items under one id, which no order of the rows could make right: it raises the
``ValueError`` naming the id that ``update`` raises for a repeated id.

``keep_first`` is the one rule, used by ``DenseRetrieval.compute`` (through ``dense_values`` and
``distinct_rows``), the functional ``dense_retrieval`` and ``BaseMetric.merge_state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.core.row_owners import gather_rows


def repeated_positions(ids: Tensor) -> Optional[tuple[Tensor, Tensor]]:
    """``(repeat, first)``: the positions of the ids seen before in ``ids`` and, for each, the position of
    its first occurrence; ``None`` when every id is distinct. A host sync."""
    values = torch.sort(ids).values  # the common case, nothing repeated, costs one plain sort
    if not bool((values[1:] == values[:-1]).any()):
        return None
    order = torch.argsort(ids, stable=True)  # equal ids stay in the order of their positions
    ranked = ids[order]
    same = ranked[1:] == ranked[:-1]
    starts = torch.ones_like(ranked, dtype=torch.bool)
    starts[1:] = ~same
    positions = torch.arange(ranked.numel(), device=ids.device)
    start_of = torch.where(starts, positions, 0).cummax(dim=0).values  # each entry's run start
    later = ~starts
    return order[later], order[start_of[later]]


def keep_first(name: str, ids: Tensor, rows: Sequence[Tensor]) -> Optional[Tensor]:
    """``(n,)`` bool: every row but the exact repeats of an earlier one (same id, equal ``rows``); ``None``
    when the ids are distinct (nothing to drop).

    ``ids``: ``(n,)`` integers; ``rows``: tensors of ``n`` leading rows each (the embeddings, labels...),
    compared value by value. Raises ``ValueError`` naming ``name`` and the first such id where an id comes
    back with other rows. Deterministic; a host sync.
    """
    found = repeated_positions(ids)
    if found is None:
        return None
    repeat, first = found
    differs = torch.zeros(repeat.numel(), dtype=torch.bool, device=ids.device)
    for t in rows:
        a, b = t[repeat].reshape(repeat.numel(), -1), t[first].reshape(repeat.numel(), -1)
        differs |= (a != b).any(dim=1)
    if bool(differs.any()):
        value = int(torch.min(ids[repeat[differs]]))
        raise ValueError(
            f"{name} must hold unique ids, got {value} more than once with different rows (a row given "
            "twice with the same id and the same values counts once)."
        )
    keep = torch.ones(ids.numel(), dtype=torch.bool, device=ids.device)
    keep[repeat] = False
    return keep


def distinct_rows(
    name: str, rows: Tensor, ids: Tensor, *, distributed: bool = False
) -> tuple[Tensor, Tensor]:
    """``rows`` and ``ids`` less the exact repeats (``keep_first``); ``distributed``: each process holds
    its own part, and the repeats are looked for across every process's part (the first occurrence in
    rank order is kept; every process raises the same error). A collective when ``distributed``: the
    ids of every part, then only the rows of the ids held more than once."""
    if not distributed:
        keep = keep_first(name, ids, [rows])
        return (rows, ids) if keep is None else (rows[keep], ids[keep])
    parts = gather_rows(ids)
    every = torch.cat(parts)
    if repeated_positions(every) is None:  # the same answer on every process
        return rows, ids
    ranked = torch.sort(every).values
    twice = torch.unique(ranked[1:][ranked[1:] == ranked[:-1]])
    mine = torch.isin(ids, twice)
    shared_ids, shared_rows = gather_rows(ids[mine]), gather_rows(rows[mine])
    keep_shared = keep_first(name, torch.cat(shared_ids), [torch.cat(shared_rows)])
    if keep_shared is None:  # never: the gathered ids repeat
        return rows, ids
    start = sum(int(p.shape[0]) for p in shared_ids[: dist.get_rank()])
    keep = torch.ones(ids.numel(), dtype=torch.bool, device=ids.device)
    keep[mine.nonzero().flatten()] = keep_shared[start : start + int(mine.sum())]
    return rows[keep], ids[keep]
