"""A module metric's value with its bootstrap confidence interval (``ConfidenceInterval``).

The functions that compare systems (``paired_test``, ``compare``, ``bootstrap_ci``) are in
``embedmetrics.functional``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.wrappers.abstract import WrapperMetric

from embedmetrics._engine.comparison.bootstrap import bootstrap_interval
from embedmetrics._engine.comparison.options import OPTIONS
from embedmetrics._engine.core.checks import check_per_query_metric
from embedmetrics._engine.settings.arguments import ArgumentKindError
from embedmetrics._engine.settings.options import options_in, read_options
from embedmetrics._metric.registry import refuse_other_settings_of, spec_of_class
from embedmetrics._metric.sync import refuse_disagreeing_settings

__all__ = ["ConfidenceInterval"]


class ConfidenceInterval(WrapperMetric):
    r"""A metric's value with a bootstrap confidence interval over its per-query values.

    Wraps a module metric that returns per-query values: one of the registry's metrics with an
    ``aggregation`` argument (retrieval and dense metrics), built with ``aggregation="none"``; any other
    metric is refused. ``update`` and ``forward`` go to the wrapped metric, which keeps the
    per-query values across batches and processes as it always does (its state, its sync); ``compute``
    returns their mean with the bounds of a bootstrap interval
    ([`bootstrap_ci`][embedmetrics.functional.bootstrap_ci]): a dict ``{"value", "ci_low", "ci_high"}``
    that Lightning logs with ``self.log_dict(metric.compute())``. The interval depends on the multiset of
    per-query values only: the same for any batch split, merge order or number of processes. Fewer than
    two queries (``forward`` on a final one-query batch, say) give NaN bounds.

    Args:
        metric: the wrapped module metric, whose ``compute`` returns ``(Q,)`` or ``(Q, m)`` per-query
            values (retrieval metrics: ``aggregation="none"``).
        confidence: confidence level, in ``(0, 1)``.
        n_resamples: bootstrap resamples.
        method: ``"percentile"`` or ``"bca"``.
        seed: seed of the resamples (the same seed, the same interval, on every process and device).
        kwargs: passed to ``torchmetrics.Metric``.

    Examples:
        >>> import torch
        >>> from embedmetrics import ConfidenceInterval, RetrievalMRR
        >>> metric = ConfidenceInterval(RetrievalMRR(aggregation="none"), confidence=0.9)
        >>> gen = torch.Generator().manual_seed(0)
        >>> for _ in range(4):
        ...     metric.update(torch.rand(25, 10, generator=gen), torch.rand(25, 10, generator=gen) < 0.2)
        >>> {k: round(float(v), 3) for k, v in metric.compute().items()}
        {'value': 0.379, 'ci_low': 0.322, 'ci_high': 0.437}
    """

    full_state_update: bool = False
    is_differentiable: bool = False
    higher_is_better: bool | None = None
    confidence: float
    n_resamples: int
    method: str
    seed: int
    # TorchScript skips the settings (postponed annotations are no types to it), as for every metric
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        *Metric.__jit_ignored_attributes__, "confidence", "n_resamples", "method", "seed",
    ]  # fmt: skip

    def __init__(
        self,
        metric: Metric,
        confidence: float = 0.95,
        n_resamples: int = 10_000,
        method: str = "percentile",
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        refuse_other_settings_of(type(self), kwargs)  # another metric's setting: refused by name
        super().__init__(**kwargs)
        if not isinstance(metric, Metric):
            raise ArgumentKindError(f"Argument `metric` must be a torchmetrics Metric, got {metric!r}.")
        spec = spec_of_class(type(metric))
        aggregation = getattr(metric, "aggregation", None)
        check_per_query_metric(type(metric).__name__, None if spec is None else spec.options, aggregation)
        table = OPTIONS[type(self).__name__]
        for name, value in read_options(type(self).__name__, table, options_in(table, locals())).items():
            setattr(self, name, value)
        self.metric = metric

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Update the wrapped metric."""
        self.metric.update(*args, **kwargs)
        self._update_count += 1

    def _filter_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments the wrapped metric's ``update`` takes (for ``MetricCollection``)."""
        return self.metric._filter_kwargs(**kwargs)

    @torch.jit.unused  # as every metric: ``torch.jit.script(metric)`` works, forward runs in Python
    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        """Update the wrapped metric; the value and interval of this batch's per-query values."""
        values = self.metric(*args, **kwargs)
        self._update_count += 1
        return self._interval(values)

    def compute(self) -> dict[str, Tensor]:
        """The mean of every per-query value seen (on every process) and its confidence interval."""
        refuse_disagreeing_settings(self)  # every rank must draw the same interval
        return self._interval(self.metric.compute())

    def settings_text(self) -> dict[str, str]:
        """The settings of the interval (the wrapped metric checks its own at its sync)."""
        return {o.name: repr(getattr(self, o.name)) for o in OPTIONS[type(self).__name__]}

    def reset(self) -> None:
        """Reset the wrapped metric."""
        self.metric.reset()
        super().reset()

    def persistent(self, mode: bool = False) -> None:
        """Make the wrapped metric's states part of ``state_dict`` (checkpoints), or not."""
        self.metric.persistent(mode)
        super().persistent(mode)

    def merge_state(self, incoming_state: dict[str, Any] | Metric) -> None:
        """Merge another ``ConfidenceInterval``'s (or the wrapped kind's) state into the wrapped metric."""
        other = incoming_state.metric if isinstance(incoming_state, ConfidenceInterval) else incoming_state
        self.metric.merge_state(other)

    def _interval(self, values: Tensor) -> dict[str, Tensor]:
        if not isinstance(values, Tensor) or values.ndim not in (0, 1, 2):
            raise ValueError(
                "The wrapped metric must return (Q,) or (Q, m) per-query values (0-dim: one query), got "
                f"{tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__}."
            )
        dtype = values.dtype if values.is_floating_point() else torch.get_default_dtype()
        shape = values.shape[1:]  # a 0-dim value: one query
        columns = values.detach().to(torch.float64).reshape(values.shape[:1].numel(), shape.numel())
        if columns.shape[0] < 2:  # 0 or 1 query: the value (NaN for none) and NaN bounds
            mean = columns.sum(dim=0) / columns.shape[0] if len(columns) else columns.sum(dim=0) * math.nan
            nan = torch.full_like(mean, math.nan)
            bounds: tuple[Tensor, ...] = (mean, nan, nan)
        else:
            bounds = tuple(
                bootstrap_interval(columns, self.confidence, self.n_resamples, self.method, self.seed)
            )
        return {key: v.reshape(shape).to(dtype) for key, v in zip(("value", "ci_low", "ci_high"), bounds)}
