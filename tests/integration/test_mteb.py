"""``embedmetrics.integrations.mteb`` inside real ``mteb.evaluate`` runs on local synthetic tasks.

mteb's own search (``SearchEncoderWrapper``) is the reference where nothing ties: every score it writes
(nDCG, MAP, recall, precision, MRR, hit rate, the nAUCs of the score values, the main score) must be the
same, on integer-valued embeddings whose dot products are exact in any order of summation (so the score
values themselves are the same bits in its matrix products and in our canonical keys). Where documents tie,
a brute force of the exact scores, ties by document id descending (mteb's and pytrec_eval's order), is the
reference, and mteb's own search is shown to move with the corpus chunk size and order where ours does not.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import concatenate_datasets
from mteb.models.search_wrappers import SearchEncoderWrapper

from _dist import _src_root, run_distributed
from _mteb_helpers import (
    IntegerEncoder,
    KillingEncoder,
    SineEncoder,
    evaluate,
    global_generators_kept,
    search_on_rank,
    search_once,
    task,
)
from embedmetrics.integrations.mteb import ExactIndex, ExactSearch

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _mteb_seeds_are_its_own() -> Iterator[None]:
    with global_generators_kept():
        yield


def _same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ (NaN equals NaN)."""
    assert a.keys() == b.keys()
    return [k for k in a if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))]


def _exact_scores(encoder: IntegerEncoder, queries: dict[str, str], corpus: dict[str, str]) -> np.ndarray:
    q = np.array([encoder.row(t) for t in queries.values()], dtype=np.int64)
    c = np.array([encoder.row(t) for t in corpus.values()], dtype=np.int64)
    return q @ c.T


#: The cut-offs of the tasks without ties: mteb searches the first 100 of each query.
K100 = {"k_values": (1, 3, 5, 10, 100)}


def _wide() -> IntegerEncoder:
    """Integer rows up to 2,000 in 4 columns: dot products below 2**24, exact in float32 in any order."""
    return IntegerEncoder(width=4, bound=2000)


def _distinct_data(seed: int, n_docs: int = 3000, n_queries: int = 60) -> tuple[dict, dict, dict]:
    """Distinct texts; each query judges three of its 50 nearest documents (grades 1 and 2)."""
    rng = np.random.default_rng(seed)
    corpus = {f"d{i:05d}": f"document {seed} {i}" for i in rng.permutation(n_docs)}
    queries = {f"q{i:03d}": f"query {seed} {i}" for i in range(n_queries)}
    scores = _exact_scores(_wide(), queries, corpus)
    ids = list(corpus)
    qrels = {}
    for row, qid in zip(scores, queries):
        near = np.argsort(-row)[:50]
        qrels[qid] = {ids[j]: int(rng.integers(1, 3)) for j in rng.choice(near, 3, replace=False)}
    return corpus, queries, qrels


@pytest.mark.parametrize(
    ("dtype", "torch_out"),
    [(np.float32, False), (np.float16, False), (np.float16, True), (np.float64, False)],
)
def test_where_nothing_ties_every_score_equals_mteb_default_search(dtype: Any, torch_out: bool) -> None:
    """float16 rows (as arrays or tensors) are scored in float32, float64 arrays too, as mteb scores them."""
    corpus, queries, qrels = _distinct_data(2)
    scores = _exact_scores(_wide(), queries, corpus)
    top = -np.sort(-scores, axis=1)[:, :101]
    assert (np.diff(top, axis=1) != 0).all()  # the premise: no tie among the first 101 of any query
    encoder = IntegerEncoder(width=4, bound=2000, dtype=dtype, torch_out=torch_out)
    reference = evaluate(encoder, task(corpus, queries, qrels, **K100))
    for model in (
        ExactSearch(encoder),
        ExactSearch(encoder, corpus_chunk_size=700),
        SearchEncoderWrapper(encoder, index_backend=ExactIndex()),
    ):
        assert _same(evaluate(model, task(corpus, queries, qrels, **K100)), reference) == [], type(
            model
        ).__name__


def _search(model: Any, the_task: Any, top_k: int, batch_size: int = 32) -> dict[str, dict[str, float]]:
    return search_once(model, the_task, top_k, batch_size)


def test_the_results_dict_equals_mteb_default_search_where_nothing_ties() -> None:
    corpus, queries, qrels = _distinct_data(1, n_docs=1500, n_queries=20)
    scores = _exact_scores(_wide(), queries, corpus)
    assert (np.diff(-np.sort(-scores, axis=1)[:, :101], axis=1) != 0).all()  # no tie at the cut
    encoder = _wide()
    expected = _search(SearchEncoderWrapper(encoder), task(corpus, queries, qrels), 100)
    assert _search(ExactSearch(encoder, corpus_chunk_size=333), task(corpus, queries, qrels), 100) == expected
    index = SearchEncoderWrapper(encoder, index_backend=ExactIndex())
    assert _search(index, task(corpus, queries, qrels), 100) == expected


def _tied_data(seed: int) -> tuple[dict, dict, dict]:
    """2,000 documents of 150 distinct texts (copies tie exactly), 40 queries, 3 judged documents each."""
    rng = np.random.default_rng(seed)
    corpus = {f"d{i:05d}": f"text {int(rng.integers(0, 150))}" for i in range(2000)}
    queries = {f"q{i:03d}": f"query {i}" for i in range(40)}
    qrels = {q: {f"d{int(j):05d}": 1 for j in rng.choice(2000, 3, replace=False)} for q in queries}
    return corpus, queries, qrels


def _shuffled(corpus: dict[str, str], seed: int) -> dict[str, str]:
    keys = list(corpus)
    random.Random(seed).shuffle(keys)
    return {k: corpus[k] for k in keys}


def test_ties_are_decided_by_document_id_whatever_the_chunks_order_and_batch_size() -> None:
    """Each list is the first ``top_k`` of the whole corpus by (score, document id) descending, the same
    bits under any corpus chunk size, corpus order and encode batch size; mteb's own search moves."""
    corpus, queries, qrels = _tied_data(3)
    encoder = IntegerEncoder(width=3, bound=2)  # 125 distinct rows at most: blocks of ties at every cut
    exact = _exact_scores(encoder, queries, corpus)
    ids = list(corpus)
    expected = {}
    for qid, row in zip(queries, exact):
        ranked = sorted(range(len(ids)), key=lambda j: (-row[j], [-ord(ch) for ch in ids[j]]))[:10]
        expected[qid] = {ids[j]: float(row[j]) for j in ranked}
    ours, theirs = set(), set()
    for chunk, order, batch in ((50_000, 0, 32), (9, 0, 32), (700, 1, 7), (50_000, 2, 32), (333, 3, 5)):
        data = _shuffled(corpus, order) if order else corpus
        found = _search(ExactSearch(encoder, corpus_chunk_size=chunk), task(data, queries, qrels), 10, batch)
        assert found == expected, (chunk, order, batch)
        k10 = {"k_values": (1, 3, 5, 10)}
        ours.add(
            tuple(sorted(evaluate(ExactSearch(encoder, chunk), task(data, queries, qrels, **k10)).items()))
        )
        mteb_default = SearchEncoderWrapper(encoder, corpus_chunk_size=chunk)
        theirs.add(evaluate(mteb_default, task(data, queries, qrels, **k10))["main_score"])
    assert len(ours) == 1
    assert len(theirs) > 1  # mteb's own search: the cut of a tie block follows the chunks and the order


def test_cosine_rank_scores_equal_mteb_default_and_nothing_moves_with_the_chunk_size() -> None:
    """Float embeddings, cosine: the scores read off the ranking equal mteb's; every score of ours (the
    nAUCs read the score values) is the same under any chunk size."""
    corpus, queries, qrels = _distinct_data(4, n_docs=2000, n_queries=40)
    encoder = SineEncoder()
    reference = evaluate(encoder, task(corpus, queries, qrels))
    runs = [
        evaluate(ExactSearch(encoder, corpus_chunk_size=c), task(corpus, queries, qrels)) for c in (9, 2000)
    ]
    assert _same(runs[0], runs[1]) == []
    differing = _same(runs[0], reference)
    assert all(k.startswith("nauc_") for k in differing), differing


def test_a_reranking_task_ranks_each_querys_candidates_as_mteb_does() -> None:
    corpus, queries, qrels = _distinct_data(5, n_docs=600, n_queries=20)
    rng = np.random.default_rng(5)
    ids = list(corpus)
    top_ranked = {q: [ids[j] for j in rng.choice(600, 40, replace=False)] for q in queries}
    encoder = _wide()
    reference = evaluate(encoder, task(corpus, queries, qrels, top_ranked))
    for model in (
        ExactSearch(encoder, corpus_chunk_size=77),
        SearchEncoderWrapper(encoder, index_backend=ExactIndex()),
    ):
        assert _same(evaluate(model, task(corpus, queries, qrels, top_ranked)), reference) == []
    top_ranked.pop("q003")  # a query without candidates: no results, as mteb's own search gives it
    found = _search(ExactSearch(encoder, 50), task(corpus, queries, qrels, top_ranked), 10)
    assert found == _search(SearchEncoderWrapper(encoder), task(corpus, queries, qrels, top_ranked), 10)
    assert found["q003"] == {}


@pytest.mark.parametrize("setting", [{"ignore_identical_ids": True}, {"skip_first_result": True}])
def test_mtebs_own_result_filters_apply_as_to_its_search(setting: dict[str, bool]) -> None:
    corpus, queries, qrels = _distinct_data(6, n_docs=800, n_queries=20)
    corpus.update(dict(list(queries.items())[:10]))  # queries also in the corpus, under their ids
    encoder = _wide()
    reference = evaluate(encoder, task(corpus, queries, qrels, **setting))
    assert (
        _same(evaluate(ExactSearch(encoder, 100), task(corpus, queries, qrels, **setting)), reference) == []
    )


def test_bad_input_is_named() -> None:
    corpus, queries, qrels = _distinct_data(7, n_docs=50, n_queries=5)
    encoder = _wide()
    with pytest.raises(ValueError, match="similarity_fn_name"):
        ExactSearch(IntegerEncoder(similarity="euclidean"))
    with pytest.raises(ValueError, match="corpus_chunk_size"):
        ExactSearch(encoder, corpus_chunk_size=0)
    nan = IntegerEncoder()
    nan.row = lambda text: np.full(8, np.nan)  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="embeddings"):
        _search(ExactSearch(nan), task(corpus, queries, qrels), 10)
    wide = IntegerEncoder()
    wide.row = lambda text: np.ones(9 if text.startswith("document") else 8)  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="width"):
        _search(ExactSearch(wide), task(corpus, queries, qrels), 10)
    big = _search(ExactSearch(encoder), task(corpus, queries, qrels), 1000)  # top_k past the corpus: all
    assert all(len(docs) == 50 for docs in big.values())
    with pytest.raises(ValueError, match="before searching"):
        ExactSearch(encoder).search(None, top_k=10)
    the_task = task(corpus, queries, qrels)
    with global_generators_kept():
        the_task.load_data()
    split = the_task.dataset["default"]["test"]
    twice = concatenate_datasets([split["corpus"], split["corpus"].select([0])])  # an id given twice
    context = {"task_metadata": the_task.metadata, "hf_split": "test", "hf_subset": "default"}
    search = ExactSearch(encoder)
    search.index(twice, **context)
    with pytest.raises(ValueError, match=f"got the id '{twice[0]['id']}' twice"):
        search.search(split["queries"], top_k=10, encode_kwargs={}, **context)


@pytest.mark.parametrize("reranking", [False, True])
def test_two_gloo_processes_searching_their_shares_give_the_one_process_results(reranking: bool) -> None:
    """Each rank encodes and scans the chunks ``rank::2`` of a tied corpus; the merged lists are the
    single process's, bit for bit, on every rank."""
    corpus, queries, qrels = _tied_data(8)
    ids = list(corpus)
    rng = np.random.default_rng(8)
    top_ranked = (
        {q: [ids[j] for j in rng.choice(2000, 60, replace=False)] for q in queries} if reranking else None
    )
    data = (corpus, queries, qrels, top_ranked)
    expected = search_on_rank(0, 1, data, 10, 170)
    results = run_distributed(
        search_on_rank, 2, kwargs={"data": data, "top_k": 10, "chunk": 170}, timeout=240.0
    )
    for result in results:
        assert result["results"] == expected["results"]
        assert _same(result["scores"], expected["scores"]) == []


_KILLED_RUN = """
import sys
from _mteb_helpers import KillingEncoder, evaluate, task
from embedmetrics.integrations.mteb import ExactSearch
import json
corpus, queries, qrels = json.loads(sys.argv[1])
encoder = KillingEncoder(int(sys.argv[3]), width=3, bound=2)
search = ExactSearch(encoder, corpus_chunk_size=170, checkpoint_dir=sys.argv[2])
evaluate(search, task(corpus, queries, qrels))
"""


def _killed(data: tuple[dict, dict, dict], directory: Path, kill_at: int) -> None:
    """A process that searches with ``checkpoint_dir`` and is SIGKILLed at document chunk ``kill_at``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), _src_root()])}
    command = [sys.executable, "-c", _KILLED_RUN, json.dumps(data), str(directory), str(kill_at)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]


def test_a_killed_search_resumes_at_the_last_saved_chunk_with_the_same_results(tmp_path: Path) -> None:
    """mteb.evaluate killed in a process of its own at chunk 6 of 12, then run again: the same scores."""
    corpus, queries, qrels = _tied_data(9)
    encoder = IntegerEncoder(width=3, bound=2)
    expected = evaluate(ExactSearch(encoder, corpus_chunk_size=170), task(corpus, queries, qrels))
    _killed((corpus, queries, qrels), tmp_path, kill_at=6)  # 12 chunks of 170: 5 folded and saved
    assert [p.name for p in tmp_path.iterdir()] == ["EmbedmetricsSynthetic-default-test.rank0.pt"]
    counting = KillingEncoder(kill_at=0, width=3, bound=2)
    resumed = ExactSearch(counting, corpus_chunk_size=170, checkpoint_dir=str(tmp_path))
    assert _same(evaluate(resumed, task(corpus, queries, qrels)), expected) == []
    assert counting.document_chunks == 12 - 5  # the saved chunks are not encoded again
    assert list(tmp_path.iterdir()) == []  # the split's search ended: its checkpoint is gone


def test_a_checkpoint_of_another_model_corpus_or_setting_is_refused(tmp_path: Path) -> None:
    corpus, queries, qrels = _tied_data(10)
    _killed((corpus, queries, qrels), tmp_path, kill_at=3)
    other_model = IntegerEncoder(width=3, bound=2)
    other_model.mteb_model_meta = other_model.mteb_model_meta.model_copy(update={"revision": "2"})
    fewer = dict(list(corpus.items())[:-1])
    for model, data, chunk, why in (
        (other_model, corpus, 170, "another model: 'embedmetrics-tests/encoder@1' there"),
        (IntegerEncoder(width=3, bound=2), fewer, 170, "another corpus;"),
        (IntegerEncoder(width=3, bound=2), corpus, 171, "another corpus_chunk_size: 170 there, 171 here"),
    ):
        search = ExactSearch(model, corpus_chunk_size=chunk, checkpoint_dir=str(tmp_path))
        with pytest.raises(ValueError, match=re.escape(why)):
            evaluate(search, task(data, queries, qrels))


def _context(the_task: Any) -> dict[str, Any]:
    return {
        "task_metadata": the_task.metadata,
        "hf_split": "test",
        "hf_subset": "default",
        "encode_kwargs": {},
    }


def test_review_findings_ids_as_strings_odd_outputs_and_the_index_checks() -> None:
    """Integer ids tie in their string order; top_k 0 lists nothing; integer tensors are embeddings; a zero
    similarity is +0.0; the corpus is released after the search; the index refuses NaN queries, documents
    of another width and a similarity the model does not declare."""
    from datasets import Dataset

    corpus, queries, qrels = _distinct_data(11, n_docs=40, n_queries=3)
    the_task = task(corpus, queries, qrels)
    encoder = IntegerEncoder(width=3, bound=2)
    same_text = Dataset.from_dict({"id": [9, 10, 11, 100, 2, 3], "text": ["document x"] * 6})
    search = ExactSearch(encoder)
    search.index(same_text, **_context(the_task))
    with global_generators_kept():
        the_task.load_data()
    split = the_task.dataset["default"]["test"]
    found = search.search(split["queries"], top_k=2, **_context(the_task))
    assert all(set(docs) == {"9", "3"} for docs in found.values())  # "9" > "3" > "2" > "11" > "100" > "10"
    assert search.task_corpus is None  # released, as mteb's own search releases it
    search.index(same_text, **_context(the_task))
    assert search.search(split["queries"], top_k=0, **_context(the_task)) == {q: {} for q in queries}

    class TensorEncoder(IntegerEncoder):
        def encode(self, inputs: Any, **kwargs: Any) -> Any:
            rows = torch.as_tensor(super().encode(inputs, **kwargs))
            return rows.long() if kwargs.get("prompt_type") is None else rows.long() * 0

    zero = ExactSearch(TensorEncoder(width=3, bound=2, similarity="cosine"))
    zero.index(same_text, **_context(the_task))
    scores = [
        s
        for docs in zero.search(split["queries"], top_k=3, **_context(the_task)).values()
        for s in docs.values()
    ]
    assert len(scores) == 9
    assert all(math.copysign(1.0, s) == 1.0 for s in scores)  # +0.0, never -0.0
    assert set(scores) == {0.0}

    index = ExactIndex()
    index.add_documents(np.ones((2, 3), np.float32), ["a", "b"])
    with pytest.raises(ValueError, match="width and dtype"):
        index.add_documents(np.ones((2, 4), np.float32), ["c", "d"])
    with pytest.raises(ValueError, match="finite"):
        index.search(np.full((1, 3), np.nan, np.float32), 2, encoder.similarity)
    assert index.search(np.ones((1, 3), np.float32), 0, encoder.similarity) == ([[]], [[]])
    cosine = ExactIndex("cosine")
    cosine.add_documents(np.ones((2, 3), np.float32), ["a", "b"])
    with pytest.raises(ValueError, match="declares 'dot'"):
        cosine.search(np.ones((1, 3), np.float32), 1, encoder.similarity)
    with pytest.raises(ValueError, match="mteb_model_meta"):
        ExactSearch(object())


def test_a_checkpoint_of_a_corpus_of_other_texts_under_the_same_ids_is_refused(tmp_path: Path) -> None:
    corpus, queries, qrels = _tied_data(12)
    _killed((corpus, queries, qrels), tmp_path, kill_at=3)
    changed = {key: text + " changed" if i < 30 else text for i, (key, text) in enumerate(corpus.items())}
    search = ExactSearch(
        IntegerEncoder(width=3, bound=2), corpus_chunk_size=170, checkpoint_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="another corpus;"):
        evaluate(search, task(changed, queries, qrels))
