"""trec_eval's measures by name: the ``-m NAME[.PARAMS]`` syntax, the nicknames, and what each measure
prints and how it averages over queries (``measures.c`` and ``meas_init.c`` of trec_eval 10.0 and
9.0.8; ``version`` picks one). No torch.

A measure with cut-offs prints one value per cut-off (``P_5``, ``iprec_at_recall_0.10``); a measure with
parameters prints one value, named with the parameters as given (``set_F_0.5``, ``ndcg_1=0,2=1``).
Parameters are read as trec_eval reads them (``meas_init.c``): whole cut-offs with C's ``atol``
(``ndcg_cut.23.4`` is ``ndcg_cut_23``), sorted, each once and positive; fractional cut-offs with
``atof``, sorted, each once; ``name=value`` pairs; a measure without parameters ignores them. Text that
trec_eval would read as another number (``P.5x``, ``map_cut.abc``) is refused in one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Kinds of parameters: none, whole cut-offs, fractional cut-offs, numbers, ``name=value`` pairs.
NONE, LONG_CUTS, FLOAT_CUTS, FLOATS, PAIRS = "none", "long_cuts", "float_cuts", "floats", "pairs"

#: The trec_eval versions whose measures are computed: 10.0 (the default) and 9.0.8 (pytrec_eval's).
VERSIONS = (10, 9)

_DOCS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_TENTHS = tuple(i / 10 for i in range(11))
_BOTH = (9, 10)


@dataclass(frozen=True)
class MeasureKind:
    """How trec_eval declares one measure: its parameters and defaults, how the summary combines the
    queries (``mean``, ``sum``, ``gm``: geometric mean of the values floored at 1e-5, ``count``; ``none``:
    ``runid`` and ``relstring``, text: the run's tag, the grades of a query's first documents), whether it
    prints as an integer, whether ``-q`` prints it per query, and the versions that know it."""

    params: str = NONE
    default: tuple[float, ...] = ()
    summary: str = "mean"
    integer: bool = False
    per_query: bool = True
    versions: tuple[int, ...] = _BOTH


_SUM = MeasureKind(summary="sum", integer=True)
_GAINS = MeasureKind(PAIRS)
_TEN = (10,)

#: Every measure that a run and qrels determine, in trec_eval's print order (``measures.c``).
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
    "binG": MeasureKind(), "G": _GAINS,
    "dcg": MeasureKind(PAIRS, versions=_TEN), "ideal_dcg": MeasureKind(PAIRS, versions=_TEN),
    "ndcg": _GAINS, "ndcg_rel": _GAINS, "Rndcg": _GAINS,
    "ndcg_cut": MeasureKind(LONG_CUTS, _DOCS), "map_cut": MeasureKind(LONG_CUTS, _DOCS),
    "relative_P": MeasureKind(LONG_CUTS, _DOCS), "success": MeasureKind(LONG_CUTS, (1, 5, 10)),
    "set_P": MeasureKind(), "set_relative_P": MeasureKind(), "set_recall": MeasureKind(),
    "set_map": MeasureKind(), "set_F": MeasureKind(FLOATS, (1.0,)),
    "num_nonrel_judged_ret": _SUM,
    "yaap": MeasureKind(),
    "rbp": MeasureKind(PAIRS, versions=_TEN), "rbp_resid": MeasureKind(PAIRS, versions=_TEN),
    "unj": MeasureKind(LONG_CUTS, (5, 10, 20), versions=_TEN),
}  # fmt: skip

_OFFICIAL = (
    "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref",
    "recip_rank", "iprec_at_recall", "P",
)  # fmt: skip
_ALL_TREC_9 = (
    *_OFFICIAL, "relstring", "recall", "infAP", "gm_bpref", "utility", "11pt_avg", "ndcg", "relative_P",
    "Rprec_mult", "success", "map_cut", "ndcg_cut", "ndcg_rel", "Rndcg", "binG", "G", "set_P",
    "set_recall", "set_relative_P", "set_map", "set_F", "num_nonrel_judged_ret",
)  # fmt: skip

#: trec_eval's nicknames per version (``runid``: the run's tag, printed with the summary).
NICKNAMES: dict[int, dict[str, tuple[str, ...]]] = {
    9: {
        "official": _OFFICIAL,
        "set": ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_recall",
                "set_relative_P", "set_map", "set_F"),
        "all_trec": _ALL_TREC_9,
    },
}  # fmt: skip
NICKNAMES[10] = {**NICKNAMES[9], "all_trec": (*_ALL_TREC_9, "unj", "rbp", "rbp_resid")}

_PREFS = (
    "prefs_num_prefs_poss", "prefs_num_prefs_ful", "prefs_num_prefs_ful_ret", "prefs_simp", "prefs_pair",
    "prefs_avgjg", "prefs_avgjg_Rnonrel", "prefs_simp_ret", "prefs_pair_ret", "prefs_avgjg_ret",
    "prefs_avgjg_Rnonrel_ret", "prefs_simp_imp", "prefs_pair_imp", "prefs_avgjg_imp", "all_prefs", "prefs",
)  # fmt: skip
#: What trec_eval measures that a run and its qrels alone do not determine (refused by name), and why.
NOT_SUPPORTED: dict[str, str] = {
    **dict.fromkeys(_PREFS, "it needs preference judgements (trec_eval -R prefs)"),
    **dict.fromkeys(("map_avgjg", "P_avgjg", "Rprec_mult_avgjg", "qrels_jg"),
                    "it needs judgement groups (trec_eval -R qrels_jg)"),
}  # fmt: skip

#: Measures of one trec_eval 10 source file that share its parameters (``m_ndcg.c``).
_SHARED = ("ndcg", "dcg", "ideal_dcg")

_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_WHOLE = re.compile(r"\s*[+-]?\d+(\.\d*)?")  # atol reads the integer part; a decimal part is dropped
_INT = re.compile(r"[+-]?\d+")  # trec_eval 10's ``valid_int`` (``gain_init.c``)


@dataclass(frozen=True)
class Measure:
    """One requested measure: its name, its parameters (the defaults when none are given), the text of
    the parameters as given (``None``: the defaults), which names the value of a measure with
    parameters, and for the ``name=value`` measures the pairs as given and the ``level=gain`` pairs that
    set gains (the levels trec_eval reads as integers)."""

    name: str
    params: tuple[float, ...] = ()
    given: str | None = None
    pairs: tuple[tuple[int, float], ...] = ()  # the ``level=gain`` pairs of the gain measures
    named: tuple[tuple[str, float], ...] = ()  # every ``name=value`` pair as given (rbp's ``p``)

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


class CutoffError(ValueError):
    """A cut-off trec_eval refuses when it initialises the measure (not positive, or given twice):
    "Cannot initialize measure", exit status 2 (``meas_init.c``), where a bad name exits 1."""


def _number(measure: str, text: str) -> float:
    """C's ``atof`` of a parameter that is a number (``5``, ``.5``, ``2.``, ``1e-3``), else refused."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"measure {measure!r}: parameter {text!r} is not a number.")
    return float(text)


def _whole(measure: str, text: str) -> int:
    """C's ``atol`` of a cut-off written as a number (``23.4``: 23, as trec_eval reads it), else refused."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"measure {measure!r}: cut-off {text!r} is not a number (trec_eval would read "
                         f"{_atol(text)}).")  # fmt: skip
    value = int(text.strip().split(".")[0])
    if abs(value) >= 2**31:  # comp_long compares through an int: trec_eval misorders such cut-offs
        raise ValueError(f"measure {measure!r}: cut-off {value} is not below 2**31 (trec_eval misorders it).")
    return value


def _atol(text: str) -> int:
    found = re.match(r"\s*[+-]?\d+", text)
    return int(found.group()) if found else 0


def _cutoffs(measure: str, texts: list[str], whole: bool) -> tuple[float, ...]:
    """Cut-offs as trec_eval reads them (``get_long_cutoffs``, ``get_double_cutoffs``): sorted; a repeated
    one refused; whole cut-offs positive."""
    values: list[float] = sorted(_whole(measure, t) if whole else _number(measure, t) for t in texts)
    if whole and values[0] <= 0:
        raise CutoffError(f"measure {measure!r}: cut-off {values[0]} is not positive.")
    repeated = [a for a, b in zip(values, values[1:]) if a == b]
    if repeated:
        raise CutoffError(f"measure {measure!r}: cut-off {repeated[0]:g} is given twice.")
    return tuple(values)


def _named(measure: str, text: str) -> tuple[tuple[str, float], ...]:
    """``name=value`` pairs as ``get_param_pairs`` reads them: no empty pair, one ``=`` each."""
    pairs = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or "=" in value:
            raise ValueError(f"measure {measure!r}: malformed pair parameters in {text!r} (name=value,...).")
        pairs.append((name, _number(measure, value) if value else 0.0))
    return tuple(pairs)


def _gain_pairs(measure: str, named: tuple[tuple[str, float], ...], version: int
                ) -> tuple[tuple[int, float], ...]:  # fmt: skip
    """The ``level=gain`` pairs (``setup_gains``): trec_eval 10 skips a name that is not an integer
    (``rbp``'s ``p``); 9 would read it as level 0 (``atol``): refused there. A level given twice is
    refused (trec_eval's gain then depends on its sort)."""
    pairs: list[tuple[int, float]] = []
    for name, value in named:
        if not _INT.fullmatch(name):
            if version == 10:
                continue
            raise ValueError(f"measure {measure!r}: level {name!r} is not an integer (trec_eval 9 reads it "
                             f"as {_atol(name)}).")  # fmt: skip
        if any(level == int(name) for level, _ in pairs):
            raise ValueError(f"measure {measure!r}: level {int(name)} is given twice.")
        pairs.append((int(name), value))
    return tuple(pairs)


#: Parameters that trec_eval's definitions need within a range: (low, high, low included).
_RANGES = {
    "iprec_at_recall": (0.0, 1.0, True), "11pt_avg": (0.0, 1.0, True), "Rprec_mult": (0.0, math.inf, False),
    "set_F": (0.0, math.inf, True),
}  # fmt: skip


def _in_range(measure: str, values: tuple[float, ...]) -> tuple[float, ...]:
    """``values``, refused (``ValueError`` naming the measure) where one is outside the measure's range
    (11pt_avg's points must increase: trec_eval's loop reads them in order)."""
    if measure in _RANGES:
        low, high, closed = _RANGES[measure]
        for v in values:
            if not (low <= v if closed else low < v) or v > high:
                side = "[" if closed else "("
                raise ValueError(f"measure {measure!r}: parameter {v:g} is outside {side}{low:g}, {high:g}].")
    if measure == "11pt_avg" and any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"measure '11pt_avg': recall points {values} do not increase.")
    return values


def _check_version(version: int) -> None:
    if version not in VERSIONS:
        raise ValueError(f"version must be 10 or 9 (trec_eval 10.0 or 9.0.8), got {version!r}.")


def _known(name: str, version: int) -> MeasureKind:
    """The declaration of a measure that ``version`` knows, else ``ValueError`` naming it."""
    if name in NOT_SUPPORTED:
        raise ValueError(f"measure {name!r} is not supported: {NOT_SUPPORTED[name]}.")
    if name not in MEASURES:
        from embedmetrics._engine.trec_eval.aliases import unknown  # (it reads this module's tables)

        raise ValueError(unknown(name, version))
    if version not in MEASURES[name].versions:
        raise ValueError(f"unknown measure {name!r} in trec_eval {version} (trec_eval 10 has it); "
                         f"nicknames: {', '.join(NICKNAMES[version])}.")  # fmt: skip
    return MEASURES[name]


def parse_measure(spec: str, version: int = 10) -> list[Measure]:
    """The measures one ``-m`` argument names: a nickname, or ``NAME`` or ``NAME.PARAMS`` (everything
    after the first ``.``), as trec_eval ``version`` reads them.

    Raises ``ValueError`` naming the measure for an unknown name or parameters trec_eval refuses.
    """
    _check_version(version)
    name, dot, text = spec.partition(".")
    if dot and not text:
        raise ValueError(f"measure {name!r}: nothing after '.' in {spec!r} (trec_eval: improper measure).")
    if name in NICKNAMES[version]:  # parameters of a nickname name no measure: trec_eval ignores them
        return [Measure(n, MEASURES[n].default) for n in NICKNAMES[version][name]]
    kind = _known(name, version)
    if not dot or kind.params == NONE:  # a measure without parameters ignores them, as trec_eval does
        return [Measure(name, kind.default)]
    texts = text.split(",")
    if kind.params == PAIRS:
        named = _named(name, text)
        return [Measure(name, (), text, _gain_pairs(name, named, version), named)]
    if kind.params == FLOATS:
        need = 4 if name == "utility" else 1
        if len(texts) < need:
            raise ValueError(f"measure {name!r} takes {need} coefficients, got {len(texts)}: {text!r}.")
        return [Measure(name, _in_range(name, tuple(_number(name, t) for t in texts)), text)]
    return [Measure(name, _in_range(name, _cutoffs(name, texts, whole=kind.params == LONG_CUTS)))]


def parse_measures(specs: Sequence[str], version: int = 10) -> list[Measure]:
    """The measures of every ``-m`` argument, in trec_eval's print order. trec_eval keeps one set of
    parameters per measure: the first given explicitly (``-m P.5 -m P.10``: ``P_5``; the later ones are
    not read), else the defaults (a nickname's or the bare name's)."""
    _check_version(version)
    chosen: dict[str, Measure] = {}
    explicit: set[str] = set()
    for spec in specs:
        name, dot, _ = spec.partition(".")
        if name in explicit:
            continue
        for measure in parse_measure(spec, version):
            named_here = bool(dot) and measure.name == name
            if measure.name not in chosen or named_here:
                chosen[measure.name] = measure
            if named_here:
                explicit.add(name)
    shared = [name for name in _SHARED if name in chosen]
    if len(shared) > 1 and explicit & set(shared):
        together = " and ".join(map(repr, shared))
        raise ValueError(f"measures {together} share one set of parameters in trec_eval 10 (given "
                         "parameters for one of them with another, it crashes): ask for them in separate "
                         "calls.")  # fmt: skip
    order = list(MEASURES)
    return sorted(chosen.values(), key=lambda m: order.index(m.name))
