"""Functional twins of the embedding family: contrastive accuracy, uniformity, alignment.

Every function accepts torch tensors or NumPy arrays (all arguments of the same kind). NumPy input
gives a NumPy result (``numpy.float64``, or a ``float64`` array for several ``topk``); torch input
gives a tensor on the input's device, in the accumulation dtype (float32 for float16, bfloat16 and
float32 inputs, float64 for float64). Pairwise work runs on the blocked similarity scan: peak extra
memory is about ``block_bytes`` (a few blocks of it), never an ``n x n`` matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch
from torch import Tensor

from embedmetrics._engine import embedding as engine
from embedmetrics._engine.checks import (
    check_choice,
    check_embeddings,
    check_non_negative_number,
    normalize_ks,
    to_tensors,
)
from embedmetrics._engine.embedding import EMBEDDING_BLOCK_BYTES

__all__ = ["alignment_score", "contrastive_accuracy_score", "uniformity_score"]

TopK = Union[int, Sequence[int]]


def _check_pair(z1: Tensor, z2: Tensor) -> None:
    """Both views: 2-D floating point, at least one row, same shape, same device."""
    check_embeddings("z1", z1)
    check_embeddings("z2", z2)
    if z1.shape != z2.shape:
        raise ValueError(
            f"Arguments `z1` and `z2` must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}."
        )
    if z1.device != z2.device:
        raise ValueError(
            f"Arguments `z1` and `z2` must be on the same device, got {z1.device} and {z2.device}."
        )


def _check_eps(eps: Any) -> float:
    value = check_non_negative_number("eps", eps)
    if value == float("inf"):
        raise ValueError(f"Argument `eps` must be finite, got {eps!r}.")
    return value


def _check_normalize(normalize: Any) -> bool:
    if not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"Argument `normalize` must be a bool, got {normalize!r}.")
    return bool(normalize)


def _check_block_bytes(block_bytes: Any) -> int:
    if isinstance(block_bytes, bool) or not isinstance(block_bytes, (int, np.integer)) or block_bytes < 1:
        raise ValueError(f"Argument `block_bytes` must be a positive integer, got {block_bytes!r}.")
    return int(block_bytes)


def _check_finite_non_negative(name: str, value: Any) -> float:
    out = check_non_negative_number(name, value)
    if out == float("inf"):
        raise ValueError(f"Argument `{name}` must be finite, got {value!r}.")
    return out


def _check_alpha(alpha: Any) -> float:
    out = _check_finite_non_negative("alpha", alpha)
    if out == 0:
        raise ValueError(f"Argument `alpha` must be positive, got {alpha!r}.")
    return out


def _check_contrastive_options(
    topk: Any, ties: Any, eps: Any, normalize: Any
) -> tuple[tuple[int, ...], bool]:
    """Validate the options shared by the functional and the module; return the ks and scalar flag."""
    ks, single = normalize_ks("topk", topk, allow_none=False)
    check_choice("ties", ties, engine.TIES)
    _check_eps(eps)
    _check_normalize(normalize)
    return tuple(k for k in ks if k is not None), single


def _output(value: Tensor, numpy: bool, single: bool = True) -> Any:
    """Shape the result: 0-dim (or ``(len(k),)``) tensor, or NumPy float64 scalar / array."""
    if single:
        value = value.reshape(())
    if numpy:
        array = value.detach().cpu().to(torch.float64).numpy()
        return np.float64(array) if single else array
    return value


def contrastive_accuracy_score(
    z1: Any,
    z2: Any,
    normalize: bool = True,
    topk: TopK = 1,
    eps: float = 1e-12,
    ties: str = "average",
    *,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
) -> Any:
    r"""Top-k contrastive accuracy between two views, both directions averaged.

    For each ``i``, ``z1[i]`` queries all rows of ``z2`` and scores a hit when ``z2[i]`` is among
    its ``topk`` most similar rows; symmetrically ``z2[i]`` queries ``z1``. The result is
    :math:`\tfrac12(\mathrm{Acc}_k(z_1 \to z_2) + \mathrm{Acc}_k(z_2 \to z_1))`, with dot-product
    similarity (cosine after the optional L2 normalisation). Both directions come from one pass
    over blocks of the similarity matrix.

    Ties: with ``g`` candidates strictly more similar than the positive and ``t`` tied with it
    (itself included), ``"average"`` scores ``clamp((k - g) / t, 0, 1)``, the expected hit when
    tied rows are ordered at random (collapsed embeddings score exactly ``k / n``);
    ``"pessimistic"`` ranks the positive after its ties (hit iff ``g + t <= k``) and
    ``"optimistic"`` before them (hit iff ``g < k``).

    Args:
        z1: embeddings of the first view, shape ``(n_samples, n_features)``, tensor or array.
        z2: embeddings of the second view, same shape and kind as ``z1``.
        normalize: L2-normalise each row first (cosine similarity).
        topk: the ``k`` of top-k (clipped to ``n_samples``), or a sequence of them, such as
            ``(1, 5, 10)``, all computed from the same pass.
        eps: lower bound of the norm in the normalisation (avoids division by zero).
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"``.
        block_bytes: memory budget of one similarity block, in bytes.

    Returns:
        A 0-dim tensor on the input's device (torch input) or a ``numpy.float64`` (NumPy input);
        for a sequence ``topk``, one value per ``k`` (shape ``(len(topk),)``).

    Raises:
        TypeError: if ``z1`` and ``z2`` are not both tensors or both arrays, or not floating point.
        ValueError: if the shapes differ, are not 2-D or have no rows, or ``topk < 1``, or an
            option is invalid.

    Example:
        >>> import torch
        >>> from embedmetrics.functional import contrastive_accuracy_score
        >>> z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> z2 = torch.tensor([[1.0, 0.1], [0.1, 1.0], [1.0, 0.0]])
        >>> contrastive_accuracy_score(z1, z2)
        tensor(0.5000)
        >>> contrastive_accuracy_score(z1, z2, topk=(1, 2))
        tensor([0.5000, 0.8333])
        >>> contrastive_accuracy_score(z1.numpy(), z2.numpy())
        np.float64(0.5)
    """
    (t1, t2), numpy = to_tensors(("z1", "z2"), z1, z2)
    _check_pair(t1, t2)
    ks, single = _check_contrastive_options(topk, ties, eps, normalize)
    value = engine.contrastive_accuracy(
        t1,
        t2,
        normalize=bool(normalize),
        eps=float(eps),
        ks=ks,
        ties=ties,
        block_bytes=_check_block_bytes(block_bytes),
    )
    return _output(value, numpy, single)


def uniformity_score(
    z: Any,
    normalize: bool = True,
    t: float = 2.0,
    eps: float = 1e-12,
    *,
    block_bytes: int = EMBEDDING_BLOCK_BYTES,
) -> Any:
    r"""Uniformity of an embedding (Wang & Isola, ICML 2020); lower is more uniform.

    .. math::
        U(z) = \log \frac{1}{n(n-1)} \sum_{i \ne j} \exp\left(-t \lVert z_i - z_j \rVert_2^2\right)

    computed as a log-sum-exp over each unordered pair once (blocks of the upper triangle), so it
    stays finite where ``exp(...).mean().log()`` underflows to ``-inf`` (large ``t``, spread-out
    points). Squared distances are the real ones of the (optionally normalised) rows.

    Args:
        z: embeddings, shape ``(n_samples, n_features)`` with ``n_samples >= 2``, tensor or array.
        normalize: L2-normalise each row first (points on the unit hypersphere).
        t: temperature of the Gaussian potential (``t = 2`` in the paper), finite and ``>= 0``.
        eps: lower bound of the norm in the normalisation (avoids division by zero).
        block_bytes: memory budget of one similarity block, in bytes.

    Returns:
        A 0-dim tensor on the input's device (torch input) or a ``numpy.float64`` (NumPy input).
        It carries no gradient: the blocked scan works in place (use it as a metric, not a loss).

    Raises:
        TypeError: if ``z`` is neither a tensor nor an array, or not floating point.
        ValueError: if ``z`` is not 2-D or has fewer than 2 rows (there is no pair), or ``t`` is
            negative or not finite.

    Example:
        >>> import torch
        >>> from embedmetrics.functional import uniformity_score
        >>> z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
        >>> uniformity_score(z)
        tensor(-4.3963)
        >>> uniformity_score(z.numpy(), t=1000.0)  # exp(...).mean().log() gives -inf here
        np.float64(-2000.405...)
    """
    (tz,), numpy = to_tensors(("z",), z)
    check_embeddings("z", tz)
    if tz.shape[0] < 2:
        raise ValueError(
            f"Argument `z` must have at least 2 rows (uniformity averages over pairs i != j), "
            f"got shape {tuple(tz.shape)}."
        )
    value = engine.uniformity(
        tz,
        normalize=_check_normalize(normalize),
        t=_check_finite_non_negative("t", t),
        eps=_check_eps(eps),
        block_bytes=_check_block_bytes(block_bytes),
    )
    return _output(value, numpy)


def alignment_score(
    z1: Any,
    z2: Any,
    normalize: bool = True,
    alpha: float = 2,
    eps: float = 1e-12,
) -> Any:
    r"""Alignment of positive pairs (Wang & Isola, ICML 2020); lower is better.

    .. math::
        A(z_1, z_2) = \frac{1}{n} \sum_i \lVert z_{1,i} - z_{2,i} \rVert_2^\alpha

    Args:
        z1: embeddings of the first view, shape ``(n_samples, n_features)``, tensor or array.
        z2: embeddings of the second view, same shape and kind as ``z1``.
        normalize: L2-normalise each row first.
        alpha: exponent of the distance (``alpha = 2`` in the paper), positive and finite.
        eps: lower bound of the norm in the normalisation (avoids division by zero).

    Returns:
        A 0-dim tensor on the input's device (torch input; differentiable) or a ``numpy.float64``
        (NumPy input).

    Raises:
        TypeError: if ``z1`` and ``z2`` are not both tensors or both arrays, or not floating point.
        ValueError: if the shapes differ, are not 2-D or have no rows, or ``alpha <= 0``.

    Example:
        >>> import torch
        >>> from embedmetrics.functional import alignment_score
        >>> z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> z2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
        >>> alignment_score(z1, z2)
        tensor(1.0000)
        >>> alignment_score(z1, z2, alpha=1)
        tensor(0.7071)
    """
    (t1, t2), numpy = to_tensors(("z1", "z2"), z1, z2)
    _check_pair(t1, t2)
    terms = engine.alignment_terms(
        t1,
        t2,
        normalize=_check_normalize(normalize),
        alpha=_check_alpha(alpha),
        eps=_check_eps(eps),
    )
    return _output(terms.mean(), numpy)
