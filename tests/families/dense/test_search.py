"""``dense_search``: each query's top-``depth`` documents without judgements, from a tensor or from chunks.

Against a brute force of exact scores (small integer rows, dot and Euclidean: ties everywhere, every score
exact in float64) with ties by ascending or descending id, against pytrec_eval's own order of tied scores,
against ``dense_retrieval``'s run, and its refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import pytrec_eval
import torch

from embedmetrics._engine.core.checks import ArgumentKindError
from embedmetrics.functional import dense_retrieval, dense_search


def _integer_rows(seed: int, n_q: int, n_c: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(-2, 3, (n_q, 3), generator=g).double(),
        torch.randint(-2, 3, (n_c, 3), generator=g).double(),
    )


def _brute_force(
    q: torch.Tensor, c: torch.Tensor, ids: torch.Tensor, sim: str, depth: int, desc: bool
) -> Any:
    """Exact scores of every pair; per query the first ``depth`` by (score descending, id in the order)."""
    scores = q @ c.T if sim == "dot" else -((q[:, None] - c[None]) ** 2).sum(-1).sqrt()
    out = []
    for row in scores:
        ranked = sorted(
            range(len(ids)), key=lambda j: (-float(row[j]), -int(ids[j]) if desc else int(ids[j]))
        )
        out.append([int(ids[j]) for j in ranked[:depth]])
    return torch.tensor(out), scores


@pytest.mark.parametrize("tie_order", ["ascending", "descending"])
@pytest.mark.parametrize("similarity", ["dot", "euclidean"])
def test_tensor_and_chunks_give_the_brute_force_lists_with_ties_by_id(
    tie_order: str, similarity: str
) -> None:
    q, c = _integer_rows(3, 9, 400)
    g = torch.Generator().manual_seed(4)
    ids = torch.randperm(400, generator=g) - 1  # ids -1 and 0 among them: ~0 is the padding's -1
    query_ids = torch.randperm(9, generator=g) * 5
    desc = tie_order == "descending"
    for depth in (1, 7, 60, 500):
        expected, scores = _brute_force(q, c, ids, similarity, min(depth, 400), desc)
        options: dict[str, Any] = {"depth": depth, "similarity": similarity, "tie_order": tie_order}
        got_ids, got_scores = dense_search(q, c, corpus_ids=ids, query_ids=query_ids, **options)
        assert torch.equal(got_ids, expected), depth
        columns = torch.argsort(ids)[torch.searchsorted(ids.sort().values, got_ids)]
        assert torch.equal(got_scores, scores.gather(1, columns)), depth
        cuts = [0, 1, 2, 150, 150, 399, 400]  # an empty and a one-row chunk
        chunks = [(c[a:b], ids[a:b]) for a, b in zip(cuts, cuts[1:])][::-1]
        streamed = dense_search(q, iter(chunks), query_ids=query_ids, block_bytes=256, **options)
        assert torch.equal(streamed[0], expected), depth
        assert torch.equal(streamed[1], got_scores), depth


def test_rows_follow_the_queries_and_exclude_self_drops_the_querys_own_document() -> None:
    q, c = _integer_rows(5, 6, 50)
    c[:6] = q  # query i is document i
    query_ids = torch.tensor([4, 0, 5, 1, 3, 2])
    ids, scores = dense_search(q, c, query_ids=query_ids, depth=50, similarity="dot", exclude_self=True)
    for row, own in enumerate(query_ids.tolist()):
        assert own not in ids[row, :49].tolist()
        assert ids[row, -1] == -1
        assert scores[row, -1] == -np.inf
    kept, _ = dense_search(q, c, query_ids=query_ids, depth=50, similarity="dot")
    run = dense_retrieval(
        q,
        c,
        torch.zeros(0, 3, dtype=torch.int64),
        query_ids=query_ids,
        k=50,
        similarity="dot",
        return_run=True,
    )
    assert torch.equal(kept, run["run"][0][torch.argsort(torch.argsort(query_ids))])


def test_descending_ties_are_pytrec_evals_order() -> None:
    """Every document tied: pytrec_eval ranks the run by score, then by document id descending; the first
    document of our descending list is the one it puts first (precision at 1 of 1.0 when it alone is
    relevant), and our ascending list's first is the one it puts last."""
    q = torch.ones(1, 4)
    c = torch.ones(30, 4)
    ids = torch.randperm(30, generator=torch.Generator().manual_seed(1)) + 10  # two digits: string order
    for tie_order, measure, value in (("descending", "P_1", 1.0), ("ascending", "P_1", 0.0)):
        found, scores = dense_search(q, c, corpus_ids=ids, depth=30, tie_order=tie_order)
        run = {"q": {str(int(d)): float(s) for d, s in zip(found[0], scores[0])}}
        qrels = {"q": {str(int(found[0, 0])): 1}}
        got = pytrec_eval.RelevanceEvaluator(qrels, {measure})
        assert got.evaluate(run)["q"][measure] == value, tie_order
    assert found[0].tolist() == sorted(ids.tolist())


def test_numpy_in_numpy_out_and_float32_scores() -> None:
    q, c = _integer_rows(8, 4, 30)
    ids, scores = dense_search(q.float().numpy(), c.float().numpy(), depth=5)
    assert isinstance(ids, np.ndarray)
    assert ids.dtype == np.int64
    assert ids.shape == (4, 5)
    assert isinstance(scores, np.ndarray)
    assert scores.dtype == np.float32
    chunked = dense_search(q.float().numpy(), [(c.float().numpy(), np.arange(30))], depth=5)
    np.testing.assert_array_equal(chunked[0], ids)


def test_refusals_name_the_argument() -> None:
    q, c = _integer_rows(9, 3, 10)
    with pytest.raises(ValueError, match="`tie_order`"):
        dense_search(q, c, tie_order="random")
    with pytest.raises(ValueError, match="`depth`"):
        dense_search(q, c, depth=0)
    with pytest.raises(ValueError, match="`corpus_ids`"):
        dense_search(q, [(c, torch.arange(10))], corpus_ids=torch.arange(10))
    with pytest.raises(ArgumentKindError, match="integer ids"):
        dense_search(q, [(c, torch.arange(10.0))], tie_order="descending")
    with pytest.raises(ValueError, match="query_ids"):
        dense_search(q, c, query_ids=torch.tensor([1, 1, 2]))
    with pytest.raises(TypeError, match="qrels"):
        dense_search(q, c, qrels=torch.zeros(0, 3))  # type: ignore[call-arg]


def test_both_routes_agree_on_edge_inputs_and_name_ids_as_given() -> None:
    """Unsigned ids, an empty corpus, a repeated id and an id given again are read alike on both routes;
    errors name the ids as given, also in descending order (where the engine ranks reversed ids)."""
    q, c = _integer_rows(11, 3, 6)
    ids = torch.arange(6)
    for tie_order in ("ascending", "descending"):
        expected = dense_search(q, c, corpus_ids=ids, depth=3, similarity="dot", tie_order=tie_order)
        for dtype in (torch.uint8, torch.uint16, torch.int32):
            for corpus in (c, [(c, ids.to(dtype))]):
                given = ids.to(dtype) if isinstance(corpus, torch.Tensor) else None
                got = dense_search(
                    q, corpus, corpus_ids=given, depth=3, similarity="dot", tie_order=tie_order
                )
                assert torch.equal(got[0], expected[0]), (tie_order, dtype)
        empty = (
            dense_search(q, c[:0], depth=3, tie_order=tie_order),
            dense_search(q, [], tie_order=tie_order),
        )
        for got_ids, got_scores in empty:
            assert got_ids.shape == (3, 0)
            assert got_scores.shape == (3, 0)
        with pytest.raises(ValueError, match="got 4 more than once"):
            dense_search(q, c, corpus_ids=torch.tensor([0, 1, 2, 3, 4, 4]), tie_order=tie_order)
        with pytest.raises(ValueError, match="got 4 more than once"):
            dense_search(q, [(c, torch.tensor([0, 1, 2, 3, 4, 4]))], tie_order=tie_order)
        with pytest.raises(ValueError, match="got 2, already given"):
            dense_search(q, [(c[:3], ids[:3]), (c[3:], torch.tensor([5, 2, 7]))], tie_order=tie_order)


def test_a_corpus_of_another_kind_or_dtype_is_refused_on_both_routes() -> None:
    q, c = _integer_rows(12, 3, 6)
    with pytest.raises(ValueError, match="queries' dtype"):
        dense_search(q, c.float())
    with pytest.raises(ValueError, match="queries' dtype"):
        dense_search(q, [(c.float(), torch.arange(6))])
    with pytest.raises(TypeError, match="queries"):
        dense_search(q, c.numpy())
    for corpus in (None, 5, {"a": 1}, "corpus"):
        with pytest.raises(ArgumentKindError, match="Argument `corpus`"):
            dense_search(q, corpus)
