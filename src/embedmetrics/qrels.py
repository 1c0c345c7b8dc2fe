"""String ids to int64 ids and back, for [`DenseRetrieval`][embedmetrics.DenseRetrieval] and its twin.

BEIR and TREC name queries and documents with strings; the metrics take int64 tensors. An
``IdMap`` gives each name a code (0, 1, 2, ... in order of first appearance) and turns codes
back into names; ``encode_qrels`` turns BEIR's ``{query_id: {doc_id: relevance}}`` dict into the
``(n, 3)`` qrels tensor with one map per role, and ``read_qrels`` does the same for a TREC qrels
file (``qid iter docno rel``) or a BEIR qrels ``.tsv`` (header ``query-id corpus-id score``).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["EncodedQrels", "IdMap", "encode_qrels", "read_qrels"]


@dataclass
class IdMap:
    """A two-way map between string ids and int64 codes.

    Examples:
        >>> from embedmetrics.qrels import IdMap
        >>> ids = IdMap()
        >>> ids.encode(["doc7", "doc2", "doc7"])
        tensor([0, 1, 0])
        >>> ids.decode([1, 0])
        ['doc2', 'doc7']
    """

    names: list[str] = field(default_factory=list)
    _codes: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._codes = {}
        for name in self.names:
            self._codes.setdefault(str(name), len(self._codes))
        self.names = list(self._codes)

    def __len__(self) -> int:
        return len(self.names)

    def encode(self, names: Iterable[object], *, add: bool = True) -> Tensor:
        """The codes of ``names`` (``str`` of each); new names get new codes unless ``add=False``
        (then an unknown name raises ``KeyError``)."""
        out = []
        for name in names:
            key = str(name)
            code = self._codes.get(key)
            if code is None:
                if not add:
                    raise KeyError(f"Unknown id {key!r}.")
                code = self._codes[key] = len(self.names)
                self.names.append(key)
            out.append(code)
        return torch.tensor(out, dtype=torch.int64)

    def decode(self, codes: Iterable[int] | Tensor) -> list[str]:
        """The names of ``codes`` (a tensor of any shape is flattened); ``-1`` (run padding) gives ``""``."""
        values = codes.reshape(-1).tolist() if isinstance(codes, Tensor) else list(codes)
        return ["" if int(c) < 0 else self.names[int(c)] for c in values]


@dataclass
class EncodedQrels:
    """A ``(n, 3)`` int64 qrels tensor and the id maps of its queries and documents."""

    qrels: Tensor
    queries: IdMap
    docs: IdMap


def encode_qrels(qrels: Mapping[Any, Mapping[Any, Any]]) -> EncodedQrels:
    """BEIR-style ``{query_id: {doc_id: relevance}}`` as int64 qrels and the two id maps.

    Examples:
        >>> from embedmetrics.qrels import encode_qrels
        >>> encoded = encode_qrels({"q1": {"d3": 1, "d9": 0}, "q2": {"d3": 2}})
        >>> encoded.qrels
        tensor([[0, 0, 1],
                [0, 1, 0],
                [1, 0, 2]])
        >>> encoded.docs.names
        ['d3', 'd9']
    """
    queries, docs = IdMap(), IdMap()
    rows: list[tuple[int, int, int]] = []
    for qid, judged in qrels.items():
        q = int(queries.encode([qid])[0])
        for did, rel in judged.items():
            rows.append((q, int(docs.encode([did])[0]), _grade(rel, f"qrels[{qid!r}][{did!r}]")))
    table = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
    return EncodedQrels(table, queries, docs)


def _grade(value: object, where: str) -> int:
    """An integer relevance grade (``int`` or integer text)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{where}: relevance {value!r} is not an integer.") from None


def read_qrels(path: str | os.PathLike[str]) -> EncodedQrels:
    """Read a TREC qrels file (``qid iter docno rel``) or a BEIR qrels ``.tsv`` (a header line
    starting with ``query-id``, then ``query-id corpus-id score``); errors name the line."""
    path = os.fspath(path)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        first = handle.readline()
    if first.split() and first.split()[0] == "query-id":
        return _read_beir(path)
    from embedmetrics._io.trec import read_qrels as read_trec

    table = read_trec(path)
    qid, query_names = _by_first_appearance(table.qid, table.queries)
    docno, doc_names = _by_first_appearance(table.docno, table.docs)
    qrels = torch.from_numpy(np.stack([qid, docno, table.rel], axis=1))
    return EncodedQrels(qrels, IdMap(list(query_names)), IdMap(list(doc_names)))


def _by_first_appearance(codes: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The TREC reader's codes (sorted names) renumbered in order of first appearance, as ``IdMap``
    numbers names, and the names in that order."""
    from embedmetrics._io.id_codes import first_appearance_codes

    renumbered, first = first_appearance_codes(codes)
    return renumbered, names[codes[first]]


def _read_beir(path: str) -> EncodedQrels:
    judged: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        next(reader)
        for number, fields in enumerate(reader, start=2):
            if not fields or not "".join(fields).strip():
                continue
            if len(fields) != 3:
                raise ValueError(
                    f"{path}:{number}: expected 3 tab-separated fields (query-id corpus-id score)."
                )
            q, d = fields[0].strip(), fields[1].strip()
            if d in judged.setdefault(q, {}):
                raise ValueError(f"{path}:{number}: document {d!r} appears twice for query {q!r}.")
            judged[q][d] = _grade(fields[2], f"{path}:{number}")
    return encode_qrels(judged)
