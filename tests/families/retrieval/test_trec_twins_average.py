"""``ties="average"`` of trec_eval's interpolated precision (``iprec_at_recall``) and infAP: the exact mean
over every distinct arrangement of the tie blocks, each arrangement scored by a plain reimplementation of
trec_eval's loop and by pytrec_eval (trec_eval itself, fed the arrangement as distinct scores)."""

from __future__ import annotations

import pytest
import pytrec_eval
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics._engine.ranking.trec_twin_ties import MAX_BLOCK_WORK, TieBlockTooLargeError
from embedmetrics.functional import retrieval_infap, retrieval_interpolated_precision
from oracles.retrieval import block_arrangements, plain_infap, plain_iprec

LEVELS = tuple(i / 10 for i in range(11))
TIES = ("pessimistic", "average", "optimistic")
NOT_IN_QRELS = -99  # the oracle's label of a document the qrels do not list
#: A document: its score (few values: ties) and its qrels grade (None: not in the qrels).
DOCS = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([2, 1, 1, 0, 0, -1, None])), min_size=1, max_size=8
)


def _judgement(grade: int | None) -> int:
    """infAP's target of a qrels grade: 1 relevant, 0 judged non-relevant, -2 a negative grade (in the
    pool, not judged), -1 not in the qrels."""
    return -1 if grade is None else 1 if grade > 0 else 0 if grade == 0 else -2


def _pytrec_per_arrangement(arrangements: list[list[int | None]], extra: int) -> list[dict[str, float]]:
    """pytrec_eval's ``iprec_at_recall`` and ``infAP`` of each arrangement of qrels grades (one query
    each, distinct descending scores, plus ``extra`` relevant documents the run does not retrieve)."""
    run, qrels = {}, {}
    for q, grades in enumerate(arrangements):
        name = f"q{q:05d}"
        run[name] = {f"d{i}": float(len(grades) - i) for i in range(len(grades))}
        qrels[name] = {f"d{i}": g for i, g in enumerate(grades) if g is not None}
        qrels[name].update({f"x{i}": 1 for i in range(extra)})
        qrels[name].setdefault("judged", 0)  # every query is judged
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"iprec_at_recall", "infAP"}).evaluate(run)
    return [theirs[f"q{q:05d}"] for q in range(len(arrangements))]


def _faces(scores: list[float], grades: list[int | None], extra: int, dtype: torch.dtype):
    """The inputs of both faces: the ranked documents, then ``extra`` relevant ones not retrieved and the
    one judged non-relevant document every query of ``_pytrec_per_arrangement`` has."""
    preds = torch.tensor(scores + [-1.0] * (extra + 1), dtype=dtype)
    judgement = torch.tensor([_judgement(g) for g in grades] + [1] * extra + [0])
    retrieved = torch.tensor([True] * len(scores) + [False] * (extra + 1))
    return preds, judgement, retrieved


@settings(max_examples=50, deadline=None)
@given(DOCS, st.integers(0, 2))
def test_average_is_the_mean_over_every_arrangement(docs: list[tuple[int, int | None]], extra: int) -> None:
    scores = [float(s) for s, _ in docs]
    grades = [g for _, g in docs]
    labels = [NOT_IN_QRELS if g is None else g for g in grades]
    ranked = [[None if x == NOT_IN_QRELS else x for x in a] for a in block_arrangements(scores, labels)]
    num_rel = sum(g is not None and g > 0 for g in grades) + extra
    judged = [[_judgement(g) for g in grades_] for grades_ in ranked]
    iprec = [sum(plain_iprec(j, level, num_rel) for j in judged) / len(judged) for level in LEVELS]
    infap = sum(plain_infap(j, num_rel) for j in judged) / len(judged)
    theirs = _pytrec_per_arrangement(ranked, extra)
    for level, value in zip(LEVELS, iprec):
        key = f"iprec_at_recall_{level:.2f}"
        assert sum(t[key] for t in theirs) / len(theirs) == pytest.approx(value, abs=1e-12)
    assert sum(t["infAP"] for t in theirs) / len(theirs) == pytest.approx(infap, abs=1e-12)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        preds, judgement, retrieved = _faces(scores, grades, extra, dtype)
        ours = [
            float(
                retrieval_interpolated_precision(
                    preds, judgement > 0, level, retrieved=retrieved, ties="average"
                )
            )
            for level in LEVELS
        ]
        assert ours == pytest.approx(iprec, abs=tol)
        ours_infap = retrieval_infap(preds, judgement, retrieved=retrieved, ties="average")
        assert float(ours_infap) == pytest.approx(infap, abs=tol)
        assert ours_infap.dtype == dtype


def test_the_mean_over_arrangements_is_not_the_mean_over_document_orders_by_accident() -> None:
    """The oracle's distinct arrangements are equally likely: on a block of 2 relevant and 1 non-relevant
    documents the mean over the 3 arrangements equals the mean over the 6 document orders."""
    assert block_arrangements([1.0, 1.0, 1.0], [1, 1, 0]) == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    value = sum(plain_iprec(a, 1.0, 2) for a in block_arrangements([1.0] * 3, [1, 1, 0])) / 3
    assert value == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)


def _random_tied_run(seed: int, n_queries: int = 30):
    """Flat input with heavy ties (scores 0..4), several blocks per query, infAP's judgements and some
    queries without a relevant document."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 20, (n_queries,), generator=g)
    indexes = torch.repeat_interleave(torch.arange(n_queries), sizes)
    n = indexes.numel()
    preds = torch.randint(0, 5, (n,), generator=g).double()
    judgement = torch.tensor([1, 0, 0, -1, -2])[torch.randint(0, 5, (n,), generator=g)]
    judgement[indexes % 7 == 3] = 0  # queries without a relevant document
    return preds, judgement, indexes


@pytest.mark.parametrize("level", [0.0, 0.3, 1.0])
def test_several_queries_at_once_equal_each_query_alone(level: float) -> None:
    preds, judgement, indexes = _random_tied_run(3)
    ip = retrieval_interpolated_precision(
        preds, judgement > 0, level, indexes=indexes, ties="average", aggregation="none"
    )
    ia = retrieval_infap(preds, judgement, indexes=indexes, ties="average", aggregation="none")
    for q in range(int(indexes.max()) + 1):
        mine = indexes == q
        alone = retrieval_interpolated_precision(preds[mine], judgement[mine] > 0, level, ties="average")
        assert float(ip[q]) == pytest.approx(float(alone), abs=1e-12)
        assert float(ia[q]) == pytest.approx(
            float(retrieval_infap(preds[mine], judgement[mine], ties="average")), abs=1e-12
        )
    assert bool((ip == 0).any())
    assert bool((ip > 0).any())


@settings(max_examples=40, deadline=None)
@given(DOCS, st.sampled_from(LEVELS))
def test_average_lies_between_the_orders_and_equals_them_without_ties(
    docs: list[tuple[int, int | None]], level: float
) -> None:
    scores = [float(s) for s, _ in docs]
    preds, judgement, retrieved = _faces(scores, [g for _, g in docs], 0, torch.float64)
    ip = [
        float(retrieval_interpolated_precision(preds, judgement > 0, level, retrieved=retrieved, ties=t))
        for t in TIES
    ]
    ia = [float(retrieval_infap(preds, judgement, retrieved=retrieved, ties=t)) for t in TIES]
    for low, mid, high in (ip, ia):
        assert low - 1e-12 <= mid <= high + 1e-12
    distinct = preds + torch.arange(preds.numel(), dtype=torch.float64) / 100  # same order, no ties
    ip = [
        float(retrieval_interpolated_precision(distinct, judgement > 0, level, retrieved=retrieved, ties=t))
        for t in TIES
    ]
    ia = [float(retrieval_infap(distinct, judgement, retrieved=retrieved, ties=t)) for t in TIES]
    assert ip == pytest.approx([ip[0]] * 3, abs=1e-12)
    assert ia == pytest.approx([ia[0]] * 3, abs=1e-12)


@pytest.mark.parametrize("name", ["RetrievalInterpolatedPrecision", "RetrievalInfAP"])
def test_the_module_metric_across_batches_equals_the_functional(name: str) -> None:
    preds, judgement, indexes = _random_tied_run(5)
    target = judgement > 0 if name == "RetrievalInterpolatedPrecision" else judgement
    kwargs = {"recall_level": 0.5} if name == "RetrievalInterpolatedPrecision" else {}
    metric = getattr(em, name)(ties="average", aggregation="none", **kwargs)
    order = torch.randperm(preds.numel(), generator=torch.Generator().manual_seed(0))
    for part in torch.tensor_split(order, 3):
        metric.update(preds[part], target[part], indexes[part])
    face = retrieval_interpolated_precision if kwargs else retrieval_infap
    expected = face(preds, target, indexes=indexes, ties="average", aggregation="none", **kwargs)
    torch.testing.assert_close(metric.compute(), expected, atol=1e-12, rtol=0)
    two_d = getattr(em, name)(ties="average", **kwargs)  # whole queries as rows, reduced in ``update``
    rows = torch.tensor([[0.5, 0.5, 0.5, 0.1], [0.9, 0.2, 0.2, 0.2]], dtype=torch.float64)
    relevant = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]])
    two_d.update(rows[:1], relevant[:1])
    two_d.update(rows[1:], relevant[1:])
    flat = face(
        rows.reshape(-1),
        relevant.reshape(-1),
        indexes=torch.tensor([0] * 4 + [1] * 4),
        ties="average",
        **kwargs,
    )
    assert float(two_d.compute()) == pytest.approx(float(flat), abs=1e-12)


def test_a_tie_block_too_large_for_the_exact_sum_is_refused() -> None:
    preds = torch.zeros(10_000, dtype=torch.float64)
    target = torch.zeros(10_000, dtype=torch.long)
    target[::100] = 1  # 100 relevant among 10,000 equal scores
    with pytest.raises(
        TieBlockTooLargeError, match=rf"10000 documents with 100 relevant .*bound of {MAX_BLOCK_WORK}"
    ):
        retrieval_interpolated_precision(preds, target, ties="average")
    assert issubclass(TieBlockTooLargeError, ValueError)
    assert em.TieBlockTooLargeError is TieBlockTooLargeError
    # infAP's sum is linear in the documents above: the same block is computed, between the two orders
    values = [float(retrieval_infap(preds, target, ties=t)) for t in TIES]
    assert values[0] < values[1] < values[2]
    # a large block with few relevant documents is computed (by segments), as docs/ties.md says
    few_relevant = torch.zeros(10_000, dtype=torch.long)
    few_relevant[::2000] = 1
    values = [float(retrieval_interpolated_precision(preds, few_relevant, ties=t)) for t in TIES]
    assert values[0] < values[1] < values[2]
    # and a block of a few hundred documents
    few = retrieval_interpolated_precision(preds[:300], target[:300], ties="average")
    assert float(retrieval_interpolated_precision(preds[:300], target[:300])) < float(few) < 1.0


def test_the_documented_examples_by_hand() -> None:
    """Two tied documents, the relevant one first or second with probability 1/2 each."""
    tied = torch.tensor([0.5, 0.5])
    assert float(
        retrieval_interpolated_precision(tied, torch.tensor([0, 1]), ties="average")
    ) == pytest.approx((1 + 1 / 2) / 2)
    # second: rank 2 under a pool-unjudged document: 1/2 + 1/2 · 1 · ε/(2ε) = 3/4
    assert float(retrieval_infap(tied, torch.tensor([1, -2]), ties="average")) == pytest.approx(
        (1 + 3 / 4) / 2
    )


def test_every_block_of_up_to_300_documents_is_within_the_bound() -> None:
    """docs/ties.md promises it: at most ``r·(t − r + 1)`` candidates, each counted in ``r·(t − r + 1)``
    steps."""
    assert all(r * r * (301 - r) ** 2 <= MAX_BLOCK_WORK for r in range(1, 301))
    assert any(r * r * (305 - r) ** 2 > MAX_BLOCK_WORK for r in range(1, 305))


@pytest.mark.parametrize(("size", "relevant", "above"), [(200, 1, [1, 0, 0]), (130, 2, [0, 1])])
def test_large_blocks_with_few_relevant_documents(size: int, relevant: int, above: list[int]) -> None:
    """Blocks where the count of arrangements runs by segments (``O(r³)`` a candidate value): still the
    mean over every arrangement, behind a few untied documents."""
    labels = above + [1] * relevant + [0] * (size - relevant)
    scores = [float(len(above) - i + 1) for i in range(len(above))] + [0.0] * size
    arrangements = block_arrangements(scores, labels)
    num_rel = sum(labels)
    preds, target = torch.tensor(scores, dtype=torch.float64), torch.tensor(labels)
    assert 8 * (relevant + 1) ** 3 < relevant * (size - relevant + 1)  # counted by segments
    for level in (0.0, 1.0):
        expected = sum(plain_iprec(a, level, num_rel) for a in arrangements) / len(arrangements)
        ours = retrieval_interpolated_precision(preds, target, level, ties="average")
        assert float(ours) == pytest.approx(expected, abs=1e-12)
    expected = sum(plain_infap(a, num_rel) for a in arrangements) / len(arrangements)
    assert float(retrieval_infap(preds, target, ties="average")) == pytest.approx(expected, abs=1e-12)


def test_infap_names_the_targets_it_accepts() -> None:
    """A target outside trec_eval's judgements is refused with the four values infAP reads."""

    message = r"`target` must be 1 \(relevant\), 0 \(judged non-relevant\), -1 \(not in the qrels\) or -2"
    with pytest.raises(ValueError, match=message + r".*got the value 2"):
        retrieval_infap(torch.tensor([0.5, 0.2]), torch.tensor([2, -2]))
    metric = em.RetrievalInfAP()
    with pytest.raises(ValueError, match=message):
        metric.update(torch.tensor([0.5, 0.2]), torch.tensor([1, 3]), indexes=torch.tensor([0, 0]))
    assert float(retrieval_infap(torch.tensor([0.5, 0.2]), torch.tensor([1, -2]))) == 1.0
