"""Fixed-size per-batch states trimmed to their used part without waiting for the device.

A batch grouped by label (LiDAR's class sums) has a data-dependent number of groups; allocating that
many rows would read the count on the host, a sync of a GPU stream in every ``update``. Instead the
batch fills ``n`` fixed slots (``n`` rows) of which the first ``used`` are real, and
``SlotTrimmer`` cuts the stored tensors down to ``used`` rows once that count has reached the
host by itself: at once on the CPU, after a non-blocking copy and an event on CUDA (checked, never
waited for, at the next ``update``), never on other devices (``meta``). Untrimmed slots are correct,
only larger: their empty rows add nothing wherever they are merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor


@dataclass
class _Pending:
    tensors: tuple[Tensor, ...]
    used: Tensor
    event: Optional[Any]


class SlotTrimmer:
    """Trims list entries (by identity) to their used rows once the count is on the host."""

    def __init__(self) -> None:
        self.pending: list[_Pending] = []

    def submit(self, used: Tensor, tensors: tuple[Tensor, ...]) -> None:
        """Start bringing ``used`` (0-dim int) to the host; ``tensors`` are the slot tensors to trim."""
        if used.device.type == "cpu":
            self.pending.append(_Pending(tensors, used, None))
        elif used.device.type == "cuda":
            host = torch.empty((), dtype=used.dtype, pin_memory=True)
            host.copy_(used, non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
            self.pending.append(_Pending(tensors, host, event))

    def trim(self, stores: tuple[list[Tensor], ...]) -> None:
        """In each of ``stores`` (lists matching the submitted ``tensors``), replace every entry whose
        count has arrived by a copy of its used rows; entries no longer in the lists are dropped."""
        waiting = []
        for p in self.pending:
            if p.event is not None and not p.event.query():
                waiting.append(p)
                continue
            m = int(p.used)
            for store, t in zip(stores, p.tensors):
                for i in range(len(store) - 1, -1, -1):
                    if store[i] is t:
                        store[i] = t[:m].clone()
                        break
        self.pending = waiting

    def __deepcopy__(self, memo: dict[int, Any]) -> SlotTrimmer:
        return SlotTrimmer()  # a copy's entries are other tensors: it trims nothing of its own yet

    def __getstate__(self) -> dict[str, Any]:
        return {"pending": []}
