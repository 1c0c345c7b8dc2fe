"""Module metrics of the embedding family: ``ContrastiveAccuracy``, ``Uniformity``, ``Alignment``.

``ContrastiveAccuracy`` and ``Uniformity`` keep every embedding row they are given (list states,
``dist_reduce_fx="cat"``, in the dtype they came in) and ``compute`` runs the same private scan as
the functional twins on the concatenation. After a distributed sync every rank holds all rows, so
``compute`` splits the scan's query blocks across the ranks and all-reduces the partial results:
the O(n^2) work is shared, not repeated. ``Alignment`` keeps two sums (constant memory).

Rows are stored as ``(n, d)`` row stores: their dtype and width are read off the state, so a batch of
another width or dtype is refused before it is stored, also after ``load_state_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.core.inputs import Arg, BatchSpec
from embedmetrics._engine.core.scan import metric_shard
from embedmetrics._engine.embedding import pairs as engine
from embedmetrics._engine.settings.options import options_in
from embedmetrics._metric.base import BaseMetric, Layout
from embedmetrics._metric.sync import first_rows
from embedmetrics._plotting import plot_metric

__all__ = ["Alignment", "ContrastiveAccuracy", "Uniformity"]


class _EmbeddingMetric(BaseMetric):
    """Shared input handling: a whole batch is validated before any state changes.

    (``forward`` is protected by ``BaseMetric``.)
    """

    full_state_update: bool = False
    #: The views ``update`` takes (rows of the same shape and dtype); they define ``batch_spec``.
    _views: tuple[str, ...] = ("z",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        first, *others = cls._views
        cls.batch_spec = BatchSpec((Arg(first), *(Arg(v, same_shape_as=first) for v in others)))

    validate_args: bool

    def _batch(self, *zs: Any, **named: Any) -> list[Tensor]:
        """One checked batch, one tensor per view (see ``read_batch``)."""
        values = self.read_batch(*zs, **named)[0]
        return [values[name] for name in self._views]

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot a value or a sequence of values (needs matplotlib); one value per ``k`` as a curve over k."""
        return plot_metric(self, val, ax, getattr(self, "_ks", None))


class _StoredEmbeddingMetric(_EmbeddingMetric):
    """Keeps every row: one ``(n, d)`` row store per view, in the dtype the rows came in."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._embedding_states = cls._views  # the row stores of the views hold the embeddings
        cls._aligned_row_stores = (cls._views,) if len(cls._views) > 1 else ()  # row i of z1 pairs with z2's

    block_bytes: int | None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_row_store(*self._views)

    def _store(self, *zs: Any) -> None:
        for name, z in zip(self._views, self._batch(*zs)):
            self.append_rows(name, z)

    def _rows(self) -> list[Tensor] | None:
        """The stored rows of every view as ``(n, d)`` tensors, or ``None`` when nothing was stored."""
        rows = [self.stored_rows(name) for name in self._views]
        if any(r is None or r.shape[0] == 0 for r in rows):
            return None
        return [r for r in rows if r is not None]

    def _nan(self, shape: tuple[int, ...] = ()) -> Tensor:
        return torch.full(shape, math.nan, dtype=self.value_dtype(), device=self.device)


class ContrastiveAccuracy(_StoredEmbeddingMetric):
    r"""Top-k contrastive accuracy between two views, both directions averaged.

    Accumulates the embeddings of both views and computes
    [`contrastive_accuracy_score`][embedmetrics.functional.contrastive_accuracy_score] on everything
    seen (on every process): for each ``i``, is ``z2[i]`` among the ``topk`` rows of ``z2`` most similar to
    ``z1[i]``, and symmetrically. Ties follow ``ties`` (``"average"``: the expected hit under a
    random order of tied rows).

    Args:
        topk: ``k``, or a sequence of them (``compute`` then returns one value per ``k``).
        normalize: L2-normalise rows first (cosine similarity).
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        eps: lower bound of the norm in the normalisation.
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it for the
            device where ``compute`` runs (32 MiB on the CPU; on CUDA up to 4 GiB).
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import ContrastiveAccuracy
        >>> metric = ContrastiveAccuracy(topk=(1, 2))
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.1], [0.1, 1.0]]))
        >>> metric.update(torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0]]))
        >>> metric.compute()
        tensor([0.5000, 0.8333])
    """

    is_differentiable: bool = False
    higher_is_better: bool = True
    plot_lower_bound: float = 0.0
    plot_upper_bound: float = 1.0
    _views = ("z1", "z2")

    topk: int | Sequence[int]
    normalize: bool
    ties: str
    eps: float
    z1: list[Tensor]
    z2: list[Tensor]

    def __init__(
        self,
        topk: int | Sequence[int] = 1,
        normalize: bool = True,
        ties: str = "average",
        eps: float = 1e-12,
        *,
        block_bytes: int | None = None,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.read_options(**options_in(self.options(), locals()))
        self._ks, self._single = engine.topk_cutoffs(topk)

    def update(self, z1: Tensor, z2: Tensor) -> None:
        """Store a batch of positive pairs (row ``i`` of ``z1`` matches row ``i`` of ``z2``)."""
        self._store(z1, z2)

    def compute(self) -> Tensor:
        """Accuracy over every pair seen (NaN before any update)."""
        rows = self._rows()
        if rows is None:
            value = self._nan((len(self._ks),))
        else:
            value = engine.contrastive_accuracy(
                rows[0],
                rows[1],
                normalize=self.normalize,
                eps=self.eps,
                ks=self._ks,
                ties=self.ties,
                block_bytes=self.block_bytes,
                shard=metric_shard(self),
            )
        return value.reshape(()) if self._single else value


class Uniformity(_StoredEmbeddingMetric):
    r"""Uniformity of the embeddings (Wang & Isola, ICML 2020); lower is more uniform.

    Accumulates embeddings and computes [`uniformity_score`][embedmetrics.functional.uniformity_score] on
    everything seen: the log of the mean of ``exp(-t * ||z_i - z_j||^2)`` over pairs ``i != j``,
    as a log-sum-exp (finite where the naive formula underflows).

    Args:
        t: temperature of the Gaussian potential, finite and ``>= 0``.
        normalize: L2-normalise rows first.
        eps: lower bound of the norm in the normalisation.
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it for the
            device where ``compute`` runs (32 MiB on the CPU; on CUDA up to 4 GiB).
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    ``compute`` with fewer than two rows (no pair) returns NaN, so that ``forward`` on a batch of a
    single row still accumulates it; the functional raises ``ValueError`` instead.

    Examples:
        >>> import torch
        >>> from embedmetrics import Uniformity
        >>> metric = Uniformity()
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        >>> metric.update(torch.tensor([[-1.0, 0.0], [0.0, -1.0]]))
        >>> metric.compute()
        tensor(-4.3963)
    """

    is_differentiable: bool = False
    higher_is_better: bool = False
    plot_upper_bound: float = 0.0
    _views = ("z",)

    z: list[Tensor]

    def __init__(
        self,
        t: float = 2.0,
        normalize: bool = True,
        eps: float = 1e-12,
        *,
        block_bytes: int | None = None,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        values = self.read_options(
            t=t, normalize=normalize, eps=eps, block_bytes=block_bytes, validate_args=validate_args
        )
        self._options = {name: values[name] for name in ("t", "normalize", "eps")}

    def update(self, z: Tensor) -> None:
        """Store a batch of embeddings."""
        self._store(z)

    def compute(self) -> Tensor:
        """Uniformity of every row seen (NaN with fewer than two rows)."""
        rows = self._rows()
        if rows is None or rows[0].shape[0] < 2:
            return self._nan()
        return engine.uniformity(
            rows[0], **self._options, block_bytes=self.block_bytes, shard=metric_shard(self)
        )


class Alignment(_EmbeddingMetric):
    r"""Alignment of positive pairs (Wang & Isola, ICML 2020): mean of ``||z1_i - z2_i||^alpha``.

    Keeps only the sum of the terms and their count (constant memory, ``"sum"`` states); ``compute``
    returns their ratio in the default float dtype (NaN before any update).

    Args:
        alpha: exponent of the distance, positive and finite.
        normalize: L2-normalise rows first.
        eps: lower bound of the norm in the normalisation.
        validate_args: reject NaN and infinite embeddings in ``update`` (``ValueError``; a host sync).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import Alignment
        >>> metric = Alignment()
        >>> metric.update(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
        >>> metric.update(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]))
        >>> metric.compute()
        tensor(1.)
    """

    is_differentiable: bool = True
    higher_is_better: bool = False
    plot_lower_bound: float = 0.0
    _views = ("z1", "z2")

    sum_terms: Tensor
    total: Tensor
    input_layout_tag: list[Tensor]

    def __init__(
        self,
        alpha: float = 2,
        normalize: bool = True,
        eps: float = 1e-12,
        *,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # the sums depend on alpha/normalize/eps: the table records them (never mixed, never grouped)
        values = self.read_options(alpha=alpha, normalize=normalize, eps=eps, validate_args=validate_args)
        self._options = {name: values[name] for name in ("alpha", "normalize", "eps")}
        self.add_state("sum_terms", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        # the embeddings' dtype and width, as a running sum of zero rows: ``(1, 0, d)`` of that dtype
        self.add_running_sum("input_layout_tag")

    def update(self, z1: Tensor, z2: Tensor) -> None:
        """Add a batch of positive pairs."""
        x, y = self._batch(z1, z2)
        terms = engine.alignment_terms(x, y, **self._options)
        self.accumulate(input_layout_tag=x.new_zeros(0, x.shape[1]))
        self.sum_terms = self.sum_terms + terms.to(torch.float64).sum()
        self.total = self.total + terms.shape[0]

    def input_layout(self) -> Layout | None:
        """The embeddings' dtype and width, from the zero-row running sum that records them."""
        tag = first_rows(self.input_layout_tag)
        return None if tag is None else (tag.dtype, (int(tag.shape[-1]),))

    def compute(self) -> Tensor:
        """Mean term over every pair seen (float64 for float64 embeddings, else the default dtype)."""
        return (self.sum_terms / self.total).to(self.value_dtype())
