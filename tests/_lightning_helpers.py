"""A LightningModule and data shared by ``test_lightning.py`` (a module of its own, so that the
processes ``strategy="ddp_spawn"`` starts can import it by name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import Metric

import embedmetrics as em
from embedmetrics.integrations.lightning import EmbeddingMetricsCallback, flatten_value

N, DIM, DOCS, BATCH = 24, 8, 5, 4  # N divisible by 2 * BATCH: DistributedSampler pads nothing


def dataset(seed: int = 0) -> TensorDataset:
    """Per item ``i``: two views ``z1, z2``, a class label, and a query ``i`` with ``DOCS`` scored docs."""
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(N, DIM, generator=g)
    z2 = z1 + 0.8 * torch.randn(N, DIM, generator=g)
    labels = torch.randint(0, 4, (N,), generator=g)
    scores = torch.rand(N, DOCS, generator=g)
    relevance = torch.rand(N, DOCS, generator=g) < 0.3
    idx = torch.arange(N)  # dataset indices: the retrieval `indexes`, unique across ranks
    return TensorDataset(z1, z2, labels, scores, relevance, idx)


def loader(ds: Any = None) -> DataLoader[Any]:
    return DataLoader(dataset() if ds is None else ds, batch_size=BATCH, shuffle=False)


def make_metrics() -> dict[str, Metric]:
    return {
        "hit_rate@3": em.RetrievalHitRate(k=3),
        "contrastive_acc": em.ContrastiveAccuracy(topk=1),
        "uniformity": em.Uniformity(),
        "accuracy": em.EmbeddingAccuracy(),
    }


def outputs_of(batch: list[Tensor]) -> dict[str, Tensor]:
    """What ``validation_step`` returns: flat retrieval rows and the embeddings."""
    z1, z2, labels, scores, relevance, idx = batch
    return {
        "scores": scores.reshape(-1),
        "relevance": relevance.reshape(-1),
        "query": idx.repeat_interleave(scores.shape[1]),
        "z1": z1,
        "z2": z2,
        "labels": labels,
    }


#: The callback's inputs: ``{metric name: {update argument: key of the step's returned dict}}``.
CALLBACK_INPUTS: dict[str, Any] = {
    "hit_rate@3": {"preds": "scores", "target": "relevance", "indexes": "query"},
    "contrastive_acc": ["z1", "z2"],
    "uniformity": ["z1"],
    "accuracy": ["z1", "labels"],
}


def update_all(metrics: dict[str, Metric], out: dict[str, Tensor]) -> None:
    metrics["hit_rate@3"].update(out["scores"], out["relevance"], indexes=out["query"])
    metrics["contrastive_acc"].update(out["z1"], out["z2"])
    metrics["uniformity"].update(out["z1"])
    metrics["accuracy"].update(out["z1"], out["labels"])


def ddp_order(world: int) -> Tensor:
    """Row order after the state sync of a ``world``-process run: ``DistributedSampler(shuffle=False)``
    gives rank ``r`` items ``r, r + world, ...``, and the gathered states are rank 0's rows, then rank 1's."""
    return torch.cat([torch.arange(r, N, world) for r in range(world)])


def offline_values(prefix: str = "val/", order: Tensor | None = None) -> dict[str, float]:
    """The epoch values computed by hand, one process, all data at once (rows in ``order``).

    The order matters only for NMI/AMI (k-means starts from rows picked by position).
    """
    metrics = make_metrics()
    rows = [t if order is None else t[order] for t in dataset().tensors]
    full = outputs_of(rows)
    update_all(metrics, full)
    values: dict[str, float] = {}
    for name, metric in metrics.items():
        for key, v in flatten_value(prefix + name, metric.compute(), metric).items():
            values[key] = float(v)
    return values


class EvalModule(pl.LightningModule):
    """Logs the metrics with ``self.log`` (metric objects) and ``self.log_dict`` (dict-valued compute)."""

    def __init__(self, persistent: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(DIM, DIM)  # parameters, so that DDP and optimisers have something
        metrics = make_metrics()
        self.hit_rate = metrics["hit_rate@3"]
        self.contrastive_acc = metrics["contrastive_acc"]
        self.uniformity = metrics["uniformity"]
        self.accuracy = metrics["accuracy"]
        if persistent:
            for m in metrics.values():
                m.persistent(True)

    def _metrics(self) -> dict[str, Metric]:
        return {
            "hit_rate@3": self.hit_rate,
            "contrastive_acc": self.contrastive_acc,
            "uniformity": self.uniformity,
            "accuracy": self.accuracy,
        }

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self.layer(batch[0]).pow(2).mean() * 0.0  # the weights stay as they are

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> dict[str, Tensor]:
        out = outputs_of(batch)
        update_all(self._metrics(), out)
        # scalar metrics: log the Metric object; Lightning computes (synced), logs and resets it per epoch
        self.log("val/hit_rate@3", self.hit_rate, on_step=False, on_epoch=True)
        self.log("val/contrastive_acc", self.contrastive_acc, on_step=False, on_epoch=True)
        self.log("val/uniformity", self.uniformity, on_step=False, on_epoch=True)
        return out

    def test_step(self, batch: list[Tensor], batch_idx: int) -> dict[str, Tensor]:
        return outputs_of(batch)  # only the callback evaluates the test stage

    def on_validation_epoch_end(self) -> None:
        # dict-valued compute: compute (synced: every rank gets the same values), log_dict, reset
        values = {f"val/accuracy/{k}": v for k, v in self.accuracy.compute().items()}
        self.log_dict(values, sync_dist=True, reduce_fx="max")
        self.accuracy.reset()


class Recorder(pl.Callback):
    """Writes ``trainer.callback_metrics`` of every rank after each (non-sanity) validation epoch."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.epoch = 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        values = {k: float(v) for k, v in trainer.callback_metrics.items()}
        torch.save(values, Path(self.directory) / f"rank{trainer.global_rank}-epoch{self.epoch}.pt")
        self.epoch += 1


class StopAfter(pl.Callback):
    """Saves a checkpoint after validation batch ``batch`` and stops the run (a crash mid-epoch)."""

    def __init__(self, batch: int, path: str) -> None:
        self.batch = batch
        self.path = path

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        batch_idx = args[2] if len(args) > 2 else kwargs["batch_idx"]
        if batch_idx == self.batch:
            trainer.save_checkpoint(self.path)
            raise Interrupted(self.path)


class SaveAt(pl.Callback):
    """Saves a checkpoint after validation batch ``batch`` (on every rank, as Lightning requires)."""

    def __init__(self, batch: int, path: str) -> None:
        self.batch = batch
        self.path = path

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        batch_idx = args[2] if len(args) > 2 else kwargs["batch_idx"]
        if batch_idx == self.batch and not trainer.sanity_checking:
            trainer.save_checkpoint(self.path)


class Interrupted(RuntimeError):
    pass


def callback() -> EmbeddingMetricsCallback:
    return EmbeddingMetricsCallback(make_metrics(), CALLBACK_INPUTS, name_format="{stage}/cb/{name}")


#: Dense retrieval in the callback: items of the first half are the corpus (their ``z2``), items of the
#: second half the queries (their ``z1``); query ``i`` is relevant to document ``i - N/2`` (grade 1 or 2)
#: and to document ``(5 i + 1) mod N/2`` (grade 1).
DENSE_QRELS = torch.tensor(
    [[i, i - N // 2, 1 + i % 2] for i in range(N // 2, N)]
    + [[i, (5 * i + 1) % (N // 2), 1] for i in range(N // 2, N)]
)


def dense_inputs(out: dict[str, Tensor]) -> list[dict[str, Any]]:
    """The ``DenseRetrieval.update`` calls of one validation batch: its corpus items and its queries (a
    module-level function: the processes of ``ddp_spawn`` unpickle it by name)."""
    ids = out["query"][::DOCS]
    corpus = ids < N // 2
    return [
        {"embeddings": out["z2"][corpus], "ids": ids[corpus], "role": "corpus"},
        {"embeddings": out["z1"][~corpus], "ids": ids[~corpus], "role": "query"},
    ]


def trainer(**kwargs: Any) -> pl.Trainer:
    """A quiet CPU ``Trainer`` (one device, no logger, bar, checkpoint or summary) with ``kwargs`` on top."""
    defaults: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
    }
    return pl.Trainer(**{**defaults, **kwargs})
