"""Benchmark: representation health against the approaches in use.

1. RankMe and α-ReQ streamed over ``--n`` x ``--d`` embeddings in batches of ``--batch``: our module
   metrics (float64 sufficient statistics, O(d²)) against the queue-based approach (keep every batch,
   stack, ``torch.linalg.svdvals`` on the ``(n, d)`` matrix, O(n·d)). Time of each, values checked to
   agree, and the peak memory of each in a fresh subprocess (``VmHWM`` after a reset, Linux).
2. ``KNNAccuracy`` with a ``--bank`` x 512 bank and ``--queries`` queries against the chunked full-matrix
   weighted kNN classifier of solo-learn / DINO (a block of queries times the whole bank, ``topk``,
   ``exp(s / T)`` votes over a one-hot, ``argsort``) and against the bare matrix product in the same
   chunks; top-1 and top-5 accuracies checked to be identical (tie-free data).

Runs on CUDA when a GPU is present (``--device``). Usage:
``python benchmarks/bench_representation.py [--n 1000000] [--d 512] [--bank 50000] [--queries 10000]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from _timing import emit, timed
from embedmetrics import AlphaReQ, RankMe
from embedmetrics.functional import knn_accuracy


def batches(n: int, d: int, batch: int, device: str) -> Iterator[torch.Tensor]:
    """Anisotropic embeddings (a decaying spectrum), the same stream for every implementation."""
    gen = torch.Generator().manual_seed(0)
    scales = torch.arange(1, d + 1, dtype=torch.float32) ** -0.5
    for start in range(0, n, batch):
        rows = min(batch, n - start)
        yield (torch.randn(rows, d, generator=gen) * scales).to(device)


def ours_spectral(n: int, d: int, batch: int, device: str) -> tuple[float, float]:
    rankme, alpha = RankMe().to(device), AlphaReQ().to(device)
    for z in batches(n, d, batch, device):
        rankme.update(z)
        alpha.update(z)
    return float(rankme.compute()), float(alpha.compute())


def queue_spectral(n: int, d: int, batch: int, device: str) -> tuple[float, float]:
    """Keep every batch, stack, SVD (RankMe on singular values; α-ReQ on the centred covariance)."""
    queue = list(batches(n, d, batch, device))
    z = torch.cat(queue)
    del queue
    s = torch.linalg.svdvals(z)
    p = s / s.sum() + 1e-7
    rankme = float(torch.exp(-(p * p.log()).sum()))
    lam = torch.linalg.svdvals(z - z.mean(dim=0)).double() ** 2 / (n - 1)
    ranks = torch.arange(6, 101, dtype=torch.float64, device=lam.device)
    x, y, w = ranks.log(), lam[5:100].log(), 1.0 / ranks
    xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
    alpha = float(-((w * (x - xm) * (y - ym)).sum() / (w * (x - xm) ** 2).sum()))
    return rankme, alpha


def peak_memory(kind: str, args: argparse.Namespace) -> float:
    """Peak extra memory (GB) of one implementation, in a fresh process (GPU: max allocated)."""
    cmd = [sys.executable, __file__, "--child", kind, "--n", str(args.n), "--d", str(args.d)]
    cmd += ["--batch", str(args.batch), "--device", args.device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["peak_gb"])


def child(kind: str, args: argparse.Namespace) -> None:
    fn = ours_spectral if kind == "ours" else queue_spectral
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        fn(args.n, args.d, args.batch, args.device)
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:

        def rss(field: str) -> float:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith(field):
                        return int(line.split()[1]) / 2**20
            return float("nan")

        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = rss("VmRSS")
        fn(args.n, args.d, args.batch, args.device)
        peak = rss("VmHWM") - base
    print(json.dumps({"peak_gb": peak}))


# --------------------------------------------------------------------------- kNN accuracy


def chunked_knn(
    bank: torch.Tensor, bank_labels: torch.Tensor, queries: torch.Tensor, query_labels: torch.Tensor,
    k: int, t: float, n_classes: int, chunk: int,
) -> tuple[float, float]:  # fmt: skip
    """solo-learn's / DINO's weighted kNN: a chunk of queries times the bank, topk, votes, argsort."""
    bank_n, hits1, hits5 = F.normalize(bank, dim=1), 0, 0
    for start in range(0, queries.shape[0], chunk):
        q = F.normalize(queries[start : start + chunk], dim=1)
        sim, idx = (q @ bank_n.T).topk(k, dim=1)
        one_hot = torch.zeros(q.shape[0] * k, n_classes, device=q.device)
        one_hot.scatter_(1, bank_labels[idx].view(-1, 1), 1.0)
        votes = (one_hot.view(q.shape[0], k, n_classes) * (sim / t).exp()[:, :, None]).sum(dim=1)
        pred = votes.argsort(dim=1, descending=True)
        correct = pred.eq(query_labels[start : start + chunk, None])
        hits1 += int(correct[:, :1].sum())
        hits5 += int(correct[:, :5].sum())
    return hits1 / queries.shape[0], hits5 / queries.shape[0]


def bare_product(bank: torch.Tensor, queries: torch.Tensor, chunk: int) -> None:
    bank_n = F.normalize(bank, dim=1)
    for start in range(0, queries.shape[0], chunk):
        _ = F.normalize(queries[start : start + chunk], dim=1) @ bank_n.T


def knn_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    n_classes, d = 100, 512
    centers = torch.randn(n_classes, d, generator=gen)
    bank_labels = torch.randint(0, n_classes, (args.bank,), generator=gen)
    query_labels = torch.randint(0, n_classes, (args.queries,), generator=gen)
    bank = centers[bank_labels] + 4.0 * torch.randn(args.bank, d, generator=gen)
    queries = centers[query_labels] + 4.0 * torch.randn(args.queries, d, generator=gen)
    bank, queries, bank_labels, query_labels = (
        t.to(args.device) for t in (bank, queries, bank_labels, query_labels)
    )
    chunk = 256 if args.device == "cpu" else 4096

    def ours_run() -> Any:
        return knn_accuracy(bank, bank_labels, queries, query_labels, num_classes=n_classes)

    def peer_run() -> Any:
        return chunked_knn(bank, bank_labels, queries, query_labels, 20, 0.07, n_classes, chunk)

    # interleaved in one process, best of 3 each: ours, solo-learn's chunked kNN, the bare product
    t_ours = t_peer = t_bare = float("inf")
    for _ in range(3):
        ours, t = timed(ours_run, args.device)
        t_ours = min(t_ours, t)
        peer, t = timed(peer_run, args.device)
        t_peer = min(t_peer, t)
        t_bare = min(t_bare, timed(lambda: bare_product(bank, queries, chunk), args.device)[1])
    # the same number of hits (the accuracies differ only in the float32 rounding of the division)
    same = [round(float(a) * args.queries) == round(b * args.queries) for a, b in zip(ours, peer)]
    emit(
        f"KNNAccuracy top-1/top-5, bank {args.bank:,} x 512, {args.queries:,} queries, k=20", t_ours,
        peer="solo-learn's chunked weighted kNN", peer_value=t_peer, bound="the bare product",
        bound_value=t_bare, equal=all(same), device=args.device,
    )  # fmt: skip
    return {
        "ours_s": t_ours, "chunked_s": t_peer, "bare_product_s": t_bare,
        "speedup_vs_chunked": t_peer / t_ours, "ours_over_bare": t_ours / t_bare,
        "ours_acc": [float(v) for v in ours], "chunked_acc": list(peer), "identical": all(same),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--bank", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--child", choices=["ours", "queue"])
    parser.add_argument("--skip-spectral", action="store_true")
    args = parser.parse_args()
    if args.d < 100 and not args.skip_spectral:
        parser.error(f"--d must be at least 100: the α-ReQ peer fits eigenvalue ranks 6..100, got {args.d}")
    if args.child:
        child(args.child, args)
        return
    print(f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    if not args.skip_spectral:
        (r1, a1), t_ours = timed(lambda: ours_spectral(args.n, args.d, args.batch, args.device), args.device)
        (r2, a2), t_queue = timed(
            lambda: queue_spectral(args.n, args.d, args.batch, args.device), args.device
        )
        m_ours, m_queue = peak_memory("ours", args), peak_memory("queue", args)
        print(f"\nRankMe + alpha-ReQ, {args.n} x {args.d} in batches of {args.batch}")
        print("| implementation | time (s) | peak extra memory (GB) | RankMe | alpha |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| ours (sufficient statistics) | {t_ours:.2f} | {m_ours:.3f} | {r1:.4f} | {a1:.4f} |")
        print(f"| queue + svdvals | {t_queue:.2f} | {m_queue:.3f} | {r2:.4f} | {a2:.4f} |")
        ratio = m_queue / max(m_ours, 1e-9)
        print(f"time ratio queue/ours: {t_queue / t_ours:.2f}x, memory ratio: {ratio:.1f}x")
    res = knn_benchmark(args)
    print(f"\nKNNAccuracy, bank {args.bank} x 512, {args.queries} queries, k=20, T=0.07")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
