"""ContrastiveLoss / contrastive_loss against a NumPy oracle and the seed's closed-form gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import embedmetrics
import embedmetrics.functional
from _seeding import seeded
from embedmetrics import ContrastiveLoss
from embedmetrics.functional import contrastive_loss

# ----------------------------------------------------------------------------------------------------
# Independent NumPy oracle (float64): the seed's formula and its closed-form gradients.
# ----------------------------------------------------------------------------------------------------


def np_loss(o1: np.ndarray, o2: np.ndarray, y: np.ndarray, margin: float) -> np.ndarray:
    d = np.sqrt(np.sum((o1 - o2) ** 2, axis=-1))
    return y * d**2 + (1 - y) * np.maximum(0.0, margin - d) ** 2


def np_grads(o1: np.ndarray, o2: np.ndarray, y: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """d loss_i / d o1_i and d loss_i / d o2_i of each pair (rows), d > 0 assumed."""
    diff = o1 - o2
    d = np.sqrt(np.sum(diff**2, axis=-1, keepdims=True))
    y = y[..., None]
    g1 = 2 * y * diff - 2 * (1 - y) * np.maximum(0.0, margin - d) * diff / d
    return g1, -g1


def _pairs(
    b: int, dim: int, seed: int, margin: float = 1.0, soft: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 pairs whose distances straddle the margin, kept away from d = 0 and d = margin."""
    gen = torch.Generator().manual_seed(seed)
    o1 = torch.randn(b, dim, generator=gen, dtype=torch.float64)
    direction = torch.nn.functional.normalize(torch.randn(b, dim, generator=gen, dtype=torch.float64), dim=1)
    # distances in [0.1, 0.8]·margin or [1.2, 2]·margin
    frac = torch.rand(b, generator=gen, dtype=torch.float64)
    dist = torch.where(frac < 0.5, 0.1 + 1.4 * frac, 1.2 + 1.6 * (frac - 0.5)) * margin
    o2 = o1 + direction * dist[:, None]
    if soft:
        y = torch.rand(b, generator=gen, dtype=torch.float64)
    else:
        y = (torch.rand(b, generator=gen) < 0.5).to(torch.float64)
    return o1, o2, y


# ----------------------------------------------------------------------------------------------------
# Values and gradients
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("margin", [0.0, 0.5, 1.0, 2.5])
@pytest.mark.parametrize("soft", [False, True])
def test_values_match_numpy_reference(margin: float, soft: bool) -> None:
    o1, o2, y = _pairs(40, 7, seed=1, margin=max(margin, 0.3), soft=soft)
    expected = np_loss(o1.numpy(), o2.numpy(), y.numpy(), margin)
    got = contrastive_loss(o1, o2, y, margin=margin, reduction="none")
    assert got.dtype == torch.float64
    assert got.shape == (40,)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(contrastive_loss(o1, o2, y, margin=margin).item(), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(
        contrastive_loss(o1, o2, y, margin=margin, reduction="sum").item(), expected.sum(), rtol=1e-12
    )


def test_hand_computed_values() -> None:
    o1 = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 2.0]])
    o2 = torch.tensor([[3.0, 4.0], [3.0, 4.0], [0.0, 1.5], [1.0, 2.0]])
    y = torch.tensor([1.0, 0.0, 0.25, 0.0])
    # d = 5, 5, 1.5, 0 with margin 2: 25, 0, 0.25·2.25 + 0.75·0.25, 4
    expected = torch.tensor([25.0, 0.0, 0.5625 + 0.1875, 4.0])
    torch.testing.assert_close(contrastive_loss(o1, o2, y, margin=2.0, reduction="none"), expected)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("soft", [False, True])
def test_gradients_match_closed_form(reduction: str, soft: bool) -> None:
    margin = 1.3
    o1, o2, y = _pairs(32, 5, seed=2, margin=margin, soft=soft)
    o1.requires_grad_(True)
    o2.requires_grad_(True)
    loss = contrastive_loss(o1, o2, y, margin=margin, reduction=reduction)
    (loss.sum() if reduction == "none" else loss).backward()
    g1, g2 = np_grads(o1.detach().numpy(), o2.detach().numpy(), y.numpy(), margin)
    scale = 1.0 / 32 if reduction == "mean" else 1.0
    assert o1.grad is not None
    assert o2.grad is not None
    np.testing.assert_allclose(o1.grad.numpy(), scale * g1, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(o2.grad.numpy(), scale * g2, rtol=1e-10, atol=1e-13)
    # the seed's pair structure: the two gradients are exact negatives of each other
    torch.testing.assert_close(o2.grad, -o1.grad, rtol=0, atol=0)


def test_gradient_for_single_pair_matches_closed_form() -> None:
    o1 = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    o2 = torch.tensor([0.1, -0.7, 2.2], dtype=torch.float64, requires_grad=True)
    for y in (0.0, 0.4, 1.0):
        o1.grad = o2.grad = None
        contrastive_loss(o1, o2, y, margin=1.0).backward()
        g1, g2 = np_grads(o1.detach().numpy()[None], o2.detach().numpy()[None], np.array([y]), 1.0)
        assert o1.grad is not None
        assert o2.grad is not None
        np.testing.assert_allclose(o1.grad.numpy(), g1[0], rtol=1e-12)
        np.testing.assert_allclose(o2.grad.numpy(), g2[0], rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_away_from_kinks(reduction: str) -> None:
    margin = 1.0
    o1, o2, y = _pairs(6, 4, seed=3, margin=margin, soft=True)
    o1.requires_grad_(True)
    o2.requires_grad_(True)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(a, b, y, margin=margin, reduction=reduction)

    with seeded(0):  # gradgradcheck draws its random output gradients from the global generator
        assert torch.autograd.gradcheck(fn, (o1, o2))
        assert torch.autograd.gradgradcheck(fn, (o1, o2))


# ----------------------------------------------------------------------------------------------------
# d = 0: loss (1 - y)·margin², gradient exactly 0 (documented subgradient), never NaN
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("y", [0.0, 0.3, 1.0])
def test_zero_distance_value_and_zero_subgradient(dtype: torch.dtype, y: float) -> None:
    o1 = torch.tensor([[0.5, -1.0, 2.0]], dtype=dtype, requires_grad=True)
    o2 = torch.tensor([[0.5, -1.0, 2.0]], dtype=dtype, requires_grad=True)
    loss = contrastive_loss(o1, o2, torch.tensor([y], dtype=torch.float64), margin=1.5)
    assert loss.item() == pytest.approx((1 - y) * 1.5**2, rel={2: 1e-2, 4: 1e-6, 8: 1e-15}[dtype.itemsize])
    loss.backward()
    assert o1.grad is not None
    assert o2.grad is not None
    # the documented choice: exactly 0 (not NaN, not a random direction)
    assert torch.equal(o1.grad, torch.zeros_like(o1))
    assert torch.equal(o2.grad, torch.zeros_like(o2))


def test_zero_distance_pair_does_not_disturb_the_rest_of_the_batch() -> None:
    margin = 1.0
    o1, o2, y = _pairs(8, 3, seed=4, margin=margin)
    o2[3] = o1[3]  # one collapsed pair
    y[3] = 0.0
    o1.requires_grad_(True)
    o2.requires_grad_(True)
    loss = contrastive_loss(o1, o2, y, margin=margin, reduction="sum")
    loss.backward()
    assert o1.grad is not None
    assert o2.grad is not None
    assert torch.isfinite(o1.grad).all()
    assert torch.isfinite(o2.grad).all()
    keep = [i for i in range(8) if i != 3]
    a, b = o1.detach().numpy(), o2.detach().numpy()
    g1, _ = np_grads(a[keep], b[keep], y.numpy()[keep], margin)
    np.testing.assert_allclose(o1.grad.numpy()[keep], g1, rtol=1e-12, atol=1e-14)
    assert torch.equal(o1.grad[3], torch.zeros(3, dtype=torch.float64))
    expected = np_loss(a[keep], b[keep], y.numpy()[keep], margin).sum() + margin**2
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_tiny_positive_distance_keeps_the_true_gradient() -> None:
    # the safe norm only replaces exactly d = 0: just above it the closed form (norm 2·margin) holds
    o1 = torch.tensor([[1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    o2 = torch.tensor([[1.0, 2.0 + 1e-9]], dtype=torch.float64)
    contrastive_loss(o1, o2, torch.tensor([0.0]), margin=1.0, reduction="sum").backward()
    assert o1.grad is not None
    g1, _ = np_grads(o1.detach().numpy(), o2.numpy(), np.array([0.0]), 1.0)
    np.testing.assert_allclose(o1.grad.numpy(), g1, rtol=1e-9)
    assert o1.grad.norm().item() == pytest.approx(2.0, rel=1e-8)


def test_zero_margin_dissimilar_pairs_cost_nothing() -> None:
    o1, o2, _ = _pairs(10, 3, seed=5)
    o2[0] = o1[0]
    y = torch.zeros(10, dtype=torch.float64)
    o1.requires_grad_(True)
    loss = contrastive_loss(o1, o2, y, margin=0.0, reduction="sum")
    loss.backward()
    assert loss.item() == 0.0
    assert o1.grad is not None
    assert torch.equal(o1.grad, torch.zeros_like(o1))


# ----------------------------------------------------------------------------------------------------
# Shapes, reductions, labels, dtypes, devices
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_single_pair_equals_batch_of_one(reduction: str) -> None:
    o1, o2, y = _pairs(1, 6, seed=6, soft=True)
    batch = contrastive_loss(o1, o2, y, reduction=reduction)
    for label in (y[0], y[0].item()):
        single = contrastive_loss(o1[0], o2[0], label, reduction=reduction)
        assert single.shape == ()
        torch.testing.assert_close(single, batch.reshape(()), rtol=0, atol=0)


def test_reductions_are_consistent_and_shaped() -> None:
    o1, o2, y = _pairs(13, 4, seed=7, soft=True)
    none = contrastive_loss(o1, o2, y, reduction="none")
    assert none.shape == (13,)
    torch.testing.assert_close(contrastive_loss(o1, o2, y, reduction="mean"), none.mean())
    torch.testing.assert_close(contrastive_loss(o1, o2, y, reduction="sum"), none.sum())
    assert contrastive_loss(o1, o2, y).shape == ()


def test_empty_batch_follows_pytorch_losses() -> None:
    e = torch.empty(0, 3)
    y = torch.empty(0)
    assert contrastive_loss(e, e, y, reduction="none").shape == (0,)
    assert contrastive_loss(e, e, y, reduction="sum").item() == 0.0
    assert math.isnan(contrastive_loss(e, e, y, reduction="mean").item())


@pytest.mark.parametrize(
    "label_dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16]
)
def test_bool_and_integer_labels_equal_float_labels(label_dtype: torch.dtype) -> None:
    o1, o2, y = _pairs(20, 4, seed=8)
    expected = contrastive_loss(o1, o2, y, reduction="none")
    got = contrastive_loss(o1, o2, y.to(label_dtype), reduction="none")
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # Python bool / int labels for a single pair
    for py_label in (True, 1, False, 0, np.int64(1), np.float32(0.0), np.bool_(True)):
        single = contrastive_loss(o1[0], o2[0], py_label, reduction="none")
        ref = np_loss(o1[0].numpy(), o2[0].numpy(), np.float64(py_label), 1.0)
        assert single.item() == pytest.approx(float(ref), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_low_precision_close_to_float64(dtype: torch.dtype, reduction: str) -> None:
    o1, o2, y = _pairs(64, 16, seed=9, soft=True)
    a, b = o1.to(dtype), o2.to(dtype)
    # the reference sees the same (rounded) inputs, so only the arithmetic is compared
    expected = contrastive_loss(a.double(), b.double(), y, reduction=reduction)
    a.requires_grad_(True)
    got = contrastive_loss(a, b, y.to(dtype), reduction=reduction)
    assert got.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6}[dtype]
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)
    got.sum().backward()
    assert a.grad is not None
    assert a.grad.dtype == dtype
    ad = a.detach().double().requires_grad_(True)
    contrastive_loss(ad, b.double(), y.to(dtype).double(), reduction=reduction).sum().backward()
    assert ad.grad is not None
    torch.testing.assert_close(a.grad.double(), ad.grad, rtol=4 * tol, atol=4 * tol)


def test_half_precision_accumulates_in_float32() -> None:
    # per-coordinate squares fit in float16 but their sum (80000) does not (max 65504); the mean does
    o1 = torch.tensor([[200.0, 200.0], [0.0, 0.0]], dtype=torch.float16)
    o2 = torch.zeros(2, 2, dtype=torch.float16)
    y = torch.tensor([1.0, 1.0])
    naive = ((o1 - o2) ** 2).sum(-1)
    assert torch.isinf(naive[0])  # what computing in float16 would give
    loss = contrastive_loss(o1, o2, y)
    assert loss.dtype == torch.float16
    assert loss.item() == 40000.0


def test_mixed_float_dtypes_promote() -> None:
    o1, o2, y = _pairs(5, 3, seed=10)
    got = contrastive_loss(o1.float(), o2, y)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, contrastive_loss(o1.float().double(), o2, y))


def test_stays_on_the_input_device_without_host_sync() -> None:
    # the meta device has no data: any hidden host sync or CPU-only tensor would raise here
    o1 = torch.empty(4, 3, device="meta")
    o2 = torch.empty(4, 3, device="meta")
    y = torch.empty(4, device="meta")
    for reduction, shape in (("mean", ()), ("sum", ()), ("none", (4,))):
        out = contrastive_loss(o1, o2, y, reduction=reduction, validate_args=False)
        assert out.device.type == "meta"
        assert out.shape == shape
    single = contrastive_loss(o1[0], o2[0], 1.0, validate_args=False)
    assert single.device.type == "meta"


def test_label_on_another_device_is_moved() -> None:
    o1, o2, y = _pairs(3, 2, seed=11)
    out = contrastive_loss(o1.to("meta"), o2.to("meta"), y, validate_args=False)
    assert out.device.type == "meta"


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("o1_shape", "o2_shape", "label", "match"),
    [
        (
            (4, 3),
            (4, 2),
            torch.zeros(4),
            r"`output1` and `output2` must have the same shape.*\(4, 3\).*\(4, 2\)",
        ),
        ((4, 3), (5, 3), torch.zeros(4), r"same shape"),
        ((3,), (1, 3), 0.0, r"same shape"),
        ((2, 2, 3), (2, 2, 3), torch.zeros(2), r"`output1` must be 1-D .* or 2-D .*got shape \(2, 2, 3\)"),
        ((), (), 0.0, r"`output1` must be 1-D"),
        ((4, 3), (4, 3), torch.zeros(5), r"`similarity_label` must be shape \(4,\).*got shape \(5,\)"),
        ((4, 3), (4, 3), torch.zeros(4, 1), r"`similarity_label` must be shape \(4,\).*got shape \(4, 1\)"),
        ((4, 3), (4, 3), torch.tensor(0.0), r"`similarity_label`.*got shape \(\)"),
        ((4, 3), (4, 3), 1.0, r"`similarity_label` must be a tensor of shape \(4,\).*got the number 1.0"),
        ((3,), (3,), torch.zeros(1), r"`similarity_label` must be a 0-dim tensor.*got shape \(1,\)"),
        ((2, 3), (2, 3), torch.tensor([0.0, 1.5]), r"`similarity_label` must lie in \[0, 1\].*1.5"),
        ((2, 3), (2, 3), torch.tensor([-0.1, 1.0]), r"`similarity_label` must lie in \[0, 1\].*-0.1"),
        ((2, 3), (2, 3), torch.tensor([2, 0]), r"`similarity_label` must lie in \[0, 1\].*2"),
        ((2, 3), (2, 3), torch.tensor([0.0, float("nan")]), r"`similarity_label` must lie in.*nan"),
        ((3,), (3,), 2, r"`similarity_label` must lie in \[0, 1\].*got 2"),
        ((3,), (3,), -1.0, r"`similarity_label` must lie in \[0, 1\].*got -1.0"),
        ((3,), (3,), float("nan"), r"`similarity_label` must lie in \[0, 1\].*got nan"),
    ],
)
def test_bad_inputs_raise_value_error(
    o1_shape: tuple[int, ...], o2_shape: tuple[int, ...], label: object, match: str
) -> None:
    o1, o2 = torch.zeros(o1_shape), torch.ones(o2_shape)
    with pytest.raises(ValueError, match=match):
        contrastive_loss(o1, o2, label)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        ContrastiveLoss()(o1, o2, label)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"margin": -0.5}, r"`margin` must be a non-negative number, got -0.5"),
        ({"margin": float("nan")}, r"`margin` must be a non-negative number, got nan"),
        ({"margin": float("inf")}, r"`margin` must be a finite non-negative number, got inf"),
        ({"reduction": "avg"}, r"`reduction` must be one of \('mean', 'sum', 'none'\), got 'avg'"),
        ({"reduction": None}, r"`reduction` must be one of .*got None"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict[str, object], match: str) -> None:
    o1, o2, y = _pairs(3, 2, seed=12)
    with pytest.raises(ValueError, match=match):
        contrastive_loss(o1, o2, y, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        ContrastiveLoss(**kwargs)  # type: ignore[arg-type]


def test_bad_types_raise_type_error() -> None:
    f = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"`output1` must be a floating-point tensor, got dtype torch.int64"):
        contrastive_loss(torch.zeros(2, 3, dtype=torch.long), f, torch.zeros(2))
    with pytest.raises(TypeError, match=r"`output2` must be a torch.Tensor, got ndarray"):
        contrastive_loss(f, np.zeros((2, 3)), torch.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`similarity_label` must be a bool, integer or floating-point"):
        contrastive_loss(f, f, torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"`similarity_label` must be a tensor or a number, got str"):
        contrastive_loss(f[0], f[0], "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`margin` must be a non-negative number, got '1'"):
        contrastive_loss(f, f, torch.zeros(2), margin="1")  # type: ignore[arg-type]


def test_validate_args_false_skips_only_the_label_range_check() -> None:
    o1, o2, _ = _pairs(2, 3, seed=13)
    y = torch.tensor([2.0, -1.0])  # out of range: computed by the formula without the check
    got = contrastive_loss(o1, o2, y, reduction="none", validate_args=False)
    np.testing.assert_allclose(got.numpy(), np_loss(o1.numpy(), o2.numpy(), y.numpy(), 1.0), rtol=1e-12)
    module = ContrastiveLoss(reduction="none", validate_args=False)
    torch.testing.assert_close(module(o1, o2, y), got)
    with pytest.raises(ValueError, match="same shape"):  # free checks still run
        contrastive_loss(o1, o2[:, :2], y, validate_args=False)


# ----------------------------------------------------------------------------------------------------
# Module
# ----------------------------------------------------------------------------------------------------


def test_module_equals_functional_and_is_a_plain_module() -> None:
    o1, o2, y = _pairs(9, 4, seed=14, soft=True)
    for reduction in ("mean", "sum", "none"):
        module = ContrastiveLoss(margin=0.7, reduction=reduction)
        torch.testing.assert_close(
            module(o1, o2, y), contrastive_loss(o1, o2, y, margin=0.7, reduction=reduction), rtol=0, atol=0
        )
    module = ContrastiveLoss(margin=2, reduction="sum")
    assert isinstance(module, nn.Module)
    assert module.margin == 2.0
    assert isinstance(module.margin, float)
    assert list(module.parameters()) == []
    assert module.state_dict() == {}
    assert repr(module) == "ContrastiveLoss(margin=2.0, reduction='sum')"
    assert "ContrastiveLoss" in embedmetrics.__all__
    assert "contrastive_loss" in embedmetrics.functional.__all__


@settings(max_examples=30, deadline=None)
@given(
    b=st.integers(1, 6),
    dim=st.integers(1, 5),
    margin=st.floats(0.0, 3.0),
    seed=st.integers(0, 2**16),
)
def test_property_matches_oracle_symmetric_and_non_negative(
    b: int, dim: int, margin: float, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    o1 = torch.randn(b, dim, generator=gen, dtype=torch.float64)
    o2 = torch.randn(b, dim, generator=gen, dtype=torch.float64)
    y = torch.rand(b, generator=gen, dtype=torch.float64)
    got = contrastive_loss(o1, o2, y, margin=margin, reduction="none")
    np.testing.assert_allclose(got.numpy(), np_loss(o1.numpy(), o2.numpy(), y.numpy(), margin), rtol=1e-12)
    assert (got >= 0).all()
    torch.testing.assert_close(contrastive_loss(o2, o1, y, margin=margin, reduction="none"), got)
    perm = torch.randperm(b, generator=gen)
    torch.testing.assert_close(
        contrastive_loss(o1[perm], o2[perm], y[perm], margin=margin, reduction="none"), got[perm]
    )


# ----------------------------------------------------------------------------------------------------
# Training: a toy two-class Siamese problem
# ----------------------------------------------------------------------------------------------------


def _toy_data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two separable Gaussian classes in 8-D: means ±2 apart on one axis, nuisance noise on all eight."""
    labels = torch.randint(0, 2, (n,), generator=gen)
    x = 0.5 * torch.randn(n, 8, generator=gen)
    x[:, 0] = 0.3 * x[:, 0] + 4.0 * labels.float() - 2.0
    return x, labels


def _pair_distances(
    net: nn.Module, x: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        z = net(x)
    d = torch.cdist(z, z)
    same = labels[:, None] == labels[None, :]
    off_diag = ~torch.eye(len(x), dtype=torch.bool)
    return d[same & off_diag], d[~same]


def test_training_pulls_similar_together_and_pushes_dissimilar_beyond_margin() -> None:
    gen = torch.Generator().manual_seed(0)
    margin = 1.0
    with seeded(0):  # nn.Linear initialises from the global generator
        net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    x_test, l_test = _toy_data(200, gen)
    sim0, dis0 = _pair_distances(net, x_test, l_test)
    assert (dis0 < margin).float().mean() > 0.5  # before training most dissimilar pairs are too close

    loss_fn = ContrastiveLoss(margin=margin)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(500):
        x, labels = _toy_data(128, gen)
        perm = torch.randperm(128, generator=gen)
        y = (labels == labels[perm]).float()
        z = net(x)
        loss = loss_fn(z, z[perm], y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    # held-out pairs: similar ones collapse, dissimilar ones sit at or beyond the margin (the loss stops
    # pushing there, so the equilibrium is just past it, not far beyond)
    sim, dis = _pair_distances(net, x_test, l_test)
    assert sim.mean() < 0.1 * margin
    assert sim.mean() < 0.2 * sim0.mean()
    assert dis.median() > margin
    assert (dis > margin).float().mean() > 0.9
    assert dis.quantile(0.01) > 0.95 * margin
    assert dis.min() > 0.8 * margin
