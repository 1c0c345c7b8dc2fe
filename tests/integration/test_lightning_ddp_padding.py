"""Under DDP, Lightning's ``DistributedSampler`` pads an evaluation set of ``N`` items to a multiple of the
number of processes by repeating its first items (issue 49, item 9: 399 items on 2 processes logged
``ContrastiveAccuracy`` and ``Uniformity`` over 400 rows, silently). ``EmbeddingMetricsCallback`` warns
once per stage, on rank zero, with the number of repeated items and the metrics they reach; a set the
processes divide evenly, or one process, gives no warning. ``DenseRetrieval``, given ids, counts the
repeated item (the same id, the same embedding) once: it logs the value of the 23 items, is named apart
in the warning, and alone gives none."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Subset

import embedmetrics as em
from embedmetrics.integrations.lightning import RepeatedRowsWarning, repeated_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _lightning_helpers as h
from _dist import run_distributed
from _seeding import seeded

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*does not have many workers.*",
    "ignore:.*GPU available but not used.*",
    "ignore:.*DistributedSampler.*recommended.*",
)

NAMES = ("hit_rate@3", "contrastive_acc", "uniformity", "accuracy")
#: Item ``i`` is query ``i`` (its ``z1``) and document ``i`` (its ``z2``), relevant to query ``i`` (grade
#: 1 or 2); query ``i`` also judges document ``(5 i + 1) mod N`` relevant.
DENSE_QRELS = torch.tensor(
    [[i, i, 1 + i % 2] for i in range(h.N)] + [[i, (5 * i + 1) % h.N, 1] for i in range(h.N) if i % 5 != 1]
)


def _dense() -> em.DenseRetrieval:
    return em.DenseRetrieval(DENSE_QRELS, k=(1, 3), metrics=("ndcg", "precision", "map"))


def _dense_items(out: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """The ``DenseRetrieval.update`` calls of one batch: each item as a query and as a document."""
    ids = out["query"][:: h.DOCS]
    return [
        {"embeddings": out["z1"], "ids": ids, "role": "query"},
        {"embeddings": out["z2"], "ids": ids, "role": "corpus"},
    ]


def _streamed_items(out: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """The streamed ``DenseRetrieval``'s update of one batch: each item as a document."""
    return [{"embeddings": out["z2"], "ids": out["query"][:: h.DOCS], "role": "corpus"}]


def _callback(dense_only: bool = False) -> Any:
    """The helpers' callback and ``dense``, a ``DenseRetrieval`` (``dense_only``: it alone, and
    ``streamed``, one streaming the corpus against the 23 items' queries)."""
    from embedmetrics.integrations.lightning import EmbeddingMetricsCallback

    metrics = {} if dense_only else h.make_metrics()
    inputs = {} if dense_only else dict(h.CALLBACK_INPUTS)
    metrics["dense"], inputs["dense"] = _dense(), _dense_items
    if dense_only:
        metrics["streamed"], inputs["streamed"] = _dense(), _streamed_items
        metrics["streamed"].set_queries(h.dataset().tensors[0][:23], torch.arange(23))
    return EmbeddingMetricsCallback(metrics, inputs, name_format="{stage}/cb/{name}")


def _dense_values(n_items: int) -> dict[str, float]:
    """``dense``'s values over the first ``n_items`` items, on one process."""
    metric = _dense()
    z1, z2 = h.dataset().tensors[:2]
    metric.update(z1[:n_items], torch.arange(n_items), role="query")
    metric.update(z2[:n_items], torch.arange(n_items), role="corpus")
    return {key: float(v) for key, v in metric.compute().items()}


@pytest.fixture(autouse=True)
def _seeded_global_generators() -> Iterator[None]:
    with seeded(0):  # model initialisation and Lightning itself draw from the global generators
        yield


def _evaluate(
    trainer: Any, callback: Any, stage: str, n_items: int, unrepeated: bool = False
) -> tuple[list[str], dict[str, float]]:
    """Run one stage on the first ``n_items`` items (``unrepeated``: through Lightning's
    ``UnrepeatedDistributedSampler``); the messages of the ``RepeatedRowsWarning``s it gave and the values
    it logged."""
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
    from torch.utils.data import DataLoader

    run = trainer.validate if stage == "validate" else trainer.test
    data = Subset(h.dataset(), range(n_items))
    sampler = UnrepeatedDistributedSampler(data, shuffle=False) if unrepeated else None
    loader = DataLoader(data, batch_size=h.BATCH, sampler=sampler) if unrepeated else h.loader(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(h.EvalModule(), dataloaders=loader, verbose=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, RepeatedRowsWarning)]
    return messages, {k: float(v) for k, v in trainer.callback_metrics.items()}


def _ddp_stages(rank: int, world: int) -> dict[str, Any]:
    """One rank of a 2-process ``ddp`` run inside the gloo group ``_dist`` made (Lightning finds the
    group initialised and the processes launched: ``LOCAL_RANK`` is set): each stage's warnings, twice
    on 23 items (odd: one repeated), on 24 (even), the test stage on 21."""
    os.environ.update(
        {"LOCAL_RANK": str(rank), "NODE_RANK": "0", "RANK": str(rank), "WORLD_SIZE": str(world)}
    )
    with seeded(0):
        callback = _callback()
        trainer = h.trainer(strategy="ddp", devices=world, callbacks=[callback])
        out: dict[str, Any] = {}
        out["val_odd"], out["val_odd_values"] = _evaluate(trainer, callback, "validate", 23)
        out["val_odd_again"], _ = _evaluate(trainer, callback, "validate", 23)
        alone = _callback(dense_only=True)  # every metric counts the repeat once: nothing to warn of
        trainer = h.trainer(strategy="ddp", devices=world, callbacks=[alone])
        out["dense_only"], out["dense_only_values"] = _evaluate(trainer, alone, "validate", 23)
        even = h.callback()
        trainer = h.trainer(strategy="ddp", devices=world, callbacks=[even])
        out["val_even"], out["val_even_values"] = _evaluate(trainer, even, "validate", 24)
        out["test_odd"], _ = _evaluate(trainer, even, "test", 21)
        unrepeated = h.callback()  # the docs' remedy: a sampler that repeats nothing
        trainer = h.trainer(
            strategy="ddp", devices=world, callbacks=[unrepeated], use_distributed_sampler=False
        )
        out["unrepeated"], out["unrepeated_values"] = _evaluate(trainer, unrepeated, "validate", 23, True)
    return out


def _uniformity(rows: torch.Tensor) -> float:
    metric = em.Uniformity()
    metric.update(h.dataset().tensors[0][rows])
    return float(metric.compute())


def test_ddp_padding_is_warned_once_per_stage_with_its_count() -> None:
    ranks = run_distributed(_ddp_stages, 2, timeout=400.0)
    zero, one = ranks
    assert len(zero["val_odd"]) == 1  # once per stage, on rank zero only
    message = zero["val_odd"][0]
    assert "the validation loader's DistributedSampler repeats 1 of its 23 items" in message
    assert "multiple of the 2 processes" in message
    for name in NAMES:
        assert f"`{name}`" in message  # the callback's names of its metrics
    assert "`dense`, given ids, count(s) an item repeated exactly (same id, same rows) once" in message
    assert "`dense` count" not in message.split(";")[0]  # not among those that count it twice
    # DenseRetrieval: query 0 and document 0 on both ranks, counted once: the value of the 23 items; the
    # streamed corpus too (issue 58, item 2), bit for bit the stored route's
    for values in (zero["val_odd_values"], one["val_odd_values"], zero["dense_only_values"]):
        for key, value in _dense_values(23).items():
            assert values[f"val/cb/dense/{key}"] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    for values in (zero["dense_only_values"], one["dense_only_values"]):
        for key in _dense_values(23):
            assert values[f"val/cb/streamed/{key}"] == values[f"val/cb/dense/{key}"], key
    assert zero["dense_only"] == [] == one["dense_only"]
    assert zero["val_odd_again"] == []  # the same stage again: warned already
    assert one["val_odd"] == one["val_odd_again"] == one["test_odd"] == []
    assert zero["val_even"] == [] == one["val_even"]  # 24 items on 2 processes: nothing repeated
    assert len(zero["test_odd"]) == 1
    assert "the test loader's DistributedSampler repeats 1 of its 21 items" in zero["test_odd"][0]
    # what the warning is about: rank 1's last item is item 0 again, and the logged uniformity counts it
    padded = torch.cat([torch.arange(0, 23, 2), torch.arange(1, 23, 2), torch.tensor([0])])
    logged = zero["val_odd_values"]["val/cb/uniformity"]
    assert logged == pytest.approx(_uniformity(padded), rel=1e-5, abs=1e-6)
    assert logged != pytest.approx(_uniformity(torch.arange(23)), rel=1e-5, abs=1e-6)
    even = zero["val_even_values"]["val/cb/uniformity"]
    assert even == pytest.approx(_uniformity(torch.arange(24)), rel=1e-5, abs=1e-6)
    # a sampler that repeats nothing (ranks of 12 and 11 items): no warning, the value of the 23 items
    assert zero["unrepeated"] == [] == one["unrepeated"]
    only = zero["unrepeated_values"]["val/cb/uniformity"]
    assert only == pytest.approx(_uniformity(torch.arange(23)), rel=1e-5, abs=1e-6)


def test_one_process_gives_no_warning() -> None:
    callback = h.callback()
    messages, _ = _evaluate(h.trainer(callbacks=[callback]), callback, "validate", 23)
    assert messages == []


@pytest.mark.parametrize(("n", "world", "repeated"), [(399, 2, 1), (400, 2, 0), (22, 3, 2), (1, 4, 3)])
def test_repeated_rows_is_what_distributed_sampler_adds(n: int, world: int, repeated: int) -> None:
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False)
    assert repeated_rows(n, world) == repeated == sampler.total_size - n
