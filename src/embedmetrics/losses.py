"""Pair losses for metric learning as `nn.Module`s (functional twins in `embedmetrics.functional`)."""

from __future__ import annotations

from torch import Tensor, nn

from embedmetrics._engine.embedding.options import OPTIONS
from embedmetrics._engine.settings.options import read_options
from embedmetrics.functional.losses import contrastive_loss

__all__ = ["ContrastiveLoss"]


class ContrastiveLoss(nn.Module):
    """Contrastive loss for Siamese training: pull similar pairs together, push dissimilar ones apart.

    For a pair with Euclidean distance ``d = ‖o1 − o2‖₂`` and label ``y`` (1 = similar, 0 = dissimilar,
    values in between are soft labels):

        loss = y·d² + (1 − y)·max(0, margin − d)²

    The forward pass calls ``embedmetrics.functional.contrastive_loss``; see it for shapes, dtypes,
    the subgradient at ``d = 0`` (0) and the errors raised. Gradients come from autograd.

    Args:
        margin: The distance beyond which a dissimilar pair costs nothing; a finite number ``>= 0``.
        reduction: ``"mean"`` (over pairs), ``"sum"`` or ``"none"`` (one loss per pair).
        validate_args: Check that tensor labels lie in ``[0, 1]`` on every call (a device-to-host
            sync); ``False`` skips it. Shapes are always checked.

    Raises:
        ValueError: If ``margin`` is negative or not finite, or ``reduction`` is unknown.

    Examples:
        >>> import torch
        >>> from embedmetrics import ContrastiveLoss
        >>> loss_fn = ContrastiveLoss(margin=2.0)
        >>> a = torch.tensor([[0.0, 0.0], [0.0, 0.0]], requires_grad=True)
        >>> b = torch.tensor([[0.6, 0.8], [0.6, 0.8]])  # both pairs at distance d = 1
        >>> loss = loss_fn(a, b, torch.tensor([1.0, 0.0]))  # (1² + (2 - 1)²) / 2
        >>> loss
        tensor(1., grad_fn=<...>)
        >>> loss.backward()
        >>> a.grad  # (2y·(a - b) - 2(1 - y)·(m - d)·(a - b)/d) / B
        tensor([[-0.6000, -0.8000],
                [ 0.6000,  0.8000]])
    """

    def __init__(self, margin: float = 1.0, reduction: str = "mean", validate_args: bool = True) -> None:
        super().__init__()
        values = read_options(type(self).__name__, OPTIONS[type(self).__name__], {
            "margin": margin, "reduction": reduction, "validate_args": validate_args,
        })  # fmt: skip
        self.margin, self.reduction, self.validate_args = (
            values["margin"],
            values["reduction"],
            values["validate_args"],
        )

    def forward(self, output1: Tensor, output2: Tensor, similarity_label: Tensor | float) -> Tensor:
        """Loss of the pairs ``(output1[i], output2[i])`` with labels ``similarity_label[i]``.

        Args:
            output1: ``(D,)`` for one pair or ``(B, D)`` for a batch.
            output2: Same shape as ``output1``.
            similarity_label: A number or 0-dim tensor for one pair, a ``(B,)`` tensor for a batch.

        Returns:
            The reduced loss (0-dim), or per-pair losses with ``reduction="none"``.
        """
        return contrastive_loss(
            output1,
            output2,
            similarity_label,
            margin=self.margin,
            reduction=self.reduction,
            validate_args=self.validate_args,
        )

    def extra_repr(self) -> str:
        return f"margin={self.margin}, reduction={self.reduction!r}"
