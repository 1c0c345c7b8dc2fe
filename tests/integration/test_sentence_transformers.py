"""``embedmetrics.integrations.sentence_transformers``: sentence-transformers' own evaluator is the
oracle on tie-free data, the brute-force dense oracle (every order of tied documents) on tied data;
1, 2 and 3 gloo processes, and the trainer with 1 and 2 processes, agree."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("sentence_transformers")

from sentence_transformers.sentence_transformer.evaluation import (
    InformationRetrievalEvaluator as STEvaluator,
)
from sentence_transformers.util import cos_sim, dot_score, euclidean_sim, manhattan_sim

import embedmetrics as em
from _dist import run_distributed
from _st_helpers import (
    TWO_QUERIES,
    EncodeCounter,
    build_model,
    evaluate,
    evaluate_on_rank,
    load_model,
    make_data,
    train_on_rank,
    uneven_cases_on_rank,
)
from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator, padded_share
from oracles.dense import dense_reference

KS = {"mrr_at_k": [3, 10], "ndcg_at_k": [5, 10], "accuracy_at_k": [1, 5], "precision_recall_at_k": [2, 10]}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny_sentence_transformer")
    build_model(path)
    return path


@pytest.fixture
def model(model_dir: Path) -> Any:
    return load_model(model_dir)


def _both(model: Any, data: tuple[Any, ...], tmp_path: Path, **kwargs: Any) -> tuple[Any, Any, dict, dict]:
    theirs, ours = STEvaluator(*data, **kwargs), InformationRetrievalEvaluator(*data, **kwargs)
    expected = theirs(model, output_path=str(tmp_path / "theirs"))
    return theirs, ours, expected, ours(model, output_path=str(tmp_path / "ours"))


@pytest.mark.parametrize(
    ("similarity", "kwargs"),
    [
        (None, {"name": "tiny", "corpus_chunk_size": 37, **KS}),
        (None, {"score_functions": {"cos": cos_sim, "dot": dot_score}, "main_score_function": "dot"}),
        ("euclidean", {"truncate_dim": 8, "map_at_k": [3, 50], "write_predictions": True}),
        ("dot", {"query_prompt": "w1 ", "corpus_prompt": "w2 ", "name": "p"}),
    ],
)
def test_every_key_equals_sentence_transformers(
    model_dir: Path, tmp_path: Path, similarity: str | None, kwargs: dict[str, Any]
) -> None:
    model = load_model(model_dir, similarity)
    data = make_data(0, 40, 300)
    theirs, ours, expected, got = _both(model, data, tmp_path, **kwargs)
    assert list(got) == list(expected)
    np.testing.assert_allclose([got[k] for k in got], [expected[k] for k in expected], rtol=0, atol=1e-6)
    assert ours.primary_metric == theirs.primary_metric
    mine, their = ((tmp_path / who / theirs.csv_file).read_text().splitlines() for who in ("ours", "theirs"))
    assert mine[0] == their[0]  # the header
    np.testing.assert_allclose(
        np.array(mine[1].split(","), float), np.array(their[1].split(","), float), atol=1e-6
    )
    for key, value in got.items():  # the per-query values average to the results
        assert ours.per_query[key].shape == (len(ours.per_query_ids),)
        assert float(np.mean(ours.per_query[key])) == pytest.approx(value, abs=1e-12)
    if kwargs.get("write_predictions"):
        name = theirs.predictions_file.replace(".jsonl", "_euclidean.jsonl")
        mine, their = (
            [json.loads(line) for line in (tmp_path / who / name).read_text().splitlines()]
            for who in ("ours", "theirs")
        )
        assert [(p["query_id"], p["query"]) for p in mine] == [(p["query_id"], p["query"]) for p in their]
        for ours_row, their_row in zip(mine, their):
            assert [h["corpus_id"] for h in ours_row["results"]] == [
                h["corpus_id"] for h in their_row["results"]
            ]
            got_scores = [h["score"] for h in ours_row["results"]]
            np.testing.assert_allclose(got_scores, [h["score"] for h in their_row["results"]], atol=1e-5)


def test_queries_without_relevant_documents_are_skipped_as_sentence_transformers(
    model: Any, tmp_path: Path
) -> None:
    queries, corpus, relevant = make_data(3, 30, 120)
    relevant = {**relevant, "q000": set(), "unknown-query": {"d0001"}}
    _, ours, expected, got = _both(model, (queries, corpus, relevant), tmp_path)
    assert "q000" not in ours.per_query_ids
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=0, atol=1e-6)


def test_corpus_embeddings_given(model: Any) -> None:
    data = make_data(4, 25, 150)
    corpus = model.encode_document(list(data[1].values()), convert_to_tensor=True)
    counter = EncodeCounter(model)
    got = InformationRetrievalEvaluator(*data)(model, corpus_embeddings=corpus)
    assert counter.texts == len(InformationRetrievalEvaluator(*data).queries)  # the queries alone
    expected = STEvaluator(*data)(model, corpus_embeddings=corpus)
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # sentence-transformers' own
def test_corpus_embeddings_of_the_wrong_rows_raise_and_sparse_ones_are_densified(model: Any) -> None:
    data = make_data(4, 25, 150)
    corpus = model.encode_document(list(data[1].values()), convert_to_tensor=True)
    counter = EncodeCounter(model)
    for wrong in (corpus[:140], torch.cat([corpus, corpus[:3]]), corpus[0]):
        with pytest.raises(ValueError, match=r"`corpus_embeddings`.*\(150 rows\).*shape"):
            InformationRetrievalEvaluator(*data)(model, corpus_embeddings=wrong)
    assert counter.texts == 0  # raised before anything was encoded
    got = InformationRetrievalEvaluator(*data)(model, corpus_embeddings=corpus.to_sparse())
    expected = STEvaluator(*data)(model, corpus_embeddings=corpus.to_sparse())
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=0, atol=1e-6)


def test_return_per_query_gives_the_results_and_the_per_query_values(model: Any) -> None:
    evaluator = InformationRetrievalEvaluator(*make_data(4, 25, 150), name="v")
    results, per_query = evaluator(model, return_per_query=True)
    assert list(per_query) == list(results)
    for key, value in results.items():
        assert float(np.mean(per_query[key])) == pytest.approx(value, abs=1e-12)
        np.testing.assert_array_equal(per_query[key], evaluator.per_query[key])


def test_predictions_list_equal_printed_scores_by_document_id(model: Any, tmp_path: Path) -> None:
    data = make_data(5, 30, 150)
    evaluator = InformationRetrievalEvaluator(*data, write_predictions=True, name="t")
    evaluator(model, output_path=str(tmp_path))
    lines = (tmp_path / evaluator.predictions_file.replace(".jsonl", "_cosine.jsonl")).read_text()
    ties = 0
    for row in map(json.loads, lines.splitlines()):
        keys = [(-h["score"], h["corpus_id"]) for h in row["results"]]
        assert keys == sorted(keys), row["query_id"]
        ties += sum(a[0] == b[0] for a, b in zip(keys, keys[1:]))
    assert ties  # some printed scores are equal: the order among them is checked


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
def test_tied_documents_follow_the_tie_oracle(model: Any, ties: str) -> None:
    texts = ["w1 w2", "w3 w4", "w1 w2", "w5 w6 w7", "w3 w4", "w8", "w1 w2"]  # identical texts: exact ties
    corpus = {f"d{i}": t for i, t in enumerate(texts)}
    queries = {"q0": "w1", "q1": "w3 w9", "q2": "w8 w2", "q3": "w6"}
    relevant = {"q0": {"d2", "d1"}, "q1": {"d4"}, "q2": {"d0", "d6", "d5"}, "q3": {"d3", "d1"}}
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, ties=ties, **KS)
    evaluator(model)
    q = model.encode_query(list(queries.values()), convert_to_numpy=True)
    c = model.encode_document(texts, convert_to_numpy=True)
    qrels = [(qi, int(d[1:]), 1) for qi, qid in enumerate(queries) for d in relevant[qid]]
    keys = [
        f"{m}@{k}"
        for m in ("ndcg", "recall", "precision", "mrr", "map", "hit_rate")
        for k in (1, 2, 3, 5, 10, 100)
    ]
    oracle = dense_reference(q, c, qrels, keys, depth=7, ties=ties)
    sizes = np.array([len(relevant[qid]) for qid in queries], dtype=float)
    checked = 0
    for key in keys:
        measure, k = key.split("@")
        st_measure = {"hit_rate": "accuracy"}.get(measure, measure)
        name = f"cosine_{st_measure}@{k}"
        if name not in evaluator.per_query:
            continue
        expected = np.array(oracle[key]) * (sizes / np.minimum(sizes, int(k)) if measure == "map" else 1.0)
        np.testing.assert_allclose(evaluator.per_query[name], expected, rtol=0, atol=1e-6, err_msg=key)
        checked += 1
    assert checked == len(evaluator.per_query) == 11


def _forwards(n_queries: int, n_docs: int, batch: int, chunk: int) -> int:
    """Forward passes of ``n_queries`` queries and ``n_docs`` documents encoded by chunks."""
    starts = range(0, n_docs, chunk)
    return -(-n_queries // batch) + sum(-(-min(chunk, n_docs - s) // batch) for s in starts)


def test_one_two_and_three_processes_agree_each_encoding_as_many_texts(model_dir: Path) -> None:
    data = make_data(5, 23, 97)
    kwargs = {"corpus_chunk_size": 16, "batch_size": 4, **KS}
    one = evaluate(str(model_dir), data, kwargs)
    n_queries = len(InformationRetrievalEvaluator(*data).queries)
    assert one["texts"] == n_queries + 97
    assert one["forwards"] == _forwards(n_queries, 97, 4, 16)  # no padding in one process
    for world in (2, 3):
        ranks = run_distributed(
            evaluate_on_rank, world, timeout=240,
            kwargs={"model_dir": str(model_dir), "data": data, "kwargs": kwargs},
        )  # fmt: skip
        unpadded = {
            _forwards(len(q), len(d), 4, 16)
            for q, d in zip(np.array_split(np.arange(n_queries), world), np.array_split(np.arange(97), world))
        }
        assert len(unpadded) == 2  # the data would give the ranks unequal forward passes unpadded
        for got in ranks:
            assert got["results"] == one["results"]
            for key, values in one["per_query"].items():
                np.testing.assert_array_equal(got["per_query"][key], values)
            shares = (-(-n_queries // world), -(-97 // world))
            assert got["texts"] == sum(shares)  # ceil(n / world) of each, padded
            assert got["forwards"] == _forwards(*shares, 4, 16)  # the same on every rank (FSDP)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_padded_shares_are_equal_and_keep_every_item_once(world: int) -> None:
    for n in range(1, 12):
        items = [f"t{i}" for i in range(n)]
        kept: list[str] = []
        for rank in range(world):
            texts, part = padded_share(items, (rank, world))
            assert len(texts) == -(-n // world)
            assert texts[: part.stop - part.start] == items[part]
            assert set(texts) <= set(items)
            kept += texts[: part.stop - part.start]
        assert kept == items
    assert padded_share(["a", "b"], None) == (["a", "b"], slice(0, 2))


def test_empty_shares_fsdp_and_rank_zero_alone_under_three_processes(model_dir: Path) -> None:
    # 2 queries for 3 ranks (an empty share before padding) with a bf16 model and a truncate_dim
    # wider than the model; FSDP over 64 documents in batches of 7 (shares 22, 21, 21: 4 and 3
    # forward passes unpadded); rank 0 alone with distributed=False, then a barrier
    fsdp_data = make_data(3, 10, 64)
    ranks = run_distributed(
        uneven_cases_on_rank, 3, timeout=240, kwargs={"model_dir": str(model_dir), "fsdp_data": fsdp_data}
    )
    model = load_model(model_dir)
    expected = {
        "bf16": STEvaluator(*TWO_QUERIES)(load_model(model_dir).to(torch.bfloat16))["cosine_ndcg@10"],
        "truncate": STEvaluator(*TWO_QUERIES, truncate_dim=32)(model)["cosine_ndcg@10"],
        "fsdp": STEvaluator(*fsdp_data)(model)["cosine_ndcg@10"],
    }
    for got in ranks:
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, abs=1e-6), key
    assert ranks[0]["alone"] == pytest.approx(expected["fsdp"], abs=1e-6)
    assert "alone" not in ranks[1]


def test_distributed_true_without_a_process_group_raises(model: Any) -> None:
    evaluator = InformationRetrievalEvaluator(*TWO_QUERIES, distributed=True)
    counter = EncodeCounter(model)
    with pytest.raises(ValueError, match="`distributed` is True"):
        evaluator(model)
    assert counter.texts == 0
    with pytest.raises(ValueError, match="distributed"):
        InformationRetrievalEvaluator(*TWO_QUERIES, distributed="yes")  # type: ignore[arg-type]


def test_trainer_logs_the_same_metrics_with_one_and_two_processes(model_dir: Path, tmp_path: Path) -> None:
    data = make_data(6, 20, 60)
    kwargs = {"model_dir": str(model_dir), "data": data}
    one = run_distributed(train_on_rank, 1, timeout=240, kwargs={**kwargs, "out_dir": str(tmp_path / "1")})
    two = run_distributed(train_on_rank, 2, timeout=240, kwargs={**kwargs, "out_dir": str(tmp_path / "2")})
    assert [r["world_size"] for r in one + two] == [1, 2, 2]
    assert len(one[0]["logged"]) == 2
    assert one[0]["logged"][0]
    assert two[0]["logged"] == one[0]["logged"]
    assert two[1]["logged"] == one[0]["logged"]  # the trainer broadcasts rank 0's values
    # the trainer shared the encoding out: each rank encoded half of what one process did
    assert two[0]["texts"] + two[1]["texts"] == one[0]["texts"]
    assert min(two[0]["texts"], two[1]["texts"]) > 0


# --------------------------------------------------------------------------- bad input


def test_bad_input_raises_before_anything_is_encoded(model_dir: Path, tmp_path: Path) -> None:
    queries, corpus, relevant = make_data(7, 10, 40)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"relevant_docs": {**relevant, "q001": {"d0001", "missing"}}}, "absent from `corpus`"),
        ({"relevant_docs": {"q001": ["d0001", "d0001"]}}, "more than once"),
        ({"relevant_docs": {"q001": "d0001"}}, "set of document ids"),
        ({"relevant_docs": {"q001": set()}}, "at least one relevant document"),
        ({"corpus": {**corpus, 7: "w1"}}, "comparable type"),
        ({"score_functions": {"manhattan": manhattan_sim}}, "score_functions"),
        ({"score_functions": {"mine": lambda a, b: a @ b.T}}, "score_functions"),
        ({"score_functions": {"cos": cos_sim}, "main_score_function": "dot"}, "main_score_function"),
        ({"main_score_function": "no-such-function"}, "no-such-function"),
        ({"ties": "random"}, "ties"),
    ]
    for change, message in cases:
        given = {"queries": queries, "corpus": corpus, "relevant_docs": relevant, **change}
        with pytest.raises(ValueError, match=message):
            InformationRetrievalEvaluator(**given)
    model = load_model(model_dir, "manhattan")
    counter = EncodeCounter(model)
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant)
    with pytest.raises(ValueError, match="manhattan") as raised:
        evaluator(model, output_path=str(tmp_path))
    assert len(str(raised.value)) < 400  # names the similarity, not the model's whole repr
    assert "similarity_fn_name='manhattan'" in str(raised.value)
    assert counter.texts == 0
    assert not (tmp_path / evaluator.csv_file).exists()


def test_euclidean_scores_are_minus_the_distance(model: Any, tmp_path: Path) -> None:
    data = make_data(8, 15, 80)
    kwargs = {"score_functions": {"euclidean": euclidean_sim}}
    _, _, expected, got = _both(model, data, tmp_path, **kwargs)
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- checkpoints, imports


def test_two_checkpoints_compare_on_per_query_values(model_dir: Path) -> None:
    data = make_data(9, 30, 120)
    first, second = load_model(model_dir, "cosine"), load_model(model_dir, "dot")
    values = {}
    for label, checkpoint in (("cosine", first), ("dot", second)):
        evaluator = InformationRetrievalEvaluator(*data, name="val")
        evaluator(checkpoint)
        values[label] = evaluator.per_query[f"val_{label}_ndcg@10"]
    result = em.functional.compare(values, test="t")
    assert result.to_dict()["pairs"]


def test_without_sentence_transformers_the_import_names_the_extra() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["sentence_transformers"] = None  # as if it were not installed
        import embedmetrics
        embedmetrics.integrations
        try:
            import embedmetrics.integrations.sentence_transformers
        except ImportError as error:
            print(error)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install sentence-transformers (the [sentence-transformers] extra" in done.stdout
    done = subprocess.run(
        [sys.executable, "-c", "import sys, embedmetrics; embedmetrics.integrations; "
         "print('sentence_transformers' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "False"
