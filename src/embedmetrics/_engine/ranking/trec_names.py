"""trec_eval's measures by name: the ``-m NAME[.PARAMS]`` syntax, the nicknames, and what each measure
prints and how it averages over queries (trec_eval 9's ``measures.c`` and ``meas_init.c``). No torch.

A measure with cut-offs prints one value per cut-off (``P_5``, ``iprec_at_recall_0.10``); a measure with
parameters prints one value, named with the parameters as given (``set_F_0.5``, ``ndcg_1=0,2=1``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Kinds of parameters: none, whole cut-offs, fractional cut-offs, numbers, ``level=gain`` pairs.
NONE, LONG_CUTS, FLOAT_CUTS, FLOATS, PAIRS = "none", "long_cuts", "float_cuts", "floats", "pairs"

_DOCS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_TENTHS = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class MeasureKind:
    """How trec_eval declares one measure: its parameters and defaults, how the summary combines the
    queries (``mean``, ``sum``, ``gm``: geometric mean of the values floored at 1e-5, ``count``; ``none``:
    ``runid`` and ``relstring``, text: the run's tag, the grades of a query's first documents), whether it
    prints as an integer, and whether ``-q`` prints it per query."""

    params: str = NONE
    default: tuple[float, ...] = ()
    summary: str = "mean"
    integer: bool = False
    per_query: bool = True


_SUM = MeasureKind(summary="sum", integer=True)
_GAINS = MeasureKind(PAIRS)

#: Every measure of ``-m all_trec`` that a run and qrels determine, in trec_eval's print order.
MEASURES: dict[str, MeasureKind] = {
    "runid": MeasureKind(summary="none", per_query=False),
    "num_q": MeasureKind(summary="count", integer=True, per_query=False),
    "num_ret": _SUM, "num_rel": _SUM, "num_rel_ret": _SUM,
    "map": MeasureKind(), "gm_map": MeasureKind(summary="gm", per_query=False),
    "Rprec": MeasureKind(), "bpref": MeasureKind(), "recip_rank": MeasureKind(),
    "iprec_at_recall": MeasureKind(FLOAT_CUTS, _TENTHS),
    "P": MeasureKind(LONG_CUTS, _DOCS), "relstring": MeasureKind(FLOATS, (10.0,), summary="none"),
    "recall": MeasureKind(LONG_CUTS, _DOCS),
    "infAP": MeasureKind(), "gm_bpref": MeasureKind(summary="gm", per_query=False),
    "Rprec_mult": MeasureKind(FLOAT_CUTS, tuple(i / 5 for i in range(1, 11))),
    "utility": MeasureKind(FLOATS, (1.0, -1.0, 0.0, 0.0)),
    "11pt_avg": MeasureKind(FLOATS, _TENTHS),
    "binG": MeasureKind(), "G": _GAINS, "ndcg": _GAINS, "ndcg_rel": _GAINS, "Rndcg": _GAINS,
    "ndcg_cut": MeasureKind(LONG_CUTS, _DOCS), "map_cut": MeasureKind(LONG_CUTS, _DOCS),
    "relative_P": MeasureKind(LONG_CUTS, _DOCS), "success": MeasureKind(LONG_CUTS, (1, 5, 10)),
    "set_P": MeasureKind(), "set_relative_P": MeasureKind(), "set_recall": MeasureKind(),
    "set_map": MeasureKind(), "set_F": MeasureKind(FLOATS, (1.0,)),
    "num_nonrel_judged_ret": _SUM,
}  # fmt: skip

#: trec_eval's nicknames (``runid``: the run's tag, printed with the summary).
NICKNAMES = {
    "official": (
        "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref",
        "recip_rank", "iprec_at_recall", "P",
    ),
    "all_trec": tuple(MEASURES),  # (trec_eval 10 adds unj, rbp, rbp_resid)
}  # fmt: skip

#: What trec_eval measures that a run and its qrels alone do not determine (refused by name).
NOT_SUPPORTED = ("unj", "rbp", "rbp_resid", "yaap", "dcg", "ideal_dcg")

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class Measure:
    """One requested measure: its name, its parameters (the defaults when none are given) and the text
    of the parameters as given (``None``: the defaults), which names the value of a measure with
    parameters."""

    name: str
    params: tuple[float, ...] = ()
    given: str | None = None
    pairs: tuple[tuple[int, float], ...] = ()  # the ``level=gain`` pairs of the gain measures

    @property
    def kind(self) -> MeasureKind:
        return MEASURES[self.name]

    def labels(self) -> list[str]:
        """The names trec_eval prints for this measure's values (one per cut-off, or one)."""
        kind = self.kind.params
        if kind == LONG_CUTS:
            return [f"{self.name}_{int(c)}" for c in self.params]
        if kind == FLOAT_CUTS:
            return [f"{self.name}_{c:3.2f}" for c in self.params]
        return [self.name if self.given is None else f"{self.name}_{self.given}"]


def _number(measure: str, text: str) -> float:
    if not _NUMBER.fullmatch(text.strip()):
        raise ValueError(f"measure {measure!r}: parameter {text!r} is not a number.")
    return float(text)


def _cutoffs(measure: str, texts: list[str], whole: bool) -> tuple[float, ...]:
    """Cut-offs as trec_eval reads them: sorted, without duplicates; whole cut-offs positive integers."""
    if whole:
        if not all(re.fullmatch(r"\+?\d+", t.strip()) for t in texts):
            bad = next(t for t in texts if not re.fullmatch(r"\+?\d+", t.strip()))
            raise ValueError(f"measure {measure!r}: cut-off {bad!r} is not a positive integer.")
        values: list[float] = sorted(int(t) for t in texts)
        if values[0] <= 0:
            raise ValueError(f"measure {measure!r}: cut-off {values[0]} is not positive.")
    else:
        values = sorted(_number(measure, t) for t in texts)
    repeated = [a for a, b in zip(values, values[1:]) if a == b]
    if repeated:
        raise ValueError(f"measure {measure!r}: cut-off {repeated[0]} is given twice.")
    return tuple(values)


def _pairs(measure: str, texts: list[str]) -> tuple[tuple[int, float], ...]:
    """``level=gain`` pairs: an integer level (trec_eval would read ``a=1`` as level 0), each once."""
    pairs: list[tuple[int, float]] = []
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not re.fullmatch(r"[+-]?\d+", name.strip()) or "=" in value:
            raise ValueError(f"measure {measure!r}: parameter {text!r} is not an integer level=gain pair.")
        if any(level == int(name) for level, _ in pairs):
            raise ValueError(f"measure {measure!r}: level {int(name)} is given twice.")
        pairs.append((int(name), _number(measure, value)))
    return tuple(pairs)


#: Parameters that trec_eval's definitions need within a range: (low, high, low included).
_RANGES = {
    "iprec_at_recall": (0.0, 1.0, True), "11pt_avg": (0.0, 1.0, True), "Rprec_mult": (0.0, math.inf, False),
    "relstring": (1.0, math.inf, True), "set_F": (0.0, math.inf, True),
}  # fmt: skip


def _in_range(measure: str, values: tuple[float, ...]) -> tuple[float, ...]:
    """``values``, refused (``ValueError`` naming the measure) where one is outside the measure's range."""
    if measure in _RANGES:
        low, high, closed = _RANGES[measure]
        for v in values:
            if not (low <= v if closed else low < v) or v > high:
                side = "[" if closed else "("
                raise ValueError(f"measure {measure!r}: parameter {v:g} is outside {side}{low:g}, {high:g}].")
    return values


def parse_measure(spec: str) -> list[Measure]:
    """The measures one ``-m`` argument names: a nickname, or ``NAME`` or ``NAME.PARAMS``.

    Raises ``ValueError`` naming the measure for an unknown name or malformed parameters.
    """
    name, dot, text = spec.partition(".")
    if name in NICKNAMES and not dot:
        return [Measure(n, MEASURES[n].default) for n in NICKNAMES[name]]
    if name in NOT_SUPPORTED:
        raise ValueError(f"measure {name!r} is not supported (it needs more than a run and its qrels).")
    if name not in MEASURES:
        raise ValueError(f"unknown measure {name!r} (see trec_eval's names; nicknames: official, all_trec).")
    kind = MEASURES[name]
    if not dot:
        return [Measure(name, kind.default)]
    if kind.params == NONE:
        raise ValueError(f"measure {name!r} takes no parameters, got {text!r}.")
    texts = text.split(",")
    if any(not t.strip() for t in texts):
        raise ValueError(f"measure {name!r}: empty parameter in {text!r}.")
    if kind.params == PAIRS:
        return [Measure(name, (), text, _pairs(name, texts))]
    if kind.params == FLOATS:
        if name == "utility" and len(texts) != 4:
            raise ValueError(f"measure 'utility' takes 4 coefficients, got {len(texts)}: {text!r}.")
        return [Measure(name, _in_range(name, tuple(_number(name, t) for t in texts)), text)]
    return [Measure(name, _in_range(name, _cutoffs(name, texts, whole=kind.params == LONG_CUTS)))]


def parse_measures(specs: Sequence[str]) -> list[Measure]:
    """The measures of every ``-m`` argument, in trec_eval's print order. trec_eval keeps one set of
    parameters per measure: the first given explicitly (``-m P.5 -m P.10``: ``P_5``), else the defaults
    (a nickname's or the bare name's)."""
    chosen: dict[str, Measure] = {}
    explicit: set[str] = set()
    for spec in specs:
        for measure in parse_measure(spec):
            if measure.name in explicit:
                continue
            if measure.name not in chosen or "." in spec:
                chosen[measure.name] = measure
            if "." in spec:
                explicit.add(measure.name)
    order = list(MEASURES)
    return sorted(chosen.values(), key=lambda m: order.index(m.name))
