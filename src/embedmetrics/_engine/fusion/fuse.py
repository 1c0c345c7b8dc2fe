"""Rank fusion: several runs' lists of one query made into one, by their scores (normalised per query) or
their ranks. No torch.

Each run's list is ranked as trec_eval ranks it (score descending, then docno descending), so a rank
never depends on the order documents arrive in. A document's contributions are combined in a canonical
order (sorted), so the fused scores are the same bits under any order of the input runs; the fused list
is ranked as trec_eval ranks it. The definitions are those of ranx (``fuse``, its ``norm`` and ``method``
names), and on tie-free runs the fused lists and scores equal ranx's:

* norms, per run and query: ``min-max`` ``(s - min) / max(max - min, 1e-9)``; ``max`` ``s / max(max,
  1e-9)``; ``sum`` ``(s - min) / max(sum - n min, 1e-9)``; ``zmuv`` (z-score) ``(s - mean) / max(std,
  1e-9)``; ``rank`` ``1 - i / n`` (``i`` the 0-based rank, ``n`` the list's length); ``None``: the scores.
* methods, over the runs that list a document (one missing from a run adds nothing): ``sum`` (CombSUM),
  ``mnz`` (CombMNZ: the sum times the number of runs listing it), ``max``, ``min``, ``anz`` (the mean),
  ``wsum`` (``sum`` of the scores times each run's weight), ``rrf`` (``sum`` of ``1 / (k + i + 1)``,
  ``k = 60``), ``isr`` (``mnz`` of ``1 / (i + 1)**2``), ``bordafuse`` (per run ``C - i`` points, ``C``
  the documents any run lists for the query, a document the run lacks ``(C - n + 1) / 2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The normalisations (ranx's names; ``z-score`` is ``zmuv``).
NORMS = ("min-max", "max", "sum", "zmuv", "rank")
#: The methods (ranx's names) and the aliases users type.
METHODS = ("sum", "mnz", "max", "min", "anz", "wsum", "rrf", "isr", "bordafuse")
ALIASES = {"combsum": "sum", "combmnz": "mnz", "combmax": "max", "combmin": "min", "combanz": "anz",
           "weighted_sum": "wsum", "borda": "bordafuse", "z-score": "zmuv", "zscore": "zmuv",
           "minmax": "min-max"}  # fmt: skip
#: The methods that read ranks only (a normalisation changes nothing there).
RANK_METHODS = ("rrf", "isr", "bordafuse")
_FLOOR = 1e-9
#: ranx's score of a document a run lacks in CombMAX (its negative) and CombMIN.
_ABSENT = 1e9


@dataclass
class Lists:
    """Runs as arrays over shared vocabularies: per run ``query``, ``doc`` (codes into ``query_names``,
    ``doc_names``, both sorted, so code order is name order) and ``score``, each document once per query
    (the readers refuse a repeat)."""

    query_names: np.ndarray
    doc_names: np.ndarray
    query: list[np.ndarray]
    doc: list[np.ndarray]
    score: list[np.ndarray]


def shared_lists(
    queries: Sequence[np.ndarray], docs: Sequence[np.ndarray], scores: Sequence[np.ndarray]
) -> Lists:
    """The runs (their query and document names, their scores) coded over shared vocabularies."""
    q_names, q_codes = np.unique(
        np.concatenate([np.asarray(q, dtype=str) for q in queries]), return_inverse=True
    )
    d_names, d_codes = np.unique(
        np.concatenate([np.asarray(d, dtype=str) for d in docs]), return_inverse=True
    )
    cuts = np.cumsum([0, *(len(s) for s in scores)])
    split = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
    return Lists(q_names, d_names, [q_codes[a:b] for a, b in split], [d_codes[a:b] for a, b in split],
                 [np.asarray(s, dtype=np.float64) for s in scores])  # fmt: skip


def canonical_method(method: str) -> str:
    """ranx's name of ``method`` (``CombSUM`` is ``sum``), else ``ValueError`` naming the methods."""
    name = str(method).strip()
    key = name.lower()
    key = ALIASES.get(key, key)
    if key not in METHODS:
        raise ValueError(
            f"Argument `method` must be one of {', '.join(METHODS)} (or CombSUM, CombMNZ, ...), got "
            f"{method!r}."
        )
    return key


def canonical_norm(norm: Any) -> str | None:
    if norm is None or str(norm).lower() == "none":
        return None
    key = ALIASES.get(str(norm).lower(), str(norm).lower())
    if key not in NORMS:
        raise ValueError(f"Argument `norm` must be one of {', '.join(NORMS)}, z-score or None, got {norm!r}.")
    return key


def _ranked(
    query: np.ndarray, doc: np.ndarray, score: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order of one run's rows as trec_eval ranks them, each row's 0-based rank, its list's length."""
    order = np.lexsort((-doc, -score, query))
    q = query[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]]) if q.size else np.zeros(0, dtype=np.int64)
    sizes = np.diff(np.r_[starts, q.size])
    rank = np.arange(q.size) - np.repeat(starts, sizes)
    return order, rank, np.repeat(sizes, sizes)


def _normalised(score: np.ndarray, rank: np.ndarray, length: np.ndarray, norm: str | None) -> Any:
    """One run's scores (rows ranked: ``rank`` within the query's list of ``length``) normalised per
    query."""
    if norm is None:
        return score
    if norm == "rank":
        return 1.0 - rank / length
    starts = np.flatnonzero(rank == 0)
    low = np.repeat(np.minimum.reduceat(score, starts), length[starts]) if score.size else score
    high = np.repeat(np.maximum.reduceat(score, starts), length[starts]) if score.size else score
    if norm == "min-max":
        return (score - low) / np.maximum(high - low, _FLOOR)
    if norm == "max":
        return score / np.maximum(high, _FLOOR)
    total = np.repeat(np.add.reduceat(score, starts), length[starts]) if score.size else score
    if norm == "sum":
        return (score - low) / np.maximum(total - low * length, _FLOOR)
    mean = total / length
    deviation = np.repeat(
        np.sqrt(np.add.reduceat((score - mean) ** 2, starts) / length[starts]), length[starts]
    )
    return (score - mean) / np.maximum(deviation, _FLOOR)


def _contributions(lists: Lists, method: str, norm: str | None, k: float) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs, values)``: every (query, document) any run lists (``query * D + doc``, sorted) and its
    ``(pairs, runs)`` contributions, NaN where a run does not list it (Borda: its points there)."""
    width = max(lists.doc_names.size, 1)
    keys = [q.astype(np.int64) * width + d for q, d in zip(lists.query, lists.doc)]
    pairs = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    values = np.full((pairs.size, len(keys)), np.nan)
    lengths = np.zeros((lists.query_names.size, len(keys)))
    for r, (key, q, d, s) in enumerate(zip(keys, lists.query, lists.doc, lists.score)):
        order, rank, length = _ranked(q, d, s)
        if method == "rrf":
            value = 1.0 / (k + rank + 1.0)
        elif method == "isr":
            value = 1.0 / (rank + 1.0) ** 2
        elif method == "bordafuse":
            value = -rank.astype(np.float64)  # C - i once C is known
        else:
            value = _normalised(s[order], rank, length, norm)
        values[np.searchsorted(pairs, key[order]), r] = value
        np.maximum.at(lengths[:, r], q[order], length)
    if method == "bordafuse":
        query = pairs // width
        candidates = np.bincount(query, minlength=lists.query_names.size).astype(np.float64)[query]
        unranked = (candidates[:, None] - lengths[query] + 1.0) / 2.0
        values = np.where(np.isnan(values), unranked, candidates[:, None] + values)
    return pairs, values


def _combined(values: np.ndarray, method: str, weights: np.ndarray | None) -> Any:
    """Each row's fused score, its values taken in sorted order (the same bits in any order of runs)."""
    present = ~np.isnan(values)
    if method == "max":  # a run that lacks the document counts as ranx's floor
        return np.where(present, values, -_ABSENT).max(axis=1)
    if method == "min":
        return np.where(present, values, _ABSENT).min(axis=1)
    terms = np.where(present, values * (1.0 if weights is None else weights[None, :]), 0.0)
    terms.sort(axis=1)
    total = np.zeros(terms.shape[0])
    for column in terms.T:  # one addition after the other, smallest first
        total = total + column
    count = present.sum(axis=1)
    if method in ("mnz", "isr"):
        return total * count
    if method == "anz":
        return total / count
    return total


def fuse_lists(lists: Lists, method: str, norm: str | None = "min-max",
               weights: Sequence[float] | None = None, k: float = 60.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The fused run: ``(query codes, doc codes, scores)``, each query's documents ranked as trec_eval ranks
    them (score descending, then docno descending)."""
    method = canonical_method(method)
    w = None
    if method == "wsum":
        if weights is None or len(weights) != len(lists.score):
            got = "none" if weights is None else f"{len(weights)}"
            raise ValueError(
                f"Argument `weights` must give one weight per run ({len(lists.score)}) for wsum, got {got}."
            )
        w = np.asarray(weights, dtype=np.float64)
        if not np.isfinite(w).all():
            raise ValueError(f"Argument `weights` must be finite numbers, got {list(weights)}.")
    elif weights is not None:
        raise ValueError(f"Argument `weights` is read by method 'wsum' only, got it with {method!r}.")
    if method == "rrf" and not (np.isfinite(k) and k >= 0):
        raise ValueError(f"Argument `k` must be a finite number, 0 or more, got {k!r}.")
    pairs, values = _contributions(lists, method, canonical_norm(norm), float(k))
    scores = _combined(values, method, w)
    width = max(lists.doc_names.size, 1)
    query, doc = pairs // width, pairs % width
    order = np.lexsort((-doc, -scores, query))
    return query[order], doc[order], scores[order]
