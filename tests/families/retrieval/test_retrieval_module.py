"""Module behaviour: batch splits, state safety, validation errors, forward/compute/reset, plot."""

from __future__ import annotations

import copy

import matplotlib
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import embedmetrics as em
from embedmetrics import functional as F

matplotlib.use("Agg")

CLASSES = {
    em.RetrievalHitRate: F.retrieval_hit_rate,
    em.RetrievalMRR: F.retrieval_reciprocal_rank,
    em.RetrievalPrecision: F.retrieval_precision,
    em.RetrievalRecall: F.retrieval_recall,
    em.RetrievalNormalizedDCG: F.retrieval_normalized_dcg,
    em.RetrievalMAP: F.retrieval_average_precision,
    em.RetrievalRPrecision: F.retrieval_r_precision,
    em.RetrievalFallOut: F.retrieval_fall_out,
}
STATES = ("preds", "target", "indexes", "row_values", "row_status")

#: Every draw of this file (parameter lists included) comes from this seeded generator.
_G = torch.Generator().manual_seed(1234)


def _flat(seed, n=120, queries=15):
    g = torch.Generator().manual_seed(seed)
    preds = torch.randint(0, 6, (n,), generator=g).float() / 5 - 0.5  # ties and negative scores
    target = torch.randint(0, 2, (n,), generator=g)
    indexes = torch.randint(0, queries, (n,), generator=g)
    return preds, target, indexes


def _kw(cls, **kw):
    if cls is em.RetrievalRPrecision:
        kw.pop("k", None)
    if cls is em.RetrievalFallOut:  # module default 'pos', functional default 'neg' (as torchmetrics)
        kw.setdefault("empty_target_action", "pos")
    return kw


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 120), max_size=6),
    ties=st.sampled_from(["average", "pessimistic", "optimistic"]),
    eta=st.sampled_from(["neg", "pos", "skip"]),
    k=st.sampled_from([None, 2, (1, 5)]),
)
def test_module_over_any_split_equals_functional(cls, seed, cuts, ties, eta, k):
    preds, target, indexes = _flat(seed)
    kw = _kw(cls, k=k, ties=ties, empty_target_action=eta)
    m = cls(**kw)
    bounds = [0, *sorted(cuts), preds.numel()]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            m.update(preds[lo:hi], target[lo:hi], indexes=indexes[lo:hi])
    expected = CLASSES[cls](preds, target, indexes=indexes, **kw)
    assert torch.allclose(m.compute(), expected, atol=1e-6)


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_2d_and_flat_updates_mix(cls):
    g = torch.Generator().manual_seed(1)
    rows_p, rows_t = torch.rand(8, 5, generator=g), torch.randint(0, 2, (8, 5), generator=g)
    preds, target, indexes = _flat(2)
    m = cls(**_kw(cls, k=3, aggregation="none"))
    m.update(rows_p[:3], rows_t[:3])
    m.update(preds, target, indexes)
    m.update(rows_p[3:], rows_t[3:])
    m.update(rows_p[0, :4], rows_t[0, :4])  # 1-D without indexes: one query
    fn, kw = CLASSES[cls], _kw(cls, k=3, aggregation="none")
    expected = torch.cat(
        [
            fn(rows_p, rows_t, **kw),
            fn(rows_p[0, :4], rows_t[0, :4], **kw),
            fn(preds, target, indexes=indexes, **kw),
        ]
    )
    got = m.compute()
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-6)


def test_forward_compute_reset():
    preds, target, indexes = _flat(3)
    m = em.RetrievalMRR()
    b1 = m(preds[:60], target[:60], indexes[:60])
    assert torch.allclose(b1, F.retrieval_reciprocal_rank(preds[:60], target[:60], indexes=indexes[:60]))
    b2 = m(preds[60:], target[60:], indexes[60:])
    assert torch.allclose(b2, F.retrieval_reciprocal_rank(preds[60:], target[60:], indexes=indexes[60:]))
    assert torch.allclose(m.compute(), F.retrieval_reciprocal_rank(preds, target, indexes=indexes))
    m.reset()
    assert all(getattr(m, s) == [] for s in STATES)
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert m.compute().item() == 0.0  # nothing accumulated
    m.update(preds[:5].reshape(1, 5), target[:5].reshape(1, 5))
    assert torch.allclose(m.compute(), F.retrieval_reciprocal_rank(preds[:5], target[:5]))


def test_queries_spanning_updates_are_grouped():
    m = em.RetrievalHitRate(k=1)
    m.update(torch.tensor([0.9, 0.1]), torch.tensor([0, 0]), torch.tensor([7, 8]))
    m.update(torch.tensor([0.95, 0.5]), torch.tensor([1, 1]), torch.tensor([7, 8]))
    # query 7: 0.95 (rel) on top -> hit; query 8: 0.5 (rel) above 0.1 -> hit
    assert m.compute().item() == 1.0


def test_state_is_o_queries_for_2d_input():
    m = em.RetrievalNormalizedDCG(k=(1, 5))
    m.update(torch.rand(50, 40, generator=_G), torch.randint(0, 3, (50, 40), generator=_G))
    assert m.preds == []
    assert m.row_values[0].shape == (50, 2)
    assert m.row_status[0].shape == (50,)


def test_empty_target_action_and_ignore_in_2d_rows():
    preds = torch.tensor([[0.9, 0.1, 0.5], [0.3, 0.2, 0.1], [0.5, 0.4, 0.3]])
    target = torch.tensor([[0, 1, -1], [0, 0, 0], [-1, -1, -1]])  # row 2 fully ignored: dropped
    for eta, expected in (("neg", [0.5, 0.0]), ("pos", [0.5, 1.0]), ("skip", [0.5])):
        m = em.RetrievalMRR(empty_target_action=eta, ignore_index=-1, aggregation="none")
        m.update(preds, target)
        assert m.compute().reshape(-1).tolist() == pytest.approx(expected)
    m = em.RetrievalMRR(empty_target_action="error", ignore_index=-1)
    m.update(preds, target)
    with pytest.raises(ValueError, match="no relevant"):
        m.compute()
    assert em.RetrievalMRR(empty_target_action="skip")(preds[1:2], target[1:2]).item() == 0.0


def test_callable_aggregation_and_none():
    preds, target, indexes = _flat(4)
    per_query = F.retrieval_recall(preds, target, k=(1, 3), indexes=indexes, aggregation="none")
    assert per_query.shape == (torch.unique(indexes).numel(), 2)
    got = em.RetrievalRecall(k=(1, 3), aggregation=lambda v, dim: v.amax(dim=dim))(preds, target, indexes)
    assert torch.allclose(got, per_query.amax(0))


def test_float64_output_dtype():
    preds, target, indexes = _flat(5)
    assert em.RetrievalMAP()(preds.double(), target, indexes).dtype == torch.float64
    assert em.RetrievalMAP()(preds, target, indexes).dtype == torch.float32


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_plot(cls):
    preds, target, indexes = _flat(6)
    m = cls()
    m.update(preds, target, indexes)
    fig, ax = m.plot()
    assert fig is not None
    vals = [m(preds, target, indexes) for _ in range(3)]
    fig, ax = m.plot(vals)
    assert len(ax.lines) >= 1


def test_state_dict_and_collection():
    from torchmetrics import MetricCollection

    preds, target, indexes = _flat(7)
    coll = MetricCollection({"hr": em.RetrievalHitRate(k=3), "ndcg": em.RetrievalNormalizedDCG(k=3)})
    out = coll(preds, target, indexes=indexes)
    assert torch.allclose(out["hr"], F.retrieval_hit_rate(preds, target, k=3, indexes=indexes))
    assert torch.allclose(out["ndcg"], F.retrieval_normalized_dcg(preds, target, k=3, indexes=indexes))


# --------------------------------------------------------------------------- bad input

BAD_UPDATES = [
    # (args, kwargs, error type, text that must appear)
    (
        (torch.rand(4, generator=_G), torch.ones(3, dtype=torch.long), torch.zeros(4, dtype=torch.long)),
        TypeError,
        None,
    ),
    (
        (torch.rand(4, generator=_G), torch.tensor([0, 2, 1, 0]), torch.zeros(4, dtype=torch.long)),
        ValueError,
        "2",
    ),
    ((torch.rand(4, generator=_G), torch.tensor([0, 1, 1, 0]), torch.zeros(4)), TypeError, "float32"),
    (
        (
            torch.tensor([0.1, float("nan"), 0.2, 0.3]),
            torch.tensor([0, 1, 1, 0]),
            torch.zeros(4, dtype=torch.long),
        ),
        ValueError,
        "NaN",
    ),
    (
        (torch.rand(0, generator=_G), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
        ValueError,
        "(0,)",
    ),
    (
        (
            torch.randint(0, 5, (4,), generator=_G),
            torch.tensor([0, 1, 1, 0]),
            torch.zeros(4, dtype=torch.long),
        ),
        TypeError,
        "int64",
    ),
    (
        (torch.rand(4, generator=_G), torch.tensor([0, 1, 1, 0]), torch.zeros(3, dtype=torch.long)),
        ValueError,
        "(3,)",
    ),
    (
        (torch.rand(2, 2, 2, generator=_G), torch.ones(2, 2, 2, dtype=torch.long), None),
        ValueError,
        "(2, 2, 2)",
    ),
]
BAD_UPDATES[0] = (
    (torch.rand(4, generator=_G), torch.ones(3, dtype=torch.long), torch.zeros(4, dtype=torch.long)),
    ValueError,
    "(3,)",
)


@pytest.mark.parametrize(("args", "err", "text"), BAD_UPDATES)
def test_bad_update_raises_and_names_value(args, err, text):
    m = em.RetrievalHitRate()
    with pytest.raises(err) as info:
        m.update(*args)
    if text is not None:
        assert text in str(info.value)
    assert "`" in str(info.value)  # names the argument


@pytest.mark.parametrize(
    ("kwargs", "err", "text"),
    [
        ({"k": 0}, ValueError, "`k`"),
        ({"k": 2.5}, TypeError, "2.5"),
        ({"k": True}, TypeError, "True"),
        ({"k": [1, 0]}, ValueError, "0"),
        ({"top_k": -1}, ValueError, "-1"),
        ({"k": 3, "top_k": 5}, ValueError, "top_k=5"),
        ({"empty_target_action": "drop"}, ValueError, "'drop'"),
        ({"ties": "random"}, ValueError, "'random'"),
        ({"aggregation": "sum"}, ValueError, "'sum'"),
        ({"ignore_index": 1.5}, TypeError, "1.5"),
    ],
)
def test_bad_options(kwargs, err, text):
    with pytest.raises(err, match="Argument") as info:
        em.RetrievalHitRate(**kwargs)
    assert text in str(info.value)
    with pytest.raises(err):
        F.retrieval_hit_rate(torch.rand(3, generator=_G), torch.tensor([0, 1, 0]), **kwargs)


def test_graded_target_checks():
    with pytest.raises(ValueError, match="-1"):
        F.retrieval_normalized_dcg(torch.rand(3, generator=_G), torch.tensor([0, 2, -1]))
    with pytest.raises(TypeError, match="adaptive_k"):
        em.RetrievalPrecision(adaptive_k=1)
    # ignored values are not checked
    assert (
        F.retrieval_hit_rate(
            torch.rand(3, generator=_G), torch.tensor([0, 1, -100]), ignore_index=-100
        ).item()
        == 1.0
    )


def test_validate_args_false_skips_value_checks_only():
    m = em.RetrievalHitRate(validate_args=False)
    m.update(torch.rand(3, generator=_G), torch.tensor([0, 1, 0]), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="shape"):
        m.update(torch.rand(3, generator=_G), torch.tensor([0, 1]), torch.zeros(3, dtype=torch.long))


def _snapshot(m):
    return {s: [t.clone() for t in getattr(m, s)] for s in STATES}


@pytest.mark.parametrize("cls", [em.RetrievalHitRate, em.RetrievalNormalizedDCG])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1000), which=st.integers(0, len(BAD_UPDATES) - 1), twod=st.booleans())
def test_rejected_update_leaves_state_unchanged(cls, seed, which, twod):
    preds, target, indexes = _flat(seed)
    m = cls()
    if twod:
        m.update(preds[:100].reshape(10, 10), target[:100].reshape(10, 10))
    m.update(preds, target, indexes)
    before = _snapshot(m)
    value_before = copy.deepcopy(m).compute()
    args, _err, _ = BAD_UPDATES[which]
    if cls is em.RetrievalNormalizedDCG and which == 1:
        args = (args[0], torch.tensor([0, -2, 1, 0]), args[2])  # graded: only negatives are bad
    with pytest.raises((ValueError, TypeError)):
        m.update(*args)
    after = _snapshot(m)
    assert before.keys() == after.keys()
    for s in STATES:
        assert len(before[s]) == len(after[s])
        for a, b in zip(before[s], after[s]):
            assert torch.equal(a, b)
    assert torch.equal(m.compute(), value_before)


@pytest.mark.parametrize("name", ["k", "top_k"])
def test_r_precision_rejects_a_cut_off_by_name(name: str) -> None:
    from embedmetrics import RetrievalRPrecision

    with pytest.raises(TypeError, match=rf"no argument `{name}`.*{name}=5"):
        RetrievalRPrecision(**{name: 5})
