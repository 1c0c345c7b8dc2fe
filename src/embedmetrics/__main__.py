"""``python -m embedmetrics report ...``: the same as the ``embedmetrics`` console script."""

from __future__ import annotations

from embedmetrics.cli import run

if __name__ == "__main__":
    run()
