"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

from embedmetrics.functional.losses import contrastive_loss

__all__: list[str] = []
__all__ += ["contrastive_loss"]
