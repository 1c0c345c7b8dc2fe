"""Huge and tiny finite embeddings: cosine is scale-free (normalised without overflow), and dot or
euclidean scores that would overflow are refused with an error instead of silently tying everything."""

from __future__ import annotations

import pytest
import torch

from embedmetrics import AccuracyCalculator
from embedmetrics._engine.core.scan import l2_normalize
from embedmetrics.functional import dense_retrieval

HUGE = {torch.float32: 1e19, torch.float64: 1e160}


def _corpus(dtype: torch.dtype, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    corpus = torch.randn(40, 16, generator=g, dtype=torch.float64)
    query = corpus[:1] + 0.01 * torch.randn(1, 16, generator=g, dtype=torch.float64)
    return (query * scale).to(dtype), (corpus * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_l2_normalize_is_the_plain_quotient_and_never_overflows(dtype: torch.dtype) -> None:
    z = torch.randn(500, 37, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    z[3] = 0.0
    z[4, :5] = 1e-14  # below eps: divided by eps, as the plain formula does
    assert torch.equal(l2_normalize(z, 1e-12), z / z.norm(dim=1, keepdim=True).clamp_min(1e-12))
    norms = l2_normalize(z * HUGE[dtype], 1e-12).double().norm(dim=1)
    assert torch.allclose(norms[5:], torch.ones_like(norms[5:]), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cosine_retrieval_of_huge_embeddings_is_scale_free(dtype: torch.dtype) -> None:
    query, corpus = _corpus(dtype, HUGE[dtype])
    mates = torch.cat([query, torch.randn(3, 16, generator=torch.Generator().manual_seed(2), dtype=dtype)])
    args = {"k": (1, 40), "depth": 40, "aggregation": "none", "return_run": True}
    alone = dense_retrieval(query, corpus, torch.tensor([[0, 0, 1]]), **args)
    batch = dense_retrieval(mates, corpus, torch.tensor([[0, 0, 1]]), **args)
    assert float(alone["recall@1"][0]) == 1.0
    assert int((alone["run"][0][0] >= 0).sum()) == 40
    assert torch.equal(alone["run"][0][0], batch["run"][0][0])
    calc = AccuracyCalculator(include=("precision_at_1",), distance="cosine")
    small = calc.get_accuracy(*_corpus(dtype, 1.0)[1:], torch.arange(40) % 4)
    assert calc.get_accuracy(corpus, torch.arange(40) % 4) == small


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("similarity", ["dot", "euclidean"])
def test_scores_that_would_overflow_are_refused(dtype: torch.dtype, similarity: str) -> None:
    query, corpus = _corpus(dtype, HUGE[dtype])
    with pytest.raises(ValueError, match=r"`queries` and `corpus` hold values too large for"):
        dense_retrieval(query, corpus, torch.tensor([[0, 0, 1]]), k=1, similarity=similarity)
    if similarity == "euclidean":
        with pytest.raises(ValueError, match=r"`query` and `reference` hold values too large"):
            AccuracyCalculator(include=("precision_at_1",)).get_accuracy(corpus, torch.arange(40) % 4)
    ok = dense_retrieval(*_corpus(dtype, 1e3), torch.tensor([[0, 0, 1]]), k=1, similarity=similarity)
    assert float(ok["recall@1"]) == 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_l2_normalize_chooses_per_row_and_a_row_never_depends_on_its_batch(dtype: torch.dtype) -> None:
    """Ordinary rows are divided as they are, huge / tiny / zero / NaN rows scaled first: each row's
    quotient is its own, alone or beside any other rows, and ``out`` may be the input itself."""
    from embedmetrics._engine.core.scan import _scaled_normalize

    g = torch.Generator().manual_seed(4)
    z = torch.randn(64, 24, generator=g, dtype=torch.float64).to(dtype)
    z[5] *= HUGE[dtype]
    z[9] *= 1e-30 if dtype == torch.float32 else 1e-200
    z[11] = 0.0
    z[13, 2] = torch.nan
    z[17, :3] = torch.finfo(dtype).tiny / 8  # subnormal elements of an ordinary row
    whole = l2_normalize(z, 1e-12)
    for i in range(64):
        one = l2_normalize(z[i : i + 1], 1e-12)
        assert torch.equal(one.nan_to_num(7.0), whole[i : i + 1].nan_to_num(7.0)), i
    scaled = _scaled_normalize(z, 1e-12, None)
    ordinary = [i for i in range(64) if i not in (5, 9, 11, 13, 17)]
    assert torch.equal(whole[ordinary], scaled[ordinary])
    assert torch.equal(whole[[5, 9, 11]], scaled[[5, 9, 11]])  # the odd rows take the scaled route
    assert float(whole[5].double().norm()) == pytest.approx(1.0, abs=1e-6)  # huge: no overflow
    assert torch.equal(whole[9], z[9] / torch.tensor(1e-12, dtype=dtype))  # below eps: over eps
    in_place = z.clone()
    l2_normalize(in_place, 1e-12, out=in_place)
    assert torch.equal(in_place.nan_to_num(7.0), whole.nan_to_num(7.0))
