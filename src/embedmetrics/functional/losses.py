"""Functional pair losses for metric learning (module twins in `embedmetrics.losses`)."""

from __future__ import annotations

import numbers
from typing import Union

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine.checks import check_bool, check_choice, check_number
from embedmetrics._engine.scan import compute_dtype

__all__ = ["contrastive_loss"]

#: What ``similarity_label`` may be: a tensor (bool, integer or floating point) or a Python number.
LabelLike = Union[Tensor, bool, int, float]

_REDUCTIONS = ("mean", "sum", "none")


def _check_margin(margin: float) -> float:
    """Return ``margin`` as a float if it is a finite real number >= 0, else raise."""
    return check_number("margin", margin)


def _check_outputs(output1: Tensor, output2: Tensor) -> None:
    """Shape and dtype checks on the two outputs (metadata only: no host sync)."""
    for name, out in (("output1", output1), ("output2", output2)):
        if not isinstance(out, Tensor):
            raise TypeError(f"Argument `{name}` must be a torch.Tensor, got {type(out).__name__}.")
        if not out.is_floating_point():
            raise TypeError(f"Argument `{name}` must be a floating-point tensor, got dtype {out.dtype}.")
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


def _label_tensor(label: LabelLike, output1: Tensor, dtype: torch.dtype, validate_args: bool) -> Tensor:
    """Check ``similarity_label`` against the outputs' shape and return it as a ``dtype`` tensor.

    The range check on a tensor label needs a device-to-host sync, so it only runs when
    ``validate_args`` is true; a Python number is always checked (that costs nothing).
    """
    batched = output1.ndim == 2
    if isinstance(label, Tensor):
        if label.is_complex():
            raise TypeError(
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
    raise TypeError(f"Argument `similarity_label` must be a tensor or a number, got {type(label).__name__}.")


def _safe_norm(sq_dist: Tensor) -> Tensor:
    """``sqrt(sq_dist)`` whose gradient at ``sq_dist == 0`` is exactly 0 instead of ``inf``/NaN.

    The double ``where`` keeps the unused branch finite: ``sqrt`` only ever sees a strictly positive
    argument, and where ``sq_dist == 0`` the result is the constant 0, whose gradient is 0.
    """
    positive = sq_dist > 0
    root = torch.sqrt(torch.where(positive, sq_dist, torch.ones_like(sq_dist)))
    return torch.where(positive, root, torch.zeros_like(sq_dist))


def _contrastive_loss_compute(
    output1: Tensor, output2: Tensor, label: Tensor, margin: float, reduction: str
) -> Tensor:
    """Per-pair contrastive loss, reduced; inputs already validated and in the compute dtype."""
    diff = output1 - output2
    sq_dist = (diff * diff).sum(dim=-1)  # d² straight from the squares: exact similar term, no sqrt
    dist = _safe_norm(sq_dist)
    hinge = torch.clamp(margin - dist, min=0)
    loss = label * sq_dist + (1 - label) * hinge * hinge
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def contrastive_loss(
    output1: Tensor,
    output2: Tensor,
    similarity_label: LabelLike,
    margin: float = 1.0,
    reduction: str = "mean",
    validate_args: bool = True,
) -> Tensor:
    """Contrastive loss (Hadsell, Chopra & LeCun, 2006) between pairs of embeddings.

    For a pair with Euclidean distance ``d = ‖o1 − o2‖₂`` and label ``y`` (1 = similar, 0 = dissimilar,
    values in between are soft labels):

        loss = y·d² + (1 − y)·max(0, margin − d)²

    Similar pairs are pulled together; dissimilar pairs are pushed apart until they are at least
    ``margin`` away, after which they cost nothing. The similar term uses ``d²`` as a sum of squares
    (no square root). Gradients come from autograd and equal the closed form
    ``∂loss/∂o1 = 2y·(o1 − o2) − 2(1 − y)·max(0, margin − d)·(o1 − o2)/d`` (the negative for ``o2``).
    At ``d = 0`` the loss is ``(1 − y)·margin²`` and the gradient is exactly 0 (for the hinge term
    that is the minimum-norm subgradient), so it is never NaN.

    Half-precision inputs (float16, bfloat16) are computed in float32 and the result is cast back to
    the input dtype; float64 stays float64.

    Args:
        output1: First embeddings: ``(D,)`` for one pair or ``(B, D)`` for a batch of pairs.
        output2: Second embeddings, same shape as ``output1``.
        similarity_label: For one pair a 0-dim tensor or a Python number; for a batch a ``(B,)``
            tensor. Bool, integer or floating-point, with values in ``[0, 1]``.
        margin: The distance beyond which a dissimilar pair costs nothing; a finite number ``>= 0``.
        reduction: ``"mean"`` (over pairs), ``"sum"`` or ``"none"`` (one loss per pair, shape ``(B,)``,
            or 0-dim for one pair). ``"mean"`` of an empty batch is NaN, as for PyTorch's own losses.
        validate_args: Check that tensor labels lie in ``[0, 1]``. The check needs a device-to-host
            sync; pass ``False`` to skip it in a hot loop. Shape, dtype, margin and reduction are
            always checked (they cost nothing).

    Returns:
        The loss, in the (promoted) dtype of the outputs.

    Raises:
        ValueError: If the outputs' shapes differ or are not ``(D,)``/``(B, D)``, if the label's shape
            does not match (one label per pair), if a label lies outside ``[0, 1]``, if ``margin`` is
            negative or not finite, or if ``reduction`` is unknown.
        TypeError: If an output is not a floating-point tensor, or the label is not a bool, integer or
            floating-point tensor or number.

    Example:
        >>> import torch
        >>> from embedmetrics.functional import contrastive_loss
        >>> a = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
        >>> b = torch.tensor([[3.0, 4.0], [0.6, 0.0], [1.0, 1.0]])
        >>> y = torch.tensor([1, 0, 0])
        >>> contrastive_loss(a, b, y, margin=1.0, reduction="none")  # 5², (1 - 0.6)², (1 - 0)²
        tensor([25.0000,  0.1600,  1.0000])
        >>> contrastive_loss(a, b, y)
        tensor(8.7200)
        >>> contrastive_loss(torch.tensor([0.0, 0.0]), torch.tensor([0.0, 2.0]), 0, margin=3.0)
        tensor(1.)
    """
    check_choice("reduction", reduction, _REDUCTIONS)
    margin_value = _check_margin(margin)
    check_bool("validate_args", validate_args)
    _check_outputs(output1, output2)
    out_dtype = torch.promote_types(output1.dtype, output2.dtype)
    work = compute_dtype(output1, output2)
    label = _label_tensor(similarity_label, output1, work, validate_args)
    loss = _contrastive_loss_compute(output1.to(work), output2.to(work), label, margin_value, reduction)
    return loss.to(out_dtype)
