"""A retrieval metric of the user's own, as torchmetrics' docs write one: a subclass of
``RetrievalMetric`` defining ``_metric(self, preds, target)`` and adding its settings in its own
``__init__``. It takes the base's settings, is updated over flat input with ``indexes`` (queries
spanning batches) or 2-D input, and equals torchmetrics' own ``RetrievalMetric`` subclass with the same
``_metric`` and a plain-Python grouping; a setting it does not have is refused by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics.retrieval
from torch import Tensor

from embedmetrics.retrieval import RetrievalMetric


def _precision_at(preds: Tensor, target: Tensor, top_k: int) -> Tensor:
    """Relevant documents among the ``top_k`` best scores, over ``top_k`` (scores drawn without ties)."""
    return target[torch.argsort(preds, descending=True)[:top_k]].float().sum() / top_k


class MyPrecision(RetrievalMetric):
    """The user's metric: precision at ``top_k`` (a setting of its own)."""

    def __init__(self, top_k: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.my_k = top_k

    def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
        return _precision_at(preds, target, self.my_k)


class TheirPrecision(torchmetrics.retrieval.base.RetrievalMetric):
    """The same ``_metric`` on torchmetrics' own base (the oracle of the grouping)."""

    def __init__(self, top_k: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.my_k = top_k

    def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
        return _precision_at(preds, target, self.my_k)


def _batches(seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Three batches of 7 queries' documents, a query spanning batches, some queries without a relevant
    one; distinct scores."""
    gen = torch.Generator().manual_seed(seed)
    n = 60
    preds = torch.randperm(n, generator=gen).float() / n
    target = (torch.rand(n, generator=gen) < 0.3).long()
    indexes = torch.randint(0, 7, (n,), generator=gen)
    target[indexes == 3] = 0  # an empty query
    return [(preds[i : i + 20], target[i : i + 20], indexes[i : i + 20]) for i in (0, 20, 40)]


def _by_hand(batches: list[tuple[Tensor, Tensor, Tensor]], empty: float | None) -> Tensor:
    """Plain Python: group by query id, precision at 2 of each query with a relevant document, the empty
    ones counted as ``empty`` (``None``: skipped), the mean."""
    rows: dict[int, list[tuple[float, int]]] = {}
    for preds, target, indexes in batches:
        for p, t, q in zip(preds.tolist(), target.tolist(), indexes.tolist()):
            rows.setdefault(q, []).append((p, t))
    values = []
    for docs in rows.values():
        if not any(t for _, t in docs):
            if empty is not None:
                values.append(empty)
            continue
        best = sorted(docs, reverse=True)[:2]
        values.append(sum(t for _, t in best) / 2)
    return torch.tensor(sum(values) / len(values))


@pytest.mark.parametrize(("action", "empty"), [("neg", 0.0), ("pos", 1.0), ("skip", None)])
def test_a_subclass_of_ones_own_equals_torchmetrics_and_plain_python(
    action: str, empty: float | None
) -> None:
    batches = _batches(7)
    ours, theirs = MyPrecision(empty_target_action=action), TheirPrecision(empty_target_action=action)
    for preds, target, indexes in batches:
        ours.update(preds, target, indexes=indexes)
        theirs.update(preds, target, indexes=indexes)
    torch.testing.assert_close(ours.compute(), theirs.compute())
    torch.testing.assert_close(ours.compute(), _by_hand(batches, empty))


@pytest.mark.parametrize("aggregation", ["max", "min", "median"])
def test_the_base_settings_apply_to_ones_own_metric(aggregation: str) -> None:
    batches = _batches(11)
    ours = MyPrecision(aggregation=aggregation, ignore_index=-1)
    theirs = TheirPrecision(aggregation=aggregation, ignore_index=-1)
    for preds, target, indexes in batches:
        target = target.clone()
        target[::5] = -1  # dropped
        ours.update(preds, target, indexes=indexes)
        theirs.update(preds, target, indexes=indexes)
    torch.testing.assert_close(ours.compute(), theirs.compute())


def test_two_dimensional_input_is_one_query_per_row() -> None:
    preds, target, _ = _batches(5)[0]
    preds, target = preds[:18].reshape(3, 6), target[:18].reshape(3, 6)
    target[0] = 1
    ours, theirs = MyPrecision(), TheirPrecision()
    ours.update(preds, target)
    theirs.update(preds.reshape(-1), target.reshape(-1), indexes=torch.arange(3).repeat_interleave(6))
    torch.testing.assert_close(ours.compute(), theirs.compute())


def test_the_base_itself_says_what_to_define() -> None:
    with pytest.raises(
        TypeError, match=r"RetrievalMetric is a base class: .*`_metric\(self, preds, target\)`"
    ):
        RetrievalMetric()

    class NoMetric(RetrievalMetric):
        pass

    with pytest.raises(TypeError, match="NoMetric is a base class"):
        NoMetric()


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: MyPrecision(k=3), "k"),
        (lambda: MyPrecision(ties="optimistic"), "ties"),
        (lambda: MyPrecision(bogus=1), "bogus"),
    ],
)
def test_a_setting_ones_own_metric_does_not_have_is_refused_by_name(
    make: Callable[[], RetrievalMetric], name: str
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"MyPrecision has no argument `{name}`, got {name}=.*Its settings: empty_target_action, "
        r"ignore_index, aggregation, validate_args\.",
    ):
        make()


def test_torchmetrics_positional_order_and_keywords() -> None:
    """torchmetrics' base takes ``(empty_target_action, ignore_index, aggregation)`` positionally, and
    ``Metric``'s keywords."""

    class Positional(RetrievalMetric):
        def __init__(self) -> None:
            super().__init__("skip", None, "max", compute_on_cpu=True)

        def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
            return target[preds.argmax()].float()

    metric = Positional()
    assert (metric.empty_target_action, metric.aggregation, metric.compute_on_cpu) == ("skip", "max", True)
    metric.update(torch.tensor([0.9, 0.1, 0.8, 0.2]), torch.tensor([0, 1, 1, 0]), torch.tensor([0, 0, 1, 1]))
    assert metric.compute().item() == 1.0


def test_graded_relevance_needs_allow_non_binary_target() -> None:
    class Gain(RetrievalMetric):
        def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
            return target[preds.argmax()].float()

    class GradedGain(Gain):
        allow_non_binary_target = True

    preds, target, indexes = (
        torch.tensor([0.9, 0.1, 0.8]),
        torch.tensor([2, 1, 0]),
        torch.zeros(3, dtype=torch.long),
    )
    with pytest.raises(ValueError, match="target"):
        Gain().update(preds, target, indexes)
    metric = GradedGain()
    metric.update(preds, target, indexes)
    assert metric.compute().item() == 2.0


def test_an_own_metric_on_a_registered_class_reads_its_settings() -> None:
    """A subclass of ``RetrievalPrecision`` with its own ``_metric`` keeps that class's settings (``k``,
    as ``top_k``) and one value per query, whatever ``k``."""
    from embedmetrics.retrieval import RetrievalPrecision

    class Mine(RetrievalPrecision):
        def _metric(self, preds: Tensor, target: Tensor) -> Tensor:
            return _precision_at(preds, target, int(self.top_k))

    batches = _batches(13)
    ours = Mine(k=2)
    for preds, target, indexes in batches:
        ours.update(preds, target, indexes=indexes)
    torch.testing.assert_close(ours.compute(), _by_hand(batches, 0.0))
