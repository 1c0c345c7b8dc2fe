"""A tiny sentence-transformers model and data for ``test_sentence_transformers.py``, and the functions
its gloo processes run (a module of its own, so that ``tests/_dist.py``'s workers load it by path).

No network: a 1-layer BERT of random weights and a word-level tokenizer, saved to a directory.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import torch

from _seeding import global_generators_kept

DIM = 16
WORDS = [f"w{i}" for i in range(120)]


def build_model(path: Path) -> None:
    """Save a 1-layer random BERT (seeded, the global generator untouched) and its tokenizer to ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, mask_token="[MASK]", **special)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=DIM, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        BertModel(config).save_pretrained(path)
    fast.save_pretrained(path)


def load_model(path: Path | str, similarity: str | None = None) -> Any:
    """The saved model as a ``SentenceTransformer`` (mean pooling), on the CPU."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    return SentenceTransformer(
        modules=[Transformer(str(path)), Pooling(DIM)], device="cpu", similarity_fn_name=similarity
    )


def make_data(
    seed: int, n_queries: int, n_docs: int
) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """Queries, corpus and relevant documents (documents sharing a word with the query, at most 4;
    some queries have none)."""
    rng = random.Random(seed)
    corpus = {f"d{i:04d}": " ".join(rng.choice(WORDS) for _ in range(6)) for i in range(n_docs)}
    queries = {f"q{i:03d}": " ".join(rng.choice(WORDS) for _ in range(3)) for i in range(n_queries)}
    relevant: dict[str, set[str]] = {}
    for qid, text in queries.items():
        words = set(text.split())
        hits = [d for d, doc in corpus.items() if words & set(doc.split())]
        if hits:
            relevant[qid] = set(rng.sample(hits, min(4, len(hits))))
    return queries, corpus, relevant


class EncodeCounter:
    """Counts the texts ``model`` encodes on this process (wraps its ``_inference``) and its forward
    passes (a forward pre-hook: one per batch)."""

    def __init__(self, model: Any) -> None:
        self.texts = 0
        self.forwards = 0
        inference = model._inference

        def forward_seen(*_: Any) -> None:
            self.forwards += 1

        model.register_forward_pre_hook(forward_seen)

        def counted(inputs: list[Any], **kwargs: Any) -> Any:
            self.texts += len(inputs)
            return inference(inputs, **kwargs)

        model._inference = counted


def evaluate(model_dir: str, data: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The embedmetrics evaluator on the data: its results, per-query values and the texts encoded here."""
    from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator

    model = load_model(model_dir)
    counter = EncodeCounter(model)
    evaluator = InformationRetrievalEvaluator(*data, **kwargs)
    results = evaluator(model)
    return {
        "results": results, "per_query": evaluator.per_query, "texts": counter.texts,
        "forwards": counter.forwards,
    }  # fmt: skip


def evaluate_on_rank(
    rank: int, world: int, model_dir: str, data: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``evaluate`` on one rank of a gloo group (a plain script calling the evaluator on every rank)."""
    return evaluate(model_dir, data, kwargs)


TWO_QUERIES = (
    {"q1": "w1 w2", "q2": "w3 w4"},
    {f"d{i}": f"w{i} w{i + 1} w{i + 2}" for i in range(12)},
    {"q1": {"d1"}, "q2": {"d3"}},
)


def uneven_cases(model_dir: str, fsdp_data: tuple[Any, ...]) -> dict[str, Any]:
    """The evaluator where some rank's share would be empty or shorter (more ranks than queries, a
    bf16 model, ``truncate_dim`` wider than the model), under FSDP (every forward pass a collective),
    and called with ``distributed=False`` on rank 0 alone: each case's ``cosine_ndcg@10``."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator

    out: dict[str, Any] = {}
    bf16 = load_model(model_dir).to(torch.bfloat16)
    out["bf16"] = InformationRetrievalEvaluator(*TWO_QUERIES)(bf16)["cosine_ndcg@10"]
    wide = InformationRetrievalEvaluator(*TWO_QUERIES, truncate_dim=2 * DIM)
    out["truncate"] = wide(load_model(model_dir))["cosine_ndcg@10"]
    sharded = load_model(model_dir)
    for layer in sharded[0].model.encoder.layer:
        fully_shard(layer)
    fully_shard(sharded)
    out["fsdp"] = InformationRetrievalEvaluator(*fsdp_data, batch_size=7)(sharded)["cosine_ndcg@10"]
    if dist.get_rank() == 0:
        alone = InformationRetrievalEvaluator(*fsdp_data, distributed=False)
        out["alone"] = alone(load_model(model_dir))["cosine_ndcg@10"]
    dist.barrier()  # rank 0's call started no collective: the other ranks meet it here
    return out


def uneven_cases_on_rank(rank: int, world: int, model_dir: str, fsdp_data: tuple[Any, ...]) -> dict[str, Any]:
    """``uneven_cases`` on one rank of a gloo group."""
    torch.set_num_threads(1)
    return uneven_cases(model_dir, fsdp_data)


def train(model_dir: str, data: tuple[Any, ...], out_dir: str, distributed: bool) -> dict[str, Any]:
    """A few steps of ``SentenceTransformerTrainer`` with the evaluator (learning rate 0: every process
    count evaluates the same model); the evaluations it logs and the texts encoded on this process."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator

    queries, corpus, relevant = data
    anchors = [queries[q] for q in relevant]
    positives = [corpus[sorted(relevant[q])[0]] for q in relevant]
    n = 16
    model = load_model(model_dir)
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, name="tiny")
    args = SentenceTransformerTrainingArguments(
        output_dir=out_dir, max_steps=2, per_device_train_batch_size=4, learning_rate=0.0,
        eval_strategy="steps", eval_steps=1, save_strategy="no", report_to="none", use_cpu=True,
        seed=0, logging_steps=1, ddp_backend="gloo" if distributed else None, disable_tqdm=True,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=model, args=args, evaluator=evaluator, loss=MultipleNegativesRankingLoss(model),
        train_dataset=Dataset.from_dict({"anchor": anchors[:n], "positive": positives[:n]}),
    )  # fmt: skip
    counter = EncodeCounter(model)
    with global_generators_kept():
        trainer.train()
    logged = [
        {k: v for k, v in entry.items() if k.startswith("eval_tiny")}
        for entry in trainer.state.log_history
        if any(k.startswith("eval_tiny") for k in entry)
    ]
    return {"logged": logged, "texts": counter.texts, "world_size": args.world_size}


def train_on_rank(rank: int, world: int, model_dir: str, data: tuple[Any, ...], out_dir: str) -> Any:
    """``train`` on one rank of a gloo group, as DDP (``LOCAL_RANK`` set: the trainer wraps the model)."""
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1")
    return train(model_dir, data, out_dir, distributed=True)
