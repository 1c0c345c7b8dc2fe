"""Fused post-product passes (``torch.compile``), opt-in, with the eager passes as the fallback.

After each similarity block, contrastive accuracy needs four integer counts per row and per column
(the signs of ``S - s_ii`` along the rows and of ``S - s_jj`` down the columns, summed, and their
absolute values summed). Eagerly that is about ten passes over the block (subtract, sign, a
matrix-vector product, absolute value, another product, for each direction); compiled, the four
reductions are one or two fused passes. The counts are integers either way, and the sign of a float
difference is the same number however it is computed, so both paths give the same bits.

Compiling costs seconds the first time a block shape is seen in a process (4 to 17 s measured on a
2-core CPU), which pays off only when the same metric runs many times (every epoch of a training
run), so it is off unless asked for: ``set_compile`` or ``EMBEDMETRICS_COMPILE=1``
(``embedmetrics._config``). Only full blocks take the compiled kernel (the last, smaller block of a
scan runs eagerly: no recompile per block), only on CPU and CUDA tensors, and a compiler error
switches it off for the process with one warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from embedmetrics._config import compile_enabled, mark_compile_failed

_State = dict[str, object]
_STATE: _State = {"kernel": None}  # the compiled kernel, built on first use

SignCounts = tuple[Tensor, Tensor, Tensor, Tensor]


def sign_counts_eager(sim: Tensor, d_rows: Tensor, d_cols: Tensor) -> SignCounts:
    """Reference definition (int64): per row ``i``, ``Σ_j sign(s_ij - d_rows_i)`` and ``Σ_j |sign(...)|``;
    per column ``j``, the same of ``s_ij - d_cols_j`` down the column."""
    rows = torch.sign(sim - d_rows[:, None]).to(torch.int32)
    cols = torch.sign(sim - d_cols[None, :]).to(torch.int32)
    return (
        rows.sum(1, dtype=torch.int64),
        rows.abs().sum(1, dtype=torch.int64),
        cols.sum(0, dtype=torch.int64),
        cols.abs().sum(0, dtype=torch.int64),
    )


def _kernel() -> Callable[[Tensor, Tensor, Tensor], SignCounts]:
    kernel = _STATE["kernel"]
    if kernel is None:
        kernel = torch.compile(sign_counts_eager, dynamic=False, fullgraph=True)
        _STATE["kernel"] = kernel
    return kernel  # type: ignore[return-value]


def fused_sign_counts(sim: Tensor, d_rows: Tensor, d_cols: Tensor) -> SignCounts | None:
    """The counts of ``sign_counts_eager`` from the compiled kernel, or ``None`` where the caller
    runs its eager passes (compiling off or failed, a device other than CPU and CUDA)."""
    if not compile_enabled() or sim.device.type not in ("cpu", "cuda"):
        return None
    try:
        return _kernel()(sim, d_rows, d_cols)
    except Exception as err:  # any compiler failure: fall back, once, loudly
        mark_compile_failed()
        warnings.warn(
            f"embedmetrics: torch.compile failed ({type(err).__name__}: {err}); using the eager passes.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
