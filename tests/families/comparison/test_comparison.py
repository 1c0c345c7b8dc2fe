"""Paired tests against scipy (exact tests to 1e-10) and exact enumeration, corrections against their
definitions, bootstrap intervals against scipy.stats.bootstrap, and the errors of bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch

from embedmetrics.functional import bootstrap_ci, compare, paired_test

ALTERNATIVES = ("two-sided", "greater", "less")


def _pair(n: int, seed: int, *, ties: bool = False, zeros: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = a - 0.05 + 0.2 * rng.standard_normal(n)
    if ties:  # differences on a coarse grid: tied |d|
        b = a - np.round(rng.standard_normal(n) * 2) / 10 - 0.05
    if zeros:
        b[: max(1, n // 5)] = a[: max(1, n // 5)]
    return a, b


@pytest.mark.parametrize("n", [5, 30, 200])
@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("seed", [0, 1])
def test_t_equals_scipy(n: int, alternative: str, seed: int) -> None:
    a, b = _pair(n, seed)
    want = scipy.stats.ttest_rel(a, b, alternative=alternative)
    got = paired_test(torch.tensor(a), torch.tensor(b), test="t", alternative=alternative)
    assert float(got.statistic) == pytest.approx(want.statistic, rel=1e-10, abs=1e-10)
    assert float(got.p_value) == pytest.approx(want.pvalue, rel=1e-10, abs=1e-10)
    d = a - b
    assert float(got.mean_difference) == pytest.approx(d.mean(), abs=1e-12)
    assert float(got.effect_size) == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-10)


WILCOXON_CASES = {
    "exact (no ties, no zeros)": (20, False, False),
    "every sign flip (ties, n <= 13)": (10, True, False),
    "every sign flip (zeros, n <= 13)": (12, False, True),
    "normal (ties, n > 13)": (40, True, True),
    "normal (n > 50)": (80, False, False),
}


@pytest.mark.parametrize("case", list(WILCOXON_CASES), ids=list(WILCOXON_CASES))
@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wilcoxon_equals_scipy(case: str, alternative: str, seed: int) -> None:
    n, ties, zeros = WILCOXON_CASES[case]
    a, b = _pair(n, seed, ties=ties, zeros=zeros)
    want = scipy.stats.wilcoxon(a, b, alternative=alternative)
    got = paired_test(a, b, test="wilcoxon", alternative=alternative)
    assert float(got.statistic) == pytest.approx(want.statistic, rel=1e-10, abs=1e-10), case
    assert float(got.p_value) == pytest.approx(want.pvalue, rel=1e-10, abs=1e-10), case


def _exact_sign_flip_p(d: np.ndarray, alternative: str) -> float:
    """Every one of the 2^Q sign vectors (the exact randomization distribution of the mean)."""
    observed = d.mean()
    means = np.array([(np.array(signs) * d).mean() for signs in itertools.product((1, -1), repeat=len(d))])
    tol = 1e-12 * abs(observed)
    if alternative == "greater":
        return float(np.mean(means >= observed - tol))
    if alternative == "less":
        return float(np.mean(means <= observed + tol))
    return float(np.mean(np.abs(means) >= abs(observed) - tol))


@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("seed", [0, 3])
def test_randomization_is_within_sampling_error_of_every_sign_flip(alternative: str, seed: int) -> None:
    a, b = _pair(12, seed)
    exact = _exact_sign_flip_p(a - b, alternative)
    n = 20_000
    got = float(paired_test(a, b, test="randomization", alternative=alternative, n_resamples=n).p_value)
    sd = math.sqrt(max(exact * (1 - exact), 1 / n) / n)
    assert abs(got - exact) <= 5 * sd + 1 / n, (got, exact)


def test_resampling_is_deterministic_for_a_seed() -> None:
    a, b = _pair(50, 0)
    for test in ("randomization", "bootstrap"):
        first = paired_test(a, b, test=test, seed=3)
        assert float(paired_test(a, b, test=test, seed=3).p_value) == float(first.p_value)
        others = {float(paired_test(a, b, test=test, seed=s, n_resamples=200).p_value) for s in range(6)}
        assert len(others) > 1, test  # the seed matters


def test_bootstrap_test_against_a_numpy_oracle() -> None:
    """The paired bootstrap test: resample the differences, centre on the observed mean."""
    a, b = _pair(40, 5)
    d = a - b
    rng = np.random.default_rng(11)
    means = d[rng.integers(0, len(d), (20_000, len(d)))].mean(axis=1) - d.mean()
    want = (1 + np.sum(np.abs(means) >= abs(d.mean()))) / (1 + len(means))
    got = float(paired_test(a, b, test="bootstrap", n_resamples=20_000).p_value)
    assert abs(got - want) < 0.01


def _holm(p: list[float]) -> list[float]:
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


@pytest.mark.parametrize("correction", ["holm", "bonferroni", None])
def test_compare_corrects_every_pair(correction: str | None) -> None:
    rng = np.random.default_rng(0)
    base = rng.random(60)
    values = {f"s{i}": base + 0.02 * i + 0.05 * rng.standard_normal(60) for i in range(5)}
    result = compare(values, test="t", correction=correction, alpha=0.05)
    assert len(result.pairs) == 10
    raw = []
    for (x, y), p in zip(result.pairs, result.p_value.tolist()):
        want = scipy.stats.ttest_rel(values[x], values[y]).pvalue
        assert p == pytest.approx(want, rel=1e-10)
        raw.append(want)
    want_corrected = {"holm": _holm(raw), "bonferroni": [min(1.0, 10 * p) for p in raw], None: raw}[
        correction
    ]
    np.testing.assert_allclose(result.p_value_corrected.numpy(), want_corrected, rtol=1e-10)
    for (x, y), pc in zip(result.pairs, want_corrected):
        i, j = result.names.index(x), result.names.index(y)
        assert bool(result.significant[i, j]) == bool(result.significant[j, i]) == (pc <= 0.05)
    best = result.names[int(torch.argmax(result.means))]
    assert set(result.beats(best)) == {
        n
        for n in result.names
        if n != best and bool(result.significant[result.names.index(best), result.names.index(n)])
    }
    assert result.to_dict()["pairs"][0]["p_value"] == pytest.approx(raw[0], rel=1e-10)
    assert "<sup>" in result.to_markdown() or not any(result.beats(n) for n in result.names)


def test_compare_takes_a_matrix_and_resamples_every_pair_at_once() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.random((4, 50))
    result = compare(torch.tensor(matrix), test="randomization", correction=None, n_resamples=4000)
    assert result.names == ["0", "1", "2", "3"]
    single = paired_test(matrix[0], matrix[3], test="randomization", n_resamples=4000)
    assert float(result.p_value[2]) == pytest.approx(float(single.p_value))  # the same resamples


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_bootstrap_ci_agrees_with_scipy(method: str) -> None:
    rng = np.random.default_rng(2)
    values = rng.exponential(size=120)  # skewed: BCa differs from the percentile interval
    want = scipy.stats.bootstrap(
        (values,), np.mean, confidence_level=0.9, n_resamples=20_000, method=method, random_state=0
    )
    got = bootstrap_ci(values, confidence=0.9, n_resamples=20_000, method=method)
    assert float(got.mean) == pytest.approx(values.mean())
    assert float(got.low) == pytest.approx(want.confidence_interval.low, abs=0.015)
    assert float(got.high) == pytest.approx(want.confidence_interval.high, abs=0.015)


def test_bootstrap_ci_of_several_columns() -> None:
    values = torch.rand(80, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ci = bootstrap_ci(values, n_resamples=2000)
    assert ci.low.shape == (3,)
    for j in range(3):
        one = bootstrap_ci(values[:, j], n_resamples=2000)
        assert float(one.low) == pytest.approx(float(ci.low[j]))  # the same resamples per column
    assert bool((ci.low < ci.mean).all() and (ci.mean < ci.high).all())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: paired_test([0.1, 0.2, 0.3], [0.1, 0.2]), "same length"),
        (lambda: paired_test([0.1, float("nan"), 0.3], [0.1, 0.2, 0.3]), "NaN"),
        (lambda: paired_test([0.1], [0.2]), "at least 2 queries"),
        (lambda: paired_test([0.1, 0.2], [0.2, 0.3], n_resamples=0), "n_resamples"),
        (lambda: paired_test([0.1, 0.2], [0.2, 0.3], test="z"), "`test`.*'z'"),
        (lambda: paired_test([0.1, 0.2], [0.2, 0.3], alternative="two"), "`alternative`"),
        (lambda: compare({"a": [0.1, 0.2], "b": [0.2, 0.3]}, alpha=1.5), "`alpha`.*1.5"),
        (lambda: compare({"a": [0.1, 0.2], "b": [0.2, 0.3]}, alpha=0), "`alpha`"),
        (lambda: compare({"a": [0.1, 0.2], "b": [0.2, 0.3]}, correction="sidak"), "`correction`.*'sidak'"),
        (lambda: compare({"a": [0.1, 0.2]}), "at least 2 systems"),
        (lambda: bootstrap_ci([0.1, 0.2, 0.3], confidence=1.0), "`confidence`"),
        (lambda: bootstrap_ci([0.1, 0.2, 0.3], method="basic"), "`method`"),
        (lambda: bootstrap_ci([0.1, 0.2, 0.3], n_resamples=-3), "n_resamples"),
    ],
)
def test_bad_input_names_the_argument(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()
