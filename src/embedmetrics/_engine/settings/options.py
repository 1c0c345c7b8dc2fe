"""One ``Option`` per setting: its name, type, default, check, meaning and document line.

Every metric's settings are declared once, as a table of ``Option``s in its family's ``options``
module (``embedmetrics._engine.<family>.options``, keyed by the registry's name of the metric). From
that table come

- the checks of the constructor and of the functional twin (``read_options``);
- the settings every process must agree on at a sync and those that change the meaning of the stored
  state, which ``merge_state`` and ``load_state_dict`` guard (the registry's ``settings`` and
  ``state_settings``; ``BaseMetric.read_options`` records the latter);
- the settings tables of the API reference (``docs/hooks/registry_tables.py``);
- the flags of ``embedmetrics report`` that set a metric's option (``cli`` below).

No torch is imported here (the command line builds its flags from these tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from embedmetrics._engine.settings.arguments import (
    ArgumentKindError,
    check_block_bytes,
    check_bool,
    check_choice,
    check_number,
)
from embedmetrics._engine.settings.policies import TIES

Check = Callable[[str, Any], Any]


def _as_given(name: str, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """One setting.

    ``check(name, value)`` validates a value (raising with the argument named) and returns it as the
    metric keeps it. ``effect``: ``"state"`` (the stored state means something else under another
    value: merging or loading such a state is refused), ``"result"`` (the result changes, the state
    does not: every process must agree) or ``"none"`` (never changes a value: ``validate_args``,
    ``block_bytes``). ``cli``: the option is also a flag of ``embedmetrics report`` (``--name``).
    """

    name: str
    annotation: str
    default: Any
    doc: str
    check: Check = _as_given
    effect: str = "result"
    choices: tuple[str, ...] = ()
    cli: bool = False

    def __post_init__(self) -> None:
        check_choice("effect", self.effect, ("state", "result", "none"))

    def read(self, value: Any) -> Any:
        """The checked value."""
        return self.check(self.name, value)

    def with_default(self, default: Any) -> Option:
        """This option with another default."""
        return replace(self, default=default)

    def changing(self, effect: str) -> Option:
        """This option with another ``effect`` (the same name means another thing to the state)."""
        return replace(self, effect=effect)

    @property
    def flag(self) -> str:
        """The command line flag (``--name`` with dashes)."""
        return "--" + self.name.replace("_", "-")


def read_options(owner: str, options: Sequence[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of ``options``: the checked value given, else its default.

    A name that is not an option of ``owner`` raises ``ArgumentKindError`` (a ``TypeError``,
    ``refuse_other_settings``).
    """
    refuse_other_settings(owner, options, given)
    return {o.name: (o.read(given[o.name]) if o.name in given else o.default) for o in options}


#: Other names of options some faces take: torchmetrics' ``top_k`` is the retrieval metrics' ``k``.
ALIASES = {"top_k": "k"}


def refuse_other_settings(
    owner: str,
    options: Sequence[Option],
    given: Mapping[str, Any],
    reasons: Mapping[str, str] | None = None,
    also: Sequence[str] = (),
) -> None:
    """``ArgumentKindError`` (a ``TypeError`` and a ``ValueError``) for the first name of ``given`` that
    is no option of ``options`` nor one of ``also`` (keywords the owner takes beyond its settings:
    torchmetrics ``Metric``'s own): the message names ``owner``, the argument and its value, why
    ``owner`` has no such setting where ``reasons`` says, and the settings it has."""
    known = {o.name for o in options} | set(also)
    for name, value in given.items():
        if name in known:
            continue
        why = (reasons or {}).get(name)
        settings = ", ".join(o.name for o in options) or "none"
        beyond = f" It also takes torchmetrics' Metric keywords: {', '.join(also)}." if also else ""
        raise ArgumentKindError(
            f"{owner} has no argument `{name}`, got {name}={value!r}{f': {why}' if why else ''}. Its "
            f"settings: {settings}.{beyond}"
        )


def options_in(options: Sequence[Option], scope: Mapping[str, Any]) -> dict[str, Any]:
    """The values ``scope`` (a face's ``locals()``) gives to the options of ``options``."""
    return {o.name: scope[o.name] for o in options if o.name in scope}


# ----------------------------------------------------------------------------- checks


def choice(*choices: str) -> Check:
    """A check that the value is one of ``choices``."""

    def check(name: str, value: Any) -> Any:
        check_choice(name, value, choices)
        return value

    return check


def number(*, positive: bool = False) -> Check:
    """A check that the value is a (positive) finite real number; returns it as a float."""
    return lambda name, value: check_number(name, value, positive=positive)


def optional(check: Check) -> Check:
    """``None`` or what ``check`` accepts."""
    return lambda name, value: None if value is None else check(name, value)


def check_aggregation(name: str, value: Any) -> Any:
    """One of ``AGGREGATIONS`` or a callable ``f(values, dim=0)``."""
    if not (callable(value) or (isinstance(value, str) and value in AGGREGATIONS)):
        raise ValueError(f"Argument `{name}` must be one of {AGGREGATIONS} or a callable, got {value!r}.")
    return value


# ----------------------------------------------------------------------------- shared options

#: How per-query values are reduced.
AGGREGATIONS = ("mean", "median", "min", "max", "none")
AGGREGATION = Option(
    "aggregation",
    "str | Callable",
    "mean",
    "how per-query values are reduced: ``mean``, ``median``, ``min``, ``max``, ``none`` (one value per "
    "query) or a callable ``f(values, dim=0)``",
    check_aggregation,
)

VALIDATE_ARGS = Option(
    "validate_args",
    "bool",
    True,
    "check the values of every batch (NaN, infinities, ranges): a host sync; off, only shapes and "
    "kinds are checked",
    check_bool,
    effect="none",
)
BLOCK_BYTES = Option(
    "block_bytes",
    "int | None",
    None,
    "memory budget of one similarity block, in bytes; ``None`` chooses it for the device (32 MiB on "
    "the CPU); the values do not depend on it",
    lambda name, value: check_block_bytes(value),
    effect="none",
)
TIES_OPTION = Option(
    "ties",
    "str",
    "average",
    "tie policy: ``average`` (the expected value under a random order of tied items), "
    "``pessimistic`` or ``optimistic`` (docs/ties.md)",
    choice(*TIES),
    choices=TIES,
)
NORMALIZE = Option("normalize", "bool", True, "L2-normalise rows first (cosine similarity)", check_bool)
EPS = Option("eps", "float", 1e-12, "lower bound of a norm (or eigenvalue) before dividing", number())
