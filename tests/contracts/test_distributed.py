"""Two gloo processes with uneven and empty shards give the value of one process holding everything; ranks
that disagree on the settings, the dtype or the width raise the same clear error on every rank (no hang,
no abort, no mixed result), for every state, process-local ones included."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from _dist import run_distributed
from contracts._contract import STATEFUL, assert_same, build, call, cut, widened, widened_setup
from embedmetrics._metric.cases import Case, Stream

WORLD = 2
DISAGREEMENTS = ("settings", "dtype", "width")


def _shard(case: Case, rank: int, *, empty: bool = True) -> list[Stream]:
    """Rank 0 holds a third of every stream, rank 1 the rest; with ``empty``, rank 0 holds all of the first
    stream instead (an empty shard on rank 1)."""
    mine = []
    for j, s in enumerate(case.streams):
        first, rest = cut(s, [s.rows if j == 0 and empty else s.rows // 3])
        mine.append(first if rank == 0 else rest)
    return [s for s in mine if s.rows > 0]


def _cpu(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_cpu(v) for v in value)
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _disagreeing(spec: Any, rank: int, what: str) -> str:
    case = spec.make_case(seed=5, dtype=torch.float64 if what == "dtype" and rank == 1 else torch.float32)
    if what == "settings" and not case.other_settings:
        return "skip"
    if what == "width" and rank == 1:
        case = widened_setup(case)
    metric = build(spec, case, **(case.other_settings if what == "settings" and rank == 1 else {}))
    if what == "width" and case.streams[0].embeddings is None:
        return "skip"
    for s in _shard(case, rank, empty=False):
        args, kwargs = widened(s) if what == "width" and rank == 1 and s.embeddings is not None else call(s)
        metric.update(*args, **kwargs)
    try:
        metric.compute()
    except Exception as err:  # the type and text must be the same on every rank
        return f"{type(err).__name__}: {err}"
    return "no error"


def _worker(rank: int, world: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in STATEFUL:
        case = spec.make_case(seed=5)
        metric = build(spec, case)
        for s in _shard(case, rank):
            metric.update(*s.args, **s.kwargs)
        out[spec.key] = _cpu(metric.compute())
        for what in DISAGREEMENTS:
            out[f"{spec.key}/{what}"] = _disagreeing(spec, rank, what)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(_worker, WORLD, timeout=240)


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
def test_every_rank_equals_one_process(spec: Any, results: list[dict[str, Any]]) -> None:
    case = spec.make_case(seed=5)
    want = case.functional(case.streams)
    for rank in range(WORLD):
        assert_same(results[rank][spec.key], want, exact=case.exact, what=f"{spec.key} rank {rank}")


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
@pytest.mark.parametrize("what", DISAGREEMENTS)
def test_disagreeing_ranks_raise_the_same_clear_error(
    spec: Any, what: str, results: list[dict[str, Any]]
) -> None:
    got = [results[rank][f"{spec.key}/{what}"] for rank in range(WORLD)]
    if got[0] == "skip":
        pytest.skip(f"the metric has no {what} to disagree on")
    assert got[0] == got[1], got
    assert got[0].startswith("IncompatibleStateError: "), got[0]
    assert "differ across processes" in got[0]
