"""The settings of the comparison functions, one ``Option`` each (see
``embedmetrics._engine.settings.options``). ``OPTIONS`` maps each function (the registry's name) to its
table. No torch is imported here.
"""

from __future__ import annotations

from typing import Any

from embedmetrics._engine.settings.arguments import check_choice, check_int, check_number, check_positive_int
from embedmetrics._engine.settings.options import Option, choice

#: The paired tests.
TESTS = ("t", "wilcoxon", "randomization", "bootstrap")
#: The tests that resample (their resampled sums and table count in a comparison's memory).
RESAMPLING = ("randomization", "bootstrap")
#: The alternatives of a test: ``a`` differs from ``b``, is greater, or is less.
ALTERNATIVES = ("two-sided", "greater", "less")
#: Multiple-comparison corrections (``None``: none).
CORRECTIONS = ("holm", "bonferroni")
#: Confidence interval methods of the bootstrap.
CI_METHODS = ("percentile", "bca")
#: The most resamples: the resampled statistics are kept, 8 bytes each per pair or column (800 MB).
MAX_RESAMPLES = 100_000_000


def check_open_unit(name: str, value: Any) -> float:
    """A number strictly between 0 and 1."""
    out = check_number(name, value, positive=True)
    if out >= 1:
        raise ValueError(f"Argument `{name}` must be a number in (0, 1), got {value!r}.")
    return out


def check_correction(name: str, value: Any) -> Any:
    """``None``, ``"holm"`` or ``"bonferroni"``."""
    if value is not None:
        check_choice(name, value, CORRECTIONS)
    return value


def check_baseline(name: str, value: Any) -> Any:
    """``None`` or a system's name (a string; whether the systems have it is checked with them)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Argument `{name}` must be a system's name (a string) or None, got {value!r}.")
    return value


def check_resamples(name: str, value: Any) -> int:
    """A positive int of at most ``MAX_RESAMPLES``."""
    out = check_positive_int(name, value)
    if out > MAX_RESAMPLES:
        raise ValueError(f"Argument `{name}` must be at most {MAX_RESAMPLES:,}, got {value!r}.")
    return out


def check_seed(name: str, value: Any) -> int:
    """A non-negative integer (a NumPy integer too); another kind of value is an ``ArgumentKindError``,
    as for ``n_resamples``."""
    return check_int(name, value, least=0)


TEST = Option(
    "test", "str", "t", "the paired test: ``t``, ``wilcoxon``, ``randomization`` or ``bootstrap``",
    choice(*TESTS), choices=TESTS, cli=True,
)  # fmt: skip
ALTERNATIVE = Option(
    "alternative", "str", "two-sided", "``two-sided``, ``greater`` (a > b) or ``less`` (a < b)",
    choice(*ALTERNATIVES), choices=ALTERNATIVES,
)  # fmt: skip
N_RESAMPLES = Option(
    "n_resamples", "int", 10_000,
    f"resamples of the randomization and bootstrap tests and intervals, 1 to {MAX_RESAMPLES:,}",
    check_resamples, cli=True,
)  # fmt: skip
SEED = Option(
    "seed", "int", 0, "seed of the resamples (the same seed, the same result)", check_seed, cli=True
)
CORRECTION = Option(
    "correction", "str | None", "holm",
    "multiple-comparison correction: ``holm``, ``bonferroni`` or ``None`` (no correction)",
    check_correction, choices=CORRECTIONS, cli=True,
)  # fmt: skip
ALPHA = Option("alpha", "float", 0.05, "significance level, in (0, 1)", check_open_unit, cli=True)
CONFIDENCE = Option(
    "confidence", "float", 0.95, "confidence level of the interval, in (0, 1)", check_open_unit
)
CI_METHOD = Option(
    "method", "str", "percentile", "``percentile`` or ``bca`` (bias-corrected and accelerated)",
    choice(*CI_METHODS), choices=CI_METHODS,
)  # fmt: skip

BASELINE = Option(
    "baseline", "str | None", None,
    "a system's name: each other system is tested against it alone, the correction over those pairs "
    "(``None``: every pair)", check_baseline, cli=True,
)  # fmt: skip

_PAIRED = (TEST, ALTERNATIVE, N_RESAMPLES, SEED)
OPTIONS: dict[str, tuple[Option, ...]] = {
    "paired_test": _PAIRED,
    "compare": (TEST, CORRECTION, ALPHA, N_RESAMPLES, SEED, BASELINE),
    "bootstrap_ci": (CONFIDENCE, N_RESAMPLES, CI_METHOD, SEED),
    "ConfidenceInterval": (CONFIDENCE, N_RESAMPLES, CI_METHOD, SEED),
}
