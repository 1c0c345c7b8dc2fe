"""Bad input gets a clear error, the same way at every public entry point.

One rule, one validator, one exception type per kind of mistake: a wrong *kind* of argument is a
``TypeError``, a wrong *value* a ``ValueError``; every message names the argument and the value.
NaN or infinite embeddings are rejected with ``validate_args=True`` and give NaN without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import embedmetrics as em
from embedmetrics import functional as F

_G = torch.Generator().manual_seed(0)
Z1 = torch.randn(12, 4, generator=_G)
Z2 = Z1 + 0.2 * torch.randn(12, 4, generator=_G)
LABELS = torch.arange(12) % 3
PREDS = torch.rand(12, generator=_G)
TARGET = torch.tensor([1, 0, 0] * 4)
INDEXES = torch.arange(4).repeat_interleave(3)


def _bad(z: torch.Tensor, value: float) -> torch.Tensor:
    out = z.clone()
    out[5, 2] = value
    return out


# --------------------------------------------------------------------------- NaN and infinite embeddings

# (name, call with embeddings (a, b) and validate_args, argument named in the error)
EMBEDDING_CALLS: list[tuple[str, Callable[[torch.Tensor, torch.Tensor, bool], Any], str]] = [
    ("contrastive_accuracy_score", lambda a, b, v: F.contrastive_accuracy_score(a, b, validate_args=v), "z1"),
    (
        "contrastive_accuracy_score z2",
        lambda a, b, v: F.contrastive_accuracy_score(b, a, validate_args=v),
        "z2",
    ),
    ("uniformity_score", lambda a, b, v: F.uniformity_score(a, validate_args=v), "z"),
    ("alignment_score", lambda a, b, v: F.alignment_score(a, b, validate_args=v), "z1"),
    ("ContrastiveAccuracy", lambda a, b, v: em.ContrastiveAccuracy(validate_args=v)(a, b), "z1"),
    ("Uniformity", lambda a, b, v: em.Uniformity(validate_args=v)(a), "z"),
    ("Alignment", lambda a, b, v: em.Alignment(validate_args=v)(a, b), "z1"),
    (
        "EmbeddingAccuracy",
        lambda a, b, v: em.EmbeddingAccuracy(validate_args=v, exclude=("NMI", "AMI"))(a, LABELS),
        "embeddings",
    ),
    (
        "AccuracyCalculator query",
        lambda a, b, v: em.AccuracyCalculator(validate_args=v).get_accuracy(a, b, LABELS, LABELS, False),
        "query",
    ),
    (
        "AccuracyCalculator reference",
        lambda a, b, v: em.AccuracyCalculator(validate_args=v).get_accuracy(b, a, LABELS, LABELS, False),
        "reference",
    ),
]


@pytest.mark.parametrize(("name", "call", "argument"), EMBEDDING_CALLS, ids=[c[0] for c in EMBEDDING_CALLS])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_embeddings_are_rejected_naming_the_argument(
    name: str, call: Any, argument: str, value: float
) -> None:
    with pytest.raises(ValueError, match=rf"Argument `{argument}` must hold finite values, got {value!r}"):
        call(_bad(Z1, value), Z2, True)


@pytest.mark.parametrize(("name", "call", "argument"), EMBEDDING_CALLS, ids=[c[0] for c in EMBEDDING_CALLS])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_embeddings_give_nan_without_validation(
    name: str, call: Any, argument: str, value: float
) -> None:
    out = call(_bad(Z1, value), Z2, False)
    values = list(out.values()) if isinstance(out, dict) else [out]
    assert values
    assert all(bool(torch.isnan(torch.as_tensor(v, dtype=torch.float64)).all()) for v in values), out


def test_the_reported_nan_case_is_nan_not_a_plausible_value() -> None:
    # one NaN entry used to give 0.715: sign(NaN) is 0, so the row looked tied with everything
    z1 = _bad(Z1, math.nan)
    assert torch.isnan(F.contrastive_accuracy_score(z1, Z2, validate_args=False))
    assert np.isnan(F.contrastive_accuracy_score(z1.numpy(), Z2.numpy(), validate_args=False))


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_query_against_a_large_reference_gives_nan_not_an_index_error(value: float) -> None:
    """With a reference large enough for the scans' candidate filter (its blocks padded with ``+inf``
    columns), a query row holding NaN ranks its keys after the padding: the padding must never be
    listed (it raised ``IndexError``). The kNN metrics give NaN; dense retrieval lists real documents,
    and the other queries keep their values."""
    g = torch.Generator().manual_seed(0)
    ref, labels = torch.randn(400, 8, generator=g), torch.randint(0, 5, (400,), generator=g)
    query = ref[:10].clone()
    query[3, 2] = value
    out = F.embedding_accuracy(
        query, labels[:10], ref, labels, include=("precision_at_1", "r_precision"), k=3, validate_args=False
    )
    assert all(bool(torch.isnan(torch.as_tensor(v)).all()) for v in out.values()), out
    calc = em.AccuracyCalculator(include=("precision_at_1",), k=3, validate_args=False)
    assert math.isnan(calc.get_accuracy(query, ref, labels[:10], labels, False)["precision_at_1"])
    same = torch.cat([query, ref[10:]])  # the same-source 2.x call: a NaN row equals itself
    assert math.isnan(calc.get_accuracy(same, labels)["precision_at_1"])
    qrels = torch.tensor([[i, j, 1] for i in range(10) for j in range(i, i + 5)])
    dense = F.dense_retrieval(query, ref, qrels, k=3, validate_args=False, aggregation="none")
    finite = F.dense_retrieval(query[:3], ref, qrels[qrels[:, 0] < 3], k=3, aggregation="none")
    for name, values in finite.items():
        assert torch.equal(dense[name][:3], values), name


# --------------------------------------------------------------------------- one validator per rule

VALIDATE_ARGS_ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    **{
        name: (lambda fn: lambda v: fn(PREDS, TARGET, indexes=INDEXES, validate_args=v))(getattr(F, name))
        for name in (
            "retrieval_hit_rate",
            "retrieval_reciprocal_rank",
            "retrieval_precision",
            "retrieval_recall",
            "retrieval_r_precision",
            "retrieval_average_precision",
            "retrieval_normalized_dcg",
            "retrieval_fall_out",
            "retrieval_auroc",
            "retrieval_precision_recall_curve",
            "retrieval_recall_at_fixed_precision",
        )
    },
    **{
        name: (lambda cls: lambda v: cls(validate_args=v))(getattr(em, name))
        for name in (
            "RetrievalHitRate",
            "RetrievalMRR",
            "RetrievalPrecision",
            "RetrievalRecall",
            "RetrievalRPrecision",
            "RetrievalMAP",
            "RetrievalNormalizedDCG",
            "RetrievalFallOut",
            "RetrievalAUROC",
            "RetrievalPrecisionRecallCurve",
            "RetrievalRecallAtFixedPrecision",
            "ContrastiveAccuracy",
            "Uniformity",
            "Alignment",
            "EmbeddingAccuracy",
            "AccuracyCalculator",
            "ContrastiveLoss",
        )
    },
    "contrastive_accuracy_score": lambda v: F.contrastive_accuracy_score(Z1, Z2, validate_args=v),
    "uniformity_score": lambda v: F.uniformity_score(Z1, validate_args=v),
    "alignment_score": lambda v: F.alignment_score(Z1, Z2, validate_args=v),
    "contrastive_loss": lambda v: F.contrastive_loss(Z1, Z2, LABELS.clamp_max(1), validate_args=v),
}


@pytest.mark.parametrize("name", sorted(VALIDATE_ARGS_ENTRY_POINTS))
@pytest.mark.parametrize("value", [1, "yes", None, 1.0])
def test_validate_args_must_be_a_bool_everywhere(name: str, value: Any) -> None:
    with pytest.raises(TypeError, match=rf"Argument `validate_args` must be a bool, got {value!r}"):
        VALIDATE_ARGS_ENTRY_POINTS[name](value)
    VALIDATE_ARGS_ENTRY_POINTS[name](np.bool_(True))  # NumPy bools are bools


BLOCK_BYTES_ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "contrastive_accuracy_score": lambda b: F.contrastive_accuracy_score(Z1, Z2, block_bytes=b),
    "uniformity_score": lambda b: F.uniformity_score(Z1, block_bytes=b),
    "ContrastiveAccuracy": lambda b: em.ContrastiveAccuracy(block_bytes=b),
    "Uniformity": lambda b: em.Uniformity(block_bytes=b),
    "AccuracyCalculator": lambda b: em.AccuracyCalculator(block_bytes=b),
}


@pytest.mark.parametrize("name", sorted(BLOCK_BYTES_ENTRY_POINTS))
def test_block_bytes_errors_are_the_same_everywhere(name: str) -> None:
    call = BLOCK_BYTES_ENTRY_POINTS[name]
    for wrong_kind in (2.5, "1024", True):
        with pytest.raises(TypeError, match=r"Argument `block_bytes` must be a positive integer"):
            call(wrong_kind)
    for wrong_value in (0, -8):
        with pytest.raises(ValueError, match=r"Argument `block_bytes` must be a positive integer \(>= 1\)"):
            call(wrong_value)
    call(np.int64(4096))
    call(None)  # chosen for the device


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (
            lambda: em.AccuracyCalculator().get_accuracy(Z1, Z1, np.array(["a", "b", "c"] * 4), LABELS, True),
            "query_labels",
        ),
        (
            lambda: em.AccuracyCalculator().get_accuracy(Z1, Z1, LABELS, np.array(["a"] * 12), True),
            "reference_labels",
        ),
        (lambda: F.contrastive_accuracy_score(Z1.numpy().astype(str), Z2.numpy().astype(str)), "z1"),
        (lambda: F.uniformity_score(np.array([["a", "b"], ["c", "d"]])), "z"),
        (lambda: em.Uniformity().update(np.array([["a", "b"], ["c", "d"]])), "z"),
    ],
)
def test_string_arrays_get_our_type_error_naming_the_argument(call: Any, argument: str) -> None:
    with pytest.raises(
        TypeError, match=rf"Argument `{argument}` must hold numbers .* got a NumPy array of dtype <U"
    ):
        call()


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda: F.uniformity_score(Z1, t=-1.0), ValueError, "Argument `t` must be a non-negative number"),
        (lambda: F.uniformity_score(Z1, t="2"), TypeError, "Argument `t` must be a non-negative number"),
        (lambda: em.Uniformity(t=math.inf), ValueError, "Argument `t` must be a finite non-negative number"),
        (
            lambda: F.alignment_score(Z1, Z2, alpha=0),
            ValueError,
            "Argument `alpha` must be a positive number",
        ),
        (lambda: em.Alignment(alpha=[2]), TypeError, "Argument `alpha` must be a positive number"),
        (lambda: F.contrastive_accuracy_score(Z1, Z2, eps=-1e-3), ValueError, "Argument `eps` must be"),
        (lambda: em.ContrastiveAccuracy(normalize=1), TypeError, "Argument `normalize` must be a bool"),
        (lambda: F.uniformity_score(Z1, normalize="no"), TypeError, "Argument `normalize` must be a bool"),
        (lambda: em.AccuracyCalculator(avg_of_avgs=1), TypeError, "Argument `avg_of_avgs` must be a bool"),
        (lambda: em.RetrievalPrecision(adaptive_k=1), TypeError, "Argument `adaptive_k` must be a bool"),
        (
            lambda: F.retrieval_precision(PREDS, TARGET, adaptive_k=1),
            TypeError,
            "Argument `adaptive_k` must be",
        ),
        (
            lambda: em.ContrastiveLoss(margin=-1),
            ValueError,
            "Argument `margin` must be a non-negative number",
        ),
    ],
)
def test_option_errors_name_the_argument_and_the_kind(call: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: em.RetrievalHitRate(top_k=4.0),
        lambda: em.RetrievalRecall(ignore_index=-100.0),
        lambda: em.RetrievalPrecision(adaptive_k=10),
        lambda: F.retrieval_hit_rate(torch.tensor([True, False]), torch.tensor([1, 0])),
        lambda: F.retrieval_hit_rate(PREDS, TARGET, indexes=INDEXES.bool()),
        lambda: em.RetrievalMRR()(PREDS, TARGET, INDEXES.float()),
        lambda: F.contrastive_accuracy_score(Z1.long(), Z2.long()),
        lambda: em.AccuracyCalculator(k=2.5),
    ],
)
def test_wrong_kinds_are_catchable_as_value_error_too(call: Any) -> None:
    # torchmetrics raises ValueError for several of these: code that catches ValueError keeps working
    with pytest.raises(ValueError, match=r"Argument `\w+` must") as info:
        call()
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, em.ArgumentKindError)
