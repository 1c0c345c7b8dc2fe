"""Canonical keys (``_engine/core/canonical.py``): the sum of a pair's products by one fixed pairwise tree
of elementwise operations, so a pair's key is a function of its two rows alone.

The contract suite also runs under ``ATEN_CPU_CAPABILITY=avx2`` / ``default`` in ``make test``: the keys
equal the same NumPy oracle, bit for bit, on every CPU kernel.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from embedmetrics._engine.core import canonical
from embedmetrics._engine.core.canonical import margins_of, pair_dots, tree_roundings

WIDTHS = (1, 2, 3, 5, 8, 24, 129, 257, 300, 769)


def _rows(seed: int, n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(n, 1, generator=g, dtype=torch.float64) * 3)  # magnitudes of many sizes
    return (torch.randn(n, width, generator=g, dtype=torch.float64) * scale).to(dtype)


def _tree_oracle(products: np.ndarray) -> np.ndarray:
    """Row sums in the products' dtype: the columns past the largest power of two folded onto the first
    ones, then halves added until one column is left (NumPy's elementwise adds: one rounding each)."""
    x = products.copy()
    p = 1 << (x.shape[1].bit_length() - 1)
    if x.shape[1] > p:
        extra = x.shape[1] - p
        x[:, :extra] = x[:, :extra] + x[:, p:]
        x = x[:, :p]
    while x.shape[1] > 1:
        h = x.shape[1] // 2
        x = x[:, :h] + x[:, h:]
    return x[:, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("width", list(WIDTHS))
def test_keys_equal_the_pairwise_tree_bit_for_bit(width: int, dtype: torch.dtype) -> None:
    a, b = _rows(0, 40, width, dtype), _rows(1, 70, width, dtype)
    g = torch.Generator().manual_seed(2)
    ai, bi = torch.randint(0, 40, (300,), generator=g), torch.randint(0, 70, (300,), generator=g)
    products = (a[ai] * b[bi]).numpy()
    want = torch.from_numpy(_tree_oracle(products)).double()
    assert torch.equal(pair_dots(a, b, ai, bi), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_a_key_depends_on_its_pair_alone(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pairs in another order, among other pairs, or in chunks of one row give the same bits."""
    a, b = _rows(3, 30, 129, dtype), _rows(4, 50, 129, dtype)
    g = torch.Generator().manual_seed(5)
    ai, bi = torch.randint(0, 30, (500,), generator=g), torch.randint(0, 50, (500,), generator=g)
    keys = pair_dots(a, b, ai, bi)
    perm = torch.randperm(500, generator=g)
    assert torch.equal(pair_dots(a, b, ai[perm], bi[perm]), keys[perm])
    assert torch.equal(pair_dots(a, b, ai[7:9], bi[7:9]), keys[7:9])
    monkeypatch.setattr(canonical, "PAIR_CHUNK_BYTES", 1)
    assert torch.equal(pair_dots(a, b, ai, bi), keys)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("width", [3, 129, 769])
@pytest.mark.parametrize("scale", [1.0, 1e-21])
def test_a_key_is_within_its_proven_error(width: int, dtype: torch.dtype, scale: float) -> None:
    """``|key − Σ a_k b_k| <= γ_t Σ|a_k b_k| + 2 width tiny``, ``t = tree_roundings(width)``, against the
    exact sum; ``tiny`` the dtype's smallest normal number, for products that underflow (``scale``
    1e-21: float32 products of about 1e-42 are subnormal)."""
    a, b = _rows(6, 8, width, dtype) * scale, _rows(7, 8, width, dtype) * scale
    idx = torch.arange(8)
    keys = pair_dots(a, b, idx, idx)
    info = torch.finfo(dtype)
    u = Fraction(info.eps) / 2
    t = tree_roundings(width)
    gamma = t * u / (1 - t * u)
    for i in range(8):
        terms = [Fraction(x) * Fraction(y) for x, y in zip(a[i].tolist(), b[i].tolist())]
        exact, size = sum(terms), sum(abs(x) for x in terms)
        bound = gamma * size + 2 * width * Fraction(info.tiny)
        assert abs(Fraction(float(keys[i])) - exact) <= bound, (i, width)


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [(torch.float32, s) for s in (1e-30, 1e-23, 1.0, 1e30)]
    + [(torch.float64, s) for s in (1e-170, 1.0, 1e170)],
)
def test_row_norms_neither_underflow_nor_overflow(dtype: torch.dtype, scale: float) -> None:
    """``row_norms`` against the exact norm (``Fraction``), on rows whose squares leave the dtype's range:
    within 1e-4 (the margin's slack is 2%), computed in the dtype where that is safe."""
    from embedmetrics._engine.core.scan import row_norms

    rows = (_rows(8, 5, 40, torch.float64) / 1e3 * scale).to(dtype)
    assert bool(torch.isfinite(rows).all())
    assert bool((rows != 0).any(dim=1).all())
    for row, got in zip(rows.tolist(), row_norms(rows).tolist()):
        top = max(abs(x) for x in row)
        exact = math.sqrt(float(sum((Fraction(x) / Fraction(top)) ** 2 for x in row))) * top
        assert abs(got - exact) <= 1e-4 * exact, (scale, got, exact)


def test_tiny_rows_keep_a_margin() -> None:
    """Rows whose squares underflow in their own dtype still get a positive margin that covers the keys'
    error (their norms computed without underflow)."""
    from embedmetrics._engine.core.canonical import key_margins

    q = torch.full((3, 24), 7e-24)
    r = _rows(9, 10, 24, torch.float32)
    half = key_margins(q, r)[:, None] / 2
    canonical = pair_dots(q, r, torch.arange(3).repeat_interleave(10), torch.arange(10).repeat(3)).view(3, 10)
    for m in (1, 2, 3):
        product = torch.cat([q[i : i + m] @ r.T for i in range(0, 3, m)]).double()
        assert bool((half > 0).all())
        assert bool(((product - canonical).abs() <= half).all())


def test_the_roundings_of_the_tree() -> None:
    """One for the product, one for the fold past the largest power of two, one per halving."""
    widths = (0, 1, 2, 3, 4, 5, 8, 129, 256, 257)
    assert [tree_roundings(w) for w in widths] == [0, 1, 2, 3, 3, 4, 4, 9, 9, 10]
    for w in range(1, 2000):
        assert tree_roundings(w) <= 2 + math.log2(w)


def test_the_margin_covers_the_product_and_the_canonical_error() -> None:
    """The margin is twice ``(γ_d + γ_t)`` times the bound on ``Σ|a_k b_k|`` (with a slack): for unit rows
    of width ``d``, at least ``(d + t) eps``."""
    for d in (3, 24, 129, 769):
        a = torch.full((1, d), 1.0 / math.sqrt(d))
        (margin,) = margins_of(a, 1.0).tolist()
        eps = torch.finfo(torch.float32).eps
        assert margin >= (d + tree_roundings(d)) * eps
        assert margin <= 1.1 * (d + tree_roundings(d) + 2) * eps


def test_a_row_ends_close_to_nothing() -> None:
    """The gap from a row's last key to the next row's first is masked: even an infinite margin (rows of
    non-finite embeddings, when validation is off) never pairs two rows."""
    from embedmetrics._engine.core.canonical import _gaps_close

    keys = torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    close = _gaps_close(keys, torch.tensor([torch.inf, 0.5], dtype=torch.float64))
    assert close.tolist() == [[True, True, False], [False, False, False]]


def test_the_margin_covers_a_kernel_that_flushes_subnormal_products() -> None:
    """A kernel that flushes subnormal products and sums to zero (FTZ) differs from ``pair_dots``, which
    keeps them, by up to the smallest normal number per product: far beyond the relative margin for rows
    whose products are all subnormal; the margin's term for underflow covers it."""
    from embedmetrics._engine.core.canonical import key_margins

    q = torch.randn(16, 24, generator=torch.Generator().manual_seed(12)).mul(1e-20)
    r = torch.randn(40, 24, generator=torch.Generator().manual_seed(13)).mul(1e-20)
    half = key_margins(q, r)[:, None] / 2
    rows, cols = torch.meshgrid(torch.arange(16), torch.arange(40), indexing="ij")
    canonical = pair_dots(q, r, rows.reshape(-1), cols.reshape(-1)).view(16, 40)
    tiny = torch.finfo(torch.float32).tiny
    products = (q[:, None, :] * r[None, :, :]).double()  # float32 products, exact in float64
    flushed = torch.where(products.abs() < tiny, 0.0, products).sum(dim=2)
    assert bool((flushed == 0).all())
    assert bool((canonical != 0).any())  # the two kernels differ here
    assert bool(((flushed - canonical).abs() <= half).all())


def test_rows_of_an_infinity_have_an_infinite_norm() -> None:
    """An infinite entry gives an infinite norm (and margin), not NaN; a NaN stays NaN (review: an
    infinite document made every margin NaN and emptied every list with validation off)."""
    from embedmetrics._engine.core.canonical import key_margins
    from embedmetrics._engine.core.scan import row_norms

    rows = torch.tensor([[1.0, torch.inf], [-torch.inf, 1e-30], [torch.nan, torch.inf], [3.0, 4.0]])
    norms = row_norms(rows)
    assert norms[:2].tolist() == [torch.inf, torch.inf]
    assert bool(norms[2].isnan())
    assert norms[3].item() == pytest.approx(5.0)
    assert key_margins(torch.ones(2, 2), rows[[0, 3]]).tolist() == [torch.inf, torch.inf]


@pytest.mark.parametrize("similarity", ["dot", "cosine", "euclidean"])
def test_embeddings_of_no_feature_score_every_document_alike(similarity: str) -> None:
    """Zero-width embeddings: every score is 0, as with one zero feature (review: the tree's roundings
    of 0 columns raised)."""
    from embedmetrics.functional import dense_retrieval

    qrels = torch.tensor([[0, 0, 1], [1, 2, 1]])
    kw = {"k": [1, 3], "similarity": similarity, "aggregation": "none"}
    none = dense_retrieval(torch.zeros(2, 0), torch.zeros(3, 0), qrels, **kw)
    one = dense_retrieval(torch.zeros(2, 1), torch.zeros(3, 1), qrels, **kw)
    assert none.keys() == one.keys()
    for key in none:
        assert torch.equal(none[key], one[key]), key
    keys = pair_dots(torch.zeros(2, 0), torch.zeros(3, 0), torch.tensor([0, 1]), torch.tensor([2, 0]))
    assert keys.tolist() == [0, 0]
