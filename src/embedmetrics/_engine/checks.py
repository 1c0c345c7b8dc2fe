"""Argument and input validation shared by every family.

Every error names the argument and the value received, as the project's convention requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch
from torch import Tensor

ArrayLike = Union[Tensor, np.ndarray]


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if isinstance(value, str) and value in choices:
        return
    if not isinstance(value, str) and any(value is c or value == c for c in choices):
        return
    raise ValueError(f"Argument `{name}` must be one of {tuple(choices)}, got {value!r}.")


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) that is at least 1, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Argument `{name}` must be a positive integer, got {value!r}.")
    if value < 1:
        raise ValueError(f"Argument `{name}` must be a positive integer (>= 1), got {value!r}.")
    return int(value)


def check_non_negative_number(name: str, value: Any) -> float:
    """Return ``value`` as float if it is a real number >= 0, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Argument `{name}` must be a non-negative number, got {value!r}.")
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"Argument `{name}` must be a non-negative number, got {value!r}.")
    return float(value)


def normalize_ks(name: str, k: Any, *, allow_none: bool = True) -> tuple[tuple[int | None, ...], bool]:
    """Normalise a cut-off argument that may be ``None``, an ``int`` or a sequence of ints.

    Returns:
        The cut-offs as a tuple, and whether the caller passed a single value (so the result
        should be a scalar rather than one value per cut-off).
    """
    if k is None:
        if not allow_none:
            raise ValueError(f"Argument `{name}` must be a positive integer, got None.")
        return (None,), True
    if isinstance(k, (list, tuple)):
        if len(k) == 0:
            raise ValueError(f"Argument `{name}` must not be an empty sequence, got {k!r}.")
        return tuple(check_positive_int(name, v) for v in k), False
    if isinstance(k, Tensor):
        raise TypeError(f"Argument `{name}` must be an int or a sequence of ints, got a tensor {k!r}.")
    return (check_positive_int(name, k),), True


def to_tensors(names: Sequence[str], *arrays: Any) -> tuple[list[Tensor], bool]:
    """Convert inputs that are all torch tensors or all NumPy arrays to tensors.

    Returns:
        The tensors, and whether the inputs were NumPy arrays (so results go back as NumPy).

    Raises:
        TypeError: if the inputs mix types, or are neither tensors nor arrays.
    """
    all_torch = all(isinstance(a, Tensor) for a in arrays)
    all_numpy = all(isinstance(a, np.ndarray) for a in arrays)
    if not (all_torch or all_numpy):
        kinds = ", ".join(f"`{n}`: {type(a).__name__}" for n, a in zip(names, arrays))
        raise TypeError(f"Inputs must be all torch.Tensor or all numpy.ndarray, got {kinds}.")
    if all_numpy:
        return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays], True
    return list(arrays), False


def check_embeddings(name: str, z: Tensor, *, allow_empty: bool = False) -> None:
    """Check that ``z`` is a 2-D floating-point tensor of embeddings with at least one row."""
    if z.ndim != 2:
        raise ValueError(
            f"Argument `{name}` must be 2-D (n_samples, n_features), got shape {tuple(z.shape)}."
        )
    if not z.is_floating_point():
        raise TypeError(f"Argument `{name}` must be a floating-point tensor, got dtype {z.dtype}.")
    if not allow_empty and z.shape[0] == 0:
        raise ValueError(f"Argument `{name}` must have at least one row, got shape {tuple(z.shape)}.")
