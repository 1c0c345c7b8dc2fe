"""Checks of scalar arguments (options, cut-offs), shared by every face and the command line.

No torch is imported here: the command line and the option tables (``options.py``) read them before
anything heavy is loaded. Every error names the argument and the value received; ``ArgumentKindError``
for the wrong kind, ``ValueError`` for a wrong value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np


class ArgumentKindError(TypeError, ValueError):
    """An argument of the wrong kind (type or dtype): a ``TypeError`` that is also a ``ValueError``.

    torchmetrics raises ``ValueError`` for some of these mistakes (``top_k=4.0``, ``ignore_index=-100.0``,
    bool ``preds``); code that catches either keeps working. Wrong *values* stay plain ``ValueError``.
    """


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if isinstance(value, str) and value in choices:
        return
    if not isinstance(value, str) and any(value is c or value == c for c in choices):
        return
    raise ValueError(f"Argument `{name}` must be one of {tuple(choices)}, got {value!r}.")


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` as a ``bool`` if it is a Python or NumPy bool; raise ``TypeError`` otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentKindError(f"Argument `{name}` must be a bool, got {value!r}.")
    return bool(value)


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) that is at least 1, else raise."""
    return check_int(name, value, least=1)


def check_int(name: str, value: Any, *, least: int) -> int:
    """Return ``value`` as an ``int`` if it is a Python or NumPy integer (not a ``bool``) of at least
    ``least`` (1: positive, 0: non-negative); else ``ArgumentKindError`` for another kind of value,
    ``ValueError`` for a smaller one."""
    what = "a positive integer" if least == 1 else "a non-negative integer" if least == 0 else "an integer"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentKindError(f"Argument `{name}` must be {what}, got {value!r}.")
    if value < least:
        raise ValueError(f"Argument `{name}` must be {what} (>= {least}), got {value!r}.")
    return int(value)


def check_block_bytes(value: Any) -> Optional[int]:
    """The memory budget of one block of a scan: a positive ``int`` number of bytes, or ``None``
    (chosen for the device when the scan runs)."""
    return None if value is None else check_positive_int("block_bytes", value)


def check_number(name: str, value: Any, *, positive: bool = False, finite: bool = True) -> float:
    """Return ``value`` as a float if it is a real number ``>= 0`` (``> 0`` with ``positive``).

    ``finite`` (default) also rejects infinity; NaN is always rejected.
    """
    what = "positive" if positive else "non-negative"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentKindError(f"Argument `{name}` must be a {what} number, got {value!r}.")
    out = float(value)
    if not (out > 0 if positive else out >= 0):  # also NaN
        raise ValueError(f"Argument `{name}` must be a {what} number, got {value!r}.")
    if finite and math.isinf(out):
        raise ValueError(f"Argument `{name}` must be a finite {what} number, got {value!r}.")
    return out


def normalize_ks(name: str, k: Any, *, allow_none: bool = True) -> tuple[tuple[Optional[int], ...], bool]:
    """Normalise a cut-off argument that may be ``None``, an ``int`` or a sequence of ints.

    Returns:
        The cut-offs as a tuple, and whether the caller passed a single value (so the result
        should be a scalar rather than one value per cut-off).
    """
    if k is None:
        if not allow_none:
            raise ArgumentKindError(f"Argument `{name}` must be a positive integer, got None.")
        return (None,), True
    if isinstance(k, (list, tuple)):
        if len(k) == 0:
            raise ValueError(f"Argument `{name}` must not be an empty sequence, got {k!r}.")
        return tuple(check_positive_int(name, v) for v in k), False
    if hasattr(k, "__torch_function__"):  # a tensor, named as such
        raise ArgumentKindError(
            f"Argument `{name}` must be an int or a sequence of ints, got a tensor {k!r}."
        )
    return (check_positive_int(name, k),), True
