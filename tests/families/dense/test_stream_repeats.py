"""A streamed corpus given twice in part (issue 58, item 2): a document two processes or two merged
states stream with the same id and the same row counts once, so a ``DistributedSampler``'s padding gives
the value of the distinct documents; the same id with another row is refused.

The oracle is the stream of the distinct documents in one part (itself equal to the stored route and to
trec_eval, ``test_stream.py``): the merged lists (keys, ids, the tie block at the cut, judged keys,
scores, ``n_docs``) must equal it bit for bit, on tie-heavy data where repeated documents sit in tie
blocks that straddle the cut, unlisted by every part."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import embedmetrics as em
from _dist import run_distributed
from embedmetrics._engine.dense.stream import RunningLists, StreamQueries, fold_chunk
from embedmetrics._engine.dense.stream_repeats import (
    KnownRows,
    digests_of,
    find_repeats,
    merge_counting_once,
)
from embedmetrics.functional import dense_retrieval

CONFIGS = [
    ("cosine", "average", False),
    ("dot", "pessimistic", True),
    ("euclidean", "optimistic", False),
    ("dot", "average", False),
]


def _tied(seed: int, n_q: int, n_c: int, d: int, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Rows of small integers (keys tied in blocks of many), scattered ids, graded qrels."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-1, 2, (n_q, d), generator=g).to(dtype)
    c = torch.randint(-1, 2, (n_c, d), generator=g).to(dtype)
    q_ids = torch.randperm(n_q, generator=g) * 3 + 1
    c_ids = torch.randperm(n_c, generator=g) * 2 + 1  # query ids 1, 4, 7 ... meet some document ids
    pairs = torch.stack(
        [
            q_ids[torch.randint(0, n_q, (3 * n_c,), generator=g)],
            c_ids[torch.randint(0, n_c, (3 * n_c,), generator=g)],
        ],
        1,
    )
    pairs = torch.unique(pairs, dim=0)
    qrels = torch.cat([pairs, torch.randint(0, 3, (pairs.shape[0], 1), generator=g)], dim=1)
    return {"q": q, "c": c, "q_ids": q_ids, "c_ids": c_ids, "qrels": qrels, "g": g}


def _fixed(data: dict[str, Any], similarity: str, ties: str, exclude_self: bool, depth: int) -> StreamQueries:
    metric = em.DenseRetrieval(
        data["qrels"], k=(1, 2), depth=depth, similarity=similarity, ties=ties, exclude_self=exclude_self,
        return_run=True,
    )  # fmt: skip
    metric.set_queries(data["q"], data["q_ids"])
    assert metric._stream is not None
    return metric._stream


def _stream(
    fixed: StreamQueries, data: dict[str, Any], rows: torch.Tensor, g: torch.Generator
) -> RunningLists:
    """``rows`` of the corpus folded in two chunks of a random cut."""
    lists = fixed.empty_lists()
    cut = int(torch.randint(0, rows.numel() + 1, (1,), generator=g))
    for part in (rows[:cut], rows[cut:]):
        lists = fold_chunk(fixed, lists, data["c"][part], data["c_ids"][part])
    return lists


def _assert_lists_equal(got: RunningLists, expected: RunningLists, where: Any) -> None:
    for name, value in expected.as_dict().items():
        assert torch.equal(getattr(got, name), value), (where, name)


def _shares(n_c: int, n_parts: int, g: torch.Generator) -> list[torch.Tensor]:
    """Every document in one part, and about a fifth of them in one or more other parts too."""
    owner = torch.randint(0, n_parts, (n_c,), generator=g)
    extra = torch.rand(n_c, n_parts, generator=g) < 0.2
    return [((owner == p) | extra[:, p]).nonzero().flatten() for p in range(n_parts)]


@pytest.mark.parametrize("seed", range(10))
def test_merged_lists_with_repeats_equal_the_distinct_stream(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n_q, n_c, d = (
        9,
        int(torch.randint(20, 120, (1,), generator=g)),
        int(torch.randint(1, 4, (1,), generator=g)),
    )
    data = _tied(seed, n_q, n_c, d)
    for similarity, ties, exclude_self in CONFIGS:
        depth = int(torch.randint(2, 12, (1,), generator=g))
        fixed = _fixed(data, similarity, ties, exclude_self, depth)
        expected = _stream(fixed, data, torch.arange(n_c), g)
        shares = _shares(n_c, 2 + seed % 2, g)
        parts = [_stream(fixed, data, share, g) for share in shares]
        ids = [data["c_ids"][s] for s in shares]
        repeats = find_repeats(ids, [digests_of(data["c"][s]) for s in shares], "corpus_ids")
        assert repeats is not None
        at = torch.isin(data["c_ids"], repeats.ids)
        known = KnownRows(data["c"][at], data["c_ids"][at])
        merged = merge_counting_once(fixed, parts, repeats, known)
        _assert_lists_equal(merged, expected, (seed, similarity, ties, exclude_self, depth))
        backwards = find_repeats(ids[::-1], [digests_of(data["c"][s]) for s in shares[::-1]], "corpus_ids")
        assert backwards is not None
        _assert_lists_equal(merge_counting_once(fixed, parts[::-1], backwards, known), expected, "reversed")
        try:  # without rows: the same lists, or the one refusal where a repeat straddles the cut unlisted
            without_rows = merge_counting_once(fixed, parts, repeats, None)
        except ValueError as err:
            refusal = str(err)
            assert "cannot be counted once" in refusal
        else:
            _assert_lists_equal(without_rows, expected, "no rows")


@pytest.mark.parametrize("seed", range(3))
def test_without_ties_at_the_cut_no_row_is_needed(seed: int) -> None:
    """Distinct keys: a repeated document is listed where it counts, so no row is read."""
    g = torch.Generator().manual_seed(seed)
    data = _tied(seed, 7, 80, 4)
    data["c"] = data["c"] + torch.randn(data["c"].shape, generator=g)
    for similarity, ties, exclude_self in CONFIGS:
        fixed = _fixed(data, similarity, ties, exclude_self, 5)
        expected = _stream(fixed, data, torch.arange(80), g)
        shares = _shares(80, 3, g)
        parts = [_stream(fixed, data, share, g) for share in shares]
        repeats = find_repeats(
            [data["c_ids"][s] for s in shares], [digests_of(data["c"][s]) for s in shares], "corpus_ids"
        )
        assert repeats is not None
        _assert_lists_equal(merge_counting_once(fixed, parts, repeats, None), expected, (seed, similarity))


def test_a_repeat_unlisted_in_a_tie_block_past_the_cut_needs_its_row() -> None:
    """Every document ties (one row under five ids); the lists hold the two lowest ids, so the repeated
    highest id is unlisted by both parts: only its row tells its key is the cut's, counted once."""
    row = torch.tensor([[1.0, 2.0]])
    data = {
        "q": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "q_ids": torch.tensor([0, 1]),
        "c": row.repeat(5, 1), "c_ids": torch.tensor([10, 11, 12, 13, 14]),
        "qrels": torch.tensor([[0, 14, 2], [1, 10, 1]]),
    }  # fmt: skip
    fixed = _fixed(data, "dot", "average", False, 2)
    g = torch.Generator().manual_seed(0)
    expected = _stream(fixed, data, torch.arange(5), g)
    assert expected.tail.tolist() == [5, 5]
    parts = [_stream(fixed, data, torch.tensor(s), g) for s in ([0, 2, 4], [1, 3, 4])]
    repeats = find_repeats(
        [data["c_ids"][[0, 2, 4]], data["c_ids"][[1, 3, 4]]], [digests_of(row.repeat(3, 1))] * 2, "x"
    )
    assert repeats is not None
    assert repeats.ids.tolist() == [14]
    merged = merge_counting_once(fixed, parts, repeats, KnownRows(row, torch.tensor([14])))
    _assert_lists_equal(merged, expected, "row known")
    with pytest.raises(
        ValueError, match=r"document 14 was streamed twice .* query 0, .*cannot be counted once"
    ):
        merge_counting_once(fixed, parts, repeats, None)
    changed = KnownRows(row + 1, torch.tensor([14]))  # another row under the id (changed since): not used
    with pytest.raises(ValueError, match="cannot be counted once"):
        merge_counting_once(fixed, parts, repeats, changed)


def test_the_same_id_with_another_row_is_refused() -> None:
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-0.0, 1.0]])
    ids = [torch.tensor([3, 5]), torch.tensor([5, 8])]
    with pytest.raises(
        ValueError, match="corpus_ids must hold unique ids, got 5 more than once with different"
    ):
        find_repeats(ids, [digests_of(rows[:2]), digests_of(rows[[0, 1]] + 1)], "corpus_ids")
    same = find_repeats(ids, [digests_of(rows[:2]), digests_of(rows[[2, 0]])], "corpus_ids")  # -0.0 is 0.0
    assert same is not None
    assert (same.ids.tolist(), same.extra.tolist()) == ([5], [1])


# --- the metric: merge_state and gloo processes, against the stored route of the distinct documents ---

OPTIONS: dict[str, Any] = {
    "k": (1, 3, 5),
    "depth": 6,
    "aggregation": "none",
    "return_run": True,
    "similarity": "dot",
}


def _expected(data: dict[str, Any], **options: Any) -> dict[str, Any]:
    return dense_retrieval(
        data["q"],
        data["c"],
        data["qrels"],
        query_ids=data["q_ids"],
        corpus_ids=data["c_ids"],
        **{**OPTIONS, **options},
    )


def _assert_same(got: dict[str, Any], expected: dict[str, Any], where: Any) -> None:
    assert got.keys() == expected.keys(), where
    for key, value in expected.items():
        pairs = zip(got[key], value) if key == "run" else [(got[key], value)]
        for a, b in pairs:
            assert a.dtype == b.dtype, (where, key)
            assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)), (where, key)


def _streaming(data: dict[str, Any], **options: Any) -> em.DenseRetrieval:
    metric = em.DenseRetrieval(data["qrels"], **{**OPTIONS, **options})
    metric.set_queries(data["q"], data["q_ids"])
    return metric


def _feed(metric: em.DenseRetrieval, data: dict[str, Any], rows: torch.Tensor) -> em.DenseRetrieval:
    for part in rows.chunk(3):
        metric.update(data["c"][part], data["c_ids"][part], role="corpus")
    return metric


@pytest.mark.parametrize("ties", ["average", "pessimistic"])
def test_merge_state_counts_a_shared_document_once(ties: str) -> None:
    data = _tied(21, 12, 90, 2)
    expected = _expected(data, ties=ties)
    # the padding's layout: the repeated documents are the first of one part and the last of the other
    ours = _feed(_streaming(data, ties=ties), data, torch.arange(0, 50))
    theirs = _feed(_streaming(data, ties=ties), data, torch.cat([torch.arange(50, 90), torch.arange(0, 3)]))
    merged = copy.deepcopy(ours)
    merged.merge_state(theirs)
    _assert_same(merged.compute(), expected, "metric")
    assert int(merged.stream_n_docs) == 90
    assert merged.stored_rows("streamed_ids").numel() == 90
    copied = copy.deepcopy(ours)
    copied.merge_state(copy.deepcopy(ours))  # a copy of itself: the same value
    _assert_same(
        copied.compute(), _feed(_streaming(data, ties=ties), data, torch.arange(0, 50)).compute(), "copy"
    )


def test_merge_state_refuses_a_shared_id_with_another_row_and_changes_nothing() -> None:
    data = _tied(22, 6, 40, 3)
    ours = _feed(_streaming(data), data, torch.arange(0, 25))
    value = copy.deepcopy(ours).compute()
    other = dict(data, c=data["c"].clone())
    other["c"][20] += 5.0
    theirs = _feed(_streaming(data), other, torch.arange(20, 40))
    shown = int(data["c_ids"][20])
    with pytest.raises(
        ValueError,
        match=rf"argument `incoming_state` .*unique ids, got {shown} more than once with different rows",
    ):
        ours.merge_state(theirs)
    _assert_same(ours.compute(), value, "unchanged")


def _padded_worker(rank: int, world: int) -> dict[str, Any]:
    """Each process streams its ``DistributedSampler`` share of the corpus padded to a multiple of the
    processes (the first documents again, each process's last), in batches of 4."""
    from torch.utils.data import DistributedSampler

    data = _tied(23, 10, 45, 2)
    out: dict[str, Any] = {}
    for ties in ("average", "optimistic"):
        metric = _streaming(data, ties=ties, block_bytes=4096)
        share = torch.tensor(
            list(DistributedSampler(range(45), num_replicas=world, rank=rank, shuffle=False))
        )
        for part in share.split(4):
            metric.update(data["c"][part], data["c_ids"][part], role="corpus")
        out[ties] = metric.compute()
    other = dict(data, c=data["c"].clone())
    other["c"][0] += float(rank)  # document 0 again, with another row on rank 1
    metric = _streaming(data)
    share = torch.tensor(list(DistributedSampler(range(45), num_replicas=world, rank=rank, shuffle=False)))
    metric.update(other["c"][share], other["c_ids"][share], role="corpus")
    try:
        metric.compute()
        out["refused"] = ""
    except ValueError as err:
        out["refused"] = str(err)
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_a_distributed_sampler_padding_on_gloo_processes_counts_once(world: int) -> None:
    data = _tied(23, 10, 45, 2)
    results = run_distributed(_padded_worker, world, timeout=180)
    for ties in ("average", "optimistic"):
        for rank, res in enumerate(results):
            _assert_same(res[ties], _expected(data, ties=ties), (world, rank, ties))
    shown = int(data["c_ids"][0])
    for res in results:
        assert f"unique ids, got {shown} more than once with different rows" in res["refused"]


# --- review findings: merges in any order and form keep the last chunks' rows; stale rows are never used ---


def _sampler_share(n: int, world: int, rank: int, ids: torch.Tensor, **options: Any) -> em.DenseRetrieval:
    """A rank's ``DistributedSampler`` share of ``n`` documents that all tie (one document per batch)."""
    from torch.utils.data import DistributedSampler

    data = {"q": torch.tensor([[1.0, 0.0]]), "q_ids": torch.tensor([0]), "qrels": _TIE_QRELS}
    metric = _streaming(data, k=1, depth=1, return_run=False, **options)
    metric.persistent(True)
    for i in DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False):
        metric.update(torch.ones(1, 2), ids[[i]], role="corpus")
    return metric


_TIE_QRELS = torch.tensor([[0, 1, 1], [0, 5, 2], [0, 97, 1]])


def _tied_expected(n: int, ids: torch.Tensor) -> torch.Tensor:
    out = dense_retrieval(
        torch.tensor([[1.0, 0.0]]), torch.ones(n, 2), _TIE_QRELS, query_ids=torch.tensor([0]),
        corpus_ids=ids[:n], k=1, depth=1, similarity="dot",
    )  # fmt: skip
    return out["ndcg@1"]


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
def test_three_sampler_shares_merge_in_any_order(order: tuple[int, int]) -> None:
    ids = torch.arange(7)
    merged = _sampler_share(7, 3, 0, ids)
    for rank in order:
        merged.merge_state(_sampler_share(7, 3, rank, ids))
    assert torch.equal(merged.compute()["ndcg@1"], _tied_expected(7, ids))


@pytest.mark.parametrize("form", ["metric", "state dict", "loaded metric"])
def test_a_padded_share_merges_as_a_metric_a_state_dict_or_a_loaded_metric(form: str) -> None:
    ids = 100 - torch.arange(5)
    for ours, theirs in ((0, 1), (1, 0)):
        merged, peer = _sampler_share(5, 2, ours, ids), _sampler_share(5, 2, theirs, ids)
        incoming: Any = peer
        if form == "state dict":
            incoming = {name: getattr(peer, name) for name in peer._defaults}
        elif form == "loaded metric":
            incoming = _sampler_share(0, 1, 0, ids)
            incoming.load_state_dict(peer.state_dict())
        merged.merge_state(incoming)
        assert torch.equal(merged.compute()["ndcg@1"], _tied_expected(5, ids)), (form, ours)


def test_an_older_row_under_a_repeated_id_is_never_used() -> None:
    """A metric that held another row under id 12 before loading a state: the repeat's row is unknown
    (refused), never read off the older row (which gave 0.25 where 1/3 is right)."""
    data = {"q": torch.tensor([[1.0, 0.0]]), "q_ids": torch.tensor([0]), "qrels": torch.tensor([[0, 12, 1]])}

    def stream(*docs: int) -> em.DenseRetrieval:
        metric = _streaming(data, k=1, depth=1, return_run=False)
        metric.persistent(True)
        for doc in docs:
            metric.update(torch.tensor([[1.0, 0.0]]), torch.tensor([doc]), role="corpus")
        return metric

    metric = _streaming(data, k=1, depth=1, return_run=False)
    metric.persistent(True)
    metric.update(torch.tensor([[0.0, 1.0]]), torch.tensor([12]), role="corpus")  # another row, then loaded
    metric.load_state_dict(stream(12, 10).state_dict())
    with pytest.raises(ValueError, match=r"document 12 .*cannot be counted once"):
        metric.merge_state(stream(12, 11))


def test_merge_state_counts_a_shared_document_once_without_validate_args() -> None:
    data = _tied(24, 5, 30, 2)
    ours = _feed(_streaming(data, validate_args=False), data, torch.arange(0, 20))
    theirs = _feed(
        _streaming(data, validate_args=False), data, torch.cat([torch.arange(20, 30), torch.arange(2)])
    )
    ours.merge_state(theirs)
    _assert_same(ours.compute(), _expected(data), "validate_args=False")
