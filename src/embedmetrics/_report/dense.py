"""``report --queries --corpus --qrels``: dense retrieval of query embeddings against a corpus.

Embeddings come from ``.npy`` / ``.npz`` / ``.pt`` files; the ids of their rows from an ``ids`` array
in the same ``.npz`` / ``.pt`` file, else from a sidecar text file next to it (``queries.npy`` ->
``queries.ids.txt``, one id per line), else the row numbers. Qrels are a TREC file or a BEIR ``.tsv``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from embedmetrics._io.arrays import as_embeddings, load_array
from embedmetrics._io.errors import ReportInputError
from embedmetrics.qrels import EncodedQrels, IdMap, read_qrels

IDS_KEY = "ids"


@dataclass
class DenseInputs:
    """Query and corpus embeddings with their ids coded by the qrels' id maps."""

    queries: torch.Tensor
    query_ids: torch.Tensor
    corpus: torch.Tensor
    corpus_ids: torch.Tensor
    qrels: EncodedQrels


def sidecar_path(path: str) -> str:
    """``dir/name.npy`` -> ``dir/name.ids.txt``."""
    return os.path.splitext(path)[0] + ".ids.txt"


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


def _embeddings(path: str, key: str | None) -> tuple[torch.Tensor, list[str]]:
    suffix = os.path.splitext(path)[1].lower()
    chosen = key
    if chosen is None and suffix in (".npz", ".pt", ".pth"):
        chosen = _only_embeddings_key(path)
    z = as_embeddings(load_array(path, key=chosen), path)
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
    """Read the three inputs; ids become the codes of the qrels' id maps (new ids get new codes)."""
    try:
        encoded = read_qrels(qrels)
    except (OSError, ValueError) as err:
        raise ReportInputError(" ".join(str(err).split()) or f"{qrels}: cannot read it.") from None
    q, q_names = _embeddings(queries, key)
    c, c_names = _embeddings(corpus, key)
    if q.shape[1] != c.shape[1]:
        raise ReportInputError(
            f"{corpus}: corpus embeddings have {c.shape[1]} features, "
            f"the queries in {queries} have {q.shape[1]}."
        )
    judged = len(encoded.queries)  # codes below this are the qrels' own query ids
    query_codes = encoded.queries.encode(q_names)
    if not bool((query_codes < judged).any()):
        raise ReportInputError(
            f"{qrels}: no query of {queries} is judged (none of its {len(q_names)} query ids, "
            f"first: {q_names[:1]}, has a line in the qrels); check the ids files."
        )
    dtype = torch.promote_types(q.dtype, c.dtype)
    return DenseInputs(q.to(dtype), query_codes, c.to(dtype), encoded.docs.encode(c_names), encoded)


def write_run(path: str, query_ids: torch.Tensor, run: tuple[Any, Any], queries: IdMap, docs: IdMap) -> None:
    """A TREC run file (``qid Q0 docno rank score embedmetrics``) from the retrieved lists."""
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
