"""Functional twins of the embedding family: contrastive accuracy, uniformity, alignment.

Every function accepts torch tensors or NumPy arrays (all arguments of the same kind). NumPy input
gives a NumPy result (``numpy.float64``, or a ``float64`` array for several ``topk``); torch input
gives a tensor on the input's device, in the accumulation dtype (float32 for float16, bfloat16 and
float32 inputs, float64 for float64). Pairwise work runs on the blocked similarity scan: peak extra
memory is about ``block_bytes`` (a few blocks of it), never an ``n x n`` matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embedmetrics._engine.core.checks import (
    as_output,
    check_bool,
    check_embeddings,
    check_finite,
    check_paired_embeddings,
    to_tensors,
)
from embedmetrics._engine.embedding import pairs as engine
from embedmetrics._engine.embedding.options import OPTIONS
from embedmetrics._engine.settings.options import read_options

__all__ = ["alignment_score", "contrastive_accuracy_score", "uniformity_score"]


def contrastive_accuracy_score(
    z1: Any,
    z2: Any,
    normalize: bool = True,
    topk: int | Sequence[int] = 1,
    eps: float = 1e-12,
    ties: str = "average",
    *,
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> Any:
    r"""Top-k contrastive accuracy between two views, both directions averaged.

    For each ``i``, ``z1[i]`` queries all rows of ``z2`` and scores a hit when ``z2[i]`` is among
    its ``topk`` most similar rows; symmetrically ``z2[i]`` queries ``z1``. The result is
    $\tfrac12(\mathrm{Acc}_k(z_1 \to z_2) + \mathrm{Acc}_k(z_2 \to z_1))$, with dot-product
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
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it for the
            device (32 MiB on the CPU; on CUDA a quarter of the free memory, at most 4 GiB).
        validate_args: reject NaN and infinite embeddings (``ValueError``); this reads the data (a host
            sync). With ``False`` such inputs give NaN.

    Returns:
        A 0-dim tensor on the input's device (torch input) or a ``numpy.float64`` (NumPy input);
        for a sequence ``topk``, one value per ``k`` (shape ``(len(topk),)``).

    Raises:
        TypeError: if ``z1`` and ``z2`` are not both tensors or both arrays, not floating point, or
            an option has the wrong type.
        ValueError: if the shapes differ, are not 2-D or have no rows, ``topk < 1``, an option is
            invalid, or (``validate_args``) an embedding is NaN or infinite.

    Examples:
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
    given: dict[str, Any] = {"topk": topk, "normalize": normalize, "ties": ties, "eps": eps}
    given.update(block_bytes=block_bytes, validate_args=validate_args)
    read_options("contrastive_accuracy_score", OPTIONS["ContrastiveAccuracy"], given)
    (t1, t2), numpy = to_tensors(("z1", "z2"), z1, z2)
    ks, single = engine.topk_cutoffs(topk)
    check_paired_embeddings(("z1", "z2"), t1, t2, validate_args=validate_args)
    value = engine.contrastive_accuracy(
        t1, t2, normalize=bool(normalize), eps=float(eps), ks=ks, ties=ties, block_bytes=block_bytes
    )
    return as_output(value, numpy, single)


def uniformity_score(
    z: Any,
    normalize: bool = True,
    t: float = 2.0,
    eps: float = 1e-12,
    *,
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> Any:
    r"""Uniformity of an embedding (Wang & Isola, ICML 2020); lower is more uniform.

    $$
    U(z) = \log \frac{1}{n(n-1)} \sum_{i \ne j} \exp\left(-t \lVert z_i - z_j \rVert_2^2\right)
    $$

    computed as a log-sum-exp over each unordered pair once (blocks of the upper triangle), so it
    stays finite where ``exp(...).mean().log()`` underflows to ``-inf`` (large ``t``, spread-out
    points). Squared distances are the real ones of the (optionally normalised) rows.

    Args:
        z: embeddings, shape ``(n_samples, n_features)`` with ``n_samples >= 2``, tensor or array.
        normalize: L2-normalise each row first (points on the unit hypersphere).
        t: temperature of the Gaussian potential (``t = 2`` in the paper), finite and ``>= 0``.
        eps: lower bound of the norm in the normalisation (avoids division by zero).
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it for the
            device (32 MiB on the CPU; on CUDA a quarter of the free memory, at most 4 GiB).
        validate_args: reject NaN and infinite embeddings (``ValueError``); this reads the data (a host
            sync). With ``False`` such inputs give NaN.

    Returns:
        A 0-dim tensor on the input's device (torch input) or a ``numpy.float64`` (NumPy input).
        Repeated rows count at distance exactly 0 (collapsed embeddings score exactly 0).
        It carries no gradient: the blocked scan works in place (use it as a metric, not a loss).

    Raises:
        TypeError: if ``z`` is neither a tensor nor an array, or not floating point.
        ValueError: if ``z`` is not 2-D or has fewer than 2 rows (there is no pair), ``t`` is
            negative or not finite, or (``validate_args``) an embedding is NaN or infinite.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import uniformity_score
        >>> z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
        >>> uniformity_score(z)
        tensor(-4.3963)
        >>> uniformity_score(z.numpy(), t=1000.0)  # exp(...).mean().log() gives -inf here
        np.float64(-2000.405...)
    """
    given = {"t": t, "normalize": normalize, "eps": eps, "validate_args": validate_args}
    options = read_options("uniformity_score", OPTIONS["Uniformity"], {**given, "block_bytes": block_bytes})
    block_bytes = options.pop("block_bytes")
    del options["validate_args"]
    (tz,), numpy = to_tensors(("z",), z)
    check_embeddings("z", tz)
    if tz.shape[0] < 2:
        raise ValueError(
            f"Argument `z` must have at least 2 rows (uniformity averages over pairs i != j), "
            f"got shape {tuple(tz.shape)}."
        )
    if check_bool("validate_args", validate_args):
        check_finite("z", tz)
    value = engine.uniformity(tz, **options, block_bytes=block_bytes)
    return as_output(value, numpy)


def alignment_score(
    z1: Any,
    z2: Any,
    normalize: bool = True,
    alpha: float = 2,
    eps: float = 1e-12,
    *,
    validate_args: bool = True,
) -> Any:
    r"""Alignment of positive pairs (Wang & Isola, ICML 2020); lower is better.

    $$
    A(z_1, z_2) = \frac{1}{n} \sum_i \lVert z_{1,i} - z_{2,i} \rVert_2^\alpha
    $$

    Args:
        z1: embeddings of the first view, shape ``(n_samples, n_features)``, tensor or array.
        z2: embeddings of the second view, same shape and kind as ``z1``.
        normalize: L2-normalise each row first.
        alpha: exponent of the distance (``alpha = 2`` in the paper), positive and finite.
        eps: lower bound of the norm in the normalisation (avoids division by zero).
        validate_args: reject NaN and infinite embeddings (``ValueError``); this reads the data (a host
            sync). With ``False`` such inputs give NaN.

    Returns:
        A 0-dim tensor on the input's device (torch input; differentiable) or a ``numpy.float64``
        (NumPy input).

    Raises:
        TypeError: if ``z1`` and ``z2`` are not both tensors or both arrays, or not floating point.
        ValueError: if the shapes differ, are not 2-D or have no rows, ``alpha <= 0``, or
            (``validate_args``) an embedding is NaN or infinite.

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import alignment_score
        >>> z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> z2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
        >>> alignment_score(z1, z2)
        tensor(1.0000)
        >>> alignment_score(z1, z2, alpha=1)
        tensor(0.7071)
    """
    options = read_options(
        "alignment_score", OPTIONS["Alignment"], {"alpha": alpha, "normalize": normalize, "eps": eps}
    )
    del options["validate_args"]
    (t1, t2), numpy = to_tensors(("z1", "z2"), z1, z2)
    check_paired_embeddings(("z1", "z2"), t1, t2, validate_args=validate_args)
    terms = engine.alignment_terms(t1, t2, **options)
    return as_output(terms.mean(), numpy)
