"""A cheap fake sentence-transformers model and data with tied documents, for ``test_st_streaming.py``,
and the function its gloo processes run (a module of its own, so that ``tests/_dist.py``'s workers load
it by path).

``HashModel`` encodes a text as a row that depends on the text alone (its CRC-32 drives a few sines): the
same text gives the same row whatever the batch or chunk it is encoded in (identical texts: exactly
tied documents), and 200,000 texts encode in well under a second. No network, no weights.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

WIDTH = 24


class _CardData:
    def set_evaluation_metrics(self, *args: Any, **kwargs: Any) -> None:
        """The model card is not the tests' concern."""


class HashModel:
    """Just enough of a ``SentenceTransformer`` for the evaluators: ``encode_query`` and
    ``encode_document`` give each text a deterministic row of ``width`` float32 values; ``similarity``
    is the model's similarity function (``similarity_fn_name``)."""

    device = torch.device("cpu")

    def __init__(self, width: int = WIDTH, similarity_fn_name: str = "cosine") -> None:
        self.width = width
        self.similarity_fn_name = similarity_fn_name
        self.model_card_data = _CardData()
        self.texts = 0  # texts encoded, every call

    def encode_query(self, texts: list[str], **kwargs: Any) -> torch.Tensor:
        self.texts += len(texts)
        codes = torch.tensor([zlib.crc32(str(t).encode()) for t in texts], dtype=torch.float64)
        steps = torch.arange(1, self.width + 1, dtype=torch.float64)
        rows = torch.sin(codes[:, None] * (steps * 1e-4)[None, :] + steps[None, :])
        return rows.to(torch.float32)

    encode_document = encode_query

    def similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from sentence_transformers.util.similarity import SimilarityFunction

        return SimilarityFunction.to_similarity_fn(self.similarity_fn_name)(a, b)

    def get_sentence_embedding_dimension(self) -> int:
        return self.width


def tied_data(
    n_queries: int, n_docs: int, n_texts: int
) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """Queries, a corpus of ``n_docs`` documents drawn from ``n_texts`` distinct texts (identical texts:
    exact ties) and 1 to 4 relevant documents per query (some queries without: skipped)."""
    g = torch.Generator().manual_seed(n_queries * 1000 + n_docs)
    corpus = {
        f"d{i:04d}": f"text {int(t)}" for i, t in enumerate(torch.randint(0, n_texts, (n_docs,), generator=g))
    }
    queries = {f"q{i:03d}": f"query {i}" for i in range(n_queries)}
    relevant: dict[str, set[str]] = {}
    for q, qid in enumerate(queries):
        n = int(torch.randint(0, 5, (), generator=g))
        if q % 7 != 3 and n > 0:
            picked = torch.randperm(n_docs, generator=g)[:n]
            relevant[qid] = {f"d{int(i):04d}" for i in picked}
    return queries, corpus, relevant


def stream_cases_on_rank(
    rank: int, world: int, data: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """On one rank of a gloo group: the evaluator's per-query values with the corpus encoded, and with
    the corpus embeddings given; and the error every rank raises where one rank's share holds a row
    too large for dot scores (that rank alone could see it)."""
    from sentence_transformers.util import dot_score

    from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator

    model = HashModel()
    out: dict[str, Any] = {}
    encoded = InformationRetrievalEvaluator(*data, **kwargs)
    encoded(model)
    out["encoded"] = encoded.per_query
    out["texts"] = model.texts
    corpus = model.encode_document(list(data[1].values()))
    given = InformationRetrievalEvaluator(*data, **kwargs)
    given(model, corpus_embeddings=corpus)
    out["given"] = given.per_query
    huge = corpus.clone()
    huge[-1] *= 1e37  # on the last rank's share only
    try:
        InformationRetrievalEvaluator(*data, score_functions={"dot": dot_score})(
            model, corpus_embeddings=huge
        )
    except ValueError as error:
        out["error"] = str(error)
    return out
