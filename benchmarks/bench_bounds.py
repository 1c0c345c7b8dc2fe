"""How close each engine is to its bound: ours, the bare bound and the naive peer, in one process.

For every workload the script times (best of ``--repeat``, the device synchronised) our metric, the
bound it cannot beat (the bare matrix product, half of it for a symmetric product, or one row sort) and
the straightforward full-matrix implementation the peers use (nidl's contrastive accuracy and
uniformity, PML's kNN without faiss), checks that the values agree, and prints the ratios.

| workload | bound | peer |
| --- | --- | --- |
| contrastive accuracy@(1, 5), N x D | ``z1 @ z2.T`` | full ``N x N`` similarity, ``topk`` both ways |
| uniformity (t=2), N x D | half of ``z @ z.T`` | ``torch.pdist`` then ``exp().mean().log()`` |
| kNN P@1 / R-precision / MAP@R, same source | ``z @ z.T`` in blocks; + ``topk`` | |
| 2-D nDCG@(1, 10, 100), Q x 100 | ``torch.sort`` of the rows | |

Runs on CUDA when a GPU is present (``--device``); the default sizes are those of the GPU table of
issue 15, ``--cpu-sizes`` gives ones that fit this 2-core machine. Usage::

    python benchmarks/bench_bounds.py [--device cuda] [--cpu-sizes] [--only contrastive] [--compile]

``--compile`` turns on the compiled passes (:func:`embedmetrics.set_compile`); every timing is taken
after one warm-up call, so the compile time is not in the figures.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch

from _timing import timed as _timed
from embedmetrics import AccuracyCalculator
from embedmetrics.functional import contrastive_accuracy_score, retrieval_normalized_dcg, uniformity_score


def timed(fn: Callable[[], Any], device: str, repeat: int) -> tuple[Any, float]:
    """Best of ``repeat`` after one warm-up call (:func:`_timing.timed`)."""
    return _timed(fn, device, repeat, warmup=True)


def _pairs(n: int, d: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(n, d, generator=g)
    return z1.to(device), (z1 + 0.7 * torch.randn(n, d, generator=g)).to(device)


def naive_contrastive(z1: torch.Tensor, z2: torch.Tensor, topk: tuple[int, ...]) -> list[float]:
    """nidl-style: the whole similarity matrix, ``topk`` in both directions."""
    a, b = torch.nn.functional.normalize(z1, dim=1), torch.nn.functional.normalize(z2, dim=1)
    sim = a @ b.T
    target = torch.arange(len(a), device=a.device)[:, None]
    out = []
    for k in topk:
        rows = (sim.topk(k, dim=1).indices == target).any(1).float().mean()
        cols = (sim.T.topk(k, dim=1).indices == target).any(1).float().mean()
        out.append(float((rows + cols) / 2))
    return out


def contrastive(n: int, d: int, device: str, repeat: int) -> dict[str, Any]:
    z1, z2 = _pairs(n, d, device)
    topk = (1, 5)
    ours, t_ours = timed(lambda: contrastive_accuracy_score(z1, z2, topk=topk), device, repeat)
    _, t_gemm = timed(lambda: z1 @ z2.T, device, repeat)
    peer, t_peer = timed(lambda: naive_contrastive(z1, z2, topk), device, repeat)
    ours_values = [float(v) for v in ours]
    return {
        "workload": f"contrastive acc@(1,5) N={n} D={d}",
        "ours_s": t_ours, "bound_s": t_gemm, "peer_s": t_peer,
        "ours/bound": t_ours / t_gemm, "peer/ours": t_peer / t_ours,
        "agree": all(abs(a - b) < 1e-6 for a, b in zip(ours_values, peer)),
    }  # fmt: skip


def uniformity(n: int, d: int, device: str, repeat: int) -> dict[str, Any]:
    z, _ = _pairs(n, d, device)
    zn = torch.nn.functional.normalize(z, dim=1)
    ours, t_ours = timed(lambda: uniformity_score(z), device, repeat)
    _, t_gemm = timed(lambda: zn @ zn.T, device, repeat)
    result: dict[str, Any] = {
        "workload": f"uniformity N={n} D={d}",
        "ours_s": t_ours, "bound_s": t_gemm / 2, "ours/bound": t_ours / (t_gemm / 2),
    }  # fmt: skip
    if n <= 32768:  # pdist keeps n(n-1)/2 distances
        peer, t_peer = timed(lambda: torch.pdist(zn).pow(2).mul(-2).exp().mean().log(), device, repeat)
        result.update(
            peer_s=t_peer, **{"peer/ours": t_peer / t_ours}, agree=abs(float(ours) - float(peer)) < 1e-4
        )
    return result


def knn(n: int, d: int, device: str, repeat: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 100, (n,), generator=g)
    z = (torch.randn(100, d, generator=g)[labels] + 1.5 * torch.randn(n, d, generator=g)).to(device)
    labels = labels.to(device)
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"))
    _, t_ours = timed(lambda: calc.get_accuracy(z, labels), device, repeat)
    rows = max(1, min(n, (1 << 30) // (4 * n)))  # 1 GiB product blocks
    kk = int(torch.bincount(labels).max())

    def gemm(with_topk: bool) -> None:
        for lo in range(0, n, rows):
            s = z[lo : lo + rows] @ z.T
            if with_topk:
                s.topk(kk + 1, dim=1)

    _, t_gemm = timed(lambda: gemm(False), device, repeat)
    _, t_topk = timed(lambda: gemm(True), device, repeat)
    return {
        "workload": f"kNN P@1/RP/MAP@R same source N={n} D={d}",
        "ours_s": t_ours, "bound_s": t_gemm, "gemm_topk_s": t_topk,
        "ours/bound": t_ours / t_gemm, "ours/gemm_topk": t_ours / t_topk,
    }  # fmt: skip


def ndcg_2d(q: int, docs: int, device: str, repeat: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(2)
    preds = torch.randn(q, docs, generator=g).to(device)
    target = torch.randint(0, 3, (q, docs), generator=g).to(device)
    _, t_ours = timed(lambda: retrieval_normalized_dcg(preds, target, k=(1, 10, 100)), device, repeat)
    _, t_sort = timed(lambda: torch.sort(preds, dim=1, descending=True), device, repeat)
    return {
        "workload": f"2-D nDCG@(1,10,100) {q} x {docs}",
        "ours_s": t_ours, "bound_s": t_sort, "ours/bound": t_ours / t_sort,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cpu-sizes", action="store_true", help="sizes for a small CPU machine")
    parser.add_argument("--only", default="contrastive,contrastive_big,uniformity,knn,ndcg")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="embedmetrics.set_compile(True)")
    args = parser.parse_args()
    if args.compile:
        from embedmetrics import set_compile

        set_compile(True)
    small = args.cpu_sizes or not args.device.startswith("cuda")
    plan: dict[str, Callable[[], dict[str, Any]]] = {
        "contrastive": lambda: contrastive(16384 if not small else 8192, 128, args.device, args.repeat),
        "contrastive_big": lambda: contrastive(65536, 256, args.device, args.repeat),
        "uniformity": lambda: uniformity(65536 if not small else 8192, 256, args.device, args.repeat),
        "knn": lambda: knn(100_000 if not small else 20_000, 128, args.device, args.repeat),
        "ndcg": lambda: ndcg_2d(2_000_000 if not small else 200_000, 100, args.device, args.repeat),
    }
    if small:
        plan.pop("contrastive_big")
    for name in args.only.split(","):
        if name in plan:
            row = plan[name]()
            print(json.dumps({key: round(v, 4) if isinstance(v, float) else v for key, v in row.items()}))


if __name__ == "__main__":
    main()
