"""Local synthetic MTEB retrieval tasks and deterministic encoders (no download, no weights), for
``tests/integration/test_mteb.py``.

``task`` builds an ``AbsTaskRetrieval`` whose data are given in memory; ``IntegerEncoder`` gives each text an
integer-valued float32 row drawn from a generator seeded by its CRC-32 (the same text, the same row; dot
products below 2**24 are exact in any order of summation, so every score is the same bits in mteb's matrix
products and in ours); ``SineEncoder`` gives float rows (cosine, inexact).
"""

from __future__ import annotations

import zlib
from typing import Any, Optional

import mteb
import numpy as np
import torch
from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models.model_meta import ModelMeta

from _seeding import global_generators_kept

_ARGS: dict[str, Any] = {
    "description": "A synthetic retrieval task of the embedmetrics tests.", "reference": None,
    "dataset": {"path": "NA", "revision": "NA"}, "category": "t2t", "eval_splits": ["test"],
    "eval_langs": ["eng-Latn"], "date": ("2022-12-22", "2022-12-22"), "dialect": ["Written"], "domains": [],
    "task_subtypes": [], "license": "cc-by-4.0", "annotations_creators": "derived", "modalities": ["text"],
    "sample_creation": "found", "bibtex_citation": "",
}  # fmt: skip


def task(
    corpus: dict[str, str],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    top_ranked: Optional[dict[str, list[str]]] = None,
    **settings: Any,
) -> AbsTaskRetrieval:
    """A retrieval (or, with ``top_ranked``, reranking) task over the given data; ``settings``:
    ``k_values``, ``ignore_identical_ids``, ``skip_first_result``."""

    class Synthetic(AbsTaskRetrieval):
        metadata = TaskMetadata(
            type="Reranking" if top_ranked else "Retrieval", name="EmbedmetricsSynthetic",
            main_score="ndcg_at_10", **_ARGS,
        )  # fmt: skip

        def load_data(self, num_proc: Optional[int] = None, **kwargs: Any) -> None:
            split = RetrievalSplitData(
                queries=Dataset.from_list([{"id": k, "text": v} for k, v in queries.items()]),
                corpus=Dataset.from_list([{"id": k, "text": v, "title": ""} for k, v in corpus.items()]),
                relevant_docs=qrels,
                top_ranked=top_ranked,
            )
            self.dataset = {"default": {"test": split}}
            self.data_loaded = True

    for name, value in settings.items():
        setattr(Synthetic, name, value)
    return Synthetic()


def _meta(width: int, similarity: str) -> ModelMeta:
    return ModelMeta(
        loader=None, name="embedmetrics-tests/encoder", revision="1", model_type=["dense"], embed_dim=width,
        similarity_fn_name=similarity, languages=None, open_weights=True, release_date=None, n_parameters=0,
        n_embedding_parameters=0, memory_usage_mb=0, license="mit", max_tokens=np.inf, reference=None,
        framework=[], use_instructions=False, public_training_code=None, public_training_data=None,
        training_datasets=set(), modalities=["text"],
    )  # fmt: skip


class IntegerEncoder:
    """Integer-valued float32 rows (``-bound..bound``) per text; ``similarity_fn_name`` as given."""

    def __init__(
        self,
        width: int = 8,
        similarity: str = "dot",
        bound: int = 1000,
        dtype: Any = np.float32,
        torch_out: bool = False,
    ) -> None:
        self.width, self.bound, self.dtype, self.torch_out = width, bound, dtype, torch_out
        self.mteb_model_meta = _meta(width, similarity)
        self.batches: list[int] = []  # the size of every batch encoded

    def row(self, text: str) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        return rng.integers(-self.bound, self.bound + 1, self.width).astype(np.float64)

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, **kwargs: Any) -> Any:
        rows = []
        for batch in inputs:
            self.batches.append(len(batch["text"]))
            rows += [self.row(text) for text in batch["text"]]
        out = np.stack(rows).astype(self.dtype) if rows else np.zeros((0, self.width), self.dtype)
        return torch.from_numpy(out) if self.torch_out else out

    def similarity(self, a: Any, b: Any) -> Any:
        from mteb.similarity_functions import select_similarity

        return select_similarity(a, b, self.mteb_model_meta.similarity_fn_name)

    def similarity_pairwise(self, a: Any, b: Any) -> Any:
        from mteb.similarity_functions import select_pairwise_similarity

        return select_pairwise_similarity(a, b, self.mteb_model_meta.similarity_fn_name)


class SineEncoder(IntegerEncoder):
    """Float rows (sines of the text's CRC-32), cosine: scores inexact, as a real model's."""

    def __init__(self, width: int = 16) -> None:
        super().__init__(width, "cosine")

    def row(self, text: str) -> np.ndarray:
        steps = np.arange(1, self.width + 1)
        return np.sin(zlib.crc32(text.encode()) * steps * 1e-4 + steps)


def evaluate(model: Any, the_task: Any, **kwargs: Any) -> dict[str, Any]:
    """The scores of ``mteb.evaluate`` of one task (no result cache), without its name and languages."""
    result = mteb.evaluate(model, the_task, cache=None, show_progress_bar=False, **kwargs)
    scores = dict(result.task_results[0].scores["test"][0])
    return {k: v for k, v in scores.items() if k not in ("hf_subset", "languages")}


def search_once(model: Any, the_task: Any, top_k: int, batch_size: int = 32) -> dict[str, dict[str, float]]:
    """The results dict of one search (``index``, then ``search``), as mteb's evaluator calls them."""
    with global_generators_kept():
        the_task.load_data()
    split = the_task.dataset["default"]["test"]
    context = {
        "task_metadata": the_task.metadata, "hf_split": "test", "hf_subset": "default",
        "encode_kwargs": {"batch_size": batch_size}, "num_proc": None,
    }  # fmt: skip
    model.index(split["corpus"], **context)
    return model.search(split["queries"], top_k=top_k, top_ranked=split["top_ranked"], **context)


def search_on_rank(rank: int, world: int, data: tuple[Any, ...], top_k: int, chunk: int) -> dict[str, Any]:
    """On one rank of a gloo group: ``ExactSearch``'s results over the rank's share of the chunks, merged,
    and the scores of ``mteb.evaluate`` with it."""
    from embedmetrics.integrations.mteb import ExactSearch

    corpus, queries, qrels, top_ranked = data
    with global_generators_kept():
        the_task = task(corpus, queries, qrels, top_ranked, k_values=(1, 3, 5, top_k))
        model = ExactSearch(IntegerEncoder(width=3, bound=2), corpus_chunk_size=chunk)
        return {"results": search_once(model, the_task, top_k), "scores": evaluate(model, the_task)}


class KillingEncoder(IntegerEncoder):
    """An ``IntegerEncoder`` whose process SIGKILLs itself as it starts encoding document chunk
    ``kill_at`` (counted from 1): the chunks before it are folded and saved."""

    def __init__(self, kill_at: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kill_at, self.document_chunks = kill_at, 0

    def encode(self, inputs: Any, *, prompt_type: Any = None, **kwargs: Any) -> Any:
        if prompt_type is not None and str(getattr(prompt_type, "value", prompt_type)) == "document":
            self.document_chunks += 1
            if self.document_chunks == self.kill_at:
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
        return super().encode(inputs, prompt_type=prompt_type, **kwargs)
