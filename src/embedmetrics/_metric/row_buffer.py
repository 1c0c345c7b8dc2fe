"""Row stores that grow in amortized O(batch): one buffer with room to spare, never re-concatenated.

A row store (a ``"cat"`` list state) holds one tensor: a view of the first rows of a buffer that the
metric allocated itself, with room for more. Appending a batch copies the batch into the spare rows
and lengthens the view; only when the buffer is full does a new one, twice as large, take every row
(amortized O(1) copies per row, like a dynamic array). ``compute`` then reads the view as it is:
nothing is concatenated, however often it runs.

A state that is not a view of one of the metric's own buffers (loaded from a checkpoint, merged in from
another metric, synced, moved to another device, deep-copied) is copied into a new buffer at the next
append, once: a buffer is written past the end of a view only by the metric that allocated it, so no
other metric or tensor sharing the memory ever sees its rows change. Rows that require grad are
concatenated plainly (no buffer: an in-place write would join them to the graph).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

#: Rows of the smallest buffer (a few small batches fit without growing).
MIN_ROWS = 64


def _owner(head: Tensor, buffers: Sequence[Tensor]) -> Optional[Tensor]:
    """The buffer ``head`` is the leading rows of, among ``buffers``, or ``None``."""
    base = head._base
    for buffer in buffers:
        if base is buffer and head.data_ptr() == buffer.data_ptr() and head.is_contiguous():
            return buffer
    return None


def _fits(buffer: Tensor, head: Tensor, tail: Sequence[Tensor]) -> bool:
    """Whether the rows of ``tail`` can be written after ``head`` into ``buffer`` as they are."""
    same = all(t.dtype == buffer.dtype and t.shape[1:] == buffer.shape[1:] for t in tail)
    return same and head.shape[0] + sum(t.shape[0] for t in tail) <= buffer.shape[0]


def extend(parts: Sequence[Tensor], buffers: Sequence[Tensor]) -> tuple[Tensor, Optional[Tensor]]:
    """The rows of ``parts`` concatenated (``torch.cat``'s value and dtype), and the buffer they lead.

    ``buffers`` are the caller's own buffers: where ``parts[0]`` leads one with room for the other
    parts, they are copied in after it (O(their rows)); otherwise every part is copied into a new buffer
    with room for as many rows again. The buffer is ``None`` where the rows are concatenated plainly
    (rows that require grad, no rows at all, or rows that ``torch.cat`` refuses: other widths or
    devices).
    """
    rows = [p for p in parts if p.shape[0] > 0]
    first = rows[0] if rows else None
    alike = first is not None and all(
        p.shape[1:] == first.shape[1:] and p.device == first.device for p in rows
    )
    if not alike or any(p.requires_grad for p in rows):
        return torch.cat(list(parts)), None  # torch.cat's own error for other widths or devices
    head, tail = rows[0], rows[1:]
    buffer = _owner(head, buffers)
    if buffer is None or not _fits(buffer, head, tail):
        total = sum(p.shape[0] for p in rows)
        dtype = functools.reduce(torch.promote_types, (p.dtype for p in rows))
        buffer = head.new_empty((max(2 * total, MIN_ROWS), *head.shape[1:]), dtype=dtype)
        head, tail = buffer[:0], rows
    at = head.shape[0]
    for part in tail:
        buffer[at : at + part.shape[0]].copy_(part)
        at += part.shape[0]
    return buffer[:at], buffer


def trimmed(rows: Tensor) -> Tensor:
    """``rows`` in memory of its own size: a copy where it is the leading rows of a larger buffer (so a
    checkpoint or a pickle holds the rows, not the spare room)."""
    if rows.untyped_storage().nbytes() > rows.numel() * rows.element_size():
        return rows.clone()
    return rows
