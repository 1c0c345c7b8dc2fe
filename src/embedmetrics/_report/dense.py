"""``report --queries --corpus --qrels``: dense retrieval of query embeddings against a corpus.

Embeddings come from ``.npy`` / ``.npz`` / ``.pt`` files; the ids of their rows from an ``ids`` array
in the same ``.npz`` / ``.pt`` file, else from a sidecar text file next to it (``queries.npy`` ->
``queries.ids.txt``, one id per line), else the row numbers. Qrels are a TREC file or a BEIR ``.tsv``.

The queries are read whole; the corpus (a file or a directory of shards, ``embedmetrics._io.corpus_files``)
is streamed block by block through the running lists of ``embedmetrics._engine.dense.stream``, so
memory does not grow with it. Document ids are coded without a string per document: a judged
document gets its code in the qrels (``EncodedQrels.docs``), any other ``len(docs) + its row``, which
orders the documents as coding every name in corpus order would; the names of the documents of a
written run are read back from the ids files.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from embedmetrics._io.arrays import as_embeddings, check_numpy_file, load_array
from embedmetrics._io.corpus_files import (
    IDS_KEY,
    CorpusFiles,
    JudgedRows,
    blocks,
    index_ids,
    names_at,
    open_corpus,
    sidecar_path,
)
from embedmetrics._io.errors import ReportInputError
from embedmetrics._report.checkpoint import Checkpoint, file_fingerprint
from embedmetrics.qrels import EncodedQrels, IdMap, read_qrels


@dataclass
class DenseInputs:
    """The queries (whole) with their ids coded by the qrels' id map, the corpus (streamed), the
    rows of its judged documents, the qrels, and the fingerprints of the queries' and qrels' files."""

    queries: torch.Tensor
    query_ids: torch.Tensor
    corpus: CorpusFiles
    judged: JudgedRows
    qrels: EncodedQrels
    files: dict[str, Any]

    def corpus_codes(self, start: int, n: int) -> torch.Tensor:
        """The codes of the global corpus rows ``[start, start + n)`` (see the module docstring)."""
        codes = np.arange(start, start + n, dtype=np.int64) + len(self.qrels.docs)
        lo, hi = np.searchsorted(self.judged.rows, [start, start + n])
        codes[self.judged.rows[lo:hi] - start] = self.judged.codes[lo:hi]
        return torch.from_numpy(codes)

    def doc_names(self, codes: torch.Tensor) -> DocNames:
        """The names of the documents ``codes`` holds (those of the qrels, others read back)."""
        base = len(self.qrels.docs)
        values = codes.reshape(-1)
        rows = (values[values >= base] - base).numpy()
        return DocNames(self.qrels.docs, base, names_at(self.corpus, rows))


@dataclass
class DocNames:
    """Document codes back to names, as ``IdMap.decode`` (``-1``: ``""``): below ``base`` the qrels'
    names, else the names of the rows read back."""

    docs: IdMap
    base: int
    rows: dict[int, str]

    def decode(self, codes: Iterable[int] | torch.Tensor) -> list[str]:
        values = codes.reshape(-1).tolist() if isinstance(codes, torch.Tensor) else list(codes)
        return [
            "" if c < 0 else self.docs.names[c] if c < self.base else self.rows[c - self.base]
            for c in map(int, values)
        ]


def _row_names(path: str, key: str | None, n_rows: int) -> list[str]:
    """The ids of the rows of an embeddings file (see the module docstring)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".npz", ".pt", ".pth") and key is not None:
        try:
            ids = load_array(path, key=IDS_KEY)
        except ReportInputError:
            ids = None
        if ids is not None:
            return _check_count([str(v) for v in ids.reshape(-1).tolist()], n_rows, f"{path}[{IDS_KEY!r}]")
    side = sidecar_path(path)
    if os.path.exists(side):
        with open(side, encoding="utf-8-sig") as handle:
            names = [line.strip() for line in handle if line.strip()]
        return _check_count(names, n_rows, side)
    return [str(i) for i in range(n_rows)]


def _check_count(names: list[str], n_rows: int, where: str) -> list[str]:
    if len(names) != n_rows:
        raise ReportInputError(f"{where}: {len(names)} ids for {n_rows} embedding rows; one id per row.")
    if len(set(names)) != len(names):
        raise ReportInputError(f"{where}: ids must be unique.")
    return names


def _embeddings(path: str, key: str | None, flag: str) -> tuple[torch.Tensor, list[str]]:
    check_numpy_file(path, flag)
    suffix = os.path.splitext(path)[1].lower()
    chosen = key
    if chosen is None and suffix in (".npz", ".pt", ".pth"):
        chosen = _only_embeddings_key(path)
    z = as_embeddings(load_array(path, key=chosen, flag=flag), path)
    return z, _row_names(path, chosen, z.shape[0])


def _only_embeddings_key(path: str) -> str | None:
    """In a file holding ``ids`` and one other array, that other array (else let the loader decide)."""
    if path.lower().endswith(".npz"):
        with np.load(path, allow_pickle=False) as npz:
            names = list(npz.files)
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            return None
        names = [str(k) for k in obj] if isinstance(obj, dict) else []
    others = [n for n in names if n != IDS_KEY]
    return others[0] if IDS_KEY in names and len(others) == 1 else None


def load_dense(queries: str, corpus: str, qrels: str, key: str | None) -> DenseInputs:
    """Read the queries and the qrels, open the corpus (its headers checked, its ids read once: unique,
    the judged ones found); query ids become the codes of the qrels' id map (new ids get new codes)."""
    try:
        encoded = read_qrels(qrels)
    except (OSError, ValueError) as err:
        raise ReportInputError(" ".join(str(err).split()) or f"{qrels}: cannot read it.") from None
    q, q_names = _embeddings(queries, key, "--queries")
    files = open_corpus(corpus, key, "--corpus")
    if q.shape[1] != files.width:
        raise ReportInputError(
            f"{corpus}: corpus embeddings have {files.width} features, "
            f"the queries in {queries} have {q.shape[1]}."
        )
    judged = len(encoded.queries)  # codes below this are the qrels' own query ids
    query_codes = encoded.queries.encode(q_names)
    if not bool((query_codes < judged).any()):
        raise ReportInputError(
            f"{qrels}: no query of {queries} is judged (none of its {len(q_names)} query ids, "
            f"first: {q_names[:1]}, has a line in the qrels); check the ids files."
        )
    rows = index_ids(files, {name: code for code, name in enumerate(encoded.docs.names)})
    dtype = torch.float64 if files.float64 or q.dtype == torch.float64 else torch.float32
    fingerprints: dict[str, Any] = {
        "queries": file_fingerprint(queries),
        "query_ids": file_fingerprint(sidecar_path(queries)),
        "qrels": file_fingerprint(qrels),
        "key": key,
        "corpus": files.fingerprint(),
    }
    return DenseInputs(q.to(dtype), query_codes, files, rows, encoded, fingerprints)


def stream_corpus(
    data: DenseInputs, fixed: Any, *, block_rows: int, checkpoint: Checkpoint | None, bar: Callable[..., Any]
) -> Any:
    """The running lists of every corpus row (``fold_chunk`` block by block, from the checkpoint's
    rows on), saved to ``checkpoint`` as they go; ``bar(total=, desc=, unit=)``: a progress bar."""
    from embedmetrics._engine.dense.stream import fold_chunk

    n_rows, dtype = data.corpus.rows, data.queries.dtype
    start, lists = (0, fixed.empty_lists()) if checkpoint is None else checkpoint.resume(fixed, n_rows)
    total = sum(
        math.ceil(max(0, min(s.rows, first + s.rows - start)) / block_rows)
        for s, first in zip(data.corpus.shards, data.corpus.starts.tolist())
    )
    began = time.monotonic()
    with bar(total=total, desc="dense: corpus blocks", unit="block") as shown:
        for done, (row, block) in enumerate(blocks(data.corpus, start, block_rows), start=1):
            n = block.shape[0]
            lists = fold_chunk(fixed, lists, torch.from_numpy(block).to(dtype), data.corpus_codes(row, n))
            if checkpoint is not None:
                checkpoint.save(row + n, lists)
            rate = (row + n - start) / max(time.monotonic() - began, 1e-9)
            shown.n = done
            shown.set_postfix_str(f"{row + n:,}/{n_rows:,} rows, {rate:,.0f} rows/s")
            shown.refresh()
    if checkpoint is not None:
        checkpoint.save(n_rows, lists, now=True)
    return lists


def write_run(
    path: str, query_ids: torch.Tensor, run: tuple[Any, Any], queries: IdMap, docs: IdMap | DocNames
) -> None:
    """A TREC run file (``qid Q0 docno rank score embedmetrics``) from the retrieved lists; ``docs``
    decodes their document codes (``DenseInputs.doc_names``)."""
    ids, scores = run
    names = queries.decode(query_ids)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            for qname, row_ids, row_scores in zip(names, ids.tolist(), scores.tolist()):
                for rank, (doc, score) in enumerate(zip(docs.decode(row_ids), row_scores), start=1):
                    if doc:
                        handle.write(f"{qname} Q0 {doc} {rank} {score!r} embedmetrics\n")
    except OSError as err:
        raise ReportInputError(f"{path}: cannot write the run: {err.strerror or err}.") from None
