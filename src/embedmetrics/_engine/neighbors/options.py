"""The settings of the metric-learning accuracy (``AccuracyCalculator`` and ``EmbeddingAccuracy``), one
``Option`` each (see ``embedmetrics._engine.settings.options``). ``OPTIONS`` maps each name to its table.
No torch is imported here.
"""

from __future__ import annotations

from typing import Any, Optional

from embedmetrics._engine.settings.arguments import ArgumentKindError, check_bool, check_positive_int
from embedmetrics._engine.settings.options import BLOCK_BYTES, TIES_OPTION, VALIDATE_ARGS, Option, choice

#: Distances of the neighbour search.
DISTANCES = ("euclidean", "cosine")
#: The metrics ``embedding_accuracy`` computes by default.
DEFAULT_METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
#: The spelled-out values of ``k`` (besides ``None`` and integers).
K_RULES = ("max_bin_count", "all")


def check_k(name: str, k: Any) -> Optional[int | str]:
    """``None``, ``"max_bin_count"``, ``"all"`` or a positive int."""
    if k is None:
        return None
    if isinstance(k, str) and k in K_RULES:
        return k
    return check_positive_int(name, k)


def check_callable(name: str, value: Any) -> Any:
    """``None`` or a callable."""
    if value is not None and not callable(value):
        raise ArgumentKindError(f"Argument `{name}` must be callable, got {value!r}.")
    return value


AVG_OF_AVGS = Option("avg_of_avgs", "bool", False, "average per class, then over classes", check_bool)
K = Option(
    "k", "int | str | None", None,
    "neighbours to list: an int, ``max_bin_count``, ``all``, or ``None`` (as pytorch-metric-learning)",
    check_k,
)  # fmt: skip
LABEL_COMPARISON_FN = Option(
    "label_comparison_fn",
    "Callable | None",
    None,
    "which labels match (``None``: equality)",
    check_callable,
)
DISTANCE = Option(
    "distance", "str", "euclidean", "``euclidean`` or ``cosine``", choice(*DISTANCES), choices=DISTANCES
)
INCLUDE = Option("include", "Sequence[str]", (), "metrics to compute (empty: the default set)")
EXCLUDE = Option("exclude", "Sequence[str]", (), "metrics to leave out")
CALCULATOR = Option(
    "calculator", "AccuracyCalculator | None", None,
    "an ``AccuracyCalculator`` to use instead of the options above",
)  # fmt: skip

OPTIONS: dict[str, tuple[Option, ...]] = {
    "AccuracyCalculator": (
        INCLUDE, EXCLUDE, AVG_OF_AVGS,
        Option("return_per_class", "bool", False, "one value per class instead of the average", check_bool),
        K, LABEL_COMPARISON_FN, DISTANCE, TIES_OPTION,
        Option("kmeans_seed", "int", 0, "seed of the k-means of the clustering metrics", lambda _, v: int(v)),
        Option("knn_func", "Callable | None", None, "a neighbour search to use instead", check_callable),
        Option("kmeans_func", "Callable | None", None, "a k-means to use instead", check_callable),
        BLOCK_BYTES, VALIDATE_ARGS,
    ),
    "embedding_accuracy": (
        INCLUDE.with_default(DEFAULT_METRICS), K, DISTANCE, TIES_OPTION, LABEL_COMPARISON_FN, AVG_OF_AVGS,
        Option("per_query", "bool", False, "one value per query instead of the average", check_bool),
        BLOCK_BYTES, VALIDATE_ARGS,
    ),
    "EmbeddingAccuracy": (
        INCLUDE, EXCLUDE, AVG_OF_AVGS, K, LABEL_COMPARISON_FN, DISTANCE, TIES_OPTION, CALCULATOR,
        VALIDATE_ARGS,
    ),
}  # fmt: skip
