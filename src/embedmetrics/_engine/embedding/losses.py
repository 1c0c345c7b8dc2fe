"""Pair losses (the engine of ``embedmetrics.losses`` and ``embedmetrics.functional.losses``).

The options are checked by their table (``embedding.options``); ``check_outputs`` and
``label_tensor`` check the inputs, and ``contrastive_loss_value`` computes the loss.
"""

from __future__ import annotations

import numbers
from typing import Union

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.core.checks import ArgumentKindError

#: What ``similarity_label`` may be: a tensor (bool, integer or floating point) or a Python number.
LabelLike = Union[Tensor, bool, int, float]


def check_outputs(output1: Tensor, output2: Tensor) -> None:
    """Shape and dtype checks on the two outputs (metadata only: no host sync)."""
    for name, out in (("output1", output1), ("output2", output2)):
        if not isinstance(out, Tensor):
            raise ArgumentKindError(f"Argument `{name}` must be a torch.Tensor, got {type(out).__name__}.")
        if not out.is_floating_point():
            raise ArgumentKindError(
                f"Argument `{name}` must be a floating-point tensor, got dtype {out.dtype}."
            )
        if out.ndim not in (1, 2):
            raise ValueError(
                f"Argument `{name}` must be 1-D (D,) for one pair or 2-D (B, D) for a batch of pairs,"
                f" got shape {tuple(out.shape)}."
            )
    if output1.shape != output2.shape:
        raise ValueError(
            f"Arguments `output1` and `output2` must have the same shape,"
            f" got {tuple(output1.shape)} and {tuple(output2.shape)}."
        )
    if output1.device != output2.device:
        raise ValueError(
            f"Arguments `output1` and `output2` must be on the same device,"
            f" got {output1.device} and {output2.device}."
        )


def label_tensor(label: LabelLike, output1: Tensor, dtype: torch.dtype, validate_args: bool) -> Tensor:
    """Check ``similarity_label`` against the outputs' shape and return it as a ``dtype`` tensor.

    The range check on a tensor label needs a device-to-host sync, so it only runs when
    ``validate_args`` is true; a Python number is always checked (that costs nothing).
    """
    batched = output1.ndim == 2
    if isinstance(label, Tensor):
        if label.is_complex():
            raise ArgumentKindError(
                f"Argument `similarity_label` must be a bool, integer or floating-point tensor,"
                f" got dtype {label.dtype}."
            )
        expected = (output1.shape[0],) if batched else ()
        if tuple(label.shape) != expected:
            what = f"shape ({output1.shape[0]},), one label per pair" if batched else "a 0-dim tensor"
            raise ValueError(
                f"Argument `similarity_label` must be {what} (outputs have shape {tuple(output1.shape)}),"
                f" got shape {tuple(label.shape)}."
            )
        if validate_args and label.dtype != torch.bool:
            outside = ~((label >= 0) & (label <= 1))  # also catches NaN
            if bool(outside.any()):
                bad = label[outside].flatten()[0].item()
                raise ValueError(
                    f"Argument `similarity_label` must lie in [0, 1] (1 = similar, 0 = dissimilar),"
                    f" got a value of {bad!r}."
                )
        return label.to(device=output1.device, dtype=dtype)
    if isinstance(label, (numbers.Real, np.bool_)):  # Python and NumPy bools, ints and floats
        if batched:
            raise ValueError(
                f"Argument `similarity_label` must be a tensor of shape ({output1.shape[0]},) for a batch"
                f" of pairs (outputs have shape {tuple(output1.shape)}), got the number {label!r}."
            )
        if not 0 <= float(label) <= 1:  # also rejects NaN
            raise ValueError(
                f"Argument `similarity_label` must lie in [0, 1] (1 = similar, 0 = dissimilar),"
                f" got {label!r}."
            )
        return torch.tensor(float(label), dtype=dtype, device=output1.device)
    raise ArgumentKindError(
        f"Argument `similarity_label` must be a tensor or a number, got {type(label).__name__}."
    )


def safe_norm(sq_dist: Tensor) -> Tensor:
    """``sqrt(sq_dist)`` whose gradient at ``sq_dist == 0`` is exactly 0 instead of ``inf``/NaN.

    The double ``where`` keeps the unused branch finite: ``sqrt`` only ever sees a strictly positive
    argument, and where ``sq_dist == 0`` the result is the constant 0, whose gradient is 0.
    """
    positive = sq_dist > 0
    root = torch.sqrt(torch.where(positive, sq_dist, torch.ones_like(sq_dist)))
    return torch.where(positive, root, torch.zeros_like(sq_dist))


def contrastive_loss_value(
    output1: Tensor, output2: Tensor, label: Tensor, margin: float, reduction: str
) -> Tensor:
    """Per-pair contrastive loss, reduced; inputs already validated and in the compute dtype."""
    diff = output1 - output2
    sq_dist = (diff * diff).sum(dim=-1)  # d² straight from the squares: exact similar term, no sqrt
    dist = safe_norm(sq_dist)
    hinge = torch.clamp(margin - dist, min=0)
    loss = label * sq_dist + (1 - label) * hinge * hinge
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss
