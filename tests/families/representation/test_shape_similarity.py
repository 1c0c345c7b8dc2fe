"""Procrustes similarity, Procrustes R² and Kruskal similarity against full-matrix NumPy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from embedmetrics._engine.embedding import shape_similarity as engine
from embedmetrics.functional import kruskal_similarity, procrustes_r2, procrustes_similarity


def _orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return q


def _ref_procrustes(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xc, yc = x - x.mean(0), y - y.mean(0)
    u, s, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)
    sim = s.sum() / (np.linalg.norm(xc) * np.linalg.norm(yc))
    fitted = xc @ (u @ vt)
    r2 = 1 - np.linalg.norm(yc - fitted, axis=1).sum() / np.linalg.norm(yc, axis=1).sum()
    return float(np.clip(sim, 0, 1)), float(r2)


def _ref_kruskal(x: np.ndarray, y: np.ndarray, spherical: bool) -> float:
    if spherical:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        y = y / np.linalg.norm(y, axis=1, keepdims=True)
        dx, dy = x @ x.T, y @ y.T
    else:
        dx = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
        dy = np.sqrt(((y[:, None] - y[None]) ** 2).sum(-1))
    i, j = np.triu_indices(len(x), 1)
    return float(1 - np.linalg.norm(dx[i, j] - dy[i, j]) / np.linalg.norm(dy[i, j] - dy[i, j].mean()))


@pytest.mark.parametrize("widths", [(4, 4), (3, 6), (6, 2)])
def test_procrustes_matches_numpy(widths: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, widths[0])), rng.normal(size=(50, widths[1]))
    sim, r2 = _ref_procrustes(x, y)
    assert float(procrustes_similarity(x, y)) == pytest.approx(sim, abs=1e-12)
    assert float(procrustes_r2(x, y)) == pytest.approx(r2, abs=1e-12)


@pytest.mark.parametrize("spherical", [False, True])
def test_kruskal_matches_numpy_for_any_block_size(monkeypatch: pytest.MonkeyPatch, spherical: bool) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(37, 5)), rng.normal(size=(37, 3)) + 2.0
    want = _ref_kruskal(x, y, spherical)
    for elements in (1, 37, 100, 2**22):  # one row per block, ..., everything in one block
        monkeypatch.setattr(engine, "_PAIR_BLOCK_ELEMENTS", elements)
        assert float(kruskal_similarity(x, y, spherical=spherical)) == pytest.approx(want, abs=1e-12)


def test_invariances() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 4))
    q, b = _orthogonal(4, rng), rng.normal(size=4)
    assert float(procrustes_similarity(x, 3.0 * x @ q + b)) == pytest.approx(1.0, abs=1e-12)
    assert float(procrustes_r2(x, x @ q + b)) == pytest.approx(1.0, abs=1e-12)
    assert float(procrustes_r2(x, 2.0 * x @ q)) < 0.9  # scale matters for R²
    assert float(kruskal_similarity(x, x @ q + b)) == pytest.approx(1.0, abs=1e-12)
    assert float(kruskal_similarity(x, x @ q * 4.0, spherical=True)) == pytest.approx(1.0, abs=1e-12)
    y = rng.normal(size=(40, 4))
    padded = np.hstack([y, np.zeros((40, 3))])
    assert float(procrustes_similarity(x, padded)) == pytest.approx(
        float(procrustes_similarity(x, y)), abs=1e-12
    )
    assert float(kruskal_similarity(x, padded)) == pytest.approx(float(kruskal_similarity(x, y)), abs=1e-12)


def test_degenerate_inputs() -> None:
    x = np.random.default_rng(3).normal(size=(10, 3))
    constant = np.ones((10, 2))
    assert float(procrustes_similarity(x, constant)) == 0.0
    assert float(procrustes_similarity(constant, x)) == 0.0
    assert float(procrustes_r2(x, constant)) == 0.0
    assert math.isnan(float(kruskal_similarity(x[:1], x[:1])))
    with pytest.raises(ValueError, match="same number of rows"):
        procrustes_similarity(x, x[:5])
    with pytest.raises(ValueError, match="`Y` must be 2-D"):
        kruskal_similarity(x, x[:, 0])
    with pytest.raises(ValueError, match="`Y` must hold finite values"):
        procrustes_r2(x, np.full((10, 2), np.nan))
    with pytest.raises(TypeError, match="spherical"):
        kruskal_similarity(x, x, spherical="yes")


def test_input_kinds_dtypes_and_devices_follow_x() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    for fn in (procrustes_similarity, procrustes_r2, kruskal_similarity):
        ref = float(fn(x, y))
        out32 = fn(x.astype(np.float32), y)
        assert isinstance(out32, np.ndarray)
        assert out32.shape == ()
        assert out32.dtype == np.float32
        mixed = fn(torch.from_numpy(x), y)  # a NumPy argument: a NumPy result (nidl's rule)
        assert isinstance(mixed, np.ndarray)
        assert float(mixed) == pytest.approx(ref, abs=1e-12)
        tensor = fn(torch.from_numpy(x).float(), torch.from_numpy(y))
        assert isinstance(tensor, torch.Tensor)
        assert tensor.dtype == torch.float32
        assert float(tensor) == pytest.approx(ref, abs=1e-5)
        assert fn(torch.from_numpy(x), torch.from_numpy(y)).dtype == torch.float64
