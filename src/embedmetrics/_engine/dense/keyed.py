"""Dense retrieval of keyed data: queries and documents named by keys (strings or integers, as
sentence-transformers and BEIR give them), relevant documents as a set of keys per query.

Everything is checked here, before anything is encoded or scanned: the keys become int64 codes (a
query's code is its position among the kept queries, a document's its rank among the sorted corpus
keys, so a run ordered by code breaks ties by key) and the relevance sets become qrels.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class KeyedQrels:
    """The codes of keyed data: ``qrels`` ``(n, 3)`` int64 ``(query_code, doc_code, 1)``,
    ``num_relevant`` per kept query (in their order), ``doc_codes`` ``(N,)`` int64 (the code of each
    corpus entry, in the corpus's order) and ``doc_keys`` (the corpus keys in code order)."""

    qrels: Tensor
    num_relevant: Tensor
    doc_codes: Tensor
    doc_keys: list[Hashable]


def _check_unique(name: str, keys: Sequence[Hashable]) -> None:
    seen: set[Hashable] = set()
    for key in keys:
        if key in seen:
            raise ValueError(f"Argument `{name}` must name each entry once, got the id {key!r} twice.")
        seen.add(key)


def _colliding(keys: Sequence[Hashable]) -> tuple[Hashable, Hashable]:
    """Two keys of different types that cannot be sorted together: two that print alike (``7`` and
    ``"7"``) where there are some, else the first key of each of the first two types (of one type: the
    first key and the first that does not compare with it)."""
    first: dict[type, Hashable] = {}
    printed: dict[str, Hashable] = {}
    for key in keys:
        first.setdefault(type(key), key)
        twin = printed.setdefault(str(key), key)
        if type(twin) is not type(key):
            return twin, key
    if len(first) > 1:
        a, b = list(first.values())[:2]
        return a, b
    return keys[0], next((k for k in keys[1:] if not _comparable(keys[0], k)), keys[-1])


def _comparable(a: Any, b: Any) -> bool:
    try:
        a < b  # noqa: B015
    except TypeError:
        return False
    return True


def _sorted_keys(name: str, keys: Sequence[Hashable]) -> list[Hashable]:
    try:
        return sorted(keys)  # type: ignore[type-var]
    except TypeError as error:
        a, b = _colliding(keys)
        alike = ", which print alike" if str(a) == str(b) else ""
        raise ValueError(
            f"Argument `{name}` must have ids of one comparable type (all str or all int), got "
            f"{sorted({type(k).__name__ for k in keys})}: the ids {a!r} ({type(a).__name__}) and {b!r} "
            f"({type(b).__name__}){alike}."
        ) from error


def _relevant_of(query: Hashable, docs: Any) -> list[Hashable]:
    if isinstance(docs, (str, bytes)) or not hasattr(docs, "__iter__"):
        raise ValueError(
            f"Argument `relevant_docs` must map each query id to a set of document ids, got {docs!r} "
            f"for query {query!r}."
        )
    listed = list(docs)
    if len(set(listed)) != len(listed):
        raise ValueError(
            f"Argument `relevant_docs` names a document more than once for query {query!r}: {listed!r}."
        )
    return listed


def keyed_qrels(
    query_keys: Sequence[Hashable], corpus_keys: Sequence[Hashable], relevant: Mapping[Hashable, Any]
) -> KeyedQrels:
    """Codes and qrels of keyed data (``query_keys``: the queries kept, those with relevant documents).

    Raises ``ValueError`` on a repeated key, keys that cannot be sorted, no query, or a relevant
    document that is not in the corpus (its relevance would count in every recall, never retrievable).
    """
    _check_unique("queries", query_keys)
    doc_keys, doc_codes = sorted_codes("corpus", corpus_keys)
    if not query_keys:
        raise ValueError(
            "Argument `relevant_docs` must give at least one relevant document to at least one query "
            "of `queries`, got none: there is nothing to evaluate."
        )
    code = {key: i for i, key in enumerate(doc_keys)}
    rows: list[tuple[int, int, int]] = []
    counts: list[int] = []
    for q, query in enumerate(query_keys):
        docs = _relevant_of(query, relevant[query])
        missing = [d for d in docs if d not in code]
        if missing:
            raise ValueError(
                f"Argument `relevant_docs` names documents absent from `corpus` for query {query!r}: "
                f"{missing[:3]!r}; add them to the corpus or drop them from the judgements."
            )
        rows += [(q, code[d], 1) for d in docs]
        counts.append(len(docs))
    return KeyedQrels(
        torch.tensor(rows, dtype=torch.int64).view(-1, 3),
        torch.tensor(counts, dtype=torch.int64),
        doc_codes,
        doc_keys,
    )


def sorted_codes(name: str, keys: Sequence[Hashable]) -> tuple[list[Hashable], Tensor]:
    """The keys in sorted order and each key's code (its place in that order) in the order given, int64:
    a run ordered by code orders ties by key. ``ValueError`` naming ``name`` on a repeated key or keys that
    cannot be sorted together."""
    _check_unique(name, keys)
    ordered = _sorted_keys(name, keys)
    code = {key: i for i, key in enumerate(ordered)}
    return ordered, torch.tensor([code[key] for key in keys], dtype=torch.int64)
