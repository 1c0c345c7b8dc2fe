"""The embedding scan under sharding: partials of every rank add up to the unsharded result."""

from __future__ import annotations

import pytest
import torch

from embedmetrics._engine.embedding import pairs as engine
from embedmetrics.functional import contrastive_accuracy_score, uniformity_score


def _views(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=gen)
    return z1, z1 + torch.randn(n, d, generator=gen)


@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("block_bytes", [4 * 23 * 2, 4 * 23 * 7, 10**9])
def test_sharded_contrastive_equals_unsharded(world, block_bytes):
    z1, z2 = _views(23, 4, seed=0)
    q = engine.prepare(z1, normalize=True, eps=1e-12, dtype=torch.float32)
    r = engine.prepare(z2, normalize=True, eps=1e-12, dtype=torch.float32)
    whole = engine.contrastive_partial(q, r, block_bytes=block_bytes)
    # the fake all-reduce: sum the partial of every rank
    summed = sum(
        engine.contrastive_partial(q, r, block_bytes=block_bytes, shard=(k, world)) for k in range(world)
    )
    assert torch.equal(summed, whole)
    ks = (1, 3, 30)
    expected = contrastive_accuracy_score(z1, z2, topk=ks, block_bytes=block_bytes)
    assert torch.equal(engine.contrastive_finalize(summed, ks, "average").to(torch.float32), expected)


@pytest.mark.parametrize("world", [2, 3, 5])
def test_sharded_uniformity_equals_unsharded(world):
    z, _ = _views(300, 4, seed=1)  # five tiles of the fixed scan
    x = engine.prepare(z, normalize=True, eps=1e-12, dtype=torch.float32)
    x = x - x.mean(0)
    whole = engine.uniformity_partial(x, t=2.0)
    parts = [engine.uniformity_partial(x, t=2.0, shard=(k, world)) for k in range(world)]
    # every row is owned by exactly one rank (the others hold 0), so the sum is exact
    owners = torch.stack([p != 0 for p in parts]).sum(0)
    assert bool((owners <= 1).all())
    summed = sum(parts)
    assert torch.equal(summed, whole)
    expected = uniformity_score(z)
    assert torch.equal(engine.uniformity_finalize(summed).to(torch.float32), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniformity_tiles_never_depend_on_the_block_budget(dtype, monkeypatch):
    """The scan's products always have the fixed tiles' shapes: any budget gives the same bits, and
    narrow column tiles (their log-sum-exps combined) agree with the closed form."""
    from oracles.embedding import uniformity as uniformity_ref

    z = torch.randn(150, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    values = {uniformity_score(z, block_bytes=b) for b in (1, 64, 1000, 2**16, None)}
    assert len({v.item() for v in values}) == 1
    monkeypatch.setattr(engine, "UNIFORMITY_TILE_COLUMNS", 16)
    narrow = uniformity_score(z)
    assert abs(narrow.item() - uniformity_ref(z.double().numpy())) < 1e-5


def test_upper_block_ranges_cover_each_row_once():
    from embedmetrics._engine.core.scan import plan_blocks

    whole = plan_blocks(50, 1, 4, strided=True)[1]  # 4 rows per block, dealt round-robin when sharded
    for world in (1, 2, 3, 7):
        rows = sorted(r for k in range(world) for r in plan_blocks(50, 1, 4, (k, world), strided=True)[1])
        assert rows == whole


def test_rank_with_no_blocks_contributes_zeros():
    z1, z2 = _views(3, 2, seed=2)
    # 3 rows, 4 ranks: blocks are capped at one row per rank (rows_for_shard), so rank 3 scans nothing
    assert torch.equal(
        engine.contrastive_partial(z1, z2, shard=(3, 4)), torch.zeros(4, 3, dtype=torch.float64)
    )
    assert torch.equal(engine.uniformity_partial(z1, t=2.0, shard=(3, 4)), torch.zeros(3))


@pytest.mark.parametrize("world", [2, 3])
def test_one_block_budget_still_splits_rows_across_ranks(world):
    # A budget that fits the whole scan in one block must not leave every row to rank 0.
    z1, z2 = _views(30, 4, seed=3)
    parts = [engine.contrastive_partial(z1, z2, block_bytes=10**9, shard=(r, world)) for r in range(world)]
    owned = [int((p != 0).any(0).sum()) for p in parts]
    assert all(count > 0 for count in owned), owned
    assert torch.equal(sum(parts), engine.contrastive_partial(z1, z2, block_bytes=10**9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniformity_with_and_without_the_shift_agree_with_the_closed_form(dtype, monkeypatch):
    """Potentials in ``exp``'s safe range are exponentiated as they are (one pass fewer); a large ``t``
    (or forced) takes the shifted log-sum-exp: both agree with the closed form."""
    from oracles.embedding import uniformity as uniformity_ref

    z = torch.randn(300, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(dtype)
    assert not engine._needs_shift(torch.full((3,), 8.0, dtype=dtype), None)
    assert engine._needs_shift(
        torch.full((3,), 100.0 if dtype == torch.float32 else 1000.0, dtype=dtype), None
    )
    for t in (2.0, 60.0):
        plain = uniformity_score(z, t=t).item()
        monkeypatch.setattr(engine, "_needs_shift", lambda *_: True)
        shifted = uniformity_score(z, t=t).item()
        monkeypatch.undo()
        expected = uniformity_ref(z.double().numpy(), t=t)
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        assert abs(plain - expected) < tol * max(1.0, abs(expected)), (t, plain, expected)
        assert abs(shifted - expected) < tol * max(1.0, abs(expected)), (t, shifted, expected)


def test_uniformity_tiles_fit_the_cache_on_a_cpu():
    assert engine.uniformity_tile_columns(4, torch.device("cpu")) == 4096
    assert engine.uniformity_tile_columns(8, torch.device("cpu")) == 2048
    assert engine.uniformity_tile_columns(4, torch.device("meta")) == engine.UNIFORMITY_TILE_COLUMNS
