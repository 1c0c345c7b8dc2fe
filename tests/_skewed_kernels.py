"""A "kernel" whose rounding depends on an entry's place in the product: ``torch.mm`` as seen by one
engine module shifted by ``step`` times a function of each entry's row and column (well within the
canonical keys' margin), in this process only. What a query gets must not change."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def place_dependent_products(module: types.ModuleType, step: float) -> Iterator[None]:
    """``module.torch.mm`` shifted by ``step * ((7 row + 3 column) % 5 - 2)`` while the context lasts."""
    real_mm = torch.mm

    def skewed_mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        result = real_mm(a, b, out=out) if out is not None else real_mm(a, b)
        place = torch.arange(result.shape[0], dtype=result.dtype)[:, None]
        column = torch.arange(result.shape[1], dtype=result.dtype)[None]
        return result.add_(((place * 7 + column * 3) % 5 - 2) * step)

    module.torch.mm = skewed_mm  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.torch.mm = real_mm  # type: ignore[attr-defined]
