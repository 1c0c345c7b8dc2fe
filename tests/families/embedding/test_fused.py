"""The opt-in compiled passes after each similarity block give the eager passes' exact results, run only
on full blocks (one shape per scan: no recompile per block), and fall back once, loudly, when the
compiler fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

import embedmetrics
from embedmetrics import _config
from embedmetrics._engine.core import fused
from embedmetrics.functional import contrastive_accuracy_score


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    state, switches = dict(fused._STATE), dict(_config._SWITCHES)
    yield
    fused._STATE.clear()
    fused._STATE.update(state)
    _config._SWITCHES.update(switches)


def _views(n: int = 96) -> tuple[Tensor, Tensor]:
    """Distinct small-integer rows (the plain scan, no repeated row), and as the second view scaled
    copies of other rows: many cosine similarities tie with the positive, so the counts are not trivial."""
    g = torch.Generator().manual_seed(3)
    grid = torch.cartesian_prod(*[torch.arange(-2.0, 3.0)] * 4)[1:]  # 624 distinct non-zero rows
    z1 = grid[torch.randperm(grid.shape[0], generator=g)[:n]]
    return z1, 2.0 * z1.roll(1, dims=0)


def _scores(z1: Tensor, z2: Tensor, **kw: object) -> list[Tensor]:
    return [
        contrastive_accuracy_score(z1, z2, topk=(1, 2, 5, 50), ties=ties, block_bytes=96 * 4 * 20, **kw)
        for ties in ("average", "pessimistic", "optimistic")
    ]


def test_full_blocks_take_the_kernel_once_per_block_with_one_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    shapes: list[tuple[int, ...]] = []

    def recording(sim: Tensor, d_rows: Tensor, d_cols: Tensor) -> fused.SignCounts:
        shapes.append(tuple(sim.shape))
        return fused.sign_counts_eager(sim, d_rows, d_cols)

    z1, z2 = _views()
    eager = _scores(z1, z2)
    embedmetrics.set_compile(True)
    monkeypatch.setitem(fused._STATE, "kernel", recording)
    got = _scores(z1, z2)
    assert all(torch.equal(a, b) for a, b in zip(got, eager))
    # 96 rows in blocks of 20: four full blocks per call (the last 16 rows run eagerly), three calls
    assert shapes == [(20, 96)] * 12


def test_sign_counts_are_the_comparisons() -> None:
    sim = torch.tensor([[1.0, 2.0, 1.0], [0.0, 0.5, 0.5]])
    d = torch.tensor([1.0, 0.5])
    counts = fused.sign_counts_eager(sim, d, torch.tensor([1.0, 0.5, 1.0]))
    assert [c.tolist() for c in counts] == [[1, -1], [1, 1], [-1, 1, -1], [1, 1, 1]]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own, from inside inductor
def test_compiled_kernel_equals_the_eager_passes() -> None:
    z1, z2 = _views()
    eager = _scores(z1, z2)
    embedmetrics.set_compile(True)
    got = _scores(z1, z2)
    if _config._SWITCHES["compile_failed"]:
        pytest.skip("torch.compile is not available here (the fallback is tested separately)")
    assert fused._STATE["kernel"] is not None
    assert all(torch.equal(a, b) for a, b in zip(got, eager))


def test_a_compiler_failure_falls_back_once_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        def run(*a: object) -> object:
            raise RuntimeError("no C++ compiler")

        return run

    z1, z2 = _views()
    eager = _scores(z1, z2)
    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setitem(fused._STATE, "kernel", None)
    embedmetrics.set_compile(True)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler") as caught:
        got = _scores(z1, z2)
    assert len(caught) == 1
    assert not _config.compile_enabled()
    assert all(torch.equal(a, b) for a, b in zip(got, eager))


def test_off_by_default_and_meta_tensors_stay_eager() -> None:
    embedmetrics.set_compile(False)
    assert fused.fused_sign_counts(torch.zeros(2, 2), torch.zeros(2), torch.zeros(2)) is None
    embedmetrics.set_compile(True)
    meta = torch.zeros(2, 2, device="meta")
    assert fused.fused_sign_counts(meta, meta[0], meta[0]) is None
    with pytest.raises(TypeError, match="`enabled` must be a bool, got int"):
        embedmetrics.set_compile(1)  # type: ignore[arg-type]
