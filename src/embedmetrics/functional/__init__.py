"""Functional twins of the module metrics (stateless, one call on the whole data)."""

from __future__ import annotations

__all__: list[str] = []
