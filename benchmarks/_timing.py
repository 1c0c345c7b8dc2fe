"""Wall-clock timing and peak memory shared by the benchmark scripts (run from ``benchmarks/``:
``from _timing import timed``)."""

from __future__ import annotations

import json
import resource
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


#: The prefix of the machine-readable result lines that ``run_all.py`` collects from every script.
ROW_PREFIX = "BENCH "


def emit(
    workload: str,
    ours: float,
    *,
    unit: str = "s",
    peer: str | None = None,
    peer_value: float | None = None,
    bound: str | None = None,
    bound_value: float | None = None,
    equal: bool | None = None,
    device: str = "cpu",
) -> None:
    """Print one result row for ``run_all.py``: ours, the peer's figure and the bound's, measured side by
    side in one run (``unit``: ``"s"`` for wall-clock seconds, ``"GB"`` for peak memory above the
    baseline); ``equal``: whether both sides gave the same values."""
    row = {
        "workload": workload, "unit": unit, "ours": ours, "peer": peer, "peer_value": peer_value,
        "bound": bound, "bound_value": bound_value, "equal": equal, "device": device,
    }  # fmt: skip
    print(ROW_PREFIX + json.dumps(row), flush=True)


def product_bound(
    a: torch.Tensor, b: torch.Tensor, device: str, repeat: int = 2, *, half: bool = False
) -> float:
    """Seconds of the bare product ``a @ b.T`` in blocks of about 12 MiB written into one reused buffer
    (no page faults on fresh memory): the floor of any exact scan over all pairs. The blocks take rows
    of the longer side (a few rows of ``a`` against a much longer ``b`` would stream all of ``b`` once per
    block). ``half``: half of it, the floor of a symmetric product (``a`` = ``b``)."""
    by_b = b.shape[0] > a.shape[0]
    short, long = (a, b) if by_b else (b, a)
    rows = max(1, (12 * 2**20) // (4 * short.shape[0]))
    flat = torch.empty(rows * short.shape[0], dtype=a.dtype, device=a.device)

    def product() -> None:
        for lo in range(0, long.shape[0], rows):
            block = long[lo : lo + rows]
            n = block.shape[0]
            if by_b:
                torch.mm(a, block.T, out=flat[: n * a.shape[0]].view(a.shape[0], n))
            else:
                torch.mm(block, b.T, out=flat[: n * b.shape[0]].view(n, b.shape[0]))

    _, seconds = timed(product, device, repeat, warmup=True)
    return seconds / 2 if half else seconds


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        return None
    return None


def reset_peak() -> float:
    """Make the current RSS the peak (Linux) and return it: the baseline of a measurement."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    current = _status_mib("VmRSS")
    return current if current is not None else peak_rss_mib()


def peak_rss_mib() -> float:
    peak = _status_mib("VmHWM")
    if peak is not None:
        return peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
