"""Benchmark: AccuracyCalculator (exact blocked kNN) against brute force and PML + faiss-cpu.

Same data, every side in a fresh process of its own (best of ``--repeat``): n = 20,000, d = 128,
100 classes, query = reference (same source), metrics precision_at_1 + r_precision +
mean_average_precision_at_r, k = the largest class (PML's ``"max_bin_count"``). The bound is the bare
product of the embeddings with themselves, in 12 MiB blocks written into one buffer. Then n = 50,000 (ours),
whose peak resident memory is measured (target: < 60 s, <= 4 GB).

Run: ``python benchmarks/bench_neighbors.py [--n 20000] [--big 50000] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import torch

from _timing import emit, product_bound, sync
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
    out = AccuracyCalculator(include=METRICS).get_accuracy(x, x, y, y, True)
    sync(x.device.type)
    return out


def pml(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator as PMLCalculator

    calc = PMLCalculator(include=METRICS, k="max_bin_count", device=torch.device("cpu"))
    return calc.get_accuracy(x, y, x, y, True)  # type: ignore[no-any-return]


def bound(x: torch.Tensor, _: torch.Tensor) -> dict[str, float]:
    return {"seconds": product_bound(x, x, x.device.type, repeat=1)}


WORKERS = {"ours": ours, "pml": pml, "brute": brute_force, "bound": bound}


def worker(name: str, n: int, device: str) -> None:
    """One side in this fresh process (faiss' OpenMP threads keep spinning after a search and would slow
    whatever ran next in the same process): a warm-up on 500 rows, then the timed run. PML runs on the
    CPU (faiss-cpu)."""
    x, y = make_data(n)
    if name != "pml":
        x, y = x.to(device), y.to(device)
    WORKERS[name](x[:500], y[:500])
    t, out = timed(WORKERS[name], x, y)
    print(json.dumps({"seconds": out.pop("seconds", t), "values": out}))


def run_worker(name: str, n: int, repeat: int, device: str) -> dict[str, Any] | None:
    """Best of ``repeat`` fresh processes; ``None`` where the side cannot run (a peer not installed)."""
    best = None
    for _ in range(repeat):
        cmd = [sys.executable, __file__, "--worker", name, str(n), device]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name}: not run ({proc.stderr.strip().splitlines()[-1]})")
            return None
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        if best is None or row["seconds"] < best["seconds"]:
            best = row
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--big", type=int, default=50_000, help="n of the ours-only memory run (0: skip)")
    parser.add_argument("--repeat", type=int, default=2, help="fresh processes per side (best counts)")
    parser.add_argument("--device", default="cpu", help="where ours and the bound run (PML: the CPU)")
    parser.add_argument("--worker", nargs=3, metavar=("SIDE", "N", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return
    n = args.n
    print(
        f"n={n}, d=128, 100 classes, same source, metrics: {', '.join(METRICS)}; each side in its own process"
    )
    rows = {name: run_worker(name, n, args.repeat, args.device) for name in ("ours", "pml", "brute", "bound")}
    mine = rows["ours"]
    assert mine is not None
    head = " | ".join(f"{m:>8}" for m in ("P@1", "R-prec", "MAP@R"))
    print(f"| {'implementation':36} | {'time (s)':>8} | {'vs ours':>8} | {head} |")
    labels = {
        "ours": "embedmetrics AccuracyCalculator", "pml": "PML AccuracyCalculator + faiss-cpu",
        "brute": "brute force torch (cdist + topk)", "bound": "bare product, 12 MiB blocks",
    }  # fmt: skip
    for name, row in rows.items():
        if row is not None:
            v = row["values"]
            cells = " | ".join(f"{v.get(m, float('nan')):8.5f}" for m in METRICS)
            ratio = row["seconds"] / mine["seconds"]
            print(f"| {labels[name]:36} | {row['seconds']:8.2f} | {ratio:7.2f}x | {cells} |")
    peer, floor = rows["pml"], rows["bound"]
    equal = None if peer is None else all(abs(peer["values"][m] - mine["values"][m]) < 1e-6 for m in METRICS)
    emit(
        f"kNN P@1, R-precision, MAP@R, same source, {n:,} x 128, 100 classes", mine["seconds"],
        peer=labels["pml"] if peer else None, peer_value=peer["seconds"] if peer else None,
        bound="the bare product", bound_value=floor["seconds"] if floor else None, equal=equal,
        device=args.device,
    )  # fmt: skip
    if args.big:
        big = args.big
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", "ours", str(big)],
            capture_output=True,
            text=True,
            check=True,
        )
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        t_big = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
        print(
            f"n={big}: embedmetrics {t_big:.2f} s (target < 60 s), peak RSS {peak_gb:.2f} GB (target <= 4 GB)"
        )


if __name__ == "__main__":
    main()
