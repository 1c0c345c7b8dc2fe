"""A real ``lightning.Trainer`` on CPU: ``self.log`` / ``self.log_dict`` and ``EmbeddingMetricsCallback``
log epoch values equal to the values computed offline, in one process and with ``ddp_spawn``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import Subset
from torchmetrics import MetricCollection
from torchmetrics.aggregation import MeanMetric

import embedmetrics as em
from embedmetrics.integrations.lightning import EmbeddingMetricsCallback, flatten_value

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _lightning_helpers as h
from _seeding import seeded


@pytest.fixture(autouse=True)
def _seeded_global_generators() -> Iterator[None]:
    # model initialisation and Lightning itself draw from the global generators
    with seeded(0):
        yield


pytestmark = pytest.mark.filterwarnings(
    "ignore:.*does not have many workers.*",
    "ignore:.*The number of training batches.*",
    "ignore:.*GPU available but not used.*",
)


def _assert_values(logged: dict[str, Any], expected: dict[str, float], where: str) -> None:
    for name, value in expected.items():
        assert name in logged, f"{where}: {name} not logged; logged {sorted(logged)}"
        assert float(logged[name]) == pytest.approx(value, rel=1e-6, abs=1e-6), f"{where}: {name}"


def _expected(prefix: str = "val/", world: int = 1) -> dict[str, float]:
    return h.offline_values(prefix, h.ddp_order(world) if world > 1 else None)


def _collection_callback() -> EmbeddingMetricsCallback:
    coll = MetricCollection(
        {"hr1": em.RetrievalHitRate(k=1), "hr3": em.RetrievalHitRate(k=3)}, prefix="coll_"
    )
    shared = {"preds": "scores", "target": "relevance", "indexes": "query"}
    return EmbeddingMetricsCallback(coll, shared)


def _collection_expected(prefix: str) -> dict[str, float]:
    full = h.outputs_of(list(h.dataset().tensors))
    out = {}
    for name, k in (("coll_hr1", 1), ("coll_hr3", 3)):
        m = em.RetrievalHitRate(k=k)
        m.update(full["scores"], full["relevance"], indexes=full["query"])
        out[prefix + name] = float(m.compute())
    return out


def test_single_device_self_log_and_callback() -> None:
    trainer = h.trainer(callbacks=[h.callback(), _collection_callback()])
    model = h.EvalModule()
    trainer.validate(model, dataloaders=h.loader(), verbose=False)
    logged = dict(trainer.callback_metrics)
    _assert_values(logged, _expected("val/"), "self.log")
    _assert_values(logged, _expected("val/cb/"), "callback")
    _assert_values(logged, _collection_expected("val/"), "callback(MetricCollection)")
    # the test stage has its own metric copies and its own names
    trainer.test(model, dataloaders=h.loader(), verbose=False)
    _assert_values(dict(trainer.callback_metrics), _expected("test/cb/"), "callback, test stage")


def test_fit_logs_each_epoch_from_a_fresh_state(tmp_path: Path) -> None:
    # the sanity check's batches and the previous epoch must not leak into an epoch's value
    trainer = h.trainer(
        max_epochs=2, callbacks=[h.callback(), h.Recorder(str(tmp_path))], num_sanity_val_steps=2
    )
    trainer.fit(h.EvalModule(), train_dataloaders=h.loader(), val_dataloaders=h.loader())
    expected = {**_expected("val/"), **_expected("val/cb/")}
    for epoch in range(2):
        _assert_values(torch.load(tmp_path / f"rank0-epoch{epoch}.pt"), expected, f"epoch {epoch}")


def test_ddp_spawn_two_processes(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ddp-mid.ckpt")
    callbacks = [h.callback(), _collection_callback(), h.Recorder(str(tmp_path)), h.SaveAt(1, ckpt)]
    trainer = h.trainer(strategy="ddp_spawn", devices=2, callbacks=callbacks)
    trainer.validate(h.EvalModule(), dataloaders=h.loader(), verbose=False)
    expected = {**_expected("val/", world=2), **_expected("val/cb/", world=2), **_collection_expected("val/")}
    for rank in range(2):  # every rank logged the value of all the data
        _assert_values(torch.load(tmp_path / f"rank{rank}-epoch0.pt"), expected, f"rank {rank}")
    _assert_values(dict(trainer.callback_metrics), expected, "returned to the main process")

    # the checkpoint saved after 2 batches per rank holds the callback states of BOTH ranks
    # (items 0..15); one process resuming from it on the remaining items gets the full value
    seen = 2 * 2 * h.BATCH
    resumed = h.trainer(callbacks=[h.callback()])
    rest = Subset(h.dataset(), range(seen, h.N))
    resumed.validate(h.EvalModule(), dataloaders=h.loader(rest), ckpt_path=ckpt, verbose=False)
    # rows in the checkpoint: rank 0's items 0, 2, ..., 14, then rank 1's 1, 3, ..., 15; then the rest
    order = torch.cat([torch.arange(0, seen, 2), torch.arange(1, seen, 2), torch.arange(seen, h.N)])
    _assert_values(dict(resumed.callback_metrics), h.offline_values("val/cb/", order), "resumed from ddp")


def test_checkpoint_mid_epoch_resume(tmp_path: Path) -> None:
    ds = h.dataset()
    expected = {**_expected("val/"), **_expected("val/cb/")}
    # the run is stopped after 3 of 6 validation batches, with a checkpoint saved at that point
    ckpt = str(tmp_path / "mid.ckpt")
    with pytest.raises(h.Interrupted):
        h.trainer(callbacks=[h.callback(), h.StopAfter(2, ckpt)]).validate(
            h.EvalModule(persistent=True), dataloaders=h.loader(), verbose=False
        )
    rest = Subset(ds, range(3 * h.BATCH, h.N))
    # resumed from the checkpoint: module metrics (persistent states) and the callback's states come back
    trainer = h.trainer(callbacks=[h.callback()])
    trainer.validate(h.EvalModule(persistent=True), dataloaders=h.loader(rest), ckpt_path=ckpt, verbose=False)
    _assert_values(dict(trainer.callback_metrics), expected, "resumed")
    # the test is sensitive: the second half alone gives other values
    fresh = h.trainer(callbacks=[h.callback()])
    fresh.validate(h.EvalModule(), dataloaders=h.loader(rest), verbose=False)
    alone = dict(fresh.callback_metrics)
    assert any(abs(float(alone[k]) - v) > 1e-3 for k, v in expected.items())


def test_callback_input_errors() -> None:
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        EmbeddingMetricsCallback({"a": MeanMetric(), "b": MeanMetric()}, {"a": ["x"]})
    with pytest.raises(TypeError, match="Argument `metrics`"):
        EmbeddingMetricsCallback({}, {"value": "x"})
    with pytest.raises(ValueError, match="Argument `stages`"):
        EmbeddingMetricsCallback({"a": MeanMetric()}, {"value": "x"}, stages=("train",))
    cb = EmbeddingMetricsCallback({"a": MeanMetric()}, {"value": "x"})
    with pytest.raises(KeyError, match="returned no key 'x'"):
        cb.on_validation_batch_end(None, None, {"y": torch.ones(1)}, None, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="return a dict"):
        cb.on_validation_batch_end(None, None, torch.ones(1), None, 0)  # type: ignore[arg-type]


def test_flatten_value_names_per_k() -> None:
    m = em.ContrastiveAccuracy(topk=(1, 5))
    values = flatten_value("val/acc", torch.tensor([0.25, 0.75]), m)
    assert list(values) == ["val/acc@1", "val/acc@5"]
    assert float(values["val/acc@5"]) == 0.75


def _representation_callback(knn: bool) -> EmbeddingMetricsCallback:
    metrics: dict[str, Any] = {"rankme": em.RankMe(), "cka": em.LinearCKA(), "lidar": em.LiDAR()}
    inputs: dict[str, Any] = {"rankme": ["z1"], "cka": ["z1", "z2"], "lidar": ["z1", "labels"]}
    if knn:  # the first half of the items is the bank, the second half the queries
        metrics["knn"] = em.KNNAccuracy(k=3, top=(1, 2))
        inputs["knn"] = lambda out: {
            "embeddings": out["z1"],
            "labels": out["labels"],
            "role": "bank" if int(out["query"][0]) < h.N // 2 else "query",
        }
    return EmbeddingMetricsCallback(metrics, inputs, name_format="{stage}/rep/{name}")


def _representation_expected(knn: bool) -> dict[str, float]:
    z1, z2, labels = h.dataset().tensors[:3]
    out = {
        "val/rep/rankme": float(em.functional.rankme(z1)),
        "val/rep/cka": float(em.functional.linear_cka(z1, z2)),
        "val/rep/lidar": float(em.functional.lidar(z1, labels)),
    }
    if knn:
        half = h.N // 2
        acc = em.functional.knn_accuracy(z1[:half], labels[:half], z1[half:], labels[half:], k=3, top=(1, 2))
        out["val/rep/knn@1"], out["val/rep/knn@2"] = float(acc[0]), float(acc[1])
    return out


def test_representation_metrics_in_the_callback(tmp_path: Path) -> None:
    trainer = h.trainer(callbacks=[_representation_callback(knn=True)])
    trainer.validate(h.EvalModule(), dataloaders=h.loader(), verbose=False)
    _assert_values(dict(trainer.callback_metrics), _representation_expected(knn=True), "single device")
    # two processes: the sufficient statistics are summed across ranks, the value is the same
    trainer = h.trainer(strategy="ddp_spawn", devices=2, callbacks=[_representation_callback(knn=False)])
    trainer.validate(h.EvalModule(), dataloaders=h.loader(), verbose=False)
    _assert_values(dict(trainer.callback_metrics), _representation_expected(knn=False), "ddp_spawn")


def test_dense_retrieval_in_the_callback() -> None:
    """Queries and corpus logged from the validation step; one value per epoch, the same on 1 and 2 devices
    (under DDP each rank keeps its corpus rows and the top lists are merged)."""
    z1, z2 = h.dataset().tensors[:2]
    half = h.N // 2
    expected_values = em.functional.dense_retrieval(
        z1[half:],
        z2[:half],
        h.DENSE_QRELS,
        query_ids=torch.arange(half, h.N),
        k=(1, 3),
        metrics=("ndcg", "recall"),
    )
    expected = {f"val/dense/{key}": float(v) for key, v in expected_values.items()}

    def callback() -> EmbeddingMetricsCallback:
        metric = em.DenseRetrieval(h.DENSE_QRELS, k=(1, 3), metrics=("ndcg", "recall"))
        return EmbeddingMetricsCallback({"dense": metric}, {"dense": h.dense_inputs})

    for kwargs in ({}, {"strategy": "ddp_spawn", "devices": 2}):
        trainer = h.trainer(callbacks=[callback()], **kwargs)
        trainer.validate(h.EvalModule(), dataloaders=h.loader(), verbose=False)
        _assert_values(dict(trainer.callback_metrics), expected, str(kwargs))


class _IntervalModule(pl.LightningModule):
    """Logs the nDCG@3 of the validation set with its bootstrap interval (``ConfidenceInterval``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ndcg = em.ConfidenceInterval(em.RetrievalNormalizedDCG(k=3, aggregation="none"), n_resamples=500)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        preds, target = batch
        self.ndcg.update(preds, target)

    def on_validation_epoch_end(self) -> None:
        self.log_dict({f"val/ndcg_{k}": v for k, v in self.ndcg.compute().items()})
        self.ndcg.reset()


def test_confidence_interval_logs_value_and_bounds() -> None:
    gen = torch.Generator().manual_seed(0)
    preds, target = torch.rand(40, 8, generator=gen), torch.rand(40, 8, generator=gen) < 0.3
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(preds, target), batch_size=16)
    trainer = h.trainer()
    trainer.validate(_IntervalModule(), dataloaders=loader, verbose=False)
    logged = dict(trainer.callback_metrics)
    per_query = em.functional.retrieval_normalized_dcg(preds, target, k=3, aggregation="none")
    ci = em.functional.bootstrap_ci(per_query, n_resamples=500)
    _assert_values(
        logged,
        {
            "val/ndcg_value": float(ci.mean),
            "val/ndcg_ci_low": float(ci.low),
            "val/ndcg_ci_high": float(ci.high),
        },
        "ConfidenceInterval",
    )
    assert (
        float(logged["val/ndcg_ci_low"]) < float(logged["val/ndcg_value"]) < float(logged["val/ndcg_ci_high"])
    )
