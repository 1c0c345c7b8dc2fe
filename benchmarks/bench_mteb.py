"""MTEB's search, side by side: mteb's own (``SearchEncoderWrapper``), its faiss index backend (when
``faiss-cpu`` is installed) and ``embedmetrics.integrations.mteb.ExactSearch``, on the same embeddings.

The encoder costs next to nothing (each text is a document number; its row is computed from the number in
one vectorised step), so the times are the search's: the dataloaders, the similarity, the lists. Each
method runs in a process of its own under ``/usr/bin/time -v`` (its peak resident memory; faiss's OpenMP
threads never share a process with the others). Usage::

    python benchmarks/bench_mteb.py                          # 200,000 documents x 384, 1,000 queries
    python benchmarks/bench_mteb.py --n 1000000 --d 768      # the issue's large size
    python benchmarks/bench_mteb.py --one exact --n 20000    # one method here (what the driver runs)
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from typing import Any

import numpy as np

METHODS = ("default", "faiss", "exact")


class NumberEncoder:
    """Rows ``sin(n * a + b)`` of a document or query number ``n`` (float32): deterministic, per row."""

    def __init__(self, width: int) -> None:
        from mteb.models.model_meta import ModelMeta

        g = np.random.default_rng(0)
        self.a, self.b = g.uniform(1e-4, 1e-2, width), g.uniform(0, 6.3, width)
        self.mteb_model_meta = ModelMeta(
            loader=None, name="embedmetrics-bench/number-encoder", revision="1", model_type=["dense"],
            embed_dim=width, similarity_fn_name="cosine", languages=None, open_weights=True,
            release_date=None, n_parameters=0, n_embedding_parameters=0, memory_usage_mb=0, license="mit",
            max_tokens=np.inf, reference=None, framework=[], use_instructions=False,
            public_training_code=None,
            public_training_data=None, training_datasets=set(), modalities=["text"],
        )  # fmt: skip

    def encode(self, inputs: Any, **kwargs: Any) -> np.ndarray:
        parts = []
        for batch in inputs:
            n = np.array([float(t.split()[-1]) for t in batch["text"]])
            parts.append(np.sin(n[:, None] * self.a + self.b).astype(np.float32))
        return np.concatenate(parts)

    def similarity(self, x: Any, y: Any) -> Any:
        from mteb.similarity_functions import select_similarity

        return select_similarity(x, y, self.mteb_model_meta.similarity_fn_name)


def _search_model(method: str, encoder: NumberEncoder, chunk: int) -> Any:
    from mteb.models.search_wrappers import SearchEncoderWrapper

    if method == "exact":
        from embedmetrics.integrations.mteb import ExactSearch

        return ExactSearch(encoder, corpus_chunk_size=chunk)
    if method == "faiss":
        from mteb.models.search_encoder_index import FaissSearchIndex

        return SearchEncoderWrapper(encoder, corpus_chunk_size=chunk, index_backend=FaissSearchIndex(encoder))
    return SearchEncoderWrapper(encoder, corpus_chunk_size=chunk)


def run_one(method: str, n: int, q: int, d: int, chunk: int, top_k: int) -> dict[str, Any]:
    """Index and search once; the seconds of each and the results' digest."""
    from datasets import Dataset
    from mteb.abstasks.task_metadata import TaskMetadata

    meta = TaskMetadata(
        type="Retrieval", name="BenchRetrieval", main_score="ndcg_at_10", description="bench", reference=None,
        dataset={"path": "NA", "revision": "NA"}, category="t2t", eval_splits=["test"],
        eval_langs=["eng-Latn"], date=("2022-12-22", "2022-12-22"), dialect=["Written"], domains=[],
        task_subtypes=[], license="mit", annotations_creators="derived", modalities=["text"],
        sample_creation="found", bibtex_citation="",
    )  # fmt: skip
    corpus = Dataset.from_dict({"id": [f"d{i}" for i in range(n)], "text": [f"doc {i}" for i in range(n)]})
    queries = Dataset.from_dict(
        {"id": [f"q{i}" for i in range(q)], "text": [f"query {n + 7 * i}" for i in range(q)]}
    )
    context = {
        "task_metadata": meta, "hf_split": "test", "hf_subset": "default", "num_proc": None,
        "encode_kwargs": {"batch_size": 4096, "show_progress_bar": False},
    }  # fmt: skip
    model = _search_model(method, NumberEncoder(d), chunk)
    start = time.perf_counter()
    model.index(corpus, **context)
    indexed = time.perf_counter()
    results = model.search(queries, top_k=top_k, top_ranked=None, **context)
    done = time.perf_counter()
    firsts = [max(r.items(), key=lambda x: (x[1], x[0]))[0] for r in results.values()]
    return {"method": method, "index_s": indexed - start, "search_s": done - indexed, "firsts": firsts}


def _measure(method: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        "/usr/bin/time", "-v", sys.executable, __file__, "--one", method, "--n", str(args.n),
        "--q", str(args.q), "--d", str(args.d), "--chunk", str(args.chunk), "--top-k", str(args.top_k),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        errors = [line for line in out.stderr.splitlines() if re.match(r"\w*(Error|Exception)\b", line)]
        return {"method": method, "error": errors[-1] if errors else "failed"}
    row = json.loads(out.stdout.strip().splitlines()[-1])
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    row["peak_gb"] = int(peak.group(1)) / 2**20 if peak else float("nan")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--q", type=int, default=1000)
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--top-k", type=int, default=1000)
    parser.add_argument("--one", choices=METHODS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.n, args.q, args.d, args.chunk, args.top_k)))
        return
    import torch

    print(
        f"CPU: {platform.processor() or platform.machine()}, {torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} threads; {args.n:,} documents x {args.d}, {args.q:,} queries, top_k "
        f"{args.top_k}, chunks of {args.chunk:,}"
    )
    rows = {m: _measure(m, args) for m in METHODS}
    base = rows["default"]
    for method, row in rows.items():
        if "error" in row:
            print(f"{method:8s} not run: {row['error']}")
            continue
        total = row["index_s"] + row["search_s"]
        ratio = total / (base["index_s"] + base["search_s"])
        same = sum(a == b for a, b in zip(row["firsts"], base["firsts"]))
        print(
            f"{method:8s} index {row['index_s']:7.2f} s  search {row['search_s']:7.2f} s  "
            f"total x{ratio:.2f} of mteb's  peak {row['peak_gb']:.2f} GB  "
            f"first document as mteb's: {same}/{len(base['firsts'])}"
        )


if __name__ == "__main__":
    main()
