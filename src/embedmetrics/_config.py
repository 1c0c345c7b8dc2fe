"""Process-wide switches of the library, apart from the code that reads them.

One switch today: the opt-in compiled passes after each similarity block (``set_compile``, or the
environment variable ``EMBEDMETRICS_COMPILE=1`` at import). The kernels themselves live in
``embedmetrics._engine.core.fused``, which reads :func:`compile_enabled` and reports a compiler failure
with :func:`mark_compile_failed`.
"""

from __future__ import annotations

import os

_SWITCHES: dict[str, bool] = {
    "compile": os.environ.get("EMBEDMETRICS_COMPILE", "") == "1",
    "compile_failed": False,
}


def set_compile(enabled: bool) -> None:
    """Use ``torch.compile``'d kernels for the passes after each similarity block (``True``), or the
    eager passes (``False``, the default unless ``EMBEDMETRICS_COMPILE=1``). Results are identical.

    Examples:
        >>> from embedmetrics import set_compile
        >>> set_compile(False)
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"Argument `enabled` must be a bool, got {type(enabled).__name__}.")
    _SWITCHES["compile"] = enabled
    _SWITCHES["compile_failed"] = False


def compile_enabled() -> bool:
    """Whether the compiled kernels are asked for (and have not failed in this process)."""
    return _SWITCHES["compile"] and not _SWITCHES["compile_failed"]


def mark_compile_failed() -> None:
    """The compiler failed: the eager passes from now on, until ``set_compile`` is called again."""
    _SWITCHES["compile_failed"] = True
