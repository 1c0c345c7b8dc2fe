"""Identical rows, identical scores: ties are decided by the data, not by the matrix-product kernel.

A BLAS kernel may give two identical rows different dot products at different output positions (MKL
edge kernels on an AMD EPYC scored collapsed float64 embeddings 0.00-0.04 instead of 0.02). On
collapsed and duplicated rows the results must be exact in every dtype and identical for any
``block_bytes`` and row order (world sizes: ``test_distributed.py``). Oracles: closed forms (``k / n``,
the mean of ``1 / copies``, ``19 / 99``) and NumPy references that compute each *distinct* pair once.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedmetrics import AccuracyCalculator, ContrastiveAccuracy, EmbeddingAccuracy, Uniformity
from embedmetrics._engine.core.distinct import canonical, distinct_rows
from embedmetrics.functional import contrastive_accuracy_score, uniformity_score
from oracles import embedding as ref

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
BLOCKS = (256, 4096, 1 << 16, 32 << 20)
TIES = ("average", "pessimistic", "optimistic")


def _duplicated(n: int, distinct: int, d: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(distinct, d, generator=g, dtype=torch.float64)
    groups = torch.randint(0, distinct, (n,), generator=g)
    return base, groups.numpy()


def _perm(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- finding distinct rows


def test_distinct_rows_groups_bitwise_identical_rows_in_a_canonical_order() -> None:
    base, groups = _duplicated(60, 7, 5, seed=0)
    z = base[groups].float()
    found = distinct_rows(canonical(z))
    assert found.inverse is not None
    assert found.counts is not None
    assert torch.equal(found.rows[found.inverse], z)
    assert int(found.counts.sum()) == 60
    assert found.rows.shape[0] == len(np.unique(groups))
    shuffled = distinct_rows(canonical(z[_perm(60, 1)]))
    assert torch.equal(shuffled.rows, found.rows)  # same distinct rows, same order
    assert distinct_rows(torch.randn(30, 4, generator=torch.Generator().manual_seed(2))).all_distinct


def test_negative_zero_is_zero_and_nan_rows_group_by_bits() -> None:
    z = torch.tensor([[0.0, 1.0], [-0.0, 1.0], [float("nan"), 1.0], [float("nan"), 1.0]])
    found = distinct_rows(canonical(z))
    assert found.inverse is not None
    assert found.inverse[0] == found.inverse[1]
    assert found.inverse[2] == found.inverse[3]
    assert found.rows.shape[0] == 2


def test_a_hash_collision_falls_back_to_exact_grouping(monkeypatch: pytest.MonkeyPatch) -> None:
    from embedmetrics._engine.core import distinct

    monkeypatch.setattr(distinct, "row_hash", lambda bits: torch.zeros(bits.shape[0], dtype=torch.int64))
    z = torch.tensor([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    found = distinct.distinct_rows(z)
    assert found.inverse is not None
    assert found.rows.shape[0] == 2
    assert torch.equal(found.rows[found.inverse], z)
    assert distinct.distinct_rows(z[:2]).all_distinct


def test_wide_rows_equal_on_the_probe_columns_are_hashed_whole() -> None:
    """Wide rows are first hashed on a few spread-out columns; rows equal there (but not elsewhere), and
    truly identical rows, still come out exactly as ``np.unique`` of the rows says."""
    g = torch.Generator().manual_seed(3)
    z = torch.randn(50, 200, generator=g)
    z[:, ::7] = 1.0  # every probed column (a stride of 7 for 32 of 200) equal in every row
    assert distinct_rows(z).all_distinct
    z[10], z[20] = z[3], z[3]
    found = distinct_rows(z)
    _, want_inverse = np.unique(z.numpy(), axis=0, return_inverse=True)
    assert found.inverse is not None
    assert torch.equal(found.rows[found.inverse], z)
    assert found.rows.shape[0] == 48
    assert len(set(zip(found.inverse.tolist(), want_inverse.reshape(-1).tolist()))) == 48
    plain = torch.randn(50, 200, generator=g)
    assert distinct_rows(plain).rows is plain  # told apart by the probe: returned as it is


# --------------------------------------------------------------------------- contrastive accuracy


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", DTYPES)
def test_collapsed_embeddings_score_exactly_k_over_n(seed: int, dtype: torch.dtype) -> None:
    z = torch.randn(1, 16, generator=torch.Generator().manual_seed(seed)).repeat(50, 1).to(dtype)
    ks = (1, 5, 60)
    expected = torch.tensor([1 / 50, 5 / 50, 1.0], dtype=torch.float64)
    for block in (256, 32 << 20):
        out = contrastive_accuracy_score(z, z.clone(), topk=ks, block_bytes=block)
        assert torch.equal(out.double(), expected.to(out.dtype).double())
        pes = contrastive_accuracy_score(z, z, topk=ks, ties="pessimistic", block_bytes=block)
        assert torch.equal(pes.double(), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
        opt = contrastive_accuracy_score(z, z, topk=ks, ties="optimistic", block_bytes=block)
        assert torch.equal(opt.double(), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_duplicated_rows_are_exact_for_any_block_size_and_row_order(dtype: torch.dtype) -> None:
    base, groups = _duplicated(400, 100, 16, seed=3)
    z = base[groups].to(dtype)
    copies = np.bincount(groups)[groups]
    truth = float(np.mean(1.0 / copies))  # top-1: a row ties only with its own copies
    rounded = base.to(dtype).double().numpy()
    sim = ref.expanded_similarity(rounded, groups)
    for ties in TIES:
        expected = [ref.contrastive_accuracy_from_similarity(sim, k, ties) for k in (1, 5, 10)]
        values = set()
        for block in BLOCKS:
            for seed in range(3):
                p = _perm(400, seed)
                out = contrastive_accuracy_score(z[p], z[p], topk=(1, 5, 10), ties=ties, block_bytes=block)
                values.add(tuple(out.double().tolist()))
        assert len(values) == 1, values  # bit-identical whatever the blocks and the row order
        got = np.array(values.pop())
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7 if dtype != torch.float64 else 1e-12)
        if ties == "average":
            assert got[0] == pytest.approx(truth, abs=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_duplicates_in_one_view_only(dtype: torch.dtype) -> None:
    # z1 repeats rows, z2 does not (and the other way round): the z2 -> z1 direction ranks identical z1
    # rows as candidates, which must tie exactly
    base, groups = _duplicated(120, 15, 8, seed=4)
    g = torch.Generator().manual_seed(5)
    z1 = base[groups].to(dtype)
    z2 = (base[groups] + 0.5 * torch.randn(120, 8, generator=g, dtype=torch.float64)).to(dtype)
    a, b = ref.normalize_rows(z1.double().numpy()), ref.normalize_rows(z2.double().numpy())
    # each distinct z1 row's similarities computed once and expanded: exact ties between copies
    u, inv = np.unique(a, axis=0, return_inverse=True)
    sim = (u @ b.T)[inv.reshape(-1)]
    for ties in TIES:
        for block in (512, 32 << 20):
            for x, y, s in ((z1, z2, sim), (z2, z1, sim.T)):
                out = contrastive_accuracy_score(x, y, topk=(1, 3), ties=ties, block_bytes=block)
                expected = [ref.contrastive_accuracy_from_similarity(s, k, ties) for k in (1, 3)]
                np.testing.assert_allclose(out.double().numpy(), expected, atol=1e-7)


def test_module_over_batches_equals_functional_on_duplicates() -> None:
    base, groups = _duplicated(90, 10, 6, seed=6)
    z = base[groups].float()
    metric = ContrastiveAccuracy(topk=(1, 4), block_bytes=1024)
    for s in range(0, 90, 25):
        metric.update(z[s : s + 25], z[s : s + 25])
    assert torch.equal(metric.compute(), contrastive_accuracy_score(z, z, topk=(1, 4)))


# --------------------------------------------------------------------------- uniformity


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 7, 50])
def test_collapsed_uniformity_is_exactly_zero(dtype: torch.dtype, n: int) -> None:
    z = torch.randn(1, 16, generator=torch.Generator().manual_seed(n)).repeat(n, 1).to(dtype)
    for block in (256, 32 << 20):
        out = uniformity_score(z, block_bytes=block)
        assert float(out) == 0.0
    metric = Uniformity()
    metric.update(z)
    assert float(metric.compute()) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_duplicated_uniformity_matches_the_oracle_for_any_order(dtype: torch.dtype) -> None:
    base, groups = _duplicated(300, 40, 8, seed=7)
    z = base[groups].to(dtype)
    expected = ref.uniformity(z.double().numpy())  # explicit differences: identical rows at 0
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    for block in BLOCKS:
        values = {float(uniformity_score(z[_perm(300, s)], block_bytes=block)) for s in range(3)}
        assert len(values) == 1, values  # the distinct rows come in one order whatever the input order
        assert values.pop() == pytest.approx(expected, abs=tol)


# --------------------------------------------------------------------------- kNN (AccuracyCalculator)


@pytest.mark.parametrize("dtype", DTYPES)
def test_collapsed_embeddings_give_exact_knn_values(dtype: torch.dtype) -> None:
    z = torch.randn(1, 16, generator=torch.Generator().manual_seed(8)).repeat(100, 1).to(dtype)
    labels = torch.arange(100) % 5  # 20 per class: 19 relevant among the 99 tied neighbours
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"))
    results = _calculator_values_over_blocks_and_orders(calc, z, labels)
    assert len(results) == 1, results
    p_at_1, r_prec, map_r = results.pop()
    assert p_at_1 == 19 / 99
    assert r_prec == pytest.approx(19 / 99, abs=1e-15)
    # one tie block of t = 99 with r = 19 relevant: E[rel_p * hits_<=p] = r/t + p * r(r-1) / (t(t-1))
    t, r = 99, 19
    expected_map = sum((r / t + p * r * (r - 1) / (t * (t - 1))) / (p + 1) for p in range(r)) / r
    assert map_r == pytest.approx(expected_map, abs=1e-14)
    metric = EmbeddingAccuracy(include=("precision_at_1",))
    metric.update(z, labels)
    assert float(metric.compute()["precision_at_1"]) == pytest.approx(19 / 99, abs=1e-7)


def _calculator_values_over_blocks_and_orders(calc: AccuracyCalculator, z, labels) -> set[tuple]:
    """The calculator's values for every block size and two row orders (one element if all agree)."""
    results = set()
    for block in BLOCKS:
        for seed in range(2):
            p = _perm(z.shape[0], seed)
            calc.block_bytes = block
            results.add(tuple(calc.get_accuracy(z[p], z[p], labels[p], labels[p], True).values()))
    return results


def _nearest_block_precision(dist: np.ndarray, labels: np.ndarray) -> float:
    """Expected precision@1 under random tie order, same source (self excluded by index)."""
    n = dist.shape[0]
    d = dist.copy()
    d[np.arange(n), np.arange(n)] = np.inf
    nearest = d.min(axis=1, keepdims=True)
    tied = d == nearest
    relevant = labels[None, :] == labels[:, None]
    return float(np.mean((tied & relevant).sum(1) / tied.sum(1)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_duplicated_rows_knn_matches_the_oracle_for_any_order(dtype: torch.dtype, distance: str) -> None:
    base, groups = _duplicated(240, 30, 8, seed=9)
    z = base[groups].to(dtype)
    labels = torch.from_numpy(groups % 4)
    rounded = base.to(dtype).double().numpy()
    if distance == "cosine":
        u = ref.normalize_rows(rounded)
        base_dist = 1.0 - u @ u.T
    else:
        base_dist = ((rounded[:, None, :] - rounded[None, :, :]) ** 2).sum(-1)
    dist = base_dist[np.ix_(groups, groups)]  # each distinct pair once, then expanded
    expected = _nearest_block_precision(dist, labels.numpy())
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"), distance=distance
    )
    results = _calculator_values_over_blocks_and_orders(calc, z, labels)
    assert len(results) == 1, results
    assert next(iter(results))[0] == pytest.approx(expected, abs=1e-12)
