"""Comparisons in every regime (issue 38): far tails equal to scipy, BCa equal to scipy on 0/1 values,
common shifts and query order that change nothing, resampling kernels equal to their definitions,
and the clear errors of the inputs that cannot work."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.classification import MulticlassAccuracy

import embedmetrics as em
from embedmetrics import ArgumentKindError
from embedmetrics._engine.comparison import resampling
from embedmetrics._engine.comparison.bootstrap import _quantiles
from embedmetrics.functional import bootstrap_ci, compare, paired_test

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _dist import run_distributed

ALTERNATIVES = ("two-sided", "greater", "less")


# ----------------------------------------------------------------------------- item 1: tails


@pytest.mark.parametrize("n", [60, 200, 1000, 1800])
@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
def test_wilcoxon_far_tail_equals_scipy(n: int, alternative: str) -> None:
    """Every difference positive: the normal approximation's p-value down to ~1e-297 (n = 1800)."""
    d = np.arange(1, n + 1) / n
    want = scipy.stats.wilcoxon(d, alternative=alternative).pvalue
    got = float(paired_test(d, np.zeros(n), test="wilcoxon", alternative=alternative).p_value)
    assert want > 0
    assert got == pytest.approx(want, rel=1e-9, abs=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_wilcoxon_strong_effects_with_ties_equal_scipy(seed: int, alternative: str) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(300)
    b = a - 0.3 - np.round(rng.random(300) * 4) / 20  # tied |d|, far tail
    want = scipy.stats.wilcoxon(a, b, alternative=alternative).pvalue
    got = float(paired_test(a, b, test="wilcoxon", alternative=alternative).p_value)
    assert got == pytest.approx(want, rel=1e-9, abs=0.0)
    assert (got > 0) == (want > 0)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_t_far_tail_equals_scipy(alternative: str) -> None:
    rng = np.random.default_rng(4)
    a = rng.random(200)
    b = a - 0.5 + 0.05 * rng.standard_normal(200)
    want = scipy.stats.ttest_rel(a, b, alternative=alternative).pvalue
    got = float(paired_test(a, b, test="t", alternative=alternative).p_value)
    assert got == pytest.approx(want, rel=1e-9, abs=0.0)


# ----------------------------------------------------------------------------- item 2: BCa


@pytest.mark.parametrize(("n", "ones"), [(20, 10), (40, 20), (40, 12), (25, 5), (30, 3)])
def test_bca_on_binary_values_equals_scipy(n: int, ones: int) -> None:
    """0/1 values: the resampled means sit on atoms of ``1/n`` that hold several percent of the
    resamples each. In these cases both BCa levels fall well inside an atom (scipy gives the same
    interval for random states 0 to 5), so the bounds are atoms themselves and ours must equal scipy's
    for any seed (three tried); the old bias correction (ties counted below) moved a bound by an atom
    ([0.25, 0.65] for ten ones in twenty)."""
    values = np.zeros(n)
    values[:ones] = 1.0
    want = scipy.stats.bootstrap(
        (values,), np.mean, n_resamples=20_000, method="BCa", random_state=0
    ).confidence_interval
    for seed in range(3):
        got = bootstrap_ci(values, n_resamples=20_000, method="bca", seed=seed)
        assert (float(got.low), float(got.high)) == pytest.approx((want.low, want.high), abs=1e-12)


def test_bca_on_continuous_values_equals_scipy_within_sampling_error() -> None:
    """Skewed values, 50,000 resamples each side. A quantile of ``R`` resampled means has a standard
    deviation of about ``sqrt(p (1 - p) / R) / f`` with ``f`` the density at the quantile (normal:
    ``phi(z) / se``), so about ``2.2 se / sqrt(R)`` at the 2.5% level; two independent estimates
    differ by about ``3.1 se / sqrt(R)``; BCa's estimated ``z0`` adds as much again. 6 standard
    deviations of that."""
    rng = np.random.default_rng(2)
    values = rng.exponential(size=150)
    resamples = 50_000
    want = scipy.stats.bootstrap(
        (values,), np.mean, n_resamples=resamples, method="BCa", random_state=1
    ).confidence_interval
    got = bootstrap_ci(values, n_resamples=resamples, method="bca")
    se = values.std(ddof=1) / math.sqrt(len(values))
    tolerance = 6 * 2 * 3.1 * se / math.sqrt(resamples)
    assert float(got.low) == pytest.approx(want.low, abs=tolerance)
    assert float(got.high) == pytest.approx(want.high, abs=tolerance)


# ----------------------------------------------------------------------------- item 4: shifts


def _grid_pair(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Values on a grid of 1/8 (exact after adding 1e14, whose float64 spacing is 1/64)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 9, n) / 8
    return a, np.clip(a - rng.integers(-2, 4, n) / 8, 0, 1)


@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_a_common_shift_changes_no_p_value(test: str) -> None:
    a, b = _grid_pair(60, 0)
    base = paired_test(a, b, test=test, n_resamples=3000)
    for shift in (1e12, 1e14):
        moved = paired_test(a + shift, b + shift, test=test, n_resamples=3000)
        assert float(moved.p_value) == float(base.p_value), shift
    systems = {"x": a, "y": b, "z": (a + b) / 2}
    plain = compare(systems, test=test, n_resamples=2000).p_value
    shifted = compare({k: v + 1e14 for k, v in systems.items()}, test=test, n_resamples=2000).p_value
    assert np.array_equal(plain, shifted)


@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_identical_systems_are_never_significant(test: str) -> None:
    a = np.random.default_rng(1).random(40) * 1e300
    assert float(paired_test(a, a.copy(), test=test, n_resamples=500).p_value) == 1.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: paired_test([1.0, math.inf, 0.0], [0.0, 0.0, 0.0]), r"`a` must be finite.*inf"),
        (lambda: paired_test(np.full(3, 1e308), np.full(3, 1e308)), r"`a` overflow.*1e\+308"),
        (
            lambda: paired_test(np.array([8e307, 0.0]), np.array([-8e307, 0.0])),
            r"differences of `a`, `b` overflow float64",
        ),
        (lambda: compare({"x": [0.0, -math.inf], "y": [0.0, 1.0]}), r"values\['x'\]. must be finite"),
        (lambda: bootstrap_ci([0.5, math.inf, 0.1]), r"must be finite.*inf"),
        (lambda: bootstrap_ci(np.full(3, 1e308)), "overflow"),
    ],
)
def test_non_finite_or_overflowing_values_are_refused(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------------- item 5: the kernels


def test_sign_flip_sums_are_the_signed_sums_of_their_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The definition, written out: bit ``b`` of byte ``j`` of a resample's random bytes (the raw 64-bit
    outputs of the chunk's generator, ``chunk_generator``, least significant byte first) signs query
    ``8 j + b``; chunks of a few resamples (a small chunk size, built by worker threads) give what one
    product of the whole sign matrix gives."""
    monkeypatch.setattr(resampling, "_SIGN_CHUNK", 64 * 5)  # 5 resamples a chunk: many chunks
    values = torch.randn(61, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = resampling.sign_flip_sums(values, 23, seed=7)
    signs = []
    for k, rows in enumerate(resampling.chunks(23, 64, resampling._SIGN_CHUNK)):
        words = resampling.chunk_generator(7, k).bit_generator.random_raw(rows)  # 8 bytes a resample
        for word in words:
            bits = [(int(word) >> (8 * j + b)) & 1 for j in range(8) for b in range(8)][:61]
            signs.append([2.0 * bit - 1 for bit in bits])
    want = np.array(signs) @ values.numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_bootstrap_sums_are_sums_over_drawn_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``counts._POISSON_FROM`` queries, a resample is ``Q`` indices ``integers(0, Q)`` of its
    chunk's generator: the sums over those rows, written out."""
    monkeypatch.setattr(resampling, "_COUNT_CHUNK", 40 * 3)
    values = torch.randn(40, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = resampling.bootstrap_sums(values, 10, seed=5)
    sizes = resampling.chunks(10, 40, resampling._COUNT_CHUNK)
    picks = np.concatenate(
        [resampling.chunk_generator(5, k).integers(0, 40, (r, 40)) for k, r in enumerate(sizes)]
    )
    want = values.numpy()[picks].sum(axis=1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert len(sizes) == 4  # chunked over resamples


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_same_p_values_and_interval_on_a_gpu() -> None:
    """The resamples are drawn on the CPU: the same seed gives the same results on the GPU."""
    a, b = _grid_pair(500, 3)
    c = np.random.default_rng(0).random(500)
    for test in ("randomization", "bootstrap"):
        on_cpu = compare({"a": a, "b": b, "c": c}, test=test, n_resamples=2000).p_value
        on_gpu = compare(
            {k: torch.tensor(v, device="cuda") for k, v in {"a": a, "b": b, "c": c}.items()},
            test=test, n_resamples=2000,
        ).p_value  # fmt: skip
        assert np.array_equal(on_cpu, on_gpu.cpu().numpy()), test
    # p-values (count + 1) / (resamples + 1) divided as on the CPU (a CUDA kernel dividing by a
    # number multiplies by its reciprocal: 0.9301397205588823 became ...822); the means are summed by
    # the device (its own order: the last bit may differ)
    values = torch.rand(4, 4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for test in ("randomization", "bootstrap"):
        here, there = (compare(v, test=test, n_resamples=500) for v in (values, values.cuda()))
        assert np.array_equal(here.p_value, there.p_value.cpu().numpy()), test
        np.testing.assert_allclose(here.means, there.means.cpu().numpy(), rtol=1e-15, atol=0)
    ci = bootstrap_ci(c, n_resamples=2000, method="bca")
    gpu = bootstrap_ci(torch.tensor(c, device="cuda"), n_resamples=2000, method="bca")
    assert float(gpu.low) == pytest.approx(float(ci.low), rel=1e-12)
    assert float(gpu.high) == pytest.approx(float(ci.high), rel=1e-12)


def test_the_chunks_are_bounded_and_linear() -> None:
    """Entries per chunk at most the chunk's size (or one resample); the number of chunks grows
    linearly with the queries and the resamples."""
    for entries in (resampling._SIGN_CHUNK, resampling._COUNT_CHUNK):
        for queries in (10, 1000, 10**5, 10**6, 10**7):
            sizes = resampling.chunks(10_000, queries, entries)
            assert sum(sizes) == 10_000
            assert max(sizes) * queries <= max(entries, queries)
            assert len(sizes) <= 2 * 10_000 * queries / entries + 1


# ----------------------------------------------------------------------------- items 10: query order


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000))
def test_every_permutation_of_the_queries_gives_the_same_results(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = np.round(rng.random(30), 1)  # ties: rows that sort equal on a value
    b, c = np.round(a - 0.1 * rng.random(30), 1), np.round(rng.random(30), 1)
    p = rng.permutation(30)
    for test in ("randomization", "bootstrap"):
        one = paired_test(a, b, test=test, n_resamples=300)
        other = paired_test(a[p], b[p], test=test, n_resamples=300)
        assert float(one.p_value) == float(other.p_value)
        first = compare({"a": a, "b": b, "c": c}, test=test, n_resamples=300)
        second = compare({"a": a[p], "b": b[p], "c": c[p]}, test=test, n_resamples=300)
        assert np.array_equal(first.p_value, second.p_value)
        assert np.array_equal(first.means, second.means)  # summed in the canonical order too
    values = np.stack([a, c], axis=1)
    for method in ("percentile", "bca"):
        ci, moved = (bootstrap_ci(v, n_resamples=300, method=method) for v in (values, values[p]))
        assert np.array_equal(ci.low, moved.low)
        assert np.array_equal(ci.high, moved.high)


def test_confidence_interval_merged_in_any_order() -> None:
    g = torch.Generator().manual_seed(3)
    batches = [(torch.rand(5, 8, generator=g), torch.rand(5, 8, generator=g) < 0.3) for _ in range(3)]
    parts = []
    for batch in batches:
        part = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=500)
        part.update(*batch)
        parts.append(part)
    results = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        merged = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=500)
        for i in order:
            merged.merge_state(parts[i])
        results.append(merged.compute())
    for other in results[1:]:
        for key in ("ci_low", "ci_high"):
            assert torch.equal(results[0][key], other[key])


#: rows of each rank by world size (rank 1 of 3 idle)
SPLITS = {1: [(0, 24)], 3: [(0, 17), (17, 17), (17, 24)]}


def interval_target(rank: int, world: int) -> dict[str, list[float]]:
    g = torch.Generator().manual_seed(11)
    preds, target = torch.rand(24, 6, generator=g), torch.rand(24, 6, generator=g) < 0.3
    order = torch.randperm(24, generator=torch.Generator().manual_seed(world))  # another order per world
    preds, target = preds[order], target[order]
    metric = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=400, method="bca")
    start, stop = SPLITS[world][rank]
    if stop > start:
        metric.update(preds[start:stop], target[start:stop])
    return {k: [float(v)] for k, v in metric.compute().items()}


@pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed (gloo)")
def test_confidence_interval_equal_on_any_split_across_gloo_ranks() -> None:
    """Three ranks, uneven shares (one idle), the queries in another order than in one process."""
    single = interval_target(0, 1)
    for result in run_distributed(interval_target, 3):
        assert result == single


# ----------------------------------------------------------------------------- items 3, 6-9


def test_confidence_interval_of_one_or_no_query_has_nan_bounds() -> None:
    metric = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=100)
    g = torch.Generator().manual_seed(0)
    metric(torch.rand(4, 6, generator=g), torch.rand(4, 6, generator=g) < 0.5)
    preds, target = torch.rand(1, 6, generator=g), torch.tensor([[False, False, True, False, False, False]])
    last = metric(preds, target)  # a final one-query batch
    alone = em.RetrievalMRR(aggregation="none")(preds, target)
    assert float(last["value"]) == float(alone) > 0
    assert math.isnan(float(last["ci_low"]))
    assert math.isnan(float(last["ci_high"]))
    metric.reset()
    empty = em.ConfidenceInterval(em.RetrievalMRR(aggregation="none"), n_resamples=100)
    with pytest.warns(UserWarning, match="before the ``update``"):
        result = empty.compute()
    assert all(math.isnan(float(v)) for v in result.values())


def test_compare_refuses_names_that_collide_as_text() -> None:
    with pytest.raises(ValueError, match=r"`values` must name every system differently.*\[1, '1'\]"):
        compare({1: [0.1, 0.2, 0.3], "1": [0.2, 0.2, 0.3]})


@pytest.mark.parametrize(
    "call",
    [
        lambda: paired_test([0.1, 0.2], [0.3, 0.1], test="bootstrap", n_resamples=100_000_001),
        lambda: bootstrap_ci([0.1, 0.2], n_resamples=100_000_001),
    ],
    ids=["paired_test", "bootstrap_ci"],
)
def test_too_many_resamples_are_refused_up_front(call) -> None:  # type: ignore[no-untyped-def]
    """Past the documented most, a clear error before any work."""
    with pytest.raises(ValueError, match=r"`n_resamples` must be at most 100,000,000, got 100000001"):
        call()


def test_more_than_2_24_resamples_give_an_interval() -> None:
    """More than 2^24 resamples works (no ``torch.quantile`` size limit)."""
    ci = bootstrap_ci([0.0, 1.0], n_resamples=(1 << 24) + 1)
    assert (float(ci.low), float(ci.high)) == (0.0, 1.0)  # both ends are drawn (each 1/4 of the time)


def test_quantiles_equal_numpy() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1001, 3))
    levels = np.array([0.0, 0.013, 0.5, 0.975, 1.0])
    got = _quantiles(torch.tensor(np.sort(x, axis=0)), torch.tensor(levels)[:, None].expand(5, 3))
    np.testing.assert_allclose(got.numpy(), np.quantile(x, levels, axis=0), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize(
    "metric",
    [MulticlassAccuracy(num_classes=3, average=None), em.Uniformity()],
    ids=["torchmetrics MulticlassAccuracy", "Uniformity"],
)
def test_confidence_interval_refuses_metrics_without_per_query_values(metric) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"`metric` must be an embedmetrics metric that returns per-query"):
        em.ConfidenceInterval(metric)


@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_resampling_under_inference_mode_as_in_a_validation_loop(test: str) -> None:
    """Lightning validates under ``torch.inference_mode``; the resampling threads still fill their buffers."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.rand(300, generator=g), torch.rand(300, generator=g)
    expected = paired_test(a, b, test=test, n_resamples=500, seed=1)
    with torch.inference_mode():
        got = paired_test(a, b, test=test, n_resamples=500, seed=1)
        interval = bootstrap_ci(a, n_resamples=500, seed=1)
    assert float(got.p_value) == float(expected.p_value)
    assert [float(v) for v in interval] == [float(v) for v in bootstrap_ci(a, n_resamples=500, seed=1)]


def test_p_values_are_float64_whatever_the_values() -> None:
    """float32 per-query values (what `aggregation="none"` gives) and Python lists: the far tails stay."""
    rng = np.random.default_rng(12)
    a = rng.random(1000) + 0.5
    b = rng.random(1000)
    want = scipy.stats.wilcoxon(a.astype(np.float32).astype(np.float64), b.astype(np.float32)).pvalue
    got = paired_test(
        torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32), test="wilcoxon"
    )
    assert got.p_value.dtype == torch.float64
    assert 0 < float(got.p_value) == pytest.approx(want, rel=1e-9)
    close = [0.5 + 1e-9 * i for i in range(20)]
    t = paired_test(close, [0.5] * 20, test="t")
    assert float(t.p_value) == pytest.approx(scipy.stats.ttest_rel(close, [0.5] * 20).pvalue, rel=1e-6)


@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_a_pair_s_p_value_ignores_the_scale_of_other_systems(test: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.random(200)
    b = a - 0.02 + 0.1 * rng.standard_normal(200)
    alone = compare({"a": a, "b": b}, test=test, n_resamples=2000, correction=None).p_value
    with_big = compare({"a": a, "b": b, "c": a + 1e14}, test=test, n_resamples=2000, correction=None).p_value
    assert float(with_big[0]) == pytest.approx(float(alone[0]), abs=1e-12)


_A, _B = [1.0, 2.0, 3.0], [1.0, 2.5, 3.5]


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda: paired_test(_A, _B, test="bootstrap", seed=1.5), ArgumentKindError, "`seed`"),
        (lambda: paired_test(_A, _B, test="bootstrap", seed=None), ArgumentKindError, "`seed`"),
        (lambda: paired_test(_A, _B, test="bootstrap", seed=-1), ValueError, "`seed`"),
        (lambda: bootstrap_ci(torch.rand(10, 0)), ValueError, r"`values`.*\(10, 0\)"),
    ],
)  # fmt: skip
def test_a_seed_or_values_of_the_wrong_kind_are_named(call, kind, message: str) -> None:  # type: ignore[no-untyped-def]
    """``seed`` refused as ``n_resamples`` is (the kind: ``ArgumentKindError``; the value:
    ``ValueError``); values with no column named with their shape."""
    with pytest.raises(kind, match=message):
        call()


def test_a_numpy_integer_seed_is_taken_as_the_int() -> None:
    a, b = np.linspace(0, 1, 40), np.linspace(0, 1, 40) ** 2
    seeded = paired_test(a, b, test="bootstrap", n_resamples=200, seed=np.int64(3)).p_value
    assert float(seeded) == float(paired_test(a, b, test="bootstrap", n_resamples=200, seed=3).p_value)
