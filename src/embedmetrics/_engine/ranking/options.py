"""The settings of the retrieval metrics, one ``Option`` each (see ``embedmetrics._engine.settings.options``).

``OPTIONS`` maps each metric (the registry's name) to its table. No torch is imported here.
"""

from __future__ import annotations

from typing import Any

from embedmetrics._engine.settings.arguments import (
    ArgumentKindError,
    check_bool,
    check_number,
    check_positive_int,
    normalize_ks,
)
from embedmetrics._engine.settings.options import (
    AGGREGATION,
    TIES_OPTION,
    VALIDATE_ARGS,
    Option,
    choice,
    optional,
)

EMPTY_TARGET_ACTIONS = ("neg", "pos", "skip", "error")


def check_ks(name: str, value: Any) -> Any:
    """``None``, a positive int or a non-empty sequence of them (returned as given)."""
    normalize_ks(name, value)
    return value


def check_ignore_index(name: str, value: Any) -> Any:
    """``None`` or an int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ArgumentKindError(f"Argument `{name}` must be an int or None, got {value!r}.")
    return value


def check_max_fpr(name: str, value: Any) -> Any:
    """``None`` or a number in ``(0, 1]``."""
    if value is None:
        return None
    out = check_number(name, value, positive=True)
    if out > 1:
        raise ValueError(f"Argument `{name}` must be None or a number in (0, 1], got {value!r}.")
    return out


def check_multiple(name: str, value: Any) -> float:
    """A positive number."""
    return check_number(name, value, positive=True)


def check_fraction(name: str, value: Any) -> float:
    """A number in ``[0, 1]``."""
    out = check_number(name, value)
    if out > 1:
        raise ValueError(f"Argument `{name}` must be a number in [0, 1], got {value!r}.")
    return out


K = Option(
    "k",
    "int | Sequence[int] | None",
    None,
    "cut-off: ``None`` (all documents), an int, or a sequence of ints (one value per k); "
    "``top_k`` is its torchmetrics name",
    check_ks,
    effect="state",
)
TIES = TIES_OPTION.changing("state")
EMPTY_TARGET_ACTION = Option(
    "empty_target_action",
    "str",
    "neg",
    "a query without a relevant document: ``neg`` (0), ``pos`` (1), ``skip`` or ``error``",
    choice(*EMPTY_TARGET_ACTIONS),
    choices=EMPTY_TARGET_ACTIONS,
)
IGNORE_INDEX = Option(
    "ignore_index", "int | None", None, "documents with this target are dropped", check_ignore_index,
    effect="state",
)  # fmt: skip
ADAPTIVE_K = Option(
    "adaptive_k", "bool", False, "divide by ``min(k, n)`` (``n`` ranked documents) instead of ``k``",
    check_bool, effect="state",
)  # fmt: skip
MAX_FPR = Option(
    "max_fpr",
    "float | None",
    None,
    "``None`` (the whole ROC curve) or a number in ``(0, 1]``: McClish's standardised partial area up "
    "to this false-positive rate",
    check_max_fpr,
    effect="state",
)
MULTIPLE = Option(
    "multiple", "float", 1.0, "the multiple ``x`` of ``R`` where precision is read (``⌊x·R + 0.9⌋``)",
    check_multiple, effect="state",
)  # fmt: skip
BETA = Option(
    "beta", "float", 1.0, "the weight ``x`` of precision in ``(x + 1)·P·R / (x·P + R)``", check_multiple,
    effect="state",
)  # fmt: skip
RECALL_LEVEL = Option(
    "recall_level", "float", 0.0, "the recall level in ``[0, 1]`` (``iprec_at_recall_0.10``: 0.1)",
    check_fraction, effect="state",
)  # fmt: skip
#: trec_eval's interpolated precision and infAP keep their first default, relevant documents last among ties
#: (``average`` sums each tie block's arrangements, with a host sync: docs/ties.md).
TIES_PESSIMISTIC = TIES.with_default("pessimistic")
MAX_K = Option(
    "max_k", "int | None", None, "last cut-off of the curve; ``None``: the largest query",
    optional(check_positive_int),
)  # fmt: skip
MIN_PRECISION = Option(
    "min_precision", "float", 0.0, "the precision the recall must keep, in ``[0, 1]``", check_fraction
)

#: Every retrieval metric takes these.
COMMON = (TIES, EMPTY_TARGET_ACTION, IGNORE_INDEX, AGGREGATION, VALIDATE_ARGS)
_CUTOFF = (K, *COMMON)

OPTIONS: dict[str, tuple[Option, ...]] = {
    "RetrievalAUROC": (*_CUTOFF, MAX_FPR),
    "RetrievalBpref": COMMON,
    "RetrievalFallOut": _CUTOFF,
    "RetrievalHitRate": _CUTOFF,
    "RetrievalInfAP": (TIES_PESSIMISTIC, *COMMON[1:]),
    "RetrievalInterpolatedPrecision": (TIES_PESSIMISTIC, *COMMON[1:], RECALL_LEVEL),
    "RetrievalMAP": _CUTOFF,
    "RetrievalMRR": _CUTOFF,
    "RetrievalNormalizedDCG": _CUTOFF,
    "RetrievalPrecision": (*_CUTOFF, ADAPTIVE_K),
    "RetrievalPrecisionRecallCurve": (*COMMON, MAX_K, ADAPTIVE_K),
    "RetrievalRPrecision": COMMON,
    "RetrievalRPrecisionMultiple": (*COMMON, MULTIPLE),
    "RetrievalSetF": (*_CUTOFF, BETA),
    "RetrievalSetMAP": _CUTOFF,
    "RetrievalSetRelativePrecision": _CUTOFF,
    "RetrievalRecall": _CUTOFF,
    "RetrievalRecallAtFixedPrecision": (*COMMON, MIN_PRECISION, MAX_K, ADAPTIVE_K),
}
