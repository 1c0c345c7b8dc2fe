"""Exact search for MTEB's retrieval and reranking tasks: ``mteb.evaluate(ExactSearch(model), tasks)``.

``ExactSearch`` implements mteb's search protocol (``index`` / ``search``, as its ``SearchEncoderWrapper``
does) around any mteb encoder; ``ExactIndex`` implements its ``IndexEncoderSearchProtocol``
(``add_documents`` / ``search`` / ``clear``) for users who keep ``SearchEncoderWrapper``. Both rank the
documents by the dense engine's canonical keys (the similarity of a pair computed from its two rows alone,
in the embeddings' dtype) and order tied documents by id, descending, as mteb's metrics and pytrec_eval order
them: each query's list is the first ``top_k`` of the whole corpus, the same under any corpus chunk size,
corpus order or encode batch size, wherever the encoder gives the same embeddings. The scores returned are
those keys as similarities (float32 values for float32 embeddings), so mteb's metrics sort them as they were
ranked. ``ExactSearch`` holds no corpus embeddings: ``index`` keeps the corpus dataset (as mteb's wrapper
does) and ``search``, which knows the queries, encodes and folds one ``corpus_chunk_size`` chunk at a time.

Under a ``torch.distributed`` process group (torchrun, Lightning, accelerate) each process encodes and scans
the chunks ``rank::world`` of the corpus and the lists of every process are merged exactly: every process
returns the same results, those of one process. mteb applies ``ignore_identical_ids`` and
``skip_first_result`` to the returned results itself, after the search, as it does for its own search.
Imported only on demand (``mteb`` is an optional extra).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from tqdm.auto import tqdm

from embedmetrics._engine.core.checks import check_finite
from embedmetrics._engine.dense.exact_lists import DocFactors
from embedmetrics._engine.dense.keyed import sorted_codes
from embedmetrics._engine.dense.measures import dense_options
from embedmetrics._engine.dense.options import OPTIONS
from embedmetrics._engine.dense.saved import read_state, write_state
from embedmetrics._engine.dense.scan import query_side
from embedmetrics._engine.dense.search import RunSearch
from embedmetrics._engine.dense.stream import RunningLists, check_corpus_part
from embedmetrics._engine.settings.arguments import check_int, check_positive_int
from embedmetrics._engine.settings.options import read_options

__all__ = ["ExactIndex", "ExactSearch"]

logger = logging.getLogger(__name__)

#: mteb's similarity names this search ranks by (the model's ``mteb_model_meta.similarity_fn_name``).
SIMILARITIES = {"cosine": "cosine", "dot": "dot"}

Results = dict[str, dict[str, float]]


def similarity_of(model: Any) -> str:
    """The dense engine's similarity for an mteb model (``cosine`` where its metadata names none, as mteb's
    own similarity does); ``ValueError`` naming any other."""
    if not hasattr(model, "mteb_model_meta"):
        raise ValueError(
            f"Argument `model` must be an mteb encoder with `mteb_model_meta` (its similarity), got "
            f"{type(model).__name__}."
        )
    name = getattr(model.mteb_model_meta, "similarity_fn_name", None)
    value = "cosine" if name is None else str(getattr(name, "value", name))
    if value not in SIMILARITIES:
        raise ValueError(
            f"Argument `model`: its similarity_fn_name must be one of {sorted(SIMILARITIES)} for an exact "
            f"search, got {value!r}."
        )
    return SIMILARITIES[value]


def _as_rows(name: str, embeddings: Any) -> Tensor:
    """An encoder's output as a 2-D floating tensor on the CPU, in the dtype mteb's own similarity scores it
    in (``mteb.similarity_functions``): arrays as float32, tensors below 32 bits (float16, bfloat16)
    upcast to float32, other tensors as they are."""
    if isinstance(embeddings, Tensor):
        rows = embeddings.detach()
        if not rows.is_floating_point() or torch.finfo(rows.dtype).bits < 32:
            rows = rows.float()
    else:
        rows = torch.as_tensor(np.asarray(embeddings), dtype=torch.float32)
    if rows.ndim != 2 or not rows.is_floating_point():
        raise ValueError(
            f"Argument `{name}` must be 2-D floating embeddings, got shape {tuple(rows.shape)} and dtype "
            f"{rows.dtype}."
        )
    check_finite(name, rows)
    return rows.cpu()


def id_column(dataset: Any) -> list[Any]:
    """A dataset's ``id`` column as a list, read whole (a ``datasets`` column iterated row by row formats
    each row: 8x slower)."""
    return list(dataset["id"][:])


def _options(depth: int, similarity: str, block_bytes: int | None) -> Any:
    values = read_options(
        "ExactSearch",
        OPTIONS["DenseSearch"],
        {"depth": depth, "similarity": similarity, "block_bytes": block_bytes},
    )
    return dense_options(
        {
            **values,
            "k": 1,
            "metrics": ["hit_rate"],
            "ties": "average",
            "aggregation": "none",
            "return_run": False,
        }
    )


def _results(
    query_ids: Sequence[Hashable], doc_keys: Sequence[Hashable], codes: Tensor, keys: Tensor
) -> Results:
    """mteb's results dict: per query its listed documents with their scores (minus the canonical key)."""
    out: Results = {}
    for qid, row_codes, row_keys in zip(query_ids, codes.tolist(), keys.tolist()):
        out[str(qid)] = {str(doc_keys[c]): 0.0 - k for c, k in zip(row_codes, row_keys) if c >= 0}
    return out


def _lists(places: Tensor, codes: Tensor, keys: Tensor) -> tuple[list[list[float]], list[list[int]]]:
    """An index backend's answer: per query the scores (minus the keys) and places of its listed codes."""
    listed = [row.count(True) for row in (codes >= 0).tolist()]  # listed entries come first in a row
    scores = [[0.0 - k for k in row[:n]] for row, n in zip(keys.tolist(), listed)]
    return scores, [row[:n] for row, n in zip(places.tolist(), listed)]


def process_share() -> tuple[int, int]:
    """``(rank, world size)`` of this process in the default ``torch.distributed`` group (``(0, 1)``
    without one): each process encodes and scans the chunks ``rank::world`` of the corpus."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def exact_top(
    queries: Tensor, chunks: Any, top_k: int, similarity: str, block_bytes: int | None = None
) -> Any:
    """``(codes, keys)`` ``(Q, min(top_k, documents))``: each query's first ``top_k`` documents of the
    ``(rows, codes)`` chunks by canonical key, ties by code descending."""
    search = RunSearch.start(queries, _options(top_k, similarity, block_bytes), True, True)
    for rows, codes in chunks:
        search.add(rows, codes)
    return search.ranked()


def rerank_top(
    queries: Tensor,
    chunks: Any,
    candidates: Sequence[Tensor],
    top_k: int,
    similarity: str,
    distributed: bool = False,
) -> tuple[Tensor, Tensor]:
    """Per query its candidate codes (``candidates[i]``) ranked by canonical key within the ``(rows,
    codes)`` chunks holding them, ties by code descending, the first ``top_k``: ``(codes, keys)``, each
    ``(Q, width)``, ``-1`` / ``+inf`` padding a query of fewer; ``distributed``: the chunks of every process
    (a collective)."""
    q = query_side(queries, similarity, queries.dtype)
    rows_of = torch.cat([torch.full((c.numel(),), i, dtype=torch.int64) for i, c in enumerate(candidates)])
    wanted = torch.cat(list(candidates)) if candidates else torch.zeros(0, dtype=torch.int64)
    keys = torch.full(wanted.shape, float("inf"), dtype=torch.float64)
    for rows, codes in chunks:
        rows = check_corpus_part("corpus chunk", rows, queries, True)
        docs = DocFactors(rows, codes, similarity, queries.dtype)
        here = (docs.holds(wanted) >= 0).nonzero().flatten()
        if here.numel() > 0:
            keys[here] = docs.dots(q, rows_of[here], wanted[here])
    if distributed:  # each candidate is held by one process: the others' keys are +inf
        dist.all_reduce(keys, op=dist.ReduceOp.MIN)
    order = torch.argsort(
        -wanted, stable=True
    )  # by query, then key, then code descending: three stable sorts
    order = order[torch.argsort(keys[order], stable=True)]
    order = order[torch.argsort(rows_of[order], stable=True)]
    counts = torch.bincount(rows_of, minlength=len(candidates))
    row = rows_of[order]
    place = torch.arange(order.numel()) - (counts.cumsum(0) - counts)[row]
    kept = place < top_k
    width = min(top_k, int(counts.max())) if counts.numel() else 0
    codes = torch.full((len(candidates), width), -1, dtype=torch.int64)
    found = torch.full((len(candidates), width), float("inf"), dtype=torch.float64)
    codes[row[kept], place[kept]] = wanted[order][kept]
    found[row[kept], place[kept]] = keys[order][kept]
    return codes, found


def corpus_digest(corpus: Any, chunk: int) -> str:
    """SHA-256 of every column of a corpus dataset (ids, texts, titles, ...), in order, read ``chunk`` rows
    at a time (never the whole corpus at once); the same for any ``chunk``."""
    columns: dict[str, Any] = {}
    for start in range(0, len(corpus), chunk):
        for name, values in corpus[start : start + chunk].items():
            digest = columns.setdefault(name, hashlib.sha256(name.encode()))
            digest.update("".join(f"{value}\0" for value in values).encode())
    return hashlib.sha256("".join(columns[name].hexdigest() for name in sorted(columns)).encode()).hexdigest()


def search_fingerprint(
    model: Any, queries: Tensor, query_ids: Sequence[Any], corpus: str, settings: dict[str, Any]
) -> dict[str, Any]:
    """What a search's running lists depend on: the model (name and revision), the queries (ids and
    embeddings), the corpus (``corpus_digest``) and the settings, as comparable values."""
    meta = getattr(model, "mteb_model_meta", None)
    asked = hashlib.sha256("\0".join(map(str, query_ids)).encode())
    asked.update(queries.contiguous().numpy().tobytes())
    name = f"{getattr(meta, 'name', None)}@{getattr(meta, 'revision', None)}"
    return {
        "format": 1,
        "model": name,
        "queries": asked.hexdigest(),
        "corpus": corpus,
        **settings,
    }


@dataclass
class Resume:
    """``checkpoint_dir``'s file for one task split on one process: the running lists and the chunks done,
    saved after every chunk (atomically), refused for another fingerprint, removed when the search ends."""

    path: str
    fingerprint: dict[str, Any]

    @classmethod
    def open(cls, directory: str, context: dict[str, Any], rank: int, fingerprint: dict[str, Any]) -> Resume:
        os.makedirs(directory, exist_ok=True)
        task = getattr(context.get("task_metadata"), "name", "task")
        name = f"{task}-{context.get('hf_subset')}-{context.get('hf_split')}.rank{rank}.pt"
        return cls(os.path.join(directory, re.sub(r"[^\w.-]", "_", name)), fingerprint)

    def restore(self, search: RunSearch) -> int:
        """The chunks done, their lists put into ``search`` (0 without a checkpoint)."""
        state = read_state(self.path)
        if state is None:
            return 0
        saved = state.get("fingerprint", {})
        for key, value in self.fingerprint.items():
            if saved.get(key) != value:
                other = "" if key in ("queries", "corpus") else f": {saved.get(key)!r} there, {value!r} here"
                raise ValueError(
                    f"{self.path}: this checkpoint was made for another {key}{other}; delete it or choose "
                    "another checkpoint_dir."
                )
        lists = RunningLists(**state["lists"])
        if {k: t.shape for k, t in lists.as_dict().items()} != {
            k: t.shape for k, t in search.lists.as_dict().items()
        }:
            raise ValueError(f"{self.path}: the saved lists do not fit these queries; delete it.")
        search.lists = lists
        return int(state["chunks_done"])

    def save(self, done: int, search: RunSearch) -> None:
        write_state(
            self.path, {"fingerprint": self.fingerprint, "chunks_done": done, "lists": search.lists.as_dict()}
        )

    def finish(self) -> None:
        """The search is complete: its checkpoint is no longer needed."""
        if os.path.exists(self.path):
            os.remove(self.path)


class ExactSearch:
    """An exact mteb search model around an mteb encoder (see the module docstring).

    Args:
        model: an mteb encoder (``encode``, ``mteb_model_meta`` with ``similarity_fn_name`` ``"cosine"`` or
            ``"dot"``; ``None`` reads as cosine).
        corpus_chunk_size: documents encoded and folded at once (memory: one chunk's embeddings, the
            queries and ``queries × top_k`` list entries).
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
        checkpoint_dir: where each process saves its running lists after every chunk (one file per task
            split and process, removed when the split's search ends): a killed evaluation run again with
            the same ``checkpoint_dir`` goes on from the last chunk saved, with the same results; a file
            of another model, corpus, query set or setting is refused.

    Example:
        ``mteb.evaluate(ExactSearch(model), tasks)`` where ``mteb.evaluate(model, tasks)`` ran mteb's own
        search (the MTEB page of the docs).
    """

    def __init__(
        self,
        model: Any,
        corpus_chunk_size: int = 50_000,
        block_bytes: int | None = None,
        checkpoint_dir: str | None = None,
    ) -> None:
        self.model = model
        self.similarity = similarity_of(model)
        self.corpus_chunk_size = check_positive_int("corpus_chunk_size", corpus_chunk_size)
        self.block_bytes = block_bytes
        self.checkpoint_dir = checkpoint_dir
        self.task_corpus: Any = None

    @property
    def mteb_model_meta(self) -> Any:
        """The encoder's metadata (mteb names the results after it)."""
        return self.model.mteb_model_meta

    def index(self, corpus: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, **kwargs: Any) -> None:
        """Keep the corpus dataset (not its embeddings): ``search`` encodes it chunk by chunk."""
        self.task_corpus = corpus

    def _encode(self, data: Any, prompt: str, context: dict[str, Any]) -> Tensor:
        from mteb._create_dataloaders import create_dataloader
        from mteb.types import PromptType

        encode_kwargs = context["encode_kwargs"]
        prompt_type = PromptType.query if prompt == "query" else PromptType.document
        loader = create_dataloader(
            data, task_metadata=context["task_metadata"], prompt_type=prompt_type,
            batch_size=encode_kwargs.get("batch_size", 32), num_proc=context.get("num_proc"),
        )  # fmt: skip
        rows = self.model.encode(
            loader, task_metadata=context["task_metadata"], hf_split=context["hf_split"],
            hf_subset=context["hf_subset"], prompt_type=prompt_type, **encode_kwargs,
        )  # fmt: skip
        return _as_rows(f"{prompt} embeddings", rows)

    def _chunks(self, codes: Tensor, context: dict[str, Any], skip: int = 0) -> Any:
        """This process's chunks (``rank::world`` of them; the first ``skip`` left out), encoded one at a
        time, with their codes."""
        corpus = self.task_corpus
        rank, world = process_share()
        starts = range(0, len(corpus), self.corpus_chunk_size)[rank::world][skip:]
        shown = context["encode_kwargs"].get("show_progress_bar", True)
        for start in tqdm(starts, desc="Searching corpus chunks (exact)", disable=not shown):
            stop = min(start + self.corpus_chunk_size, len(corpus))
            yield self._encode(corpus.select(range(start, stop)), "document", context), codes[start:stop]

    def search(self, queries: Any, *, top_k: int, top_ranked: Any = None, **context: Any) -> Results:
        """Each query's first ``top_k`` documents of the whole corpus (or of its ``top_ranked`` candidates),
        as mteb's results dict ``{query_id: {doc_id: score}}``."""
        if self.task_corpus is None:
            raise ValueError("Corpus must be indexed before searching.")
        query_ids = id_column(queries)
        if check_int("top_k", top_k, least=0) == 0:  # as mteb's own search: no document for any query
            return {str(qid): {} for qid in query_ids}
        # ids compared as the strings mteb's metrics and pytrec_eval compare (ties: descending string order)
        doc_keys, codes = sorted_codes("corpus", [str(key) for key in id_column(self.task_corpus)])
        q = self._encode(queries, "query", context)
        try:
            if top_ranked is None:
                found, keys = self._full_search(q, query_ids, codes, top_k, context)
                return _results(query_ids, doc_keys, found, keys)
            return self._rerank(q, query_ids, doc_keys, codes, top_ranked, top_k, context)
        finally:
            self.task_corpus = None  # as mteb's own search: the corpus is released after the search

    def _full_search(
        self, q: Tensor, query_ids: list[Any], codes: Tensor, top_k: int, context: dict[str, Any]
    ) -> tuple[Tensor, Tensor]:
        """Every chunk of this process folded into the running lists (after those a checkpoint holds,
        saved after each chunk), then every process's lists merged."""
        rank, world = process_share()
        search = RunSearch.start(q, _options(top_k, self.similarity, self.block_bytes), True, True)
        resume = None
        if self.checkpoint_dir is not None:
            settings = {"top_k": top_k, "corpus_chunk_size": self.corpus_chunk_size, "world_size": world}
            digest = corpus_digest(self.task_corpus, self.corpus_chunk_size)
            fingerprint = search_fingerprint(self.model, q, query_ids, digest, settings)
            resume = Resume.open(self.checkpoint_dir, context, rank, fingerprint)
        done = 0 if resume is None else resume.restore(search)
        for rows, chunk_codes in self._chunks(codes, context, skip=done):
            search.add(rows, chunk_codes)
            done += 1
            if resume is not None:
                resume.save(done, search)
        found = search.ranked(world > 1)
        if resume is not None:
            resume.finish()
        return found

    def _rerank(
        self,
        q: Tensor,
        query_ids: list[Any],
        doc_keys: list[Hashable],
        codes: Tensor,
        top_ranked: Mapping[Any, Sequence[Any]],
        top_k: int,
        context: dict[str, Any],
    ) -> Results:
        code = {key: i for i, key in enumerate(doc_keys)}
        candidates = []
        for qid in query_ids:
            if qid not in top_ranked:
                logger.warning(f"No pre-ranked documents found for query {qid}")
            listed = [code[str(d)] for d in top_ranked.get(qid, [])]
            candidates.append(torch.tensor(listed, dtype=torch.int64))
        distributed = process_share()[1] > 1
        found, keys = rerank_top(
            q, self._chunks(codes, context), candidates, top_k, self.similarity, distributed
        )
        return _results(query_ids, doc_keys, found, keys)


class ExactIndex:
    """mteb's ``IndexEncoderSearchProtocol`` with exact ties (``SearchEncoderWrapper(model,
    index_backend=ExactIndex())``): mteb hands it the whole corpus's embeddings, so it holds them, as
    every index backend does; ``ExactSearch`` holds none.

    Args:
        similarity: ``"cosine"`` or ``"dot"``; ``None`` (default) reads it from the model whose
            ``similarity`` mteb passes to ``search`` (its ``mteb_model_meta.similarity_fn_name``).
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
    """

    def __init__(self, similarity: str | None = None, block_bytes: int | None = None) -> None:
        if similarity is not None and similarity not in SIMILARITIES.values():
            raise ValueError(
                f"Argument `similarity` must be one of {sorted(SIMILARITIES)}, got {similarity!r}."
            )
        self.similarity, self.block_bytes = similarity, block_bytes
        self.clear()

    def _similarity(self, similarity_fn: Any) -> str:
        """The similarity given, checked against the model's where mteb passes a model's method."""
        model = getattr(similarity_fn, "__self__", None)
        declared = similarity_of(model) if hasattr(model, "mteb_model_meta") else None
        if self.similarity is not None and declared is not None and declared != self.similarity:
            raise ValueError(
                f"Argument `similarity` of ExactIndex is {self.similarity!r}, but the model declares "
                f"{declared!r}: leave it None to read the model's."
            )
        if self.similarity is None and declared is None:
            raise ValueError(
                "Argument `similarity` of ExactIndex must be given where mteb's `similarity_fn` is not a "
                f"model's method, got similarity_fn={similarity_fn!r}."
            )
        return self.similarity or str(declared)

    def clear(self) -> None:
        """Forget every document."""
        self.rows: list[Tensor] = []
        self.ids: list[str] = []

    def add_documents(self, embeddings: Any, idxs: list[str]) -> None:
        """Add documents (their embeddings and ids, in the positions ``search`` returns)."""
        rows = _as_rows("embeddings", embeddings)
        if rows.shape[0] != len(idxs):
            raise ValueError(
                f"Argument `idxs` must name each of the {rows.shape[0]} rows, got {len(idxs)} ids."
            )
        if self.rows and (rows.shape[1], rows.dtype) != (self.rows[0].shape[1], self.rows[0].dtype):
            raise ValueError(
                f"Argument `embeddings` must have the width and dtype of the documents added before "
                f"({self.rows[0].shape[1]}, {self.rows[0].dtype}), got {rows.shape[1]} and {rows.dtype}."
            )
        self.rows.append(rows)
        self.ids += [str(i) for i in idxs]

    def search(
        self,
        embeddings: Any,
        top_k: int,
        similarity_fn: Any = None,
        top_ranked: Mapping[str, Sequence[str]] | None = None,
        query_idx_to_id: Mapping[int, str] | None = None,
    ) -> tuple[list[list[float]], list[list[int]]]:
        """``(scores, positions)`` per query: its first ``top_k`` documents (positions among the added
        ones; with ``top_ranked``, positions in the query's candidate list), ties by id descending."""
        if not self.rows:
            raise ValueError("No documents were added to the index before searching.")
        similarity = self._similarity(similarity_fn)
        q = _as_rows("embeddings", embeddings)
        if check_int("top_k", top_k, least=0) == 0:  # as mteb's own search: no document for any query
            return [[] for _ in range(q.shape[0])], [[] for _ in range(q.shape[0])]
        corpus = torch.cat(self.rows)
        doc_keys, codes = sorted_codes("idxs", self.ids)
        if top_ranked is None:
            found, keys = exact_top(q, [(corpus, codes)], top_k, similarity, self.block_bytes)
            rows = torch.argsort(codes)[found.clamp_min(0)]  # the added row of each listed code
            return _lists(rows, found, keys)
        assert query_idx_to_id is not None
        code = {key: i for i, key in enumerate(doc_keys)}
        ranked = [list(top_ranked.get(query_idx_to_id[i], [])) for i in range(q.shape[0])]
        candidates = [torch.tensor([code[d] for d in r], dtype=torch.int64) for r in ranked]
        found, keys = rerank_top(q, [(corpus, codes)], candidates, top_k, similarity)
        where = [{code[d]: j for j, d in enumerate(r)} for r in ranked]  # the place in each query's list
        places = torch.tensor([[w.get(c, -1) for c in row] for w, row in zip(where, found.tolist())])
        return _lists(places.reshape(found.shape), found, keys)
