"""The base class of every module metric: nothing lost, settings kept apart, deadlock-free sync.

``BaseMetric`` adds to ``SyncSafeMetric`` (safe ``"cat"`` sync):

- **A rejected batch costs nothing.** torchmetrics' ``forward`` resets the accumulated state before it
  calls ``update`` on the batch and merges the two afterwards, so a batch that raises (bad input, or a
  batch value that cannot be computed) used to drop the whole epoch. ``forward`` here validates the
  batch against the accumulated state (``BaseMetric._read_batch_first``), then takes a shallow
  snapshot of the metric (references to the state tensors and copies of the state lists: no data is
  copied) and puts it back if anything raises. ``update`` validates a batch before it touches
  the state (every metric's own contract, tested for every class); a rejected ``update`` also leaves
  torchmetrics' update counter and compute cache as they were.
- **Non-differentiable metrics never keep a graph.** Their ``update`` receives detached tensors, so
  embeddings that require grad neither crash the scans nor keep the autograd graph alive in the state.
- **Settings that shape the state are checked.** A metric whose ``update`` already reduces with a
  setting (per-query values at ``k``, a sum of ``||z1 - z2||^alpha``) records those settings with
  ``BaseMetric.add_settings_state``. ``merge_state`` and ``load_state_dict`` then refuse a state
  computed with other settings (``ValueError`` naming the setting) instead of mixing them, and
  ``MetricCollection`` compute groups never merge such metrics. Metrics that store raw rows (whose
  settings only matter in ``compute``) stay compatible across settings, as they should.
- **Ids stay unique.** Where ``update`` refuses an id given before (``DenseRetrieval``'s query and
  corpus ids, declared in ``_unique_id_states``), ``merge_state`` refuses an incoming state that holds
  one of ours or repeats one, and ``load_state_dict`` a state that repeats one (``ValueError`` naming
  the argument and the ids), before anything is merged or loaded: a merge with a copy of itself no
  longer breaks every later ``compute``. A row stored with its id that comes back exactly (the same id,
  equal rows in the other stores of its ``_aligned_row_stores`` group: an item a ``DistributedSampler``
  padded in, evaluated on two processes) is one item: ``merge_state`` merges it once, as ``compute``
  after a sync counts it once (``_engine/dense/repeats.py``); only the same id with other rows is
  refused. Ids stored without their rows (a streamed corpus) are refused whenever they repeat.
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional

import torch
from torch import Tensor
from torchmetrics import Metric

from embedmetrics._engine.core.checks import IncompatibleStateError, check_same_settings
from embedmetrics._engine.core.inputs import BatchSpec, read_batch
from embedmetrics._engine.dense.repeats import keep_first, repeated_positions
from embedmetrics._engine.settings.options import Option, read_options
from embedmetrics._metric import row_buffer
from embedmetrics._metric.registry import refuse_other_settings_of, spec_of_class
from embedmetrics._metric.sync import SyncSafeMetric, first_rows, settings_fingerprint

#: The dtype and the trailing shape (feature widths) of a metric's embeddings.
Layout = tuple[torch.dtype, tuple[int, ...]]

#: ``state_dict`` key of the recorded settings (present only when states are persistent).
SETTINGS_KEY = "_settings"

# settings fingerprints seen in this process -> readable settings (to name a differing setting when a
# merged state dict carries only the fingerprint)
_KNOWN_SETTINGS: dict[float, dict[str, str]] = {}


def describe_setting(value: Any) -> str:
    """A stable text for a setting, the same in every process: ``repr`` of plain values, the qualified
    name of functions, a checksum of a tensor's values, the public attributes of other objects."""
    if isinstance(value, Tensor):
        data = value.detach().cpu().contiguous()
        return f"tensor{tuple(data.shape)}:{zlib.crc32(data.numpy().tobytes()) if data.numel() else 0}"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    if isinstance(value, (str, int, float, bool, tuple, list, type(None))):
        return repr(value)
    public = sorted((k, describe_setting(v)) for k, v in vars(value).items() if not k.startswith("_"))
    return f"{type(value).__qualname__}{public}"


def _rows_text(t: Tensor) -> str:
    return f"{t.dtype} rows of shape (n, {', '.join(str(d) for d in t.shape[1:])})"


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, Tensor) else value


def _ids_of(state: Any) -> Optional[Tensor]:
    """The ids of a list (or tensor) state as one 1-D tensor, or ``None`` when it holds none."""
    items = [t.reshape(-1) for t in (state if isinstance(state, list) else [state]) if isinstance(t, Tensor)]
    items = [t for t in items if t.numel()]
    return torch.cat(items) if items else None


def _rows_of(state: Any) -> int:
    """The rows of a list (or tensor) state: the leading sizes of its tensors, added up."""
    items = state if isinstance(state, list) else [state]
    return sum(int(t.shape[0]) if t.ndim else 1 for t in items if isinstance(t, Tensor))


def _joined(ours: Any, theirs: Any, device: torch.device) -> Tensor:
    """The rows of a list (or tensor) state of ours, then of theirs, as one tensor on ``device``."""
    items = [t for state in (ours, theirs) for t in (state if isinstance(state, list) else [state])]
    return torch.cat([t.to(device) for t in items if isinstance(t, Tensor) and t.ndim and t.shape[0]])


def _ids_text(ids: Tensor) -> str:
    """Ascending distinct ``ids`` as text: all of them up to five, else the first five and the count."""
    values = torch.unique(ids).tolist()
    shown = ", ".join(str(v) for v in values[:5])
    return shown if len(values) == 1 else f"{shown}{', ...' if len(values) > 5 else ''} ({len(values)} ids)"


class BaseMetric(SyncSafeMetric):
    """Base of every module metric (see the module docstring for what it guarantees)."""

    _settings: dict[str, str]
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        *Metric.__jit_ignored_attributes__, "_settings", "_row_buffer_list",
    ]  # fmt: skip
    #: Row stores that hold the embeddings (one dtype and width for all of them; see ``input_layout``).
    _embedding_states: ClassVar[tuple[str, ...]] = ()
    #: List states of ids that ``update`` keeps unique across every batch (``_stateful_rules`` refuses a
    #: known id): ``merge_state`` and ``load_state_dict`` refuse a state that would repeat one.
    _unique_id_states: ClassVar[tuple[str, ...]] = ()
    #: Groups of row stores whose rows belong together (embeddings and their ids or labels, the scores of
    #: a ranking and their relevance): ``merge_state`` and ``load_state_dict`` refuse a state whose stores
    #: of one group hold different numbers of rows, as ``update`` refuses such a batch.
    _aligned_row_stores: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: What ``update`` takes (the engine's one batch validator reads it); ``None``: validated in ``update``.
    batch_spec: ClassVar[Optional[BatchSpec]] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """TorchScript skips the annotated attributes (postponed ``list[Tensor]`` annotations are not
        types to it) and the properties, so ``torch.jit.script(metric)`` works as for torchmetrics'
        metrics (whose ``forward`` is not compiled either)."""
        super().__init_subclass__(**kwargs)
        own = [vars(klass) for klass in cls.__mro__ if issubclass(klass, BaseMetric)]
        annotated = {name for attrs in own for name in attrs.get("__annotations__", {})}
        properties = {name for attrs in own for name, value in attrs.items() if isinstance(value, property)}
        cls.__jit_ignored_attributes__ = sorted({*BaseMetric.__jit_ignored_attributes__, *annotated})
        cls.__jit_unused_properties__ = sorted({*Metric.__jit_unused_properties__, *properties})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # a keyword that is neither a setting nor torchmetrics Metric's: refused by name
        refuse_other_settings_of(type(self), kwargs, type(self).options() or None)
        super().__init__(*args, **kwargs)
        self._settings = {}

    # ------------------------------------------------------------------ nothing lost
    def _read_batch_first(self, *args: Any, **kwargs: Any) -> None:
        """Validate a batch against the accumulated state without touching it: ``read_batch`` (every
        metric declares its ``batch_spec``).

        ``forward`` calls it before torchmetrics resets the state for the batch value, so checks that
        compare with earlier batches (the feature dimension, say) still see them.
        """
        if type(self).batch_spec is not None:
            self.read_batch(*args, **kwargs)

    def read_batch(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], Optional[str]]:
        """One ``update`` call's batch, checked by the engine's one validator against ``batch_spec``,
        then against the accumulated state (dtype and widths, ``_stateful_rules``); touches no state.
        Returns the named tensors (on the metric's device where they came as NumPy) and the role."""
        spec = type(self).batch_spec
        assert spec is not None
        validate = bool(getattr(self, "validate_args", True))
        values, role = read_batch(
            spec, args, kwargs, device=self.device, validate_args=validate, context=self._batch_context()
        )
        layout_args = [a for a in spec.args if a.kind == "embeddings" and a.same_shape_as is None]
        if not layout_args:  # a ranking: no embeddings, no layout to keep
            self._stateful_rules(values, role)
            return values, role
        first = values[layout_args[0].name]
        dtype = functools.reduce(torch.promote_types, (values[a.name].dtype for a in layout_args))
        widths = tuple(int(values[a.name].shape[1]) for a in layout_args)
        self._refuse_other_layout(", ".join(a.name for a in layout_args), first, (dtype, widths))
        self._stateful_rules(values, role)
        return values, role

    def _batch_context(self) -> dict[str, Any]:
        """The settings a batch must fit, for the spec's ``rule`` (override; default: none)."""
        return {}

    def _stateful_rules(self, values: dict[str, Tensor], role: Optional[str]) -> None:
        """Rules of a batch against the state beyond dtype and width (override; default: none)."""

    @torch.jit.unused  # as torchmetrics: ``torch.jit.script(metric)`` works, forward runs in Python
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Batch value, accumulating the batch; a batch that raises leaves the metric exactly as it was."""
        self._read_batch_first(*args, **kwargs)
        snapshot = {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}
        try:
            return super().forward(*args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(snapshot)
            raise

    def _wrap_update(self, update: Callable[..., None]) -> Callable[..., None]:
        """torchmetrics' wrapper, plus: detached inputs (non-differentiable metrics) and, when ``update``
        raises, the update counter and compute cache as they were."""
        wrapped = super()._wrap_update(update)
        detach = not self.is_differentiable

        @functools.wraps(update)
        def guarded(*args: Any, **kwargs: Any) -> None:
            count, computed = self._update_count, self._computed
            if detach:
                args = tuple(_detach(a) for a in args)
                kwargs = {k: _detach(v) for k, v in kwargs.items()}
            try:
                wrapped(*args, **kwargs)
            except BaseException:
                self._update_count, self._computed = count, computed
                raise

        return guarded

    # ------------------------------------------------------------------ row store
    def add_row_store(self, *names: str, buffered: bool = True) -> None:
        """List states (``dist_reduce_fx="cat"``) that batches are appended to with ``append_rows``: each
        holds one tensor, the leading rows of a buffer with room to grow (``row_buffer``), so an append
        costs O(batch) amortized and ``stored_rows`` copies nothing. ``buffered=False``: the batches stay
        apart (a metric that trims or folds them itself). The rows may have any trailing shape
        (``SyncSafeMetric`` syncs them when ranks idle)."""
        for name in names:
            self.add_state(name, default=[], dist_reduce_fx="cat")
        if buffered:
            self._row_stores = (*getattr(self, "_row_stores", ()), *names)

    def append_rows(self, name: str, rows: Tensor) -> None:
        """Append ``rows`` to row store ``name`` (amortized O(len(rows)); no host sync)."""
        state = getattr(self, name)
        if name not in getattr(self, "_row_stores", ()):
            state.append(rows)  # a store that keeps its batches apart (``buffered=False``)
            return
        self._compact_rows(name, [*state, rows], keep_older=not state)

    def _compact_rows(self, name: str, parts: list[Tensor], keep_older: bool = False) -> None:
        """Make ``parts`` the one tensor of row store ``name``, in place (compute groups share the list).
        ``keep_older``: the store was empty (``forward`` reset it), so the buffer of the rows it held
        before stays ours until ``forward`` merges them back."""
        owned = self._row_buffers.get(name, [])
        rows, buffer = row_buffer.extend(parts, owned)
        state = getattr(self, name)
        state[:] = [rows]
        kept = owned[-1:] if keep_older else []
        self._row_buffers[name] = kept + ([] if buffer is None else [buffer])

    def __getstate__(self) -> dict[str, Any]:
        """torchmetrics' pickled state, row stores without their buffers' spare room (a copy or an
        unpickled metric allocates its own buffer at its first append)."""
        state: dict[str, Any] = super().__getstate__()
        state.pop("_row_buffer_list", None)
        for name in getattr(self, "_row_stores", ()):
            if isinstance(state.get(name), list):
                state[name] = [row_buffer.trimmed(t) for t in state[name]]
        return state

    @property
    def _row_buffers(self) -> dict[str, list[Tensor]]:
        """The buffers this metric allocated for its row stores (``row_buffer``), by store."""
        buffers: Optional[dict[str, list[Tensor]]] = self.__dict__.get("_row_buffer_list")
        if buffers is None:
            buffers = self.__dict__["_row_buffer_list"] = {}
        return buffers

    def stored_rows(self, name: str) -> Optional[Tensor]:
        """The rows of row store ``name`` as one tensor (a synced state is one already), or ``None`` when
        it holds none."""
        state = getattr(self, name)
        if isinstance(state, list):
            if len(state) > 1 and name not in getattr(self, "_row_stores", ()):
                return torch.cat(state)
            if len(state) > 1:
                self._compact_rows(name, list(state))
            return state[0] if state else None
        return state if state.numel() else None

    def _copy_state_dict(self) -> dict[str, Any]:
        """The state for ``forward`` and ``sync`` to put back: the tensors themselves (lists copied).
        torchmetrics clones every tensor here, which made each ``forward`` O(every row so far); no state
        tensor is ever changed in place here (updates assign new tensors or append past the end of a
        row store's view, and ``reset`` assigns fresh defaults), so references keep the state."""
        return {
            name: (list(v) if isinstance(v, list) else v)
            for name in self._defaults
            for v in [getattr(self, name)]
        }

    # ------------------------------------------------------------------ running sums
    def add_running_sum(self, *names: str) -> None:
        """Sums whose shape is known only at the first ``update`` (``Σzzᵀ`` of ``d`` features).

        Kept as a ``"cat"`` list holding one running partial (``(1, *shape)``) per process: ranks that
        made no ``update`` still sync (``SyncSafeMetric``), and ``running_sum`` adds the partials
        in rank order. ``accumulate`` folds every new term (and the batch partial ``forward``
        merges in) into one, so memory stays one partial per process.
        """
        for name in names:
            self.add_state(name, default=[], dist_reduce_fx="cat")
        self._running_sums = (*getattr(self, "_running_sums", ()), *names)

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """torchmetrics' merge (``forward``, ``merge_state``); row stores and running sums are folded at
        once."""
        super()._reduce_states(incoming_state)
        for name in getattr(self, "_row_stores", ()):
            state = getattr(self, name)
            if isinstance(state, list) and len(state) > 1:
                self._compact_rows(name, list(state))
        for name in getattr(self, "_running_sums", ()):
            total = self.running_sum(name)
            setattr(self, name, [] if total is None else [total[None]])

    def running_sum(self, name: str) -> Optional[Tensor]:
        """The total of running sum ``name`` (over the processes after a sync), or ``None`` when empty."""
        state = getattr(self, name)
        if isinstance(state, list):
            state = torch.cat(state) if state else None
        return None if state is None or state.shape[0] == 0 else state.sum(dim=0)

    def accumulate(self, **terms: Tensor) -> None:
        """Add each term to its running sum (all of them, or none if one does not fit)."""
        totals = {}
        for name, term in terms.items():
            current = self.running_sum(name)
            totals[name] = [term[None] if current is None else (current + term)[None]]
        for name, total in totals.items():
            setattr(self, name, total)

    # ------------------------------------------------------------------ the input layout
    def input_layout(self) -> Optional[Layout]:
        """The dtype and trailing shape of the embeddings accumulated so far (``None`` before any row),
        read from the state itself: never stale after ``reset``, ``merge_state`` or ``load_state_dict``.
        Every process must agree on it at a sync."""
        for name in self._embedding_states:
            rows = first_rows(getattr(self, name))
            if rows is not None:
                return rows.dtype, tuple(rows.shape[1:])
        return None

    def value_dtype(self) -> torch.dtype:
        """The dtype of the values: float64 for float64 embeddings, else the default dtype."""
        layout = self.input_layout()
        return (
            torch.float64 if layout is not None and layout[0] == torch.float64 else torch.get_default_dtype()
        )

    def _refuse_other_layout(self, name: str, t: Tensor, layout: Layout) -> None:
        """A batch (argument ``name``, first tensor ``t``) of ``layout`` must have the dtype and widths of
        the rows accumulated before (``IncompatibleStateError`` naming both; metadata only)."""
        earlier = self.input_layout()
        if earlier is None or layout == earlier:
            return
        raise IncompatibleStateError(
            f"Argument `{name}` must have the dtype and width of the earlier batches ({earlier[0]}, "
            f"{' and '.join(map(str, earlier[1]))} features), got {t.dtype} with shape {tuple(t.shape)}."
        )

    def _refuse_other_rows(self, incoming: dict[str, Any] | Metric, action: str) -> None:
        """Every ``"cat"`` state of ``incoming`` must hold rows of our dtype and trailing shape, and its
        input layout must be ours (``IncompatibleStateError`` naming the state; nothing merged)."""
        for name in self._reductions:
            theirs_state = incoming.get(name) if isinstance(incoming, dict) else getattr(incoming, name, None)
            ours, theirs = first_rows(getattr(self, name)), first_rows(theirs_state)
            if ours is None or theirs is None or not isinstance(getattr(self, name), list):
                continue
            if ours.dtype != theirs.dtype or ours.shape[1:] != theirs.shape[1:]:
                raise IncompatibleStateError(
                    f"{type(self).__name__}.{action}: the incoming state `{name}` holds "
                    f"{_rows_text(theirs)}, ours {_rows_text(ours)}: states of another feature width or "
                    "dtype cannot be merged."
                )
        if isinstance(incoming, BaseMetric):
            ours_layout, theirs_layout = self.input_layout(), incoming.input_layout()
            if None not in (ours_layout, theirs_layout) and ours_layout != theirs_layout:
                raise IncompatibleStateError(
                    f"{type(self).__name__}.{action}: the incoming embeddings are {theirs_layout}, "
                    f"ours {ours_layout} (dtype, width): they cannot be merged."
                )

    def settings_text(self) -> dict[str, str]:
        """Every setting that changes the result (the registry's ``settings``) as stable text."""
        spec = spec_of_class(type(self))
        names = () if spec is None else spec.settings
        return {n: describe_setting(getattr(self, n)) for n in names if hasattr(self, n)}

    def settings_code_all(self) -> Optional[int]:
        """A checksum of ``settings_text``, which every process must share; ``None`` for a metric
        outside the registry."""
        text = self.settings_text()
        return zlib.crc32(repr(sorted(text.items())).encode()) if text else None

    # ------------------------------------------------------------------ settings
    def apply_options(self, values: Mapping[str, Any], record: Optional[Mapping[str, Any]] = None) -> None:
        """Keep checked option values (``read_options`` of the class's option table) as attributes and
        record those that change the meaning of the state (``add_settings_state``; ``record`` adds or
        overrides recorded values)."""
        options = self.options()
        for name, value in values.items():
            setattr(self, name, value)
        recorded = {o.name: values[o.name] for o in options if o.effect == "state" and o.name in values}
        recorded.update(record or {})
        if recorded:
            self.add_settings_state(**recorded)

    def read_options(self, **given: Any) -> dict[str, Any]:
        """Check ``given`` against the class's option table and keep the values (``apply_options``)."""
        values = read_options(type(self).__name__, self.options(), given)
        self.apply_options(values)
        return values

    @classmethod
    def options(cls) -> tuple[Option, ...]:
        """The option table of the class (of the nearest registered class; empty if none)."""
        spec = spec_of_class(cls)
        return () if spec is None else spec.options

    def add_settings_state(self, **settings: Any) -> None:
        """Record the settings that shape what ``update`` stores, as a state of its own.

        ``MetricCollection`` (``compute_groups=True``) merges metrics whose states are equal after the
        first ``update`` and from then on updates only one of them. That is right when the states are
        the raw inputs, but wrong when ``update`` already reduces with a setting (per-query values at
        ``k``, a sum of ``||z1 - z2||^alpha``): the first batch can give equal states for different
        settings (every hit at rank 1 gives hit@1 = hit@10), and the group would then report one
        setting's value for both. With the settings in a state, such metrics are never merged;
        metrics with equal settings still are. The same record makes ``merge_state`` and
        ``load_state_dict`` refuse a state computed with other settings.
        """
        self._settings = {name: describe_setting(value) for name, value in settings.items()}
        code = settings_fingerprint(**self._settings)
        _KNOWN_SETTINGS[float(code)] = dict(self._settings)
        self.add_state("settings_code", default=code, dist_reduce_fx="max")

    def _refuse_other_settings(self, theirs: Mapping[str, str], action: str) -> None:
        check_same_settings(type(self).__name__, self._settings, theirs, action)

    def _refuse_other_settings_code(self, code: Any, action: str) -> None:
        if not self._settings or not isinstance(code, Tensor):
            return
        theirs = float(code.reshape(-1)[0])
        ours: Tensor = getattr(self, "settings_code")  # noqa: B009 (a state: Module.__getattr__ types it badly)
        if theirs == float(ours.reshape(-1)[0]):
            return
        known = _KNOWN_SETTINGS.get(theirs)
        if known is not None:
            self._refuse_other_settings(known, action)
        raise ValueError(
            f"{type(self).__name__}.{action}: the incoming state was computed with different settings "
            f"than ours ({self._settings}); states of different settings cannot be mixed."
        )

    def _refuse_repeated_ids(
        self, incoming: Mapping[str, Any], argument: str, action: str, *, adds: bool
    ) -> None:
        """``update``'s rule on ids, for a whole state: the ids of every ``_unique_id_states`` state in
        ``incoming`` must be unique and, where they are added to ours (``adds``), none of ours.
        ``ValueError`` naming ``argument`` and the ids; touches nothing. Skipped with
        ``validate_args=False``, as ``update`` skips it. A host sync."""
        if not self._unique_id_states or not bool(getattr(self, "validate_args", True)):
            return
        where = f"{type(self).__name__}.{action}: argument `{argument}`"
        for name in self._unique_id_states:
            theirs = _ids_of(incoming.get(name))
            if theirs is None:
                continue
            theirs = torch.sort(theirs).values
            twice = theirs[1:][theirs[1:] == theirs[:-1]]
            if twice.numel():
                raise ValueError(
                    f"{where} must hold unique ids in `{name}`, got {_ids_text(twice)} more than once."
                )
            ours = _ids_of(getattr(self, name)) if adds else None
            if ours is None:
                continue
            ours = torch.sort(ours.to(theirs.device)).values
            at = torch.searchsorted(ours, theirs).clamp_max(ours.numel() - 1)
            known = theirs[ours[at] == theirs]
            if known.numel():
                raise ValueError(
                    f"{where} must hold unique ids in `{name}`, got {_ids_text(known)} already in this "
                    "metric's state (a merge with a copy of itself?); nothing was merged."
                )

    def _refuse_unaligned_rows(self, incoming: Mapping[str, Any], argument: str, action: str) -> None:
        """``update``'s rule that the rows of one group belong together, for a whole state: the stores of
        every ``_aligned_row_stores`` group in ``incoming`` hold as many rows each. ``ValueError`` naming
        ``argument``, the stores and their rows; touches nothing."""
        for group in self._aligned_row_stores:
            rows = {name: _rows_of(incoming[name]) for name in group if name in incoming}
            if len(set(rows.values())) > 1:
                shown = ", ".join(f"`{name}` {n}" for name, n in rows.items())
                raise ValueError(
                    f"{type(self).__name__}.{action}: argument `{argument}` must hold as many rows in each "
                    f"of {', '.join(f'`{n}`' for n in group)}, got {shown}; nothing was changed."
                )

    @property
    def counts_repeated_rows_once(self) -> bool:
        """Whether a row given again with the same id and the same values, on another process or in a
        merged state (a ``DistributedSampler``'s padding), counts once, so that the value is that of the
        distinct rows (the same id with other rows raises). ``False`` unless the metric keys its rows by
        ids (``DenseRetrieval``'s stored queries and corpus)."""
        return False

    def _without_exact_repeats(
        self, incoming: Mapping[str, Any], argument: str, action: str
    ) -> dict[str, Any]:
        """``incoming`` less its rows that repeat one of ours, or an earlier one of its own, exactly: the same
        id in a ``_unique_id_states`` store and equal rows in the other stores of its ``_aligned_row_stores``
        group (an item a sampler's padding evaluated twice; ``_engine/dense/repeats.py``). The same id with
        other rows raises ``ValueError`` naming ``argument``. Touches nothing; skipped with
        ``validate_args=False``, as the id checks. A host sync."""
        out = dict(incoming)
        if not bool(getattr(self, "validate_args", True)):
            return out
        for group in self._aligned_row_stores:
            keyed = [name for name in group if name in self._unique_id_states]
            if len(keyed) != 1 or any(name not in incoming for name in group):
                continue
            theirs = _ids_of(incoming[keyed[0]])
            if theirs is None:
                continue
            ours = _ids_of(getattr(self, keyed[0]))
            n_ours = 0 if ours is None else ours.numel()
            ids = theirs if ours is None else torch.cat([ours.to(theirs.device), theirs])
            if repeated_positions(ids) is None:
                continue
            rows = {name: _joined(getattr(self, name), incoming[name], theirs.device) for name in group}
            where = f"{type(self).__name__}.{action}: argument `{argument}` (`{keyed[0]}`)"
            keep = keep_first(where, ids, [rows[name] for name in group if name != keyed[0]])
            if keep is not None:
                for name in group:
                    kept = rows[name][n_ours:][keep[n_ours:]]
                    out[name] = [kept] if isinstance(incoming[name], list) else kept
        return out

    def merge_state(self, incoming_state: dict[str, Any] | Metric) -> None:
        """torchmetrics' ``merge_state``; a state computed with other settings, or holding ids that
        ``update`` would refuse (``_unique_id_states``), raises ``ValueError`` with nothing merged, and
        the next ``compute`` sees the merged state (torchmetrics would return a value cached before).
        A row that repeats one of ours exactly (the same id and the same rows: an item a sampler's padding
        evaluated on two processes) is merged once; the same id with other rows is refused."""
        theirs: Optional[dict[str, Any]] = None
        if isinstance(incoming_state, BaseMetric) and isinstance(incoming_state, type(self)):
            self._refuse_other_settings(incoming_state._settings, "merge_state")
            theirs = incoming_state.metric_state
        elif isinstance(incoming_state, dict):
            self._refuse_other_settings_code(incoming_state.get("settings_code"), "merge_state")
            theirs = incoming_state
        self._refuse_other_rows(incoming_state, "merge_state")
        if theirs is not None:
            self._refuse_unaligned_rows(theirs, "incoming_state", "merge_state")
            theirs = self._without_exact_repeats(theirs, "incoming_state", "merge_state")
            self._refuse_repeated_ids(theirs, "incoming_state", "merge_state", adds=True)
        super().merge_state(incoming_state if theirs is None else theirs)
        self._computed = None  # torchmetrics keeps the value cached before the merge

    def state_dict(  # type: ignore[override]
        self, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        """torchmetrics' ``state_dict`` (row stores without their buffers' spare room); with persistent
        states it also records the settings."""
        out: dict[str, Any] = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        for name in getattr(self, "_row_stores", ()):
            if isinstance(out.get(prefix + name), list):
                out[prefix + name] = [row_buffer.trimmed(t) for t in out[prefix + name]]
        if self._settings and any(self._persistent.values()):
            text = json.dumps(self._settings, sort_keys=True).encode()
            out[prefix + SETTINGS_KEY] = torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()
        return out

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        saved = state_dict.pop(prefix + SETTINGS_KEY, None)
        if isinstance(saved, Tensor):
            self._refuse_other_settings(json.loads(bytes(saved.cpu().tolist()).decode()), "load_state_dict")
        else:
            self._refuse_other_settings_code(state_dict.get(prefix + "settings_code"), "load_state_dict")
        aligned = {n for group in self._aligned_row_stores for n in group}
        loaded = {
            n: state_dict[prefix + n] for n in {*self._unique_id_states, *aligned} if prefix + n in state_dict
        }
        self._refuse_unaligned_rows(loaded, "state_dict", "load_state_dict")
        self._refuse_repeated_ids(loaded, "state_dict", "load_state_dict", adds=False)
        for name in self._defaults:  # a list of the dict is not ours: appends would write into the dict
            if isinstance(state_dict.get(prefix + name), list):
                state_dict[prefix + name] = list(state_dict[prefix + name])
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
