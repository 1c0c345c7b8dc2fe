"""What the metrics take: the one array convention and the one batch validator.

**Arrays.** NumPy arrays are accepted wherever tensors are (every metric family, module and functional
alike), and a functional given NumPy input returns NumPy output (float values as float64, integer values
as int64, 0-dim values as NumPy scalars): :func:`numpy_io`, :func:`tensors_from_numpy`.

**Batches.** A :class:`BatchSpec` names the arguments of a module metric's ``update`` (embeddings,
labels, ids), how they relate (the same shape, the same rows) and the roles a batch may take
(``role="query"``). :func:`read_batch` binds a call's positional and keyword arguments to those names,
turns NumPy arrays into tensors on the metric's device, checks kinds and shapes (always; no host sync)
and values (NaN, infinities) with ``validate_args``, and returns the batch as named tensors. It reads no
state: checks against the accumulated state (widths, dtypes, ids seen before) are the metric's, on top.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import (
    ArgumentKindError,
    as_tensor,
    check_choice,
    check_class_labels,
    check_embeddings,
    check_finite,
    check_ids,
    check_labels,
    check_row_pair,
    check_same_shape,
)

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
        converted = [to_numpy(v) for v in value]
        return type(value)(*converted) if hasattr(value, "_fields") else tuple(converted)  # NamedTuples kept
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: to_numpy(getattr(value, f.name)) for f in dataclasses.fields(value)}
        )
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def numpy_io(fn: F) -> F:
    """A functional that takes NumPy arrays anywhere it takes tensors and answers NumPy input in NumPy."""

    positional = tuple(inspect.signature(fn).parameters)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        given = (*args, *kwargs.values())
        if not any(isinstance(v, np.ndarray) for v in given):
            return fn(*args, **kwargs)
        args = tuple(tensors_from_numpy(positional[: len(args)], args))
        kwargs = dict(zip(kwargs, tensors_from_numpy(tuple(kwargs), tuple(kwargs.values()))))
        return to_numpy(fn(*args, **kwargs))

    return wrapped  # type: ignore[return-value]


#: The kinds of ``update`` arguments: rows of embeddings and what belongs to them, or a ranking's
#: scores, relevance and query ids (any equal shapes; checked as a whole by the spec's ``rule``).
KINDS = ("embeddings", "class_labels", "labels", "ids", "scores", "relevance", "query_ids")
_WHOLE_BATCH_KINDS = ("scores", "relevance", "query_ids")


@dataclass(frozen=True)
class Arg:
    """One argument of ``update``: its name, its kind (:data:`KINDS`), and its relation to another."""

    name: str
    kind: str = "embeddings"
    same_shape_as: Optional[str] = None
    rows_of: Optional[str] = None
    optional: bool = False  # may be left out or ``None``


@dataclass(frozen=True)
class BatchSpec:
    """The arguments of a metric's ``update``; ``roles``: the values of its ``role`` keyword (the first
    is the default), empty when it has none; ``allow_empty``: a batch without rows is taken (a no-op);
    ``rule``: a check of the whole batch, ``rule(batch, validate_args=..., **context)``, with the
    metric's ``context`` (its settings that a batch must fit)."""

    args: tuple[Arg, ...]
    roles: tuple[str, ...] = ()
    allow_empty: bool = False
    rule: Optional[Callable[..., None]] = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args) + (("role",) if self.roles else ())


def bind(spec: BatchSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name (``ArgumentKindError`` for a missing, repeated or unknown one)."""
    names = spec.names
    values = dict(zip(names, args))
    unknown = sorted(set(kwargs) - set(names))
    twice = sorted(set(values) & set(kwargs))
    values.update({n: kwargs[n] for n in names if n in kwargs})
    values.update({a.name: None for a in spec.args if a.optional and a.name not in values})
    missing = [a.name for a in spec.args if a.name not in values]
    if len(args) > len(names) or unknown or twice or missing:
        raise ArgumentKindError(
            f"`update` takes {', '.join(f'`{n}`' for n in names)}; got {len(args)} positional argument(s)"
            + (f", unexpected keyword argument(s) {unknown}" if unknown else "")
            + (f", {twice} given twice" if twice else "")
            + (f", missing {missing}" if missing else "")
            + "."
        )
    if spec.roles:
        values.setdefault("role", spec.roles[0])
        check_choice("role", values["role"], spec.roles)
    return values


def read_batch(
    spec: BatchSpec,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    device: torch.device,
    validate_args: bool,
    context: Optional[dict[str, Any]] = None,
) -> tuple[dict[str, Any], Optional[str]]:
    """The batch as named tensors (``None`` for an optional argument left out) and its role (see the
    module docstring); touches no state."""
    values = bind(spec, args, kwargs)
    role = values.pop("role", None)
    names = tuple(values)
    tensors = dict(zip(names, tensors_from_numpy(names, tuple(values.values()), device)))
    for a in spec.args:
        if a.kind not in _WHOLE_BATCH_KINDS and not (a.optional and tensors[a.name] is None):
            tensors[a.name] = _checked(a, tensors[a.name], tensors, spec.allow_empty)
    if spec.rule is not None:
        spec.rule(tensors, validate_args=validate_args, **(context or {}))
    if validate_args:
        for a in spec.args:
            if a.kind == "embeddings":
                check_finite(a.name, tensors[a.name])
    return tensors, None if role is None else str(role)


def _checked(arg: Arg, value: Any, batch: dict[str, Any], allow_empty: bool) -> Tensor:
    t = as_tensor(arg.name, value)
    if arg.kind == "embeddings":
        check_embeddings(arg.name, t, allow_empty=allow_empty)
    rows = batch[arg.rows_of].shape[0] if arg.rows_of else None
    if arg.kind == "class_labels":
        t = check_class_labels(arg.name, t, batch[str(arg.rows_of)])
    elif arg.kind == "labels":
        check_labels(arg.name, t, int(rows or 0), str(arg.rows_of))
        if t.is_floating_point():
            raise ArgumentKindError(f"Argument `{arg.name}` must be an integer tensor, got dtype {t.dtype}.")
    elif arg.kind == "ids":
        t = check_ids(arg.name, t, int(rows or 0))
    if arg.same_shape_as is not None:
        other = batch[arg.same_shape_as]
        check_same_shape((arg.same_shape_as, arg.name), other, t)
        if t.dtype != other.dtype:
            raise ArgumentKindError(
                f"Arguments `{arg.same_shape_as}` and `{arg.name}` must have the same dtype, "
                f"got {other.dtype} and {t.dtype}."
            )
    if arg.kind == "embeddings" and arg.rows_of is not None:
        check_row_pair((arg.rows_of, arg.name), batch[arg.rows_of], t)
    return t.to(batch[arg.rows_of].device) if arg.rows_of and arg.kind != "embeddings" else t
