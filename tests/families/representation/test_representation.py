"""Representation health: RankMe, α-ReQ, LiDAR, linear CKA and weighted k-NN accuracy.

Against the NumPy references of ``_representation_oracle`` (full matrices: SVD, eigendecomposition,
the HSIC form, explicit vote loops), hand-made spectra and hand-worked ties; modules over any batch
split equal the functionals on the stacked rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics import MetricCollection

from embedmetrics import AlphaReQ, KNNAccuracy, LiDAR, LinearCKA, RankMe
from embedmetrics.functional import alpha_req, knn_accuracy, lidar, linear_cka, rankme
from oracles import representation as ref


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _splits(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    points = sorted({0, n, *[c % (n + 1) for c in cuts]})
    return [(a, b) for a, b in zip(points, points[1:]) if b > a]


def _views(
    sources: int, per: int, d: int, seed: int, noise: float = 0.3
) -> tuple[torch.Tensor, torch.Tensor]:
    base = _randn(sources, d, seed=seed)
    z = base.repeat_interleave(per, dim=0) + noise * _randn(sources * per, d, seed=seed + 1)
    return z, torch.arange(sources).repeat_interleave(per)


# ----------------------------------------------------------------------------- RankMe


@pytest.mark.parametrize(("n", "d"), [(50, 8), (5, 12), (1, 4), (200, 3)])
@pytest.mark.parametrize("center", [False, True])
def test_rankme_equals_the_svd_reference(n: int, d: int, center: bool) -> None:
    z = _randn(n, d, seed=n * d) * torch.linspace(0.1, 3.0, d, dtype=torch.float64)
    got = rankme(z, center=center)
    assert got.dtype == torch.float64
    # rank-deficient (n <= d): zero singular values come out near 1e-8 * sigma_max (sqrt of rounding)
    assert float(got) == pytest.approx(ref.rankme(z.numpy(), center=center), rel=1e-7, abs=1e-12)


def test_rankme_of_hand_made_spectra() -> None:
    left, _ = torch.linalg.qr(_randn(40, 40, seed=3))
    right, _ = torch.linalg.qr(_randn(8, 8, seed=4))
    rank3 = left[:, :3] @ (5.0 * right[:, :3].T)  # three singular values, all 5
    assert float(rankme(rank3)) == pytest.approx(3.0, abs=1e-4)  # three equal singular values
    assert float(rankme(torch.ones(30, 6))) == pytest.approx(1.0, abs=1e-4)  # collapsed
    assert float(rankme(torch.zeros(4, 3))) == 0.0  # rank 0
    assert float(rankme(torch.ones(30, 6), center=True)) == 0.0  # centred constant: the zero matrix


def test_rankme_numpy_in_numpy_out_and_float32() -> None:
    z = _randn(30, 5, seed=4)
    out = rankme(z.numpy())
    assert isinstance(out, np.float64)
    assert out == pytest.approx(ref.rankme(z.numpy()), rel=1e-9)
    f32 = rankme(z.float())
    assert f32.dtype == torch.float32
    assert float(f32) == pytest.approx(ref.rankme(z.float().numpy()), rel=1e-6)


# ----------------------------------------------------------------------------- α-ReQ


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_alpha_req_recovers_a_power_law(alpha: float) -> None:
    d = 128
    scales = torch.arange(1, d + 1, dtype=torch.float64) ** (-alpha / 2)
    q, _ = torch.linalg.qr(_randn(d, d, seed=5))
    z = _randn(40000, d, seed=6) * scales @ q.T  # rotated: the spectrum, not the axes
    assert float(alpha_req(z)) == pytest.approx(alpha, abs=0.05)


@pytest.mark.parametrize(
    ("n", "d", "fit_range"), [(300, 20, (6, 100)), (50, 120, (6, 100)), (80, 10, (1, 5))]
)
def test_alpha_req_equals_the_reference(n: int, d: int, fit_range: tuple[int, int]) -> None:
    z = _randn(n, d, seed=n + d) * torch.arange(1, d + 1, dtype=torch.float64) ** -0.7
    got, want = float(alpha_req(z, fit_range=fit_range)), ref.alpha_req(z.numpy(), fit_range)
    assert got == pytest.approx(want, rel=1e-7)


def test_alpha_req_is_nan_without_two_eigenvalues_to_fit() -> None:
    assert math.isnan(alpha_req(_randn(20, 4, seed=1)))  # 4 eigenvalues: none at rank 6 or above
    assert math.isnan(alpha_req(torch.ones(10, 8), fit_range=(1, 8)))  # constant rows: no variance
    assert math.isnan(alpha_req(_randn(1, 8, seed=1), fit_range=(1, 8)))  # one row
    with pytest.raises(ValueError, match="fit_range"):
        alpha_req(_randn(4, 4, seed=1), fit_range=(5, 5))
    with pytest.raises(TypeError, match="fit_range"):
        alpha_req(_randn(4, 4, seed=1), fit_range=6)


# ----------------------------------------------------------------------------- LiDAR


@pytest.mark.parametrize(("sources", "per", "d"), [(30, 4, 6), (8, 2, 12), (5, 7, 3)])
def test_lidar_equals_the_reference(sources: int, per: int, d: int) -> None:
    z, labels = _views(sources, per, d, seed=sources)
    perm = torch.randperm(z.shape[0], generator=torch.Generator().manual_seed(0))
    z, labels = z[perm], labels[perm] * 7 - 3  # any order, any integer ids
    want = ref.lidar(z.numpy(), labels.numpy())
    assert float(lidar(z, labels)) == pytest.approx(want, rel=1e-8)
    assert float(lidar(z, labels, delta=0.5, eps=1e-3)) == pytest.approx(
        ref.lidar(z.numpy(), labels.numpy(), 0.5, 1e-3), rel=1e-8
    )


def test_lidar_is_nan_without_two_classes_or_a_class_of_two() -> None:
    z = _randn(6, 3, seed=2)
    assert math.isnan(lidar(z, torch.zeros(6, dtype=torch.int64)))  # one class
    assert math.isnan(lidar(z, torch.arange(6)))  # one row per class: no within-class spread
    with pytest.raises(TypeError, match="labels"):
        lidar(z, torch.zeros(6))
    with pytest.raises(ValueError, match="labels"):
        lidar(z, torch.zeros(5, dtype=torch.int64))


def test_lidar_state_keeps_one_row_per_source_of_each_batch() -> None:
    """``update`` fills one fixed slot per row (no host sync) and keeps only the used ones (CPU); the
    partials of the batches are then merged into one row per source (a source split across batches
    included)."""
    z, labels = _views(10, 4, 5, seed=4)  # labels 0..9, four views each, in order
    metric = LiDAR()
    metric.update(z[:22], labels[:22])  # sources 0..5 (source 5 split across the batches)
    assert [t.tolist() for t in metric.class_counts] == [[4] * 5 + [2]]
    metric(z[22:], labels[22:])  # forward: sources 5..9
    assert [t.tolist() for t in metric.class_labels] == [list(range(10))]
    assert [t.tolist() for t in metric.class_counts] == [[4] * 10]
    assert float(metric.compute()) == pytest.approx(ref.lidar(z.numpy(), labels.numpy()), rel=1e-6)


@pytest.mark.parametrize("path", ["update", "forward"])
def test_lidar_state_is_bounded_by_the_classes_when_they_recur(path: str) -> None:
    """Issue: 3 recurring classes grew the state by 3 rows per update (736 elements after 40 updates)."""
    z, labels = _views(3, 4, 5, seed=6)  # 3 classes, 4 views each
    metric = LiDAR()
    for _ in range(40):
        (metric.update if path == "update" else metric)(z, labels)
    rows = sum(t.shape[0] for t in metric.class_labels)
    assert rows <= 2 * 3 + 3  # at most twice the classes plus one batch's
    many = torch.cat([z] * 40)
    assert float(metric.compute()) == pytest.approx(
        ref.lidar(many.numpy(), torch.cat([labels] * 40).numpy()), rel=1e-6
    )


def test_lidar_untrimmed_slots_add_nothing() -> None:
    """Slots that were never trimmed (a device where the count is not read) give the same classes."""
    from embedmetrics._engine.spectral import moments as spectral

    z, labels = _views(6, 3, 4, seed=5)
    perm = torch.randperm(18, generator=torch.Generator().manual_seed(1))
    z, labels = z[perm], labels[perm]
    parts = [spectral.class_partials(z[a:b], labels[a:b]) for a, b in ((0, 7), (7, 18))]
    assert [int(p[3]) for p in parts] == [len(set(labels[a:b].tolist())) for a, b in ((0, 7), (7, 18))]
    full = [torch.cat([p[i] for p in parts]) for i in range(3)]
    trimmed = [torch.cat([p[i][: int(p[3])] for p in parts]) for i in range(3)]
    for got, want in zip(spectral.grouped_sums(*full), spectral.grouped_sums(*trimmed)):
        assert torch.equal(got, want)
    _, counts, sums = spectral.grouped_sums(*full)
    for c in range(6):
        assert int(counts[c]) == 3
        torch.testing.assert_close(sums[c], z[labels == c].sum(dim=0), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- CKA


@pytest.mark.parametrize(("n", "dx", "dy"), [(30, 5, 7), (6, 20, 3), (100, 1, 1)])
def test_linear_cka_equals_the_hsic_form(n: int, dx: int, dy: int) -> None:
    x = _randn(n, dx, seed=n)
    y = x[:, :1] * 2.0 + _randn(n, dy, seed=n + 1)
    assert float(linear_cka(x, y)) == pytest.approx(ref.linear_cka_hsic(x.numpy(), y.numpy()), rel=1e-9)


def test_linear_cka_invariances_and_constants() -> None:
    x = _randn(50, 6, seed=7)
    q, _ = torch.linalg.qr(_randn(6, 6, seed=8))
    assert float(linear_cka(x, 3.0 * x @ q + 5.0)) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(linear_cka(x, torch.ones(50, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="same number of rows"):
        linear_cka(x, x[:10])


# ----------------------------------------------------------------------------- kNN accuracy


@pytest.mark.parametrize("k", [1, 3, 20, 500])
@pytest.mark.parametrize("temperature", [0.07, 1.0])
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_knn_accuracy_equals_the_reference(k: int, temperature: float, ties: str) -> None:
    bank, queries = _randn(300, 8, seed=10).float(), _randn(90, 8, seed=11).float()
    gen = torch.Generator().manual_seed(12)
    bank_labels, query_labels = (
        torch.randint(0, 6, (300,), generator=gen),
        torch.randint(0, 7, (90,), generator=gen),
    )
    got = knn_accuracy(
        bank, bank_labels, queries, query_labels, k=k, temperature=temperature, top=(1, 2, 5), ties=ties
    )
    want = ref.knn_accuracy(
        bank.numpy(),
        bank_labels.numpy(),
        queries.numpy(),
        query_labels.numpy(),
        k,
        temperature,
        (1, 2, 5),
        None,
        ties,
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-9)


def test_knn_accuracy_top1_is_the_argmax_of_the_votes_on_tie_free_data() -> None:
    """The DINO / solo-learn classifier: topk by similarity, exp(s/T) votes, argmax."""
    bank, queries = _randn(500, 16, seed=20).float(), _randn(200, 16, seed=21).float()
    gen = torch.Generator().manual_seed(22)
    bank_labels, query_labels = (
        torch.randint(0, 10, (500,), generator=gen),
        torch.randint(0, 10, (200,), generator=gen),
    )
    sim = torch.nn.functional.normalize(queries) @ torch.nn.functional.normalize(bank).T
    top_sim, top_idx = sim.topk(20, dim=1)
    votes = torch.zeros(200, 10).scatter_add_(1, bank_labels[top_idx], (top_sim / 0.07).exp())
    want = (votes.argmax(dim=1) == query_labels).double().mean()
    assert float(knn_accuracy(bank, bank_labels, queries, query_labels, top=1)) == pytest.approx(float(want))


def test_knn_accuracy_ties_hand_worked() -> None:
    # the query sees two rows (classes 0 and 1) tied at the same similarity; k = 1: each has half a place
    bank = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    query = torch.tensor([[1.0, 0.0]])
    labels = torch.tensor([0, 1, 2])
    # votes: class 0 and 1 tie at w/2, class 2 gets nothing: top-1 is a coin flip between 0 and 1
    assert float(knn_accuracy(bank, labels, query, torch.tensor([0]), k=1, top=1)) == pytest.approx(0.5)
    assert float(knn_accuracy(bank, labels, query, torch.tensor([0]), k=1, top=1, ties="pessimistic")) == 0.0
    assert float(knn_accuracy(bank, labels, query, torch.tensor([0]), k=1, top=1, ties="optimistic")) == 1.0
    assert float(knn_accuracy(bank, labels, query, torch.tensor([2]), k=1, top=1)) == 0.0
    # a class without a vote ties with the other vote-less classes: 1 of 3 places among 3 classes
    got = knn_accuracy(bank, labels, query, torch.tensor([2]), k=1, top=3, num_classes=5)
    assert float(got) == pytest.approx(1 / 3)


def test_knn_accuracy_collapsed_bank_is_the_class_frequency() -> None:
    """Every bank row identical: all tie, every class votes in proportion to its rows (no kernel luck)."""
    bank = torch.ones(40, 4, dtype=torch.float64)
    labels = torch.tensor([0] * 25 + [1] * 15)
    queries = _randn(10, 4, seed=1).abs() + 0.1
    out = knn_accuracy(bank, labels, queries, torch.tensor([0] * 6 + [1] * 4), k=5, top=1)
    assert float(out) == pytest.approx(0.6)  # class 0 always wins the vote
    for block in (64, 256, 10**6):
        assert torch.equal(
            knn_accuracy(
                bank, labels, queries, torch.tensor([0] * 6 + [1] * 4), k=5, top=1, block_bytes=block
            ),
            out,
        )


def test_knn_accuracy_identical_rows_across_the_cut_off_any_order() -> None:
    bank = _randn(60, 5, seed=30).float()
    bank[10:20] = bank[3]  # a block of duplicates that straddles most cut-offs
    labels = torch.arange(60) % 4
    queries = bank[[3, 5, 7]] + 0.01
    qlab = torch.tensor([0, 1, 3])
    want = knn_accuracy(bank, labels, queries, qlab, k=5, top=(1, 2))
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(3))
    assert torch.equal(knn_accuracy(bank[perm], labels[perm], queries, qlab, k=5, top=(1, 2)), want)
    np.testing.assert_allclose(
        want.numpy(),
        ref.knn_accuracy(bank.numpy(), labels.numpy(), queries.numpy(), qlab.numpy(), 5, 0.07, (1, 2)),
    )


def test_knn_accuracy_numpy_and_errors() -> None:
    bank, labels = _randn(10, 3, seed=1).numpy(), np.arange(10) % 2
    out = knn_accuracy(bank, labels, bank, labels, k=3)
    assert isinstance(out, np.ndarray)
    assert out.shape == (2,)
    assert isinstance(knn_accuracy(bank, labels, bank, labels, top=1), np.float64)
    with pytest.raises(ValueError, match="num_classes"):
        knn_accuracy(bank, labels, bank, labels, num_classes=1)
    with pytest.raises(ValueError, match="temperature"):
        knn_accuracy(bank, labels, bank, labels, temperature=0.0)
    with pytest.raises(ValueError, match="same number of features"):
        knn_accuracy(bank, labels, bank[:, :2], labels)


# ----------------------------------------------------------------------------- modules


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(0, 120), max_size=6), seed=st.integers(0, 2**16))
def test_modules_over_any_batch_split_equal_the_functionals(cuts: list[int], seed: int) -> None:
    z, labels = _views(30, 4, 6, seed=seed)
    perm = torch.randperm(120, generator=torch.Generator().manual_seed(seed))
    z, labels = z[perm], labels[perm]
    y = z[:, :3] * 2 + 0.5 * _randn(120, 3, seed=seed + 2)
    metrics = [RankMe(), RankMe(center=True), AlphaReQ(fit_range=(1, 5)), LiDAR(), LinearCKA()]
    knn = KNNAccuracy(k=7, top=(1, 3))
    for a, b in _splits(120, cuts):
        for m in metrics[:3]:
            m.update(z[a:b])
        metrics[3].update(z[a:b], labels[a:b])
        metrics[4].update(z[a:b], y[a:b])
        knn.update(z[a:b], labels[a:b] % 5, role="bank")
        knn.update(y[a:b, :1].repeat(1, 6) + z[a:b], labels[a:b] % 5, role="query")
    wants = [
        rankme(z),
        rankme(z, center=True),
        alpha_req(z, fit_range=(1, 5)),
        lidar(z, labels),
        linear_cka(z, y),
    ]
    for m, want in zip(metrics, wants):
        assert m.compute().dtype == z.dtype == want.dtype  # float64 in, float64 out, as the functionals
        assert float(m.compute()) == pytest.approx(float(want), rel=1e-11), type(m).__name__
    want_knn = knn_accuracy(z, labels % 5, y[:, :1].repeat(1, 6) + z, labels % 5, k=7, top=(1, 3))
    torch.testing.assert_close(knn.compute(), want_knn)


def test_modules_forward_merge_and_reset() -> None:
    z, labels = _views(10, 3, 4, seed=1)
    rank, lid = RankMe(), LiDAR()
    batch_value = rank(z[:12])
    assert float(batch_value) == pytest.approx(float(rankme(z[:12])), rel=1e-6)
    lid(z[:12], labels[:12])
    rank(z[12:])
    lid(z[12:], labels[12:])
    assert len(rank.gram) == 1  # forward folds the running sums: one partial per process
    assert float(rank.compute()) == pytest.approx(float(rankme(z)), rel=1e-6)
    assert float(lid.compute()) == pytest.approx(float(lidar(z, labels)), rel=1e-6)
    other = RankMe()
    other.update(z[:5])
    rank.merge_state(other)
    assert float(rank.compute()) == pytest.approx(float(rankme(torch.cat([z, z[:5]]))), rel=1e-6)
    rank.reset()
    assert math.isnan(rank.compute())
    rank.update(torch.randn(3, 7, generator=torch.Generator().manual_seed(0)))  # a new dimension after reset


def test_modules_reject_bad_batches_and_keep_state() -> None:
    z = _randn(10, 4, seed=2)
    rank = RankMe()
    rank.update(z)
    before = rank.compute()
    with pytest.raises(ValueError, match="features"):
        rank.update(z[:, :3])
    bad = z.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        rank(bad)
    assert torch.equal(rank.compute(), before)
    knn = KNNAccuracy()
    with pytest.raises(ValueError, match="role"):
        knn.update(z, torch.arange(10), role="gallery")
    with pytest.raises(TypeError, match="integer"):
        knn.update(z, torch.zeros(10))


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_empty_modules_are_nan_and_work_in_a_collection() -> None:
    assert math.isnan(RankMe().compute())
    assert math.isnan(LinearCKA().compute())
    assert math.isnan(LiDAR().compute())
    assert torch.isnan(KNNAccuracy().compute()).all()
    z = _randn(64, 8, seed=3).float()
    coll = MetricCollection({"rankme": RankMe(), "alpha": AlphaReQ(fit_range=(1, 8))})
    coll.update(z)
    out = coll.compute()
    assert float(out["rankme"]) == pytest.approx(float(rankme(z)), rel=1e-5)
    assert float(out["alpha"]) == pytest.approx(float(alpha_req(z, fit_range=(1, 8))), rel=1e-5)


def test_numpy_batches_go_to_the_metric_device() -> None:
    z = _randn(20, 4, seed=5)
    metric = RankMe()
    metric.update(z.numpy())
    assert float(metric.compute()) == pytest.approx(float(rankme(z)), rel=1e-6)
