"""A user's own retrieval measure (a ``RetrievalMetric`` subclass defining ``_metric(preds, target)``):
its per-query values, the queries grouped as torchmetrics' ``RetrievalMetric.compute`` groups them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from embedmetrics._engine.ranking.measures import STATUS_ABSENT, STATUS_EMPTY, STATUS_OK


def own_query_values(
    metric: Callable[[Tensor, Tensor], Tensor],
    preds: Tensor,
    target: Tensor,
    indexes: Tensor | None,
    ignore_index: int | None,
) -> tuple[Tensor, Tensor]:
    """Per-query values ``(Q, 1)`` (float64) and status ``(Q,)`` of a subclass's own ``metric(preds,
    target)``, grouped as torchmetrics' ``RetrievalMetric.compute`` groups: queries in ascending index
    order (2-D input: one per row), documents whose target is ``ignore_index`` dropped, ``metric`` called
    only for a query with a relevant document (else "empty"; a query left without documents is absent)."""
    if indexes is None:
        groups = list(zip(preds.reshape(-1, preds.shape[-1]), target.reshape(-1, target.shape[-1])))
    else:
        order = torch.argsort(indexes, stable=True)
        counts = torch.unique_consecutive(indexes[order], return_counts=True)[1].tolist()
        groups = list(zip(torch.split(preds[order], counts), torch.split(target[order], counts)))
    values, status = [], []
    for p, t in groups:
        if ignore_index is not None:
            p, t = p[t != ignore_index], t[t != ignore_index]
        state = STATUS_ABSENT if t.numel() == 0 else STATUS_OK if bool(t.sum()) else STATUS_EMPTY
        value = metric(p, t) if state == STATUS_OK else torch.zeros(())
        values.append(torch.as_tensor(value, device=preds.device).to(torch.float64).reshape(()))
        status.append(state)
    if not values:
        return torch.zeros(0, 1, dtype=torch.float64, device=preds.device), torch.zeros(0, dtype=torch.int8)
    return torch.stack(values).reshape(-1, 1), torch.tensor(status, dtype=torch.int8, device=preds.device)
