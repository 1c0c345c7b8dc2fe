"""Real multi-process runs (gloo, CPU): every module metric gives on every rank the single-process value.

Each test starts one process group and runs many metrics in it (process start-up with ``torch``
is the dominant cost). Ranks get uneven shares of the data, different numbers of ``update`` calls,
and one rank none at all; ranks hold contiguous slices in rank order, so the gathered rows are in
the same order as the single-process run on all data. Every run has a hard deadline (see
``_dist.run_distributed``): a deadlock fails the test with the ranks' output instead of hanging.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.aggregation import CatMetric, SumMetric

import embedmetrics
from embedmetrics._engine.core import scan
from embedmetrics._metric.sync import SyncSafeMetric

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _dist import DistributedRunError, run_distributed

N_ROWS = 41  # rows (documents, pairs, embeddings) of the full data set of a case
Data = tuple[Tensor, ...]


class CatRows(SyncSafeMetric):
    """Test metric with the state kinds that break torchmetrics' empty-rank placeholder."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("emb", default=[], dist_reduce_fx="cat")
        self.add_state("label", default=[], dist_reduce_fx="cat")
        self.add_state("flag", default=[], dist_reduce_fx="cat")
        self.add_state("count", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, emb: Tensor, label: Tensor, flag: Tensor) -> None:
        self.emb.append(emb)
        self.label.append(label)
        self.flag.append(flag)
        self.count += emb.shape[0]

    def compute(self) -> dict[str, Tensor]:
        def cat(x: Any) -> Tensor:
            return x if isinstance(x, Tensor) else torch.cat(x)

        return {"emb": cat(self.emb), "label": cat(self.label), "flag": cat(self.flag), "count": self.count}


class CatTensorRows(SyncSafeMetric):
    """Test metric with tensor (not list) ``cat`` states, which torchmetrics would ``stack``."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("emb", default=torch.zeros(0, 3), dist_reduce_fx="cat")
        self.add_state("label", default=torch.zeros(0, dtype=torch.int64), dist_reduce_fx="cat")

    def update(self, emb: Tensor, label: Tensor) -> None:
        self.emb = torch.cat([self.emb, emb])
        self.label = torch.cat([self.label, label])

    def compute(self) -> dict[str, Tensor]:
        return {"emb": self.emb, "label": self.label}


@dataclass(frozen=True)
class Case:
    """A metric and how to make its data; ``data`` rows are split along dim 0 between ranks."""

    factory: Callable[..., Metric]
    data: Callable[[torch.Generator], Data]
    update: Callable[[Metric, Data], None] = field(default=lambda m, d: m.update(*d))


def _embeddings(g: torch.Generator, n: int = N_ROWS, d: int = 8) -> Tensor:
    return torch.randn(n, d, generator=g)


def _pairs(g: torch.Generator) -> Data:
    z1 = _embeddings(g)
    return z1, z1 + 0.7 * _embeddings(g)


def _labelled(g: torch.Generator) -> Data:
    return _embeddings(g), torch.randint(0, 4, (N_ROWS,), generator=g)


def _retrieval_flat(g: torch.Generator) -> Data:
    # rows are documents; `indexes` are dataset indices of the queries, so unique across ranks
    indexes = torch.sort(torch.randint(0, 9, (N_ROWS,), generator=g)).values
    preds = torch.rand(N_ROWS, generator=g)
    target = torch.rand(N_ROWS, generator=g) < 0.35
    return preds, target, indexes


def _retrieval_2d(g: torch.Generator) -> Data:
    # rows are queries over 6 documents each
    return torch.rand(N_ROWS, 6, generator=g), torch.rand(N_ROWS, 6, generator=g) < 0.35


def _graded_2d(g: torch.Generator) -> Data:
    return torch.rand(N_ROWS, 6, generator=g), torch.randint(0, 4, (N_ROWS, 6), generator=g)


def _cases() -> dict[str, Case]:
    """Every case; the metric classes come from the package where they exist."""
    cases: dict[str, Case] = {
        "torchmetrics.CatMetric": Case(CatMetric, lambda g: (torch.randn(N_ROWS, generator=g),)),
        "torchmetrics.SumMetric": Case(SumMetric, lambda g: (torch.randn(N_ROWS, generator=g),)),
        "CatRows(2-D float, int64, bool)": Case(
            CatRows, lambda g: (*_labelled(g), torch.rand(N_ROWS, generator=g) < 0.5)
        ),
        "CatTensorRows(tensor states)": Case(
            CatTensorRows, lambda g: (torch.randn(N_ROWS, 3, generator=g), torch.arange(N_ROWS))
        ),
    }
    em: Any = embedmetrics
    retrieval = [
        "RetrievalHitRate",
        "RetrievalMRR",
        "RetrievalPrecision",
        "RetrievalRecall",
        "RetrievalNormalizedDCG",
        "RetrievalMAP",
        "RetrievalRPrecision",
        "RetrievalFallOut",
        "RetrievalAUROC",
        "RetrievalBpref",
        "RetrievalRPrecisionMultiple",
        "RetrievalSetF",
        "RetrievalSetMAP",
        "RetrievalSetRelativePrecision",
        "RetrievalInterpolatedPrecision",
        "RetrievalInfAP",
    ]
    for name in retrieval:
        if hasattr(em, name):
            cls = getattr(em, name)
            cases[f"{name}(flat)"] = Case(cls, _retrieval_flat)
            two_d = _graded_2d if name == "RetrievalNormalizedDCG" else _retrieval_2d
            cases[f"{name}(2-D)"] = Case(cls, two_d)
    for name in ("RetrievalPrecisionRecallCurve", "RetrievalRecallAtFixedPrecision"):
        curve = getattr(em, name)
        cases[f"{name}(max_k=4, flat)"] = Case(lambda c=curve: c(max_k=4), _retrieval_flat)
        cases[f"{name}(max_k=4, 2-D)"] = Case(lambda c=curve: c(max_k=4), _retrieval_2d)
        cases[f"{name}(flat)"] = Case(curve, _retrieval_flat)
    cases["RetrievalAUROC(top_k=3, max_fpr=0.5, flat)"] = Case(
        lambda: em.RetrievalAUROC(top_k=3, max_fpr=0.5), _retrieval_flat
    )
    if hasattr(em, "RetrievalHitRate"):
        cases["RetrievalHitRate(k=3, flat)"] = Case(lambda: em.RetrievalHitRate(k=3), _retrieval_flat)
    if hasattr(em, "ConfidenceInterval"):
        cases["ConfidenceInterval(RetrievalMRR, flat)"] = Case(
            lambda: em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=300),
            _retrieval_flat,
        )
    if hasattr(em, "ContrastiveAccuracy"):
        cases["ContrastiveAccuracy(topk=(1, 5))"] = Case(lambda: em.ContrastiveAccuracy(topk=(1, 5)), _pairs)
    if hasattr(em, "Uniformity"):
        cases["Uniformity"] = Case(em.Uniformity, lambda g: (_embeddings(g),))
    if hasattr(em, "Alignment"):
        cases["Alignment"] = Case(em.Alignment, _pairs)
    if hasattr(em, "EmbeddingAccuracy"):
        cases["EmbeddingAccuracy"] = Case(em.EmbeddingAccuracy, _labelled)
    cases.update(_representation_cases())
    cases["DenseRetrieval"] = Case(
        lambda: em.DenseRetrieval(_DENSE_QRELS, k=(1, 5), depth=8), _queries_and_corpus, _dense_update
    )
    return cases


def _sources(g: torch.Generator) -> Data:
    """Views of 12 source samples (ids scattered, so a class spans updates and ranks)."""
    ids = torch.randint(0, 12, (N_ROWS,), generator=g)
    base = torch.randn(12, 8, generator=g, dtype=torch.float64)
    return (base[ids] + 0.2 * torch.randn(N_ROWS, 8, generator=g, dtype=torch.float64)).float(), ids * 10 + 3


def _bank_and_queries(g: torch.Generator) -> Data:
    emb, labels = _labelled(g)
    return emb, labels, emb + 0.3 * _embeddings(g), torch.randint(0, 4, (N_ROWS,), generator=g)


def _knn_update(metric: Metric, data: Data) -> None:
    metric.update(data[0], data[1], role="bank")
    metric.update(data[2], data[3], role="query")


def _queries_and_corpus(g: torch.Generator) -> Data:
    # row i holds query 2i+1 and document 3i (ids scattered, unique across ranks)
    return _embeddings(g), torch.arange(N_ROWS) * 2 + 1, _embeddings(g), torch.arange(N_ROWS) * 3


def _dense_update(metric: Metric, data: Data) -> None:
    metric.update(data[2], data[3], role="corpus")
    metric.update(data[0], data[1], role="query")


_DENSE_QRELS = torch.tensor([[2 * q + 1, 3 * ((q * 5) % N_ROWS), 1 + q % 3] for q in range(0, N_ROWS, 2)])


def _representation_cases(**kw: Any) -> dict[str, Case]:
    em: Any = embedmetrics
    return {
        "RankMe": Case(lambda **kw: em.RankMe(**kw), lambda g: (_embeddings(g),)),
        "AlphaReQ": Case(lambda **kw: em.AlphaReQ(fit_range=(1, 8), **kw), lambda g: (_embeddings(g),)),
        "LiDAR": Case(lambda **kw: em.LiDAR(**kw), _sources),
        "LinearCKA": Case(lambda **kw: em.LinearCKA(**kw), lambda g: (_embeddings(g), _embeddings(g, d=3))),
        "KNNAccuracy": Case(
            lambda **kw: em.KNNAccuracy(k=5, top=(1, 2), **kw), _bank_and_queries, _knn_update
        ),
    }


#: Per world size, the update plans: per rank, the fractions of the rows of each ``update`` call.
PLANS: dict[int, list[list[list[float]]]] = {
    2: [[[], [0.2, 0.5, 0.3]], [[0.7], [0.1, 0.2]]],
    3: [[[0.05, 0.25, 0.3], [], [0.4]], [[0.3], [0.1, 0.1, 0.2, 0.3], []]],
}


def _slices(plan: list[list[float]], n: int) -> list[list[tuple[int, int]]]:
    """Per rank, the ``[start, stop)`` rows of each update; contiguous and in rank order."""
    out: list[list[tuple[int, int]]] = []
    acc = 0.0
    start = 0
    for fractions in plan:
        mine = []
        for f in fractions:
            acc += f
            stop = n if abs(acc - 1.0) < 1e-9 else max(start + 1, round(acc * n))
            mine.append((start, stop))
            start = stop
        out.append(mine)
    assert start == n, plan
    return out


def _to_plain(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def _data(name: str, case: Case) -> Data:
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    return case.data(g)


def _part_plans(rank: int, world: int) -> dict[str, list[Any]]:
    """For every plan of this world size, every case updated with this rank's slices, then computed."""
    out: dict[str, list[Any]] = {}
    for name, case in _cases().items():
        data = _data(name, case)
        values = []
        for plan in PLANS[world]:
            metric = case.factory()
            for start, stop in _slices(plan, N_ROWS)[rank]:
                case.update(metric, tuple(t[start:stop] for t in data))
            values.append(_to_plain(metric.compute()))
        out[name] = values
    return out


class _Probe(SyncSafeMetric):
    """Returns the scan shard its ``compute`` sees."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("x", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, x: Tensor) -> None:
        self.x += x.sum()

    def compute(self) -> Any:
        return scan.metric_shard(self)


def _part_engine(rank: int, world: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # ranks feeding different dtypes: the same clear error on every rank, no hang
    m = CatRows()
    dtype = torch.float32 if rank == 0 else torch.float64
    m.update(
        torch.zeros(2, 3, dtype=dtype), torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.bool)
    )
    try:
        m.compute()
        out["mismatch"] = None
    except RuntimeError as err:
        out["mismatch"] = str(err)
    # metric_shard: sharded only inside a synced compute
    p = _Probe()
    out["outside"] = scan.metric_shard(p)
    out["forward"] = p(torch.ones(3))  # the batch value sees local data only: never sharded
    out["compute"] = p.compute()
    local = _Probe(sync_on_compute=False)
    local.update(torch.ones(1))
    out["unsynced"] = local.compute()
    return out


#: Block budget (bytes) for the split test: a few rows per block, so every rank gets blocks.
SMALL_BLOCKS = 2 * N_ROWS * 4


def _sharded_cases() -> dict[str, Case]:
    """The metrics whose O(n^2) scan must be split across ranks, with small blocks."""
    em: Any = embedmetrics
    cases: dict[str, Case] = {}
    if hasattr(em, "ContrastiveAccuracy"):
        cases["ContrastiveAccuracy"] = Case(
            lambda **kw: em.ContrastiveAccuracy(topk=(1, 5), block_bytes=SMALL_BLOCKS, **kw), _pairs
        )
    if hasattr(em, "Uniformity"):
        cases["Uniformity"] = Case(
            lambda **kw: em.Uniformity(block_bytes=SMALL_BLOCKS, **kw), lambda g: (_embeddings(g),)
        )
    if hasattr(em, "EmbeddingAccuracy"):
        # the kNN metrics; NMI/AMI (k-means on all rows) are not a blocked scan and are not split
        calc = em.AccuracyCalculator(exclude=("NMI", "AMI"), block_bytes=SMALL_BLOCKS)
        cases["EmbeddingAccuracy"] = Case(lambda **kw: em.EmbeddingAccuracy(calculator=calc, **kw), _labelled)
        # the default budget fits this whole scan in one block: it must still be split across ranks
        default_calc = em.AccuracyCalculator(exclude=("NMI", "AMI"))
        cases["EmbeddingAccuracy(default blocks)"] = Case(
            lambda **kw: em.EmbeddingAccuracy(calculator=default_calc, **kw), _labelled
        )
    if hasattr(em, "ContrastiveAccuracy"):
        cases["ContrastiveAccuracy(default blocks)"] = Case(
            lambda **kw: em.ContrastiveAccuracy(topk=(1, 5), **kw), _pairs
        )
    cases["KNNAccuracy"] = Case(
        lambda **kw: em.KNNAccuracy(k=5, top=(1, 2), block_bytes=SMALL_BLOCKS, **kw),
        _bank_and_queries,
        _knn_update,
    )
    return cases


#: Metrics whose reference rows stay sharded: each rank scans all queries against its own rows only,
#: so its work is exactly ``2 * queries * (its rows) * d``, whatever the other ranks hold.
BANK_SHARDED = {"KNNAccuracy"}


def _flops(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the floating-point operations of its matrix products (the scan's work)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        value = fn()
    return value, int(counter.get_total_flops())


def _part_shards(rank: int, world: int) -> dict[str, Any]:
    """Per metric: value and work of this rank in a synced (sharded) compute, and of a local full one."""
    out: dict[str, Any] = {}
    for name, case in _sharded_cases().items():
        data = _data(name, case)
        synced = case.factory()
        for start, stop in _slices(PLANS[world][0], N_ROWS)[rank]:
            case.update(synced, tuple(t[start:stop] for t in data))
        value, flops = _flops(synced.compute)
        local = case.factory(sync_on_compute=False)  # this rank alone on all rows: the unsharded scan
        case.update(local, data)
        local_value, local_flops = _flops(local.compute)
        rows = sum(stop - start for start, stop in _slices(PLANS[world][0], N_ROWS)[rank])
        out[name] = {
            "value": value, "flops": flops, "local_value": local_value, "local_flops": local_flops,
            "rows": rows, "features": data[0].shape[1],
        }  # fmt: skip
    plain: dict[str, Any] = _to_plain(out)
    return plain


_PARTS: dict[str, Callable[[int, int], Any]] = {
    "plans": _part_plans,
    "engine": _part_engine,
    "shards": _part_shards,
}


def _worker_all(rank: int, world: int) -> dict[str, Any]:
    """Everything one process group checks; a part that raises is reported to its own test."""
    import traceback

    out: dict[str, Any] = {}
    for part, fn in _PARTS.items():
        try:
            out[part] = fn(rank, world)
        except Exception:
            out[part] = _Failed(traceback.format_exc())
    return out


@dataclass(frozen=True)
class _Failed:
    traceback: str


_RUNS: dict[int, list[dict[str, Any]]] = {}


def _results(world: int, part: str) -> list[Any]:
    """Per-rank results of ``part``; the process group of each world size is started once per session."""
    if world not in _RUNS:
        _RUNS[world] = run_distributed(_worker_all, world, timeout=180)
    out = [res[part] for res in _RUNS[world]]
    for rank, res in enumerate(out):
        if isinstance(res, _Failed):
            pytest.fail(f"part {part!r} raised on rank {rank}:\n{res.traceback}")
    return out


def _reference(name: str, case: Case) -> Any:
    """Single process, no process group: the same metric on all rows, the same update sizes."""
    metric = case.factory()
    case.update(metric, _data(name, case))
    return _to_plain(metric.compute())


def _assert_same(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, list):  # (precision, recall, top_k), (recall, k), as plain lists
        assert isinstance(actual, list), where
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert actual.keys() == expected.keys(), where
        for k in expected:
            _assert_same(actual[k], expected[k], f"{where}[{k}]")
    elif isinstance(expected, Tensor):
        assert isinstance(actual, Tensor), where
        if expected.is_floating_point():
            torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6, msg=lambda m: f"{where}: {m}")
        else:  # counts, labels, flags: exact
            assert actual.dtype == expected.dtype, where
            assert torch.equal(actual, expected), f"{where}: {actual} != {expected}"
    else:
        assert actual == pytest.approx(expected, rel=1e-6, abs=1e-6), where


def test_every_module_metric_has_a_case() -> None:
    exported = [getattr(embedmetrics, n) for n in embedmetrics.__all__]
    metrics = {c.__name__ for c in exported if isinstance(c, type) and issubclass(c, Metric)}
    covered = {name.split("(")[0] for name in _cases()}
    assert metrics <= covered, f"module metrics without a distributed case: {sorted(metrics - covered)}"


# two ranks with uneven and empty shards: every registry case in tests/contracts/test_distributed.py
@pytest.mark.parametrize("world", [3])
def test_compute_equals_single_process(world: int) -> None:
    results = _results(world, "plans")
    for name, case in _cases().items():
        expected = _reference(name, case)
        for p in range(len(PLANS[world])):
            for rank, res in enumerate(results):
                _assert_same(res[name][p], expected, f"{name} plan {p} rank {rank}")


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_compute_equals_unsharded_and_splits_the_work(world: int) -> None:
    results = _results(world, "shards")
    names = list(_sharded_cases())
    if not names:
        pytest.skip("no embedding metric in the package yet")
    problems = []
    for name in names:
        per_rank = [res[name] for res in results]
        total = per_rank[0]["local_flops"]
        flops = [r["flops"] for r in per_rank]
        if name in BANK_SHARDED:  # exactly its own rows against every query, nothing repeated
            own = [2 * N_ROWS * r["rows"] * r["features"] for r in per_rank]
            if flops != own or sum(flops) != total:
                problems.append(f"{name}: per-rank work {flops}, own rows {own}, unsharded {total}")
        # each rank does about 1/world of the unsharded work (matrix-product FLOPs), none does nothing
        elif min(flops) <= 0 or max(flops) > 1.35 * total / world or sum(flops) > 1.05 * total:
            problems.append(f"{name}: per-rank work {flops}, unsharded {total}")
        for rank, r in enumerate(per_rank):
            _assert_same(r["value"], r["local_value"], f"{name} rank {rank} sharded vs unsharded")
            assert r["local_flops"] == total
    assert not problems, "compute not split across ranks (or work repeated): " + "; ".join(problems)


def test_sync_errors_and_shard_selection() -> None:
    for rank, res in enumerate(_results(2, "engine")):
        assert res["mismatch"] is not None, "mismatched dtypes across ranks must raise on every rank"
        assert "state `emb`" in res["mismatch"]
        assert res["outside"] is None
        assert res["forward"] is None
        assert res["compute"] == (rank, 2)
        assert res["unsynced"] is None


def _hang(rank: int, world: int) -> None:
    import time

    time.sleep(600)  # neither rank ever returns


def test_harness_fails_instead_of_hanging() -> None:
    with pytest.raises(DistributedRunError, match="did not finish"):
        run_distributed(_hang, 2, timeout=8)
