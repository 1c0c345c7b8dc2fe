"""A corpus streamed through ``DenseRetrieval`` inside a LightningModule: a checkpoint saved by a real
``lightning.Trainer`` mid-epoch (after some validation batches) resumes the stream, and the epoch's
value equals the uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import embedmetrics as em
from _seeding import seeded

N_Q, N_DOCS, DIM, BATCH = 12, 96, 6, 16


def _data() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    docs = torch.randint(-2, 3, (N_DOCS, DIM), generator=g).float()
    queries = torch.randint(-2, 3, (N_Q, DIM), generator=g).float()
    pairs = torch.unique(torch.randint(0, N_DOCS, (N_Q * 4,), generator=g).view(N_Q, 4), dim=1)
    rows = torch.arange(N_Q).repeat_interleave(pairs.shape[1])
    grades = torch.randint(0, 3, (rows.numel(),), generator=g)
    return {"docs": docs, "queries": queries, "qrels": torch.stack([rows, pairs.reshape(-1), grades], 1)}


class Streaming(pl.LightningModule):
    """Validation batches are corpus chunks folded into the metric's running lists."""

    def __init__(self) -> None:
        super().__init__()
        data = _data()
        self.layer = torch.nn.Linear(1, 1)
        self.metric = em.DenseRetrieval(data["qrels"], k=(1, 5), depth=10, aggregation="none")
        self.metric.persistent(True)
        self.metric.set_queries(data["queries"], torch.arange(N_Q))

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        docs, ids = batch
        self.metric.update(docs, ids, role="corpus")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(rows: slice) -> DataLoader[Any]:
    data = _data()
    ids = torch.arange(N_DOCS)
    return DataLoader(TensorDataset(data["docs"][rows], ids[rows]), batch_size=BATCH, shuffle=False)


def _trainer(tmp_path: Path) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )  # fmt: skip


def test_a_checkpoint_taken_mid_epoch_resumes_the_stream(tmp_path: Path) -> None:
    with seeded(0):  # the model's layer and the Trainer draw from the global generators
        _check_resume(tmp_path)


def _check_resume(tmp_path: Path) -> None:
    whole = Streaming()
    _trainer(tmp_path).validate(whole, _loader(slice(None)), verbose=False)
    expected = whole.metric.compute()

    first = Streaming()
    trainer = _trainer(tmp_path)
    trainer.validate(first, _loader(slice(0, 48)), verbose=False)  # three of six batches, then a checkpoint
    path = tmp_path / "mid.ckpt"
    trainer.save_checkpoint(path)

    resumed = Streaming.load_from_checkpoint(path)
    assert int(resumed.metric.stream_n_docs) == 48
    _trainer(tmp_path).validate(resumed, _loader(slice(48, None)), verbose=False)
    got = resumed.metric.compute()
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key].nan_to_num(7.0), expected[key].nan_to_num(7.0)), key
