"""AccuracyCalculator against brute-force NumPy references and hand-worked cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from _cases import KNN_METRICS
from embedmetrics import AccuracyCalculator
from embedmetrics.neighbors import precision_at_k

KNN = KNN_METRICS


# --------------------------------------------------------------------------- NumPy oracle
def _distances(q: np.ndarray, r: np.ndarray, metric: str) -> np.ndarray:
    q, r = q.astype(np.float64), r.astype(np.float64)
    if metric == "cosine":
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        rn = r / np.linalg.norm(r, axis=1, keepdims=True)
        return 1.0 - qn @ rn.T
    return np.sqrt(((q[:, None, :] - r[None, :, :]) ** 2).sum(-1))


def _metrics_of_ranking(rel: np.ndarray, big_r: int, k: int) -> dict[str, float]:
    """Plain definitions for one query: ``rel`` is the relevance of the ranked references."""
    rel = rel[:k].astype(np.float64)
    length = min(big_r, k)
    cum = np.cumsum(rel)
    prec = cum / np.arange(1, len(rel) + 1)
    first = np.flatnonzero(rel)
    return {
        "precision_at_1": rel[0],
        "r_precision": rel[:length].sum() / length,
        "mean_average_precision_at_r": (prec * rel)[:length].sum() / big_r,
        "mean_average_precision": (prec * rel).sum() / big_r,
        "mean_reciprocal_rank": 1.0 / (first[0] + 1) if len(first) else 0.0,
    }


def _relevance(ql: np.ndarray, rl: np.ndarray, fn=None) -> np.ndarray:
    if fn is not None:
        return fn(ql[:, None], rl[None, :])
    if ql.ndim == 2:
        return (ql[:, None, :] == rl[None, :, :]).all(-1)
    return ql[:, None] == rl[None, :]


def brute_force(q, r, ql, rl, same_source, k=None, metric="euclidean", avg_of_avgs=False, fn=None):
    d = _distances(q, r, metric)
    rel = _relevance(ql, rl, fn)
    if same_source:
        d[np.arange(len(q)), np.arange(len(q))] = np.inf
        rel = rel.copy()
        rel[np.arange(len(q)), np.arange(len(q))] = False
    counts = rel.sum(1)
    n_visible = r.shape[0] - int(same_source)
    most = max(int(counts.max()), 1)
    # k=None: the largest relevant count for P@1, RP, MAP@R; every reference for MAP and MRR (PML 2.x)
    kk = min({None: most, "max_bin_count": most, "all": n_visible}.get(k, k), n_visible)
    kk_whole = n_visible if k is None else kk
    per = {m: [] for m in KNN}
    keep = []
    for i in range(len(q)):
        if counts[i] == 0:
            continue
        order = np.argsort(d[i], kind="stable")
        vals = _metrics_of_ranking(rel[i][order], int(counts[i]), kk)
        whole = _metrics_of_ranking(rel[i][order], int(counts[i]), kk_whole)
        for m in KNN:
            per[m].append(whole[m] if m in ("mean_average_precision", "mean_reciprocal_rank") else vals[m])
        keep.append(i)
    out = {}
    for m in KNN:
        v = np.array(per[m])
        if not avg_of_avgs:
            out[m] = v.mean()
        else:
            labs = ql[keep]
            labs = [tuple(x) for x in labs] if labs.ndim == 2 else list(labs)
            groups: dict = {}
            for lab, val in zip(labs, v):
                groups.setdefault(lab, []).append(val)
            out[m] = np.mean([np.mean(g) for g in groups.values()])
    return out


def _assert_close(ours: dict, ref: dict, names=KNN, tol=1e-9):
    for m in names:
        assert ours[m] == pytest.approx(ref[m], abs=tol), m


# --------------------------------------------------------------------------- brute-force comparisons
@pytest.mark.parametrize("same_source", [True, False])
@pytest.mark.parametrize("k", [None, "max_bin_count", "all", 1, 3, 40])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_matches_brute_force(same_source, k, metric):
    rng = np.random.default_rng(7)
    q = rng.normal(size=(60, 5))
    ql = rng.integers(0, 6, size=60)
    if same_source:
        r, rl = q, ql
    else:
        r, rl = rng.normal(size=(80, 5)), rng.integers(0, 7, size=80)
    calc = AccuracyCalculator(include=KNN, k=k, distance=metric)
    ours = calc.get_accuracy(q, r, ql, rl, same_source)
    ref = brute_force(q, r, ql, rl, same_source, k=k, metric=metric)
    _assert_close(ours, ref)


@pytest.mark.parametrize("same_source", [True, False])
def test_avg_of_avgs_matches_brute_force(same_source):
    rng = np.random.default_rng(3)
    q = rng.normal(size=(70, 4))
    ql = rng.choice([0, 0, 0, 0, 1, 2, 2, 3], size=70)  # unbalanced classes
    r, rl = (q, ql) if same_source else (rng.normal(size=(50, 4)), rng.integers(0, 4, size=50))
    ours = AccuracyCalculator(include=KNN, avg_of_avgs=True).get_accuracy(q, r, ql, rl, same_source)
    ref = brute_force(q, r, ql, rl, same_source, avg_of_avgs=True)
    _assert_close(ours, ref)
    plain = AccuracyCalculator(include=KNN).get_accuracy(q, r, ql, rl, same_source)
    assert ours["precision_at_1"] != pytest.approx(plain["precision_at_1"])


def test_small_blocks_and_float64_match_brute_force():
    rng = np.random.default_rng(11)
    q = rng.normal(size=(57, 3))
    ql = rng.integers(0, 4, size=57)
    calc = AccuracyCalculator(include=KNN, block_bytes=7 * 57 * 8)  # 7 rows per block
    ours = calc.get_accuracy(
        torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(ql), torch.from_numpy(ql), True
    )
    _assert_close(ours, brute_force(q, q, ql, ql, True))


def test_two_dimensional_labels_with_custom_comparison():
    def fn(x, y):
        return (x[..., 0] == y[..., 0]) & (x[..., 1] != y[..., 1])

    rng = np.random.default_rng(5)
    q = rng.normal(size=(50, 4))
    ql = np.stack([rng.integers(0, 3, size=50), rng.integers(0, 4, size=50)], axis=1)
    r = rng.normal(size=(60, 4))
    rl = np.stack([rng.integers(0, 3, size=60), rng.integers(0, 4, size=60)], axis=1)
    calc = AccuracyCalculator(exclude=("NMI", "AMI"), label_comparison_fn=fn, include=())
    ours = AccuracyCalculator(include=KNN, label_comparison_fn=fn).get_accuracy(q, r, ql, rl, False)
    _assert_close(ours, brute_force(q, r, ql, rl, False, fn=fn))
    # Same source: the comparison is False for a label with itself, so nothing is removed by it.
    ours = AccuracyCalculator(include=KNN, label_comparison_fn=fn).get_accuracy(q, q, ql, ql, True)
    _assert_close(ours, brute_force(q, q, ql, ql, True, fn=fn))
    assert set(calc.get_curr_metrics()) == {"precision_at_1", "r_precision", "mean_average_precision_at_r"}


def test_float_labels_with_custom_comparison():
    def fn(x, y):
        return torch.abs(x - y) < 1

    rng = np.random.default_rng(2)
    q = rng.normal(size=(40, 3))
    ql = rng.uniform(0, 5, size=40)
    ours = AccuracyCalculator(include=KNN, label_comparison_fn=fn).get_accuracy(q, q, ql, ql, True)
    ref = brute_force(q, q, ql, ql, True, fn=lambda x, y: np.abs(x - y) < 1)
    _assert_close(ours, ref)


def test_custom_comparison_with_clustering_metrics_is_rejected():
    with pytest.raises(ValueError, match=r"exclude.*NMI"):
        AccuracyCalculator(label_comparison_fn=lambda x, y: x == y)
    with pytest.raises(NotImplementedError, match=r"exclude.*NMI"):  # what PML 2.x raises
        AccuracyCalculator(label_comparison_fn=lambda x, y: x == y)


# --------------------------------------------------------------------------- ties: exhaustive oracle
def _tie_oracle(q, ql, policy):
    """Average / min / max of each metric over every ordering of tied references (same source)."""
    d = np.abs(q[:, None] - q[None, :]).astype(np.float64)
    n = len(q)
    per = {m: [] for m in KNN}
    for i in range(n):
        others = [j for j in range(n) if j != i]
        big_r = sum(ql[j] == ql[i] for j in others)
        if big_r == 0:
            continue
        k = max(sum(ql[j] == ql[a] for j in range(n) if j != a) for a in range(n))
        values = {m: [] for m in KNN}
        for perm in itertools.permutations(others):
            if any(d[i, perm[t]] > d[i, perm[t + 1]] for t in range(len(perm) - 1)):
                continue
            rel = np.array([ql[j] == ql[i] for j in perm])
            at_k, whole = _metrics_of_ranking(rel, big_r, k), _metrics_of_ranking(rel, big_r, n - 1)
            for m in KNN:  # k=None: MAP and MRR over every reference (PML 2.x)
                whole_ranking = m in ("mean_average_precision", "mean_reciprocal_rank")
                values[m].append(whole[m] if whole_ranking else at_k[m])
        agg = {"average": np.mean, "pessimistic": np.min, "optimistic": np.max}[policy]
        for m in KNN:
            per[m].append(agg(values[m]))
    return {m: float(np.mean(v)) for m, v in per.items()}


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ties_match_exhaustive_enumeration(ties, seed):
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 4, size=7).astype(np.float32)  # many exact ties in 1-D integer points
    ql = rng.integers(0, 3, size=7)
    x = q[:, None]
    ours = AccuracyCalculator(include=KNN, ties=ties).get_accuracy(x, x, ql, ql, True)
    _assert_close(ours, _tie_oracle(q, ql, ties), tol=1e-12)


def test_tie_policies_bracket_average():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 5, size=(200, 1)).astype(np.float32)
    y = rng.integers(0, 4, size=200)
    res = {t: AccuracyCalculator(include=KNN, ties=t, k=7).get_accuracy(x, x, y, y, True) for t in
           ("pessimistic", "average", "optimistic")}  # fmt: skip
    for m in KNN:
        assert res["pessimistic"][m] <= res["average"][m] + 1e-12 <= res["optimistic"][m] + 2e-12


# --------------------------------------------------------------------------- hand-worked cases
def test_hand_worked_tie_at_first_neighbour():
    # Points on a line: 0 (label a), -1 (a), 1 (b), 5 (b), 6 (b).  Query 0 has two neighbours at
    # distance 1 (labels a and b): P@1 = 1/2 under random tie order.  R = 1 for query 0, so
    # R-precision = MAP@R = 1/2.  For query -1: nearest is 0 (a) → 1.  Query 1: nearest 0 (a) → 0;
    # R = 2 (5 and 6): top-2 are 0 and -1 → R-precision 0.  Query 5: nearest 6 (b) → 1; R = 2:
    # top-2 = 6, then 1 (b) at distance 4 → R-precision 1, MAP@R = (1/1 + 2/2)/2 = 1.
    # Query 6: nearest 5 (b) → 1; top-2 = 5, then 1 (distance 5) → 1; MAP@R = 1.
    x = torch.tensor([[0.0], [-1.0], [1.0], [5.0], [6.0]])
    y = torch.tensor([0, 0, 1, 1, 1])
    res = AccuracyCalculator(include=KNN[:3]).get_accuracy(x, x, y, y, True)
    assert res["precision_at_1"] == pytest.approx((0.5 + 1 + 0 + 1 + 1) / 5)
    assert res["r_precision"] == pytest.approx((0.5 + 1 + 0 + 1 + 1) / 5)
    assert res["mean_average_precision_at_r"] == pytest.approx((0.5 + 1 + 0 + 1 + 1) / 5)
    pess = AccuracyCalculator(include=KNN[:1], ties="pessimistic").get_accuracy(x, x, y, y, True)
    opt = AccuracyCalculator(include=KNN[:1], ties="optimistic").get_accuracy(x, x, y, y, True)
    assert pess["precision_at_1"] == pytest.approx(3 / 5)
    assert opt["precision_at_1"] == pytest.approx(4 / 5)


def test_hand_worked_tie_block_straddling_the_cut_off():
    # Query 0 (label a); references -1 (a), 1 (b), 1 (b) all at distance 1, and 3 (a) at distance 3.
    # Separate reference set, k = None → K = R = 2, so the tie block of 3 straddles the cut-off.
    # Ranking: block {-1(a), 1(b), 1(b)} at positions 0..2 (t=3, r=1), then 3(a).
    # P@1 = 1/3; R-precision = E[relevant in top 2] / 2 = (1 · 2/3) / 2 = 1/3;
    # MAP@R = (1/R) Σ_{p<2} (r/t)(c + 1)/(p + 1) = (1/2)(1/3)(1 + 1/2) = 1/4.
    q = torch.tensor([[0.0]])
    r = torch.tensor([[-1.0], [1.0], [1.0], [3.0]])
    ql = torch.tensor([0])
    rl = torch.tensor([0, 1, 1, 0])
    res = AccuracyCalculator(include=KNN).get_accuracy(q, r, ql, rl, False)
    assert res["precision_at_1"] == pytest.approx(1 / 3)
    assert res["r_precision"] == pytest.approx(1 / 3)
    assert res["mean_average_precision_at_r"] == pytest.approx(1 / 4)
    # MRR (k=None: over every reference): first relevant at position 0, 1 or 2 w.p. 1/3 each.
    assert res["mean_reciprocal_rank"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    # k="max_bin_count" cuts every metric at K = 2: the first relevant must be within the top 2
    capped = AccuracyCalculator(include=KNN, k="max_bin_count").get_accuracy(q, r, ql, rl, False)
    assert capped["mean_reciprocal_rank"] == pytest.approx((1 + 1 / 2) / 3)
    assert capped["r_precision"] == pytest.approx(1 / 3)


def test_duplicate_of_query_at_distance_zero_stays():
    # Rows 0 and 1 are identical with the same label: each is the other's neighbour at distance 0,
    # so removing "the first neighbour" by position would be wrong; removal is by index.
    x = torch.tensor([[0.0], [0.0], [0.4], [10.0]])
    y = torch.tensor([0, 0, 1, 1])
    res = AccuracyCalculator(include=KNN[:3]).get_accuracy(x, x, y, y, True)
    # q0, q1: nearest is the duplicate (label 0) → 1. q2: nearest 0.0 (label 0) → 0; R = 1 → 0.
    # q3: nearest 0.4 (label 1) → 1.
    assert res["precision_at_1"] == pytest.approx(3 / 4)
    assert res["r_precision"] == pytest.approx(3 / 4)

    class Calc(AccuracyCalculator):
        def calculate_neighbours(self, knn_labels, knn_distances, **kwargs):
            return knn_labels, knn_distances

        def requires_knn(self):
            return [*super().requires_knn(), "neighbours"]

    labels, dists = Calc(include=("neighbours",), k=1).get_accuracy(x, x, y, y, True)["neighbours"]
    assert labels[:, 0].tolist() == [0, 0, 0, 1]
    assert dists[:2, 0].tolist() == [0.0, 0.0]


def test_lone_label_is_left_out_and_all_lone_gives_nan():
    x = torch.tensor([[0.0], [0.1], [5.0]])
    y = torch.tensor([0, 0, 7])  # label 7 occurs once: lone in the same-source case
    res = AccuracyCalculator(include=KNN).get_accuracy(x, x, y, y, True)
    assert res["precision_at_1"] == 1.0
    assert res["r_precision"] == 1.0
    res = AccuracyCalculator(include=KNN).get_accuracy(
        x, x, torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]), True
    )
    assert all(math.isnan(res[m]) for m in KNN)
    # Separate sources: a query label absent from the reference is lone.
    res = AccuracyCalculator(include=KNN).get_accuracy(
        x, x, torch.tensor([0, 1, 2]), torch.tensor([5, 5, 5]), False
    )
    assert all(math.isnan(res[m]) for m in KNN)


def test_query_subset_of_reference_is_matched_by_row():
    rng = np.random.default_rng(4)
    r = rng.normal(size=(40, 3))
    rl = rng.integers(0, 4, size=40)
    pick = np.array([5, 17, 3, 30, 22])
    q, ql = r[pick], rl[pick]
    res = AccuracyCalculator(include=KNN).get_accuracy(q, r, ql, rl, True)
    # Oracle: same-source ranking with the picked rows removed from their own reference lists.
    d = _distances(q, r, "euclidean")
    d[np.arange(5), pick] = np.inf
    rel = (ql[:, None] == rl[None, :]) & np.isfinite(d)
    counts = rel.sum(1)
    ref = np.mean([rel[i][np.argsort(d[i], kind="stable")][0] for i in range(5) if counts[i] > 0])
    assert res["precision_at_1"] == pytest.approx(ref)
    with pytest.raises(ValueError, match="not a row of `reference`"):
        AccuracyCalculator(include=KNN).get_accuracy(q + 1.0, r, ql, rl, True)


# --------------------------------------------------------------------------- API
def test_default_metrics_and_include_exclude():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=30)
    calc = AccuracyCalculator()
    res = calc.get_accuracy(x, x, y, y, True)
    assert set(res) == {"NMI", "AMI", "precision_at_1", "r_precision", "mean_average_precision_at_r"}
    res = calc.get_accuracy(x, x, y, y, True, include=("precision_at_1",))
    assert list(res) == ["precision_at_1"]
    res = AccuracyCalculator(exclude=("NMI", "AMI", "r_precision")).get_accuracy(x, x, y, y, True)
    assert set(res) == {"precision_at_1", "mean_average_precision_at_r"}
    # an opt-in metric may be asked for at call time (PML 2.x computes every metric by default)
    res = calc.get_accuracy(x, x, y, y, True, include=("mean_average_precision",))
    assert list(res) == ["mean_average_precision"]
    # but not one the constructor ruled out
    narrow = AccuracyCalculator(include=("precision_at_1",))
    with pytest.raises(ValueError, match="mean_average_precision"):
        narrow.get_accuracy(x, x, y, y, True, include=("mean_average_precision",))
    with pytest.raises(ValueError, match="r_precision"):
        AccuracyCalculator(exclude=("r_precision",)).get_accuracy(x, x, y, y, True, include=("r_precision",))


def test_bad_input_errors():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    y = torch.arange(5)
    with pytest.raises(ValueError, match=r"include.*unknown.*precision_at_3"):
        AccuracyCalculator(include=("precision_at_3",))
    with pytest.raises(ValueError, match=r"exclude.*unknown"):
        AccuracyCalculator(exclude=("nope",))
    with pytest.raises(ValueError, match=r"query_labels.*5 rows.*\(4,\)"):
        AccuracyCalculator().get_accuracy(x, x, y[:4], y, True)
    with pytest.raises(ValueError, match=r"`query` must be 2-D"):
        AccuracyCalculator().get_accuracy(x[:, 0], x, y, y, True)
    with pytest.raises(ValueError, match="same number of features"):
        AccuracyCalculator().get_accuracy(x, x[:, :2], y, y, False)
    with pytest.raises(ValueError, match="positive integer"):
        AccuracyCalculator(k=0)
    with pytest.raises(ValueError, match="ties"):
        AccuracyCalculator(ties="random")
    with pytest.raises(TypeError, match="include"):
        AccuracyCalculator(include="NMI")
    with pytest.raises(TypeError, match="query"):
        AccuracyCalculator().get_accuracy([[0.0]], x, y, y, False)


def test_precision_at_k_helper():
    knn = torch.tensor([[1, 1, 0], [0, 2, 2]])
    assert precision_at_k(knn, torch.tensor([1, 2])[:, None], 2) == pytest.approx((1 + 0.5) / 2)
    assert precision_at_k(knn, torch.tensor([1, 2]), 3) == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_seed_subclass_example_runs_verbatim():
    from embedmetrics import neighbors as accuracy_calculator

    fancy_computations = 0.5

    # ---- the seed's example, unchanged apart from the import above ----
    class YourCalculator(accuracy_calculator.AccuracyCalculator):
        def calculate_precision_at_2(self, knn_labels, query_labels, **kwargs):
            return accuracy_calculator.precision_at_k(knn_labels, query_labels[:, None], 2)

        def calculate_fancy_mutual_info(self, query_labels, cluster_labels, **kwargs):
            return fancy_computations

        def requires_clustering(self):
            return [*super().requires_clustering(), "fancy_mutual_info"]

        def requires_knn(self):
            return [*super().requires_knn(), "precision_at_2"]

    rng = np.random.default_rng(1)
    query_embeddings = torch.from_numpy(rng.normal(size=(40, 4)).astype(np.float32))
    reference_embeddings = query_embeddings
    query_labels = torch.from_numpy(rng.integers(0, 3, size=40))
    reference_labels = query_labels

    calculator = YourCalculator()
    acc_dict = calculator.get_accuracy(
        query_embeddings,
        reference_embeddings,
        query_labels,
        reference_labels,
        embeddings_come_from_same_source=True,
    )
    # ---- end of the example ----
    assert {"precision_at_2", "fancy_mutual_info", "NMI", "AMI", "precision_at_1"} <= set(acc_dict)
    assert acc_dict["fancy_mutual_info"] == 0.5
    # precision@2 by brute force (all queries, as the example's metric does not drop lone ones).
    q = query_embeddings.double().numpy()
    d = _distances(q, q, "euclidean")
    np.fill_diagonal(d, np.inf)
    lab = query_labels.numpy()
    top2 = np.argsort(d, axis=1, kind="stable")[:, :2]
    assert acc_dict["precision_at_2"] == pytest.approx((lab[top2] == lab[:, None]).mean())


# --------------------------------------------------------------------------- clustering
def _blobs(n_per=60, classes=5, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 20
    labels = torch.arange(classes).repeat_interleave(n_per)
    x = centers[labels] + torch.randn(len(labels), dim, generator=g) * 0.5
    perm = torch.randperm(len(labels), generator=g)
    return x[perm], labels[perm]


def test_nmi_ami_on_separated_blobs_and_deterministic():
    x, y = _blobs()
    calc = AccuracyCalculator(include=("NMI", "AMI"))
    first = calc.get_accuracy(x, x, y, y, True)
    assert first["NMI"] > 0.99
    assert first["AMI"] > 0.99
    assert calc.get_accuracy(x, x, y, y, True) == first
    x2, y2 = _blobs(n_per=40, classes=12, dim=16, seed=3)
    res = AccuracyCalculator(include=("NMI", "AMI")).get_accuracy(x2, x2, y2, y2, True)
    assert res["NMI"] > 0.99
    assert res["AMI"] > 0.99


def test_ami_matches_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    from embedmetrics._engine.neighbors.clustering import adjusted_mutual_info

    g = torch.Generator().manual_seed(0)
    for n, ca, cb in [(50, 3, 4), (300, 10, 7), (40, 40, 2)]:
        a = torch.randint(0, ca, (n,), generator=g)
        b = torch.randint(0, cb, (n,), generator=g)
        ref = sklearn_metrics.adjusted_mutual_info_score(b.numpy(), a.numpy())
        assert float(adjusted_mutual_info(a, b)) == pytest.approx(ref, abs=1e-10)


def test_kmeans_draws_come_from_a_cpu_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The k-means++ draws must not depend on the device: a device's own generator draws another
    stream (CPU 0.971 vs CUDA 0.976 NMI on the same data). Only a CPU generator may be created."""
    from embedmetrics._engine.neighbors import clustering

    real = torch.Generator

    def cpu_only(*args: object, **kwargs: object) -> torch.Generator:
        # never created on the data's device (which may be a GPU): always the default CPU generator
        assert not args, f"a generator on {args[0]}"
        assert "device" not in kwargs, f"a generator on {kwargs['device']}"
        return real()

    monkeypatch.setattr(clustering.torch, "Generator", cpu_only)
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.randn(40, 4, generator=g) + 6 * c for c in range(3)])
    first = clustering.kmeans(x, 3, seed=0)
    assert torch.equal(first, clustering.kmeans(x.clone(), 3, seed=0))
    # the draws themselves: inverse-CDF sampling with CPU uniforms, in float64
    weights = torch.tensor([0.0, 1.0, 3.0, 0.0])
    draws = clustering._draw(weights, 4000, real().manual_seed(1))
    counts = torch.bincount(draws, minlength=4)
    assert counts[0] == 0
    assert counts[3] == 0
    assert 0.70 < counts[2] / 4000 < 0.80
    uniform = clustering._draw(torch.zeros(3), 50, real().manual_seed(2))  # all-zero weights: uniform
    assert int(uniform.min()) >= 0
    assert int(uniform.max()) <= 2
