"""The one array convention of the library: NumPy arrays are accepted wherever tensors are (every metric
family, module and functional alike), and a functional given NumPy input returns NumPy output (float
values as float64, integer values as int64, 0-dim values as NumPy scalars)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import as_tensor

F = TypeVar("F", bound=Callable[..., Any])


def tensors_from_numpy(
    names: tuple[str, ...], values: tuple[Any, ...], device: torch.device | None = None
) -> list[Any]:
    """Each NumPy array of ``values`` as a tensor (on ``device`` when given); other values unchanged."""
    out: list[Any] = []
    for name, value in zip(names, values):
        if isinstance(value, np.ndarray):
            value = as_tensor(name, value)
            value = value if device is None else value.to(device)
        out.append(value)
    return out


def to_numpy(value: Any) -> Any:
    """A result (tensor, tuple or dict of them) as NumPy, by the convention of the module docstring."""
    if isinstance(value, Tensor):
        value = value.detach().cpu()
        array = value.to(torch.float64 if value.is_floating_point() else torch.int64).numpy()
        return array[()] if array.ndim == 0 else array
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def numpy_io(fn: F) -> F:
    """A functional that takes NumPy arrays anywhere it takes tensors and answers NumPy input in NumPy."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        given = (*args, *kwargs.values())
        if not any(isinstance(v, np.ndarray) for v in given):
            return fn(*args, **kwargs)
        names = tuple(f"argument {i}" for i in range(len(args)))
        args = tuple(tensors_from_numpy(names, args))
        kwargs = dict(zip(kwargs, tensors_from_numpy(tuple(kwargs), tuple(kwargs.values()))))
        return to_numpy(fn(*args, **kwargs))

    return wrapped  # type: ignore[return-value]
