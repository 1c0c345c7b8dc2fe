"""The kNN statistics rescore only the near neighbours whose relevance differs (``mixed_runs``).

Under a "kernel" whose rounding depends on a row's place in the block (well within the canonical
keys' margin), every query's statistics stay the same bits: equal to the route that rescores every
listed neighbour (``return_neighbors=True``), alone or in any batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import embedmetrics._engine.core.knn as knn_module
from _skewed_kernels import place_dependent_products
from embedmetrics._engine.core.knn import STAT_NAMES, knn_scan, relevant_counts


def _data(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer rows, permuted (exact ties), some nudged (near ties); four classes."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(-2, 3, (5, 10), generator=g).to(dtype)
    x = torch.stack([base[i % 5][torch.randperm(10, generator=g)] for i in range(90)])
    x[::4] += 1e-4 * torch.randn(23, 10, generator=g, dtype=dtype)
    return x, torch.randint(0, 4, (90,), generator=g)


def _stats(
    x: torch.Tensor,
    y: torch.Tensor,
    rows: torch.Tensor,
    distance: str,
    ties: str,
    full: bool,
    stats: tuple[str, ...] = STAT_NAMES,
) -> dict[str, torch.Tensor]:
    self_index = rows.clone()
    counts, _, _ = relevant_counts(y[rows], y, self_index, None)
    k = 30  # the same for every batch (the largest class holds fewer)
    out = knn_scan(
        x[rows], x, y[rows], y, k=k, counts=counts, self_index=self_index, distance=distance, ties=ties,
        return_neighbors=full, stats=stats,
    )  # fmt: skip
    return out.stats


#: Subsets of the statistics that read different reaches of a list: every place (AP, RR), the first
#: ``min(R, k)`` (R-precision, MAP@R; here ``R < k``), the first place only (precision@1).
READS = {
    "all": STAT_NAMES,
    "upto_r": ("r_precision", "map_at_r"),
    "first": ("precision_at_1",),
    "first_and_r": ("precision_at_1", "r_precision"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("distance", ["euclidean", "cosine", "dot"])
@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("reads", list(READS))
def test_statistics_equal_the_fully_rescored_route_in_any_batch(
    dtype: torch.dtype, distance: str, ties: str, reads: str
) -> None:
    """Also where the statistics read only part of each list: the near neighbours past what they read
    keep their product keys, and no value read changes."""
    x, y = _data(1, dtype)
    every, stats = torch.arange(90), READS[reads]
    want = _stats(x, y, every, distance, ties, full=True, stats=stats)
    with place_dependent_products(knn_module, 3e-7 if dtype == torch.float32 else 1e-15):
        batch = _stats(x, y, every, distance, ties, full=False, stats=stats)
        backwards = _stats(x, y, every.flip(0), distance, ties, full=False, stats=stats)
        alone = {i: _stats(x, y, torch.tensor([i]), distance, ties, False, stats) for i in (0, 41, 89)}
    for name, values in want.items():
        assert torch.equal(batch[name], values), name
        assert torch.equal(backwards[name], values.flip(0)), name
        for i, one in alone.items():
            assert torch.equal(one[name], values[i : i + 1]), (name, i)


@pytest.mark.parametrize("direction", ["up", "down", "both"])
def test_nearly_sorted_rows_give_their_smallest_keys_in_order(direction: str) -> None:
    """After rescoring, a row is checked only next to its changed places: an entry moved up past its
    next neighbour or down past its previous one is found, and the row ranked again (the oracle: a
    ``topk`` of the whole row)."""
    from embedmetrics._engine.core.canonical import _smallest_of_nearly_sorted

    g = torch.Generator().manual_seed({"up": 0, "down": 1, "both": 2}[direction])
    keys = torch.randn(40, 12, generator=g, dtype=torch.float64).sort(dim=1).values
    cols = torch.randperm(40 * 12, generator=g).view(40, 12)
    changed = torch.randperm(40 * 12, generator=g)[:60].sort().values
    shift = torch.rand(60, generator=g, dtype=torch.float64) * 3
    sign = {"up": 1.0, "down": -1.0, "both": torch.where(torch.rand(60, generator=g) < 0.5, 1.0, -1.0)}
    keys.view(-1)[changed] += sign[direction] * shift
    want, pick = keys.topk(7, dim=1, largest=False, sorted=True)
    want_cols = cols.gather(1, pick)
    top, top_cols = _smallest_of_nearly_sorted(keys, cols, 7, changed)  # ranks in the caller's scratch
    assert torch.equal(top, want)
    assert torch.equal(top_cols, want_cols)


def _whole_row_rule(
    keys: torch.Tensor, margins: torch.Tensor, kinds: torch.Tensor, kk: int, reach: torch.Tensor | None
) -> torch.Tensor:
    """The places to rescore, by the rule written on whole rows, one row at a time: the members of every
    run of near keys (each within the row's margin of the next); with classes (``kinds``), of the runs
    that start within ``reach`` (``None``: every run), all members of a run of more than one class, and
    of the others those that can tie with the ``kk - 1``-th key."""
    want = torch.zeros_like(keys, dtype=torch.bool)
    for i in range(keys.shape[0]):
        row, m, j = keys[i].tolist(), float(margins[i]), 0
        while j < len(row):
            end = j
            while end + 1 < len(row) and row[end + 1] - row[end] <= m:  # inf - inf is NaN: never close
                end += 1
            if end > j and (reach is None or j < int(reach[i])):
                members = range(j, end + 1)
                mixed = kinds is not None and len({int(kinds[i, p]) for p in members}) > 1
                for p in members:
                    want[i, p] = kinds is None or mixed or row[p] >= row[kk - 2] - m
            j = end + 1
    return want


@pytest.mark.parametrize("reach", ["none", "every", "some"])
@pytest.mark.parametrize("with_classes", [True, False])
def test_near_entries_equal_the_whole_row_rule(with_classes: bool, reach: str) -> None:
    """The places to rescore, found from the near pairs alone, are those of the rule written on whole
    rows (``_whole_row_rule``, and ``needing_canonical`` / ``mixed_runs``): within the margin of a
    neighbour, and with a reader also in a run that starts within its reach and holds more than one
    class or can tie with the ``kk - 1``-th key."""
    from embedmetrics._engine.core.canonical import ListReader, _near_entries, mixed_runs, needing_canonical

    g = torch.Generator().manual_seed(3)
    keys = torch.randint(0, 40, (30, 25), generator=g).double().sort(dim=1).values / 8
    keys[::7, -4:] = torch.inf  # padding
    cols = torch.randperm(30 * 25, generator=g).view(30, 25)
    kinds = torch.randint(0, 3, (30 * 25,), generator=g)
    margins = torch.rand(30, generator=g, dtype=torch.float64) * 0.3
    kk = 12
    some = torch.randint(0, kk + 1, (30,), generator=g)
    limit = {"none": None, "every": torch.full((30,), 25), "some": some}

    def classes(rows: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return kinds[c] + 3 * (rows[:, None] % 2)  # depends on the row too

    row_kinds = classes(torch.arange(30), cols) if with_classes else None
    want = _whole_row_rule(keys, margins, row_kinds, kk, limit[reach] if with_classes else None)
    got = _near_entries(keys, cols, kk, margins, ListReader(classes, limit[reach]) if with_classes else None)
    assert torch.equal(got, want.view(-1).nonzero().view(-1))
    if reach != "some":  # the same rule by the whole-row passes
        rule = needing_canonical(keys, margins)
        if with_classes:
            finite_kinds = torch.where(torch.isfinite(keys), classes(torch.arange(30), cols).double(), -1.0)
            boundary = keys >= (keys[:, kk - 2] - margins)[:, None]
            rule &= mixed_runs(keys, margins, finite_kinds) | boundary
        assert torch.equal(rule, want)
    if reach == "some" and with_classes:  # the reach cut something here, and kept something
        full = _near_entries(keys, cols, kk, margins, ListReader(classes, None))
        assert 0 < got.numel() < full.numel()


def _nudged(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Few distinct integer rows, each copy nudged by 1e-7: near ties everywhere, three classes."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(-2, 3, (3, 3), generator=g).float()
    x = base[torch.randint(0, 3, (12,), generator=g)] + 1e-7 * torch.randn(12, 3, generator=g)
    return x, torch.randint(0, 3, (12,), generator=g)


@pytest.mark.parametrize("reads", list(READS))
@pytest.mark.parametrize("distance", ["euclidean", "cosine", "dot"])
def test_every_position_term_is_finite_past_the_reach(
    reads: str, distance: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list's last tie block that starts past what the statistics read keeps its product keys: its
    size is taken as listed, not counted on the whole canonical row (which need not hold the product's
    ``k``-th key: a block of size 0 and NaN terms). Every position's terms stay finite, and the
    statistics equal the route that rescores every neighbour."""
    seen: list[torch.Tensor] = []
    original = knn_module._position_terms

    def spy(*args: Any) -> Any:
        out = original(*args)
        seen.extend(t for t in out if t is not None)
        return out

    for seed in range(4):
        x, y = _nudged(seed)
        every, stats = torch.arange(12), READS[reads]
        for k in (2, 3, 6):
            counts, _, _ = relevant_counts(y, y, every, None)
            kw = {"k": k, "counts": counts, "self_index": every, "distance": distance, "stats": stats}
            want = knn_scan(x, x, y, y, return_neighbors=True, **kw).stats
            with monkeypatch.context() as patch:
                patch.setattr(knn_module, "_position_terms", spy)
                got = knn_scan(x, x, y, y, **kw).stats
            for name, values in want.items():
                assert torch.equal(got[name], values), (seed, k, name)
    assert seen
    assert all(bool(torch.isfinite(t).all()) for t in seen)


def test_the_reach_is_what_the_statistics_read_and_every_place_for_any_other() -> None:
    """Precision@1 reads the first place, R-precision and MAP@R the first ``min(R, k)``, average
    precision and the reciprocal rank every place; a statistic not declared as reading a prefix (one
    added later) reads every place, so it is never given product keys where it reads."""
    from embedmetrics._engine.core.knn import _reach

    counts, k = torch.tensor([0, 2, 5, 9]), 5

    def reach(*names: str) -> list[int]:
        return _reach(dict.fromkeys(names, torch.zeros(4)), counts, k).tolist()

    assert reach("precision_at_1") == [1, 1, 1, 1]
    assert reach("r_precision") == [0, 2, 5, 5]
    assert reach("map_at_r", "precision_at_1") == [1, 2, 5, 5]
    assert reach("average_precision", "precision_at_1") == [5, 5, 5, 5]
    assert reach("reciprocal_rank") == [5, 5, 5, 5]
    assert reach("a_statistic_added_later", "precision_at_1") == [5, 5, 5, 5]
