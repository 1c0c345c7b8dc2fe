"""Identical rows under any world size: duplicated embeddings give bit-identical values on 1, 2 and 3
gloo ranks (uneven shares, an idle rank, rows in any order), equal to the single-process value."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import Tensor

import embedmetrics as em

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _dist import run_distributed

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed (gloo)")

N = 90
BLOCK = 2048  # small blocks: many per rank
# rows of each rank (after a fixed permutation), by world size; in world 3 the last rank is idle
SPLITS = {1: [(0, N)], 2: [(0, 17), (17, N)], 3: [(0, 50), (50, N), (N, N)]}


def _data(dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(21)
    base = torch.randn(12, 6, generator=g, dtype=torch.float64)
    groups = torch.randint(0, 12, (N,), generator=g)
    return base[groups].to(dtype), groups % 4


def _values(rank: int, world: int, order_seed: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for dtype in (torch.float32, torch.float64):
        z, labels = _data(dtype)
        p = torch.randperm(N, generator=torch.Generator().manual_seed(order_seed))
        z, labels = z[p], labels[p]
        start, stop = SPLITS[world][rank]
        acc = em.ContrastiveAccuracy(topk=(1, 3, 10), block_bytes=BLOCK)
        uni = em.Uniformity(block_bytes=BLOCK)
        knn = em.EmbeddingAccuracy(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"))
        knn.calculator.block_bytes = BLOCK
        if stop > start:
            acc.update(z[start:stop], z[start:stop])
            uni.update(z[start:stop])
            knn.update(z[start:stop], labels[start:stop])
        name = str(dtype).removeprefix("torch.")
        out[f"acc_{name}"] = acc.compute().double().tolist()
        out[f"uni_{name}"] = [float(uni.compute())]
        out[f"knn_{name}"] = [float(v) for v in knn.compute().values()]
    return out


def duplicated_rows_target(rank: int, world: int, order_seed: int) -> dict[str, list[float]]:
    return _values(rank, world, order_seed)


def test_same_bits_on_every_world_size_and_row_order() -> None:
    expected = _values(0, 1, order_seed=0)  # one process, no process group
    for order_seed in (0, 1):
        assert _values(0, 1, order_seed) == expected
    for world in (2, 3):
        results = run_distributed(duplicated_rows_target, world, timeout=180, kwargs={"order_seed": world})
        for rank, result in enumerate(results):
            assert result == expected, (world, rank)
