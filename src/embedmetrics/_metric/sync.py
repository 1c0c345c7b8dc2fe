"""Deadlock-free state sync for ``"cat"`` states when some ranks made no ``update``.

torchmetrics (1.9) gathers a ``dist_reduce_fx="cat"`` list state that is empty on a rank as a
placeholder ``torch.tensor([], dtype=metric.dtype)``: one-dimensional and floating point. When the
other ranks hold two-dimensional embeddings (``(n, d)``) or integer / boolean tensors (labels,
``indexes``, relevance), the shapes or byte sizes of the collectives no longer match: gloo aborts
the process ("Received data size doesn't match expected size") and NCCL can hang
(torchmetrics issues 2463 and 3336).

``SyncSafeMetric`` fixes this before torchmetrics' own sync runs: all ranks exchange, in one
fixed-size ``all_gather`` (the same collective on every rank, whatever it holds), the dtype and the
trailing shape of every ``"cat"`` state; a rank without rows for a state then contributes an empty
tensor ``(0, *trailing_shape)`` of the right dtype, which torchmetrics pads and gathers like any other.
Ranks whose settings, inputs or states disagree (dtype or trailing shape, process-local states
included) raise the same ``IncompatibleStateError`` on every rank, never a hang.

A second torchmetrics limitation is handled too: a ``"cat"`` state that is a *tensor* (not a list)
is gathered and then ``torch.stack``-ed, which fails as soon as ranks hold different numbers of rows.
``SyncSafeMetric`` gathers such states as one-element lists, so they are concatenated instead.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, ClassVar, Optional

import torch
import torch.distributed as dist
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.distributed import gather_all_tensors

from embedmetrics._engine.core.checks import IncompatibleStateError

_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
#: Largest number of dimensions a ``"cat"`` state tensor may have.
MAX_STATE_NDIM = 8
# descriptor columns: has_rows, dtype code, ndim, trailing dims (MAX_STATE_NDIM - 1)
_DESC_LEN = 3 + MAX_STATE_NDIM - 1


def first_rows(state: Any) -> Tensor | None:
    """The first tensor with rows of a list (or tensor) state, or ``None`` when it holds none: its dtype
    and trailing shape are those of every row of the state (metadata only, no host read)."""
    items = state if isinstance(state, list) else [state]
    for item in items:
        if isinstance(item, Tensor) and item.ndim >= 1 and item.shape[0] > 0:
            return item
    return None


def _describe(t: Tensor | None, attr: str) -> list[int]:
    row = [0] * _DESC_LEN
    if t is None:
        return row
    if t.dtype not in _DTYPES:
        raise TypeError(f"State `{attr}` has unsupported dtype {t.dtype} for a distributed sync.")
    if t.ndim > MAX_STATE_NDIM:
        raise ValueError(f"State `{attr}` has {t.ndim} dimensions; at most {MAX_STATE_NDIM} are supported.")
    row[0], row[1], row[2] = 1, _DTYPES.index(t.dtype), t.ndim
    row[3 : 3 + t.ndim - 1] = list(t.shape[1:])
    return row


def _layout_row(layout: tuple[torch.dtype, tuple[int, ...]] | None) -> list[int]:
    """A descriptor row of a metric's input layout (``None``: no input yet)."""
    if layout is None:
        return [0] * _DESC_LEN
    dtype, trailing = layout
    return _describe(torch.empty((1, *trailing), dtype=dtype, device="meta"), "input")


def _settings_row(metric: Metric) -> list[int]:
    """A descriptor row of the metric's settings: a checksum of every setting that changes the result."""
    code = getattr(metric, "settings_code_all", None)
    value = code() if callable(code) else None
    row = [0] * _DESC_LEN
    if value is not None:
        row[0], row[1] = 1, int(value)
    return row


def refuse_disagreeing_settings(metric: Metric, group: Any = None) -> None:
    """In a process group, raise the same ``IncompatibleStateError`` on every rank when the ranks built
    ``metric`` with other settings (``metric.settings_text()``; a collective every rank reaches)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return
    texts = _gathered_settings(metric, group)
    if any(t != texts[0] for t in texts):
        raise _settings_error(metric, texts)


def _gathered_settings(metric: Metric, group: Any) -> list[Any]:
    """Every rank's ``settings_text()`` (a collective all ranks reach together)."""
    describe = getattr(metric, "settings_text", None)
    mine = describe() if callable(describe) else {}
    texts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(texts, mine, group=group)
    return texts


def _settings_mismatch(metric: Metric, group: Any) -> IncompatibleStateError:
    """Every rank gathers every rank's settings and names the settings that differ."""
    return _settings_error(metric, _gathered_settings(metric, group))


def _settings_error(metric: Metric, texts: list[Any]) -> IncompatibleStateError:
    names = sorted({n for t in texts for n in t if len({repr(o.get(n)) for o in texts}) > 1})
    detail = "; ".join(f"`{n}`: {', '.join(str(t.get(n)) for t in texts)} (by rank)" for n in names)
    return IncompatibleStateError(
        f"{type(metric).__name__}: the settings differ across processes ({detail}); every process must "
        "build the metric with the same settings."
    )


def _mismatch(metric: Metric, what: str, rows: Tensor, *, layout: bool = False) -> IncompatibleStateError:
    described = sorted({_read(r, layout) for r in rows.tolist() if r[0] == 1})
    return IncompatibleStateError(
        f"{type(metric).__name__}: {what} differ across processes ({'; '.join(described)}); every "
        "process must build the metric with the same settings and update it with inputs of the same "
        "dtype and width."
    )


def _read(row: list[int], layout: bool = False) -> str:
    shape = ", ".join(str(d) for d in row[3 : 3 + row[2] - 1])
    if layout:
        return f"{_DTYPES[row[1]]} embeddings of {shape} features"
    return f"{_DTYPES[row[1]]} rows of shape (n, {shape})" if shape else f"{_DTYPES[row[1]]} values"


def align_empty_cat_states(
    metric: Metric, process_group: Any | None = None, reductions: dict[str, Any] | None = None
) -> None:
    """Check that every rank agrees, then give every empty ``"cat"`` state of ``metric`` the dtype and
    trailing shape the other ranks use.

    Must be called on every rank of the group (it runs one fixed-size ``all_gather``). Ranks must
    agree on the settings (``settings_fingerprint``), on the input layout (the dtype and width of
    the embeddings, ``metric.input_layout()`` where defined) and on the dtype and trailing shape of
    every ``"cat"`` state, process-local ones included; where they do not, every rank raises the same
    ``IncompatibleStateError`` (no hang, no mixed result). ``reductions``: every state's reduction,
    process-local ones included (default: the metric's). States are replaced in place on ranks without
    rows; torchmetrics' ``sync`` has cached the originals already and restores them on ``unsync``.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return  # a custom ``dist_sync_fn`` without a process group: nothing to align with
    group = process_group if process_group is not None else dist.group.WORLD
    attrs = [a for a, fx in (reductions or metric._reductions).items() if fx is dim_zero_cat]
    layout = getattr(metric, "input_layout", None)
    descs = [_settings_row(metric), _layout_row(layout() if callable(layout) else None)]
    descs += [_describe(first_rows(getattr(metric, a)), a) for a in attrs]
    local = torch.tensor(descs, dtype=torch.int64, device=metric.device)
    gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, local, group=group)
    table = torch.stack(gathered).cpu()  # (world, 2 + attrs, desc)
    if not _agree(table[:, 0], every_rank=True):
        raise _settings_mismatch(metric, group)
    if not _agree(table[:, 1], every_rank=False):
        raise _mismatch(metric, "the inputs (dtype and feature widths)", table[:, 1], layout=True)
    for j, attr in enumerate(attrs, start=2):
        rows = table[:, j]
        if not _agree(rows, every_rank=False):
            raise _mismatch(metric, f"the rows of state `{attr}`", rows)
        with_data = rows[rows[:, 0] == 1]
        if with_data.shape[0] == 0 or attr not in metric._reductions:
            continue  # no rank has rows, or a process-local state (never gathered)
        if int(rows[dist.get_rank(group), 0]) == 0:
            ndim = int(with_data[0, 2])
            shape = (0, *(int(d) for d in with_data[0, 3 : 3 + ndim - 1]))
            empty = torch.empty(shape, dtype=_DTYPES[int(with_data[0, 1])], device=metric.device)
            setattr(metric, attr, [empty] if isinstance(getattr(metric, attr), list) else empty)


def _agree(rows: Tensor, *, every_rank: bool) -> bool:
    """The descriptor rows of the ranks agree (``every_rank``: also on having one at all)."""
    present = rows[rows[:, 0] == 1]
    if every_rank and 0 < present.shape[0] < rows.shape[0]:
        return False
    return present.shape[0] == 0 or bool((present == present[0]).all())


def settings_fingerprint(**settings: Any) -> Tensor:
    """A deterministic float64 code of ``settings`` (``repr``-based CRC32, exact in float64)."""
    text = repr(sorted(settings.items()))
    return torch.tensor([float(zlib.crc32(text.encode()))], dtype=torch.float64)


class SyncSafeMetric(Metric):
    """``torchmetrics.Metric`` whose ``"cat"`` states sync safely when some ranks made no ``update``.

    Subclass it instead of ``Metric``; nothing else changes (see ``align_empty_cat_states``).
    The module metrics subclass ``BaseMetric``, which builds on it.
    """

    #: States each process keeps to itself in a sync (rows that ``compute`` scans where they are).
    _process_local_states: ClassVar[tuple[str, ...]] = ()

    def _sync_dist(
        self,
        dist_sync_fn: Callable[..., Any] = gather_all_tensors,
        process_group: Optional[Any] = None,
    ) -> None:
        reductions = self._reductions
        local = self._process_local_states
        self._reductions = {name: fx for name, fx in reductions.items() if name not in local}
        try:  # the agreement check covers the process-local states too
            align_empty_cat_states(self, process_group or self.process_group, reductions)
            for attr, fx in self._reductions.items():
                value = getattr(self, attr)
                if fx is dim_zero_cat and isinstance(value, Tensor) and value.ndim >= 1:
                    # concatenated after the gather (torchmetrics would stack, which needs equal shapes)
                    setattr(self, attr, [value])
            super()._sync_dist(dist_sync_fn, process_group=process_group)
        finally:
            self._reductions = reductions
