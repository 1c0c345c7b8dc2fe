"""The resampling kernels' working set (issue 49, item 1): the values are read once for a group of at
least a fixed number of resamples, every float64 tile fits one fixed number of bytes and is as tall
as the group allows, whatever the number of queries (a tile as short as a chunk of random numbers,
8 resamples at 1,000,000 queries, made the products 2 times slower), the values are multiplied with
padded columns, and the sums do not depend on the tiles, the groups or the threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from embedmetrics._engine.comparison import counts, resampling

QUERIES = (10_000, 100_000, 200_000, 1_000_000, 10_000_000)
KERNELS = {"signs": ("_SIGN_CHUNK", "_SIGN_ROWS"), "counts": ("_COUNT_CHUNK", "_COUNT_ROWS")}


def _least(kernel: str, queries: int) -> int:
    """The resamples of a group (at least) at ``queries`` queries: half from ``_GROUP_BYTES`` on."""
    row_bytes = (queries + 7) // 8 if kernel == "signs" else queries
    return resampling.group_rows(getattr(resampling, KERNELS[kernel][1]), row_bytes)


def _groups(kernel: str, queries: int, resamples: int = 10_000) -> tuple[list[int], list[range]]:
    sizes = resampling.chunks(resamples, queries, getattr(resampling, KERNELS[kernel][0]))
    return sizes, resampling.groups(sizes, _least(kernel, queries))


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_the_values_are_read_once_for_a_group_of_resamples_whatever_the_queries(kernel: str) -> None:
    for queries in QUERIES:
        least, full = _least(kernel, queries), getattr(resampling, KERNELS[kernel][1])
        small = full * (queries if kernel == "counts" else queries / 8) <= resampling._GROUP_BYTES
        assert least == (full if small else full // 2), queries  # 1,000,000 queries: half
        sizes, parts = _groups(kernel, queries)
        assert [k for part in parts for k in part] == list(range(len(sizes)))  # every chunk, in order
        held = [sum(sizes[k] for k in part) for part in parts]
        assert min(held[:-1], default=least) >= least, queries
        # reads of the values (one per group): bounded by the resamples alone, never by the queries
        assert len(parts) <= 10_000 / least + 1, queries


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("columns", [2, 11, 46])
def test_every_tile_fits_the_same_bytes_and_is_as_tall_as_its_group(kernel: str, columns: int) -> None:
    padded = resampling.padded_columns(columns)
    for queries in QUERIES:
        least = _least(kernel, queries)
        sizes, parts = _groups(kernel, queries)
        tall, wide = resampling.tile_shape(max(sum(sizes[k] for k in part) for part in parts), padded)
        on_a_gpu = resampling.tile_shape(tall, padded, resampling._DEVICE_TILE_BYTES)
        assert on_a_gpu[0] == tall
        assert on_a_gpu[1] >= min(32 * wide, 8 * (queries // 8))  # fewer, larger tiles: fewer launches
        assert wide % 8 == 0
        assert min(least, resampling._TILE_ROWS) <= tall <= resampling._TILE_ROWS, queries
        assert 8 * (tall * wide + wide * padded) <= resampling._TILE_BYTES, (queries, tall, wide)


@pytest.mark.parametrize("columns", [1, 2, 11, 12, 13, 46])
def test_the_values_are_padded_to_a_multiple_of_the_column_step(columns: int) -> None:
    padded = resampling.padded_columns(columns)
    assert padded % resampling._COLUMN_STEP == 0
    assert columns <= padded < columns + resampling._COLUMN_STEP


@pytest.mark.parametrize("function", ["sign_flip_sums", "bootstrap_sums"])
@pytest.mark.parametrize("queries", [203, counts._POISSON_FROM + 3])
def test_small_tiles_groups_and_other_thread_counts_give_the_same_sums(
    monkeypatch: pytest.MonkeyPatch, function: str, queries: int
) -> None:
    """Many chunks, groups and tiles (tiny sizes, a last tile and a last group shorter than the
    others, tiles across chunks) and 1 or 3 threads give the sums of large tiles and groups, and of
    the small inputs' one product (``_direct_sums``)."""
    values = torch.randn(queries, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    kernel = getattr(resampling, function)
    monkeypatch.setattr(resampling, "_SIGN_CHUNK", 8 * ((queries + 7) // 8) * 7)  # 7 resamples a chunk
    monkeypatch.setattr(resampling, "_COUNT_CHUNK", queries * 7)
    direct = kernel(values, 61, seed=11)
    monkeypatch.setattr(resampling, "_DIRECT_BYTES", 0)  # the threads, groups and tiles from here on
    whole = kernel(values, 61, seed=11)
    monkeypatch.setattr(resampling, "_TILE_BYTES", 8 * 3 * (7 + 12) * 8)  # tiles of 24 queries
    monkeypatch.setattr(resampling, "_TILE_ROWS", 3)
    monkeypatch.setattr(resampling, "_SIGN_ROWS", 20)
    monkeypatch.setattr(resampling, "_COUNT_ROWS", 20)
    for workers in (1, 3):
        monkeypatch.setattr(resampling, "_WORKERS", workers)
        tiled = kernel(values, 61, seed=11)
        np.testing.assert_allclose(tiled.numpy(), whole.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(direct.numpy(), whole.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("function", ["sign_flip_sums", "bootstrap_sums"])
def test_small_inputs_are_multiplied_whole_in_the_caller_s_thread(
    monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    """200 queries x 10,000 resamples (16 MiB of float64 weights): one product in the caller's thread,
    no worker started; the sums of the tiled kernels'."""
    values = torch.randn(200, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    kernel = getattr(resampling, function)
    started: list[int] = []
    monkeypatch.setattr(resampling, "_one_thread_each", lambda *args: started.append(1))
    direct = kernel(values, 10_000, seed=4)
    assert not started
    monkeypatch.undo()
    monkeypatch.setattr(resampling, "_DIRECT_BYTES", 0)
    np.testing.assert_allclose(kernel(values, 10_000, seed=4).numpy(), direct.numpy(), rtol=1e-12, atol=1e-12)


def test_bootstrap_counts_that_might_wrap_around_are_redone_wider(monkeypatch: pytest.MonkeyPatch) -> None:
    """``int8`` counts wrap around for a query drawn 128 times in one resample (never seen); a resample
    where one did (``counts.CountOverflow``) has the work redone with ``int16``, then ``int32`` counts,
    from the same random numbers: the same sums."""
    values = torch.randn(300, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = resampling.bootstrap_sums(values, 5, seed=0)
    calls: list[torch.dtype] = []
    original = resampling._bootstrap_sums

    def narrow(values: torch.Tensor, n_resamples: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
        calls.append(dtype)
        if dtype != torch.int32:
            raise counts.CountOverflow
        return original(values, n_resamples, seed, dtype)

    monkeypatch.setattr(resampling, "_bootstrap_sums", narrow)
    got = resampling.bootstrap_sums(values, 5, seed=0)
    assert calls == [torch.int8, torch.int16, torch.int32]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_bits_unpacked_on_a_device_as_numpy_unpacks_them() -> None:
    packed = np.random.default_rng(4).integers(0, 256, (5, 7), dtype=np.uint8)
    for count in (56, 53, 49):
        want = np.unpackbits(packed, axis=1, count=count, bitorder="little")
        got = resampling.unpack_bits_on_device(torch.from_numpy(packed), count)
        assert np.array_equal(got.numpy(), want)


def _new_thread_setting() -> int:
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


def test_the_caller_s_thread_settings_are_left_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers multiply with one thread each; the caller's thread count, and the one a new thread
    starts from, are as they were, during the call (a thread started by a worker's first chunk) and
    after it, after a chunk redone wider (an exception in a worker) too."""
    monkeypatch.setattr(resampling, "_DIRECT_BYTES", 0)  # the workers, whatever the size
    values = torch.randn(5000, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    before, process = torch.get_num_threads(), _new_thread_setting()
    resampling.sign_flip_sums(values, 300, seed=0)
    original = counts.resample_counts
    during: list[int] = []
    lock = threading.Lock()

    def once(rng: np.random.Generator, out: torch.Tensor) -> None:
        with lock:  # the two workers' first chunks: one of them raises
            first = not during
            if first:
                during.append(_new_thread_setting())
        if first:
            raise counts.CountOverflow
        original(rng, out)

    monkeypatch.setattr(resampling, "resample_counts", once)
    resampling.bootstrap_sums(values, 300, seed=0)
    assert during == [process]
    assert torch.get_num_threads() == before
    assert _new_thread_setting() == process


def test_a_process_setting_other_than_the_caller_s_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread set the process's thread count (the value new threads start from) below the
    caller's: after a call, new threads still start from it and the caller keeps its own."""
    monkeypatch.setattr(resampling, "_DIRECT_BYTES", 0)  # the workers, whatever the size
    values = torch.randn(5000, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    before, process = torch.get_num_threads(), _new_thread_setting()
    setter = threading.Thread(target=torch.set_num_threads, args=(1,))
    setter.start()
    setter.join()
    try:
        resampling.bootstrap_sums(values, 300, seed=0)
        assert _new_thread_setting() == 1
        assert torch.get_num_threads() == before
    finally:
        restore = threading.Thread(target=torch.set_num_threads, args=(process,))
        restore.start()
        restore.join()


def test_an_error_in_one_worker_stops_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk that fails in one worker stops the other at its next group: far fewer than its share
    of the chunks are built before the error is raised."""
    values = torch.randn(5000, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    sizes = resampling.chunks(5000, 5000, resampling._COUNT_CHUNK)
    assert len(resampling.groups(sizes, resampling._COUNT_ROWS)) == len(sizes) == 24  # a group a chunk
    built: list[int] = []
    failed = threading.Event()

    def failing(rng: np.random.Generator, out: torch.Tensor) -> None:
        built.append(len(built))
        if len(built) == 2:
            failed.set()
            raise RuntimeError("a chunk failed")
        failed.wait(timeout=10)

    monkeypatch.setattr(resampling, "resample_counts", failing)
    with pytest.raises(RuntimeError, match="a chunk failed"):
        resampling.bootstrap_sums(values, 5000, seed=0)
    assert len(built) < 12  # the other worker's share is 12


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 70),
    st.integers(1, 4),
    st.sampled_from(["grid", "uniform", "signed zeros"]),
    st.integers(0, 2**32 - 1),
)
def test_the_canonical_order_is_numpy_s_lexicographic_order(
    systems: int, queries: int, levels: int, kind: str, seed: int
) -> None:
    """The canonical order (one sort by the first system, then sorts of the tied queries only) is
    ``np.lexsort``'s: by system 0, ties by system 1, ..., then by position; heavy ties (a grid of a
    few values), none (uniform values) and ``-0.0`` equal to ``0.0``."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, (systems, queries)).astype(np.float64)
    if kind == "uniform":
        values = rng.random((systems, queries))
    if kind == "signed zeros":
        values[:, rng.random(queries) < 0.5] *= -1.0  # -0.0 where the value was 0
    want = np.lexsort(values[::-1])  # lexsort: the last key is the primary one
    got = resampling.canonical_order(torch.from_numpy(values))
    assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32])
@pytest.mark.parametrize("queries", [1, 127, 128, 1023, 1024, 5001])
def test_row_totals_are_numpy_s_sums(dtype: torch.dtype, queries: int) -> None:
    """Row sums in ``int16`` blocks (the block as long as the largest count allows) equal NumPy's
    ``int64`` sums: ``int8`` counts anywhere in their range (wrapped ones negative), Poisson counts up
    to ``_LARGEST``, wider counts."""
    generator = torch.Generator().manual_seed(queries)
    info = torch.iinfo(dtype)
    cases = [(info.min, info.max, max(-info.min, info.max))]
    if dtype == torch.int8:
        cases.append((0, counts._LARGEST, counts._LARGEST))
    for low, high, largest in cases:
        out = torch.randint(low, high + 1, (3, queries), generator=generator, dtype=dtype)
        out[0] = high  # the largest sums
        for rows in (out, out[:0]):  # and no rows
            want = rows.numpy().astype(np.int64).sum(axis=1)
            assert np.array_equal(counts.row_totals(rows, largest), want), (low, high, len(rows))
