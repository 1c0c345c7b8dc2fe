"""The sentence-transformers evaluator streams its corpus: each chunk is folded into running lists and
dropped. Its values equal the dense engine's on the whole corpus bit for bit whatever the chunk size
(ties included), its predictions file is the one the whole-corpus run gives, two gloo processes give
the one-process values, and its peak memory does not grow with the corpus."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("sentence_transformers")

from sentence_transformers.util import cos_sim, dot_score, euclidean_sim

from _dist import run_distributed
from _st_stream_helpers import HashModel, stream_cases_on_rank, tied_data
from embedmetrics._engine.dense import scan as dense_scan
from embedmetrics._engine.dense.measures import dense_values
from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator

SCORES = {"cos": cos_sim, "dot": dot_score, "euclid": euclidean_sim}
KS = {"mrr_at_k": [3, 10], "ndcg_at_k": [5, 10], "accuracy_at_k": [1, 5], "precision_recall_at_k": [2, 10]}
ST_NAMES = {
    "accuracy@k": "hit_rate", "precision@k": "precision", "recall@k": "recall", "ndcg@k": "ndcg",
    "mrr@k": "mrr", "map@k": "map",
}  # fmt: skip


def _whole_corpus(evaluator: Any, model: HashModel, return_run: bool = False) -> dict[str, dict[str, Any]]:
    """The engine's ``dense_values`` of every score function on the whole corpus at once (the route the
    evaluator took before it streamed), float64 values."""
    queries = model.encode_query(list(evaluator.queries))
    corpus = model.encode_document(list(evaluator.corpus))
    doc_code = {key: i for i, key in enumerate(sorted(evaluator.corpus_ids))}
    codes = torch.tensor([doc_code[key] for key in evaluator.corpus_ids])
    qrels = torch.tensor(
        [
            (q, doc_code[d], 1)
            for q, qid in enumerate(evaluator.queries_ids)
            for d in evaluator.relevant_docs[qid]
        ]
    )
    sims = {"cos": "cosine", "dot": "dot", "euclid": "euclidean"}
    out = {}
    for name, sim in sims.items():
        opts = replace(evaluator._options, similarity=sim, return_run=return_run)
        out[name] = dense_values(
            queries, torch.arange(len(queries)), corpus, codes, qrels, opts, value_dtype=torch.float64
        )
    return out


def _expected_per_query(evaluator: Any, whole: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """sentence-transformers' keys of the whole-corpus values (``map@k`` divided by ``min(k, R)``)."""
    sizes = torch.tensor(
        [len(evaluator.relevant_docs[q]) for q in evaluator.queries_ids], dtype=torch.float64
    )
    cut_offs = {
        "accuracy@k": evaluator.accuracy_at_k, "precision@k": evaluator.precision_recall_at_k,
        "recall@k": evaluator.precision_recall_at_k, "ndcg@k": evaluator.ndcg_at_k,
        "mrr@k": evaluator.mrr_at_k, "map@k": evaluator.map_at_k,
    }  # fmt: skip
    expected = {}
    for name, values in whole.items():
        for st_name, ks in cut_offs.items():
            for k in ks:
                per_query = values[f"{ST_NAMES[st_name]}@{k}"]
                if st_name == "map@k":
                    per_query = per_query * sizes / sizes.clamp(max=k)
                expected[f"{name}_{st_name.replace('@k', f'@{k}')}"] = per_query.numpy()
    return expected


@pytest.mark.parametrize("ties", ["average", "pessimistic"])
def test_every_chunk_size_gives_the_whole_corpus_values_bit_for_bit(ties: str) -> None:
    data = tied_data(30, 40, 9)  # 40 documents of 9 distinct texts: tie blocks everywhere
    model = HashModel()
    reference = InformationRetrievalEvaluator(*data, score_functions=SCORES, ties=ties, **KS)
    expected = _expected_per_query(reference, _whole_corpus(reference, model))
    corpus = model.encode_document(list(reference.corpus))
    for chunk in (1, 3, 7, 40, 1000):  # 7 does not divide 40; 1000 is larger than the corpus
        kwargs = {"score_functions": SCORES, "ties": ties, "corpus_chunk_size": chunk, **KS}
        for given in (None, corpus, corpus.to_sparse()):
            evaluator = InformationRetrievalEvaluator(*data, **kwargs)
            evaluator(model, corpus_embeddings=given)
            assert list(evaluator.per_query) == list(expected)
            for key, values in expected.items():
                np.testing.assert_array_equal(evaluator.per_query[key], values, err_msg=f"{chunk} {key}")


def test_chunks_after_the_lists_fill_scanned_in_several_bounded_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 55: 3,000 documents of 2,500 texts in chunks of 700, key blocks of a few columns: every chunk
    after the first is scanned up to the running lists' reach in many blocks, whose keys all count."""
    monkeypatch.setattr(dense_scan, "DENSE_BLOCK_BYTES", 2**11)
    data = tied_data(12, 3_000, 2_500)
    model = HashModel()
    reference = InformationRetrievalEvaluator(*data, score_functions=SCORES, **KS)
    expected = _expected_per_query(reference, _whole_corpus(reference, model))
    evaluator = InformationRetrievalEvaluator(*data, score_functions=SCORES, corpus_chunk_size=700, **KS)
    evaluator(model)
    for key, values in expected.items():
        np.testing.assert_array_equal(evaluator.per_query[key], values, err_msg=key)


def test_predictions_are_those_of_the_whole_corpus(tmp_path: Path) -> None:
    data = tied_data(25, 60, 14)
    model = HashModel()
    reference = InformationRetrievalEvaluator(*data, score_functions=SCORES, write_predictions=True)
    for name, values in _whole_corpus(reference, model, return_run=True).items():
        reference._write_predictions(str(tmp_path / "whole"), name, values["run"])
    files = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert len(files) == 3
    ties = 0
    for chunk in (1, 7, 100):
        evaluator = InformationRetrievalEvaluator(
            *data, score_functions=SCORES, write_predictions=True, corpus_chunk_size=chunk
        )
        evaluator(model, output_path=str(tmp_path / str(chunk)))
        for file in files:
            text = (tmp_path / str(chunk) / file).read_text()
            assert text == (tmp_path / "whole" / file).read_text(), (chunk, file)
            for row in map(json.loads, text.splitlines()):
                scores = [h["score"] for h in row["results"]]
                ties += sum(a == b for a, b in zip(scores, scores[1:]))
    assert ties  # tied documents are listed, by id


def test_two_processes_streaming_their_shares_give_the_one_process_values() -> None:
    data = tied_data(23, 37, 11)
    kwargs = {"score_functions": SCORES, "corpus_chunk_size": 4, **KS}
    model = HashModel()
    one = InformationRetrievalEvaluator(*data, **kwargs)
    one(model)
    ranks = run_distributed(stream_cases_on_rank, 2, timeout=240, kwargs={"data": data, "kwargs": kwargs})
    n_queries = len(one.queries)
    for got in ranks:
        for route in ("encoded", "given"):
            assert list(got[route]) == list(one.per_query)
            for key, values in one.per_query.items():
                np.testing.assert_array_equal(got[route][key], values, err_msg=f"{route} {key}")
        assert got["texts"] == -(-n_queries // 2) + -(-37 // 2)  # ceil(n / 2) of each, padded
        assert "too large for dot scores" in got["error"]
    assert ranks[0]["error"] == ranks[1]["error"]  # rank 0's share alone would not overflow


MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys, torch
    sys.path.insert(0, sys.argv[1])
    from _st_stream_helpers import HashModel
    from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator
    torch.set_num_threads(1)
    n_docs, width, chunk = 200_000, 256, 10_000
    model = HashModel(width)
    corpus = {f"d{i}": f"text {i}" for i in range(n_docs)}
    queries = {f"q{i}": f"text {i * 997}" for i in range(50)}
    relevant = {q: {f"d{i * 997 + 1}"} for i, q in enumerate(queries)}
    small = InformationRetrievalEvaluator(queries, {k: corpus[k] for k in list(corpus)[:60_000]}, relevant,
                                          corpus_chunk_size=chunk, write_csv=False)
    small(model)  # imports, first calls and the chunk-sized buffers, outside the measurement
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, corpus_chunk_size=chunk,
                                              write_csv=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = evaluator(model)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert model.texts == 60_050 + n_docs + 50
    print((after - before) * 1024, n_docs * width * 4)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB (Linux)")
def test_peak_memory_holds_one_chunk_not_the_corpus() -> None:
    tests = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, tests], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    growth, whole = map(int, done.stdout.split())
    # the whole float32 corpus is 205 MB (holding it, then concatenating chunks, grew by 2x that);
    # one 10,000-row chunk is 10 MB
    assert growth < whole / 4, f"peak grew by {growth / 2**20:.1f} MiB; the corpus is {whole / 2**20:.1f} MiB"


def test_corpus_ids_of_two_types_name_the_ids_that_collide() -> None:
    queries, relevant = {"q1": "w1"}, {"q1": {"7"}}
    with pytest.raises(
        ValueError, match=r"comparable type.*the ids 7 \(int\) and '7' \(str\), which print alike"
    ):
        InformationRetrievalEvaluator(queries, {7: "w1 w2", "7": "w1", "d1": "w3"}, relevant)
    with pytest.raises(
        ValueError, match=r"comparable type.*\['int', 'str'\]: the ids 'd1' \(str\) and 8 \(int\)\.$"
    ):
        InformationRetrievalEvaluator(queries, {"d1": "w3", "7": "w1", 8: "w2"}, relevant)
