"""Which ids a list state already holds, answered in ``O(batch · log n)`` per batch.

``DenseRetrieval.update`` refuses an id given in an earlier batch. Comparing each batch with every
stored id would cost ``O(n)`` per batch (``O(n²/b)`` over an epoch). ``SeenIds`` keeps the stored
ids as a few sorted runs, merged when a run grows as large as the one before it (sizes halve along
the list, so there are ``O(log n)`` runs and each id is re-sorted ``O(log n)`` times), and answers by
binary search in each run. It follows the state by identity: the runs cover a prefix of the state's
list; a list that no longer starts with that prefix (``reset``, ``load_state_dict``, a merge) is read
again from scratch. Nothing here is state: the stored ids are the truth.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


class SeenIds:
    """Sorted runs of the ids of one list state (see the module docstring)."""

    def __init__(self) -> None:
        self.covered: list[Tensor] = []
        self.runs: list[Tensor] = []

    def first_known(self, stored: list[Tensor], ids: Tensor) -> Optional[int]:
        """The first of ``ids`` that an entry of ``stored`` (a list state of 1-D id tensors) holds, or
        ``None`` (a host sync). An empty list leaves the runs alone: ``forward`` updates a reset state
        between two calls on the accumulated one."""
        if not stored or ids.numel() == 0:
            return None
        self._follow(stored)
        for run in self.runs:
            at = torch.searchsorted(run, ids.contiguous()).clamp_max(run.numel() - 1)
            known = run[at] == ids
            if bool(known.any()):
                return int(ids[known][0])
        return None

    def _follow(self, stored: list[Tensor]) -> None:
        n = len(self.covered)
        if len(stored) < n or any(a is not b for a, b in zip(stored, self.covered)):
            self.covered, self.runs, n = [], [], 0
        for t in stored[n:]:
            self._add(t)
            self.covered.append(t)

    def _add(self, ids: Tensor) -> None:
        if ids.numel() == 0:
            return
        self.runs.append(torch.sort(ids).values)
        while len(self.runs) > 1 and self.runs[-1].numel() >= self.runs[-2].numel():
            newer, older = self.runs.pop(), self.runs.pop()
            self.runs.append(torch.sort(torch.cat([older, newer])).values)
