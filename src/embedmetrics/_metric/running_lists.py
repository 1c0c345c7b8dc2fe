"""Running per-query lists as metric states: the layout of a metric that streams its reference side.

Beside row stores (every row kept until ``compute``) and running sums, a metric may fix its queries
first (``set_queries``, the same on every process) and fold each reference chunk into per-query lists
at once (the engine's running lists: dense retrieval's ``RunningLists``, the kNN vote's lists). Those
lists are states of their own here:

- registered in ``__init__`` with placeholder defaults (``add_running_lists``), so ``persistent``,
  ``state_dict`` and ``load_state_dict`` cover them; ``start_running_lists`` makes the empty lists of
  the query set the defaults, so ``reset`` empties them and keeps the queries;
- kept on their process at a sync (``dist_reduce_fx=None``, listed in the class's
  ``_process_local_states``): ``compute`` merges every process's lists with the engine's collective;
- merged exactly by ``merge_state`` and ``forward`` (``_reduce_states`` calls the class's
  ``merge_running_lists``, the engine's merge of lists of disjoint reference parts), after the query
  sets were checked to be the same (their ids are a state too, ``QUERY_IDS``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from embedmetrics._engine.core.checks import IncompatibleStateError
from embedmetrics._metric.sync import first_rows

#: The state holding the ids (or row numbers) of the query set the running lists belong to.
QUERY_IDS = "stream_query_ids"
#: The state holding a code of each setting the running lists depend on (``_running_settings``).
LIST_SETTINGS = "stream_settings"


class RunningListStates:
    """Mixin for a ``BaseMetric`` whose streamed reference side is folded into running lists (see the
    module docstring). The class names its list states (``_running_states``, engine field -> state
    name) and merges two sets of lists (``merge_running_lists``)."""

    #: Engine field name -> state name of every running-list state (the query ids' state aside).
    _running_states: ClassVar[Mapping[str, str]] = {}
    #: The engine field counting the reference rows folded in.
    _running_count: ClassVar[str] = "n_docs"
    #: The row stores of the stored route: empty while streaming (a state holding rows is not merged in).
    _stored_route_states: ClassVar[tuple[str, ...]] = ()
    #: The settings the running lists depend on (their width, their keys): lists of other values are
    #: never merged or loaded (``IncompatibleStateError`` / ``ValueError`` naming the setting).
    _running_settings: ClassVar[tuple[str, ...]] = ()

    def add_running_lists(self) -> None:
        """Register the list states (before any query set: empty placeholders)."""
        for name in (*self._running_states.values(), QUERY_IDS):
            self.add_state(name, default=torch.zeros(0), dist_reduce_fx=None)  # type: ignore[attr-defined]
        codes = [zlib.crc32(repr(getattr(self, n)).encode()) for n in self._running_settings]
        self.add_state(  # type: ignore[attr-defined]
            LIST_SETTINGS, default=torch.tensor(codes, dtype=torch.int64), dist_reduce_fx=None
        )

    def _refuse_other_list_settings(self, theirs: Any, action: str) -> None:
        """Lists made with other values of ``_running_settings`` are refused, naming the settings."""
        ours = getattr(self, LIST_SETTINGS)
        if (
            not isinstance(theirs, Tensor)
            or theirs.shape != ours.shape
            or torch.equal(theirs.cpu(), ours.cpu())
        ):
            return
        names = [n for n, a, b in zip(self._running_settings, ours.tolist(), theirs.tolist()) if a != b]
        ours_text = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        raise IncompatibleStateError(
            f"{type(self).__name__}.{action}: the incoming running lists were made with other values of "
            f"{', '.join(names)} than ours ({ours_text}); lists of different settings cannot be mixed."
        )

    def refuse_lists_without_queries(self) -> None:
        """``ValueError`` where the lists hold reference rows but no query set is fixed (a state loaded
        or merged into a metric before ``set_queries``): their queries are needed to read them."""
        if self.holds_documents() and not self.is_streaming():
            raise ValueError(
                f"{type(self).__name__}: the state holds running lists of a streamed reference set (loaded "
                "or merged); call `set_queries` with their queries first."
            )

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
        """Lists of other settings refused before anything is loaded."""
        streamed = state_dict.get(prefix + QUERY_IDS)
        if isinstance(streamed, Tensor) and streamed.numel() > 0:  # a stored route's state has no lists
            self._refuse_other_list_settings(state_dict.get(prefix + LIST_SETTINGS), "load_state_dict")
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        fixed = self._defaults.get(QUERY_IDS)  # type: ignore[attr-defined]
        held = getattr(self, QUERY_IDS)
        if self.is_streaming() and self.holds_documents() and not torch.equal(held.cpu(), fixed.cpu()):
            self.forget_queries()  # lists of another query set: theirs must be fixed again

    def forget_queries(self) -> None:
        """Unfix the query set (a loaded state's lists belong to other queries): ``update`` and ``compute``
        ask for ``set_queries`` with the lists' queries (``refuse_lists_without_queries``)."""
        self.__dict__["_streaming"] = False
        self.drop_fixed_queries()

    def drop_fixed_queries(self) -> None:
        """Drop the class's own record of the fixed queries (override)."""

    def is_streaming(self) -> bool:
        """Whether a query set was fixed (``set_queries``): reference chunks are folded, not stored."""
        return bool(self.__dict__.get("_streaming", False))

    def start_running_lists(self, query_ids: Tensor, empty: Mapping[str, Tensor]) -> None:
        """Make ``empty`` (engine field -> tensor) the lists of the query set ``query_ids``: the defaults
        ``reset`` returns to, and the current lists unless those already belong to these queries (a state
        loaded before ``set_queries``: kept, the stream resumes)."""
        held = getattr(self, QUERY_IDS)
        keep = self.holds_documents()
        if keep and not torch.equal(held.cpu(), query_ids.cpu()):
            raise ValueError(
                f"{type(self).__name__}.set_queries: the running lists hold reference rows of another query "
                f"set ({held.shape[0]} queries, got {query_ids.shape[0]}); call `reset` first."
            )
        defaults: dict[str, Tensor] = self._defaults  # type: ignore[attr-defined]
        values = {self._running_states[field]: t for field, t in empty.items()}
        values[QUERY_IDS] = query_ids
        for name, t in values.items():
            defaults[name] = t.detach().clone()
            if not keep:
                setattr(self, name, t.detach().clone())
        self.__dict__["_streaming"] = True

    def holds_documents(self) -> bool:
        """Whether the running lists hold any reference row (of this process)."""
        count = getattr(self, self._running_states.get(self._running_count, ""), None)
        return isinstance(count, Tensor) and count.numel() == 1 and int(count) > 0

    def running_lists(self) -> dict[str, Tensor]:
        """The current lists by engine field name."""
        return {field: getattr(self, name) for field, name in self._running_states.items()}

    def set_running_lists(self, lists: Mapping[str, Tensor]) -> None:
        """Replace the current lists (engine field -> tensor)."""
        for field, t in lists.items():
            setattr(self, self._running_states[field], t)

    def merge_running_lists(self, ours: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The lists of two disjoint reference parts merged (override: the engine's merge)."""
        raise NotImplementedError

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """torchmetrics' merge for the other states; the running lists merged exactly (lists of other
        queries refused with ``IncompatibleStateError``, nothing merged)."""
        names = [*self._running_states.values(), QUERY_IDS]
        ours = {name: getattr(self, name) for name in names}
        theirs = {name: incoming_state[name] for name in names if name in incoming_state}
        self._refuse_mixed_routes(ours, theirs, incoming_state)
        if all(d and d[QUERY_IDS].numel() > 0 for d in (ours, theirs)):  # lists on both sides
            self._refuse_other_list_settings(incoming_state.get(LIST_SETTINGS), "merge_state")
        merged = self._merged_lists(ours, theirs)
        # torchmetrics' pass would stack the incoming lists on ours (of other shapes): it gets ours
        kept = {LIST_SETTINGS: getattr(self, LIST_SETTINGS)}
        super()._reduce_states({**incoming_state, **ours, **kept})  # type: ignore[misc]
        for name, t in {**merged, **kept}.items():
            setattr(self, name, t)

    def _refuse_mixed_routes(
        self, ours: dict[str, Tensor], theirs: dict[str, Tensor], incoming: dict[str, Any]
    ) -> None:
        """A stream's lists and a stored route's rows are never merged (``IncompatibleStateError``)."""
        streams = [bool(d) and d[QUERY_IDS].numel() > 0 for d in (ours, theirs)]
        stored = [
            any(first_rows(getattr(self, n)) is not None for n in self._stored_route_states),
            any(first_rows(incoming.get(n)) is not None for n in self._stored_route_states),
        ]
        if (streams[0] and stored[1]) or (streams[1] and stored[0]):
            raise IncompatibleStateError(
                f"{type(self).__name__}: a streamed state (set_queries) and a state of stored rows cannot be "
                "merged; nothing was merged."
            )

    def _refuse_other_rows(self, incoming: Any, action: str) -> None:
        """The rows' layouts (``BaseMetric``), then the lists: a stream and stored rows, lists of other
        settings and lists of another query set (other ids or other rows) are refused before the ids of
        the reference rows are looked at (``IncompatibleStateError``; nothing merged)."""
        super()._refuse_other_rows(incoming, action)  # type: ignore[misc]
        state = incoming if isinstance(incoming, dict) else getattr(incoming, "metric_state", {})
        names = [*self._running_states.values(), QUERY_IDS]
        ours = {name: getattr(self, name) for name in names}
        theirs = {name: state[name] for name in names if isinstance(state.get(name), Tensor)}
        self._refuse_mixed_routes(ours, theirs, state)
        if len(theirs) == len(ours) and all(d[QUERY_IDS].numel() > 0 for d in (ours, theirs)):
            self._refuse_other_list_settings(state.get(LIST_SETTINGS), action)
            self._refuse_other_queries(ours, theirs)

    def _refuse_other_queries(self, ours: dict[str, Tensor], theirs: dict[str, Tensor]) -> None:
        """Lists of another query set (its ids and rows: ``QUERY_IDS``) are never merged."""
        if not torch.equal(ours[QUERY_IDS].cpu(), theirs[QUERY_IDS].cpu()):
            raise IncompatibleStateError(
                f"{type(self).__name__}: the incoming running lists belong to another query set "
                f"({theirs[QUERY_IDS].shape[0]} queries, ours {ours[QUERY_IDS].shape[0]}): lists of "
                "different queries cannot be merged."
            )

    def _merged_lists(self, ours: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, Tensor]:
        if len(theirs) < len(ours) or not theirs[QUERY_IDS].numel():
            return ours
        if not ours[QUERY_IDS].numel():
            return theirs
        self._refuse_other_queries(ours, theirs)
        by_field = {v: k for k, v in self._running_states.items()}
        mine = {by_field[n]: t for n, t in ours.items() if n != QUERY_IDS}
        other = {by_field[n]: t.to(ours[QUERY_IDS].device) for n, t in theirs.items() if n != QUERY_IDS}
        merged = self.merge_running_lists(mine, other)
        out = {self._running_states[f]: t for f, t in merged.items()}
        out[QUERY_IDS] = ours[QUERY_IDS]
        return out
