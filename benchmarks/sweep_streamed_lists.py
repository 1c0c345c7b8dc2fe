"""A seeded sweep of streamed corpus configurations against a float64 brute force (issue 55).

Not a timing: each configuration streams a corpus through ``dense_search`` (the same running lists as
``dense_retrieval``, ``DenseRetrieval.set_queries``, the report and the sentence-transformers evaluator) in
shuffled chunks of random sizes, at the default block budget and at small ones, and counts the queries whose
top-``depth`` set differs from ``torch.topk`` of the float64 scores of the whole corpus, beyond the
rounding of the embeddings' dtype at the ``depth``-th score. Every configuration is also compared with
the corpus given whole, bit for bit. Usage::

    python benchmarks/sweep_streamed_lists.py               # the sweep of the closing note (about 5 minutes)
    python benchmarks/sweep_streamed_lists.py --quick       # a few configurations
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from embedmetrics.functional import dense_search


def _scores(q: torch.Tensor, c: torch.Tensor, similarity: str) -> torch.Tensor:
    q, c = q.double(), c.double()
    if similarity == "cosine":
        q, c = q / q.norm(dim=1, keepdim=True), c / c.norm(dim=1, keepdim=True)
    return -torch.cdist(q, c) if similarity == "euclidean" else q @ c.T


def _wrong(ids: torch.Tensor, scores: torch.Tensor, tol: float) -> int:
    """Queries whose list misses a document above the boundary or holds one below it (beyond ``tol``)."""
    depth, wrong = ids.shape[1], 0
    for listed, row in zip(ids, scores):
        boundary = float(torch.topk(row, depth).values[-1])
        got = set(listed.tolist())
        above = set((row > boundary + tol).nonzero().flatten().tolist())
        allowed = set((row >= boundary - tol).nonzero().flatten().tolist())
        wrong += not (above <= got <= allowed and len(got) == depth)
    return wrong


def _config(n: int, chunks: int, depth: int, d: int, similarity: str, dtype: torch.dtype, seed: int, block):
    g = torch.Generator().manual_seed(seed)
    n_q = 16
    q = torch.randn(n_q, d, generator=g, dtype=torch.float64).to(dtype)
    c = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    if seed % 2:  # duplicated rows: exact ties across chunks
        c[n // 2 :] = c[torch.randint(0, n // 2, (n - n // 2,), generator=g)]
    ids = torch.arange(n)
    cuts = sorted(torch.randperm(n - 1, generator=g)[: chunks - 1].add(1).tolist())
    parts = list(zip([0, *cuts], [*cuts, n]))
    order = torch.randperm(len(parts), generator=g).tolist()
    streamed = dense_search(
        q, ((c[a:b], ids[a:b]) for a, b in (parts[i] for i in order)), depth=depth, similarity=similarity,
        block_bytes=block,
    )  # fmt: skip
    whole = dense_search(q, c, depth=depth, similarity=similarity, block_bytes=block)
    same = torch.equal(streamed[0], whole[0]) and torch.equal(streamed[1], whole[1])
    scores = _scores(q, c, similarity)
    tol = float(scores.abs().max()) * (1e-5 if dtype == torch.float32 else 1e-12)
    return _wrong(streamed[0], scores, tol), n_q, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [(150_000, 3), (200_000, 4), (400_000, 4)] if not args.quick else [(150_000, 3)]
    grid = itertools.product(
        sizes, (100, 500, 1000), (32, 384), ("cosine", "dot", "euclidean"), (torch.float32, torch.float64),
        (None, 2**20),
    )  # fmt: skip
    tried = wrong_queries = queries = not_same = 0
    start = time.perf_counter()
    for seed, ((n, chunks), depth, d, sim, dtype, block) in enumerate(grid):
        if d == 384 and (n > 200_000 or dtype == torch.float64 or block is not None):
            continue  # the widest rows at the sizes, float32, the default budget
        if args.quick and seed % 6:
            continue
        wrong, n_q, same = _config(n, chunks, depth, d, sim, dtype, seed, block)
        tried, wrong_queries, queries, not_same = (
            tried + 1,
            wrong_queries + wrong,
            queries + n_q,
            not_same + (not same),
        )
        if wrong or not same:
            print(
                f"WRONG: n={n} chunks={chunks} depth={depth} d={d} {sim} {dtype} block={block}: "
                f"{wrong} queries"
            )
    took = time.perf_counter() - start
    print(
        f"{tried} configurations, {queries} queries: {wrong_queries} wrong against the float64 brute force, "
        f"{not_same} configurations not bit-equal to the corpus given whole ({took:.0f} s)"
    )


if __name__ == "__main__":
    main()
