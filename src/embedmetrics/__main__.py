"""``python -m embedmetrics report ...``: the same as the ``embedmetrics`` console script."""

from __future__ import annotations

import sys

from embedmetrics.cli import main

if __name__ == "__main__":
    sys.exit(main())
