"""Distributed evaluation with embedmetrics: every rank evaluates its share, every rank gets the total.

Run on CPU (gloo)::

    torchrun --nproc_per_node=2 examples/distributed_eval.py

and unchanged on GPUs (NCCL, one process per GPU)::

    torchrun --nproc_per_node=4 examples/distributed_eval.py

Each rank takes items ``rank, rank + world, ...`` of a synthetic data set (like
``DistributedSampler(shuffle=False)`` but without its padding, which would count items twice),
feeds them batch by batch, and calls ``compute``: the states are gathered, the O(n^2) scans are
split across the ranks, and every rank prints the same values. Rank 0 then checks them against
one process computing on all the data.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torchmetrics import Metric

import embedmetrics as em

N_ITEMS, DIM, DOCS, BATCH = 1000, 32, 20, 64


def make_data() -> dict[str, torch.Tensor]:
    """Per item ``i``: two views of an embedding, a class label, and query ``i`` with scored documents."""
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(N_ITEMS, DIM, generator=g)
    return {
        "z1": z1,
        "z2": z1 + 1.5 * torch.randn(N_ITEMS, DIM, generator=g),
        "labels": torch.randint(0, 10, (N_ITEMS,), generator=g),
        "scores": torch.rand(N_ITEMS, DOCS, generator=g),
        "relevant": torch.rand(N_ITEMS, DOCS, generator=g) < 0.1,
    }


def make_metrics(device: torch.device, **kwargs: bool) -> dict[str, Metric]:
    metrics: dict[str, Metric] = {
        "hit_rate@10": em.RetrievalHitRate(k=10, **kwargs),
        "contrastive_acc@(1,5)": em.ContrastiveAccuracy(topk=(1, 5), **kwargs),
        "uniformity": em.Uniformity(**kwargs),
        "accuracy": em.EmbeddingAccuracy(exclude=("NMI", "AMI"), **kwargs),
    }
    return {name: m.to(device) for name, m in metrics.items()}


def update(metrics: dict[str, Metric], data: dict[str, torch.Tensor], items: torch.Tensor) -> None:
    """One batch: ``items`` are dataset indices, also the retrieval query ids (unique across ranks)."""
    b = {k: v[items] for k, v in data.items()}
    metrics["hit_rate@10"].update(
        b["scores"].reshape(-1), b["relevant"].reshape(-1), indexes=items.repeat_interleave(DOCS)
    )
    metrics["contrastive_acc@(1,5)"].update(b["z1"], b["z2"])
    metrics["uniformity"].update(b["z1"])
    metrics["accuracy"].update(b["z1"], b["labels"])


def as_floats(values: dict[str, object]) -> dict[str, list[float]]:
    out = {}
    for name, value in values.items():
        parts = value.values() if isinstance(value, dict) else [value]
        out[name] = [float(x) for p in parts for x in torch.as_tensor(p).reshape(-1)]
    return out


def main() -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    data = {k: v.to(device) for k, v in make_data().items()}
    metrics = make_metrics(device)
    mine = torch.arange(rank, N_ITEMS, world, device=device)  # this rank's dataset indices
    for start in range(0, mine.numel(), BATCH):
        update(metrics, data, mine[start : start + BATCH])

    values = as_floats({name: m.compute() for name, m in metrics.items()})  # synced: every rank
    shown = {name: [round(v, 4) for v in vals] for name, vals in values.items()}
    print(f"rank {rank}/{world} ({mine.numel()} items, {device}): {shown}", flush=True)

    # every rank got the same values; rank 0 checks them against one process on all the data
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, values)
    if rank == 0:
        assert all(g == values for g in gathered), "ranks disagree"
        alone = make_metrics(device, sync_on_compute=False)
        order = torch.cat([torch.arange(r, N_ITEMS, world, device=device) for r in range(world)])
        update(alone, data, order)  # the gathered rows are rank 0's, then rank 1's, ...
        expected = as_floats({name: m.compute() for name, m in alone.items()})
        for name, vals in expected.items():
            assert torch.allclose(torch.tensor(values[name]), torch.tensor(vals), atol=1e-6), name
        print(f"OK: {world} ranks agree with one process on all {N_ITEMS} items", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
