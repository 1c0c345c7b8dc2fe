"""``SeenIds`` answers "was this id stored before?" like a set of every stored id (oracle), whatever is
done to the list state it follows (appends, a reset, a replaced list), and ``DenseRetrieval`` keeps its
promise through ``update``, ``forward`` and ``reset``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics._metric.seen_ids import SeenIds

_STEP = st.tuples(
    st.sampled_from(["append", "append", "append", "reset", "replace"]),
    st.lists(st.integers(0, 60), max_size=8, unique=True),
)


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(_STEP, max_size=25), probe=st.lists(st.integers(0, 60), min_size=1, max_size=10))
def test_answers_as_a_set_of_the_stored_ids(steps: list[tuple[str, list[int]]], probe: list[int]) -> None:
    seen, stored = SeenIds(), []
    for action, ids in steps:
        if action == "reset":
            stored = []
        elif action == "replace":  # load_state_dict: new tensors, maybe the same values
            stored = [t.clone() for t in stored]
        stored.append(torch.tensor(ids, dtype=torch.int64))
        every = {int(v) for t in stored for v in t}
        query = torch.tensor(probe, dtype=torch.int64)
        got = seen.first_known(stored, query)
        want = next((v for v in probe if v in every), None)
        assert got == want


def test_runs_stay_logarithmic() -> None:
    seen, stored = SeenIds(), []
    for i in range(1000):
        stored.append(torch.tensor([i]))
        seen.first_known(stored, torch.tensor([-1]))
    assert len(seen.runs) <= 11  # one run per set bit of 1000


@pytest.mark.parametrize("path", ["update", "forward"])
def test_dense_retrieval_refuses_known_ids_until_reset(path: str) -> None:
    metric = em.DenseRetrieval(torch.tensor([[0, 1, 1]]), k=1)
    step = metric.update if path == "update" else metric
    rows = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    for start in range(0, 40, 4):
        step(rows, torch.arange(start, start + 4), role="corpus")
    with pytest.raises(ValueError, match="new ids, got 17"):
        step(rows, torch.tensor([100, 17, 101, 102]), role="corpus")
    step(rows, torch.tensor([0, 1, 2, 3]), role="query")  # another role: its own ids
    metric.reset()
    step(rows, torch.arange(4), role="corpus")  # a new epoch gives the same ids again
    assert sum(t.shape[0] for t in metric.corpus_ids) == 4
