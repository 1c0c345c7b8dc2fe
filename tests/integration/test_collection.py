"""Every module metric inside ``MetricCollection`` (compute groups), with ``merge_state``, pickling and
persistent ``state_dict`` round trips. Reference: the same metric updated alone on all the data."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection

import embedmetrics as em
from embedmetrics._metric.base import BaseMetric

N, DIM, DOCS = 30, 6, 7


def _close(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict)
        assert actual.keys() == expected.keys(), where
        for key in expected:
            _close(actual[key], expected[key], f"{where}[{key}]")
        return
    torch.testing.assert_close(
        actual, expected, rtol=1e-6, atol=1e-6, equal_nan=True, msg=lambda m: f"{where}: {m}"
    )


def _flat_batches(seed: int = 0, n_batches: int = 3) -> list[dict[str, Tensor]]:
    """Batches of every input kind, keyed by update argument names (as MetricCollection passes them)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n_batches):
        z1 = torch.randn(N, DIM, generator=g)
        queries = torch.arange(b * 10, b * 10 + 10)  # dataset indices, unique across batches
        out.append(
            {
                "preds": torch.rand(10 * DOCS, generator=g),
                "target": torch.rand(10 * DOCS, generator=g) < 0.3,
                "indexes": queries.repeat_interleave(DOCS),
                "z1": z1,
                "z2": z1 + 0.9 * torch.randn(N, DIM, generator=g),
                "z": z1,
                "embeddings": z1,
                "ids": torch.arange(b * N, b * N + N),
                "labels": torch.randint(0, 3, (N,), generator=g),
                "x": z1,
                "y": z1[:, :2] + 0.5 * torch.randn(N, 2, generator=g),
            }
        )
    return out


#: judgements over the ``ids`` of the batches (every row is a query there: no corpus, so each judged
#: query scores 0; the collection must still route ``embeddings`` and ``ids`` and return the dict)
_DENSE_QRELS = torch.tensor([[i, i + 1, 1] for i in range(0, 30, 3)])


def _all_metrics() -> dict[str, Callable[[], Metric]]:
    return {
        "hr1": lambda: em.RetrievalHitRate(k=1),
        "hr10": lambda: em.RetrievalHitRate(k=10),
        "mrr": em.RetrievalMRR,
        "mrr_ci": lambda: em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=300),
        "p3": lambda: em.RetrievalPrecision(k=3),
        "r3": lambda: em.RetrievalRecall(k=3),
        "ndcg": em.RetrievalNormalizedDCG,
        "map": em.RetrievalMAP,
        "rprec": em.RetrievalRPrecision,
        "fo3": lambda: em.RetrievalFallOut(k=3),
        "auroc": lambda: em.RetrievalAUROC(max_fpr=0.5),
        "prc": lambda: em.RetrievalPrecisionRecallCurve(max_k=3),
        "rafp": lambda: em.RetrievalRecallAtFixedPrecision(min_precision=0.5, max_k=3),
        "bpref": em.RetrievalBpref,
        "rprec_mult": lambda: em.RetrievalRPrecisionMultiple(multiple=1.5),
        "set_f": lambda: em.RetrievalSetF(k=3, beta=0.5),
        "set_map": em.RetrievalSetMAP,
        "set_rel_p": lambda: em.RetrievalSetRelativePrecision(k=3),
        "iprec": lambda: em.RetrievalInterpolatedPrecision(recall_level=0.5),
        "infap": em.RetrievalInfAP,
        "ca1": lambda: em.ContrastiveAccuracy(topk=1),
        "ca5": lambda: em.ContrastiveAccuracy(topk=5),
        "unif2": em.Uniformity,
        "unif1": lambda: em.Uniformity(t=1.0),
        "align": em.Alignment,
        "acc": lambda: em.EmbeddingAccuracy(exclude=("NMI", "AMI")),
        "rankme": em.RankMe,
        "rankme_c": lambda: em.RankMe(center=True),
        "alpha": lambda: em.AlphaReQ(fit_range=(1, 6)),
        "lidar": em.LiDAR,
        "cka": em.LinearCKA,
        "knn": lambda: em.KNNAccuracy(k=5),
        # without r_precision: EmbeddingAccuracy returns that key too, and torchmetrics then prefixes
        # every key of every dict result with its metric's name
        "dense": lambda: em.DenseRetrieval(_DENSE_QRELS, k=(1, 3), metrics=("ndcg", "recall", "map")),
    }


def _alone(factory: Callable[[], Metric], batches: list[dict[str, Any]]) -> Any:
    metric = factory()
    for batch in batches:
        metric.update(**metric._filter_kwargs(**batch))
    return metric.compute()


def test_every_module_metric_is_covered() -> None:
    exported = {
        n for n in em.__all__ if isinstance(getattr(em, n), type) and issubclass(getattr(em, n), Metric)
    }
    used = {type(f()).__name__ for f in _all_metrics().values()}
    assert exported <= used, f"not in the collection tests: {sorted(exported - used)}"


def test_all_metrics_in_one_collection() -> None:
    factories = _all_metrics()
    batches = _flat_batches()
    coll = MetricCollection({name: f() for name, f in factories.items()})  # compute groups on
    for batch in batches:
        coll.update(**batch)
    values = coll.compute()
    for name, factory in factories.items():
        expected = _alone(factory, batches)
        if isinstance(expected, dict):  # the collection flattens dict results into its own keys
            _close({k: values[k] for k in expected}, expected, name)
        else:
            _close(values[name], expected, name)
    # settings that change compute but not the stored rows may share a group; the values stay distinct
    assert not torch.equal(values["hr1"], values["hr10"])
    assert not torch.equal(values["ca1"], values["ca5"])
    assert not torch.equal(values["unif1"], values["unif2"])


def _two_d_batches() -> list[dict[str, Tensor]]:
    """2-D ``(queries, docs)`` batches; in the first, every query's relevant doc is ranked first, so
    per-query values at k=1 and k=10 coincide (a collection could wrongly merge their states)."""
    g = torch.Generator().manual_seed(3)
    first_target = torch.zeros(8, DOCS, dtype=torch.bool)
    first_target[:, 0] = True
    first_preds = torch.linspace(1.0, 0.0, DOCS).repeat(8, 1)
    batches = [{"preds": first_preds, "target": first_target}]
    for _ in range(2):
        batches.append(
            {"preds": torch.rand(8, DOCS, generator=g), "target": torch.rand(8, DOCS, generator=g) < 0.3}
        )
    return batches


@pytest.mark.parametrize("compute_groups", [True, False])
def test_settings_never_merged_in_two_d_mode(compute_groups: bool) -> None:
    factories: dict[str, Callable[[], Metric]] = {
        "hr1": lambda: em.RetrievalHitRate(k=1),
        "hr10": lambda: em.RetrievalHitRate(k=10),
        "p1": lambda: em.RetrievalPrecision(k=1),
        "p5": lambda: em.RetrievalPrecision(k=5),
        "ndcg1": lambda: em.RetrievalNormalizedDCG(k=1),
        "ndcg5": lambda: em.RetrievalNormalizedDCG(k=5),
    }
    batches = _two_d_batches()
    coll = MetricCollection({n: f() for n, f in factories.items()}, compute_groups=compute_groups)
    for batch in batches:
        coll.update(**batch)
    values = coll.compute()
    for name, factory in factories.items():
        _close(values[name], _alone(factory, batches), f"{name} (compute_groups={compute_groups})")
    assert not torch.equal(values["hr1"], values["hr10"])


@pytest.mark.parametrize("name", list(_all_metrics()))
def test_merge_state(name: str) -> None:
    factory = _all_metrics()[name]
    batches = _flat_batches(seed=7)
    a, b = factory(), factory()
    for batch in batches[:2]:
        a.update(**a._filter_kwargs(**batch))
    b.update(**b._filter_kwargs(**batches[2]))
    a.merge_state(b)
    _close(a.compute(), _alone(factory, batches), name)


@pytest.mark.parametrize("name", list(_all_metrics()))
def test_pickle_deepcopy_and_persistent_state_dict(name: str) -> None:
    factory = _all_metrics()[name]
    batches = _flat_batches(seed=11)
    metric = factory()
    for batch in batches[:2]:
        metric.update(**metric._filter_kwargs(**batch))
    expected = _alone(factory, batches)
    # a pickled or copied metric carries its state on (ddp_spawn and DataLoader workers pickle)
    for clone in (pickle.loads(pickle.dumps(metric)), copy.deepcopy(metric)):
        clone.update(**clone._filter_kwargs(**batches[2]))
        _close(clone.compute(), expected, f"{name} clone")
    # persistent states: a checkpoint taken mid-way, loaded into a fresh metric, continues exactly
    metric.persistent(True)
    restored = factory()
    restored.persistent(True)
    restored.load_state_dict(copy.deepcopy(metric.state_dict()))
    restored.update(**restored._filter_kwargs(**batches[2]))
    _close(restored.compute(), expected, f"{name} restored")


class _PowerSum(Metric):
    """Reduces in ``update`` with its setting: the kind of state compute groups can wrongly merge."""

    full_state_update = False

    def __init__(self, power: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.power = power
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, x: Tensor) -> None:
        self.total += (x**self.power).sum()

    def compute(self) -> Tensor:
        return self.total


class _SafePowerSum(BaseMetric, _PowerSum):
    def __init__(self, power: int, **kwargs: Any) -> None:
        super().__init__(power, **kwargs)
        self.add_settings_state(power=power)


def test_settings_state_keeps_compute_groups_apart() -> None:
    # equal sums for powers 1 and 2 after the first batch: a compute group could merge p1 and p2 there.
    # Only our behaviour is asserted (whether plain torchmetrics merges them is its own business).
    coll = MetricCollection({"p1": _SafePowerSum(1), "p2": _SafePowerSum(2), "p2b": _SafePowerSum(2)})
    coll.update(x=torch.tensor([0.0, 1.0, 1.0]))
    coll.update(x=torch.tensor([3.0]))
    values = coll.compute()
    assert float(values["p1"]) == 5.0
    assert float(values["p2"]) == 11.0
    assert float(values["p2b"]) == 11.0
    groups = [set(g) for g in coll.compute_groups.values()]
    assert {"p2", "p2b"} in groups, groups  # equal settings still share one group
