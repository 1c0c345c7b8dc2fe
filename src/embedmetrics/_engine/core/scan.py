"""Blocks and shards of every scan: the one block planner, per-device budgets, sharding, all-reduce.

Every pairwise scan (contrastive accuracy, uniformity, the kNN scan, k-means assignment) processes
query rows in blocks of ``B`` rows against all reference rows: one matrix product per block, from
which each metric keeps only the reductions it needs. Nothing allocates an ``n x n`` matrix: peak
extra memory is ``O(B * n_ref)``, with ``B`` from ``plan_blocks`` and the byte budget from
``block_budget`` (per device, unless ``block_bytes`` is given).

Distributed: ``shard_blocks`` gives each rank of an initialised process group a contiguous
share of the blocks, and ``all_reduce_sum`` combines the partial results, so the O(n^2) work
is split across ranks instead of repeated on each.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import Tensor

#: Default budget for one similarity block on the CPU (bytes of the block matrix).
DEFAULT_BLOCK_BYTES = 64 * 2**20
#: Largest default budget on a CUDA device (the kNN scan ran 3.6x faster on an H100 with 4 GiB
#: blocks than with 256 MiB: fewer, larger kernels); ``block_bytes`` can ask for more.
CUDA_BLOCK_CAP = 4 * 2**30


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype the scan accumulates in: float64 stays float64, everything else is float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def block_budget(block_bytes: int | None, device: torch.device, cpu_default: int) -> int:
    """The byte budget of one block: ``block_bytes`` when given, else chosen for ``device``.

    CUDA: a quarter of the free memory (``torch.cuda.mem_get_info``), at most
    ``CUDA_BLOCK_CAP`` and at least ``cpu_default``: large blocks keep the GPU busy with few large
    kernels. Other devices: ``cpu_default``, the family's measured cache-friendly size.
    """
    if block_bytes is not None:
        return block_bytes
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return max(cpu_default, min(CUDA_BLOCK_CAP, free // 4))
    return cpu_default


def plan_blocks(
    n_rows: int,
    row_bytes: int,
    budget: int,
    shard: tuple[int, int] | None = None,
    *,
    strided: bool = False,
) -> tuple[int, list[tuple[int, int]]]:
    """The one block planner of every scan: ``(rows per block, this shard's row ranges)``.

    A block of ``rows`` rows takes about ``rows * row_bytes <= budget`` bytes. Contiguous sharding
    (the default) caps blocks at ``ceil(n_rows / world)`` rows so every rank gets work, and gives each
    rank a contiguous run of blocks (``shard_blocks``). ``strided`` deals blocks round-robin
    instead, without the cap: for a triangle, whose blocks shrink towards the end.
    """
    rows = block_rows_for(row_bytes, budget)
    if strided:
        rows = min(max(n_rows, 1), rows)
        ranges = block_ranges(n_rows, rows)
        if shard is not None and shard[1] > 1:
            ranges = ranges[shard[0] :: shard[1]]
        return rows, ranges
    rows = rows_for_shard(n_rows, rows, shard)
    return rows, shard_blocks(block_ranges(n_rows, rows), shard)


def block_rows_for(row_bytes: int, budget: int) -> int:
    """Rows of one block: as many rows of ``row_bytes`` as fit in ``budget`` (at least one)."""
    if budget < 1:
        raise ValueError(f"Argument `block_bytes` must be a positive integer, got {budget!r}.")
    return max(1, budget // max(1, row_bytes))


def l2_normalize(z: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """Divide each row by ``max(norm, eps)`` (the seeds' convention for ``eps``), into ``out`` when given.

    On the CPU, a row whose norm is finite and at least ``_plain_floor`` (squares that underflow cannot
    move it) is divided as it is: ``z / max(norm, eps)``. Any other row (huge or tiny finite values,
    NaN), and every row elsewhere, is first scaled by a power of two (exact) to its largest magnitude, so
    its norm neither overflows nor underflows (``_scaled_normalize``). The choice is the row's own: a
    row's quotient never depends on the other rows. Temporaries: one value per row (and one copy of
    ``z`` where it needs a gradient)."""
    if z.numel() == 0:
        return z.clone() if out is None else out.copy_(z)
    if z.requires_grad or z.device.type != "cpu":  # no host sync (nor data) off the CPU: all scaled
        return _scaled_normalize(z, eps, out)
    norms = z.norm(dim=1, keepdim=True)
    odd = (~torch.isfinite(norms) | (norms < _plain_floor(z.dtype))).view(-1).nonzero().view(-1)
    odd_rows = z[odd]  # a copy, before ``out`` (which may be ``z``) is written
    plain = torch.zeros_like(norms, dtype=torch.int32)
    result = _divide_rows(z, norms, plain, eps, out)
    if odd.numel() > 0:
        result[odd] = _scaled_normalize(odd_rows, eps, None)
    return result


def _plain_floor(dtype: torch.dtype) -> float:
    """The smallest norm divided as it is: ``tiny**(1/4)`` (``tiny`` the smallest normal number), so the
    row's squares sum to at least ``tiny**(1/2)``, and the squares lost to underflow (each below
    ``tiny``) are far below its last bit."""
    return float(2.0 ** (math.log2(torch.finfo(dtype).tiny) / 4))


def row_norms(z: Tensor) -> Tensor:
    """The Euclidean norm of each row of ``z`` (float64), free of underflow and overflow: taken as it is
    where ``l2_normalize`` divides a row as it is (a finite norm of at least ``_plain_floor``), else of
    the row scaled by a power of two to its largest magnitude (``_power_of_two_scale``; a row holding an
    infinity keeps an infinite norm, a NaN a NaN one)."""
    norms: Tensor = z.norm(dim=1).double()
    odd = (~torch.isfinite(norms) | (norms < _plain_floor(z.dtype))).nonzero().view(-1)
    if odd.numel() > 0 and z.shape[1] > 0:  # rows of no column: a norm of 0
        rows = z[odd]
        scale, exponent = _power_of_two_scale(rows)
        norms[odd] = torch.ldexp((rows * scale).norm(dim=1, keepdim=True).double(), exponent).view(-1)
    return norms


def rows_at(table: Tensor, index: Tensor) -> Tensor:
    """``table[index]`` for an int64 ``index`` of any shape, by one ``index_select`` (advanced indexing
    costs several times more on the CPU)."""
    return table.index_select(0, index.reshape(-1)).view(*index.shape, *table.shape[1:])


def _power_of_two_scale(z: Tensor) -> tuple[Tensor, Tensor]:
    """Per row (``(rows, 1)``), the power of two ``2**-e`` that scales the row's largest magnitude into
    ``[0.5, 1)`` (exact; ``e`` clamped to the normal powers of two), and ``e``."""
    limit = int(math.log2(torch.finfo(z.dtype).max)) - 1  # 2**-limit .. 2**limit: normal powers of two
    # two reductions: ``torch.aminmax`` along rows is an order of magnitude slower on CPU (torch 2.13)
    high, low = z.detach().amax(dim=1, keepdim=True), z.detach().amin(dim=1, keepdim=True)
    _, exponent = torch.frexp(torch.maximum(high, -low))
    exponent = exponent.clamp(-limit, limit)
    return torch.ldexp(torch.ones_like(high), -exponent), exponent


def _scaled_normalize(z: Tensor, eps: float, out: Tensor | None) -> Tensor:
    """``l2_normalize`` with every row scaled by a power of two to its largest magnitude first."""
    scale, exponent = _power_of_two_scale(z)  # torch's ldexp has no right gradient for
    if z.requires_grad:  # integer exponents: a plain product by the power of two instead
        scaled = z * scale
        return _divide_rows(scaled, scaled.norm(dim=1, keepdim=True), exponent, eps, out)
    scaled = torch.mul(z, scale, out=out) if out is not None else z * scale
    return _divide_rows(scaled, scaled.norm(dim=1, keepdim=True), exponent, eps, scaled)


def _divide_rows(scaled: Tensor, norms: Tensor, exponent: Tensor, eps: float, out: Tensor | None) -> Tensor:
    """``scaled`` (rows times ``2**-exponent``) over ``max(norm, eps)`` at the same scale, in place into
    ``out`` when given: ``eps * 2**-exponent`` is exact, so the quotient is ``z / eps`` bit for bit."""
    at_scale = torch.ldexp(torch.full_like(norms, eps, dtype=torch.float64), -exponent)
    divisor = torch.where(norms.double() < at_scale, at_scale, norms.double()).to(scaled.dtype)
    return torch.div(scaled, divisor) if out is None else torch.div(scaled, divisor, out=out)


def rows_for_shard(n_rows: int, rows_per_block: int, shard: tuple[int, int] | None) -> int:
    """Cap a block size so that every rank of ``shard`` gets a share of the ``n_rows`` query rows.

    Sharding hands out whole blocks; with a large memory budget a scan can be a single block, which
    would leave all the work to one rank. Capping the block at ``ceil(n_rows / world)`` rows keeps
    per-rank work near ``1 / world`` whatever the budget. Every rank computes the same cap, so all
    ranks agree on one block partition.
    """
    world = shard[1] if shard is not None else 1
    if world <= 1:
        return rows_per_block
    return max(1, min(rows_per_block, -(-n_rows // world)))


def block_ranges(n_rows: int, rows_per_block: int) -> list[tuple[int, int]]:
    """Half-open row ranges ``[start, stop)`` covering ``n_rows`` in blocks."""
    return [(s, min(s + rows_per_block, n_rows)) for s in range(0, n_rows, rows_per_block)]


def process_group_shard() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, or ``(0, 1)`` when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_blocks(
    ranges: list[tuple[int, int]], shard: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """The contiguous share of ``ranges`` that rank ``shard[0]`` of ``shard[1]`` scans."""
    rank, world = shard if shard is not None else (0, 1)
    if world <= 1:
        return ranges
    per, extra = divmod(len(ranges), world)
    start = rank * per + min(rank, extra)
    return ranges[start : start + per + (1 if rank < extra else 0)]


def iter_similarity_blocks(
    queries: Tensor,
    references: Tensor,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    shard: tuple[int, int] | None = None,
) -> Iterator[tuple[int, int, Tensor]]:
    """Yield ``(start, stop, queries[start:stop] @ references.T)`` block by block.

    Inputs are expected in the accumulation dtype already (see ``compute_dtype``).
    """
    row_bytes = references.shape[0] * queries.element_size()
    for start, stop in plan_blocks(queries.shape[0], row_bytes, block_bytes, shard)[1]:
        yield start, stop, queries[start:stop] @ references.T


def all_reduce_sum(tensor: Tensor, shard: tuple[int, int] | None) -> Tensor:
    """Sum ``tensor`` over the ranks of the default group when the scan was sharded."""
    if shard is not None and shard[1] > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def metric_shard(metric: object) -> tuple[int, int] | None:
    """The scan shard for a ``Metric.compute`` call, or ``None`` to scan everything locally.

    Only when the metric's states were really gathered from every rank (torchmetrics sets
    ``_is_synced`` inside ``compute`` then) does every rank hold all rows, so that each can scan
    its share of the blocks and ``all_reduce_sum`` can combine them. ``forward``'s batch
    value and unsynced computes are never sharded, so no collective runs on local-only data.
    """
    if not getattr(metric, "_is_synced", False):
        return None
    rank, world = process_group_shard()
    return (rank, world) if world > 1 else None
