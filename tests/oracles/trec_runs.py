"""Three small TREC runs and their qrels, drawn from a seed (the systems compared in
``tests/families/comparison``; the same files fed ranx for ``ranx_compare.json``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SYSTEMS = {"bm25": 1.4, "dense": 1.0, "hybrid": 0.95}


def write_runs(directory: Path, queries: int = 80, docs: int = 40, seed: int = 7) -> tuple[list[Path], Path]:
    """``bm25``, ``dense`` and ``hybrid`` runs (top 25 of each query) and the qrels, in ``directory``."""
    rng = np.random.default_rng(seed)
    grades: dict[tuple[int, int], int] = {}
    lines = []
    for q in range(queries):
        for d in rng.choice(docs, 6, replace=False):
            grades[(q, int(d))] = int(rng.integers(1, 3))
            lines.append(f"q{q} 0 d{d} {grades[(q, int(d))]}\n")
    qrels = directory / "qrels.txt"
    qrels.write_text("".join(lines))
    runs = []
    for name, noise in SYSTEMS.items():
        out = []
        for q in range(queries):
            score = np.array([grades.get((q, d), 0) + noise * rng.standard_normal() for d in range(docs)])
            for rank, d in enumerate(np.argsort(-score, kind="stable")[:25]):
                out.append(f"q{q} Q0 d{d} {rank + 1} {score[d]:.6f} {name}\n")
        path = directory / f"{name}.trec"
        path.write_text("".join(out))
        runs.append(path)
    return runs, qrels
