"""The functional twin of the kNN metrics (``embedding_accuracy``) against the calculator, brute force
and its own per-query values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from _cases import KNN_METRICS
from embedmetrics import AccuracyCalculator
from embedmetrics.functional import embedding_accuracy


def _data(n: int = 60, d: int = 4, classes: int = 5, seed: int = 0, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 3, (n, d), generator=g).float() if ties else torch.randn(n, d, generator=g)
    return x, torch.randint(0, classes, (n,), generator=g)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("policy", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("k", [None, 3])
def test_equals_the_calculator(ties: bool, policy: str, k: int | None) -> None:
    x, y = _data(ties=ties, seed=1)
    calc = AccuracyCalculator(include=KNN_METRICS, k=k, ties=policy)
    expected = calc.get_accuracy(x, x, y, y, True)
    got = embedding_accuracy(x, y, include=KNN_METRICS, k=k, ties=policy)
    for m in KNN_METRICS:
        # the calculator's float64 mean, in the embeddings' dtype (float32 here)
        assert float(got[m]) == float(torch.tensor(expected[m], dtype=got[m].dtype)), m
    q, r = x[:20], x[20:]
    expected = calc.get_accuracy(q, r, y[:20], y[20:], False)
    got = embedding_accuracy(q, y[:20], r, y[20:], include=KNN_METRICS, k=k, ties=policy)
    for m in KNN_METRICS:
        # the calculator's float64 mean, in the embeddings' dtype (float32 here)
        assert float(got[m]) == float(torch.tensor(expected[m], dtype=got[m].dtype)), m


def _brute_precision_at_1(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    nearest = d == d.min(1, keepdims=True)
    hits = (nearest & (y[None, :] == y[:, None])).sum(1) / nearest.sum(1)
    lone = np.array([(y == c).sum() < 2 for c in y])
    return np.where(lone, np.nan, hits)


def test_per_query_values_match_brute_force_and_average_to_the_mean() -> None:
    x, y = _data(n=50, classes=12, seed=2, ties=True)
    per = embedding_accuracy(x, y, include=KNN_METRICS, per_query=True)
    mean = embedding_accuracy(x, y, include=KNN_METRICS)
    expected = _brute_precision_at_1(x.double().numpy(), y.numpy())
    np.testing.assert_allclose(per["precision_at_1"].numpy(), expected, atol=1e-12)
    for m in KNN_METRICS:
        values = per[m]
        assert values.shape == (50,)
        assert bool(torch.isnan(values).any())  # 12 classes in 50 rows: some label occurs once
        assert float(values[~torch.isnan(values)].mean()) == pytest.approx(float(mean[m]), abs=1e-12)


def test_numpy_in_numpy_out_and_avg_of_avgs() -> None:
    x, y = _data(seed=3)
    got = embedding_accuracy(x.numpy(), y.numpy(), avg_of_avgs=True)
    assert all(isinstance(v, np.float64) for v in got.values())
    expected = AccuracyCalculator(avg_of_avgs=True, exclude=("NMI", "AMI")).get_accuracy(x, x, y, y, True)
    for m, v in got.items():
        assert v == pytest.approx(expected[m], abs=1e-12)
    per = embedding_accuracy(x.numpy(), y.numpy(), per_query=True)
    assert isinstance(per["precision_at_1"], np.ndarray)


def test_errors_and_non_finite_inputs() -> None:
    x, y = _data(seed=4)
    with pytest.raises(TypeError, match="`reference` and `reference_labels` go together"):
        embedding_accuracy(x, y, x)
    with pytest.raises(ValueError, match="unknown metrics"):
        embedding_accuracy(x, y, include=("NMI",))
    with pytest.raises(TypeError, match="`per_query` must be a bool"):
        embedding_accuracy(x, y, per_query=1)
    bad = x.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="Argument `query` must hold finite values"):
        embedding_accuracy(bad, y)
    assert all(math.isnan(float(v)) for v in embedding_accuracy(bad, y, validate_args=False).values())
