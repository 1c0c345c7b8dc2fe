"""Benchmark: AccuracyCalculator (exact blocked kNN) against brute force and PML + faiss-cpu.

Same data, same process: n = 20,000, d = 128, 100 classes, query = reference (same source),
metrics precision_at_1 + r_precision + mean_average_precision_at_r. Then n = 50,000 in a
subprocess, whose peak resident memory is measured (target: < 60 s, <= 4 GB).

Run: ``PYTHONPATH=src python benchmarks/bench_neighbors.py``
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import torch

from embedmetrics import AccuracyCalculator

METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")


def make_data(n: int, d: int = 128, classes: int = 100, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    x = centers[labels] + 1.5 * torch.randn(n, d, generator=g)
    return x, labels


def brute_force(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Full distance matrix + topk (what a simple torch implementation does)."""
    counts = torch.bincount(y)[y] - 1
    k = int(counts.max())
    dist = torch.cdist(x, x)
    dist.fill_diagonal_(float("inf"))
    idx = dist.topk(k, dim=1, largest=False).indices
    rel = (y[idx] == y[:, None]).double()
    keep = counts > 0
    pos = torch.arange(k)[None, :]
    in_r = pos < counts[:, None]
    prec = rel.cumsum(1) / (pos + 1)
    r_prec = (rel * in_r).sum(1) / counts.clamp_min(1)
    map_r = (prec * rel * in_r).sum(1) / counts.clamp_min(1)
    return {
        "precision_at_1": float(rel[keep, 0].mean()),
        "r_precision": float(r_prec[keep].mean()),
        "mean_average_precision_at_r": float(map_r[keep].mean()),
    }


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def ours(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    return AccuracyCalculator(include=METRICS).get_accuracy(x, x, y, y, True)


def child(n: int) -> None:
    x, y = make_data(n)
    t, out = timed(ours, x, y)
    values = " ".join(f"{out[m]:.6f}" for m in METRICS)
    print(f"{t:.3f} {values}")


def main() -> None:
    n = 20_000
    x, y = make_data(n)
    print(
        f"n={n}, d=128, 100 classes, same source, metrics: {', '.join(METRICS)}; "
        f"torch threads={torch.get_num_threads()}"
    )
    ours(x[:500], y[:500])  # warm-up
    rows = []
    t_ours, v_ours = timed(ours, x, y)
    rows.append(("embedmetrics AccuracyCalculator", t_ours, v_ours))
    t_bf, v_bf = timed(brute_force, x, y)
    rows.append(("brute force torch (cdist + topk)", t_bf, v_bf))
    try:
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator as PMLCalculator

        pml = PMLCalculator(include=METRICS, k="max_bin_count", device=torch.device("cpu"))
        t_pml, v_pml = timed(lambda: pml.get_accuracy(x, y, x, y, True))
        rows.append(("PML AccuracyCalculator + faiss-cpu", t_pml, v_pml))
    except ImportError:
        t_pml = None
        print("pytorch-metric-learning / faiss-cpu not installed: skipping that peer")
    print()
    print(
        f"| {'implementation':36} | {'time (s)':>8} | {'ratio vs ours':>13} | "
        f"{'P@1':>8} | {'R-prec':>8} | {'MAP@R':>8} |"
    )
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 15}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    for name, t, v in rows:
        print(
            f"| {name:36} | {t:8.2f} | {t / t_ours:12.2f}x | {v['precision_at_1']:8.5f} | "
            f"{v['r_precision']:8.5f} | {v['mean_average_precision_at_r']:8.5f} |"
        )
    big = 50_000
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(big)], capture_output=True, text=True, check=True
    )
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    t_big = float(proc.stdout.split()[0])
    print()
    print(f"n={big}: embedmetrics {t_big:.2f} s (target < 60 s), peak RSS {peak_gb:.2f} GB (target <= 4 GB)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
    else:
        main()
