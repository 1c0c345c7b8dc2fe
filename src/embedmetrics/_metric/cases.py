"""Small valid inputs for every metric of the registry (``embedmetrics._metric.registry``).

A ``Case`` holds the constructor arguments, the rows that ``update`` takes (one ``Stream`` per
kind of ``update`` call: queries and corpus, bank and queries, ...), the functional twin on all of them,
and another value of one setting. The contract suite (``tests/contracts/``) splits the streams into
batches in every way it likes, permutes their rows, spoils them (NaN, another width or dtype, a repeated
id) and compares the module with the functional; nothing there is written per metric. The data hold
exact ties (repeated rows), so that the tie policies are exercised too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from embedmetrics._metric.registry import MetricSpec


@dataclass
class Stream:
    """The rows of one kind of ``update`` call: ``args`` are row-aligned (row ``i`` of each belongs
    together), ``kwargs`` are passed unchanged (``role="query"``). ``embeddings``: the index of the
    ``(n, d)`` floating-point argument (``None``: no feature width); ``unique``: the index of an argument
    whose values must be unique across all batches (ids)."""

    args: tuple[Tensor, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    embeddings: Optional[int] = 0
    unique: Optional[int] = None

    @property
    def rows(self) -> int:
        return int(self.args[0].shape[0])

    def take(self, index: Tensor) -> Stream:
        """The rows ``index`` (a slice of the batch or a permutation)."""
        return Stream(tuple(a[index] for a in self.args), self.kwargs, self.embeddings, self.unique)


@dataclass
class Case:
    """A valid input of one metric (see the module docstring).

    ``functional(streams)``: the functional twin on all rows of ``streams`` (the same settings as
    ``init``). ``exact``: the module equals the functional bit for bit for any batch split (``False``
    where sums of floats are accumulated per batch: equal to 1e-10 relative). ``order_exact``: a
    permutation of the rows leaves the value bit for bit unchanged (else to 1e-10 relative).
    ``setup``: the arguments of ``metric.set_queries`` (a streamed route's fixed queries), called on every
    metric built from the case before its first batch; ``None``: nothing to call.
    """

    init: dict[str, Any]
    streams: list[Stream]
    functional: Callable[[list[Stream]], Any]
    other_settings: dict[str, Any]
    exact: bool = True
    order_exact: bool = True
    setup: Optional[Stream] = None


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tied_rows(n: int, d: int, dtype: torch.dtype, seed: int) -> Tensor:
    """``(n, d)`` rows drawn from ``n // 2`` distinct ones (exact ties)."""
    g = _gen(seed)
    base = torch.randn(max(1, n // 2), d, generator=g, dtype=torch.float64)
    return base[torch.randint(0, base.shape[0], (n,), generator=g)].to(dtype)


def retrieval_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """Flat ``preds``/``target``/``indexes`` of 6 queries with tied scores."""
    g = _gen(seed)
    n = 36
    preds = (torch.randint(0, 5, (n,), generator=g).to(torch.float64) / 4).to(dtype)
    target = torch.randint(0, 2, (n,), generator=g).bool()
    target[::6] = True  # every query has a relevant document
    indexes = torch.arange(n) % 6
    init: dict[str, Any] = {"empty_target_action": "neg"}  # the modules' defaults differ (torchmetrics')
    other: dict[str, Any] = {"ties": "pessimistic"}
    if "min_precision" in spec.settings:
        init["min_precision"] = 0.5
    if "max_k" in spec.settings:
        init["max_k"] = 3
    if "recall_level" in spec.settings:
        init["recall_level"] = 0.5
    if any(o.name == "ties" and o.default == "pessimistic" for o in spec.options):  # no "average"
        other = {"ties": "optimistic"}
    if "k" in spec.settings:
        init["k"] = 2
        other = {"k": 3}
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        p, t, i = streams[0].args
        return fn(p, t, indexes=i, **init)

    return Case(init, [Stream((preds, target, indexes), embeddings=None)], functional, other)


def paired_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """Two views of 24 rows (``z1, z2`` or ``x, y``)."""
    z1 = _tied_rows(24, 5, dtype, seed)
    z2 = (z1.double() + 0.3 * torch.randn(24, 5, generator=_gen(seed + 1), dtype=torch.float64)).to(dtype)
    init: dict[str, Any] = {}
    other: dict[str, Any] = {}
    exact = True
    if spec.name == "ContrastiveAccuracy":
        init, other = {"topk": (1, 3)}, {"topk": 2}
    elif spec.name == "Alignment":
        init, other = {"alpha": 2}, {"alpha": 3}
        exact = False
    else:
        exact = False
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        return fn(*streams[0].args, **init)

    return Case(init, [Stream((z1, z2))], functional, other, exact=exact, order_exact=exact)


def single_view_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """30 rows of 6 features (repeated rows among them)."""
    z = _tied_rows(30, 6, dtype, seed) * torch.linspace(1.0, 0.2, 6, dtype=torch.float64).to(dtype)
    init: dict[str, Any] = {}
    other: dict[str, Any] = {}
    exact = spec.name == "Uniformity"
    if spec.name == "Uniformity":
        init, other = {"t": 2.0}, {"t": 1.0}
    elif spec.name == "RankMe":
        other = {"center": True}
    elif spec.name == "AlphaReQ":
        init, other = {"fit_range": (1, 5)}, {"fit_range": (2, 6)}
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        return fn(streams[0].args[0], **init)

    return Case(init, [Stream((z,))], functional, other, exact=exact, order_exact=False)


def labelled_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """30 labelled rows of 4 features, 5 classes (``EmbeddingAccuracy``: same source, ``LiDAR``)."""
    z = _tied_rows(30, 4, dtype, seed)
    labels = torch.arange(30) % 5
    fn = spec.load_functional()
    if spec.name == "LiDAR":
        init: dict[str, Any] = {}

        def lidar(streams: list[Stream]) -> Any:
            return fn(*streams[0].args, **init)

        return Case(init, [Stream((z, labels))], lidar, {"delta": 1e-2}, exact=False, order_exact=False)
    include = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
    init = {"include": include}

    def accuracy(streams: list[Stream]) -> Any:
        return fn(*streams[0].args, include=include)

    return Case(init, [Stream((z, labels))], accuracy, {"include": ("precision_at_1",)})


def knn_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """A bank of 30 labelled rows and 12 labelled queries (``role="bank"`` / ``"query"``)."""
    bank = _tied_rows(30, 4, dtype, seed)
    queries = _tied_rows(12, 4, dtype, seed + 1)
    init: dict[str, Any] = {"k": 5, "top": (1, 2)}
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        (b, bl), (q, ql) = streams[0].args, streams[1].args
        return fn(b, bl, q, ql, **init)

    streams = [
        Stream((bank, torch.arange(30) % 4), {"role": "bank"}),
        Stream((queries, torch.arange(12) % 4), {"role": "query"}),
    ]
    return Case(init, streams, functional, {"k": 3})


def dense_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """10 queries against a corpus of 40 documents (repeated rows), graded qrels."""
    g = _gen(seed)
    queries = _tied_rows(10, 4, dtype, seed)
    corpus = _tied_rows(40, 4, dtype, seed + 1)
    query_ids = torch.arange(10) * 3 + 1
    corpus_ids = torch.arange(40) * 5 + 2
    pairs = torch.randperm(400, generator=g)[:60]
    qrels = torch.stack(
        [query_ids[pairs // 40], corpus_ids[pairs % 40], torch.randint(0, 3, (60,), generator=g)], 1
    )
    init: dict[str, Any] = {"qrels": qrels, "k": (1, 3), "depth": 6}
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        (q, qi), (c, ci) = streams[0].args, streams[1].args
        options = {key: v for key, v in init.items() if key != "qrels"}
        return fn(q, c, qrels, query_ids=qi, corpus_ids=ci, **options)

    streams = [
        Stream((queries, query_ids), {"role": "query"}, unique=1),
        Stream((corpus, corpus_ids), {"role": "corpus"}, unique=1),
    ]
    return Case(init, streams, functional, {"similarity": "dot"})


def dense_stream_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """``dense_case`` with the queries fixed by ``set_queries``: the corpus streamed in chunks."""
    case = dense_case(spec, dtype, seed)
    queries = case.streams[0]
    return Case(case.init, case.streams[1:], lambda s: case.functional([queries, *s]),
                case.other_settings, setup=Stream(queries.args, unique=1))  # fmt: skip


def knn_stream_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """``knn_case`` with the labelled queries fixed by ``set_queries``: the bank streamed in chunks."""
    case = knn_case(spec, dtype, seed)
    queries = case.streams[1]
    return Case(case.init, case.streams[:1], lambda s: case.functional([*s, queries]),
                case.other_settings, setup=Stream(queries.args))  # fmt: skip


def shape_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """Two representations ``X``, ``Y`` of 20 samples (a functional-only metric: no module state)."""
    x = _tied_rows(20, 5, dtype, seed)
    y = (x.double() @ torch.randn(5, 4, generator=_gen(seed + 1), dtype=torch.float64)).to(dtype)
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        return fn(*streams[0].args)

    return Case({}, [Stream((x, y))], functional, {}, exact=False, order_exact=False)


def _per_query(rows: int, systems: int, dtype: torch.dtype, seed: int) -> Tensor:
    """``(systems, rows)`` per-query values in ``[0, 1]`` with ties and zero differences."""
    g = _gen(seed)
    base = torch.randint(0, 6, (rows,), generator=g).to(torch.float64) / 5
    noise = torch.randint(-1, 2, (systems, rows), generator=g).to(torch.float64) / 10
    return (base + noise).clamp(0, 1).to(dtype)


def paired_values_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """Per-query values of two systems on 30 queries (a functional-only comparison)."""
    a, b = _per_query(30, 2, dtype, seed)
    fn = spec.load_functional()
    return Case(
        {}, [Stream((a, b))], lambda streams: fn(*streams[0].args), {}, exact=False, order_exact=False
    )


def systems_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """Per-query values of four systems on 30 queries (``compare``: its numbers as a dict)."""
    values = _per_query(30, 4, dtype, seed)
    fn = spec.load_functional()
    fields = ("means", "statistic", "p_value", "p_value_corrected", "mean_difference", "effect_size")

    def functional(streams: list[Stream]) -> Any:
        result = fn(streams[0].args[0], test="randomization", n_resamples=500)
        return {name: getattr(result, name) for name in fields}

    return Case({}, [Stream((values,), embeddings=None)], functional, {}, exact=False, order_exact=False)


def interval_case(spec: MetricSpec, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    """``ConfidenceInterval`` of the per-query MRR of flat retrieval input (the functional: the
    per-query MRR of all rows, then ``bootstrap_ci``)."""
    from embedmetrics.functional import retrieval_reciprocal_rank
    from embedmetrics.retrieval import RetrievalMRR

    inner = retrieval_case(spec, dtype, seed)
    fn = spec.load_functional()

    def functional(streams: list[Stream]) -> Any:
        (preds, target, indexes), *rest = (s.args for s in streams)
        assert not rest, "one stream"
        values = retrieval_reciprocal_rank(preds, target, indexes=indexes, aggregation="none")
        ci = fn(values, n_resamples=200)
        return {"value": ci.mean, "ci_low": ci.low, "ci_high": ci.high}

    init = {"metric": RetrievalMRR(aggregation="none"), "n_resamples": 200}
    return Case(init, inner.streams, functional, {"confidence": 0.8}, exact=True, order_exact=True)
