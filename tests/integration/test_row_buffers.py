"""Row stores grow in amortized O(batch) and are never re-concatenated (``_metric/row_buffer.py``).

Each test would fail if ``update`` or ``forward`` copied every stored row per batch, if ``compute``
concatenated the state again, or if two metrics sharing memory (a merge, a loaded state dict) wrote
over each other's rows.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import embedmetrics as em
from embedmetrics._metric import row_buffer


def _batches(n: int, size: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        preds = torch.rand(size, generator=g)
        target = torch.rand(size, generator=g) < 0.4
        out.append((preds, target, torch.full((size,), i, dtype=torch.int64)))
    return out


def _oracle(batches: list[tuple[torch.Tensor, ...]]) -> torch.Tensor:
    preds, target, indexes = (torch.cat(parts) for parts in zip(*batches))
    return em.functional.retrieval_reciprocal_rank(preds, target, indexes=indexes)


def _buffers_seen(metric: em.RetrievalMRR, step: object, batches: list[tuple[torch.Tensor, ...]]) -> int:
    seen = set()
    for batch in batches:
        step(*batch)  # type: ignore[operator]
        assert len(metric.preds) == 1  # one tensor: the leading rows of a buffer
        seen.add(metric.preds[0].data_ptr())
    return len(seen)


def test_update_grows_the_buffer_geometrically() -> None:
    """400 batches of 6 rows: a handful of buffers (doubling), not one copy of every row per batch."""
    batches = _batches(400)
    metric = em.RetrievalMRR()
    assert _buffers_seen(metric, metric.update, batches) <= 8
    stored = metric.preds[0]
    assert stored.untyped_storage().nbytes() <= 2 * stored.numel() * stored.element_size()
    torch.testing.assert_close(metric.compute(), _oracle(batches))


def test_forward_merges_each_batch_into_the_buffer() -> None:
    """torchmetrics' ``forward`` resets the state, updates with the batch and merges the two: the merge
    appends the batch to the same buffer (torchmetrics cloned every stored row at every call)."""
    batches = _batches(400)
    metric = em.RetrievalMRR()
    assert _buffers_seen(metric, metric, batches) <= 8
    torch.testing.assert_close(metric.compute(), _oracle(batches))


def test_compute_reads_the_stored_rows_without_a_copy() -> None:
    metric = em.RetrievalMRR()
    for batch in _batches(5):
        metric.update(*batch)
    first = metric.stored_rows("preds")
    metric.compute()
    assert first is not None
    assert metric.stored_rows("preds") is first is metric.preds[0]


def test_metrics_sharing_a_buffer_never_overwrite_each_other() -> None:
    """An empty metric that merges another one, or loads its state dict, holds views of the other's
    buffer: it copies them at its first append instead of writing into spare rows the other will use."""
    batches = _batches(6)
    a = em.RetrievalMRR()
    a.persistent(True)
    for batch in batches[:2]:
        a.update(*batch)
    merged, loaded = em.RetrievalMRR(), em.RetrievalMRR()
    merged.merge_state(a)
    loaded.load_state_dict(a.state_dict())
    assert merged.preds[0].data_ptr() == a.preds[0].data_ptr()  # shared: the risk under test
    a.update(*batches[2])
    merged.update(*batches[3])
    loaded.update(*batches[4])
    a.update(*batches[5])
    torch.testing.assert_close(a.compute(), _oracle([*batches[:3], batches[5]]))
    torch.testing.assert_close(merged.compute(), _oracle([*batches[:2], batches[3]]))
    torch.testing.assert_close(loaded.compute(), _oracle([*batches[:2], batches[4]]))


def test_extend_promotes_dtypes_like_cat() -> None:
    half, full = torch.arange(3, dtype=torch.float32), torch.arange(4, dtype=torch.float64)
    rows, buffer = row_buffer.extend([half], [])
    assert buffer is not None
    rows, buffer = row_buffer.extend([rows, full], [buffer])
    assert rows.dtype == torch.float64
    torch.testing.assert_close(rows, torch.cat([half, full]))


def test_extend_concatenates_rows_that_require_grad_plainly() -> None:
    a, b = torch.ones(2, 3, requires_grad=True), torch.zeros(1, 3)
    rows, buffer = row_buffer.extend([a, b], [])
    assert buffer is None
    assert rows.requires_grad
    rows.sum().backward()
    assert a.grad is not None
    assert torch.equal(a.grad, torch.ones(2, 3))


def test_extend_refuses_other_widths_as_cat_does() -> None:
    """A row of width 1 would broadcast into a buffer of width 3; ``torch.cat`` refuses it."""
    rows, buffer = row_buffer.extend([torch.zeros(2, 3)], [])
    assert buffer is not None
    with pytest.raises(RuntimeError):
        row_buffer.extend([rows, torch.zeros(1, 1)], [buffer])


def test_checkpoints_and_pickles_hold_the_rows_not_the_spare_room() -> None:
    """The buffer has room for up to as many rows again; a state dict, a pickle and a copy hold only
    the rows, and the copy grows its own buffer."""
    metric = em.RetrievalMRR()
    metric.persistent(True)
    batches = _batches(40, size=500)
    for batch in batches:
        metric.update(*batch)
    stored = metric.preds[0]
    assert stored.untyped_storage().nbytes() > 1.2 * stored.numel() * stored.element_size()  # spare room
    saved = metric.state_dict()["preds"][0]
    assert saved.untyped_storage().nbytes() == saved.numel() * saved.element_size()
    rows_bytes = stored.numel() * (4 + 1 + 8)  # float32 scores, bool relevance, int64 query ids
    assert len(pickle.dumps(metric)) < 1.1 * rows_bytes + 20_000
    copied = copy.deepcopy(metric)
    copied.update(*batches[0])
    metric.update(*batches[0])
    torch.testing.assert_close(copied.compute(), metric.compute())
    torch.testing.assert_close(metric.compute(), _oracle([*batches, batches[0]]))
