"""Sums over queries that do not depend on the order of the queries.

Floating-point addition is not associative: the mean of the same per-query values in another order can
differ in the last bits. ``order_free_sum`` adds the values in ascending order of value, so any
permutation of the queries (and any split across batches or processes, once the values are gathered)
gives the same bits.
"""

from __future__ import annotations

import torch
from torch import Tensor


def order_free_sum(values: Tensor) -> Tensor:
    """Sum over dim 0 of ``values`` (``(n, ...)``), the same bits for any order of the ``n`` rows."""
    if values.shape[0] == 0:
        return values.sum(dim=0)
    return torch.sort(values, dim=0).values.sum(dim=0)
