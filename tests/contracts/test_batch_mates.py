"""A query's value never depends on the other queries of its batch.

For every registered metric that scores pairs of embeddings by a matrix product and has a value per
query (dense retrieval, the kNN accuracy of ``KNNAccuracy``, the neighbour statistics of
``EmbeddingAccuracy``), a query's value is the same bits alone, first, in the middle and last of
batches of many sizes, on tie-heavy data (rows that are permutations of one row, scaled copies,
integer-valued embeddings), in float32 and float64. A matrix product's kernel rounds an entry
according to the product's shape and the entry's place in it, so the keys read off a block product
change with the batch; the scans decide with canonical keys (``_engine/core/canonical.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from embedmetrics._engine.core.knn import knn_scan
from embedmetrics._engine.neighbors.vote import class_indices, scan_votes, vote_hits
from embedmetrics._metric.registry import REGISTRY
from embedmetrics.functional import dense_retrieval

D = 24
MATES = (1, 6, 33, 100)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tie_heavy(kind: str, n: int, seed: int, dtype: torch.dtype) -> Tensor:
    """``n`` rows of ``D`` features whose pairwise scores are mathematically tied in many places."""
    g = _gen(seed)
    if kind == "permuted":  # permutations of two rows: equal norms, equal dot products with a constant row
        base = torch.randn(2, D, generator=g, dtype=torch.float64)
        rows = torch.stack([base[i % 2][torch.randperm(D, generator=g)] for i in range(n)])
    elif kind == "scaled":  # a few rows and their copies scaled by powers of two and by three
        base = torch.randn(3, D, generator=g, dtype=torch.float64)
        scale = torch.tensor([1.0, 2.0, 0.5, 3.0, 4.0], dtype=torch.float64)
        rows = base[torch.arange(n) % 3] * scale[torch.randint(0, 5, (n,), generator=g)][:, None]
    else:  # small integers: many exactly equal dot products
        rows = torch.randint(-2, 3, (n, D), generator=g).to(torch.float64)
    return rows.to(dtype)


def queries_of(kind: str, seed: int, dtype: torch.dtype) -> Tensor:
    """The probed query first (equal coordinates: tied with every permutation), then its batch mates."""
    mates = tie_heavy(kind, max(MATES), seed + 100, dtype)
    first = torch.full((1, D), 0.7, dtype=dtype) if kind != "integer" else torch.ones(1, D, dtype=dtype)
    return torch.cat([first, mates])


def placements(queries: Tensor) -> list[tuple[str, Tensor, int]]:
    """``(name, batch, row of the probed query)``: alone, then first, middle and last among mates."""
    x, mates = queries[:1], queries[1:]
    out = [("alone", x, 0)]
    for m in MATES:
        others = mates[:m]
        mid = m // 2
        out += [
            (f"first of {m + 1}", torch.cat([x, others]), 0),
            (f"middle of {m + 1}", torch.cat([others[:mid], x, others[mid:]]), mid),
            (f"last of {m + 1}", torch.cat([others, x]), m),
        ]
    return out


# --------------------------------------------------------------------------- per-query values


def dense_values(batch: Tensor, row: int, corpus: Tensor, similarity: str) -> list[Tensor]:
    ids = torch.arange(1, batch.shape[0] + 1)
    ids[row] = 0  # the probed query keeps id 0: its value comes first (ascending ids)
    judged = torch.tensor([[0, 0, 1], [0, 3, 2], [0, 5, 1]])
    out = []
    for ties in ("average", "pessimistic", "optimistic"):
        res = dense_retrieval(
            batch, corpus, judged, query_ids=ids, k=(1, 3, 5), similarity=similarity, ties=ties,
            aggregation="none", depth=7,
        )  # fmt: skip
        out += [v[0] for key, v in sorted(res.items()) if key != "query_ids"]
    return out


def knn_vote_values(batch: Tensor, row: int, bank: Tensor, labels: Tensor) -> list[Tensor]:
    query_labels = torch.zeros(batch.shape[0], dtype=torch.int64)
    bank_cls, query_cls, n_classes = class_indices(labels, query_labels, None)
    lists = scan_votes(bank, bank_cls, batch, k=5, n_classes=n_classes)
    return [
        vote_hits(lists, query_cls, temperature=0.07, tops=(1, 2), ties=ties, n_classes=n_classes)[row]
        for ties in ("average", "pessimistic", "optimistic")
    ]


def neighbor_values(batch: Tensor, row: int, bank: Tensor, labels: Tensor, distance: str) -> list[Tensor]:
    """The rank statistics alone (order and tie blocks canonical) and with the neighbours' distances
    (every listed value canonical)."""
    query_labels = torch.zeros(batch.shape[0], dtype=torch.int64)
    counts = torch.full((batch.shape[0],), int((labels == 0).sum()))
    out = []
    for ties, neighbors in itertools.product(("average", "pessimistic", "optimistic"), (False, True)):
        res = knn_scan(
            batch, bank, query_labels, labels, k=5, counts=counts, distance=distance, ties=ties,
            return_neighbors=neighbors,
        )  # fmt: skip
        out += [v[row] for _, v in sorted(res.stats.items())]
        if res.distances is not None:
            out.append(res.distances[row])
    return out


#: The registered metrics whose per-query values come from a matrix product, and how to read them.
PROBES: dict[str, Callable[[Tensor, int, Tensor, Tensor, str], list[Tensor]]] = {
    "DenseRetrieval": lambda batch, row, corpus, labels, how: dense_values(batch, row, corpus, how),
    "KNNAccuracy": lambda batch, row, bank, labels, how: knn_vote_values(batch, row, bank, labels),
    "EmbeddingAccuracy": lambda batch, row, bank, labels, how: neighbor_values(batch, row, bank, labels, how),
}
SIMILARITIES = {
    "DenseRetrieval": ("cosine", "dot", "euclidean"),
    "EmbeddingAccuracy": ("euclidean", "cosine"),
}


def test_every_metric_that_scores_query_rows_has_a_probe() -> None:
    """The metrics with a per-query value read off a product of embeddings: each is probed below."""
    scoring = {s.key for s in REGISTRY if s.family in ("dense", "metric-learning") or s.key == "KNNAccuracy"}
    assert scoring == set(PROBES)


def _same(a: list[Tensor], b: list[Tensor]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) or (x.isnan().all() and y.isnan().all()) for x, y in zip(a, b)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["permuted", "scaled", "integer"])
@pytest.mark.parametrize("key", sorted(PROBES))
def test_a_query_gets_the_same_value_whatever_its_batch(key: str, kind: str, dtype: torch.dtype) -> None:
    probe = PROBES[key]
    failures = []
    for seed, how in itertools.product(range(2), SIMILARITIES.get(key, ("cosine",))):
        references = tie_heavy(kind, 40, seed, dtype)
        labels = torch.randint(0, 3, (40,), generator=_gen(seed + 7))
        queries = queries_of(kind, seed, dtype)
        want = None
        for name, batch, row in placements(queries):
            got = probe(batch, row, references, labels, how)
            if want is None:
                want = got
            elif not _same(got, want):
                failures.append(f"seed {seed} {how}: {name}")
    assert not failures, f"{key} on {kind} rows ({dtype}): the value moved with the batch: {failures[:6]}"


TINY = {torch.float32: 7e-24, torch.float64: 1e-170}  # entries whose squares underflow the dtype
SUBNORMAL = {torch.float32: 4e-23, torch.float64: 3e-162}  # entries whose products are subnormal


@pytest.mark.parametrize("scale", ["plain", "tiny"])
def test_the_reported_case_holds(scale: str) -> None:
    """Issue 36's case: a constant query against six permutations of one row, alone and as row 0 of 16;
    also with query rows so small that their squares underflow (their norms in their own dtype are 0)."""
    for seed, dtype, similarity in itertools.product(
        range(6), (torch.float32, torch.float64), ("cosine", "dot")
    ):
        g = _gen(seed)
        base = torch.randn(D, generator=g, dtype=torch.float64).to(dtype)
        corpus = torch.stack([base[torch.randperm(D, generator=g)] for _ in range(6)])
        size = 0.7 if scale == "plain" else TINY[dtype]
        q = torch.full((1, D), size, dtype=dtype)
        batch = torch.cat([q, (torch.randn(15, D, generator=g, dtype=torch.float64) * size / 0.7).to(dtype)])
        for ties in ("average", "pessimistic", "optimistic"):
            args = {"k": (1, 3), "aggregation": "none", "similarity": similarity, "ties": ties}
            alone = dense_retrieval(q, corpus, torch.tensor([[0, 0, 1]]), **args)
            mates = dense_retrieval(batch, corpus, torch.tensor([[0, 0, 1]]), **args)
            for key in alone:
                if key != "query_ids":
                    assert torch.equal(alone[key][0], mates[key][0]), (seed, dtype, similarity, ties, key)


@pytest.mark.parametrize("layout", ["plain", "euclidean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_margin_bounds_every_product_key(layout: str, dtype: torch.dtype) -> None:
    """Half the margin bounds the distance between any product key (products of several shapes) and the
    canonical key of the same pair: the filter never drops an entry canonical keys would keep."""
    from embedmetrics._engine.core.canonical import key_margins, pair_dots

    g = _gen(11)
    for scale, d in ((1.0, 7), (30.0, 128), (1e3, 300), (TINY[dtype], 24), (SUBNORMAL[dtype], 24)):
        q = torch.randn(64, d, generator=g, dtype=torch.float64) * scale
        r = torch.randn(500, d, generator=g, dtype=torch.float64) * scale + scale
        if layout == "euclidean":
            q = torch.cat([-2.0 * q, torch.ones(64, 1, dtype=torch.float64)], dim=1)
            r = torch.cat([r, (r * r).sum(1, keepdim=True)], dim=1)
        a, b = q.to(dtype), r.to(dtype)
        half = key_margins(a, b, euclidean=layout == "euclidean")[:, None] / 2
        rows, cols = torch.meshgrid(torch.arange(64), torch.arange(500), indexing="ij")
        canonical = pair_dots(a, b, rows.reshape(-1), cols.reshape(-1)).view(64, 500)
        for m in (1, 7, 64):
            product = torch.cat([a[i : i + m] @ b.T for i in range(0, 64, m)]).double()
            assert bool(((product - canonical).abs() <= half).all()), (scale, d, m)
