"""The settings of the representation-health metrics, one ``Option`` each (see
``embedmetrics._engine.settings.options``), and the checked options of the weighted k-NN accuracy.
``OPTIONS`` maps each metric (the registry's name) to its table. No torch is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Optional

from embedmetrics._engine.settings.arguments import (
    ArgumentKindError,
    check_bool,
    check_positive_int,
    normalize_ks,
)
from embedmetrics._engine.settings.options import (
    BLOCK_BYTES,
    EPS,
    TIES_OPTION,
    VALIDATE_ARGS,
    Option,
    number,
    optional,
)

#: Default ``eps`` of RankMe's distribution (Garrido et al., 2023).
RANKME_EPS = 1e-7
#: Default rank range (1-based, inclusive) of α-ReQ's power-law fit (Agrawal et al., 2022: the
#: authors' reference code fits ``np.arange(5, 100)``, the 6th to the 100th eigenvalue).
ALPHA_FIT_RANGE = (6, 100)
#: Defaults of LiDAR (Thilak et al., 2024): ridge of the within-class covariance, ``eps`` of the
#: distribution.
LIDAR_DELTA = 1e-4
LIDAR_EPS = 1e-8


def check_fit_range(name: str, fit_range: Any) -> tuple[int, int]:
    """``(first, last)`` ranks, ``1 <= first < last``."""
    if not isinstance(fit_range, (tuple, list)) or len(fit_range) != 2:
        raise ArgumentKindError(
            f"Argument `{name}` must be a pair of ranks (first, last), got {fit_range!r}."
        )
    lo, hi = (check_positive_int(name, v) for v in fit_range)
    if lo >= hi:
        raise ValueError(f"Argument `{name}` must have first < last, got {tuple(fit_range)!r}.")
    return lo, hi


def check_tops(name: str, value: Any) -> Any:
    """A positive int or a non-empty sequence of them (returned as given)."""
    normalize_ks(name, value, allow_none=False)
    return value


CENTER = Option(
    "center", "bool", False, "subtract the mean embedding first (covariance spectrum)", check_bool
)
FIT_RANGE = Option(
    "fit_range", "tuple[int, int]", ALPHA_FIT_RANGE, "the ranks ``(first, last)`` of the power-law fit",
    check_fit_range,
)  # fmt: skip
DELTA = Option("delta", "float", LIDAR_DELTA, "the ridge added to the within-class scatter", number())
KNN_K = Option("k", "int", 20, "neighbours that vote", check_positive_int)
TEMPERATURE = Option(
    "temperature", "float", 0.07, "``T`` of the neighbour weights ``exp(s / T)``", number(positive=True)
)
TOP = Option(
    "top", "int | tuple[int, ...]", (1, 5), "the ``top`` of top-``top`` accuracy, or a sequence", check_tops
)
NUM_CLASSES = Option(
    "num_classes", "int | None", None, "number of classes; ``None``: the distinct labels seen",
    optional(check_positive_int),
)  # fmt: skip

OPTIONS: dict[str, tuple[Option, ...]] = {
    "RankMe": (CENTER, EPS.with_default(RANKME_EPS), VALIDATE_ARGS),
    "AlphaReQ": (FIT_RANGE, VALIDATE_ARGS),
    "LiDAR": (DELTA, EPS.with_default(LIDAR_EPS), VALIDATE_ARGS),
    "LinearCKA": (VALIDATE_ARGS,),
    "KNNAccuracy": (KNN_K, TEMPERATURE, TOP, NUM_CLASSES, TIES_OPTION, BLOCK_BYTES, VALIDATE_ARGS),
}


class KnnOptions(NamedTuple):
    """Checked options of the weighted k-NN accuracy."""

    k: int
    temperature: float
    tops: tuple[int, ...]
    single: bool
    num_classes: Optional[int]
    ties: str
    block_bytes: Optional[int]


def knn_options(values: Mapping[str, Any]) -> KnnOptions:
    """The k-NN accuracy's options from the checked values of its table."""
    tops, single = normalize_ks("top", values["top"], allow_none=False)
    return KnnOptions(
        values["k"],
        values["temperature"],
        tuple(int(t) for t in tops if t is not None),
        single,
        values["num_classes"],
        values["ties"],
        values["block_bytes"],
    )
