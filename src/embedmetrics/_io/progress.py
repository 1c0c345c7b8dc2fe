"""Progress bars that appear only when stderr is a terminal (and tqdm is installed)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class _Silent:
    """A stand-in for a tqdm bar that shows nothing."""

    total: float = 0
    n: float = 0

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None

    def set_postfix_str(self, text: str) -> None:
        return None

    def refresh(self) -> None:
        return None


def show_progress() -> bool:
    """Whether to draw progress bars: only on an interactive stderr."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(*, total: float, desc: str, **kwargs: Any) -> Any:
    """A tqdm bar on stderr when it is a terminal, else a silent stand-in with the same methods."""
    if not show_progress():
        return _Silent()
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is in the `report` extra; without it, no bar
        return _Silent()
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True, **kwargs)


def follow_blocks(bar: Any) -> Callable[[int, int], None]:
    """A block callback (``on_blocks`` of ``embedmetrics._engine.core.block_progress``) that moves
    ``bar``: its total becomes the scan's number of blocks, its count the blocks done."""

    def moved(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return moved
