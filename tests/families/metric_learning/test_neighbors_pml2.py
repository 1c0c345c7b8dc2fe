"""The pytorch-metric-learning 2.x surface of AccuracyCalculator: call forms, options, module helpers.

Expected values come from brute-force NumPy references (``test_neighbors_calculator.brute_force``)
and hand-worked cases; the project does not depend on pytorch-metric-learning.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import torch

from embedmetrics import AccuracyCalculator
from embedmetrics import neighbors as accuracy_calculator
from families.metric_learning.test_neighbors_calculator import brute_force

KNN = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
ALL_KNN = (*KNN, "mean_average_precision", "mean_reciprocal_rank")


def _data(seed: int = 3, n: int = 40, d: int = 4, classes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, classes, size=n)


# --------------------------------------------------------------------------- the call-form rule
def test_both_call_forms_give_the_same_values() -> None:
    q, ql = _data()
    r, rl = _data(4, n=50)
    calc = AccuracyCalculator(include=ALL_KNN, k=None)
    v1 = calc.get_accuracy(q, r, ql, rl, False)
    v2 = calc.get_accuracy(q, ql, r, rl, False)
    assert v1 == v2
    assert calc.get_accuracy(q, ql, r, rl, ref_includes_query=False) == v1
    assert calc.get_accuracy(q, r, ql, rl, embeddings_come_from_same_source=False) == v1
    assert calc.get_accuracy(query=q, query_labels=ql, reference=r, reference_labels=rl) == v1
    ref = brute_force(q, r, ql, rl, False)
    for name in ALL_KNN:
        assert v1[name] == pytest.approx(ref[name], abs=1e-12), name


def test_two_x_defaults_evaluate_the_query_set_against_itself() -> None:
    q, ql = _data()
    calc = AccuracyCalculator(include=KNN)
    assert calc.get_accuracy(q, ql) == calc.get_accuracy(q, q, ql, ql, True)
    assert calc.get_accuracy(q, ql, None, None) == calc.get_accuracy(q, ql)


def test_ref_includes_query_means_the_first_rows_are_the_queries() -> None:
    q, ql = _data()
    extra, el = _data(9, n=25)
    r, rl = np.concatenate([q, extra]), np.concatenate([ql, el])
    calc = AccuracyCalculator(include=KNN, k="max_bin_count")
    got = calc.get_accuracy(q, ql, r, rl, True)
    ref = brute_force(q, r, ql, rl, True, k="max_bin_count")
    for name in KNN:
        assert got[name] == pytest.approx(ref[name], abs=1e-12), name


def test_two_d_labels_are_told_apart_by_dtype_and_shape() -> None:
    q = np.arange(10, dtype=np.float64)[:, None]
    labels = np.array([(i % 2, 3) for i in range(10)])
    calc = AccuracyCalculator(include=("precision_at_1",))
    by_keyword = calc.get_accuracy(q, labels, q + 0.25, labels, ref_includes_query=False)
    assert calc.get_accuracy(q, labels, q + 0.25, labels, False) == by_keyword  # float vs int
    # integer embeddings and 2-D integer labels: the widths decide (PML's custom-comparison test)
    qi = np.arange(10)[:, None]
    assert calc.get_accuracy(qi, labels, qi, labels, False) == calc.get_accuracy(
        qi, labels, qi, labels, ref_includes_query=False
    )
    assert calc.get_accuracy(qi, qi, labels, labels, False) == calc.get_accuracy(
        qi, qi, labels, labels, embeddings_come_from_same_source=False
    )


def test_a_call_that_fits_both_forms_asks_for_the_keyword() -> None:
    square = np.arange(8).reshape(4, 2)  # integer embeddings and labels of the same shape
    calc = AccuracyCalculator(include=("precision_at_1",))
    with pytest.raises(ValueError, match="ref_includes_query"):
        calc.get_accuracy(square, square + 1, square + 2, square + 3, False)
    with pytest.raises(ValueError, match="pass one"):
        calc.get_accuracy(square, square, ref_includes_query=False, embeddings_come_from_same_source=False)


def test_call_form_argument_errors() -> None:
    q, ql = _data()
    calc = AccuracyCalculator(include=KNN)
    with pytest.raises(TypeError, match="multiple values for argument `reference`"):
        calc.get_accuracy(q, ql, q, ql, False, reference=q)
    with pytest.raises(TypeError, match="unexpected keyword argument `bogus`"):
        calc.get_accuracy(q, ql, bogus=1)
    with pytest.raises(ValueError, match="multiple values"):  # also catchable as ValueError
        calc.get_accuracy(q, ql, q, ql, False, reference=q)


# --------------------------------------------------------------------------- k and include
@pytest.mark.parametrize("k", [None, "max_bin_count", "all", 3])
@pytest.mark.parametrize("same_source", [True, False])
def test_k_rules_match_brute_force(k: Any, same_source: bool) -> None:
    q, ql = _data(11, n=45)
    r, rl = (q, ql) if same_source else _data(12, n=60)
    got = AccuracyCalculator(include=ALL_KNN, k=k).get_accuracy(q, ql, r, rl, same_source)
    ref = brute_force(q, r, ql, rl, same_source, k=k)
    for name in ALL_KNN:
        assert got[name] == pytest.approx(ref[name], abs=1e-12), (name, k)


@pytest.mark.parametrize("as_numpy", [True, False])
def test_pml_hand_worked_case_with_integer_embeddings(as_numpy: bool) -> None:
    """PML 2.x's hand-worked case (integer embeddings, k=None): MAP over the whole ranking is 0.91."""
    query, reference = np.arange(10)[:, None], np.arange(10)[:, None]
    query[-1], reference[0] = 100, -100
    query_labels = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    reference_labels = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    args: tuple[Any, ...] = (query, query_labels, reference, reference_labels, False)
    if not as_numpy:
        args = (*(torch.from_numpy(a) for a in args[:4]), False)
    acc = AccuracyCalculator().get_accuracy(*args)
    for name in KNN:
        assert acc[name] == pytest.approx(0.9), name
    assert acc["mean_average_precision"] == pytest.approx(0.9 + 0.01)  # query 9: its match is last
    per_class = AccuracyCalculator(avg_of_avgs=True).get_accuracy(*args)
    for name in KNN:
        assert per_class[name] == pytest.approx(0.5), name
    assert per_class["mean_average_precision"] == pytest.approx((1 + 0.1) / 2)


def test_pml_hand_worked_custom_comparison_with_two_d_labels() -> None:
    def label_comparison_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x[..., 0] == y[..., 0]) & (x[..., 1] != y[..., 1])

    query, reference = np.arange(10)[:, None], np.arange(10)[:, None]
    query[-1], reference[0] = 100, -100
    query_labels = np.array([(0, 2)] * 9 + [(1, 2)])
    reference_labels = np.array([(1, 3)] + [(0, 3)] * 9)
    with pytest.raises(NotImplementedError):  # clustering cannot use a custom comparison
        AccuracyCalculator(include=("NMI", "AMI"), label_comparison_fn=label_comparison_fn)
    calc = AccuracyCalculator(exclude=("NMI", "AMI"), label_comparison_fn=label_comparison_fn)
    acc = calc.get_accuracy(query, query_labels, reference, reference_labels, False)
    for name in KNN:
        assert acc[name] == pytest.approx(0.9), name
    assert acc["mean_average_precision"] == pytest.approx(0.9 + 0.01)


def test_include_of_an_opt_in_metric_at_call_time_with_an_integer_k() -> None:
    q, ql = _data()
    got = AccuracyCalculator(k=5).get_accuracy(q, ql, include=("mean_average_precision",))
    ref = brute_force(q, q, ql, ql, True, k=5)
    assert list(got) == ["mean_average_precision"]
    assert got["mean_average_precision"] == pytest.approx(ref["mean_average_precision"], abs=1e-12)


def test_the_two_x_form_computes_every_metric_by_default() -> None:
    q, ql = _data()
    got = AccuracyCalculator().get_accuracy(q, ql)
    assert set(got) == {"NMI", "AMI", *ALL_KNN}
    assert set(AccuracyCalculator().get_accuracy(q, q, ql, ql, True)) == {"NMI", "AMI", *KNN}


def test_an_integer_k_below_the_largest_class_warns_for_r_metrics(caplog: pytest.LogCaptureFixture) -> None:
    q, ql = _data()
    with caplog.at_level(logging.WARNING, logger="embedmetrics"):
        AccuracyCalculator(include=("r_precision",), k=2).get_accuracy(q, ql)
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "k=2 is less than the largest relevant count" in warnings[0]
    assert "r_precision" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="embedmetrics"):
        AccuracyCalculator(include=("precision_at_1",), k=2).get_accuracy(q, ql)
    assert not [rec for rec in caplog.records if rec.levelno == logging.WARNING]


# --------------------------------------------------------------------------- constructor options
def test_integer_embeddings_are_used_as_float() -> None:
    rng = np.random.default_rng(5)
    q, ql = rng.integers(-50, 50, size=(30, 3)), rng.integers(0, 4, size=30)
    calc = AccuracyCalculator(include=KNN)
    assert calc.get_accuracy(q, ql) == calc.get_accuracy(q.astype(np.float64), ql)
    assert calc.get_accuracy(torch.from_numpy(q), torch.from_numpy(ql)) == calc.get_accuracy(q, ql)


def test_return_per_class_gives_one_value_per_label() -> None:
    q, ql = _data(n=60)
    got = AccuracyCalculator(include=ALL_KNN, return_per_class=True, k=None).get_accuracy(q, ql)
    labels = np.unique(ql)
    for name in ALL_KNN:
        assert len(got[name]) == len(labels), name
        for label, value in zip(labels, got[name]):
            assert value == pytest.approx(_per_class_reference(q, ql, label, name), abs=1e-12), (name, label)
    with pytest.raises(ValueError, match="avg_of_avgs"):
        AccuracyCalculator(avg_of_avgs=True, return_per_class=True)


def _per_class_reference(q: np.ndarray, ql: np.ndarray, label: int, name: str) -> float:
    """The mean over the queries of one label of the per-query value, the query set against itself."""
    d = np.sqrt(((q[:, None] - q[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    values = []
    for i in np.flatnonzero(ql == label):
        rel = (ql == ql[i]).astype(float)
        rel[i] = 0
        big_r = int(rel.sum())
        ranked = rel[np.argsort(d[i], kind="stable")][: len(q) - 1]
        prec = np.cumsum(ranked) / np.arange(1, len(ranked) + 1)
        first = np.flatnonzero(ranked)
        values.append(
            {
                "precision_at_1": ranked[0],
                "r_precision": ranked[:big_r].sum() / big_r,
                "mean_average_precision_at_r": (prec * ranked)[:big_r].sum() / big_r,
                "mean_average_precision": (prec * ranked).sum() / big_r,
                "mean_reciprocal_rank": 1 / (first[0] + 1),
            }[name]
        )
    return float(np.mean(values))


def test_knn_func_is_honoured() -> None:
    q, ql = _data()
    calls: list[tuple[Any, ...]] = []

    def knn_func(query: torch.Tensor, k: int, reference: torch.Tensor, ref_includes_query: bool) -> Any:
        calls.append((query.dtype, k, reference.shape, ref_includes_query))
        d = torch.cdist(query.double(), reference.double())
        if ref_includes_query:
            d[torch.arange(len(query)), torch.arange(len(query))] = -1.0  # PML drops the first column
        dist, idx = d.topk(k + int(ref_includes_query), dim=1, largest=False)
        skip = int(ref_includes_query)  # PML's knn functions drop the query's own column
        return dist[:, skip:], idx[:, skip:]

    got = AccuracyCalculator(include=KNN, knn_func=knn_func, k="max_bin_count").get_accuracy(q, ql)
    assert calls
    assert calls[0][0] == torch.float32  # as PML 2.x hands it over
    ref = brute_force(q, q, ql, ql, True, k="max_bin_count")
    for name in KNN:
        assert got[name] == pytest.approx(ref[name], abs=1e-9), name


def test_kmeans_func_is_honoured() -> None:
    q, ql = _data(n=30, classes=3)
    seen: list[int] = []

    def kmeans_func(x: torch.Tensor, num_clusters: int) -> torch.Tensor:
        seen.append(num_clusters)
        return torch.as_tensor(ql)  # a perfect clustering

    got = AccuracyCalculator(include=("NMI", "AMI"), kmeans_func=kmeans_func).get_accuracy(q, ql)
    assert seen == [3]
    assert got["NMI"] == pytest.approx(1.0)
    assert got["AMI"] == pytest.approx(1.0)


def test_device_argument_computes_there() -> None:
    q, ql = _data()
    calc = AccuracyCalculator(include=KNN, device=torch.device("cpu"))
    assert calc.get_accuracy(torch.from_numpy(q), torch.from_numpy(ql)) == AccuracyCalculator(
        include=KNN
    ).get_accuracy(q, ql)


def test_custom_metrics_receive_the_pml2_arguments() -> None:
    seen: dict[str, Any] = {}

    class Custom(AccuracyCalculator):
        def calculate_fancy(
            self,
            knn_labels: Any,
            query_labels: Any,
            ref_includes_query: bool,
            label_comparison_fn: Any,
            **kw: Any,
        ) -> float:
            seen.update(ref_includes_query=ref_includes_query, fn=label_comparison_fn, **kw)
            return float(accuracy_calculator.precision_at_k(knn_labels, query_labels[:, None], 1))

        def requires_knn(self) -> list[str]:
            return [*super().requires_knn(), "fancy"]

    q, ql = _data()
    calc = Custom(include=("fancy", "precision_at_1"), k=3)
    got = calc.get_accuracy(q, ql)
    assert got["fancy"] == pytest.approx(got["precision_at_1"], abs=1e-12)
    assert seen["ref_includes_query"] is True
    assert seen["fn"] is accuracy_calculator.EQUALITY
    _, counts = seen["label_counts"]  # (labels, counts) in the 2.x form
    assert torch.equal(
        torch.as_tensor(counts).sort().values, torch.bincount(torch.as_tensor(ql)).sort().values
    )
    assert "fancy" in calc.get_function_dict()


# --------------------------------------------------------------------------- module-level helpers
def test_label_match_counts_and_lone_labels() -> None:
    query_labels = torch.tensor([0, 1, 2, 3, 4, 5, 6])
    reference_labels = torch.tensor([0, 0, 0, 1, 2, 2, 3, 4, 5])
    labels, counts = accuracy_calculator.get_label_match_counts(
        query_labels, reference_labels, accuracy_calculator.EQUALITY
    )
    assert labels.tolist() == [0, 1, 2, 3, 4, 5, 6]  # the query labels, with their reference matches
    assert counts.tolist() == [3, 1, 2, 1, 1, 1, 0]
    lone, not_lone = accuracy_calculator.get_lone_query_labels(
        query_labels, (labels, counts), True, accuracy_calculator.EQUALITY
    )
    # same source: a label with one reference is lone (its only match is the query); 6 has none
    assert sorted(lone.tolist()) == [1, 3, 4, 5, 6]
    assert not_lone.tolist() == [True, False, True, False, False, False, False]
    lone, not_lone = accuracy_calculator.get_lone_query_labels(
        query_labels, (labels, counts), False, accuracy_calculator.EQUALITY
    )
    assert lone.tolist() == [6]
    assert not_lone.tolist() == [True] * 6 + [False]


def _brute_lists(seed: int) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    gt = rng.integers(0, 3, size=12)
    knn = rng.integers(0, 3, size=(12, 6))
    labels, counts = np.unique(np.concatenate([gt, knn.ravel()]), return_counts=True)
    counts = np.maximum(counts, 6)  # R never below the relevant listed
    return torch.from_numpy(knn), torch.from_numpy(gt), (torch.from_numpy(labels), torch.from_numpy(counts))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_list_metric_helpers_match_numpy(seed: int) -> None:
    knn, gt, label_counts = _brute_lists(seed)
    eq = accuracy_calculator.EQUALITY
    rel = (knn.numpy() == gt.numpy()[:, None]).astype(float)
    big_r = label_counts[1].numpy()[np.searchsorted(label_counts[0].numpy(), gt.numpy())].astype(float)
    ranks = np.arange(1, 7)
    prec = np.cumsum(rel, 1) / ranks
    mask = ranks[None] <= big_r[:, None]
    first = np.where(rel.any(1), 1 / (rel.argmax(1) + 1), 0.0)
    expected = {
        "p@3": rel[:, :3].mean(1).mean(),
        "rp": ((rel * mask).sum(1) / mask.sum(1)).mean(),
        "map": ((prec * rel).sum(1) / big_r).mean(),
        "map@r": ((prec * rel * mask).sum(1) / big_r).mean(),
        "mrr": first.mean(),
    }
    got = {
        "p@3": accuracy_calculator.precision_at_k(knn, gt[:, None], 3, False, False, eq),
        "rp": accuracy_calculator.r_precision(knn, gt[:, None], False, label_counts, False, False, eq),
        "map": accuracy_calculator.mean_average_precision(
            knn, gt[:, None], False, label_counts, False, False, eq
        ),
        "map@r": accuracy_calculator.mean_average_precision(
            knn, gt[:, None], False, label_counts, False, False, eq, at_r=True
        ),
        "mrr": accuracy_calculator.mean_reciprocal_rank(knn, gt[:, None], False, False, eq),
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    # the 1.x argument order of precision_at_k (a callable fifth)
    assert accuracy_calculator.precision_at_k(knn, gt[:, None], 3, False, eq) == pytest.approx(
        expected["p@3"]
    )


def test_exclude_wins_over_include_in_both_call_forms() -> None:
    """A metric both included and excluded is not computed (pytorch-metric-learning returns ``{}``)."""
    x = torch.tensor([[0.0], [0.1], [5.0], [5.2], [5.3]])
    y = torch.tensor([0, 0, 1, 1, 0])
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision"), exclude=("precision_at_1",))
    assert calc.get_curr_metrics() == ["r_precision"]
    assert set(calc.get_accuracy(x, y)) == {"r_precision"}  # 2.x call form
    assert set(calc.get_accuracy(x, x, y, y, embeddings_come_from_same_source=True)) == {"r_precision"}
    both = AccuracyCalculator(include=("precision_at_1",), exclude=("precision_at_1",))
    assert both.get_curr_metrics() == []
    assert both.get_accuracy(x, y) == {}
