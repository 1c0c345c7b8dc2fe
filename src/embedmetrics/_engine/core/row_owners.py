"""Identical rows on different processes: one owner multiplies them all (the kNN vote's bank).

Within one process, identical corpus rows get bit-identical keys because each distinct row is
multiplied once (``embedmetrics._engine.core.distinct``). Rows on *different* processes are multiplied in
different products, whose kernels may round the same pair differently (edge tiles): a tie would then be
decided by the rank that holds a row. ``route_identical_rows`` prevents it: every process hashes
its rows (two independent 64-bit hashes of the canonical bits), the hashes are gathered, and each row
whose hash a lower rank also holds is handed, as its id only, to the lowest such rank, which scans it
as one more copy of its own identical row. The second hash verifies each hand-over (a mismatch, i.e. a
collision of the first hash, raises the same error on every process). Communication: the distinct
hashes of every process and the ids of the handed-over rows; the corpus itself never moves.
Dense retrieval needs none of it: its lists rank by canonical keys, the same bits on any process
(``embedmetrics._engine.dense.exact_lists``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from embedmetrics._engine.core.distinct import row_hash

#: Seed of the second, verifying row hash.
_CHECK_SEED = 0xC0FFEE


def gather_same(t: Tensor) -> list[Tensor]:
    """``t`` (the same shape on every process) from every process, in rank order; a collective."""
    bucket = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(bucket, t.contiguous())
    return bucket


def gather_rows(t: Tensor) -> list[Tensor]:
    """``t`` (any number of rows) from every process, in rank order; a collective."""
    sizes = gather_same(torch.tensor([t.shape[0]], dtype=torch.int64, device=t.device))
    counts = [int(s) for s in sizes]
    padded = t.new_zeros((max(1, *counts), *t.shape[1:]))
    padded[: t.shape[0]] = t
    return [b[:n] for b, n in zip(gather_same(padded), counts)]


def route_identical_rows(corpus: Tensor, corpus_ids: Tensor) -> tuple[Tensor, Tensor]:
    """This process's rows to scan: its own, less those a lower rank also holds, plus copies of its own
    rows for the ids that higher ranks handed over. A collective (every process must call it)."""
    rank = dist.get_rank()
    first, check = row_hash(corpus), row_hash(corpus, seed=_CHECK_SEED)
    mine = torch.unique(first)
    held = gather_rows(mine)
    lower = torch.cat(held[:rank]) if rank > 0 else mine[:0]
    give = torch.isin(first, lower)
    offers = gather_rows(torch.stack([first[give], check[give], corpus_ids[give]], dim=1))
    incoming = torch.cat([o for src, o in enumerate(offers) if src > rank] or [offers[rank][:0]])
    incoming = incoming[torch.isin(incoming[:, 0], mine) & ~torch.isin(incoming[:, 0], lower)]
    order = torch.argsort(first)
    at = torch.searchsorted(first[order], incoming[:, 0].contiguous())
    source = order[at.clamp_max(max(0, order.numel() - 1))]
    mismatch = torch.tensor([float(bool((check[source] != incoming[:, 1]).any()))], device=corpus.device)
    dist.all_reduce(mismatch, op=dist.ReduceOp.MAX)
    if float(mismatch) > 0:
        raise RuntimeError(
            "Two different corpus rows on different processes share a 64-bit row hash; identical-row "
            "routing cannot tell them apart (please report this: it should practically never happen)."
        )
    keep = ~give
    return torch.cat([corpus[keep], corpus[source]]), torch.cat([corpus_ids[keep], incoming[:, 2]])
