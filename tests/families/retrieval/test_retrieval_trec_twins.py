"""The functional twins of trec_eval's per-query rank measures (bpref, ...): pytrec_eval (trec_eval itself)
on tie-free data, and on tied data the mean over every order of the tie blocks (``"average"``) or the
sorted order (``"pessimistic"``/``"optimistic"``)."""

from __future__ import annotations

import pytest
import pytrec_eval
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics.functional import retrieval_bpref
from oracles.retrieval import plain_infap, plain_iprec, tie_orders

UNJUDGED = -1


def _random_run(seed: int, n_queries: int = 40):
    """Flat ``preds, target, indexes, retrieved`` (distinct scores) and the same run and qrels as
    pytrec_eval reads them. Targets: 1 relevant, 0 judged non-relevant, -1 unjudged (in the run only);
    ``retrieved=False`` rows are judged documents the run does not list."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 25, (n_queries,), generator=g)
    indexes = torch.repeat_interleave(torch.arange(n_queries), sizes)
    n = indexes.numel()
    preds = (torch.randperm(n, generator=g).double() + 1) / n
    target = torch.randint(0, 2, (n,), generator=g)
    target = torch.where(torch.rand(n, generator=g) < 0.25, UNJUDGED, target)
    retrieved = torch.rand(n, generator=g) < 0.8
    first = torch.cat([torch.ones(1, dtype=torch.bool), indexes[1:] != indexes[:-1]])
    retrieved |= first  # every query retrieves something
    target = torch.where(~retrieved & (target == UNJUDGED), 0, target)  # not retrieved: judged
    target = torch.where(first & (target == UNJUDGED), 0, target)  # every query is judged
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i in range(n):
        q, d = f"q{int(indexes[i]):03d}", f"d{i}"
        if bool(retrieved[i]):
            run.setdefault(q, {})[d] = float(preds[i])
        if int(target[i]) != UNJUDGED:
            qrels.setdefault(q, {})[d] = int(target[i])
    return preds, target, indexes, retrieved, run, qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bpref_equals_pytrec_eval_on_tie_free_runs(seed: int) -> None:
    preds, target, indexes, retrieved, run, qrels = _random_run(seed)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(run)
    expected = torch.tensor([theirs[q]["bpref"] for q in sorted(theirs)], dtype=torch.float64)
    ours = retrieval_bpref(
        preds, target, indexes=indexes, retrieved=retrieved, ignore_index=UNJUDGED, aggregation="none"
    )
    assert ours.shape == expected.shape
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    assert expected.min() < expected.max()  # the data exercise the measure


def _plain_bpref(ranked: list[int], num_rel: int, num_nonrel: int) -> float:
    """trec_eval's m_bpref.c loop over one ranked list of judgements (1, 0, or -1 unjudged)."""
    nonrel_so_far, total = 0, 0.0
    for judgement in ranked:
        if judgement == UNJUDGED:
            continue
        if judgement > 0:
            total += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel) if nonrel_so_far else 1.0
        else:
            nonrel_so_far += 1
    return total / num_rel if num_rel else 0.0


def _tied_oracle(scores: list[float], targets: list[int], ties: str, extra_nonrel: int) -> float:
    num_rel = sum(t > 0 for t in targets)
    num_nonrel = sum(t == 0 for t in targets) + extra_nonrel
    if ties == "average":
        orders = tie_orders(scores)
        return sum(_plain_bpref([targets[i] for i in o], num_rel, num_nonrel) for o in orders) / len(orders)
    sign = 1 if ties == "pessimistic" else -1  # pessimistic: relevant last among ties
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * targets[i]))
    return _plain_bpref([targets[i] for i in order], num_rel, num_nonrel)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 0, UNJUDGED])), min_size=1, max_size=7),
    st.integers(0, 2),
    st.sampled_from(["average", "pessimistic", "optimistic"]),
)
def test_bpref_on_ties_equals_every_tie_order(
    docs: list[tuple[int, int]], extra_nonrel: int, ties: str
) -> None:
    scores = [float(s) for s, _ in docs]
    targets = [t for _, t in docs]
    expected = _tied_oracle(scores, targets, ties, extra_nonrel)
    preds = torch.tensor(scores + [-1.0] * extra_nonrel, dtype=torch.float64)
    target = torch.tensor(targets + [0] * extra_nonrel)
    retrieved = torch.tensor([True] * len(docs) + [False] * extra_nonrel)
    ours = retrieval_bpref(preds, target, retrieved=retrieved, ignore_index=UNJUDGED, ties=ties)
    assert float(ours) == pytest.approx(expected, abs=1e-12)


def test_bpref_module_equals_functional_with_unjudged_documents() -> None:
    preds, target, indexes, _, _, _ = _random_run(5, n_queries=12)
    metric = em.RetrievalBpref(ignore_index=UNJUDGED, aggregation="none")
    half = preds.numel() // 2
    metric.update(preds[:half], target[:half], indexes[:half])
    metric.update(preds[half:], target[half:], indexes[half:])
    expected = retrieval_bpref(preds, target, indexes=indexes, ignore_index=UNJUDGED, aggregation="none")
    torch.testing.assert_close(metric.compute(), expected)


def _graded_run(seed: int, n_queries: int = 40):
    """As ``_random_run`` with grades 0..3 and no unjudged documents (target 0 is what trec_eval gives a
    document the qrels do not list, in every measure but bpref and infAP)."""
    preds, target, indexes, retrieved, run, _ = _random_run(seed, n_queries)
    g = torch.Generator().manual_seed(seed + 100)
    grade = torch.where(target == 1, torch.randint(1, 4, target.shape, generator=g), 0)
    qrels: dict[str, dict[str, int]] = {}
    for i in range(grade.numel()):
        qrels.setdefault(f"q{int(indexes[i]):03d}", {})[f"d{i}"] = int(grade[i])
    return preds, grade, indexes, retrieved, run, qrels


def _pytrec(run, qrels, measure: str, key: str) -> torch.Tensor:
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
    return torch.tensor([theirs[q][key] for q in sorted(theirs)], dtype=torch.float64)


@pytest.mark.parametrize("multiple", [0.2, 0.5, 1.0, 1.5, 2.0])
def test_r_precision_multiple_equals_pytrec_eval(multiple: float) -> None:
    preds, target, indexes, retrieved, run, qrels = _graded_run(7)
    expected = _pytrec(run, qrels, f"Rprec_mult.{multiple}", f"Rprec_mult_{multiple:.2f}")
    ours = em.functional.retrieval_r_precision_multiple(
        preds, target > 0, multiple, indexes=indexes, retrieved=retrieved, aggregation="none"
    )
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    assert expected.min() < expected.max()


def _plain_rprec_mult(ranked: list[int], multiple: float) -> float:
    R = sum(g > 0 for g in ranked)
    k = int(multiple * R + 0.9)
    return sum(g > 0 for g in ranked[:k]) / k if k else 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=7),
    st.sampled_from([0.3, 0.5, 1.0, 2.0]),
    st.sampled_from(["average", "pessimistic", "optimistic"]),
)
def test_r_precision_multiple_on_ties_equals_every_tie_order(
    docs: list[tuple[int, int]], multiple: float, ties: str
) -> None:
    scores = [float(s) for s, _ in docs]
    targets = [t for _, t in docs]
    if ties == "average":
        orders = tie_orders(scores)
        expected = sum(_plain_rprec_mult([targets[i] for i in o], multiple) for o in orders) / len(orders)
    else:
        sign = 1 if ties == "pessimistic" else -1
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * targets[i]))
        expected = _plain_rprec_mult([targets[i] for i in order], multiple)
    ours = em.functional.retrieval_r_precision_multiple(
        torch.tensor(scores, dtype=torch.float64), torch.tensor(targets), multiple, ties=ties
    )
    assert float(ours) == pytest.approx(expected, abs=1e-12)


def test_uncut_ndcg_is_trec_evals_ndcg() -> None:
    """trec_eval's ``ndcg`` (no cut-off, gains = grades, the ideal over every judged document) is
    ``retrieval_normalized_dcg(k=None)`` with the judged documents not retrieved as ``retrieved=False``."""
    preds, grade, indexes, retrieved, run, qrels = _graded_run(8)
    expected = _pytrec(run, qrels, "ndcg", "ndcg")
    ours = em.functional.retrieval_normalized_dcg(
        preds, grade, indexes=indexes, retrieved=retrieved, aggregation="none"
    )
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)


def test_average_precision_at_k_is_trec_evals_map_cut() -> None:
    """trec_eval's ``map_cut.k`` (AP over the first k documents, divided by all relevant ``R``) is
    ``retrieval_average_precision(k=...)``."""
    preds, grade, indexes, retrieved, run, qrels = _graded_run(9)
    ks = (1, 5, 10, 20)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"map_cut.1,5,10,20"}).evaluate(run)
    expected = torch.tensor(
        [[theirs[q][f"map_cut_{k}"] for k in ks] for q in sorted(theirs)], dtype=torch.float64
    )
    ours = em.functional.retrieval_average_precision(
        preds, grade > 0, ks, indexes=indexes, retrieved=retrieved, aggregation="none"
    )
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)


SET_MEASURES = {
    "set_relative_P": ("retrieval_set_relative_precision", {}),
    "set_map": ("retrieval_set_map", {}),
    "set_F": ("retrieval_set_f", {}),
    "set_F.0.5": ("retrieval_set_f", {"beta": 0.5}),
    "set_P": ("retrieval_precision", {"adaptive_k": True}),
    "set_recall": ("retrieval_recall", {}),
}


def _top(run: dict[str, dict[str, float]], k: int | None) -> dict[str, dict[str, float]]:
    """Each query's top ``k`` documents (the run trec_eval reads with ``-M k``)."""
    if k is None:
        return run
    return {q: dict(sorted(docs.items(), key=lambda d: -d[1])[:k]) for q, docs in run.items()}


@pytest.mark.parametrize("measure", sorted(SET_MEASURES))
@pytest.mark.parametrize("k", [None, 1, 4])
def test_set_measures_equal_pytrec_eval(measure: str, k: int | None) -> None:
    preds, target, indexes, retrieved, run, qrels = _graded_run(11)
    key = measure.split(".")[0]
    expected = _pytrec(_top(run, k), qrels, measure, key)
    name, kwargs = SET_MEASURES[measure]
    face = getattr(em.functional, name)
    ours = face(preds, target > 0, k, indexes=indexes, retrieved=retrieved, aggregation="none", **kwargs)
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    assert expected.min() < expected.max()


def _plain_set(name: str, ranked: list[int], k: int | None, num_rel: int, beta: float) -> float:
    retrieved = ranked if k is None else ranked[:k]
    m, x = len(retrieved), sum(g > 0 for g in retrieved)
    if name == "retrieval_set_relative_precision":
        den = min(m, num_rel)
        return x / den if den else 0.0
    if name == "retrieval_set_map":
        return x * x / (m * num_rel) if m and num_rel else 0.0
    p, recall = (x / m if m else 0.0), (x / num_rel if num_rel else 0.0)
    return (beta + 1) * p * recall / (beta * p + recall) if x else 0.0


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=7),
    st.sampled_from([None, 1, 2, 3, 5]),
    st.sampled_from(["retrieval_set_relative_precision", "retrieval_set_map", "retrieval_set_f"]),
    st.sampled_from(["average", "pessimistic", "optimistic"]),
)
def test_set_measures_on_ties_equal_every_tie_order(
    docs: list[tuple[int, int]], k: int | None, name: str, ties: str
) -> None:
    scores = [float(s) for s, _ in docs]
    targets = [t for _, t in docs]
    num_rel, beta = sum(targets), 0.5
    if ties == "average":
        orders = tie_orders(scores)
        values = [_plain_set(name, [targets[i] for i in o], k, num_rel, beta) for o in orders]
        expected = sum(values) / len(values)
    else:
        sign = 1 if ties == "pessimistic" else -1
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * targets[i]))
        expected = _plain_set(name, [targets[i] for i in order], k, num_rel, beta)
    kwargs = {"beta": beta} if name == "retrieval_set_f" else {}
    face = getattr(em.functional, name)
    ours = face(torch.tensor(scores, dtype=torch.float64), torch.tensor(targets), k, ties=ties, **kwargs)
    assert float(ours) == pytest.approx(expected, abs=1e-12)


LEVELS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)


@pytest.mark.parametrize("level", LEVELS)
def test_interpolated_precision_equals_pytrec_eval(level: float) -> None:
    preds, target, indexes, retrieved, run, qrels = _graded_run(12)
    expected = _pytrec(run, qrels, "iprec_at_recall", f"iprec_at_recall_{level:.2f}")
    face = em.functional.retrieval_interpolated_precision
    ours = face(preds, target > 0, level, indexes=indexes, retrieved=retrieved, aggregation="none")
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    assert expected.min() < expected.max()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=8),
    st.sampled_from(LEVELS),
    st.sampled_from(["pessimistic", "optimistic"]),
)
def test_interpolated_precision_on_ties_equals_the_sorted_order(
    docs: list[tuple[int, int]], level: float, ties: str
) -> None:
    scores = [float(s) for s, _ in docs]
    targets = [t for _, t in docs]
    sign = 1 if ties == "pessimistic" else -1  # pessimistic: relevant last among ties
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * targets[i]))
    expected = plain_iprec([targets[i] for i in order], level, sum(targets))
    face = em.functional.retrieval_interpolated_precision
    ours = face(torch.tensor(scores, dtype=torch.float64), torch.tensor(targets), level, ties=ties)
    assert float(ours) == pytest.approx(expected, abs=1e-12)


def test_interpolated_precision_keeps_its_pessimistic_default() -> None:
    preds, target = torch.tensor([0.5, 0.5, 0.1]), torch.tensor([0, 1, 1])
    assert float(em.RetrievalInterpolatedPrecision()(preds, target)) == pytest.approx(2 / 3)
    assert float(em.functional.retrieval_interpolated_precision(preds, target)) == pytest.approx(2 / 3)


def _pool_run(seed: int, n_queries: int = 40):
    """Judgements 1, 0, -2 (in the pool, not judged: a negative grade in the qrels) and -1 (not in the
    qrels), some judged documents not retrieved; distinct scores."""
    preds, target, indexes, retrieved, run, _ = _random_run(seed, n_queries)
    g = torch.Generator().manual_seed(seed + 200)
    first = torch.cat([torch.ones(1, dtype=torch.bool), indexes[1:] != indexes[:-1]])
    pooled = (target == 0) & retrieved & ~first  # every query keeps a judgement >= 0
    target = torch.where(pooled & (torch.rand(target.shape, generator=g) < 0.3), -2, target)
    qrels: dict[str, dict[str, int]] = {}
    for i in range(target.numel()):
        if int(target[i]) != UNJUDGED:
            qrels.setdefault(f"q{int(indexes[i]):03d}", {})[f"d{i}"] = int(target[i])
    return preds, target, indexes, retrieved, run, qrels


@pytest.mark.parametrize("seed", [0, 1])
def test_infap_equals_pytrec_eval(seed: int) -> None:
    preds, target, indexes, retrieved, run, qrels = _pool_run(seed)
    expected = _pytrec(run, qrels, "infAP", "infAP")
    ours = em.functional.retrieval_infap(
        preds, target, indexes=indexes, retrieved=retrieved, aggregation="none"
    )
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    assert expected.min() < expected.max()
    assert bool((target == -2).any())
    assert bool((target == -1).any())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 0, -1, -2])), min_size=1, max_size=8),
    st.sampled_from(["pessimistic", "optimistic"]),
)
def test_infap_on_ties_equals_the_sorted_order(docs: list[tuple[int, int]], ties: str) -> None:
    scores = [float(s) for s, _ in docs]
    targets = [t for _, t in docs]
    sign = 1 if ties == "pessimistic" else -1  # pessimistic: relevant last among ties
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], sign * targets[i]))
    expected = plain_infap([targets[i] for i in order], sum(t > 0 for t in targets))
    ours = em.functional.retrieval_infap(
        torch.tensor(scores, dtype=torch.float64), torch.tensor(targets), ties=ties
    )
    assert float(ours) == pytest.approx(expected, abs=1e-12)


def test_infap_refuses_other_negative_targets() -> None:
    preds = torch.tensor([0.5, 0.4, 0.3])
    with pytest.raises(ValueError, match=r"must be 1 \(relevant\), 0 .* or -2 .*got the value -3"):
        em.functional.retrieval_infap(preds, torch.tensor([1, -3, 1]))
    with pytest.raises(ValueError, match="must be binary"):
        em.functional.retrieval_bpref(preds, torch.tensor([1, -2, 1]))
