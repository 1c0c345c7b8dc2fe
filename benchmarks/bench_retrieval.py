"""Benchmark: embedmetrics retrieval metrics vs torchmetrics 1.9 (same data, same process).

Flat shuffled input of Q queries x D documents, k=10, ``update`` in batches of 65,536 rows, then
``compute``; and the same data as 2-D ``(Q, D)`` input without indexes (ours only: torchmetrics
needs indexes), updated in batches of the same number of documents, compared with torchmetrics on
the flat input.

    python benchmarks/bench_retrieval.py            # 200,000 queries x 20 documents
    python benchmarks/bench_retrieval.py --quick    # 20,000 queries x 20 documents
    python benchmarks/bench_retrieval.py --threads 1  # both libraries on one thread

On a machine shared with other jobs, intra-op threads wait for each other (every parallel operation
runs at the pace of its slowest thread), which inflates the timings of vectorised code far more
than those of per-query Python loops; ``--threads 1`` gives figures that depend less on the load.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch
import torchmetrics.retrieval as tmr

import embedmetrics as em
from _timing import emit

BATCH = 65_536


def make_data(queries: int, docs: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    preds = torch.rand(queries, docs, generator=g) + 0.01  # positive: torchmetrics drops scores <= 0
    target = torch.rand(queries, docs, generator=g) < 0.1
    return preds, target, torch.arange(queries).unsqueeze(1).expand(queries, docs)


def _values(result: Any) -> list[float]:
    """A result (a tensor, or a tuple of them for the curves) as a flat list of floats."""
    parts = result if isinstance(result, tuple) else (result,)
    return [float(v) for part in parts for v in part.reshape(-1)]


def run_flat(metric: Any, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor) -> list[float]:
    for lo in range(0, preds.numel(), BATCH):
        metric.update(preds[lo : lo + BATCH], target[lo : lo + BATCH], indexes=indexes[lo : lo + BATCH])
    return _values(metric.compute())


def run_rows(metric: Any, preds: torch.Tensor, target: torch.Tensor) -> list[float]:
    rows = max(1, BATCH // preds.shape[1])
    for lo in range(0, preds.shape[0], rows):
        metric.update(preds[lo : lo + rows], target[lo : lo + rows])
    return _values(metric.compute())


#: (name, our factory, torchmetrics' factory): the same arguments on both sides.
CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("RetrievalHitRate", lambda: em.RetrievalHitRate(k=10), lambda: tmr.RetrievalHitRate(top_k=10)),
    ("RetrievalMRR", lambda: em.RetrievalMRR(k=10), lambda: tmr.RetrievalMRR(top_k=10)),
    (
        "RetrievalNormalizedDCG",
        lambda: em.RetrievalNormalizedDCG(k=10),
        lambda: tmr.RetrievalNormalizedDCG(top_k=10),
    ),
    ("RetrievalFallOut", lambda: em.RetrievalFallOut(k=10), lambda: tmr.RetrievalFallOut(top_k=10)),
    (
        "RetrievalAUROC",
        lambda: em.RetrievalAUROC(max_fpr=0.5),
        lambda: tmr.RetrievalAUROC(max_fpr=0.5),
    ),
    (
        "RetrievalPRCurve",
        lambda: em.RetrievalPrecisionRecallCurve(max_k=10),
        lambda: tmr.RetrievalPrecisionRecallCurve(max_k=10),
    ),
    (
        "RetrievalRecall@Prec",
        lambda: em.RetrievalRecallAtFixedPrecision(0.3, max_k=10),
        lambda: tmr.RetrievalRecallAtFixedPrecision(0.3, max_k=10),
    ),
]


def timed(fn: Callable[..., list[float]]) -> tuple[float, list[float]]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20,000 queries instead of 200,000")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (both libraries)")
    parser.add_argument("--metrics", default=None, help="comma-separated names of the rows to run")
    parser.add_argument("--device", default="cpu", help="where the data and both libraries' metrics live")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    queries = args.queries or (20_000 if args.quick else 200_000)
    torch.manual_seed(0)
    preds2d, target2d, index2d = make_data(queries, args.docs)
    perm = torch.randperm(preds2d.numel())  # shuffled flat input: queries scatter over batches
    preds, target, indexes = (x.reshape(-1)[perm].to(args.device) for x in (preds2d, target2d, index2d))
    preds2d, target2d = preds2d.to(args.device), target2d.to(args.device)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; {queries:,} queries x "
        f"{args.docs} docs, k=10, batches of {BATCH:,} documents"
    )
    header = (
        f"{'metric':<24}{'torchmetrics flat':>18}{'ours flat':>12}{'ratio':>9}{'ours 2-D':>12}{'ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    only = set(args.metrics.split(",")) if args.metrics else None
    dev = args.device
    for name, ours, theirs in CASES:
        if only and name not in only:
            continue
        t_tm, v_tm = timed(lambda f=theirs: run_flat(f().to(dev), preds, target, indexes))
        t_flat, v_flat = timed(lambda f=ours: run_flat(f().to(dev), preds, target, indexes))
        t_rows, v_rows = timed(lambda f=ours: run_rows(f().to(dev), preds2d, target2d))
        for v in (v_flat, v_rows):  # the same values as torchmetrics (tie-free data)
            assert max(abs(a - b) for a, b in zip(v_tm, v)) < 1e-5, (name, v_tm, v)
        print(
            f"{name:<24}{t_tm:>17.3f}s{t_flat:>11.3f}s{t_tm / t_flat:>8.1f}x"
            f"{t_rows:>11.3f}s{t_tm / t_rows:>8.1f}x"
        )
        size = f"{queries:,} queries x {args.docs} documents"
        peer = "torchmetrics (flat)"
        emit(f"{name}, {size}, flat", t_flat, peer=peer, peer_value=t_tm, equal=True, device=dev)
        emit(f"{name}, {size}, 2-D", t_rows, peer=peer, peer_value=t_tm, equal=True, device=dev)


if __name__ == "__main__":
    main()
