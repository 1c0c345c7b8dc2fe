"""``AccuracyCalculator`` against pytorch-metric-learning's own ``AccuracyCalculator`` (the standard tool).

PML ranks with its torch ``CustomKNN`` (no faiss) on tie-free float64 data, so both sides see the same
neighbour lists; PML computes in float32, hence the 1e-6 tolerance. Every kNN metric, ``k`` below and
above the class sizes, ``None`` (every reference) and ``"max_bin_count"``, queries that are or are not
the reference set, Euclidean and cosine."""

from __future__ import annotations

import warnings

import pytest
import torch

from embedmetrics import AccuracyCalculator

pml_accuracy = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
pml_inference = pytest.importorskip("pytorch_metric_learning.utils.inference")
pml_distances = pytest.importorskip("pytorch_metric_learning.distances")

METRICS = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
    "mean_reciprocal_rank",
)


def _data(seed: int, same: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(80, 6, generator=g, dtype=torch.float64)
    q_labels = torch.randint(0, 5, (80,), generator=g)
    if same:
        return q, q_labels, q, q_labels
    return (
        q,
        q_labels,
        torch.randn(120, 6, generator=g, dtype=torch.float64),
        torch.randint(0, 5, (120,), generator=g),
    )


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("k", [None, "max_bin_count", 3, 15, 60])
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_knn_metric_equals_pytorch_metric_learning(
    seed: int, same: bool, k: int | str | None, distance: str
) -> None:
    q, q_labels, r, r_labels = _data(seed, same)
    pml_distance = (
        pml_distances.LpDistance(normalize_embeddings=False)
        if distance == "euclidean"
        else pml_distances.CosineSimilarity()
    )
    theirs_calc = pml_accuracy.AccuracyCalculator(
        include=METRICS, k=k, device=torch.device("cpu"), knn_func=pml_inference.CustomKNN(pml_distance)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn that k < R cuts R-precision and MAP@R
        theirs = theirs_calc.get_accuracy(q, q_labels, r, r_labels, same)
        ours = AccuracyCalculator(include=METRICS, k=k, distance=distance).get_accuracy(
            q, r, q_labels, r_labels, same
        )
    for name in METRICS:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-6), name
