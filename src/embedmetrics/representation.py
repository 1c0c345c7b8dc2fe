"""Module metrics of representation health: ``RankMe``, ``AlphaReQ``, ``LiDAR``, ``LinearCKA``,
``KNNAccuracy``.

The spectral metrics and CKA keep sufficient statistics, not samples (``_engine/spectral/moments``):
``n``, ``Σz`` and ``Σzzᵀ`` in float64 (``Σxyᵀ`` for CKA, per-class sums for LiDAR). Memory is
O(d²) for any number of samples, and the value is the same for any batch split and any number of
processes: no queue of recent samples, no rank-0-only estimate. ``KNNAccuracy`` keeps the bank and
the queries (row stores) and runs the exact blocked kNN scan in ``compute``; distributed, the bank stays
sharded and each process scans its own bank rows against all queries. With its queries fixed first
(``set_queries``) it streams the bank instead: each chunk is scanned at once and folded into running
per-query vote lists (``embedmetrics._engine.neighbors.vote_stream``, kept as states by
``embedmetrics._metric.running_lists``), and no bank row is kept.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from embedmetrics._engine.core.distinct import row_hash
from embedmetrics._engine.core.inputs import Arg, BatchSpec
from embedmetrics._engine.core.scan import metric_shard
from embedmetrics._engine.neighbors.vote import knn_vote_hits
from embedmetrics._engine.neighbors.vote_stream import (
    VoteStream,
    fold_bank_chunk,
    gather_stream,
    merge_streams,
    stream_hits,
)
from embedmetrics._engine.spectral import moments as spectral
from embedmetrics._engine.spectral import options as spectral_options
from embedmetrics._engine.spectral.options import knn_options
from embedmetrics._metric.base import BaseMetric, Layout
from embedmetrics._metric.running_lists import LIST_SETTINGS, QUERY_IDS, RunningListStates
from embedmetrics._metric.slots import SlotTrimmer
from embedmetrics._metric.sync import first_rows
from embedmetrics._plotting import plot_metric

__all__ = ["AlphaReQ", "KNNAccuracy", "LiDAR", "LinearCKA", "RankMe"]


class _RepresentationMetric(BaseMetric):
    """Shared batch handling: embeddings (tensor or NumPy) checked before any state changes; the value in
    float64 for float64 embeddings (else the default dtype)."""

    full_state_update: bool = False
    is_differentiable: bool = False

    validate_args: bool

    def _finish(self, value: Tensor | None) -> Tensor:
        if value is None:
            return torch.tensor(math.nan, dtype=self.value_dtype(), device=self.device)
        return value.to(self.value_dtype())

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot a value or a sequence of values (needs matplotlib)."""
        return plot_metric(self, val, ax, None)


class _SummaryMetric(_RepresentationMetric):
    """Keeps float64 sums, not rows: the embeddings' dtype is kept as a zero-width running sum of that
    dtype (``input_dtype``), their width is read off the ``(d, d)`` sums."""

    #: The running sums whose last dimensions are the feature widths, in argument order.
    _width_sums: ClassVar[tuple[str, ...]] = ("gram",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_running_sum("input_dtype")

    def input_layout(self) -> Layout | None:
        """The embeddings' dtype and widths (one per argument), from the state."""
        tag = first_rows(getattr(self, "input_dtype"))  # noqa: B009 (a state)
        sums = [first_rows(getattr(self, name)) for name in self._width_sums]
        if tag is None or any(s is None for s in sums):
            return None
        return tag.dtype, tuple(int(s.shape[-1]) for s in sums if s is not None)

    def _tag(self, dtype: torch.dtype) -> Tensor:
        return torch.zeros(0, dtype=dtype, device=self.device)


class _MomentMetric(_SummaryMetric):
    """``n``, ``Σz`` and ``Σzzᵀ`` of every row seen (float64 running sums)."""

    n: Tensor
    batch_spec = BatchSpec((Arg("z"),))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("n", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_running_sum("total", "gram")

    def update(self, z: Tensor) -> None:
        """Add a batch of embeddings ``(n_samples, n_features)``."""
        t = self.read_batch(z)[0]["z"]
        total, gram = spectral.column_sums(t)
        self.accumulate(total=total, gram=gram, input_dtype=self._tag(t.dtype))
        self.n = self.n + t.shape[0]

    def _moments(self) -> spectral.Moments | None:
        total, gram = self.running_sum("total"), self.running_sum("gram")
        if total is None or gram is None or int(self.n) == 0:
            return None
        return spectral.Moments(self.n, total, gram)


class RankMe(_MomentMetric):
    r"""RankMe (Garrido et al., ICML 2023), the effective rank of the embeddings; higher is better.

    Keeps ``n``, ``Σz`` and ``Σzzᵀ`` (float64, O(d²) memory) and computes
    [`rankme`][embedmetrics.functional.rankme] of every row seen: exactly the value on the stacked
    rows, for any batch split and world size.

    Args:
        center: subtract the mean row first (the paper uses the uncentred embeddings).
        eps: added to each normalised singular value (the paper's ``1e-7``).
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import RankMe
        >>> metric = RankMe()
        >>> metric.update(torch.tensor([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0]]))
        >>> metric.update(torch.tensor([[0.0, 0.0, 3.0]]))
        >>> metric.compute()
        tensor(3.0000)
    """

    higher_is_better: bool = True
    plot_lower_bound: float = 0.0

    center: bool
    eps: float

    def __init__(
        self,
        center: bool = False,
        eps: float = spectral_options.RANKME_EPS,
        *,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.read_options(center=center, eps=eps, validate_args=validate_args)

    def compute(self) -> Tensor:
        """RankMe of every row seen (NaN before any update)."""
        m = self._moments()
        return self._finish(None if m is None else spectral.rankme(m, center=self.center, eps=self.eps))


class AlphaReQ(_MomentMetric):
    r"""α-ReQ (Agrawal et al., NeurIPS 2022), the power-law decay of the covariance eigenspectrum.

    Keeps ``n``, ``Σz`` and ``Σzzᵀ`` (float64, O(d²) memory) and computes
    [`alpha_req`][embedmetrics.functional.alpha_req] of every row seen. The paper relates ``α`` near 1 to
    good downstream accuracy; it is not "higher is better".

    Args:
        fit_range: first and last rank (1-based, inclusive) of the eigenvalues the power law is fitted to.
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import AlphaReQ
        >>> gen = torch.Generator().manual_seed(0)
        >>> scales = torch.arange(1, 65, dtype=torch.float64) ** -0.5  # eigenvalues ~ i^-1
        >>> metric = AlphaReQ(fit_range=(2, 60))
        >>> metric.update(torch.randn(20000, 64, generator=gen, dtype=torch.float64) * scales)
        >>> round(float(metric.compute()), 1)
        1.0
    """

    higher_is_better: bool | None = None

    fit_range: tuple[int, int]

    def __init__(
        self,
        fit_range: tuple[int, int] = spectral_options.ALPHA_FIT_RANGE,
        *,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.read_options(fit_range=fit_range, validate_args=validate_args)

    def compute(self) -> Tensor:
        """α of every row seen (NaN before any update or with fewer than two eigenvalues to fit)."""
        m = self._moments()
        return self._finish(None if m is None else spectral.alpha_req(m, fit_range=self.fit_range))


class LiDAR(_SummaryMetric):
    r"""LiDAR (Thilak et al., ICLR 2024), the rank of the LDA matrix of surrogate classes; higher is better.

    ``update(z, labels)`` takes embeddings and the id of the source sample each row was augmented
    from (the surrogate class; ids globally unique, a class may span batches and processes). Keeps
    ``Σzzᵀ`` and the count and sum of every class (float64) and computes
    [`lidar`][embedmetrics.functional.lidar] of every row seen.

    Args:
        delta: ridge added to the within-class covariance (the paper's ``δ``).
        eps: added to each normalised eigenvalue (the paper's ``ε``).
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import LiDAR
        >>> gen = torch.Generator().manual_seed(0)
        >>> sources = torch.randn(50, 8, generator=gen)
        >>> views = sources.repeat_interleave(4, dim=0) + 0.1 * torch.randn(200, 8, generator=gen)
        >>> metric = LiDAR()
        >>> metric.update(views, torch.arange(50).repeat_interleave(4))
        >>> round(float(metric.compute()), 2)
        7.0
    """

    higher_is_better: bool = True
    plot_lower_bound: float = 0.0

    batch_spec = BatchSpec((Arg("z"), Arg("labels", "class_labels", rows_of="z")))

    delta: float
    eps: float

    def __init__(
        self,
        delta: float = spectral_options.LIDAR_DELTA,
        eps: float = spectral_options.LIDAR_EPS,
        *,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.read_options(delta=delta, eps=eps, validate_args=validate_args)
        self.add_running_sum("gram")
        self.add_row_store("class_labels", "class_counts", "class_sums", buffered=False)  # folded here
        self._trimmer = SlotTrimmer()
        self._folded_rows = 0

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Add a batch of embeddings with their source-sample ids."""
        batch = self.read_batch(z, labels)[0]
        t, lab = batch["z"], batch["labels"]
        classes, counts, sums, used = spectral.class_partials(t, lab)  # fixed slots: no host sync
        self.accumulate(gram=spectral.column_sums(t)[1], input_dtype=self._tag(t.dtype))
        self.append_rows("class_labels", classes)
        self.append_rows("class_counts", counts)
        self.append_rows("class_sums", sums)
        self._trimmer.submit(used, (classes, counts, sums))
        self._trimmer.trim((self.class_labels, self.class_counts, self.class_sums))
        self._fold_recurring_classes()

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """Merging (``forward``, ``merge_state``) folds as ``update`` does: the same state either way."""
        super()._reduce_states(incoming_state)
        self._fold_recurring_classes()

    def _fold_recurring_classes(self) -> None:
        """Merge the stored class partials into one row per class once they hold more than twice the rows
        of the last merge (amortised O(1) per row; no host sync): the state stays within about twice
        the number of classes plus a batch, however often the classes recur."""
        stores = (self.class_labels, self.class_counts, self.class_sums)
        if not all(isinstance(store, list) for store in stores):
            return  # a synced state (one tensor): compute merges it
        rows = sum(t.shape[0] for t in self.class_labels)
        if len(self.class_labels) < 2 or rows <= 2 * self._folded_rows:
            return
        merged = spectral.merge_partials(*(torch.cat(store) for store in stores))
        for store, t in zip(stores, merged[:3]):
            store[:] = [t]
        self._trimmer.submit(merged[3], merged[:3])
        self._trimmer.trim(stores)
        self._folded_rows = self.class_labels[0].shape[0]

    def compute(self) -> Tensor:
        """LiDAR of every row seen (NaN before two classes, or without a class of two rows)."""
        gram, labels = self.running_sum("gram"), self.stored_rows("class_labels")
        counts, sums = self.stored_rows("class_counts"), self.stored_rows("class_sums")
        if gram is None or labels is None or counts is None or sums is None:
            return self._finish(None)
        _, counts, sums = spectral.grouped_sums(labels, counts, sums)
        return self._finish(spectral.lidar(counts, sums, gram, delta=self.delta, eps=self.eps))

    class_labels: list[Tensor]
    class_counts: list[Tensor]
    class_sums: list[Tensor]
    #: Trims each batch's fixed class slots once their count is on the host (kept across ``reset``:
    #: entries no longer stored are skipped; torchmetrics' ``forward`` resets between batches).
    _trimmer: SlotTrimmer


class LinearCKA(_SummaryMetric):
    r"""Linear CKA (Kornblith et al., ICML 2019) between two representations of the same samples.

    ``update(x, y)``: row ``i`` of ``x`` and of ``y`` represent the same sample (any widths). Keeps
    ``n``, ``Σx``, ``Σy``, ``ΣxxT``, ``ΣyyT`` and ``ΣxyT`` (float64) and computes
    [`linear_cka`][embedmetrics.functional.linear_cka] of every pair seen.

    Args:
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import LinearCKA
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> metric = LinearCKA()
        >>> metric.update(x, 2 * x @ torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))  # rotated and scaled
        >>> metric.compute()
        tensor(1.0000)
    """

    higher_is_better: bool = True
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0

    n: Tensor
    _width_sums = ("xx", "yy")
    batch_spec = BatchSpec((Arg("x"), Arg("y", rows_of="x")))

    def __init__(self, *, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.read_options(validate_args=validate_args)
        self.add_state("n", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_running_sum("sum_x", "sum_y", "xx", "yy", "xy")

    def update(self, x: Tensor, y: Tensor) -> None:
        """Add a batch of paired rows."""
        batch = self.read_batch(x, y)[0]
        a, b = batch["x"], batch["y"]
        (sum_x, xx), (sum_y, yy) = spectral.column_sums(a), spectral.column_sums(b)
        tag = self._tag(torch.promote_types(a.dtype, b.dtype))
        self.accumulate(sum_x=sum_x, sum_y=sum_y, xx=xx, yy=yy, xy=spectral.cross_gram(a, b), input_dtype=tag)
        self.n = self.n + a.shape[0]

    def compute(self) -> Tensor:
        """CKA of every pair seen (NaN before any update or when a representation is constant)."""
        sums = [self.running_sum(n) for n in ("sum_x", "sum_y", "xx", "yy", "xy")]
        if any(s is None for s in sums) or int(self.n) == 0:
            return self._finish(None)
        sx, sy, xx, yy, xy = (s for s in sums if s is not None)
        return self._finish(spectral.linear_cka(self.n, sx, sy, xx, yy, xy))


class KNNAccuracy(RunningListStates, _RepresentationMetric):
    r"""Weighted k-NN accuracy (Wu et al., CVPR 2018; DINO): the SSL monitor, exact at any scale.

    ``update(embeddings, labels, role="bank")`` adds labelled bank rows (the training features),
    ``role="query"`` the rows to classify (validation features); in any order, on any process.
    ``compute`` runs [`knn_accuracy`][embedmetrics.functional.knn_accuracy] of every query against the whole
    bank: one accuracy per entry of ``top``. Distributed, the bank stays sharded: a sync gathers the
    queries only, each process scans its own bank rows against all queries, and the per-process
    neighbour lists are merged exactly (ties across processes included), so every process returns the
    value of one process holding everything, with its share of the bank's work.

    **Streaming the bank.** After ``set_queries(embeddings, labels)`` (the same full query set on every
    process), each bank ``update`` is scanned against the queries at once and folded into running
    per-query vote lists (the ``k`` nearest bank rows so far, the tie block at the last one): no bank
    row is kept, memory is ``O(queries × k)`` whatever the bank size, and the value is the stored
    route's bit for bit, for any chunking and order. The lists are process-local states: ``compute``
    merges them across processes exactly, ``merge_state`` merges the lists of disjoint banks, ``reset``
    empties them and keeps the queries, and with ``persistent(True)`` a ``state_dict`` resumes the
    stream (``set_queries`` with the same queries, before or after ``load_state_dict``).

    Args:
        k: neighbours per query (clipped to the bank size).
        temperature: ``T`` of the neighbour weights ``exp(s / T)``.
        top: the ``top`` of top-``top`` accuracy over the class votes, or a sequence of them.
        num_classes: number of classes (classes without any row still count in the vote ranking);
            ``None``: the number of distinct bank and query labels.
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"`` for classes tied in votes.
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import KNNAccuracy
        >>> metric = KNNAccuracy(k=2, top=(1, 2))
        >>> bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> metric.update(bank, torch.tensor([0, 0, 1, 1]), role="bank")
        >>> metric.update(torch.tensor([[1.0, 0.2], [0.3, 1.0]]), torch.tensor([0, 0]), role="query")
        >>> metric.compute()
        tensor([0.5000, 1.0000])

        Streaming the bank in chunks (no bank row kept):

        >>> stream = KNNAccuracy(k=2, top=(1, 2))
        >>> stream.set_queries(torch.tensor([[1.0, 0.2], [0.3, 1.0]]), torch.tensor([0, 0]))
        >>> stream.update(bank[:3], torch.tensor([0, 0, 1]))
        >>> stream.update(bank[3:], torch.tensor([1]))
        >>> stream.compute()
        tensor([0.5000, 1.0000])
    """

    higher_is_better: bool = True
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0

    bank: list[Tensor]
    bank_labels: list[Tensor]
    query: list[Tensor]
    query_labels: list[Tensor]
    #: The streamed route's running vote lists: engine field -> state (``running_lists``).
    _running_states: ClassVar[dict[str, str]] = {
        "keys": "stream_keys", "labels": "stream_labels", "tail": "stream_tail", "extra": "stream_extra",
        "bank_labels": "stream_bank_labels", "n_bank": "stream_n_bank", "nonfinite": "stream_nonfinite",
    }  # fmt: skip
    _running_count: ClassVar[str] = "n_bank"
    _stored_route_states: ClassVar[tuple[str, ...]] = ("bank", "query")
    _running_settings: ClassVar[tuple[str, ...]] = ("k",)
    #: The bank shards (and the running lists) stay on their process at a sync; ``compute`` merges their
    #: neighbour lists.
    _process_local_states: ClassVar[tuple[str, ...]] = (
        "bank", "bank_labels", *_running_states.values(), QUERY_IDS, LIST_SETTINGS,
    )  # fmt: skip
    batch_spec = BatchSpec(
        (Arg("embeddings"), Arg("labels", "class_labels", rows_of="embeddings")),
        roles=("bank", "query"),
        allow_empty=True,
    )
    _embedding_states = ("bank", "query")
    _aligned_row_stores = (("bank", "bank_labels"), ("query", "query_labels"))
    #: The streamed route's fixed queries and their labels (``set_queries``; kept across ``reset``).
    _stream_queries: Tensor
    _stream_query_labels: Tensor

    k: int
    temperature: float
    top: int | tuple[int, ...]
    num_classes: int | None
    ties: str
    block_bytes: int | None

    def __init__(
        self,
        k: int = 20,
        temperature: float = 0.07,
        top: int | tuple[int, ...] = (1, 5),
        num_classes: int | None = None,
        ties: str = "average",
        *,
        block_bytes: int | None = None,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        options = knn_options(
            self.read_options(
                k=k, temperature=temperature, top=top, num_classes=num_classes, ties=ties,
                block_bytes=block_bytes, validate_args=validate_args,
            )
        )  # fmt: skip
        self._tops, self._single = options.tops, options.single
        self.add_row_store("bank", "bank_labels", "query", "query_labels")
        self.add_running_lists()

    def set_queries(self, embeddings: Tensor, labels: Tensor) -> None:
        """Fix the queries (the same full set on every process) and stream the bank from now on: each bank
        ``update`` is folded into running vote lists at once, no bank row kept. Before any stored row
        (``ValueError`` otherwise). The running lists start empty, unless they already belong to these
        queries (a loaded ``state_dict``: the stream resumes)."""
        for name in ("bank", "query"):
            if first_rows(getattr(self, name)) is not None:
                raise ValueError(
                    f"KNNAccuracy.set_queries must come before any stored row, got `{name}` rows already "
                    "updated (call `reset()` first)."
                )
        earlier = None if self.holds_documents() else self.__dict__.pop("_stream_queries", None)
        try:  # empty lists: a query set of another width or dtype may replace the earlier one
            batch, _ = self.read_batch(embeddings, labels, "query")
        finally:
            if earlier is not None and "_stream_queries" not in self.__dict__:
                self.__dict__["_stream_queries"] = earlier
        queries, query_labels = batch["embeddings"], batch["labels"]
        ids = torch.stack([row_hash(queries), query_labels.to(torch.int64)], dim=1)
        self.start_running_lists(ids, VoteStream.empty(queries.shape[0], self.k, self.device).as_dict())
        self._stream_queries, self._stream_query_labels = queries, query_labels

    def input_layout(self) -> Layout | None:
        """The queries' dtype and width once they are fixed (``set_queries``), else the stored rows'."""
        queries = self.__dict__.get("_stream_queries")
        if isinstance(queries, Tensor):
            return queries.dtype, tuple(queries.shape[1:])
        return super().input_layout()

    def update(self, embeddings: Tensor, labels: Tensor, role: str = "bank") -> None:
        """Add labelled rows to the bank (``role="bank"``) or to the queries (``role="query"``; not
        after ``set_queries``). Streaming, a bank chunk is folded into the running lists at once."""
        batch, which = self.read_batch(embeddings, labels, role)
        self.refuse_lists_without_queries()
        t, lab = batch["embeddings"], batch["labels"]
        if self.is_streaming() and which != "bank":
            raise ValueError(
                f"Argument `role` must be 'bank' after `set_queries` (the queries are fixed), got {which!r}."
            )
        if t.shape[0] == 0:  # an empty batch or bank chunk adds nothing (as an empty corpus chunk)
            return
        if not self.is_streaming():
            self.append_rows(str(which), t)
            self.append_rows(f"{which}_labels", lab)
            return
        state = VoteStream(**self.running_lists())
        queries = self._stream_queries.to(self.device)
        self.set_running_lists(fold_bank_chunk(state, queries, t, lab, self.k, self.block_bytes).as_dict())

    def drop_fixed_queries(self) -> None:
        """The fixed queries forgotten (``RunningListStates.forget_queries``)."""
        self.__dict__.pop("_stream_queries", None)
        self.__dict__.pop("_stream_query_labels", None)

    def merge_running_lists(self, ours: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The running vote lists of two disjoint banks merged exactly (``merge_streams``)."""
        return merge_streams([VoteStream(**ours), VoteStream(**theirs)]).as_dict()

    def compute(self) -> Tensor:
        """Accuracy of every query against the whole bank (NaN without a bank row or a query)."""
        self.refuse_lists_without_queries()
        if self.is_streaming():
            return self._stream_value()
        bank, bank_labels = self.stored_rows("bank"), self.stored_rows("bank_labels")
        query, query_labels = self.stored_rows("query"), self.stored_rows("query_labels")
        if query is None or query_labels is None:  # the same on every process (queries are gathered)
            return self._no_queries()
        if bank is None or bank_labels is None:  # NaN, unless (sharded) another process has bank rows
            bank, bank_labels = query[:0], query_labels[:0]
        hits = knn_vote_hits(
            bank, bank_labels, query, query_labels, k=self.k, temperature=self.temperature,
            tops=self._tops, num_classes=self.num_classes, ties=self.ties, block_bytes=self.block_bytes,
            sharded=metric_shard(self) is not None,
        )  # fmt: skip
        value = self._finish(hits / query.shape[0])
        return value.reshape(()) if self._single else value

    def _stream_value(self) -> Tensor:
        """The value of the running lists (every process's, merged, after a sync: a collective)."""
        query_labels = self._stream_query_labels.to(self.device)
        if query_labels.shape[0] == 0:
            return self._no_queries()
        state = VoteStream(**self.running_lists())
        if metric_shard(self) is not None:
            state = gather_stream(state)
        hits = stream_hits(
            state, query_labels, k=self.k, temperature=self.temperature, tops=self._tops,
            num_classes=self.num_classes, ties=self.ties,
        )  # fmt: skip
        value = self._finish(hits / query_labels.shape[0])
        return value.reshape(()) if self._single else value

    def _no_queries(self) -> Tensor:
        value = torch.full((len(self._tops),), math.nan, dtype=self.value_dtype(), device=self.device)
        return value.reshape(()) if self._single else value
