"""Contrastive accuracy's post-product passes (issue 49, item 2): the counts read off two comparisons
with the positives are the integers of the signs of ``S - s_ii`` (the definition,
``fused.sign_counts_eager``), ties and all, and inputs whose products could overflow keep the passes
of the signs (where ``inf - inf`` gives NaN, not a tie)."""

from __future__ import annotations

import math

import torch

from embedmetrics._engine.core.fused import sign_counts_eager
from embedmetrics._engine.embedding import pairs


def test_compared_sums_are_the_sign_sums_with_ties() -> None:
    gen = torch.Generator().manual_seed(0)
    sim = torch.randint(-3, 4, (37, 53), generator=gen).float() / 4  # many ties
    d_rows, d_cols = sim[:, 0].clone(), sim[0].clone()
    want = sign_counts_eager(sim, d_rows, d_cols)
    for slice_rows in (1, 5, 37, 64):  # slices of the block's rows, one whole slice, more than the rows
        buf = torch.empty(slice_rows, 53)
        got = pairs._compared_sums(sim, d_rows, d_cols, torch.ones(53), buf)
        for counts, exact in zip(got, want):
            assert torch.equal(counts, exact.double()), slice_rows


def test_compared_slices_fit_the_cache_on_a_cpu_and_are_whole_blocks_elsewhere() -> None:
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert pairs.compare_slice_rows(16384, 4, cpu) * 16384 * 4 == pairs.COMPARE_SLICE_BYTES
    assert pairs.compare_slice_rows(10**7, 8, cpu) == 1
    assert pairs.compare_slice_rows(16384, 4, meta) >= 2**40


def test_contrastive_partial_equals_the_sign_passes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(1)
    z1 = torch.randint(-2, 3, (300, 4), generator=gen).float()  # integer products: exact ties
    z2 = torch.randint(-2, 3, (300, 4), generator=gen).float()
    fast = pairs.contrastive_partial(z1, z2, block_bytes=64 * 300 * 4)
    monkeypatch.setattr(pairs, "_finite_products", lambda *_: False)
    slow = pairs.contrastive_partial(z1, z2, block_bytes=64 * 300 * 4)
    assert torch.equal(fast, slow)


def test_products_that_can_overflow_keep_the_sign_passes() -> None:
    big = torch.tensor([[1.0, 2.0], [3.0, 1.0], [2.0, 2.5]]) * 1e20  # products beyond float32
    assert not pairs._finite_products(big, big)
    assert not pairs._finite_products(torch.full((2, 2), math.inf), torch.ones(2, 2))
    assert pairs._finite_products(torch.ones(3, 2), torch.ones(3, 2))
