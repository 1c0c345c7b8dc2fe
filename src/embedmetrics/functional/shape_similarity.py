r"""Functional shape similarity of two representations: nidl's Procrustes and Kruskal metrics.

Drop-in twins of ``nidl.metrics.procrustes_similarity``, ``procrustes_r2`` and ``kruskal_similarity``
with nidl's input rules: torch tensors or NumPy arrays, mixed if need be (``y`` follows ``x``'s device);
the result is a 0-dim tensor when both inputs are tensors, else a 0-dim NumPy array, in ``x``'s
floating-point dtype (float64 for integer ``x``). The arithmetic is float64 whatever the inputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import (
    ArgumentKindError,
    as_tensor,
    check_finite,
    check_row_pair,
)
from embedmetrics._engine.embedding import shape_similarity as engine
from embedmetrics._engine.embedding.options import OPTIONS
from embedmetrics._engine.settings.options import read_options

__all__ = ["kruskal_similarity", "procrustes_r2", "procrustes_similarity"]


def _inputs(
    owner: str, x: Any, y: Any, validate_args: bool, **options: Any
) -> tuple[Tensor, Tensor, bool, torch.dtype]:
    """The checked matrices (and the options of ``owner``'s table: ``embedding.options``)."""
    read_options(owner, OPTIONS[owner], {"validate_args": validate_args, **options})
    numpy = not (isinstance(x, Tensor) and isinstance(y, Tensor))
    a, b = as_tensor("X", x), as_tensor("Y", y)
    b = b.to(a.device)
    for name, t in (("X", a), ("Y", b)):
        if t.is_complex():
            raise ArgumentKindError(f"Argument `{name}` must hold real numbers, got dtype {t.dtype}.")
        if t.ndim != 2:
            raise ValueError(
                f"Argument `{name}` must be 2-D (n_samples, n_features), got shape {tuple(t.shape)}."
            )
    check_row_pair(("X", "Y"), a, b)
    if validate_args:
        check_finite("X", a)
        check_finite("Y", b)
    return a, b, numpy, a.dtype if a.is_floating_point() else torch.float64


def _output(value: Tensor, numpy: bool, dtype: torch.dtype) -> Any:
    value = value.detach().to(dtype)  # an evaluation metric: never attached to the autograd graph
    return value.cpu().numpy() if numpy else value


def procrustes_similarity(X: Any, Y: Any, *, validate_args: bool = True) -> Any:
    r"""Procrustes similarity, invariant to translation, orthogonal transforms and global scale.

    The Frobenius cosine between ``Y`` and its least-squares fit ``sXΩ + b`` (``Ω`` orthogonal):

    $$
    \frac{\lVert \tilde X^\top \tilde Y \rVert_*}{\lVert \tilde X \rVert_F \, \lVert \tilde Y \rVert_F}
    $$

    with ``X̃``, ``Ỹ`` column-centred and ``‖·‖_*`` the nuclear norm, clamped to ``[0, 1]``; 0 when
    either side is constant (nidl's convention). Widths may differ; zero columns change nothing.

    Args:
        X: ``(n_samples, d1)`` tensor or array.
        Y: ``(n_samples, d2)`` tensor or array.
        validate_args: reject NaN and infinite values (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import procrustes_similarity
        >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]], dtype=torch.float64)
        >>> rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
        >>> procrustes_similarity(x, 5 * x @ rotation + 1)
        tensor(1., dtype=torch.float64)
    """
    a, b, numpy, dtype = _inputs("procrustes_similarity", X, Y, validate_args)
    return _output(engine.procrustes_similarity(a, b), numpy, dtype)


def procrustes_r2(X: Any, Y: Any, *, validate_args: bool = True) -> Any:
    r"""Procrustes R² when scale matters: how well ``XΩ + b`` (``Ω`` orthogonal) fits ``Y``.

    ``1 − Σᵢ‖Ỹᵢ − (X̃Ω)ᵢ‖ / Σᵢ‖Ỹᵢ‖`` with ``Ω = UVᵀ`` from the SVD of ``X̃ᵀỸ`` and the row norms not
    squared, exactly as nidl defines it; in ``(−∞, 1]``, 1 when ``Y`` is ``X`` up to translation and an
    orthogonal transform, 0 when ``Y`` is constant. Not symmetric.

    Args:
        X: ``(n_samples, d1)`` tensor or array.
        Y: ``(n_samples, d2)`` tensor or array.
        validate_args: reject NaN and infinite values (``ValueError``; reads the data).

    Examples:
        >>> import numpy as np
        >>> from embedmetrics.functional import procrustes_r2
        >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
        >>> float(procrustes_r2(x, x[:, ::-1] + 7))  # a reflection and a shift
        1.0
        >>> float(procrustes_r2(x, 2 * x))  # scale matters
        0.5
    """
    a, b, numpy, dtype = _inputs("procrustes_r2", X, Y, validate_args)
    return _output(engine.procrustes_r2(a, b), numpy, dtype)


def kruskal_similarity(X: Any, Y: Any, spherical: bool = False, *, validate_args: bool = True) -> Any:
    r"""Kruskal similarity: how well the pairwise distances of ``X`` match those of ``Y``.

    ``1 − ‖d_X − d_Y‖ / ‖d_Y − mean(d_Y)‖`` over the pairs ``i < j``, ``d`` the Euclidean distances
    (``spherical=False``) or the cosine similarities (``spherical=True``), as nidl defines it; 1 when
    ``X`` and ``Y`` are isometric (after normalisation with ``spherical``). Computed over blocks of rows:
    no ``n × n`` matrix. NaN with fewer than two samples. Not symmetric.

    Args:
        X: ``(n_samples, d1)`` tensor or array.
        Y: ``(n_samples, d2)`` tensor or array.
        spherical: compare cosine similarities instead of Euclidean distances.
        validate_args: reject NaN and infinite values (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import kruskal_similarity
        >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
        >>> kruskal_similarity(x, x.flip(1) - 4)
        tensor(1.)
        >>> kruskal_similarity(x, 3 * x, spherical=True)
        tensor(1.)
    """
    a, b, numpy, dtype = _inputs("kruskal_similarity", X, Y, validate_args, spherical=spherical)
    return _output(engine.kruskal_similarity(a, b, bool(spherical)), numpy, dtype)
