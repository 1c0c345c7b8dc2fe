"""Argument checks of the representation-health metrics, shared by the module and functional faces."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from embedmetrics._engine.core.checks import (
    TIES,
    check_block_bytes,
    check_choice,
    check_number,
    check_positive_int,
    normalize_ks,
)


class KnnOptions(NamedTuple):
    """Checked options of the weighted k-NN accuracy."""

    k: int
    temperature: float
    tops: tuple[int, ...]
    single: bool
    num_classes: Optional[int]
    ties: str
    block_bytes: Optional[int]


def check_knn_options(
    k: Any, temperature: Any, top: Any, num_classes: Any, ties: Any, block_bytes: Any
) -> KnnOptions:
    """``k >= 1``, ``temperature > 0``, ``top`` an int or a sequence of them, ``num_classes`` an int or
    ``None``, ``ties`` a policy, ``block_bytes`` a budget or ``None``."""
    tops, single = normalize_ks("top", top, allow_none=False)
    check_choice("ties", ties, TIES)
    return KnnOptions(
        check_positive_int("k", k),
        check_number("temperature", temperature, positive=True),
        tuple(int(t) for t in tops if t is not None),
        single,
        None if num_classes is None else check_positive_int("num_classes", num_classes),
        str(ties),
        check_block_bytes(block_bytes),
    )
