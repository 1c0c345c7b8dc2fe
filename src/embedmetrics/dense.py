"""``DenseRetrieval``: query embeddings against a corpus with qrels, accumulated and sharded across processes.

Stored route: queries and documents are kept as rows (with their int64 ids) until ``compute``. After a
distributed sync every process holds all queries but only *its own* corpus rows: each scans its corpus
share against all queries and the per-process top-``depth`` lists are merged exactly
(``embedmetrics._engine.dense.scan``), so the corpus is never gathered and per-process compute is
proportional to its share.

Streaming route (``set_queries``): the queries are fixed first, and every corpus chunk is scanned at
once and folded into running per-query lists (``embedmetrics._engine.dense.stream``, kept as states by
``embedmetrics._metric.running_lists``): no corpus row is kept, only its id and a digest of its row (16
bytes: ids are unique, and a document two processes stream with the same row counts once,
``embedmetrics._engine.dense.stream_repeats``), and the rows of the last chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor
from torchmetrics import Metric

from embedmetrics._engine.core.distinct import row_hash
from embedmetrics._engine.core.inputs import Arg, BatchSpec
from embedmetrics._engine.core.scan import compute_dtype, metric_shard
from embedmetrics._engine.dense.measures import dense_options, dense_values
from embedmetrics._engine.dense.qrels import check_new_ids, check_qrels, check_unique_ids
from embedmetrics._engine.dense.stream import (
    RunningLists,
    StreamQueries,
    check_query_set,
    fold_chunk,
    merge_running,
    stream_values,
)
from embedmetrics._engine.dense.stream_repeats import (
    KnownRows,
    digests_of,
    find_repeats,
    gather_counting_once,
    merge_counting_once,
)
from embedmetrics._engine.settings.options import options_in, read_options
from embedmetrics._metric.base import BaseMetric, Layout
from embedmetrics._metric.running_lists import RunningListStates
from embedmetrics._metric.seen_ids import SeenIds

__all__ = ["DenseRetrieval"]


def _joined(state: Any) -> Tensor | None:
    """A list state's tensors as one (``None`` where it holds none), or a tensor state as it is."""
    if isinstance(state, Tensor):
        return state
    parts = [t for t in state or () if isinstance(t, Tensor)]
    return torch.cat(parts) if parts else None


_ROLES = ("query", "corpus")


class DenseRetrieval(RunningListStates, BaseMetric):
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

    **Streaming the corpus** (``set_queries``): with the full query set fixed first (the same on every
    process, like the qrels), each ``update(embeddings, ids, role="corpus")`` is scanned against the
    queries at once and folded into running per-query lists: no corpus row is kept (its id and a digest
    of its row are, and the last chunk's rows), so memory is ``O(queries × (width + depth))`` plus one
    similarity block and 16 bytes a document. The
    values equal the stored route bit for bit, for every chunking and order of the chunks and across
    processes (each streams its share). The lists are states: ``merge_state`` of two streams over
    disjoint documents equals one stream, and with ``persistent(True)`` ``state_dict`` /
    ``load_state_dict`` resume a stream (call ``set_queries`` with the same queries, before or after
    loading). ``reset`` empties the lists and keeps the queries and the qrels. A query update after
    ``set_queries`` raises, as do a chunk of another width or dtype than the queries and a repeated id;
    the lists stay as they were.

    **Rows given twice**: a query or corpus row that comes back with the same id and the same embedding,
    on another process (a ``DistributedSampler`` pads an evaluation set by repeating items on other
    processes) or in a state given to ``merge_state``, counts once: the value is that of the distinct
    rows. The same id with another embedding raises ``ValueError`` naming the id. A streamed corpus
    keeps a digest of each document's row to tell the two apart, and the rows of its last chunk: where a
    repeated document ties at a query's cut with other documents left out of every list, its row is
    needed to count it, and one no longer held raises ``ValueError`` (a sampler's padding is each
    process's last item, so it is always held).

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

        Streaming the corpus, chunk by chunk (the same values):

        >>> stream = DenseRetrieval(torch.tensor([[10, 100, 1], [11, 102, 2]]), k=(1, 2), metrics=["ndcg"])
        >>> stream.set_queries(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([10, 11]))
        >>> stream.update(torch.tensor([[0.9, 0.1], [0.1, 0.9]]), torch.tensor([100, 101]), role="corpus")
        >>> stream.update(torch.tensor([[0.6, 0.8]]), torch.tensor([102]), role="corpus")
        >>> {key: round(float(v), 4) for key, v in stream.compute().items()}
        {'ndcg@1': 0.5, 'ndcg@2': 0.8155}
    """

    full_state_update: bool = False
    is_differentiable: bool = False
    higher_is_better: bool = True
    #: The corpus shards stay on their process at a sync; ``compute`` merges their lists.
    _process_local_states: ClassVar[tuple[str, ...]] = (
        "corpus", "corpus_ids", "streamed_ids", "streamed_digests", "stream_last_rows", "stream_last_ids",
        "stream_query_ids", "stream_settings",
        *(f"stream_{name}" for name in ("keys", "ids", "tail", "judged_keys", "scores", "n_docs")),
    )  # fmt: skip
    #: The running lists of a streamed corpus (``set_queries``): engine field -> state.
    _running_states: ClassVar[dict[str, str]] = {
        name: f"stream_{name}" for name in ("keys", "ids", "tail", "judged_keys", "scores", "n_docs")
    }
    _stored_route_states: ClassVar[tuple[str, ...]] = ("query", "corpus")
    _running_settings: ClassVar[tuple[str, ...]] = ("depth", "similarity", "exclude_self", "return_run")
    _embedding_states = ("query", "corpus")
    # ``merge_state`` refuses known ids, as ``update``
    _unique_id_states = ("query_ids", "corpus_ids", "streamed_ids")
    _aligned_row_stores = (
        ("query", "query_ids"),
        ("corpus", "corpus_ids"),
        ("streamed_digests", "streamed_ids"),  # a document's digest stands for its row
    )
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
        self._stream: StreamQueries | None = None
        self.add_row_store("query", "query_ids", "corpus", "corpus_ids", "streamed_ids", "streamed_digests")
        # a copy of the last chunk's rows (and those of merged states): a repeated document's row
        self.add_row_store("stream_last_rows", "stream_last_ids", buffered=False)
        self.add_running_lists()

    def set_qrels(self, qrels: Any) -> None:
        """Set (or replace) the ``(n, 3)`` ``(query_id, doc_id, relevance)`` judgements (while streaming,
        only before the first corpus chunk or after ``reset``: the running lists hold the judged keys)."""
        checked = check_qrels(qrels)
        if self._stream is not None:
            self._start_stream(self._stream.queries, self._stream.query_ids, checked)
        self._qrels = checked
        self._computed = None

    def set_queries(self, embeddings: Any, ids: Any) -> None:
        """Fix the full query set (every process the same) and stream the corpus from now on: each
        ``update(..., role="corpus")`` is folded into running per-query lists (see the class docstring).
        Needs the qrels. Raises ``ValueError`` where query or corpus rows are stored already, and where
        the running lists hold documents of another query set (``reset`` first)."""
        if self._qrels is None:
            raise ValueError(
                "DenseRetrieval.set_queries needs qrels: pass them to the constructor or call `set_qrels` "
                "first."
            )
        for name in ("query", "corpus"):
            if self.stored_rows(name) is not None:
                raise ValueError(
                    f"DenseRetrieval.set_queries: the metric stores {name} rows already (`update(..., "
                    f"role={name!r})`); streaming starts from an empty metric (`reset` first)."
                )
        queries, query_ids = check_query_set(
            embeddings, ids, bool(getattr(self, "validate_args", True)), self.device
        )
        self._start_stream(queries, query_ids, self._qrels)

    def _start_stream(self, queries: Tensor, query_ids: Tensor, qrels: Tensor) -> None:
        """Fix the queries and qrels of the stream; lists of documents are kept only where they belong to
        the same queries and qrels (a state loaded before ``set_queries``: the stream resumes)."""
        fixed = StreamQueries.build(queries, query_ids, qrels.to(queries.device), self._options)
        key = torch.stack([fixed.query_ids, row_hash(fixed.queries)], dim=1)  # the ids and the rows
        if self.holds_documents():
            held = getattr(self, "stream_query_ids")  # noqa: B009 (a state)
            judged = getattr(self, "stream_judged_keys")  # noqa: B009 (a state)
            same_qrels = self._stream is None or (self._qrels is not None and torch.equal(qrels, self._qrels))
            if not (
                torch.equal(held.cpu(), key.cpu())
                and same_qrels
                and judged.numel() == fixed.judgements.entry_row.numel()
            ):
                raise ValueError(
                    "DenseRetrieval: the running lists hold corpus documents scored on other queries or "
                    f"qrels ({held.shape[0]} queries); call `reset` before changing them."
                )
        self._stream = fixed
        self.start_running_lists(key, fixed.empty_lists().as_dict())
        self._computed = None

    def drop_fixed_queries(self) -> None:
        """The fixed queries forgotten (``RunningListStates.forget_queries``)."""
        self._stream = None

    def merge_running_lists(self, ours: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The lists of two corpus parts merged exactly (``merge_running``), a document both hold with the
        same row (``merge_state``'s exact repeats, ``_without_exact_repeats``) counted once
        (``merge_counting_once``, with the rows of both states' last chunks)."""
        parts = [RunningLists(**ours), RunningLists(**theirs)]
        repeats, incoming = (
            self.__dict__.pop("_shared_documents", None),
            self.__dict__.pop("_incoming_last", None),
        )
        if repeats is None:
            return merge_running(parts).as_dict()
        if self._stream is None:
            raise ValueError(
                "DenseRetrieval.merge_state: the running lists share documents with the incoming ones; call "
                "`set_queries` with their queries first, to count each once."
            )
        held = [k for k in (self._last_rows(), incoming) if k is not None]
        known = (
            KnownRows(torch.cat([k.rows for k in held]), torch.cat([k.ids for k in held])) if held else None
        )
        return merge_counting_once(self._stream, parts, repeats, known).as_dict()

    def _last_rows(self, state: Any = None) -> KnownRows | None:
        """The last chunks' rows a state holds (this metric's by default), ``None`` where none."""
        held = self.metric_state if state is None else state
        rows, ids = _joined(held.get("stream_last_rows")), _joined(held.get("stream_last_ids"))
        if rows is None or ids is None or rows.shape[0] != ids.shape[0]:
            return None
        return KnownRows(rows, ids)

    def merge_state(self, incoming_state: dict[str, Any] | Metric) -> None:
        """``BaseMetric.merge_state``; a streamed document the incoming state holds too with the same row
        counts once, and the last chunks' rows of both are kept."""
        self.__dict__["_merging"] = True
        try:
            super().merge_state(incoming_state)
        finally:
            for name in ("_merging", "_shared_documents", "_incoming_last"):
                self.__dict__.pop(name, None)

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """The running lists' merge; ``forward`` (not ``merge_state``) keeps its batch as the last chunk."""
        batch = [list(getattr(self, n)) for n in ("stream_last_rows", "stream_last_ids")]
        super()._reduce_states(incoming_state)
        if not self.__dict__.get("_merging"):
            for name, value in zip(("stream_last_rows", "stream_last_ids"), batch):
                getattr(self, name)[:] = value

    def _without_exact_repeats(self, incoming: Any, argument: str, action: str) -> dict[str, Any]:
        """``BaseMetric``'s; and, on the streamed route (whatever ``validate_args``), the documents the
        incoming state shares with ours with the same rows left out of its ids (another row raises
        ``ValueError`` naming the id), kept for ``merge_running_lists``."""
        out = super()._without_exact_repeats(incoming, argument, action)
        ours, ours_d = self.stored_rows("streamed_ids"), self.stored_rows("streamed_digests")
        theirs, theirs_d = _joined(incoming.get("streamed_ids")), _joined(incoming.get("streamed_digests"))
        if ours is None or ours_d is None or theirs is None or theirs_d is None:
            return out
        where = f"DenseRetrieval.{action}: argument `{argument}` (`streamed_ids`)"
        repeats = find_repeats([ours, theirs.to(ours.device)], [ours_d, theirs_d.to(ours.device)], where)
        if repeats is not None:
            keep = ~torch.isin(theirs.to(ours.device), repeats.ids)
            out["streamed_ids"], out["streamed_digests"] = [theirs[keep.to(theirs.device)]], [theirs_d[keep]]
            self.__dict__["_shared_documents"] = repeats
            self.__dict__["_incoming_last"] = self._last_rows(incoming)
        return out

    @property
    def counts_repeated_rows_once(self) -> bool:
        """``True``: a query or corpus row given again with the same id and the same embedding (a
        ``DistributedSampler``'s padding under DDP, a merged state) counts once, the same id with another
        embedding raises; on both routes (a streamed corpus compares digests of its rows)."""
        return True

    def input_layout(self) -> Layout | None:
        """The dtype and width every batch must have: the queries' when streaming, else the rows'."""
        if self._stream is not None:
            return self._stream.queries.dtype, (int(self._stream.queries.shape[1]),)
        return super().input_layout()

    @property
    def qrels(self) -> Tensor | None:
        """The judgements, ``(n, 3)`` int64, or ``None`` before they are set."""
        return self._qrels

    def _stateful_rules(self, values: dict[str, Tensor], role: str | None) -> None:
        """Ids never given before for the role (with ``validate_args``: a host sync, as the value checks)."""
        if self._stream is not None and role == "query":
            raise ValueError(
                "DenseRetrieval.update: the queries were fixed by `set_queries`; got a batch with "
                "role='query' (pass the whole query set to `set_queries`, documents with role='corpus')."
            )
        if self.validate_args:
            name = "streamed_ids" if self._stream is not None else f"{role}_ids"
            stored = getattr(self, name)
            seen = self._seen.setdefault(name, SeenIds())
            check_new_ids("ids", values["ids"], stored if isinstance(stored, list) else [stored], seen)

    def update(self, embeddings: Tensor, ids: Tensor, role: str = "query") -> None:
        """Add query rows (``role="query"``) or corpus rows (``role="corpus"``) with their int ids; after
        ``set_queries``, fold corpus rows into the running lists."""
        batch, which = self.read_batch(embeddings, ids, role)
        self.refuse_lists_without_queries()
        if self._stream is not None:
            fixed = self._stream
            lists = fold_chunk(fixed, RunningLists(**self.running_lists()), batch["embeddings"], batch["ids"])
            self.set_running_lists(lists.as_dict())
            digests = digests_of(batch["embeddings"])
            self.append_rows("streamed_ids", batch["ids"])
            self.append_rows("streamed_digests", digests)
            getattr(self, "stream_last_rows")[:] = [batch["embeddings"].clone()]  # noqa: B009 (a state)
            getattr(self, "stream_last_ids")[:] = [batch["ids"].clone()]  # noqa: B009 (a state)
            return
        self.append_rows(str(which), batch["embeddings"])
        self.append_rows(f"{which}_ids", batch["ids"])

    def compute(self) -> dict[str, Any]:
        """The measures of every query against the whole corpus (see the class docstring)."""
        if self._qrels is None:
            raise ValueError(
                "DenseRetrieval needs qrels: pass them to the constructor or call `set_qrels` first."
            )
        shard = metric_shard(self)
        self.refuse_lists_without_queries()
        if self._stream is not None:
            return self._stream_values(self._stream, shard is not None)
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

    def _stream_values(self, fixed: StreamQueries, distributed: bool) -> dict[str, Any]:
        """The values of the running lists (every process's, merged, when ``distributed``: a document two
        processes streamed with the same row counts once)."""
        none = torch.zeros(0, dtype=torch.int64, device=self.device)
        ids, digests = self.stored_rows("streamed_ids"), self.stored_rows("streamed_digests")
        ids, digests = none if ids is None else ids, none if digests is None else digests
        lists = RunningLists(**{k: t.to(self.device) for k, t in self.running_lists().items()})
        if distributed:
            lists = gather_counting_once(fixed, lists, ids, digests, self._last_rows())
        else:
            check_unique_ids("corpus_ids", torch.sort(ids).values)
        return stream_values(fixed, lists, compute_dtype(fixed.queries))

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the measures of one ``compute`` (or the current one), one point per key (needs matplotlib)."""
        value = self.compute() if val is None else val
        scalars = {key: v for key, v in value.items() if isinstance(v, Tensor) and key != "query_ids"}
        return self._plot(scalars, ax)
