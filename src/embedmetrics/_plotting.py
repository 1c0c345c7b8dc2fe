"""``Metric.plot`` for metrics whose value has one entry per cut-off ``k``.

A scalar value goes through torchmetrics' own plotting; a value per ``k`` (``k=(1, 5, 10)``) is
drawn as a curve over ``k`` with the cut-offs as tick labels, and a sequence of such values (one
per epoch, say) as one line per ``k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor


def plot_metric(metric: Any, val: Any, ax: Any, ks: Sequence[int | None] | None = None) -> Any:
    """Plot ``val`` (``None``: ``metric.compute()``) for ``metric``; returns ``(figure, axis)``.

    Args:
        metric: the ``torchmetrics.Metric`` being plotted.
        val: a value, a sequence of values, or ``None``.
        ax: a matplotlib axis to draw on, or ``None`` for a new figure.
        ks: the metric's cut-offs when it returns one value per ``k``; ``None`` or a single cut-off
            plots like any torchmetrics metric.
    """
    if ks is None or len(ks) < 2:
        return metric._plot(val, ax)
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            "Plotting needs matplotlib: pip install matplotlib (the [plot] extra)."
        ) from err
    value = metric.compute() if val is None else val
    fig, ax = plt.subplots() if ax is None else (None, ax)
    labels = ["all" if k is None else str(k) for k in ks]
    if isinstance(value, Tensor):
        ax.plot(range(len(labels)), value.detach().cpu().double().reshape(-1).numpy(), marker="o")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("k")
    else:
        rows = [v.detach().cpu().double().reshape(-1) for v in value]
        for j, label in enumerate(labels):
            ax.plot([float(r[j]) for r in rows], marker="o", label=f"k={label}")
        ax.set_xlabel("step")
        ax.legend()
    ax.set_ylabel(type(metric).__name__)
    lower, upper = metric.plot_lower_bound, metric.plot_upper_bound
    if lower is not None and upper is not None:
        pad = 0.05 * (upper - lower)
        ax.set_ylim(lower - pad, upper + pad)
    ax.grid(True)
    return fig, ax


def plot_curve(metric: Any, curve: Any, ax: Any) -> Any:
    """Plot a precision-recall curve ``(precision, recall, top_k)`` (or a sequence of them, one line
    each): precision against recall."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            "Plotting needs matplotlib: pip install matplotlib (the [plot] extra)."
        ) from err
    curves = [curve] if isinstance(curve[0], Tensor) else list(curve)
    fig, ax = plt.subplots() if ax is None else (None, ax)
    for precision, recall, *_ in curves:
        p, r = precision.detach().cpu().double(), recall.detach().cpu().double()
        for pi, ri in zip(p.reshape(-1, p.shape[-1]), r.reshape(-1, r.shape[-1])):
            ax.plot(ri.numpy(), pi.numpy(), marker="o")
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_title(type(metric).__name__)
    ax.grid(True)
    return fig, ax
