"""sentence-transformers' ``InformationRetrievalEvaluator``, computed by embedmetrics' exact, sharded dense
retrieval (``embedmetrics._engine.dense``): change one import line.

The class keeps sentence-transformers' evaluator as its base (its constructor, result keys,
``primary_metric``, CSV file, model-card data and logging are that class's own) and replaces only the
retrieval: no ``queries × corpus`` matrix, ties scored by a policy (``ties``), per-query values kept.
The queries are encoded first; then each chunk of ``corpus_chunk_size`` documents is encoded (or taken
from ``corpus_embeddings``), scanned and folded into running top lists per score function
(``embedmetrics._engine.dense.stream``) and dropped: one chunk is held at a time, as sentence-transformers'
own evaluator holds it, and the values equal a scan of the whole corpus bit for bit whatever the chunk size.

Where it runs (``torch.distributed``):

- inside ``SentenceTransformerTrainer`` under DDP the trainer runs the evaluator on rank 0 only and the
  other ranks serve its ``encode`` calls (sentence-transformers' ``distributed_evaluation``: the model's
  ``_distributed_inference``). The encoding is shared out already; the evaluator starts no collective
  of its own there (any would hang) and scans on rank 0;
- anywhere else with a process group of several ranks (a ``torchrun`` script calling the evaluator on
  every rank, or the trainer under FSDP / DeepSpeed, which runs it on every rank) each rank encodes its
  share of the queries and of the corpus, the queries are gathered, each rank scans its corpus share
  and the top lists are merged exactly: every rank returns the same values. Every rank encodes the
  same number of texts, ``ceil(n / world_size)`` (a shorter share is topped up with copies of one of
  its texts, whose embeddings are dropped): the same number of forward passes on every rank, which
  FSDP / ZeRO-3 need (each forward pass gathers the parameters);
- ``distributed=False`` (a script evaluating on rank 0 only): this process encodes and scans
  everything alone, no collective.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

try:
    from sentence_transformers.sentence_transformer.evaluation import (
        InformationRetrievalEvaluator as _STInformationRetrievalEvaluator,
    )
    from sentence_transformers.util.similarity import SimilarityFunction
except ImportError as error:  # the optional extra is not installed
    raise ImportError(
        "embedmetrics.integrations.sentence_transformers needs sentence-transformers 6.2 or later: "
        "pip install sentence-transformers (the [sentence-transformers] extra of embedmetrics)."
    ) from error

from embedmetrics._engine.core.checks import check_corpus_embeddings, check_score_range, largest_magnitude
from embedmetrics._engine.core.row_owners import gather_rows
from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.dense.keyed import keyed_qrels
from embedmetrics._engine.dense.measures import DenseOptions, dense_options
from embedmetrics._engine.dense.options import OPTIONS
from embedmetrics._engine.dense.stream import RunningLists, StreamQueries, fold_chunk, stream_values
from embedmetrics._engine.settings.arguments import check_choice
from embedmetrics._engine.settings.options import read_options
from embedmetrics._engine.settings.policies import SIMILARITIES, TIES

__all__ = ["InformationRetrievalEvaluator"]

logger = logging.getLogger(__name__)

#: sentence-transformers' result name -> dense retrieval's measure.
_MEASURES = {
    "accuracy@k": "hit_rate",
    "precision@k": "precision",
    "recall@k": "recall",
    "ndcg@k": "ndcg",
    "mrr@k": "mrr",
    "map@k": "map",
}


def similarity_of(name: str, score_function: Callable[..., Any]) -> str:
    """Dense retrieval's similarity for a score function of sentence-transformers: a model's
    ``similarity`` method (its ``similarity_fn_name``) or one of ``SimilarityFunction``'s functions."""
    owner = getattr(score_function, "__self__", None)
    method = getattr(type(owner), "similarity", None) if owner is not None else None
    of_model = method is not None and getattr(score_function, "__func__", None) is method
    if of_model:
        kind: str | None = str(getattr(owner, "similarity_fn_name", ""))
        shown = f"a model's `similarity` (similarity_fn_name={kind!r})"
    else:
        kind = next(
            (s for s in SIMILARITIES if score_function is SimilarityFunction.to_similarity_fn(s)), None
        )
        shown = str(getattr(score_function, "__qualname__", type(score_function).__name__))
    if kind not in SIMILARITIES:
        raise ValueError(
            f"Argument `score_functions` must hold similarities embedmetrics scans exactly "
            f"({', '.join(SIMILARITIES)}: a model's `similarity` or sentence_transformers.util's "
            f"cos_sim, dot_score, euclidean_sim), got {name!r}: {shown}."
        )
    return str(kind)


def _share(n: int, shard: tuple[int, int] | None) -> slice:
    """The contiguous part of ``n`` items that rank ``shard[0]`` of ``shard[1]`` handles."""
    if shard is None:
        return slice(0, n)
    rank, world = shard
    size, extra = divmod(n, world)
    start = rank * size + min(rank, extra)
    return slice(start, start + size + (rank < extra))


def padded_share(items: Sequence[Any], shard: tuple[int, int] | None) -> tuple[list[Any], slice]:
    """This rank's share of ``items`` topped up to ``ceil(n / world)`` entries with copies of its first
    item (of item 0 where the share is empty), and the share: every rank encodes as many texts, so runs
    as many forward passes (FSDP / ZeRO-3 gather the parameters in each); the copies are dropped."""
    part = _share(len(items), shard)
    share = list(items[part])
    if shard is None:
        return share, part
    filler = share[0] if share else items[0]
    return share + [filler] * (-(-len(items) // shard[1]) - len(share)), part


@dataclass
class CorpusStreams:
    """The running lists of every score function over one rank's corpus, folded chunk by chunk
    (``embedmetrics._engine.dense.stream``): no corpus row is kept past its chunk.

    ``largest`` is the largest corpus magnitude folded so far. In one process a chunk whose scores would
    overflow raises as it is folded; under ``distributed`` a rank stops folding there and every rank
    raises the same error at ``values`` (the largest magnitude of every rank, one collective), never one
    rank alone while the others wait in a collective."""

    fixed: dict[str, StreamQueries]
    lists: dict[str, RunningLists]
    largest: Tensor
    distributed: bool
    overflow: bool = False

    @classmethod
    def build(
        cls, queries: Tensor, qrels: Tensor, options: dict[str, DenseOptions], distributed: bool
    ) -> CorpusStreams:
        """Empty lists for ``queries`` (coded by position) under each score function's options."""
        codes = torch.arange(queries.shape[0], device=queries.device)
        fixed = {name: StreamQueries.build(queries, codes, qrels, opts) for name, opts in options.items()}
        lists = {name: stream.empty_lists() for name, stream in fixed.items()}
        largest = torch.zeros((), dtype=torch.float64, device=queries.device)
        return cls(fixed, lists, largest, distributed)

    def fold(self, rows: Tensor, codes: Tensor) -> None:
        """Fold one chunk (``rows`` of documents never folded before, their ``codes``) into every list."""
        self.largest = torch.maximum(self.largest, largest_magnitude(rows).double())
        if self.distributed and not self.overflow:
            try:
                self.check_range()
            except ValueError:
                self.overflow = True  # raised by every rank at ``values``
        if self.overflow:
            return
        for name, fixed in self.fixed.items():
            self.lists[name] = fold_chunk(fixed, self.lists[name], rows, codes)

    def check_range(self) -> None:
        """``ValueError`` where the scores of the queries and the corpus so far could overflow."""
        queries = next(iter(self.fixed.values())).queries
        magnitudes = (float(largest_magnitude(queries)), float(self.largest))
        for fixed in self.fixed.values():
            sim = fixed.opts.similarity
            check_score_range(
                ("queries", "corpus"), magnitudes, queries.shape[1], sim, compute_dtype(queries)
            )

    def values(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each score function's result dict (``dense_values``'s, float64 values); under ``distributed``
        every rank's lists merged (collectives, the same on every rank)."""
        if self.distributed and any(f.opts.similarity != "cosine" for f in self.fixed.values()):
            torch.distributed.all_reduce(self.largest, op=torch.distributed.ReduceOp.MAX)
            self.check_range()
        for name, fixed in self.fixed.items():
            yield name, stream_values(fixed, self.lists[name], torch.float64, distributed=self.distributed)


class InformationRetrievalEvaluator(_STInformationRetrievalEvaluator):
    r"""sentence-transformers' ``InformationRetrievalEvaluator`` (the same constructor, result keys,
    ``primary_metric`` and CSV file), exact and sharded by embedmetrics' dense retrieval.

    The values equal sentence-transformers' on tie-free scores (its ``map@k`` divides by
    ``min(k, R)``, ``R`` the relevant documents of the query; the others are trec_eval's); tied scores
    are scored by ``ties`` instead of by document id. Queries without relevant documents are skipped,
    as sentence-transformers does. The corpus is never scored as a ``queries × corpus`` matrix nor held
    whole: each chunk of ``corpus_chunk_size`` documents is encoded, folded into running top lists and
    dropped, and under ``torch.distributed`` each rank streams its share (see the module docstring).

    Every argument of sentence-transformers' evaluator is taken as it takes it (``queries``, ``corpus``,
    ``relevant_docs``, the ``*_at_k`` lists, ``corpus_chunk_size``: documents encoded at once,
    ``batch_size``, ``name``, ``write_csv``, ``truncate_dim``, ``score_functions`` — cosine, dot or
    Euclidean: a model's ``similarity`` or ``sentence_transformers.util``'s functions —,
    ``main_score_function``, the query and corpus prompts, ``write_predictions``), and two more:

    Args:
        ties: ``"average"`` (the expected value over a random order of tied documents),
            ``"pessimistic"`` or ``"optimistic"``.
        distributed: ``None`` (default): shard the work over the process group when one of several
            ranks is initialised and the trainer does not share the encoding out itself; **every rank
            must then call the evaluator** (a call on rank 0 alone waits forever for the others, or
            until the group's timeout). ``False``: this process encodes and scans everything alone,
            with no collective (``if rank == 0: evaluator(model)``). ``True``: shard, and raise if no
            process group is initialised (inside the trainer under DDP its protocol is kept).

    After a call, ``per_query`` maps every result key to its ``(Q,)`` float64 per-query values, in the
    order of ``per_query_ids`` (the evaluated query ids), ready for
    ``embedmetrics.functional.compare``; ``evaluator(model, return_per_query=True)`` returns
    ``(results, per_query)``. The ``write_predictions`` file lists each query's documents by their
    printed (float32) score, then by document id.

    Raises:
        ValueError: a relevant document absent from the corpus, a query id or document id given twice,
            ids that cannot be sorted, no query with relevant documents, an unknown ``ties`` or a score
            function that is not cosine, dot or Euclidean; before anything is encoded. At a call,
            ``corpus_embeddings`` that are not one row per corpus document, or ``distributed=True``
            without a process group, before anything is encoded.

    Example:
        >>> from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator
        >>> evaluator = InformationRetrievalEvaluator(
        ...     {"q1": "a cat"}, {"d1": "cats", "d2": "dogs"}, {"q1": {"d1"}}, name="toy"
        ... )
        >>> evaluator.per_query_ids
        ['q1']
    """

    def __init__(
        self,
        queries: dict[Any, Any],
        corpus: dict[Any, Any],
        relevant_docs: dict[Any, Any],
        corpus_chunk_size: int = 50000,
        mrr_at_k: Sequence[int] = (10,),
        ndcg_at_k: Sequence[int] = (10,),
        accuracy_at_k: Sequence[int] = (1, 3, 5, 10),
        precision_recall_at_k: Sequence[int] = (1, 3, 5, 10),
        map_at_k: Sequence[int] = (100,),
        show_progress_bar: bool = False,
        batch_size: int = 32,
        name: str = "",
        write_csv: bool = True,
        truncate_dim: int | None = None,
        score_functions: dict[str, Callable[[Tensor, Tensor], Tensor]] | None = None,
        main_score_function: str | SimilarityFunction | None = None,
        query_prompt: str | None = None,
        query_prompt_name: str | None = None,
        corpus_prompt: str | None = None,
        corpus_prompt_name: str | None = None,
        write_predictions: bool = False,
        ties: str = "average",
        distributed: bool | None = None,
    ) -> None:
        cut_offs = {
            "mrr_at_k": list(mrr_at_k), "ndcg_at_k": list(ndcg_at_k), "accuracy_at_k": list(accuracy_at_k),
            "precision_recall_at_k": list(precision_recall_at_k), "map_at_k": list(map_at_k),
        }  # fmt: skip
        super().__init__(
            queries, corpus, relevant_docs, corpus_chunk_size, **cut_offs,
            show_progress_bar=show_progress_bar, batch_size=batch_size, name=name, write_csv=write_csv,
            truncate_dim=truncate_dim,
            score_functions=score_functions, main_score_function=main_score_function,
            query_prompt=query_prompt, query_prompt_name=query_prompt_name, corpus_prompt=corpus_prompt,
            corpus_prompt_name=corpus_prompt_name, write_predictions=write_predictions,
        )  # fmt: skip
        check_choice("ties", ties, TIES)
        self.ties = ties
        if distributed not in (None, True, False):
            raise ValueError(f"Argument `distributed` must be None, True or False, got {distributed!r}.")
        self.distributed = distributed
        self._options = self._dense_options(sorted({k for cut in cut_offs.values() for k in cut}))
        self._keyed = keyed_qrels(self.queries_ids, self.corpus_ids, relevant_docs)
        for score_name, function in (score_functions or {}).items():
            similarity_of(score_name, function)
        if score_functions and self.main_score_function is not None:
            check_choice("main_score_function", self.main_score_function.value, sorted(score_functions))
        self.per_query: dict[str, np.ndarray] = {}
        self.per_query_ids: list[Hashable] = list(self.queries_ids)

    def _dense_options(self, ks: list[int]) -> DenseOptions:
        given = {
            "k": ks,
            "metrics": list(dict.fromkeys(_MEASURES.values())),
            "ties": self.ties,
            "aggregation": "none",
        }
        return dense_options(read_options(type(self).__name__, OPTIONS["DenseRetrieval"], given))

    def shard_of(self, model: Any) -> tuple[int, int] | None:
        """``(rank, world_size)`` where this evaluator shards the work itself: ``distributed`` not
        ``False``, a process group of several ranks and no trainer sharing the model's encoding out
        (``None`` otherwise)."""
        if self.distributed is False:
            return None
        grouped = dist.is_available() and dist.is_initialized()
        if self.distributed and not grouped:
            raise ValueError(
                "Argument `distributed` is True but no torch.distributed process group is initialised: "
                "call torch.distributed.init_process_group first, or pass distributed=None or False."
            )
        if not grouped or dist.get_world_size() < 2:
            return None
        if getattr(model, "_distributed_inference", None) is not None:  # the trainer's rank 0
            return None
        return dist.get_rank(), dist.get_world_size()

    def __call__(
        self,
        model: Any,
        output_path: str | None = None,
        epoch: int = -1,
        steps: int = -1,
        *args: Any,
        return_per_query: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Evaluate ``model`` (see sentence-transformers' evaluator): its results, or
        ``(results, per_query)`` with ``return_per_query=True``; rank 0 alone writes files."""
        shard = self.shard_of(model)
        if shard is not None and shard[0] != 0:
            output_path = None
        results = dict(super().__call__(model, output_path, epoch, steps, *args, **kwargs))
        return (results, dict(self.per_query)) if return_per_query else results

    def compute_all_metrics(  # type: ignore[override]
        self,
        model: Any,
        corpus_model: Any = None,
        corpus_embeddings: Tensor | None = None,
        output_path: str | None = None,
    ) -> dict[str, dict[str, dict[int, float]]]:
        """sentence-transformers' per-score-function results, by the exact sharded scan: the queries are
        encoded first, then each corpus chunk is encoded (or taken from ``corpus_embeddings``), folded
        into the running lists of every score function and dropped."""
        similarities = {name: similarity_of(name, fn) for name, fn in (self.score_functions or {}).items()}
        corpus_embeddings = check_corpus_embeddings(corpus_embeddings, len(self.corpus))
        shard = self.shard_of(model)
        queries = self._encode_queries(model, shard)
        run = bool(self.write_predictions)
        options = {
            name: replace(self._options, similarity=s, return_run=run) for name, s in similarities.items()
        }
        streams = CorpusStreams.build(
            queries, self._keyed.qrels.to(queries.device), options, shard is not None
        )
        for rows, codes in self._corpus_chunks(corpus_model or model, corpus_embeddings, shard):
            streams.fold(rows.to(device=queries.device, dtype=queries.dtype), codes.to(queries.device))
            del rows  # no chunk is held while the next one is encoded
        scores, self.per_query = {}, {}
        prefix = f"{self.name}_" if self.name else ""
        for name, values in streams.values():
            scores[name] = self._st_scores(values, name, prefix)
            if self.write_predictions and output_path is not None:
                self._write_predictions(output_path, name, values["run"])
        logger.info(f"Queries: {len(self.queries)}")
        logger.info(f"Corpus: {len(self.corpus)}\n")
        for name in self.score_function_names:
            logger.info(f"Score-Function: {name}")
            self.output_scores(scores[name])  # type: ignore[no-untyped-call]
        return scores

    def _st_scores(self, values: dict[str, Any], name: str, prefix: str) -> dict[str, dict[int, float]]:
        """sentence-transformers' ``{measure@k: {k: mean}}`` of one score function; the per-query values
        are kept in ``per_query`` (``map@k``: sentence-transformers divides by ``min(k, R)``)."""
        relevant = self._keyed.num_relevant.double()
        cut_offs = {
            "accuracy@k": self.accuracy_at_k, "precision@k": self.precision_recall_at_k,
            "recall@k": self.precision_recall_at_k, "ndcg@k": self.ndcg_at_k, "mrr@k": self.mrr_at_k,
            "map@k": self.map_at_k,
        }  # fmt: skip
        out: dict[str, dict[int, float]] = {}
        for st_name, ks in cut_offs.items():
            out[st_name] = {}
            for k in ks:
                per_query = values[f"{_MEASURES[st_name]}@{k}"].detach().double().cpu()
                if st_name == "map@k":
                    per_query = per_query * relevant / relevant.clamp(max=k)
                self.per_query[f"{prefix}{name}_{st_name.replace('@k', f'@{k}')}"] = per_query.numpy()
                out[st_name][k] = float(per_query.mean())
        return out

    def _encode_queries(self, model: Any, shard: tuple[int, int] | None) -> Tensor:
        """Every query's embedding on every rank (each rank encodes its share, then they are gathered)."""
        texts, part = padded_share(self.queries, shard)
        rows = self._embed(model, texts, "query")[: part.stop - part.start]
        return rows if shard is None else torch.cat(gather_rows(rows.contiguous()))

    def _corpus_chunks(
        self, model: Any, given: Tensor | None, shard: tuple[int, int] | None
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """This rank's share of the corpus by chunks of ``corpus_chunk_size``: the rows (``given`` ones,
        or encoded from the padded share: as many chunks on every rank, each as long, the padding rows
        dropped) and their document codes. Nothing is kept here between chunks."""
        step = max(1, int(self.corpus_chunk_size))
        if given is not None:
            part = _share(len(self.corpus), shard)
            for start in range(part.start, part.stop, step):
                stop = min(start + step, part.stop)
                yield _rows_of(given, start, stop), self._keyed.doc_codes[start:stop]
            return
        texts, part = padded_share(self.corpus, shard)
        for start in range(0, len(texts), step):
            real = max(0, min(step, part.stop - part.start - start))  # the rows that are not padding
            codes = self._keyed.doc_codes[part.start + start : part.start + start + real]
            yield self._embed(model, texts[start : start + step], "document")[:real], codes

    def _embed(self, model: Any, inputs: list[Any], role: str) -> Tensor:
        """``inputs`` (never empty: the shares are padded) encoded as sentence-transformers' evaluator
        encodes them (prompts, ``truncate_dim``)."""
        prompt_name = self.query_prompt_name if role == "query" else self.corpus_prompt_name
        prompt = self.query_prompt if role == "query" else self.corpus_prompt
        embedded = self.embed_inputs(
            model, inputs, encode_fn_name=role, prompt_name=prompt_name, prompt=prompt
        )
        return torch.as_tensor(embedded).detach()

    def _write_predictions(self, output_path: str, name: str, run: tuple[Tensor, Tensor]) -> None:
        """sentence-transformers' JSONL predictions of one score function, each query's documents by
        printed score, then document id (the run is ordered by its float64 scores, printed as float32:
        two scores equal once printed are put back in id order)."""
        os.makedirs(output_path, exist_ok=True)
        path = os.path.join(output_path, self.predictions_file.replace(".jsonl", f"_{name}.jsonl"))
        doc_ids, doc_scores = (t.cpu().tolist() for t in run)
        with open(path, mode="w", encoding="utf-8") as out:
            for row, (query_id, query) in enumerate(zip(self.queries_ids, self.queries)):
                listed = sorted((-s, d) for d, s in zip(doc_ids[row], doc_scores[row]) if s != float("-inf"))
                hits = [{"corpus_id": self._keyed.doc_keys[d], "score": -s} for s, d in listed]
                out.write(json.dumps({"query_id": query_id, "query": query, "results": hits}) + "\n")


def _rows_of(given: Tensor, start: int, stop: int) -> Tensor:
    """Rows ``start:stop`` of ``given`` as a dense tensor (a sparse COO one densified for them alone)."""
    if given.layout == torch.sparse_coo:
        return given.index_select(0, torch.arange(start, stop, device=given.device)).to_dense()
    return given[start:stop]
