"""``compare`` at a million queries (issue 58, item 6): no ``(pairs, queries)`` differences are held (the
peak stays within twice the values' own size), the results are the same bits whatever the blocks of
pairs and the thread count, ``paired_test`` is the two-system ``compare``, and what cannot be meant or
cannot fit is refused in one line before anything is allocated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from embedmetrics._engine.comparison import paired, systems
from embedmetrics.functional import compare, paired_test

TESTS = ("t", "wilcoxon", "randomization", "bootstrap")

_PEAK = """
import json, sys
import torch
from embedmetrics.functional import compare

def status(field):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field + ":"))

queries, count = int(sys.argv[1]), int(sys.argv[2])
gen = torch.Generator().manual_seed(0)
base = torch.rand(queries, generator=gen, dtype=torch.float64)
values = {f"s{i}": base + 1e-3 * i + 0.1 * torch.randn(queries, generator=gen, dtype=torch.float64)
          for i in range(count)}
out = {"values": 8 * queries * count}
for test in sys.argv[3:]:
    compare({k: v[:5000] for k, v in values.items()}, test=test, n_resamples=50)  # tables, threads
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak (VmHWM) from the current RSS on
    before = status("VmRSS")
    compare(values, test=test, n_resamples=200)
    out[test] = status("VmHWM") - before
print(json.dumps(out))
"""


def _systems(queries: int, count: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    base = torch.rand(queries, generator=gen, dtype=torch.float64)
    out = {f"s{i}": base + 1e-3 * i + 0.1 * torch.randn(queries, generator=gen, dtype=torch.float64)
           for i in range(count)}  # fmt: skip
    out["tied"] = (out["s0"] * 4).round() / 4
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc peak reset")
def test_a_million_queries_peak_within_twice_the_values() -> None:
    """10 systems on 1,000,000 queries (45 pairs): the peak grows by at most twice the values' own size
    (80 MB; the differences alone were 360 MB, the peak 1.2 GB), for the t-test and both resampling
    tests. glibc is told to hand freed blocks back (``MALLOC_MMAP_THRESHOLD_``, one arena), so the peak
    is what is held, not what the allocator kept."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_ARENA_MAX="1", MALLOC_TRIM_THRESHOLD_="0")
    command = [sys.executable, "-c", _PEAK, "1000000", "10", "t", "randomization", "bootstrap"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    for test in ("t", "randomization", "bootstrap"):
        assert measured[test] <= 2 * measured["values"], (test, measured)


@pytest.mark.parametrize("test", TESTS)
def test_the_same_bits_in_blocks_of_two_pairs_and_of_one_resampled_pair(
    monkeypatch: pytest.MonkeyPatch, test: str
) -> None:
    values = _systems(3000, 6)
    whole = compare(values, test=test, n_resamples=499)
    monkeypatch.setattr(systems, "_DIFFERENCE_BYTES", 1)  # blocks of two rows
    monkeypatch.setattr(paired, "_NULL_BYTES", 1)  # the resampled statistics of one pair at a time
    blocked = compare(values, test=test, n_resamples=499)
    for name in ("statistic", "p_value", "p_value_corrected", "mean_difference", "effect_size", "means"):
        assert torch.equal(getattr(blocked, name), getattr(whole, name)), name


@pytest.mark.parametrize("test", TESTS)
def test_one_pair_is_the_same_bits_on_one_thread_and_two_and_as_compare_of_two(test: str) -> None:
    """40,000 queries: torch splits the sum of a lone row across threads from 32,768 values on; the
    pair's mean and deviation are reduced beside a copy, so the thread count changes no bit, and
    ``paired_test`` of two systems is ``compare`` of the same two."""
    values = _systems(40_000, 2, seed=5)
    a, b = values["s0"], values["s1"]
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2):
            torch.set_num_threads(count)
            results.append(paired_test(a, b, test=test, n_resamples=199))
    finally:
        torch.set_num_threads(threads)
    for one, two in zip(*results):
        assert torch.equal(one, two)
    pair = compare({"a": a, "b": b}, test=test, n_resamples=199, correction=None)
    assert torch.equal(pair.statistic[0], results[0].statistic)
    assert torch.equal(pair.p_value[0], results[0].p_value)
    assert torch.equal(pair.effect_size[0], results[0].effect_size)


def test_a_queries_by_systems_table_is_refused_before_anything_is_read() -> None:
    """The natural (queries, systems) table read as a million systems: refused at once, naming the shape
    and the transpose (an expanded tensor of 10^9 entries: any copy would not fit)."""
    table = torch.zeros(1, 1, dtype=torch.float64).expand(100_000_000, 10)
    with pytest.raises(
        ValueError, match=r"no more systems than queries, got shape \(100000000, 10\).*values\.T"
    ):
        compare(table)


def test_more_systems_than_queries_in_a_mapping_are_refused() -> None:
    runs = {f"s{i}": torch.rand(3, generator=torch.Generator().manual_seed(i)) for i in range(5)}
    with pytest.raises(ValueError, match=r"no more systems than queries, got shape \(5, 3\): 5 systems of 3"):
        compare(runs)


def test_pairs_beyond_the_memory_at_hand_are_refused_before_allocating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(systems, "memory_at_hand", lambda device: 1 << 20)
    values = torch.zeros(1, 1, dtype=torch.float64).expand(2000, 3000)
    with pytest.raises(
        systems.ComparisonTooLargeError, match=r"2000 systems on 3000 queries.*1999000 pairs.*cpu"
    ):
        compare(values, test="randomization")
    assert issubclass(systems.ComparisonTooLargeError, MemoryError)
    assert issubclass(systems.ComparisonTooLargeError, ValueError)


def test_the_memory_at_hand_is_the_host_s_available_memory() -> None:
    with open("/proc/meminfo") as meminfo:
        total = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemTotal:"))
    assert 0 < systems.memory_at_hand(torch.device("cpu")) <= total


def test_many_short_rows_give_the_bits_of_blocks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """400 systems of 500 queries (79,800 pairs): the moments in blocks of many pairs (gathered at once)
    equal those of blocks of two."""
    values = torch.rand(40, 500, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    whole = compare(values, test="t")
    monkeypatch.setattr(systems, "_DIFFERENCE_BYTES", 1)
    monkeypatch.setattr(systems, "_SMALL_BLOCK", 1)
    blocked = compare(values, test="t")
    for name in ("statistic", "p_value", "mean_difference", "effect_size", "means"):
        assert torch.equal(getattr(blocked, name), getattr(whole, name)), name


def test_one_query_of_many_systems_is_refused_at_once() -> None:
    """A (1000000, 1) table: the shape and ``values.T`` at once (no copy of a million rows)."""
    with pytest.raises(ValueError, match=r"got shape \(1000000, 1\).*values\.T"):
        compare(torch.zeros(1, 1, dtype=torch.float64).expand(1_000_000, 1))


def test_unequal_lengths_are_named_before_the_shape() -> None:
    gen = torch.Generator().manual_seed(10)
    runs = {"a": torch.rand(2, generator=gen), **{str(i): torch.rand(100, generator=gen) for i in range(5)}}
    with pytest.raises(ValueError, match="must have the same length"):
        compare(runs)
