"""Functional embedding metrics against brute-force NumPy references, seeds, ties and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from embedmetrics.functional import alignment_score, contrastive_accuracy_score, uniformity_score
from oracles import embedding as ref

TIES = ("average", "pessimistic", "optimistic")


def _data(n: int, d: int, seed: int, noise: float = 0.7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z1 = rng.standard_normal((n, d))
    return z1, z1 + noise * rng.standard_normal((n, d))


def _as(kind: str, *arrays: np.ndarray, dtype: torch.dtype = torch.float64) -> list:
    if kind == "numpy":
        return list(arrays)
    return [torch.as_tensor(a).to(dtype) for a in arrays]


def _value(x) -> np.ndarray:
    return np.asarray(x.cpu().double().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)


# --------------------------------------------------------------------------- contrastive accuracy


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("ties", TIES)
@pytest.mark.parametrize("topk", [1, 3, 40, (1, 2, 5, 31)])
def test_contrastive_matches_bruteforce(kind, normalize, ties, topk):
    z1, z2 = _data(31, 6, seed=1)
    out = contrastive_accuracy_score(*_as(kind, z1, z2), normalize=normalize, topk=topk, ties=ties)
    expected = [ref.contrastive_accuracy(z1, z2, normalize, k, ties) for k in ref.ks_list(topk)]
    np.testing.assert_allclose(_value(out).reshape(-1), expected, rtol=0, atol=1e-12)
    if isinstance(topk, int):
        assert np.ndim(_value(out)) == 0


@pytest.mark.parametrize("topk", [1, 2, 5])
def test_contrastive_matches_topk_definition_without_ties(topk):
    z1, z2 = _data(40, 8, seed=2, noise=1.5)
    out = contrastive_accuracy_score(torch.tensor(z1), torch.tensor(z2), topk=topk)
    assert float(out) == pytest.approx(ref.contrastive_accuracy_topk(z1, z2, topk), abs=1e-12)


def test_contrastive_output_types_and_devices():
    z1, z2 = _data(10, 4, seed=3)
    np_out = contrastive_accuracy_score(z1, z2)
    assert isinstance(np_out, np.float64)
    np_many = contrastive_accuracy_score(z1, z2, topk=[1, 5])
    assert isinstance(np_many, np.ndarray)
    assert np_many.dtype == np.float64
    assert np_many.shape == (2,)
    t32 = contrastive_accuracy_score(
        torch.tensor(z1, dtype=torch.float32), torch.tensor(z2, dtype=torch.float32)
    )
    assert isinstance(t32, torch.Tensor)
    assert t32.ndim == 0
    assert t32.dtype == torch.float32
    assert t32.device == torch.device("cpu")
    t64 = contrastive_accuracy_score(torch.tensor(z1), torch.tensor(z2), topk=(1, 2, 3))
    assert t64.shape == (3,)
    assert t64.dtype == torch.float64


def test_contrastive_seed_example():
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(8, 128, generator=g)
    z2 = z1 + 0.1 * torch.randn(8, 128, generator=g)
    assert torch.equal(contrastive_accuracy_score(z1, z2, topk=1), torch.tensor(1.0))


def test_contrastive_hand_worked_ties():
    # S = z1 @ z2.T = [[1, 1, 0], [0, 0, 1], [1, 1, 0]] (worked out in the test's comments below)
    z1 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    z2 = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # rows (g, t): (0, 2), (1, 2), (2, 1); columns: (0, 2), (2, 1), (1, 2)
    expected = {
        "average": [1 / 6, 1 / 2, 1.0],
        "pessimistic": [0.0, 1 / 3, 1.0],
        "optimistic": [1 / 3, 2 / 3, 1.0],
    }
    for ties, values in expected.items():
        out = contrastive_accuracy_score(z1, z2, normalize=False, topk=(1, 2, 3), ties=ties)
        np.testing.assert_allclose(out, values, atol=1e-15)
        # torch, float32: the same integers are exact
        out32 = contrastive_accuracy_score(
            torch.tensor(z1, dtype=torch.float32),
            torch.tensor(z2, dtype=torch.float32),
            normalize=False,
            topk=(1, 2, 3),
            ties=ties,
        )
        np.testing.assert_allclose(out32.numpy(), values, atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 5),
    d=st.integers(1, 3),
    k=st.integers(1, 6),
    data=st.data(),
)
def test_contrastive_average_is_expected_hit_over_tie_orders(n, d, k, data):
    values = st.integers(-2, 2).map(float)
    z1 = np.array(data.draw(st.lists(st.lists(values, min_size=d, max_size=d), min_size=n, max_size=n)))
    z2 = np.array(data.draw(st.lists(st.lists(values, min_size=d, max_size=d), min_size=n, max_size=n)))
    avg = contrastive_accuracy_score(z1, z2, normalize=False, topk=k)
    assert avg == pytest.approx(ref.contrastive_accuracy_by_orders(z1, z2, k), abs=1e-12)
    pes = contrastive_accuracy_score(z1, z2, normalize=False, topk=k, ties="pessimistic")
    opt = contrastive_accuracy_score(z1, z2, normalize=False, topk=k, ties="optimistic")
    assert pes <= avg + 1e-12 <= opt + 2e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_contrastive_collapsed_embeddings_score_k_over_n(dtype, n):
    z = torch.randn(1, 16, generator=torch.Generator().manual_seed(n)).repeat(n, 1).to(dtype)
    ks = (1, 2, 5, 60)
    out = contrastive_accuracy_score(z, z.clone(), topk=ks)
    expected = torch.tensor([min(k, n) / n for k in ks], dtype=out.dtype)
    assert torch.equal(out, expected)
    pes = contrastive_accuracy_score(z, z.clone(), topk=ks, ties="pessimistic")
    assert torch.equal(pes, (torch.tensor(ks) >= n).to(pes.dtype))
    assert torch.equal(
        contrastive_accuracy_score(z, z, topk=ks, ties="optimistic"), torch.ones(4, dtype=out.dtype)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_contrastive_low_precision_accumulates_in_float32(dtype):
    z1, z2 = _data(30, 8, seed=4, noise=1.0)
    t1, t2 = torch.tensor(z1).to(dtype), torch.tensor(z2).to(dtype)
    out = contrastive_accuracy_score(t1, t2, topk=(1, 3))
    assert out.dtype == torch.float32
    # reference on exactly the rounded inputs (upcast), so only the accumulation differs
    expected = [ref.contrastive_accuracy(t1.double().numpy(), t2.double().numpy(), True, k) for k in (1, 3)]
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-6)


def test_contrastive_small_blocks_give_identical_results():
    z1, z2 = _data(37, 5, seed=5)
    t1, t2 = torch.tensor(z1, dtype=torch.float32), torch.tensor(z2, dtype=torch.float32)
    ks = (1, 2, 10)
    base = contrastive_accuracy_score(t1, t2, topk=ks)
    for block_bytes in (1, 4 * 37 * 3, 4 * 37 * 8 + 5):
        assert torch.equal(contrastive_accuracy_score(t1, t2, topk=ks, block_bytes=block_bytes), base)
    # tied integer data: every block size gives the exact tie counts
    ints = np.random.default_rng(0).integers(-2, 3, size=(37, 3)).astype(np.float64)
    ints2 = np.random.default_rng(1).integers(-2, 3, size=(37, 3)).astype(np.float64)
    expected = [ref.contrastive_accuracy(ints, ints2, False, k) for k in ks]
    for block_bytes in (1, 8 * 37 * 4, 10**9):
        out = contrastive_accuracy_score(ints, ints2, normalize=False, topk=ks, block_bytes=block_bytes)
        np.testing.assert_allclose(out, expected, atol=1e-15)


# --------------------------------------------------------------------------- uniformity


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("t", [0.0, 0.5, 2.0, 10.0])
def test_uniformity_matches_bruteforce(kind, normalize, t):
    z, _ = _data(29, 5, seed=6)
    out = uniformity_score(*_as(kind, z), normalize=normalize, t=t)
    assert float(out) == pytest.approx(ref.uniformity(z, normalize, t), rel=1e-10, abs=1e-10)


def test_inputs_requiring_grad_are_accepted():
    z1, z2 = (torch.tensor(a, requires_grad=True) for a in _data(8, 3, seed=16))
    assert not uniformity_score(z1).requires_grad
    assert not contrastive_accuracy_score(z1, z2).requires_grad
    assert alignment_score(z1, z2).requires_grad


def test_uniformity_output_types():
    z, _ = _data(6, 3, seed=7)
    assert isinstance(uniformity_score(z), np.float64)
    out = uniformity_score(torch.tensor(z, dtype=torch.float32))
    assert out.ndim == 0
    assert out.dtype == torch.float32
    assert uniformity_score(torch.tensor(z)).dtype == torch.float64


def test_uniformity_seed_definition_float32():
    """The paper's code: pdist(z).pow(2).mul(-t).exp().mean().log() on normalised rows."""
    z = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    naive = torch.pdist(torch.nn.functional.normalize(z), p=2).pow(2).mul(-2.0).exp().mean().log()
    torch.testing.assert_close(uniformity_score(z), naive, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [500.0, 5000.0])
def test_uniformity_stays_finite_where_naive_underflows(t):
    rng = np.random.default_rng(8)  # 16 well-separated points: every d^2 >= ~2, so t * d^2 > 745
    z = np.concatenate([np.eye(8), -np.eye(8)]) + 0.01 * rng.standard_normal((16, 8))
    assert ref.uniformity_naive(z, True, t) == -np.inf
    expected = ref.uniformity(z, True, t)
    assert np.isfinite(expected)
    assert uniformity_score(z, t=t) == pytest.approx(expected, rel=1e-12)
    out32 = uniformity_score(torch.tensor(z, dtype=torch.float32), t=t)
    assert torch.isfinite(out32)
    assert float(out32) == pytest.approx(expected, rel=1e-4)


def test_uniformity_tight_clusters_far_from_origin_float32():
    """Clusters of spread 1e-2 around a point of norm ~1e3: the expansion ||a||^2 + ||b||^2 - 2ab
    would lose everything in float32 without centring; large t makes the naive mean underflow."""
    rng = np.random.default_rng(9)
    centers = 1000.0 + rng.standard_normal((2, 6))
    z = np.concatenate([c + 1e-2 * rng.standard_normal((15, 6)) for c in centers]).astype(np.float32)
    for t in (1.0, 1e4):
        expected = ref.uniformity(z.astype(np.float64), normalize=False, t=t)
        out = uniformity_score(torch.from_numpy(z), normalize=False, t=t)
        assert torch.isfinite(out)
        assert float(out) == pytest.approx(expected, rel=1e-3, abs=1e-3)
    assert ref.uniformity_naive(z, False, 1e8) == -np.inf
    assert torch.isfinite(uniformity_score(torch.from_numpy(z), normalize=False, t=1e8))


def test_uniformity_duplicates_and_zero_rows():
    z = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    for normalize in (True, False):
        assert uniformity_score(z, normalize=normalize) == pytest.approx(
            ref.uniformity(z, normalize), abs=1e-12
        )
    assert uniformity_score(np.ones((5, 3))) == pytest.approx(0.0, abs=1e-12)  # all pairs coincide


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_uniformity_dtypes(dtype):
    z, _ = _data(25, 6, seed=10)
    tz = torch.tensor(z).to(dtype)
    out = uniformity_score(tz)
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert float(out) == pytest.approx(ref.uniformity(tz.double().numpy()), rel=1e-5)


def test_uniformity_small_blocks_agree():
    z, _ = _data(41, 7, seed=11)
    base = uniformity_score(z)
    for block_bytes in (1, 8 * 41 * 3, 8 * 41 * 40):
        assert uniformity_score(z, block_bytes=block_bytes) == pytest.approx(base, rel=1e-12)


# --------------------------------------------------------------------------- alignment


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("alpha", [1, 2, 3.5])
def test_alignment_matches_bruteforce(kind, normalize, alpha):
    z1, z2 = _data(17, 5, seed=12)
    out = alignment_score(*_as(kind, z1, z2), normalize=normalize, alpha=alpha)
    assert float(out) == pytest.approx(ref.alignment(z1, z2, normalize, alpha), rel=1e-12)
    assert isinstance(out, np.float64) if kind == "numpy" else out.ndim == 0


def test_alignment_is_differentiable():
    z1, z2 = (torch.tensor(a, requires_grad=True) for a in _data(6, 3, seed=13))
    assert torch.autograd.gradcheck(lambda a, b: alignment_score(a, b), (z1, z2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_alignment_half_inputs(dtype):
    z1, z2 = _data(12, 4, seed=14)
    t1, t2 = torch.tensor(z1).to(dtype), torch.tensor(z2).to(dtype)
    out = alignment_score(t1, t2)
    assert out.dtype == torch.float32
    assert float(out) == pytest.approx(ref.alignment(t1.double().numpy(), t2.double().numpy()), rel=1e-5)


# --------------------------------------------------------------------------- errors


def test_errors():
    z1, z2 = _data(5, 3, seed=15)
    t1, t2 = torch.tensor(z1), torch.tensor(z2)
    for fn in (contrastive_accuracy_score, alignment_score):
        with pytest.raises(TypeError, match="z1"):
            fn(z1, t2)
        with pytest.raises(TypeError):
            fn(z1.tolist(), z2.tolist())
        with pytest.raises(ValueError, match="same shape"):
            fn(t1, t2[:4])
        with pytest.raises(ValueError, match="2-D"):
            fn(t1[0], t2[0])
        with pytest.raises(ValueError, match="2-D"):
            fn(t1[None], t2[None])
        with pytest.raises(ValueError, match="at least one row"):
            fn(t1[:0], t2[:0])
        with pytest.raises(TypeError, match="floating"):
            fn(t1.long(), t2.long())
    for bad in (0, -1, (1, 0)):
        with pytest.raises(ValueError, match="topk"):
            contrastive_accuracy_score(t1, t2, topk=bad)
    with pytest.raises(ValueError, match="topk"):
        contrastive_accuracy_score(t1, t2, topk=())
    with pytest.raises(TypeError, match="topk"):
        contrastive_accuracy_score(t1, t2, topk=1.5)
    with pytest.raises(ValueError, match="ties"):
        contrastive_accuracy_score(t1, t2, ties="random")
    with pytest.raises(ValueError, match="block_bytes"):
        contrastive_accuracy_score(t1, t2, block_bytes=0)
    with pytest.raises(ValueError, match="eps"):
        contrastive_accuracy_score(t1, t2, eps=-1.0)
    with pytest.raises(ValueError, match="at least 2 rows"):
        uniformity_score(t1[:1])
    with pytest.raises(ValueError, match="2-D"):
        uniformity_score(t1[0])
    with pytest.raises(TypeError):
        uniformity_score([[0.0, 1.0], [1.0, 0.0]])
    for bad_t in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`t`"):
            uniformity_score(t1, t=bad_t)
    for bad_alpha in (0, -2, float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            alignment_score(t1, t2, alpha=bad_alpha)
    with pytest.raises(TypeError, match="normalize"):
        uniformity_score(t1, normalize="yes")
