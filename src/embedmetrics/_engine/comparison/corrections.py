"""Multiple-comparison corrections of the p-values of a family of tests."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def correct(p_values: Tensor, correction: Optional[str]) -> Tensor:
    """The corrected p-values: ``"bonferroni"`` (``min(1, m p)``), ``"holm"`` (Holm's step-down:
    the ``i``-th smallest becomes ``max_{j <= i} min(1, (m - j) p_(j))``, 0-based) or ``None``."""
    m = p_values.numel()
    if correction is None or m == 0:
        return p_values.clone()
    if correction == "bonferroni":
        return (p_values * m).clamp(max=1.0)
    order = torch.argsort(p_values, stable=True)
    factors = torch.arange(m, 0, -1, dtype=p_values.dtype, device=p_values.device)
    stepped = torch.cummax((p_values[order] * factors).clamp(max=1.0), dim=0).values
    out = torch.empty_like(p_values)
    out[order] = stepped
    return out
