"""``DenseRetrieval``: query embeddings against a corpus with qrels, accumulated and sharded across processes.

Queries and documents are kept as rows (with their int64 ids) until ``compute``. After a distributed
sync every process holds all queries but only *its own* corpus rows: each scans its corpus share
against all queries and the per-process top-``depth`` lists are merged exactly
(``embedmetrics._engine.dense.scan``), so the corpus is never gathered and per-process compute is
proportional to its share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from embedmetrics._engine.core.inputs import Arg, BatchSpec
from embedmetrics._engine.core.scan import metric_shard
from embedmetrics._engine.dense.measures import dense_options, dense_values
from embedmetrics._engine.dense.qrels import check_new_ids, check_qrels
from embedmetrics._engine.settings.options import options_in, read_options
from embedmetrics._metric.base import BaseMetric
from embedmetrics._metric.seen_ids import SeenIds

__all__ = ["DenseRetrieval"]

_ROLES = ("query", "corpus")


class DenseRetrieval(BaseMetric):
    r"""Dense retrieval metrics of query embeddings against a corpus, with qrels, as trec_eval computes them.

    ``update(embeddings, ids, role="query")`` adds query rows, ``role="corpus"`` document rows, any
    number of times, in any order, on any process; ids are integers, unique per role across all
    processes (dataset indices, say). The qrels (``(n, 3)`` ``(query_id, doc_id, relevance)``) are
    given at construction or through ``set_qrels``, the same on every process. ``compute``
    returns what [`dense_retrieval`][embedmetrics.functional.dense_retrieval] returns on all the rows:
    a dict with ``f"{metric}@{k}"`` for every metric and cut-off (``"r_precision"`` alone), and the run
    when asked.
    In a distributed run each process scans only its own corpus rows against all queries and the
    top-``depth`` lists are merged exactly: every process returns the same, equal to one process
    holding everything.

    Args:
        qrels: ``(n, 3)`` integer relevance judgements, or ``None`` to set them later.
        k: a cut-off or a sequence of them.
        metrics: a subset of ``("ndcg", "recall", "precision", "mrr", "map", "hit_rate",
            "r_precision")``; ``None``: all.
        depth: length of the retrieved list; default ``max(k)``.
        similarity: ``"cosine"``, ``"dot"`` or ``"euclidean"``.
        exclude_self: drop the document whose id equals the query's id from its ranking.
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        aggregation: ``"mean"``, ``"median"``, ``"min"``, ``"max"``, a callable, or ``"none"``.
        return_run: also return ``"run"`` (``(doc_ids, scores)`` per query).
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import DenseRetrieval
        >>> metric = DenseRetrieval(torch.tensor([[10, 100, 1], [11, 102, 2]]), k=(1, 2), metrics=["ndcg"])
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([10, 11]), role="query")
        >>> metric.update(torch.tensor([[0.9, 0.1], [0.1, 0.9]]), torch.tensor([100, 101]), role="corpus")
        >>> metric.update(torch.tensor([[0.6, 0.8]]), torch.tensor([102]), role="corpus")
        >>> {key: round(float(v), 4) for key, v in metric.compute().items()}
        {'ndcg@1': 0.5, 'ndcg@2': 0.8155}
    """

    full_state_update: bool = False
    is_differentiable: bool = False
    higher_is_better: bool = True
    #: The corpus shards stay on their process at a sync; ``compute`` merges their lists.
    _process_local_states: ClassVar[tuple[str, ...]] = ("corpus", "corpus_ids")
    _embedding_states = ("query", "corpus")
    _unique_id_states = ("query_ids", "corpus_ids")  # ``merge_state`` refuses known ids, as ``update``
    _aligned_row_stores = (("query", "query_ids"), ("corpus", "corpus_ids"))
    batch_spec = BatchSpec(
        (Arg("embeddings"), Arg("ids", "ids", rows_of="embeddings")), roles=_ROLES, allow_empty=True
    )
    _qrels: Tensor | None
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0

    query: list[Tensor]
    query_ids: list[Tensor]
    corpus: list[Tensor]
    corpus_ids: list[Tensor]

    def __init__(
        self,
        qrels: Any = None,
        k: int | Sequence[int] = 10,
        metrics: Sequence[str] | None = None,
        depth: int | None = None,
        similarity: str = "cosine",
        exclude_self: bool = False,
        ties: str = "average",
        aggregation: str | Callable[..., Tensor] = "mean",
        return_run: bool = False,
        *,
        block_bytes: int | None = None,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        values = read_options(type(self).__name__, self.options(), options_in(self.options(), locals()))
        self._options = dense_options(values)
        self._qrels = values.pop("qrels")
        self.apply_options({**values, "depth": self._options.depth})
        self._seen: dict[str, SeenIds] = {}
        self.add_row_store("query", "query_ids", *self._process_local_states)

    def set_qrels(self, qrels: Any) -> None:
        """Set (or replace) the ``(n, 3)`` ``(query_id, doc_id, relevance)`` judgements."""
        self._qrels = check_qrels(qrels)
        self._computed = None

    @property
    def qrels(self) -> Tensor | None:
        """The judgements, ``(n, 3)`` int64, or ``None`` before they are set."""
        return self._qrels

    def _stateful_rules(self, values: dict[str, Tensor], role: str | None) -> None:
        """Ids never given before for the role (with ``validate_args``: a host sync, as the value checks)."""
        if self.validate_args:
            stored = getattr(self, f"{role}_ids")
            seen = self._seen.setdefault(str(role), SeenIds())
            check_new_ids("ids", values["ids"], stored if isinstance(stored, list) else [stored], seen)

    def update(self, embeddings: Tensor, ids: Tensor, role: str = "query") -> None:
        """Add query rows (``role="query"``) or corpus rows (``role="corpus"``) with their int ids."""
        batch, which = self.read_batch(embeddings, ids, role)
        self.append_rows(str(which), batch["embeddings"])
        self.append_rows(f"{which}_ids", batch["ids"])

    def compute(self) -> dict[str, Any]:
        """The measures of every query against the whole corpus (see the class docstring)."""
        if self._qrels is None:
            raise ValueError(
                "DenseRetrieval needs qrels: pass them to the constructor or call `set_qrels` first."
            )
        shard = metric_shard(self)
        query, query_ids = self.stored_rows("query"), self.stored_rows("query_ids")
        corpus, corpus_ids = self.stored_rows("corpus"), self.stored_rows("corpus_ids")
        layout = self.input_layout()
        width = 1 if layout is None else layout[1][0]
        if query is None or query_ids is None:
            query = torch.zeros(0, width, dtype=None if layout is None else layout[0], device=self.device)
            query_ids = torch.zeros(0, dtype=torch.int64, device=self.device)
        if corpus is None or corpus_ids is None:
            corpus = query.new_zeros(0, query.shape[1])
            corpus_ids = torch.zeros(0, dtype=torch.int64, device=query.device)
        qrels = self._qrels.to(query.device)
        return dense_values(
            query, query_ids, corpus, corpus_ids, qrels, self._options, distributed=shard is not None
        )

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the measures of one ``compute`` (or the current one), one point per key (needs matplotlib)."""
        value = self.compute() if val is None else val
        scalars = {key: v for key, v in value.items() if isinstance(v, Tensor) and key != "query_ids"}
        return self._plot(scalars, ax)
