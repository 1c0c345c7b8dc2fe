r"""Functional twins of representation health: RankMe, α-ReQ, LiDAR, linear CKA, weighted k-NN accuracy.

Every function takes torch tensors or NumPy arrays (all arguments of the same kind) and returns the
same kind: a 0-dim tensor on the input's device (float64 for float64 input, float32 otherwise), or a
``numpy.float64``; ``knn_accuracy`` with a sequence ``top`` returns one value per entry. The
spectral metrics and CKA are computed from the same float64 sufficient statistics the module
metrics accumulate (``embedmetrics._engine.spectral.moments``), so a module fed in batches and the
function on the stacked rows agree.

Undefined values are NaN, not errors: RankMe of an all-zero matrix is 0 (rank 0), α-ReQ needs two
nonzero eigenvalues in ``fit_range``, LiDAR two classes and a class with two rows, CKA two
non-constant representations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from torch import Tensor

from embedmetrics._engine.core.checks import (
    as_output,
    check_class_labels,
    check_embedding_rows,
    check_row_pair,
    to_tensors,
)
from embedmetrics._engine.core.scan import compute_dtype
from embedmetrics._engine.neighbors.vote import knn_vote_hits
from embedmetrics._engine.neighbors.vote_stream import VoteStream, fold_bank_chunk, stream_hits
from embedmetrics._engine.settings.options import read_options
from embedmetrics._engine.spectral import moments as spectral
from embedmetrics._engine.spectral.options import (
    ALPHA_FIT_RANGE,
    LIDAR_DELTA,
    LIDAR_EPS,
    OPTIONS,
    RANKME_EPS,
    KnnOptions,
    knn_options,
)

__all__ = ["alpha_req", "knn_accuracy", "lidar", "linear_cka", "rankme"]


def _embeddings(
    names: tuple[str, ...], arrays: tuple[Any, ...], validate_args: bool
) -> tuple[list[Tensor], bool]:
    tensors, numpy = to_tensors(names, *arrays)
    check_embedding_rows(names, tensors, validate_args=validate_args)
    return tensors, numpy


def _finish(value: Tensor, like: list[Tensor], numpy: bool) -> Any:
    return as_output(value.to(compute_dtype(*like)), numpy)


def rankme(z: Any, *, center: bool = False, eps: float = RANKME_EPS, validate_args: bool = True) -> Any:
    r"""RankMe (Garrido et al., "RankMe: Assessing the downstream performance of pretrained
    self-supervised representations by their rank", ICML 2023); higher is better.

    $$
    \mathrm{RankMe}(Z) = \exp\Big(-\sum_k p_k \log p_k\Big), \quad
    p_k = \frac{\sigma_k(Z)}{\lVert \sigma(Z) \rVert_1} + \epsilon
    $$

    over the ``min(n, d)`` singular values of the ``(n, d)`` embedding matrix, uncentred as in the
    paper. They are the square roots of the eigenvalues of ``ZᵀZ`` (float64), the statistic the
    module metric sums over batches. A rank-``r`` embedding scores about ``r``.

    Args:
        z: embeddings ``(n_samples, n_features)``, tensor or array.
        center: subtract the mean row first.
        eps: ``ε`` (the paper's ``1e-7``).
        validate_args: reject NaN and infinite embeddings (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import rankme
        >>> rankme(torch.eye(4))
        tensor(4.0000)
        >>> rankme(torch.ones(5, 3))  # collapsed: rank 1
        tensor(1.0000)
    """
    opts = read_options("rankme", OPTIONS["RankMe"], {"center": center, "eps": eps})
    (t,), numpy = _embeddings(("z",), (z,), validate_args)
    value = spectral.rankme(spectral.moments(t), center=opts["center"], eps=opts["eps"])
    return _finish(value, [t], numpy)


def alpha_req(z: Any, *, fit_range: tuple[int, int] = ALPHA_FIT_RANGE, validate_args: bool = True) -> Any:
    r"""α-ReQ (Agrawal et al., "α-ReQ: Assessing representation quality in self-supervised learning by
    measuring eigenspectrum decay", NeurIPS 2022).

    The eigenvalues ``λ_1 >= λ_2 >= ...`` of the covariance of the rows are fitted by a power law
    ``λ_i ∝ i^(−α)``: least squares of ``log λ_i`` on ``log i`` with weights ``1 / i`` (the authors'
    fit), over the ranks ``fit_range`` (1-based, inclusive; the default 6 to 100 is the authors'
    ``np.arange(5, 100)``), clipped to the eigenvalues that exist and are nonzero (above
    ``d · 2⁻⁵² · λ_1``). NaN with fewer than two of them.

    Args:
        z: embeddings ``(n_samples, n_features)``, tensor or array.
        fit_range: ``(first, last)`` rank of the fit.
        validate_args: reject NaN and infinite embeddings (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import alpha_req
        >>> gen = torch.Generator().manual_seed(0)
        >>> z = torch.randn(20000, 64, generator=gen, dtype=torch.float64) * torch.arange(1, 65) ** -1.0
        >>> round(float(alpha_req(z, fit_range=(2, 60))), 1)  # eigenvalues ~ i^-2
        2.0
    """
    opts = read_options("alpha_req", OPTIONS["AlphaReQ"], {"fit_range": fit_range})
    (t,), numpy = _embeddings(("z",), (z,), validate_args)
    value = spectral.alpha_req(spectral.moments(t), fit_range=opts["fit_range"])
    return _finish(value, [t], numpy)


def lidar(
    z: Any,
    labels: Any,
    *,
    delta: float = LIDAR_DELTA,
    eps: float = LIDAR_EPS,
    validate_args: bool = True,
) -> Any:
    r"""LiDAR (Thilak et al., "LiDAR: Sensing linear probing performance in joint embedding SSL
    architectures", ICLR 2024); higher is better.

    ``labels`` name the surrogate class of each row: the source sample it is an augmentation of.
    With class means ``μ_c``, their mean ``μ``, ``C`` classes and ``N`` rows,

    $$
    \Sigma_b = \frac{1}{C-1}\sum_c (\mu_c-\mu)(\mu_c-\mu)^\top, \quad
    \Sigma_w = \frac{1}{N-C}\sum_c\sum_{i \in c} (z_i-\mu_c)(z_i-\mu_c)^\top + \delta I
    $$

    and LiDAR is the smooth rank ``exp(−Σ p log p)``, ``p_i = λ_i / ‖λ‖₁ + ε``, of the eigenvalues
    of ``Σ_w^(−1/2) Σ_b Σ_w^(−1/2)``. (With ``q`` views per source sample, ``N − C = C(q − 1)`` as in
    the paper.) NaN with fewer than two classes or no class of two rows.

    Args:
        z: embeddings ``(n_samples, n_features)``, tensor or array.
        labels: ``(n_samples,)`` integer source-sample ids, of the same kind as ``z``.
        delta: ``δ``, the ridge of the within-class covariance.
        eps: ``ε`` of the distribution.
        validate_args: reject NaN and infinite embeddings (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import lidar
        >>> gen = torch.Generator().manual_seed(0)
        >>> sources = torch.randn(50, 8, generator=gen)
        >>> views = sources.repeat_interleave(4, dim=0) + 0.1 * torch.randn(200, 8, generator=gen)
        >>> round(float(lidar(views, torch.arange(50).repeat_interleave(4))), 2)
        7.0
    """
    opts = read_options("lidar", OPTIONS["LiDAR"], {"delta": delta, "eps": eps})
    (t, raw_labels), numpy = to_tensors(("z", "labels"), z, labels)
    check_embedding_rows(("z",), [t], validate_args=validate_args)
    lab = check_class_labels("labels", raw_labels, t)
    _, counts, sums, used = spectral.class_partials(t, lab)
    counts, sums = counts[: int(used)], sums[: int(used)]
    value = spectral.lidar(counts, sums, spectral.moments(t).gram, delta=opts["delta"], eps=opts["eps"])
    return _finish(value, [t], numpy)


def linear_cka(x: Any, y: Any, *, validate_args: bool = True) -> Any:
    r"""Linear CKA (Kornblith et al., "Similarity of neural network representations revisited",
    ICML 2019) between two representations of the same ``n`` samples (any widths).

    $$
    \mathrm{CKA}(X, Y) = \frac{\lVert \tilde X^\top \tilde Y \rVert_F^2}
    {\lVert \tilde X^\top \tilde X \rVert_F \, \lVert \tilde Y^\top \tilde Y \rVert_F}
    $$

    with ``X̃``, ``Ỹ`` the column-centred matrices: equal to the HSIC form with linear kernels,
    invariant to rotations and isotropic scaling of either side, in ``[0, 1]``. NaN when a
    representation is constant.

    Args:
        x: ``(n_samples, d_x)`` representation, tensor or array.
        y: ``(n_samples, d_y)`` representation of the same samples, same kind as ``x``.
        validate_args: reject NaN and infinite values (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import linear_cka
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
        >>> linear_cka(x, 3 * x)
        tensor(1.)
        >>> linear_cka(x, x[:, :1])
        tensor(0.9449)
    """
    (a, b), numpy = _embeddings(("x", "y"), (x, y), validate_args)
    check_row_pair(("x", "y"), a, b)
    ma, mb = spectral.moments(a), spectral.moments(b)
    value = spectral.linear_cka(ma.n, ma.total, mb.total, ma.gram, mb.gram, spectral.cross_gram(a, b))
    return _finish(value, [a, b], numpy)


def knn_accuracy(
    bank: Any,
    bank_labels: Any,
    queries: Any,
    query_labels: Any,
    *,
    k: int = 20,
    temperature: float = 0.07,
    top: int | tuple[int, ...] = (1, 5),
    num_classes: int | None = None,
    ties: str = "average",
    block_bytes: int | None = None,
    validate_args: bool = True,
) -> Any:
    r"""Weighted k-NN classification accuracy (Wu et al., "Unsupervised feature learning via
    non-parametric instance discrimination", CVPR 2018; the monitor of DINO and solo-learn).

    Each query takes its ``k`` most cosine-similar bank rows (exact, blocked: no ``queries x bank``
    matrix); neighbour ``j`` votes for its label with weight ``exp(s_j / T)``; the query is a hit at
    ``top`` when its label is among the ``top`` classes of largest vote. Neighbours tied at the
    ``k``-th similarity share the remaining places (each votes with its probability of being among
    the ``k`` under a random order: the query is scored on these expected votes, which is not the
    expected accuracy over tie orders; see the Ties page); classes tied in votes follow ``ties``
    (``"average"``: the expected hit of a random order among the ``num_classes`` votes, classes
    without a vote tied at 0). On tie-free data the top-1 prediction is the argmax of the votes, as in
    DINO and solo-learn. Non-finite embeddings (with ``validate_args=False``) give NaN. The sum over
    queries does not depend on their order (bit for bit).

    The bank may also come as an iterable of ``(embeddings, labels)`` chunks (``bank_labels=None``; a
    generator is read once, each chunk scanned against the queries and folded into running per-query vote
    lists, no chunk kept): the value is that of the whole bank, bit for bit, for any chunking and order.

    Args:
        bank: ``(n_bank, d)`` labelled reference embeddings, tensor or array; or an iterable of
            ``(embeddings, labels)`` chunks of them (one dtype, tensors or arrays as the queries).
        bank_labels: ``(n_bank,)`` integer labels (``None`` where ``bank`` holds chunks).
        queries: ``(n_query, d)`` embeddings to classify.
        query_labels: ``(n_query,)`` their true labels.
        k: neighbours per query (clipped to ``n_bank``).
        temperature: ``T`` of the weights.
        top: ``top`` of the accuracy, or a sequence (one value per entry).
        num_classes: number of classes; ``None``: the number of distinct labels in both sets.
        ties: ``"average"``, ``"pessimistic"`` or ``"optimistic"`` for classes tied in votes.
        block_bytes: memory budget of one similarity block, in bytes; ``None`` chooses it per device.
        validate_args: reject NaN and infinite embeddings (``ValueError``; reads the data).

    Examples:
        >>> import torch
        >>> from embedmetrics.functional import knn_accuracy
        >>> bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> queries = torch.tensor([[1.0, 0.2], [0.3, 1.0]])
        >>> knn_accuracy(bank, torch.tensor([0, 0, 1, 1]), queries, torch.tensor([0, 0]), k=2, top=(1, 2))
        tensor([0.5000, 1.0000])
        >>> chunks = ((bank[i : i + 3], torch.tensor([0, 0, 1, 1])[i : i + 3]) for i in (0, 3))
        >>> knn_accuracy(chunks, None, queries, torch.tensor([0, 0]), k=2, top=(1, 2))
        tensor([0.5000, 1.0000])
    """
    given = {"k": k, "temperature": temperature, "top": top, "num_classes": num_classes, "ties": ties}
    options = knn_options(
        read_options("knn_accuracy", OPTIONS["KNNAccuracy"], {**given, "block_bytes": block_bytes})
    )
    if not isinstance(bank, (Tensor, np.ndarray)) and isinstance(bank, Iterable):
        return _knn_of_chunks(bank, bank_labels, queries, query_labels, options, validate_args)
    names = ("bank", "bank_labels", "queries", "query_labels")
    (b, bl, q, ql), numpy = to_tensors(names, bank, bank_labels, queries, query_labels)
    check_embedding_rows(("bank", "queries"), [b, q], validate_args=validate_args)
    if b.shape[1] != q.shape[1]:
        raise ValueError(
            "Arguments `bank` and `queries` must have the same number of features, "
            f"got {b.shape[1]} and {q.shape[1]}."
        )
    hits = knn_vote_hits(
        b, check_class_labels("bank_labels", bl, b), q, check_class_labels("query_labels", ql, q),
        k=options.k, temperature=options.temperature, tops=options.tops, num_classes=options.num_classes,
        ties=options.ties, block_bytes=options.block_bytes,
    )  # fmt: skip
    value = (hits / q.shape[0]).to(compute_dtype(b, q))
    return as_output(value, numpy, options.single)


def _knn_of_chunks(
    chunks: Iterable[Any],
    bank_labels: Any,
    queries: Any,
    query_labels: Any,
    options: KnnOptions,
    validate_args: bool,
) -> Any:
    """``knn_accuracy`` of a bank given as ``(embeddings, labels)`` chunks: each folded into the running
    vote lists (``vote_stream``) as it comes, none kept."""
    if bank_labels is not None:
        raise ValueError(
            "Argument `bank_labels` must be None where `bank` is an iterable of (embeddings, labels) chunks, "
            f"got {type(bank_labels).__name__}."
        )
    (q, ql), numpy = to_tensors(("queries", "query_labels"), queries, query_labels)
    check_embedding_rows(("queries",), [q], validate_args=validate_args)
    ql = check_class_labels("query_labels", ql, q)
    state, first = VoteStream.empty(q.shape[0], options.k, q.device), None
    for i, chunk in enumerate(chunks):
        b, bl = _bank_chunk(i, chunk, q, numpy, validate_args)
        if first is not None and b.dtype != first.dtype:
            raise ValueError(
                f"Argument `bank` must hold chunks of one dtype ({first.dtype}), chunk {i} is {b.dtype}."
            )
        first = b if first is None else first
        state = fold_bank_chunk(state, q, b, bl, options.k, options.block_bytes)
    if first is None:
        raise ValueError("Argument `bank` must hold at least one (embeddings, labels) chunk, got none.")
    hits = stream_hits(
        state, ql, k=options.k, temperature=options.temperature, tops=options.tops,
        num_classes=options.num_classes, ties=options.ties,
    )  # fmt: skip
    return as_output((hits / q.shape[0]).to(compute_dtype(first, q)), numpy, options.single)


def _bank_chunk(i: int, chunk: Any, q: Tensor, numpy: bool, validate_args: bool) -> tuple[Tensor, Tensor]:
    """Chunk ``i`` of the bank, checked: an ``(embeddings, labels)`` pair of the queries' kind and width."""
    if not isinstance(chunk, (tuple, list)) or len(chunk) != 2:
        raise ValueError(
            f"Argument `bank` must hold (embeddings, labels) pairs, chunk {i} is {type(chunk).__name__}."
        )
    (b, bl), chunk_numpy = to_tensors((f"bank[{i}][0]", f"bank[{i}][1]"), *chunk)
    if chunk_numpy != numpy:
        raise ValueError(
            f"Argument `bank` must hold chunks of the queries' kind (tensor or array), chunk {i} does not."
        )
    check_embedding_rows((f"bank[{i}][0]",), [b], validate_args=validate_args)
    if b.shape[1] != q.shape[1]:
        raise ValueError(
            f"Arguments `bank` and `queries` must have the same number of features, got {b.shape[1]} "
            f"(chunk {i}) and {q.shape[1]}."
        )
    return b.to(q.device), check_class_labels(f"bank[{i}][1]", bl, b).to(q.device)
