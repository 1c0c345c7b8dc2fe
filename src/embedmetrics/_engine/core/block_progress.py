"""Progress of a blocked scan, for whoever is watching (the report's progress bar), at no cost otherwise.

A scan calls :func:`block_done` after each block; the callback set by :func:`on_blocks` (a context
manager, per thread and task) receives ``(blocks done, blocks in all)``. No callback: nothing happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional

BlockCallback = Callable[[int, int], None]
_CALLBACK: ContextVar[Optional[BlockCallback]] = ContextVar("embedmetrics_block_progress", default=None)


@contextmanager
def on_blocks(callback: BlockCallback) -> Iterator[None]:
    """Call ``callback(done, total)`` after each block of the scans run inside the ``with``."""
    token = _CALLBACK.set(callback)
    try:
        yield
    finally:
        _CALLBACK.reset(token)


def block_done(done: int, total: int) -> None:
    """A scan finished ``done`` of its ``total`` blocks."""
    callback = _CALLBACK.get()
    if callback is not None:
        callback(done, total)
