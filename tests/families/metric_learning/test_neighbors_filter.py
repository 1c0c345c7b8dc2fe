"""The kNN scan's candidate filter (``smallest_keys``) against ``torch.topk`` and NumPy oracles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _cases import KNN_METRICS
from embedmetrics import AccuracyCalculator
from embedmetrics._engine.core import knn
from embedmetrics._engine.core.knn import GROUP_SIZE, column_groups, smallest_keys

KNN = KNN_METRICS


def _padded(s: torch.Tensor, kk: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """``s`` with the +inf padding columns the scan adds, and its grouping."""
    groups = column_groups(s.shape[1], kk)
    assert groups is not None
    pad = groups[0] * GROUP_SIZE - s.shape[1]
    return torch.cat([s, s.new_full((s.shape[0], pad), float("inf"))], dim=1).contiguous(), groups


def _assert_exact_smallest(s: torch.Tensor, kk: int) -> None:
    padded, groups = _padded(s, kk)
    vals, idx = smallest_keys(padded, kk, groups)
    ref_vals, _ = s.topk(kk, dim=1, largest=False, sorted=True)
    torch.testing.assert_close(vals, ref_vals, rtol=0, atol=0, equal_nan=True)
    assert int(idx.max()) < s.shape[1]  # never a padding column
    torch.testing.assert_close(s.gather(1, idx), vals, rtol=0, atol=0, equal_nan=True)
    assert all(len(set(row)) == kk for row in idx.tolist())  # distinct columns
    # Every key strictly below the kk-th smallest is selected (the set is exact up to equal keys).
    below = s < ref_vals[:, -1:]
    chosen = torch.zeros_like(below).scatter_(1, idx, True)
    assert bool((chosen | ~below).all())


def test_column_groups_shapes_and_short_rows():
    assert column_groups(100, 5) is None  # too short: plain topk
    assert column_groups(4 * 5 * GROUP_SIZE - 1, 5) is None
    for n, kk in [(160, 5), (1000, 5), (1037, 5), (20_000, 245), (50_000, 569)]:
        groups = column_groups(n, kk)
        assert groups is not None
        n_groups, n_coarse = groups
        assert 2 * kk <= n_coarse < 4 * kk
        assert n_groups % n_coarse == 0
        assert n <= n_groups * GROUP_SIZE < n + GROUP_SIZE * (n_groups // n_coarse)


@pytest.mark.parametrize("kk", [1, 2, 7])
def test_random_keys(kk):
    g = torch.Generator().manual_seed(kk)
    _assert_exact_smallest(torch.randn(40, 1000, generator=g), kk)
    _assert_exact_smallest(torch.randn(40, 1037, generator=g, dtype=torch.float64), kk)


def test_heavy_ties_at_the_boundary():
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 4, (30, 900), generator=g).float()  # ~225 keys tied at each value
    _assert_exact_smallest(s, 5)
    s = torch.randint(0, 300, (30, 900), generator=g).float()  # small blocks straddling the cut-off
    _assert_exact_smallest(s, 6)


def test_poor_bound_rows_take_the_plain_path_next_to_filtered_rows():
    g = torch.Generator().manual_seed(1)
    s = torch.randn(12, 1200, generator=g)
    s[0] = 0.0  # every key tied: every group is a candidate
    s[1, :700] = -1.0  # more than half the row tied below everything else
    s[2] = torch.arange(1200.0)  # sorted row: correlated columns
    s[3] = torch.arange(1200.0).flip(0)
    s[4, ::3] = float("nan")
    s[5, 1100:] = float("nan")
    s[6, 5:] = float("inf")  # fewer finite keys than kk: infinite bound
    s[7, :] = float("inf")
    _assert_exact_smallest(s, 8)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(min_value=160, max_value=700),
    kk=st.integers(min_value=1, max_value=5),
    levels=st.sampled_from([3, 20, 10_000]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_matches_topk_property(n, kk, levels, seed):
    g = torch.Generator().manual_seed(seed)
    _assert_exact_smallest(torch.randint(0, levels, (9, n), generator=g).float(), kk)


# --------------------------------------------------------------------------- through the calculator
def _brute_force_first_block(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """k = 1, same source, ties averaged: the first neighbour is uniform over the nearest tie block."""
    d = np.abs(x[:, None] - x[None, :]).astype(np.float64)
    np.fill_diagonal(d, np.inf)
    rel = y[:, None] == y[None, :]
    np.fill_diagonal(rel, False)
    big_r = rel.sum(1)
    keep = big_r > 0
    nearest = d == d.min(1, keepdims=True)
    p1 = (nearest & rel).sum(1) / nearest.sum(1)
    return {
        "precision_at_1": p1[keep].mean(),
        "r_precision": p1[keep].mean(),
        "mean_average_precision_at_r": (p1 / np.maximum(big_r, 1))[keep].mean(),
        "mean_average_precision": (p1 / np.maximum(big_r, 1))[keep].mean(),
        "mean_reciprocal_rank": p1[keep].mean(),
    }


def test_ties_at_the_first_neighbour_through_the_filter():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 40, size=300).astype(np.float32)  # ~7 points per value: big tie blocks
    y = rng.integers(0, 3, size=300)
    assert column_groups(300, 2) is not None  # k = 1 → kk = 2: the filter is active
    ours = AccuracyCalculator(include=KNN, k=1).get_accuracy(x[:, None], x[:, None], y, y, True)
    ref = _brute_force_first_block(x, y)
    for m in KNN:
        assert ours[m] == pytest.approx(ref[m], abs=1e-12), m


def _brute_force(q, r, ql, rl, same_source, k, metric):
    q, r = q.astype(np.float64), r.astype(np.float64)
    if metric == "cosine":
        d = (
            1
            - (q / np.linalg.norm(q, axis=1, keepdims=True))
            @ (r / np.linalg.norm(r, axis=1, keepdims=True)).T
        )
    else:
        d = np.sqrt(((q[:, None, :] - r[None, :, :]) ** 2).sum(-1))
    rel = ql[:, None] == rl[None, :]
    if same_source:
        d[np.arange(len(q)), np.arange(len(q))] = np.inf
        rel[np.arange(len(q)), np.arange(len(q))] = False
    big_r = rel.sum(1)
    out: dict[str, list[float]] = {m: [] for m in KNN}
    for i in np.flatnonzero(big_r > 0):
        hit = rel[i][np.argsort(d[i], kind="stable")][:k].astype(np.float64)
        length = min(big_r[i], k)
        prec = np.cumsum(hit) / np.arange(1, k + 1)
        first = np.flatnonzero(hit)
        out["precision_at_1"].append(hit[0])
        out["r_precision"].append(hit[:length].sum() / length)
        out["mean_average_precision_at_r"].append((prec * hit)[:length].sum() / big_r[i])
        out["mean_average_precision"].append((prec * hit).sum() / big_r[i])
        out["mean_reciprocal_rank"].append(1 / (first[0] + 1) if len(first) else 0.0)
    return {m: float(np.mean(v)) for m, v in out.items()}


@pytest.mark.parametrize("same_source", [True, False])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_filtered_scan_matches_brute_force(same_source, metric, dtype):
    rng = np.random.default_rng(17)
    q = rng.normal(size=(300, 6)).astype(dtype)
    ql = rng.integers(0, 120, size=300)  # small classes, so that k = "max_bin_count" keeps K small too
    r, rl = (
        (q, ql) if same_source else (rng.normal(size=(350, 6)).astype(dtype), rng.integers(0, 120, size=350))
    )
    # "max_bin_count": every metric cut at the largest relevant count (k=None lists every reference
    # for MAP and MRR, which leaves the filter nothing to filter)
    for k in (3, "max_bin_count"):
        calc = AccuracyCalculator(include=KNN, k=k, distance=metric, block_bytes=64 * 350 * 8)
        ours = calc.get_accuracy(q, r, ql, rl, same_source)
        most = int(max((rl[None, :] == ql[:, None]).sum(1) - int(same_source)))
        big_k = k if isinstance(k, int) else most
        assert column_groups(r.shape[0], big_k + 1) is not None  # the filter is active
        ref = _brute_force(q, r, ql, rl, same_source, big_k, metric)
        for m in KNN:
            assert ours[m] == pytest.approx(ref[m], abs=1e-9), (m, k)


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_filtered_and_plain_scan_agree_on_heavy_ties(ties, monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, size=(400, 2)).astype(np.float32)  # 36 points: ~11 copies of each
    y = rng.integers(0, 4, size=400)
    calc = AccuracyCalculator(include=KNN, k=4, ties=ties, block_bytes=4 * 400 * 50)
    assert column_groups(400, 5) is not None
    filtered = calc.get_accuracy(x, x, y, y, True)
    monkeypatch.setattr(knn, "column_groups", lambda n_cols, kk: None)
    plain = calc.get_accuracy(x, x, y, y, True)
    for m in KNN:
        assert filtered[m] == pytest.approx(plain[m], abs=1e-12), m


def test_rows_for_shard_gives_every_rank_a_share_of_one_block_scans():
    from embedmetrics._engine.core.scan import block_ranges, rows_for_shard, shard_blocks

    for n, world in [(8192, 2), (8192, 4), (5, 3), (3, 4)]:
        rows = rows_for_shard(n, 10**9, (0, world))  # a budget that fits everything in one block
        shares = [shard_blocks(block_ranges(n, rows), (r, world)) for r in range(world)]
        covered = sorted(i for share in shares for a, b in share for i in range(a, b))
        assert covered == list(range(n))  # every row exactly once
        sizes = [sum(b - a for a, b in share) for share in shares]
        assert max(sizes) - min(sizes) <= rows  # balanced to within one block
        assert min(sizes) > 0 or n < world
    assert rows_for_shard(100, 7, None) == 7
    assert rows_for_shard(100, 7, (0, 1)) == 7
