"""Lightning integration: evaluate embedding and retrieval metrics without touching the module.

``EmbeddingMetricsCallback`` feeds metrics from what ``validation_step`` / ``test_step``
return, logs their epoch values as ``val/<name>`` / ``test/<name>``, resets them, and keeps them on
the module's device. Under DDP the metrics sync through torchmetrics (every rank computes the same
value on all ranks' data), so nothing else is needed.

Requires ``lightning`` (``pip install lightning``, the ``[lightning]`` extra).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler
from torchmetrics import Metric, MetricCollection

from embedmetrics._engine.core.checks import ArgumentKindError

try:
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities import rank_zero_warn
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "`embedmetrics.integrations.lightning` needs Lightning: "
        "`pip install lightning` (the [lightning] extra)."
    ) from err

#: How one metric's ``update`` arguments come out of a step's returned dict: ``{argument: key}``
#: (keyword arguments), a sequence of keys (positional arguments), or a callable that receives the
#: returned dict and gives the keyword arguments (or a list of them: one ``update`` each).
UpdateArguments = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]
InputSpec = Union[Mapping[str, str], Sequence[str], Callable[[Mapping[str, Any]], UpdateArguments]]

_STAGES = {"validate": "val", "test": "test"}
_STAGE_WORDS = {"validate": "validation", "test": "test"}


class RepeatedRowsWarning(UserWarning):
    """The distributed sampler of a stage repeats items, so the epoch values count some rows twice.

    ``DistributedSampler`` (which Lightning puts in every evaluation loader under DDP unless
    ``use_distributed_sampler=False``) pads a dataset of ``N`` items to ``ceil(N / world) * world`` by
    repeating its first items; `EmbeddingMetricsCallback` warns once per stage with the number of
    repeated items and the metrics they reach (a metric that counts an exactly repeated row once,
    ``counts_repeated_rows_once``, such as ``DenseRetrieval`` given ids, is named apart; where every
    metric does, nothing is warned).
    """


_K_ATTRS = ("topk", "top_k", "k", "ks", "top")


def _metric_dict(metrics: Mapping[str, Metric] | MetricCollection) -> dict[str, Metric]:
    if isinstance(metrics, MetricCollection):
        return dict(metrics.items(keep_base=False, copy_state=False))
    if not isinstance(metrics, Mapping) or not metrics:
        msg = f"Argument `metrics` must be a non-empty dict or a MetricCollection, got {metrics!r}."
        raise ArgumentKindError(msg)
    for name, m in metrics.items():
        if not isinstance(name, str) or not isinstance(m, Metric):
            msg = f"Argument `metrics` must map names to torchmetrics Metrics, got {name!r}: {m!r}."
            raise ArgumentKindError(msg)
    return dict(metrics)


def _is_shared(inputs: Mapping[str, Any]) -> bool:
    return all(isinstance(v, str) for v in inputs.values())


def _ks(metric: Metric, n: int) -> list[Any] | None:
    for attr in _K_ATTRS:
        value = getattr(metric, attr, None)
        if isinstance(value, (list, tuple)) and len(value) == n:
            return list(value)
        if isinstance(value, Tensor) and value.numel() == n:
            return value.tolist()
    return None


def repeated_rows(n_items: int, world_size: int) -> int:
    """The items ``DistributedSampler`` (``drop_last=False``) repeats to give each of ``world_size``
    processes as many: ``ceil(n_items / world_size) * world_size - n_items``.

    Examples:
        >>> repeated_rows(399, 2)
        1
        >>> repeated_rows(400, 2)
        0
    """
    return math.ceil(n_items / world_size) * world_size - n_items


def _loaders(iterables: Any) -> list[Any]:
    """The data loaders of a stage (``trainer.val_dataloaders``: one, a list or a dict of them)."""
    if iterables is None:
        return []
    if isinstance(iterables, Mapping):
        return list(iterables.values())
    return list(iterables) if isinstance(iterables, (list, tuple)) else [iterables]


def _distributed_sampler(loader: Any) -> DistributedSampler[Any] | None:
    """The loader's ``DistributedSampler`` (Lightning's wrapper of a custom sampler is one), or ``None``."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    for sampler in (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        if isinstance(sampler, DistributedSampler):
            return sampler
    return None


def _stage_padding(trainer: Trainer, stage: str) -> tuple[int, int, int]:
    """``(repeated, items, world_size)`` over the stage's loaders whose distributed sampler repeats items
    and whose last batch is evaluated (the repeated items are each process's last)."""
    if stage == "validate":
        loaders = _loaders(trainer.val_dataloaders)
        batches = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
    else:
        loaders = _loaders(trainer.test_dataloaders)
        batches = trainer.num_test_batches
    repeated = items = world = 0
    for i, loader in enumerate(loaders):
        sampler = _distributed_sampler(loader)
        if sampler is None or (i < len(batches) and batches[i] < len(loader)):
            continue  # no distributed sampler, or limited batches: the last (where the repeats are) not run
        n = len(sampler.dataset)  # type: ignore[arg-type]
        # what the sampler draws over what it holds: `repeated_rows` for DistributedSampler, 0 with
        # drop_last=True (it drops instead) and for a sampler that repeats nothing (its total_size is n)
        extra = max(int(sampler.total_size) - n, 0)
        if extra:
            repeated, items, world = repeated + extra, items + n, sampler.num_replicas
    return repeated, items, world


def _repeated_rows_message(stage: str, metrics: Mapping[str, Metric], padding: tuple[int, int, int]) -> str:
    """The warning's text: the metrics that count the repeated items twice, and those (given ids with
    their rows, ``counts_repeated_rows_once``) that count them once."""
    repeated, items, world = padding
    word = _STAGE_WORDS[stage]
    once = [name for name, m in metrics.items() if bool(getattr(m, "counts_repeated_rows_once", False))]
    listed = ", ".join(f"`{name}`" for name in metrics if name not in once)
    exact = ", ".join(f"`{name}`" for name in once)
    apart = f"; {exact}, given ids, count(s) an item repeated exactly (same id, same rows) once" * bool(once)
    return (
        f"EmbeddingMetricsCallback: the {word} loader's DistributedSampler repeats {repeated} of its "
        f"{items} items (it pads them to a multiple of the {world} processes), so the {word} values of "
        f"{listed} count {repeated} item(s) twice (a metric grouped by `indexes` sees that query's rows "
        f"twice){apart}. Evaluate on one process, give a multiple of {world} items, or use a sampler that "
        "repeats nothing (see the Lightning page of the docs)."
    )


def flatten_value(name: str, value: Any, metric: Metric | None = None) -> dict[str, Tensor]:
    """Scalar values to log for one metric's ``compute`` result.

    A scalar keeps ``name``; a dict gives ``name/key`` per entry (recursively); a 1-D tensor with one
    value per ``k`` (e.g. ``ContrastiveAccuracy(topk=(1, 5))``) gives ``name@k`` when the metric has a
    matching ``topk``/``top_k``/``k`` attribute, else ``name/i``.

    Examples:
        >>> import torch
        >>> flatten_value("acc", {"precision_at_1": torch.tensor(0.5), "r_precision": 0.25})
        {'acc/precision_at_1': tensor(0.5000), 'acc/r_precision': tensor(0.2500)}
        >>> flatten_value("hr", torch.tensor([0.5, 0.75]))
        {'hr/0': tensor(0.5000), 'hr/1': tensor(0.7500)}
    """
    if isinstance(value, Mapping):
        out: dict[str, Tensor] = {}
        for key, item in value.items():
            out.update(flatten_value(f"{name}/{key}", item, metric))
        return out
    tensor = value if isinstance(value, Tensor) else torch.as_tensor(value)
    tensor = tensor.detach()
    if tensor.numel() == 1:
        return {name: tensor.reshape(())}
    if tensor.ndim != 1:
        raise ValueError(f"Metric `{name}` returned a tensor of shape {tuple(tensor.shape)}; cannot log it.")
    ks = _ks(metric, tensor.numel()) if metric is not None else None
    labels = [f"{name}@{k}" for k in ks] if ks is not None else [f"{name}/{i}" for i in range(tensor.numel())]
    return {label: tensor[i] for i, label in enumerate(labels)}


class EmbeddingMetricsCallback(Callback):
    """Update, log and reset metrics from the dicts that ``validation_step`` / ``test_step`` return.

    Args:
        metrics: the metrics, as ``{name: Metric}`` or a ``MetricCollection`` (its keys, with its
            prefix/postfix, are the names). The callback keeps a separate deep copy per stage.
        inputs: where each metric's ``update`` arguments come from in the step's returned dict. Either
            one mapping ``{argument: key}`` shared by all metrics (each metric receives the arguments its
            ``update`` accepts, as ``MetricCollection.update`` does), or ``{name: spec}`` for every
            metric, where ``spec`` is ``{argument: key}``, a sequence of keys passed positionally, or a
            callable ``outputs -> {argument: value}`` (or a list of such dicts: one ``update`` each, e.g.
            the queries and the documents of a batch for [`DenseRetrieval`][embedmetrics.DenseRetrieval]).
        stages: which of ``"validate"`` and ``"test"`` to evaluate.
        name_format: logged name of each value; ``{stage}`` is ``val`` or ``test``, ``{name}`` the
            metric name (dict results add ``/key``, per-``k`` results ``@k``).
        log_kwargs: extra keyword arguments for ``LightningModule.log`` (e.g. ``prog_bar=True``).

    Epoch values are logged from ``on_{stage}_epoch_end`` with ``sync_dist=True, reduce_fx="max"``:
    every rank already holds the same synced value, and the max of equal values is that value exactly.
    The sanity-check epoch updates and computes (so errors show early) but logs nothing.

    The metric states are saved with the callback in Lightning checkpoints (gathered from every
    rank) and restored on rank 0 only, so a run resumed mid-epoch continues with the same data.

    Examples:
        >>> from torchmetrics.aggregation import MeanMetric
        >>> cb = EmbeddingMetricsCallback({"loss": MeanMetric()}, {"loss": {"value": "loss"}})
        >>> sorted(cb.metrics("validate"))
        ['loss']
    """

    def __init__(
        self,
        metrics: Mapping[str, Metric] | MetricCollection,
        inputs: Mapping[str, str]
        | Mapping[str, Mapping[str, str] | Sequence[str] | Callable[[Mapping[str, Any]], Any]],
        *,
        stages: Sequence[str] = ("validate", "test"),
        name_format: str = "{stage}/{name}",
        log_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        names = _metric_dict(metrics)
        if not isinstance(inputs, Mapping) or not inputs:
            raise ArgumentKindError(f"Argument `inputs` must be a non-empty mapping, got {inputs!r}.")
        self._shared = _is_shared(inputs)
        if not self._shared:
            missing = sorted(set(names) - set(inputs))
            extra = sorted(set(inputs) - set(names))
            if missing or extra:
                raise ValueError(
                    f"Argument `inputs` must have one entry per metric {sorted(names)}; "
                    f"missing {missing}, unknown {extra}."
                )
            for name, spec in inputs.items():
                if isinstance(spec, str) or not (callable(spec) or isinstance(spec, (Mapping, Sequence))):
                    raise ArgumentKindError(
                        f"Argument `inputs[{name!r}]` must be a mapping, a sequence of keys or a callable, "
                        f"got {spec!r}."
                    )
        for stage in stages:
            if stage not in _STAGES:
                raise ValueError(f"Argument `stages` may contain only {tuple(_STAGES)}, got {stage!r}.")
        if "{name}" not in name_format:
            raise ValueError(f"Argument `name_format` must contain '{{name}}', got {name_format!r}.")
        self._inputs: Mapping[str, Any] = dict(inputs)
        self._name_format = name_format
        self._log_kwargs = dict(log_kwargs or {})
        # one independent copy per stage: validation inside `fit` never mixes with `test`
        self._metrics: dict[str, dict[str, Metric]] = {s: copy.deepcopy(names) for s in stages}
        self._warned: set[str] = set()  # stages warned of repeated rows (once each)

    @property
    def state_key(self) -> str:
        """Identifies this callback's state in checkpoints: several instances may coexist."""
        names = sorted(next(iter(self._metrics.values()), {}))
        key: str = self._generate_state_key(metrics=names, name_format=self._name_format)
        return key

    def metrics(self, stage: str) -> dict[str, Metric]:
        """The metrics of ``stage`` (``"validate"`` or ``"test"``), by name."""
        return self._metrics[stage]

    # ---- feeding -------------------------------------------------------------------------------

    def _update(self, stage: str, outputs: Any) -> None:
        if stage not in self._metrics:
            return
        if not isinstance(outputs, Mapping):
            raise ArgumentKindError(
                f"EmbeddingMetricsCallback needs `{stage}_step` to return a dict of tensors, "
                f"got {type(outputs)}."
            )

        def get(key: str) -> Any:
            if key not in outputs:
                raise KeyError(f"`{stage}_step` returned no key {key!r}; it returned {sorted(outputs)}.")
            value = outputs[key]
            return value.detach() if isinstance(value, Tensor) else value

        if self._shared:
            kwargs = {arg: get(key) for arg, key in self._inputs.items()}
            for metric in self._metrics[stage].values():
                metric.update(**metric._filter_kwargs(**kwargs))
            return
        for name, metric in self._metrics[stage].items():
            spec = self._inputs[name]
            if callable(spec):
                arguments = spec(outputs)
                for one in [arguments] if isinstance(arguments, Mapping) else arguments:
                    metric.update(**one)
            elif isinstance(spec, Mapping):
                metric.update(**{arg: get(key) for arg, key in spec.items()})
            else:
                metric.update(*(get(key) for key in spec))

    def _to_device(self, stage: str, pl_module: LightningModule) -> None:
        for metric in self._metrics.get(stage, {}).values():
            metric.to(pl_module.device)

    def _warn_repeated_rows(self, stage: str, trainer: Trainer) -> None:
        """Warn once per stage (rank zero) when the stage's distributed sampler repeats items."""
        if stage not in self._metrics or stage in self._warned or trainer.world_size < 2:
            return
        padding = _stage_padding(trainer, stage)
        metrics = self._metrics[stage]
        every_once = all(bool(getattr(m, "counts_repeated_rows_once", False)) for m in metrics.values())
        if padding[0] > 0 and not every_once:  # metrics that all count a repeat once need no warning
            self._warned.add(stage)
            rank_zero_warn(_repeated_rows_message(stage, metrics, padding), category=RepeatedRowsWarning)

    def _log_and_reset(self, stage: str, trainer: Trainer, pl_module: LightningModule) -> None:
        if stage not in self._metrics:
            return
        values: dict[str, Tensor] = {}
        for name, metric in self._metrics[stage].items():
            full = self._name_format.format(stage=_STAGES[stage], name=name)
            values.update(flatten_value(full, metric.compute(), metric))
            metric.reset()
        if not trainer.sanity_checking:
            kwargs = {"sync_dist": True, "reduce_fx": "max", "add_dataloader_idx": False, **self._log_kwargs}
            for full, value in values.items():
                pl_module.log(full, value, on_step=False, on_epoch=True, **kwargs)

    # ---- hooks ---------------------------------------------------------------------------------

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._to_device("validate", pl_module)
        self._warn_repeated_rows("validate", trainer)

    def on_test_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._to_device("test", pl_module)
        self._warn_repeated_rows("test", trainer)

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._update("validate", outputs)

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._update("test", outputs)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_and_reset("validate", trainer, pl_module)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_and_reset("test", trainer, pl_module)

    # ---- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Every metric's state, gathered from all ranks (called on every rank by ``save_checkpoint``)."""
        out: dict[str, Any] = {}
        for stage, metrics in self._metrics.items():
            for name, metric in metrics.items():
                with metric.sync_context():  # a no-op without a process group
                    out[f"{stage}/{name}"] = {
                        attr: _detached_cpu(value) for attr, value in metric.metric_state.items()
                    }
                out[f"{stage}/{name}#updates"] = metric._update_count
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved states on rank 0 (the others start empty: ``cat``/``sum`` states add up)."""
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank = torch.distributed.get_rank() if distributed else 0
        for stage, metrics in self._metrics.items():
            for name, metric in metrics.items():
                metric.reset()
                saved = state_dict.get(f"{stage}/{name}")
                if saved is None or rank != 0:
                    continue
                for attr, value in saved.items():
                    default = metric._defaults[attr]
                    if isinstance(default, list) and isinstance(value, Tensor):
                        value = [value]  # a gathered list state comes back concatenated
                    setattr(metric, attr, _to(value, metric.device))
                metric._update_count = int(state_dict.get(f"{stage}/{name}#updates", 1))
                metric._computed = None


def _detached_cpu(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, list):
        return [_detached_cpu(v) for v in value]
    return value


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    return value


__all__ = ["EmbeddingMetricsCallback", "InputSpec", "RepeatedRowsWarning", "flatten_value", "repeated_rows"]
