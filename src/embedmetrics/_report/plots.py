"""Figures of ``embedmetrics report --plot DIR`` (matplotlib, non-interactive Agg backend).

PNG, SVG or PDF (``--plot-format``) at ``--dpi``; every legend sits outside the axes, so it never
covers the data. Similarity distributions never build an ``n x n`` matrix: positive pairs are the
``n`` matched rows (views) or one sampled same-class partner per query (labels), negative pairs a
fixed-seed sample.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from embedmetrics._engine.core.scan import l2_normalize
from embedmetrics._io.errors import ReportInputError

#: Number of sampled negative pairs (and at most that many positive pairs) per histogram.
PAIR_SAMPLE = 20_000
SEED = 0


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ReportInputError(
            "--plot needs matplotlib: pip install matplotlib (the [report] extra)."
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


DEFAULT_DPI = 100


@dataclass(frozen=True)
class Figures:
    """Where and how the figures are written: a directory, a format (``png``, ``svg``, ``pdf``), a dpi."""

    directory: str
    format: str = "png"
    dpi: int = DEFAULT_DPI

    def save(self, fig: Any, stem: str) -> str:
        """Write ``fig`` as ``directory/stem.format`` (legends outside the axes kept in the picture)."""
        path = os.path.join(self.directory, f"{stem}.{self.format}")
        try:
            fig.savefig(path, dpi=self.dpi, format=self.format, bbox_inches="tight")
        except OSError as err:
            raise ReportInputError(f"{path}: cannot write the figure: {err.strerror or err}.") from None
        finally:
            _pyplot().close(fig)
        return path


def _legend_outside(ax: Any) -> None:
    """The legend to the right of the axes: it can never cover a point, a bar or a line."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def _rowwise_cosine(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Cosine similarity of ``a[i]`` with ``b[i]`` for every row (no pairwise matrix)."""
    a64, b64 = l2_normalize(a.double(), 1e-12), l2_normalize(b.double(), 1e-12)
    return (a64 * b64).sum(dim=1).numpy()


def view_pair_similarities(z1: torch.Tensor, z2: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Positive pairs ``(z1[i], z2[i])`` (all, up to a sample) and a sample of ``(z1[i], z2[j]), j != i``."""
    n = z1.shape[0]
    rng = np.random.default_rng(SEED)
    pos_rows = np.arange(n) if n <= PAIR_SAMPLE else rng.choice(n, PAIR_SAMPLE, replace=False)
    positives = _rowwise_cosine(z1[pos_rows], z2[pos_rows])
    if n < 2:
        return positives, np.zeros(0)
    i = rng.integers(0, n, PAIR_SAMPLE)
    j = (i + rng.integers(1, n, PAIR_SAMPLE)) % n  # uniform over j != i
    negatives = _rowwise_cosine(z1[i], z2[j])
    return positives, negatives


def label_pair_similarities(
    query: torch.Tensor,
    query_labels: torch.Tensor,
    reference: torch.Tensor,
    reference_labels: torch.Tensor,
    *,
    same_source: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Sampled same-class pairs (positives) and different-class pairs (negatives), query vs reference."""
    rng = np.random.default_rng(SEED)
    ql, rl = query_labels.numpy(), reference_labels.numpy()
    n_q, n_r = ql.size, rl.size
    # positives: a random query, then a random reference of its class (never itself)
    order = np.argsort(rl, kind="stable")
    n_classes = int(max(ql.max(), rl.max())) + 1
    count = np.bincount(rl, minlength=n_classes)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    i = rng.integers(0, n_q, PAIR_SAMPLE)
    avail = count[ql[i]] - (1 if same_source else 0)
    i = i[avail > 0]
    avail = avail[avail > 0]
    r = (rng.random(i.size) * avail).astype(np.int64)
    if same_source:  # skip the query's own slot inside its class block
        own = np.empty(n_r, dtype=np.int64)
        own[order] = np.arange(n_r) - start[rl[order]]
        r = r + (r >= own[i])
    j = order[start[ql[i]] + r]
    positives = _rowwise_cosine(query[i], reference[j])
    # negatives: random pairs whose labels differ
    i = rng.integers(0, n_q, PAIR_SAMPLE)
    j = rng.integers(0, n_r, PAIR_SAMPLE)
    keep = ql[i] != rl[j]
    negatives = _rowwise_cosine(query[i[keep]], reference[j[keep]])
    return positives, negatives


def plot_curves(
    out: Figures, stem: str, title: str, ks: Sequence[int], hit_rate: Sequence[float], recall: Sequence[float]
) -> str:
    """Hit-rate@k and recall@k against k (a TREC run, or dense retrieval's lists)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ks, hit_rate, marker="o", markersize=3, label="hit_rate@k")
    ax.plot(ks, recall, marker="s", markersize=3, label="recall@k")
    ax.set_xlabel("k")
    ax.set_ylabel("value (mean over queries)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend_outside(ax)
    return out.save(fig, stem)


def plot_similarities(
    out: Figures, stem: str, title: str, positives: np.ndarray, negatives: np.ndarray
) -> str:
    """Histograms of positive-pair and negative-pair cosine similarities."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    bins = np.linspace(-1.0, 1.0, 81)
    if negatives.size:
        ax.hist(negatives, bins=bins, density=True, alpha=0.6, label=f"negative pairs (n={negatives.size})")
    if positives.size:
        ax.hist(positives, bins=bins, density=True, alpha=0.6, label=f"positive pairs (n={positives.size})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("density")
    ax.set_title(title)
    _legend_outside(ax)
    return out.save(fig, stem)


def plot_per_class(
    out: Figures, names: Sequence[str], values: np.ndarray, counts: np.ndarray, overall: float
) -> str:
    """precision_at_1 of each class (query labels) as a bar chart, with the overall value as a line."""
    plt = _pyplot()
    shown = counts > 0
    labels = [n for n, s in zip(names, shown) if s]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(labels)), 4))
    ax.bar(range(len(labels)), values[shown])
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=90 if len(labels) > 20 else 0)
    ax.set_xlabel("class")
    ax.set_ylabel("precision_at_1")
    ax.set_ylim(0, 1.02)
    if np.isfinite(overall):
        ax.axhline(overall, color="black", linestyle="--", linewidth=1, label=f"all queries: {overall:.3f}")
        _legend_outside(ax)
    ax.set_title("precision_at_1 per class")
    return out.save(fig, "precision_at_1_per_class")


def _horizontal_boxplot(ax: Any, data: list[np.ndarray], labels: list[str]) -> None:
    """Horizontal box plots on every matplotlib the ``[report]`` extra allows (3.6 and later): the
    arguments ``Axes.boxplot`` takes, ``orientation``/``tick_labels`` (3.10/3.9), where ``vert`` and
    ``labels`` are deprecated, else ``vert``/``labels``."""
    takes = inspect.signature(ax.boxplot).parameters
    options: dict[str, Any] = {"orientation": "horizontal"} if "orientation" in takes else {"vert": False}
    options["tick_labels" if "tick_labels" in takes else "labels"] = labels
    ax.boxplot(data, **options)


def plot_comparison(out: Figures, values: dict[str, dict[str, torch.Tensor]], measure: str) -> list[str]:
    """Comparing runs: the per-query differences of ``measure`` against the first run (box plots), and
    every run's mean of every measure with its bootstrap 95% interval."""
    from embedmetrics.functional import bootstrap_ci

    plt = _pyplot()
    by_system = values[measure]
    names = list(by_system)
    base = by_system[names[0]]
    fig, ax = plt.subplots(figsize=(6, 0.6 * len(names) + 1.5))
    diffs = [(by_system[n] - base).double().numpy() for n in names[1:]]
    _horizontal_boxplot(ax, diffs, [f"{n} − {names[0]}" for n in names[1:]])
    ax.axvline(0.0, color="grey", linewidth=1)
    ax.set_xlabel(f"per-query difference of {measure}")
    ax.set_title("Paired differences against the first run")
    paths = [out.save(fig, "comparison_paired_differences")]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(values)), 4))
    xs = np.arange(len(values))
    for i, name in enumerate(names):
        cis = [bootstrap_ci(per_system[name]) for per_system in values.values()]
        means = np.array([float(c.mean) for c in cis])
        err = np.array([[float(c.mean - c.low) for c in cis], [float(c.high - c.mean) for c in cis]])
        ax.errorbar(xs + 0.12 * (i - (len(names) - 1) / 2), means, yerr=err, fmt="o", capsize=3, label=name)
    ax.set_xticks(xs, list(values), rotation=45, ha="right")
    ax.set_ylabel("mean over queries (95% bootstrap CI)")
    ax.set_title("Runs compared")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    paths.append(out.save(fig, "comparison_means_ci"))
    return paths
