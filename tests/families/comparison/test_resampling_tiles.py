"""The resampling kernels' working set (issue 49, item 1): the values are read once for a group of at
least a fixed number of resamples and every float64 tile fits one fixed number of bytes, whatever the
number of queries. The chunks of random numbers alone (about ``_CHUNK`` entries, so fewer resamples
as the queries grow) set the old products: one read of all the values for every chunk, a cost that
grew with the square of the queries (the cliff between 100,000 and 200,000 queries on an AVX2 CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedmetrics._engine.comparison import resampling

QUERIES = (10_000, 100_000, 200_000, 1_000_000, 10_000_000)


@pytest.mark.parametrize("kernel", ["signs", "counts"])
def test_the_values_are_read_once_for_a_group_of_resamples_whatever_the_queries(kernel: str) -> None:
    least = resampling._SIGN_ROWS if kernel == "signs" else resampling._COUNT_ROWS
    for queries in QUERIES:
        sizes = resampling.chunks(10_000, queries)
        parts = resampling.groups(sizes, least)
        assert [k for part in parts for k in part] == list(range(len(sizes)))  # every chunk, in order
        held = [sum(sizes[k] for k in part) for part in parts]
        assert min(held[:-1], default=least) >= least, queries
        # reads of the values (one per group): bounded by the resamples alone, never by the queries
        assert len(parts) <= 10_000 / least + 1, queries


@pytest.mark.parametrize("columns", [2, 11, 46])
def test_every_tile_fits_the_same_bytes_whatever_the_queries(columns: int) -> None:
    shapes = set()
    for queries in QUERIES:
        for width in (queries, 8 * ((queries + 7) // 8)):  # counts, bits
            tall, wide = resampling.tile_shape(max(resampling.chunks(10_000, width)), columns)
            assert wide % 8 == 0
            assert tall <= resampling._TILE_ROWS
            assert 8 * (tall * wide + wide * columns) <= resampling._TILE_BYTES, (queries, tall, wide)
            shapes.add((tall, wide))
    # at and above 35,000 queries a chunk holds fewer than _TILE_ROWS resamples: the tile is as tall
    # as the chunk, and as wide as the bytes allow
    assert len(shapes) <= 2 * len(QUERIES)


def test_row_tiles_never_straddle_two_chunks() -> None:
    tiles = resampling.row_tiles([500, 83, 240], 240)
    assert tiles == [(0, 0, 240), (0, 240, 480), (0, 480, 500), (1, 0, 83), (2, 0, 240)]


@pytest.mark.parametrize("function", ["sign_flip_sums", "bootstrap_sums"])
def test_small_tiles_and_groups_give_the_sums_of_large_ones(
    monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    """Many chunks, groups and tiles (tiny sizes, a last tile and a last group shorter than the
    others) give the sums of one tile and one group per chunk."""
    values = torch.randn(203, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    kernel = getattr(resampling, function)
    monkeypatch.setattr(resampling, "_CHUNK", 208 * 7)  # 7 resamples a chunk
    whole = kernel(values, 61, seed=11)
    monkeypatch.setattr(resampling, "_TILE_BYTES", 8 * 3 * (7 + 5) * 8)  # tiles of 24 queries
    monkeypatch.setattr(resampling, "_TILE_ROWS", 3)
    monkeypatch.setattr(resampling, "_SIGN_ROWS", 20)
    monkeypatch.setattr(resampling, "_COUNT_ROWS", 20)
    tiled = kernel(values, 61, seed=11)
    np.testing.assert_allclose(tiled.numpy(), whole.numpy(), rtol=1e-12, atol=1e-12)


def test_bootstrap_counts_that_wrap_around_are_redone_wider(monkeypatch: pytest.MonkeyPatch) -> None:
    """``int16`` counts could wrap around only for a query drawn 32,768 times in one resample; the check
    that catches it (a resample's counts no longer sum to the queries) raises ``_CountOverflow`` and
    the work is redone with ``int32`` counts, to the same sums."""
    values = torch.randn(300, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = resampling.bootstrap_sums(values, 5, seed=0)
    calls: list[torch.dtype] = []
    original = resampling._bootstrap_sums

    def narrow(values: torch.Tensor, n_resamples: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
        calls.append(dtype)
        if dtype == torch.int16:
            raise resampling._CountOverflow
        return original(values, n_resamples, seed, dtype)

    monkeypatch.setattr(resampling, "_bootstrap_sums", narrow)
    got = resampling.bootstrap_sums(values, 5, seed=0)
    assert calls == [torch.int16, torch.int32]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_bits_unpacked_on_a_device_as_numpy_unpacks_them() -> None:
    packed = np.random.default_rng(4).integers(0, 256, (5, 7), dtype=np.uint8)
    for count in (56, 53, 49):
        want = np.unpackbits(packed, axis=1, count=count, bitorder="little")
        got = resampling.unpack_bits_on_device(torch.from_numpy(packed), count)
        assert np.array_equal(got.numpy(), want)
