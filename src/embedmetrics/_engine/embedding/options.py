"""The settings of the embedding metrics, the shape similarities and the contrastive loss, one ``Option``
each (see ``embedmetrics._engine.settings.options``). ``OPTIONS`` maps each metric (the registry's name) to
its table. No torch is imported here.
"""

from __future__ import annotations

from typing import Any

from embedmetrics._engine.settings.arguments import check_bool, normalize_ks
from embedmetrics._engine.settings.options import (
    BLOCK_BYTES,
    EPS,
    NORMALIZE,
    TIES_OPTION,
    VALIDATE_ARGS,
    Option,
    choice,
    number,
)

#: Reductions of the contrastive loss.
REDUCTIONS = ("mean", "sum", "none")


def check_topk(name: str, value: Any) -> Any:
    """A positive int or a non-empty sequence of them (returned as given)."""
    normalize_ks(name, value, allow_none=False)
    return value


TOPK = Option(
    "topk", "int | Sequence[int]", 1, "``k``, or a sequence of them (one value per ``k``)", check_topk
)
T = Option("t", "float", 2.0, "the temperature ``t`` of ``log E exp(-t ||z_i - z_j||^2)``", number())
ALPHA = Option("alpha", "float", 2, "the power of ``||z1 - z2||``", number(positive=True), effect="state")
SPHERICAL = Option(
    "spherical", "bool", False, "compare cosine similarities instead of Euclidean distances", check_bool
)
MARGIN = Option("margin", "float", 1.0, "the margin of dissimilar pairs", number())
REDUCTION = Option(
    "reduction", "str", "mean", "``mean``, ``sum`` or ``none`` (one loss per pair)", choice(*REDUCTIONS),
    choices=REDUCTIONS,
)  # fmt: skip

OPTIONS: dict[str, tuple[Option, ...]] = {
    "ContrastiveAccuracy": (TOPK, NORMALIZE, TIES_OPTION, EPS, BLOCK_BYTES, VALIDATE_ARGS),
    "Uniformity": (T, NORMALIZE, EPS, BLOCK_BYTES, VALIDATE_ARGS),
    # Alignment keeps two running sums whose meaning depends on every one of its settings
    "Alignment": (ALPHA, NORMALIZE.changing("state"), EPS.changing("state"), VALIDATE_ARGS),
    "procrustes_similarity": (VALIDATE_ARGS,),
    "procrustes_r2": (VALIDATE_ARGS,),
    "kruskal_similarity": (SPHERICAL, VALIDATE_ARGS),
    "ContrastiveLoss": (MARGIN, REDUCTION, VALIDATE_ARGS),
}
