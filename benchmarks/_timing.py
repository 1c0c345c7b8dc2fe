"""Wall-clock timing shared by the benchmark scripts (run from ``benchmarks/``: ``from _timing import
timed``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str, repeat: int = 1, *, warmup: bool = False) -> tuple[Any, float]:
    """The value of ``fn()`` and its best wall-clock time over ``repeat`` runs, the device synchronised
    around each; ``warmup``: one untimed call first (compilation, caches, first-touch allocations)."""
    value = fn() if warmup else None
    best = float("inf")
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        value = fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return value, best
