r"""Comparing systems on per-query values: paired tests, all-pairs comparisons with corrections, and
bootstrap confidence intervals (faces over ``embedmetrics._engine.comparison``).

The inputs are the per-query values every retrieval, dense and kNN metric returns with
``aggregation="none"`` (or ``per_query=True``), in the same query order for every system. Tensors or
NumPy arrays; the results are float64 tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embedmetrics._engine.comparison.bootstrap import Interval, bootstrap_interval
from embedmetrics._engine.comparison.compare import (
    Comparison,
    check_per_query,
    compare_systems,
    per_query,
    result_dtype,
    systems_of,
    systems_to_compare,
)
from embedmetrics._engine.comparison.options import OPTIONS
from embedmetrics._engine.comparison.paired import PairedResult, run_test
from embedmetrics._engine.core.inputs import numpy_io
from embedmetrics._engine.settings.options import options_in, read_options

__all__ = ["Comparison", "Interval", "PairedResult", "bootstrap_ci", "compare", "paired_test"]


@numpy_io
def paired_test(
    a: Any,
    b: Any,
    test: str = "t",
    alternative: str = "two-sided",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> PairedResult:
    r"""A paired significance test of ``a`` against ``b``: per-query values of two systems on the same
    queries, in the same order.

    With the differences $d_i = a_i - b_i$ of $Q$ queries:

    - ``"t"``: Student's paired t-test, $t = \bar d / (s_d / \sqrt{Q})$ with $Q - 1$
      degrees of freedom; equals ``scipy.stats.ttest_rel``. Effect size: Cohen's $d_z = \bar d / s_d$.
    - ``"wilcoxon"``: the Wilcoxon signed-rank test, with scipy's handling of zeros (dropped) and ties
      (average ranks) and its choice of the exact null distribution or the normal approximation; equals
      ``scipy.stats.wilcoxon``. Statistic $\min(W^+, W^-)$ (two-sided) or $W^+$; effect size
      the rank-biserial correlation $(W^+ - W^-) / (W^+ + W^-)$.
    - ``"randomization"``: Fisher's paired randomization test of $\bar d$: the signs of the
      differences flipped at random ``n_resamples`` times, p-value
      $(1 + \#\{|\bar d^*| \ge |\bar d|\}) / (1 + n)$.
    - ``"bootstrap"``: the paired bootstrap test of $\bar d$: queries resampled with replacement,
      the resampled means centred on $\bar d$, p-value as for the randomization test.

    The resampling tests work on the differences (a constant added to both systems changes nothing),
    with the queries sorted by their values first (the p-value depends on the pairs of values, not on
    their order). The random signs (bits) or resample counts are drawn on the CPU by NumPy's generator
    from ``seed`` and multiplied with the differences in tiles of a fixed size in bytes (the
    differences read once for each group of resamples; the cost is linear in the queries and in the
    resamples): the same seed gives the same p-value on any device. Wilcoxon's normal approximation
    uses a tail-accurate normal distribution (``erfc``): p-values equal scipy's down to ``1e-300``.

    Args:
        a: per-query values of system A, ``(Q,)``.
        b: per-query values of system B, ``(Q,)``, the same queries in the same order.
        test: ``"t"``, ``"wilcoxon"``, ``"randomization"`` or ``"bootstrap"``.
        alternative: ``"two-sided"``, ``"greater"`` (A better) or ``"less"``.
        n_resamples: resamples of the randomization and bootstrap tests.
        seed: seed of the resamples.

    Returns:
        ``PairedResult(statistic, p_value, mean_difference, effect_size)``, 0-dim float64 tensors.

    Raises:
        ValueError: different lengths, NaN or infinite values, values or differences whose sums
            overflow float64, fewer than 2 queries, ``n_resamples`` outside ``[1, 10^8]``, an unknown
            test or alternative.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import paired_test
        >>> a = torch.tensor([0.50, 0.62, 0.71, 0.44, 0.90, 0.38, 0.66, 0.57])
        >>> b = torch.tensor([0.41, 0.60, 0.52, 0.40, 0.85, 0.30, 0.61, 0.58])
        >>> result = paired_test(a, b, test="t")
        >>> round(float(result.statistic), 4), round(float(result.p_value), 4)
        (3.0059, 0.0198)
        >>> round(float(paired_test(a, b, test="wilcoxon").p_value), 4)
        0.0156
    """
    opts = read_options("paired_test", OPTIONS["paired_test"], options_in(OPTIONS["paired_test"], locals()))
    given = [per_query(a), per_query(b)]
    systems = systems_to_compare(("a", "b"), given, opts["test"], opts["n_resamples"])
    result = run_test(systems, *systems.pair(0, 1), opts["test"], opts["alternative"], opts["n_resamples"],
                      opts["seed"])  # fmt: skip
    dtype = result_dtype(given)
    return PairedResult(
        result.statistic[0].to(dtype),
        result.p_value[0].double(),
        result.mean_difference[0].to(dtype),
        result.effect_size[0].to(dtype),
    )  # p-values in float64 whatever the values: a far tail is no float32 number


@numpy_io
def compare(
    values: Mapping[str, Any] | Any,
    test: str = "t",
    correction: str | None = "holm",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    seed: int = 0,
    baseline: str | None = None,
) -> Comparison:
    """Every pair of ``S`` systems compared by a two-sided ``paired_test``, the p-values corrected
    for the ``S (S - 1) / 2`` comparisons; with ``baseline``, each other system against the baseline
    alone (pairs ``(system, baseline)``), corrected for those ``S - 1`` comparisons.

    The resampling tests use the same resamples for every pair (each group of them multiplied in tiles
    with every system's differences from its first value, so a constant added to every system changes
    nothing); no ``(pairs, queries)`` differences are held (a pair's mean and deviation come from blocks
    of them: 10 systems on 1,000,000 queries take at most twice the values' own size); the queries are
    sorted by their values first (the p-values depend on the multiset of the queries, not on their
    order). System names must differ as text (keys ``1`` and ``"1"`` are
    refused). ``correction="holm"`` (Holm's step-down, controls the family-wise error rate like Bonferroni
    and rejects at least as much), ``"bonferroni"`` or ``None``.

    Args:
        values: a mapping system name -> per-query values ``(Q,)``, or an ``(S, Q)`` tensor (systems
            named ``"0"``, ``"1"``, ...), the same queries in the same order.
        test: ``"t"``, ``"wilcoxon"``, ``"randomization"`` or ``"bootstrap"``.
        correction: ``"holm"``, ``"bonferroni"`` or ``None``.
        alpha: significance level, in ``(0, 1)``.
        n_resamples: resamples of the randomization and bootstrap tests.
        seed: seed of the resamples.
        baseline: the name of the system every other one is compared with (``None``: every pair).

    Returns:
        A ``Comparison``, with per pair the statistic, the raw and corrected p-values, the mean
            difference and the effect size; the significance matrix; ``beats(name)``; ``to_dict()``;
            ``to_markdown()``.

    Raises:
        ValueError: more systems than queries (an ``(S, Q)`` tensor of shape ``(1000000, 10)`` is a
            ``(queries, systems)`` table: pass ``values.T``), fewer than 2 systems, and the errors of
            ``paired_test``; refused before anything is copied.
        ComparisonTooLargeError: the pairs' results need more than the memory at hand (also a
            ``ValueError`` and a ``MemoryError``).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import compare
        >>> gen = torch.Generator().manual_seed(0)
        >>> base = torch.rand(200, generator=gen)
        >>> noise = 0.01 * torch.randn(200, generator=gen)
        >>> runs = {"bm25": base, "dense": base + 0.05, "hybrid": base + 0.051 + noise}
        >>> result = compare(runs, test="t", correction="holm")
        >>> result.beats("hybrid"), result.beats("bm25")
        (['bm25'], [])
        >>> print(result.to_markdown(digits=3).splitlines()[2])
        | a | bm25 | 0.474 |
    """
    opts = read_options("compare", OPTIONS["compare"], options_in(OPTIONS["compare"], locals()))
    names, tensors = systems_of(values)
    if len(names) < 2:
        raise ValueError(f"Argument `values` must hold at least 2 systems, got {len(names)}.")
    if opts["baseline"] is not None and opts["baseline"] not in names:
        raise ValueError(
            f"Argument `baseline` must be one of the systems ({', '.join(names)}), got {opts['baseline']!r}."
        )
    labels = tuple(f"values[{n!r}]" for n in names)
    return compare_systems(
        result_dtype(tensors),
        names,
        systems_to_compare(labels, tensors, opts["test"], opts["n_resamples"]),
        opts["test"],
        opts["correction"],
        opts["alpha"],
        opts["n_resamples"],
        opts["seed"],
        opts["baseline"],
    )


@numpy_io
def bootstrap_ci(
    values: Any,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    method: str = "percentile",
    seed: int = 0,
) -> Interval:
    r"""A bootstrap confidence interval of the mean of per-query values.

    Each column is sorted, then its queries are resampled with replacement ``n_resamples`` times (the
    resample counts drawn on the CPU by NumPy's generator from ``seed``, multiplied in tiles of a fixed
    size in bytes);
    ``"percentile"`` takes the $(1 \pm \mathrm{confidence})/2$ quantiles of the resampled means,
    ``"bca"`` shifts them by the bias correction (resampled means equal to the estimate count half)
    and the jackknife acceleration (Efron's BCa), as ``scipy.stats.bootstrap`` does. The interval
    depends on the multiset of values only (any order of the queries gives the same bounds) and the
    same seed gives the same interval on any device.

    Args:
        values: per-query values ``(Q,)``, or ``(Q, m)`` for ``m`` measures (one interval each).
        confidence: confidence level, in ``(0, 1)``.
        n_resamples: resamples.
        method: ``"percentile"`` or ``"bca"``.
        seed: seed of the resamples.

    Returns:
        ``Interval(mean, low, high)``, float64 tensors (0-dim for 1-D values).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import bootstrap_ci
        >>> values = torch.linspace(0.0, 1.0, 101)
        >>> ci = bootstrap_ci(values, confidence=0.9)
        >>> round(float(ci.mean), 2), round(float(ci.low), 2), round(float(ci.high), 2)
        (0.5, 0.45, 0.55)
    """
    opts = read_options(
        "bootstrap_ci", OPTIONS["bootstrap_ci"], options_in(OPTIONS["bootstrap_ci"], locals())
    )
    tensor = per_query(values)
    columns = tensor[:, None] if tensor.ndim == 1 else tensor
    if columns.ndim != 2 or columns.shape[1] == 0:
        raise ValueError(
            f"Argument `values` must be (Q,) or (Q, m) per-query values with m >= 1, got shape "
            f"{tuple(tensor.shape)}."
        )
    checked = check_per_query(tuple(f"values[:, {j}]" for j in range(columns.shape[1])), list(columns.T)).T
    interval = bootstrap_interval(
        checked, opts["confidence"], opts["n_resamples"], opts["method"], opts["seed"]
    )
    out = Interval(*(v.to(result_dtype([tensor])) for v in interval))
    return Interval(*(v[0] for v in out)) if tensor.ndim == 1 else out
