"""embedmetrics: exact, fast, distributed metrics for retrieval and embedding evaluation."""

from __future__ import annotations

from embedmetrics.losses import ContrastiveLoss

__version__ = "0.1.0"

__all__: list[str] = ["__version__"]
__all__ += ["ContrastiveLoss"]
