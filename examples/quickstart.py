"""Quickstart: evaluate a small synthetic retrieval run end to end and print a table of metrics.

A toy "model" scores 1,000 queries against 40 candidate documents each; relevance is graded 0-3.
The module metrics accumulate over batches exactly as in a validation loop: flat (preds, target,
indexes) batches where a query's documents are scattered over batches, and the same run as 2-D
(queries, documents) score matrices.
"""

from __future__ import annotations

import time

import torch

import embedmetrics as em


def synthetic_run(queries: int = 1_000, docs: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    grade = torch.randint(0, 4, (queries, docs), generator=g) * (
        torch.rand(queries, docs, generator=g) < 0.15
    )
    noise = torch.randn(queries, docs, generator=g)
    scores = 0.8 * grade + noise  # a model that is right more often than not; scores may be negative
    return scores, grade


def main() -> None:
    start = time.perf_counter()
    scores, grade = synthetic_run()
    relevant = grade > 0
    metrics = {
        "HitRate@1,5,10": em.RetrievalHitRate(k=(1, 5, 10)),
        "MRR@10": em.RetrievalMRR(k=10),
        "Precision@5": em.RetrievalPrecision(k=5),
        "Recall@10": em.RetrievalRecall(k=10),
        "MAP": em.RetrievalMAP(),
        "R-Precision": em.RetrievalRPrecision(),
        "nDCG@10 (graded)": em.RetrievalNormalizedDCG(k=10),
    }
    # flat batches: shuffle all (query, document) pairs, feed 16,384 at a time
    q, d = scores.shape
    indexes = torch.arange(q).unsqueeze(1).expand(q, d).reshape(-1)
    perm = torch.randperm(q * d, generator=torch.Generator().manual_seed(1))
    flat = scores.reshape(-1)[perm], grade.reshape(-1)[perm], relevant.reshape(-1)[perm], indexes[perm]
    for lo in range(0, q * d, 16_384):
        p, gr, rel, idx = (x[lo : lo + 16_384] for x in flat)
        for name, metric in metrics.items():
            metric.update(p, gr if "nDCG" in name else rel, indexes=idx)
    flat_values = {name: m.compute() for name, m in metrics.items()}

    # the same run as 2-D score matrices, 256 queries per batch (state: one value per query)
    for m in metrics.values():
        m.reset()
    for lo in range(0, q, 256):
        for name, metric in metrics.items():
            metric.update(scores[lo : lo + 256], (grade if "nDCG" in name else relevant)[lo : lo + 256])
    row_values = {name: m.compute() for name, m in metrics.items()}

    print(f"{q:,} queries x {d} documents, graded relevance 0-3\n")
    print(f"{'metric':<20}{'flat batches':>26}{'2-D batches':>26}")
    print("-" * 72)
    for name in metrics:
        a = ", ".join(f"{v:.4f}" for v in flat_values[name].reshape(-1).tolist())
        b = ", ".join(f"{v:.4f}" for v in row_values[name].reshape(-1).tolist())
        print(f"{name:<20}{a:>26}{b:>26}")
        assert torch.allclose(flat_values[name], row_values[name], atol=1e-6)
    print(f"\nflat and 2-D input agree; done in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
