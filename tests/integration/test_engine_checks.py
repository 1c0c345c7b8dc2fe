"""Checks live in the engine (ARCHITECTURE.md: ``_engine/`` computes and validates, the faces are thin):
the validators of ``ConfidenceInterval``'s wrapped metric and of the sentence-transformers evaluator's
``corpus_embeddings`` raise on bad input when called directly, and no face defines a private check of
its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from embedmetrics._engine.core.checks import check_corpus_embeddings, check_per_query_metric
from embedmetrics._engine.ranking.options import OPTIONS as RANKING
from embedmetrics._engine.spectral.options import OPTIONS as SPECTRAL

SRC = Path(__file__).resolve().parents[2] / "src" / "embedmetrics"


def test_the_per_query_validator_refuses_a_metric_without_per_query_values() -> None:
    with pytest.raises(
        ValueError, match=r"`metric` must be an embedmetrics metric .* got MulticlassAccuracy"
    ):
        check_per_query_metric("MulticlassAccuracy", None, None)  # not registered
    with pytest.raises(ValueError, match=r"`metric` must be an embedmetrics metric .* got RankMe"):
        check_per_query_metric("RankMe", SPECTRAL["RankMe"], None)  # no `aggregation` setting
    with pytest.raises(ValueError, match=r"aggregation='none', got aggregation='mean'"):
        check_per_query_metric("RetrievalMRR", RANKING["RetrievalMRR"], "mean")
    with pytest.raises(ValueError, match=r"aggregation='none', got aggregation=<built-in function max>"):
        check_per_query_metric("RetrievalMRR", RANKING["RetrievalMRR"], max)
    check_per_query_metric("RetrievalMRR", RANKING["RetrievalMRR"], "none")  # accepted


@pytest.mark.parametrize(
    "given",
    [torch.zeros(4, 3), torch.zeros(5), torch.zeros(5, 3, 2), np.zeros((6, 3))],
    ids=["fewer rows", "1-D", "3-D", "NumPy, more rows"],
)
def test_the_corpus_embeddings_validator_refuses_another_shape(given: object) -> None:
    shape = tuple(np.shape(given))  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"`corpus_embeddings`.*\(5 rows\), got .* shape {re.escape(str(shape))}"
    ):
        check_corpus_embeddings(given, 5)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_the_corpus_embeddings_validator_keeps_none_strided_and_coo_and_densifies_the_rest() -> None:
    dense = torch.arange(15.0).reshape(5, 3)
    assert check_corpus_embeddings(None, 5) is None
    assert check_corpus_embeddings(dense, 5) is dense
    coo = dense.to_sparse()
    assert check_corpus_embeddings(coo, 5) is coo  # densified chunk by chunk by its caller
    csr = check_corpus_embeddings(dense.to_sparse_csr(), 5)
    assert csr is not None
    assert csr.layout == torch.strided
    assert torch.equal(csr, dense)
    from_numpy = check_corpus_embeddings(dense.numpy(), 5)
    assert from_numpy is not None
    assert torch.equal(from_numpy, dense)


def _faces() -> list[Path]:
    """The public faces: the top-level modules, the functional twins and the integrations."""
    return [*SRC.glob("*.py"), *(SRC / "functional").glob("*.py"), *(SRC / "integrations").glob("*.py")]


def test_no_face_defines_a_private_check() -> None:
    found = []
    for path in _faces():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("_check"):
                found.append(f"{path.relative_to(SRC)}:{node.name}")
    assert found == []
