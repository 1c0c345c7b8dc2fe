"""Dense retrieval's blocks are the same on every CPU: the budget of a block is one constant on the CPU
(``DENSE_BLOCK_BYTES``; no probe of the instruction set, the caches, the cores or the threads), so the
blocks of given sizes, and with them the peak memory, do not change with the machine (issue 49, item 3:
``docs/benchmarks.md``'s dense rows, measured on AVX2 and AVX-512). A block's keys and corpus rows stay
within the budget, the candidate filter's temporaries within a fraction of it (it runs in parts of rows,
which give the same lists)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from embedmetrics._engine.core.scan import block_budget
from embedmetrics._engine.dense import scan as dense_scan
from embedmetrics._engine.dense.exact_lists import FAST_EXTRA
from embedmetrics._engine.dense.scan import DENSE_BLOCK_BYTES, CorpusScan, block_columns, query_side
from embedmetrics.functional import dense_retrieval

#: (queries, corpus, dimensions, depth): the benchmark's two workloads and a small one.
SIZES = [(2000, 200_000, 128, 100), (1000, 100_000, 768, 100), (300, 20_000, 32, 10)]
CPU = torch.device("cpu")


def _plan(n_q: int, n_c: int, dim: int, depth: int) -> tuple[int, int]:
    """The default budget on the CPU and the columns of a block of the fast scan (float32)."""
    budget = block_budget(None, CPU, DENSE_BLOCK_BYTES)
    return budget, block_columns(n_q, n_c, dim, 4, depth + FAST_EXTRA, budget)


def test_the_blocks_do_not_depend_on_any_cpu_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    want = [_plan(*size) for size in SIZES]
    real_sysconf = os.sysconf
    for capability in ("DEFAULT", "AVX2", "AVX512", "AVX512_BF16"):
        for cores in (1, 2, 96):
            monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
            monkeypatch.setattr(torch, "get_num_threads", lambda n=cores: n)
            monkeypatch.setattr(os, "cpu_count", lambda n=cores: n)
            monkeypatch.setattr(
                os, "sysconf", lambda name, n=cores: n * 2**20 if "CACHE" in str(name) else real_sysconf(name)
            )
            assert [_plan(*size) for size in SIZES] == want, (capability, cores)
    budget, columns = want[0]
    assert budget == DENSE_BLOCK_BYTES == 64 * 2**20
    # the workload: a block's keys (all queries) and its corpus rows within the budget, 26 blocks
    assert (2000 + 128) * 4 * columns <= budget
    assert -(-200_000 // columns) == 26


def test_the_scan_buffers_stay_within_the_budget() -> None:
    g = torch.Generator().manual_seed(0)
    queries, corpus = torch.randn(300, 32, generator=g), torch.randn(20_000, 32, generator=g)
    for budget in (2**20, 4 * 2**20):
        q = query_side(queries, "cosine", torch.float32)
        scan = CorpusScan.build(q, corpus, torch.arange(20_000), "cosine", (18, 10), budget)
        held = [scan.buffers.keys, scan.buffers.corpus]
        assert sum(t.numel() * t.element_size() for t in held) <= budget * 1.02, budget
        assert len(scan.blocks) == -(-20_000 // block_columns(300, 20_000, 32, 4, 18, budget))


_PROBE = """
import json, torch
from embedmetrics._engine.dense.scan import CorpusScan, query_side
g = torch.Generator().manual_seed(0)
queries, corpus = torch.randn(300, 32, generator=g), torch.randn(20_000, 32, generator=g)
q = query_side(queries, "cosine", torch.float32)
scan = CorpusScan.build(q, corpus, torch.arange(20_000), "cosine", (18, 10), None)
print(json.dumps([torch.backends.cpu.get_cpu_capability(), scan.blocks, scan.buffers.keys.numel()]))
"""


def _probe(capability: str) -> list[Any]:
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    result: list[Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_blocks_are_the_same_under_every_aten_kernel() -> None:
    """The blocks and the key buffer a scan plans with the default budget, in fresh processes on ATen's
    scalar and AVX2 kernels (and AVX-512 where the CPU has it: else torch falls back to its best)."""
    default, *others = [_probe(capability) for capability in ("default", "avx2", "avx512")]
    assert default[0] == "DEFAULT"
    for other in others:
        assert other[1:] == default[1:], (other[0], default[0])


def test_the_filter_in_parts_of_rows_gives_the_same_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ties on purpose (repeated rows, rounded values), bounds from earlier blocks (small blocks)."""
    g = torch.Generator().manual_seed(3)
    corpus = torch.randn(600, 8, generator=g).round(decimals=1)[torch.randint(0, 600, (3000,), generator=g)]
    queries = torch.randn(37, 8, generator=g).round(decimals=1)
    qrels = torch.stack(
        [torch.arange(37), torch.randint(0, 3000, (37,), generator=g), torch.ones(37).long()], 1
    )
    got = []
    for parts in (1, 4):
        monkeypatch.setattr(dense_scan, "FILTER_PARTS", parts)
        # blocks of 1,456 columns (the group filter) and of 227 (rows too short for it: bounded gathers)
        for similarity, depth, block_bytes in (("cosine", 10, 2**18), ("euclidean", 40, 40 * 2**10)):
            out = dense_retrieval(
                queries, corpus, qrels, k=(1, 10), depth=depth, similarity=similarity, return_run=True,
                block_bytes=block_bytes,
            )  # fmt: skip
            got.append(out)
    for one, four in zip(got[:2], got[2:]):
        _assert_same(one, four)


def _assert_same(left: Any, right: Any) -> None:
    """Bit for bit, leaf by leaf (dicts, tuples, lists of tensors and numbers)."""
    if isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            _assert_same(left[key], right[key])
    elif isinstance(left, (tuple, list)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            _assert_same(a, b)
    elif isinstance(left, torch.Tensor):
        torch.testing.assert_close(left, right, rtol=0, atol=0, equal_nan=True)
    else:
        assert left == right


_PEAK = """
import torch
from embedmetrics.functional import dense_retrieval
def resident(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
g = torch.Generator().manual_seed(0)
corpus = torch.randn(60_000, 32, generator=g)
rel = torch.randint(0, 60_000, (2000,), generator=g)
queries = corpus[rel] + 0.5 * torch.randn(2000, 32, generator=g)
qrels = torch.stack([torch.arange(2000), rel, torch.ones(2000, dtype=torch.int64)], dim=1)
dense_retrieval(queries[:4], corpus[:1000], qrels[:0], k=(10,), depth=100)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = resident("VmRSS")
dense_retrieval(queries, corpus, qrels, k=(10,), depth=100)
print(resident("VmHWM") - base)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads Linux's peak resident memory")
def test_the_working_set_stays_within_the_stated_bound() -> None:
    """2,000 queries x 60,000 x 32, depth 100, default budget, in a fresh process: the peak resident memory
    above the inputs is the key block (``DENSE_BLOCK_BYTES``) and at most 0.8 of it more (the filter's
    temporaries, the lists, the corpus block: 1.65 blocks measured on an AVX2 EPYC; with the filter on all
    rows at once, 1.92)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    out = subprocess.run([sys.executable, "-c", _PEAK], env=env, capture_output=True, text=True, check=True)
    peak = int(out.stdout.strip().splitlines()[-1])
    assert peak <= 1.8 * DENSE_BLOCK_BYTES, peak / DENSE_BLOCK_BYTES
