"""KNNAccuracy with a streamed bank: running vote lists equal the stored route bit for bit.

The bank arrives in chunks (one row, uneven, larger than the bank, in any order) and is folded into
per-query running lists of raw labels; the value must be ``knn_vote_hits`` of the whole bank, bit for
bit, for every tie policy and dtype, on tie-heavy data (integer-valued embeddings, duplicate rows within
and across chunks). Then the module (``set_queries``), its merges, checkpoints, errors and processes,
the functional's iterable bank, and the memory of a long stream.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics._engine.core.checks import IncompatibleStateError
from embedmetrics._engine.neighbors import vote_stream
from embedmetrics._engine.neighbors.vote import knn_vote_hits
from embedmetrics._metric.running_lists import QUERY_IDS
from embedmetrics.functional import knn_accuracy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _dist import run_distributed

TOPS = (1, 2, 3)
TIES = ("average", "pessimistic", "optimistic")
#: Labels far apart (and negative): a running list keeps raw labels, never class indices.
LABELS = torch.tensor([-7, 3, 40, 2**40, 11])


def _data(kind: str, seed: int, n_bank: int, n_query: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``"integer"``: small integer-valued rows (keys tie everywhere); ``"atoms"``: rows drawn from 4
    vectors (duplicate rows, tie blocks running past ``k + 1``); ``"plain"``: Gaussian rows with a few
    duplicated. Labels from ``LABELS``, queries partly copies of bank rows."""
    g = torch.Generator().manual_seed(seed)
    if kind == "integer":
        bank = torch.randint(-2, 3, (n_bank, 3), generator=g).to(torch.float64)
    elif kind == "atoms":
        atoms = torch.randn(4, 3, generator=g, dtype=torch.float64)
        bank = atoms[torch.randint(0, 4, (n_bank,), generator=g)]
    else:
        bank = torch.randn(n_bank, 3, generator=g, dtype=torch.float64)
        if n_bank > 3:
            bank[-3:] = bank[:3].clone()
    labels = LABELS[torch.randint(0, LABELS.numel(), (n_bank,), generator=g)]
    queries = torch.randint(-2, 3, (n_query, 3), generator=g).to(torch.float64)
    if n_bank > 0:
        queries[: n_query // 2] = bank[torch.randint(0, n_bank, (n_query // 2,), generator=g)]
    qlab = LABELS[torch.randint(0, LABELS.numel(), (n_query,), generator=g)]
    return bank.to(dtype), labels, queries.to(dtype), qlab


def _chunks(n: int, cuts: list[int], order_seed: int) -> list[tuple[int, int]]:
    """Disjoint ranges covering ``0..n`` (cut at ``cuts``; empty ranges kept), in a shuffled order."""
    points = sorted([0, n, *[c % (n + 1) for c in cuts]])
    ranges = list(zip(points[:-1], points[1:]))
    perm = torch.randperm(len(ranges), generator=torch.Generator().manual_seed(order_seed)).tolist()
    return [ranges[i] for i in perm]


def _streamed(bank, labels, queries, ranges, k: int, block_bytes: int | None = 64) -> vote_stream.VoteStream:
    state = vote_stream.VoteStream.empty(queries.shape[0], k, queries.device)
    for a, b in ranges:
        state = vote_stream.fold_bank_chunk(state, queries, bank[a:b], labels[a:b], k, block_bytes)
    return state


def _assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()], want[~want.isnan()]), (got, want)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(["integer", "atoms", "plain"]),
    seed=st.integers(0, 10**6),
    n_bank=st.integers(0, 40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    order_seed=st.integers(0, 1000),
    k=st.integers(1, 25),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    num_classes=st.sampled_from([None, 5, 9]),
)
def test_streamed_chunks_equal_the_whole_bank_bit_for_bit(
    kind: str,
    seed: int,
    n_bank: int,
    cuts: list[int],
    order_seed: int,
    k: int,
    dtype: torch.dtype,
    num_classes: int | None,
) -> None:
    bank, labels, queries, qlab = _data(kind, seed, n_bank, 9, dtype)
    state = _streamed(bank, labels, queries, _chunks(n_bank, cuts, order_seed), k)
    for ties in TIES:
        opts: dict[str, Any] = {"temperature": 0.07, "tops": TOPS, "num_classes": num_classes, "ties": ties}
        want = knn_vote_hits(bank, labels, queries, qlab, k=k, **opts)
        _assert_same_bits(vote_stream.stream_hits(state, qlab, k=k, **opts), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_row_by_row_uneven_and_oversized_chunks(dtype: torch.dtype, chunk: int) -> None:
    """Duplicate rows across chunks: a tie block split over every chunk is counted whole."""
    bank, labels, queries, qlab = _data("atoms", 3, 60, 12, dtype)
    bank = torch.cat([bank, bank[:20]])  # every one of the first 20 rows twice, in distant chunks
    labels = torch.cat([labels, LABELS[torch.arange(20) % 5]])
    ranges = [(a, min(a + chunk, bank.shape[0])) for a in range(0, bank.shape[0], chunk)]
    for k in (1, 4, 30, 200):
        state = _streamed(bank, labels, queries, ranges[::-1], k, None)
        for ties in TIES:
            opts: dict[str, Any] = {"temperature": 0.1, "tops": TOPS, "ties": ties}
            want = knn_vote_hits(bank, labels, queries, qlab, k=k, **opts)
            _assert_same_bits(vote_stream.stream_hits(state, qlab, k=k, **opts), want)


def test_every_bank_row_identical_spills_in_every_chunk() -> None:
    """48 identical rows (30 of one label, 18 of another), k = 4: every chunk's block spills, the
    merged block has all 48 members, so the vote is 30 : 18 for every query."""
    bank = torch.ones(48, 3, dtype=torch.float64)
    labels = torch.tensor([5, 9] * 18 + [5] * 12)
    queries = torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    qlab = torch.tensor([5, 5, 5, 9, 9, 9])
    for ranges in ([(0, 48)], [(0, 10), (10, 48)], [(33, 48), (7, 20), (0, 7), (20, 33)]):
        state = _streamed(bank, labels, queries, ranges, 4)
        assert int(state.tail.min()) == 48
        hits = vote_stream.stream_hits(state, qlab, k=4, temperature=0.07, tops=TOPS)
        assert hits.tolist() == [3.0, 6.0, 6.0]


def test_non_finite_rows_give_nan_and_the_fold_is_pure() -> None:
    bank, labels, queries, qlab = _data("plain", 1, 20, 5, torch.float64)
    state = _streamed(bank, labels, queries, [(0, 20)], 3)
    before = {n: t.clone() for n, t in state.as_dict().items()}
    bad = bank[:2].clone()
    bad[1, 0] = math.nan
    after = vote_stream.fold_bank_chunk(state, queries, bad, labels[:2], 3)
    for name, t in state.as_dict().items():
        assert torch.equal(t, before[name]), name
    assert vote_stream.stream_hits(after, qlab, k=3, temperature=0.07, tops=TOPS).isnan().all()
    with pytest.raises(ValueError, match="`k`"):
        vote_stream.fold_bank_chunk(state, queries, bank, labels, 4)


def test_merge_of_disjoint_streams_equals_one_stream() -> None:
    bank, labels, queries, qlab = _data("integer", 8, 50, 10, torch.float32)
    left = _streamed(bank, labels, queries, [(0, 5), (30, 50)], 6)
    right = _streamed(bank, labels, queries, [(5, 30)], 6)
    for parts in (
        [left, right],
        [right, left],
        [left, right, vote_stream.VoteStream.empty(10, 6, left.keys.device)],
    ):
        merged = vote_stream.merge_streams(parts)
        for ties in TIES:
            opts: dict[str, Any] = {"temperature": 0.07, "tops": TOPS, "ties": ties}
            want = knn_vote_hits(bank, labels, queries, qlab, k=6, **opts)
            _assert_same_bits(vote_stream.stream_hits(merged, qlab, k=6, **opts), want)


def test_num_classes_below_the_labels_raises_as_the_stored_route() -> None:
    bank, labels, queries, qlab = _data("plain", 2, 20, 5, torch.float64)
    state = _streamed(bank, labels, queries, [(0, 20)], 3)
    with pytest.raises(ValueError, match="`num_classes`"):
        vote_stream.stream_hits(state, qlab, k=3, temperature=0.07, tops=TOPS, num_classes=2)


# ---------------------------------------------------------------------------------------------- module


def _stream_states(metric: em.KNNAccuracy) -> dict[str, torch.Tensor]:
    return {name: getattr(metric, name).clone() for name in (*metric._running_states.values(), QUERY_IDS)}


def _assert_states_equal(metric: em.KNNAccuracy, before: dict[str, torch.Tensor]) -> None:
    for name, t in _stream_states(metric).items():
        assert t.dtype == before[name].dtype
        assert torch.equal(t, before[name]), name


def _streaming(queries: torch.Tensor, qlab: torch.Tensor, **kw: Any) -> em.KNNAccuracy:
    metric = em.KNNAccuracy(k=6, top=TOPS, block_bytes=256, **kw)
    metric.set_queries(queries, qlab)
    return metric


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", TIES)
def test_module_stream_equals_the_stored_module_for_any_chunking(dtype: torch.dtype, ties: str) -> None:
    bank, labels, queries, qlab = _data("integer", 4, 70, 13, dtype)
    stored = em.KNNAccuracy(k=6, top=TOPS, ties=ties)
    stored.update(bank, labels)
    stored.update(queries, qlab, role="query")
    want = stored.compute()
    for seed, cuts in enumerate(([], [1], [3, 3, 50], [10, 20, 30, 40, 69], list(range(70)))):
        metric = _streaming(queries, qlab, ties=ties)
        for a, b in _chunks(70, cuts, seed):
            if b > a:  # an empty batch is refused
                metric.update(bank[a:b], labels[a:b])
        _assert_same_bits(metric.compute(), want)
        assert metric.stored_rows("bank") is None


def test_merge_state_and_forward_of_disjoint_streams_equal_one_stream() -> None:
    bank, labels, queries, qlab = _data("atoms", 6, 60, 10, torch.float64)
    one = _streaming(queries, qlab)
    one.update(bank, labels)
    left, right = _streaming(queries, qlab), _streaming(queries, qlab)
    left.update(bank[:25], labels[:25])
    right.update(bank[25:40], labels[25:40])
    right.update(bank[40:], labels[40:])
    left.merge_state(right)
    _assert_same_bits(left.compute(), one.compute())
    fwd = _streaming(queries, qlab)
    for a in range(0, 60, 7):
        fwd(bank[a : a + 7], labels[a : a + 7])  # forward: a batch value, the lists merged
    _assert_same_bits(fwd.compute(), one.compute())
    other = _streaming(queries[:-1], qlab[:-1])
    other.update(bank[:3], labels[:3])
    with pytest.raises(IncompatibleStateError, match="another query set"):
        left.merge_state(other)


def test_state_dict_resumes_a_stream() -> None:
    bank, labels, queries, qlab = _data("integer", 9, 50, 8, torch.float32)
    whole = _streaming(queries, qlab)
    whole.update(bank, labels)
    first = _streaming(queries, qlab)
    first.persistent(True)
    first.update(bank[:20], labels[:20])
    saved = first.state_dict()
    for queries_first in (True, False):
        resumed = em.KNNAccuracy(k=6, top=TOPS, block_bytes=256)
        resumed.persistent(True)
        if queries_first:
            resumed.set_queries(queries, qlab)
        resumed.load_state_dict(saved)
        if not queries_first:
            resumed.set_queries(queries, qlab)  # the same queries: the loaded lists are kept
        resumed.update(bank[20:], labels[20:])
        _assert_same_bits(resumed.compute(), whole.compute())


def test_errors_leave_the_running_lists_unchanged() -> None:
    bank, labels, queries, qlab = _data("plain", 3, 30, 6, torch.float32)
    metric = _streaming(queries, qlab)
    metric.update(bank[:10], labels[:10])
    before = _stream_states(metric)
    with pytest.raises(ValueError, match="`role`"):
        metric.update(queries, qlab, role="query")
    with pytest.raises(ValueError, match="`role`"):
        metric(queries, qlab, role="query")
    with pytest.raises(ValueError, match="embeddings"):
        metric.update(bank[10:12, :2], labels[10:12])  # another width
    with pytest.raises(ValueError, match="embeddings"):
        metric.update(bank[10:12].double(), labels[10:12])  # another dtype
    nan = bank[10:12].clone()
    nan[0, 0] = math.nan
    with pytest.raises(ValueError, match="finite"):
        metric.update(nan, labels[10:12])
    with pytest.raises(ValueError, match="`labels`"):
        metric.update(bank[10:12], labels[10:13])
    _assert_states_equal(metric, before)
    stored = em.KNNAccuracy(k=6)
    stored.update(bank, labels)
    with pytest.raises(ValueError, match="set_queries"):
        stored.set_queries(queries, qlab)


def test_reset_empties_the_lists_and_keeps_the_queries() -> None:
    bank, labels, queries, qlab = _data("plain", 5, 30, 6, torch.float64)
    metric = _streaming(queries, qlab)
    metric.update(bank[:7], labels[:7])
    metric.reset()
    assert int(metric.stream_n_bank) == 0
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert metric.compute().isnan().all()
    metric.update(bank, labels)
    want = knn_accuracy(bank, labels, queries, qlab, k=6, top=TOPS)
    _assert_same_bits(metric.compute(), want)


# ------------------------------------------------------------------------------------------ functional


def test_functional_takes_an_iterable_of_chunks_read_once() -> None:
    bank, labels, queries, qlab = _data("atoms", 12, 45, 9, torch.float32)
    want = knn_accuracy(bank, labels, queries, qlab, k=7, top=TOPS)
    reads = []

    def chunks() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for a in (30, 0, 11, 40):  # any order, uneven
            b = {30: 40, 0: 11, 11: 30, 40: 45}[a]
            reads.append(a)
            yield bank[a:b], labels[a:b]

    _assert_same_bits(knn_accuracy(chunks(), None, queries, qlab, k=7, top=TOPS), want)
    assert reads == [30, 0, 11, 40]
    listed = [(bank[:20].numpy(), labels[:20].numpy()), (bank[20:].numpy(), labels[20:].numpy())]
    got = knn_accuracy(listed, None, queries.numpy(), qlab.numpy(), k=7, top=1)
    assert got == knn_accuracy(bank.numpy(), labels.numpy(), queries.numpy(), qlab.numpy(), k=7, top=1)
    with pytest.raises(ValueError, match="`bank_labels`"):
        knn_accuracy([(bank, labels)], labels, queries, qlab)
    with pytest.raises(ValueError, match="one dtype"):
        knn_accuracy([(bank[:5], labels[:5]), (bank[5:].double(), labels[5:])], None, queries, qlab)
    with pytest.raises(ValueError, match="at least one"):
        knn_accuracy(iter(()), None, queries, qlab)


# --------------------------------------------------------------------------------------------- processes


def _stream_worker(rank: int, world: int, seed: int) -> dict[str, Any]:
    """Every rank sets the same queries and streams its half of the bank in uneven chunks."""
    bank, labels, queries, qlab = _data("atoms", seed, 64, 11, torch.float64)
    bank[:6] = bank[-6:]  # identical rows on both ranks
    out: dict[str, Any] = {}
    for ties in TIES:
        metric = em.KNNAccuracy(k=7, top=TOPS, ties=ties, block_bytes=256)
        metric.set_queries(queries, qlab)
        half = bank.shape[0] // world
        lo, hi = rank * half, (rank + 1) * half
        for a in range(lo, hi, 5 + 4 * rank):
            b = min(hi, a + 5 + 4 * rank)
            metric.update(bank[a:b], labels[a:b])
        out[ties] = metric.compute()
    return out


def test_two_ranks_streaming_halves_give_the_one_process_value() -> None:
    seed = 21
    results = run_distributed(_stream_worker, 2, kwargs={"seed": seed}, timeout=180)
    bank, labels, queries, qlab = _data("atoms", seed, 64, 11, torch.float64)
    bank[:6] = bank[-6:]
    for ties in TIES:
        want = knn_accuracy(bank, labels, queries, qlab, k=7, top=TOPS, ties=ties)
        for result in results:
            _assert_same_bits(result[ties], want)


# ------------------------------------------------------------------------------------------------ memory

_MEMORY_SCRIPT = """
import resource, torch
import embedmetrics as em
torch.set_num_threads(1)
def chunk(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(10_000, 128, generator=g), torch.randint(0, 100, (10_000,), generator=g)
g = torch.Generator().manual_seed(-1)
metric = em.KNNAccuracy(k=20, top=(1, 5))
metric.set_queries(torch.randn(200, 128, generator=g), torch.randint(0, 100, (200,), generator=g))
metric.update(*chunk(0))  # warm up: the scan's buffers and the allocator's pools
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for i in range(1, 20):
    metric.update(*chunk(i))
value = metric.compute()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(int(metric.stream_n_bank), (after - before) * 1024, float(value[0]))
"""


def test_a_long_stream_keeps_no_bank_row() -> None:
    """200,000 x 128 float32 bank rows (100 MB) in chunks of 10,000 against 200 queries: the peak RSS
    grows by far less than the bank."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_MEMORY_SCRIPT)], capture_output=True, text=True, timeout=300,
        check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    n_rows, growth, top1 = out.stdout.split()
    assert int(n_rows) == 200_000
    assert 0.0 <= float(top1) <= 1.0
    assert int(growth) < 25 * 2**20, f"peak RSS grew by {int(growth) / 2**20:.1f} MiB"


def test_review_findings_merges_of_other_k_layouts_after_reset_and_lists_without_queries() -> None:
    g = torch.Generator().manual_seed(21)
    q, ql = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
    bank, bl = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    a, c = em.KNNAccuracy(k=10), em.KNNAccuracy(k=5)
    for m, rows in ((a, slice(0, 20)), (c, slice(20, 40))):
        m.set_queries(q, ql)
        m.update(bank[rows], bl[rows])
    with pytest.raises(ValueError, match="k"):
        a.merge_state(c)
    a.reset()  # empty lists: a query set of another width may replace the earlier one
    a.set_queries(torch.randn(5, 6, generator=g), ql[:5])
    a.persistent(True)
    a.update(torch.randn(9, 6, generator=g), bl[:9])
    loaded = em.KNNAccuracy(k=10)
    loaded.persistent(True)
    loaded.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="set_queries"):
        loaded.compute()


@pytest.mark.parametrize("streaming", [True, False])
def test_an_empty_bank_chunk_is_a_no_op_on_both_routes(streaming: bool) -> None:
    """As ``DenseRetrieval`` takes an empty corpus chunk: ``update`` and ``forward`` of zero rows change
    nothing, streamed or stored; an empty chunk of another width is still refused."""
    bank, labels, queries, qlab = _data("atoms", 31, 40, 7, torch.float64)

    def started() -> em.KNNAccuracy:
        metric = em.KNNAccuracy(k=5, top=TOPS)
        if streaming:
            metric.set_queries(queries, qlab)
        else:
            metric.update(queries, qlab, role="query")
        return metric

    reference = started()
    reference.update(bank, labels)
    metric = started()
    metric.update(bank[:0], labels[:0])
    metric(bank[:0], labels[:0])
    metric.update(bank, labels)
    metric.update(bank[:0], labels[:0])
    _assert_same_bits(metric.compute(), reference.compute())
    with pytest.raises(IncompatibleStateError, match="width"):
        metric.update(torch.zeros(0, 4, dtype=torch.float64), labels[:0])
    _assert_same_bits(metric.compute(), reference.compute())
