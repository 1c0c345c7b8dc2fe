"""Real torch.distributed runs (gloo, CPU processes): uneven shards, one rank with no update.

After the sync every rank holds all rows and scans only its share of the blocks; the result must
equal the functional on all rows, on every rank.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from embedmetrics import Alignment, ContrastiveAccuracy, Uniformity
from embedmetrics.functional import alignment_score, contrastive_accuracy_score, uniformity_score

pytestmark = pytest.mark.skipif(
    not dist.is_available() or sys.platform == "win32", reason="needs torch.distributed (gloo)"
)

N, D = 37, 5
# rows given to each rank, in order; rank 2 sees nothing
SPLITS = {0: [(0, 10), (10, 12), (30, 37)], 1: [(12, 30)], 2: []}
BLOCK_BYTES = 4 * N * 3  # 3 rows per block: 13 blocks shared by 3 ranks


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    z1 = torch.randn(N, D, generator=gen)
    return z1, z1 + 0.9 * torch.randn(N, D, generator=gen)


def _worker(rank: int, world: int, init_file: str, results: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        z1, z2 = _data()
        acc = ContrastiveAccuracy(topk=(1, 3), block_bytes=BLOCK_BYTES)
        uni = Uniformity(block_bytes=BLOCK_BYTES)
        ali = Alignment()
        for a, b in SPLITS[rank]:
            acc.update(z1[a:b], z2[a:b])
            uni.update(z1[a:b])
            ali.update(z1[a:b], z2[a:b])
        # rows in rank order, as the sync concatenates them
        order = torch.cat([torch.arange(a, b) for r in range(world) for a, b in SPLITS[r]])
        torch.save(
            {"acc": acc.compute(), "uni": uni.compute(), "ali": ali.compute(), "order": order},
            os.path.join(results, f"{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def test_three_ranks_uneven_with_an_idle_rank(tmp_path):
    world = len(SPLITS)
    mp.start_processes(
        _worker,
        args=(world, str(tmp_path / "init"), str(tmp_path)),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    z1, z2 = _data()
    for rank in range(world):
        out = torch.load(tmp_path / f"{rank}.pt")
        x1, x2 = z1[out["order"]], z2[out["order"]]
        expected = contrastive_accuracy_score(x1, x2, topk=(1, 3), block_bytes=BLOCK_BYTES)
        assert torch.equal(out["acc"], expected)
        assert torch.equal(out["uni"], uniformity_score(x1, block_bytes=BLOCK_BYTES))
        torch.testing.assert_close(out["ali"], alignment_score(z1, z2))
