"""Functional pair losses for metric learning (module twins in `embedmetrics.losses`)."""

from __future__ import annotations

import torch
from torch import Tensor

from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.embedding import losses as engine
from embedmetrics._engine.embedding.options import OPTIONS
from embedmetrics._engine.settings.options import read_options

__all__ = ["contrastive_loss"]


def contrastive_loss(
    output1: Tensor,
    output2: Tensor,
    similarity_label: Tensor | float,
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

    Examples:
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
    given = {"margin": margin, "reduction": reduction, "validate_args": validate_args}
    margin_value = read_options("contrastive_loss", OPTIONS["ContrastiveLoss"], given)["margin"]
    engine.check_outputs(output1, output2)
    out_dtype = torch.promote_types(output1.dtype, output2.dtype)
    work = compute_dtype(output1, output2)
    label = engine.label_tensor(similarity_label, output1, work, validate_args)
    loss: Tensor = engine.contrastive_loss_value(
        output1.to(work), output2.to(work), label, margin_value, reduction
    )
    return loss.to(out_dtype)
