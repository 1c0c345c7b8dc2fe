"""The built-in example: scikit-learn's bundled handwritten digits (no download).

- labelled embeddings: the 1797 standardised 8x8 digit images (64 features) with their labels;
- two views: each image plus independent Gaussian noise (fixed seed);
- a TREC-like run: every ``QUERY_STEP``-th digit is a query, all other digits are the documents,
  the run lists the ``RUN_DEPTH`` most cosine-similar ones, and the qrels judge every digit of the
  same class relevant (so most relevant documents are not retrieved and count only in R and the
  ideal DCG).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from embedmetrics._engine.core.scan import iter_similarity_blocks, l2_normalize
from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import Qrels, Run

SEED = 0
NOISE = 0.5
RUN_DEPTH = 100
QUERY_STEP = 3

#: What the example's two views are (the note under the table).
VIEWS_ARE = f"each digit plus Gaussian noise (standard deviation {NOISE}), drawn twice"


@dataclass
class DefaultData:
    """Every input family of the report, built from the digits."""

    embeddings: torch.Tensor
    labels: torch.Tensor
    class_names: list[str]
    view1: torch.Tensor
    view2: torch.Tensor
    run: Run
    qrels: Qrels


def _digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ReportInputError(
            "the built-in example needs scikit-learn: pip install scikit-learn (the [report] extra) "
            "(or pass --embeddings/--labels, --view1/--view2 or --run/--qrels)."
        ) from None
    x, y = load_digits(return_X_y=True)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)


def _run_from_neighbours(x: torch.Tensor, labels: np.ndarray, depth: int, step: int) -> tuple[Run, Qrels]:
    """Rows ``0, step, 2*step, ...`` query all other rows: their top-``depth`` cosine neighbours are the
    run; every other row of the same class is judged relevant."""
    n = x.shape[0]
    depth = min(depth, n - 1)
    z = l2_normalize(x, 1e-12)
    queries = torch.arange(0, n, step)
    scores, docs = [], []
    for start, stop, sims in iter_similarity_blocks(z[queries], z):
        rows = torch.arange(stop - start)
        sims[rows, queries[start:stop]] = -torch.inf  # a query never retrieves itself
        top = sims.topk(depth, dim=1)
        scores.append(top.values)
        docs.append(top.indices)
    score = torch.cat(scores).reshape(-1).double().numpy()
    docno = torch.cat(docs).reshape(-1).numpy()
    qid = np.repeat(queries.numpy(), depth)
    names = np.arange(n).astype(str)
    run = Run(qid, docno, score, np.arange(1, qid.size + 1), names, names)
    # qrels: every other item of the same class is judged relevant (rel 1); ten classes, ten steps
    is_query = np.zeros(n, dtype=bool)
    is_query[queries.numpy()] = True
    q_parts, d_parts = [], []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        q, d = np.meshgrid(members[is_query[members]], members, indexing="ij")
        other = q != d
        q_parts.append(q[other])
        d_parts.append(d[other])
    q_all, d_all = np.concatenate(q_parts), np.concatenate(d_parts)
    qrels = Qrels(
        q_all, d_all, np.ones(q_all.size, dtype=np.int64), np.arange(1, q_all.size + 1), names, names
    )
    return run, qrels


def load_default() -> DefaultData:
    """Build every input family from the digits (deterministic: fixed seed)."""
    x, y = _digits()
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    rng = np.random.default_rng(SEED)
    view1 = x + NOISE * rng.standard_normal(x.shape)
    view2 = x + NOISE * rng.standard_normal(x.shape)
    emb = torch.from_numpy(x.astype(np.float32))
    run, qrels = _run_from_neighbours(emb, y, RUN_DEPTH, QUERY_STEP)
    return DefaultData(
        embeddings=emb,
        labels=torch.from_numpy(y),
        class_names=[str(c) for c in range(int(y.max()) + 1)],
        view1=torch.from_numpy(view1.astype(np.float32)),
        view2=torch.from_numpy(view2.astype(np.float32)),
        run=run,
        qrels=qrels,
    )
