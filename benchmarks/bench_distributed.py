"""Per-rank ``compute`` time of the blocked-scan metrics with 1, 2 and 4 gloo processes.

The same data every time; each rank updates with its contiguous share, then ``compute`` gathers the
states (every rank then holds all rows) and each rank scans only its share of the query blocks,
combined with one all-reduce. Every process is limited to one thread, so on a machine with at
least 4 cores the per-rank time should fall roughly as 1/world_size (plus the gather). With fewer
cores than processes (or a busy machine), the processes share cores and the wall-clock times say
little; the CPU time each rank spends in ``compute`` (``time.process_time``) still shows the split.

Run: ``PYTHONPATH=src python benchmarks/bench_distributed.py [--n 4096] [--dim 64]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torchmetrics import Metric

import embedmetrics as em

WORLDS = (1, 2, 4)


def _metrics() -> dict[str, Callable[[], Metric]]:
    return {
        "ContrastiveAccuracy(topk=(1,5,10))": lambda: em.ContrastiveAccuracy(topk=(1, 5, 10)),
        "Uniformity": em.Uniformity,
        # the kNN metrics (the blocked scan); NMI/AMI run k-means on all rows on every rank
        "EmbeddingAccuracy(kNN metrics)": lambda: em.EmbeddingAccuracy(exclude=("NMI", "AMI")),
    }


def _data(n: int, dim: int) -> dict[str, tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    z1 = torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=1)
    z2 = z1 + 0.5 * torch.randn(n, dim, generator=g) / dim**0.5
    labels = torch.randint(0, max(2, n // 64), (n,), generator=g)
    return {
        "ContrastiveAccuracy(topk=(1,5,10))": (z1, z2),
        "Uniformity": (z1,),
        "EmbeddingAccuracy(kNN metrics)": (z1, labels),
    }


def _worker(rank: int, world: int, port: int, n: int, dim: int, queue: Any) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    data = _data(n, dim)
    bounds = [round(r * n / world) for r in range(world + 1)]
    for name, factory in _metrics().items():
        metric = factory()
        metric.update(*(t[bounds[rank] : bounds[rank + 1]] for t in data[name]))
        dist.barrier()
        start = time.perf_counter()
        metric.sync()  # the state gather alone
        gathered = time.perf_counter() - start
        metric.unsync()
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        value = metric.compute()  # gather + this rank's share of the scan + all-reduce
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        first = next(iter(value.values())) if isinstance(value, dict) else value
        queue.put((name, world, rank, elapsed, gathered, first.reshape(-1)[0].item(), cpu))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="rows (pairs, embeddings)")
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    rows: list[tuple[str, int, int, float, float, float, float]] = []
    for world in WORLDS:
        queue = ctx.SimpleQueue()
        mp.start_processes(
            _worker, args=(world, _free_port(), args.n, args.dim, queue), nprocs=world, start_method="spawn"
        )
        while not queue.empty():
            rows.append(queue.get())
    cores = os.cpu_count() or 1
    print(f"n={args.n}, dim={args.dim}, gloo on CPU, 1 thread per process, {cores} cores on this machine")
    if cores < max(WORLDS):
        print(
            f"NOTE: {max(WORLDS)} processes on {cores} cores oversubscribe the CPU: they share cores, so "
            "the wall-clock times of the larger worlds are not a measure of the split (rerun on >= 4 "
            "cores); the CPU seconds per rank are."
        )
    header = f"{'metric':34} {'world':>5} {'wall s per rank':>24} {'max':>6} {'gather':>6} {'speedup':>7} "
    header += f"{'CPU s per rank':>24} {'CPU max':>7} {'ratio':>6} {'same':>4}"
    print(header)
    print("-" * len(header))
    for name in _metrics():
        base_time = base_cpu = base_value = None
        for world in WORLDS:
            mine = sorted((r for r in rows if r[0] == name and r[1] == world), key=lambda r: r[2])
            times, cpus = [r[3] for r in mine], [r[6] for r in mine]
            slowest, busiest = max(times), max(cpus)
            if base_time is None or base_cpu is None:
                base_time, base_cpu, base_value = slowest, busiest, mine[0][5]
            same = all(abs(r[5] - base_value) <= 1e-6 * max(1.0, abs(base_value)) for r in mine)
            wall = " ".join(f"{t:.3f}" for t in times)
            cpu = " ".join(f"{t:.3f}" for t in cpus)
            print(
                f"{name:34} {world:>5} {wall:>24} {slowest:>6.3f} {max(r[4] for r in mine):>6.3f} "
                f"{base_time / slowest:>6.2f}x {cpu:>24} {busiest:>7.3f} {base_cpu / busiest:>5.2f}x "
                f"{'yes' if same else 'NO':>4}"
            )


if __name__ == "__main__":
    main()
