"""Measures by the names users type: trec_eval's (``ndcg_cut.10``, ``map``, ``P.5``) and ir_measures'
(PyTerrier's: ``nDCG@10``, ``AP@100``, ``P(rel=2)@5``, ``RR@10``, ``Judged@10``, ...), each read into
a ``Request``: the trec_eval measure that computes it, at which relevance level, on the judged documents
only or not, and the name its value is returned under. No torch.

ir_measures' syntax is ``NAME(param=value,...)@cutoff``. Each name is translated as ir_measures'
pytrec_eval provider hands it to trec_eval (``P@k``: ``P.k``; ``AP@k``: ``map_cut.k``; ``nDCG@k``:
``ndcg_cut.k``; ``R@k``: ``recall.k``; ``RR``: ``recip_rank``; ``IPrec@x``: ``iprec_at_recall.x``;
``rel=``: trec_eval's ``-l``; ``judged_only=True``: ``-J``). Two have no trec_eval measure and are
computed here on trec_eval's ranking (score descending, then docno descending): ``Judged@k`` (the share
of the first ``k`` documents, or of the list where shorter, that the qrels judge) and ``RR@k`` (the
reciprocal rank of the first relevant document within the first ``k``, else 0). ir_measures computes
those two with its own code, which breaks ties by docno ascending; on tied runs the values can differ.

An unknown name is refused in one line naming the nearest spellings in both vocabularies.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from embedmetrics._engine.trec_eval.names import (
    FLOAT_CUTS,
    LONG_CUTS,
    MEASURES,
    NICKNAMES,
    MeasureKind,
    parse_measure,
)

#: What ``Request.own`` names: the measures computed here (no trec_eval measure has them).
JUDGED, RR_CUT = "judged", "rr_cut"

_SYNTAX = re.compile(r"(?P<name>[A-Za-z_]\w*)(?:\((?P<params>[^()]*)\))?(?:@(?P<cut>[^@()]+))?")


@dataclass(frozen=True)
class Request:
    """One measure asked for: ``label`` (the name its value is returned under), ``spec`` (the trec_eval
    ``-m`` argument that computes it; for ``own`` measures the ranking's depth), ``value`` (the label of
    the trec_eval value to read), ``relevance_level`` (``-l``), ``judged_only`` (``-J``), ``own``
    (``JUDGED`` or ``RR_CUT``: computed here) with its ``cutoff`` (``None``: the whole list), and
    ``trec_eval_name``: whether it is trec_eval's own name (its every value is returned under
    trec_eval's labels)."""

    label: str
    spec: str
    value: str
    relevance_level: int = 1
    judged_only: bool = False
    own: str | None = None
    cutoff: int | None = None
    trec_eval_name: bool = False


@dataclass(frozen=True)
class _Name:
    """An ir_measures name: the trec_eval measure, whether the name needs a cut-off (``True``), takes one
    (``None``) or none (``False``), and the parameters it takes."""

    measure: str
    cut: bool | None
    params: tuple[str, ...] = ("rel", "judged_only")


_P = _Name("P", True)
_AP = _Name("map", None)
_NDCG = _Name("ndcg", None, ("judged_only", "dcg"))
_RR = _Name("recip_rank", None)
_RPREC = _Name("Rprec", False)
_BPREF = _Name("bpref", False, ("rel",))
_SETP = _Name("set_P", False, ("rel", "judged_only", "relative"))

#: ir_measures' names (and its aliases) of the measures it hands to trec_eval, and its own two.
IR_MEASURES: dict[str, _Name] = {
    "P": _P, "Precision": _P, "AP": _AP, "MAP": _AP, "nDCG": _NDCG, "NDCG": _NDCG,
    "R": _Name("recall", True), "Recall": _Name("recall", True),
    "RR": _RR, "MRR": _RR, "Rprec": _RPREC, "RPrec": _RPREC, "Bpref": _BPREF, "BPref": _BPREF,
    "infAP": _Name("infAP", False, ("rel",)), "NumQ": _Name("num_q", False, ()),
    "NumRet": _Name("num_ret", False, ("rel",)), "NumRelRet": _Name("num_rel_ret", False, ("rel",)),
    "NumRel": _Name("num_rel", False, ("rel",)), "SetAP": _Name("set_map", False),
    "SetF": _Name("set_F", False, ("rel", "judged_only", "beta")), "SetP": _SETP,
    "SetRelP": _Name("set_relative_P", False), "SetR": _Name("set_recall", False, ("rel",)),
    "Success": _Name("success", True), "IPrec": _Name("iprec_at_recall", True),
    "Judged": _Name(JUDGED, None, ()),
}  # fmt: skip


def kind_of(request: Request, version: int = 10) -> MeasureKind | None:
    """How trec_eval declares the measure of ``request``'s value (the one of a nickname's measures that
    prints it); ``None`` for the measures computed here."""
    if not request.spec:
        return None
    return next(m.kind for m in parse_measure(request.spec, version) if request.value in m.labels())


def resolve(names: Sequence[str], version: int = 10) -> list[Request]:
    """Each name read as trec_eval's (a trec_eval name that ir_measures also has, ``Rprec``, is read as
    trec_eval's) or else as ir_measures'; ``ValueError`` naming the nearest spellings otherwise."""
    if isinstance(names, str):
        raise TypeError(f"Argument `measures` must be a list of measure names, got the string {names!r}.")
    out: list[Request] = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"Argument `measures` must hold measure names, got {name!r}.")
        out += _resolve_one(name.strip(), version)
    return out


def _resolve_one(name: str, version: int) -> list[Request]:
    if any(c.isspace() for c in name):
        raise ValueError(f"measure {name!r} holds a space: give one name per item (['P@5', 'P@10']).")
    base = name.partition(".")[0]
    if base in MEASURES or base in NICKNAMES[version]:
        return [
            Request(label, name, label, trec_eval_name=True)
            for measure in parse_measure(name, version)
            for label in measure.labels()
        ]
    found = _SYNTAX.fullmatch(name)
    if found is None or found["name"] not in IR_MEASURES:
        raise ValueError(unknown(name, version))
    return [_ir_request(name, IR_MEASURES[found["name"]], found["params"], found["cut"], version)]


def _ir_request(name: str, entry: _Name, params: str | None, cut: str | None, version: int) -> Request:
    """The request of one ir_measures name (its parameters checked)."""
    given = _params(name, params or "", entry.params)
    if entry.cut is True and cut is None:
        raise ValueError(f"measure {name!r} needs a cut-off: {name}@10, for example.")
    if entry.cut is False and cut is not None:
        raise ValueError(f"measure {name!r} takes no cut-off (@{cut}).")
    level, judged = int(given.get("rel", 1)), bool(given.get("judged_only", False))
    if entry.measure == JUDGED:
        return Request(name, "", "", own=JUDGED, cutoff=None if cut is None else _count(name, cut))
    measure = entry.measure
    if entry.measure == "recip_rank" and cut is not None:
        return Request(name, "", "", level, judged, own=RR_CUT, cutoff=_count(name, cut))
    if entry.measure == "num_ret" and "rel" in given:  # ir_measures: NumRelRet is NumRet(rel=1)
        measure = "num_rel_ret"
    if entry.measure == "set_P" and given.get("relative"):
        measure = "set_relative_P"
    if entry.measure in ("map", "ndcg") and cut is not None:
        measure += "_cut"
    if cut is not None:
        cut = _recall_point(name, cut) if entry.measure == "iprec_at_recall" else str(_count(name, cut))
    spec = measure if cut is None else f"{measure}.{cut}"
    if "beta" in given:
        spec = f"{measure}.{given['beta']!r}"
    try:
        parsed = parse_measure(spec, version)[0]
    except ValueError as err:  # named as the user wrote it, not as trec_eval's measure
        raise ValueError(str(err).replace(repr(measure), repr(name))) from None
    return Request(name, spec, parsed.labels()[0], level, judged)


def _recall_point(name: str, text: str) -> str:
    try:
        point = float(text)
    except ValueError:
        point = float("nan")
    if not 0.0 <= point <= 1.0:
        raise ValueError(f"measure {name!r}: recall point {text!r} is not a number in [0, 1].")
    return text


def _count(name: str, text: str) -> int:
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise ValueError(f"measure {name!r}: cut-off {text!r} is not a positive whole number.")
    return int(text)


def _params(name: str, text: str, allowed: tuple[str, ...]) -> dict[str, float | int | bool]:
    """``rel=2,judged_only=True`` as values; a parameter the measure does not take refused by name."""
    out: dict[str, float | int | bool] = {}
    for item in filter(None, (part.strip() for part in re.split(r",(?![^{]*})", text))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if key == "gains":
            raise ValueError(f"measure {name!r}: gains= is not taken; trec_eval's ndcg sets a gain per grade "
                             "(-m ndcg.0=0,1=1,2=5, ndcg_cut does not).")  # fmt: skip
        if key == "dcg" and key in allowed and value.strip("'\"") == "log2":
            continue  # ir_measures' default, the only discount trec_eval has
        if not sep or key not in allowed:
            takes = ", ".join(allowed) if allowed else "no parameters"
            raise ValueError(f"measure {name!r}: parameter {item!r} is not one it takes ({takes}).")
        out[key] = _param_value(name, key, value)
    return out


def _param_value(name: str, key: str, value: str) -> float | int | bool:
    if key in ("judged_only", "relative"):
        if value not in ("True", "False"):
            raise ValueError(f"measure {name!r}: {key} must be True or False, got {value!r}.")
        return value == "True"
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"measure {name!r}: {key} must be a number, got {value!r}.") from None
    if key == "rel":
        if number != int(number) or number < 0:
            raise ValueError(f"measure {name!r}: rel must be a whole number, 0 or more, got {value!r}.")
        return int(number)
    return number


#: trec_eval's measure with a cut-off written the ir_measures way (``ndcg_cut`` is ``nDCG@k``), for the
#: nearest spellings.
_TO_IR = {"ndcg_cut": "nDCG", "ndcg": "nDCG", "map": "AP", "map_cut": "AP", "P": "P", "recall": "R",
          "recip_rank": "RR", "success": "Success", "iprec_at_recall": "IPrec", "num_q": "NumQ",
          "num_ret": "NumRet", "num_rel": "NumRel", "num_rel_ret": "NumRelRet", "set_P": "SetP",
          "set_recall": "SetR", "set_F": "SetF", "set_map": "SetAP", "bpref": "Bpref", "infAP": "infAP",
          "Rprec": "Rprec"}  # fmt: skip
_TO_TREC = {ir: entry.measure for ir, entry in IR_MEASURES.items() if entry.measure in MEASURES}


def unknown(name: str, version: int) -> str:
    """One line: ``name`` is no measure, and the nearest spellings in trec_eval's and ir_measures'
    vocabularies (a cut-off given carried over: ``nDGC@10`` suggests ``nDCG@10`` and ``ndcg_cut.10``)."""
    hint = _known_elsewhere(name, version)
    if hint:
        return hint
    typed = name
    label = re.fullmatch(r"(?P<base>[A-Za-z_]+?)_(?P<cut>\d+(\.\d+)?)", name)  # a label: P_5, ndcg_cut_10
    if label and label["base"] in MEASURES:
        name = f"{label['base']}.{label['cut']}"
    found = re.fullmatch(r"(?P<base>[^.@(]*)(?P<rest>.*)", name)
    base, rest = (found["base"], found["rest"]) if found else (name, "")
    cut = rest[1:] if rest[:1] in ".@" else ""
    with_cuts = [n for n in MEASURES if MEASURES[n].params in (LONG_CUTS, FLOAT_CUTS)]
    trec_names = with_cuts if cut else [*MEASURES, *NICKNAMES[version]]
    ir_names = [n for n, e in IR_MEASURES.items() if e.cut is not False or not cut]
    ir, trec = _nearest(base, ir_names), _nearest(base, trec_names)
    ir = ir or [_TO_IR[t] for t in trec if t in _TO_IR]
    trec = trec or [_TO_TREC[n] for n in ir if n in _TO_TREC]
    shown = [f"{n}@{cut}" if cut else n for n in ir[:2]]
    shown += [f"{_cut_name(n, bool(cut))}.{cut}" if cut else n for n in trec[:2]]
    if not shown:
        return (f"unknown measure {typed!r}: not a trec_eval name (map, ndcg_cut.10, P.5, ...) nor an "
                "ir_measures name (AP, nDCG@10, P@5, ...).")  # fmt: skip
    return f"unknown measure {typed!r}; did you mean {' or '.join(dict.fromkeys(shown))}?"


def _known_elsewhere(name: str, version: int) -> str:
    """The message for a name that is right in the other vocabulary or misplaces a cut-off: an ir_measures
    name where only trec_eval's are read (``embedmetrics trec_eval -m nDCG@10``), a trec_eval measure with
    ``@k`` (``recip_rank@10``: ``RR@10``; ``bpref@10``: it takes none); else ``""``."""
    found = _SYNTAX.fullmatch(name)
    if found and found["name"] in IR_MEASURES:
        try:
            request = _ir_request(name, IR_MEASURES[found["name"]], found["params"], found["cut"], version)
        except ValueError as err:
            return str(err)
        spec = request.spec or "no trec_eval measure"
        return (f"{name!r} is ir_measures' name of trec_eval's {spec}: this command takes trec_eval's "
                f"names (-m {spec}); `embedmetrics report -m` and embedmetrics.trec.evaluate take "
                "both.")  # fmt: skip
    base, at, cut = name.partition("@")
    if at and base in _TO_IR:
        ir = _TO_IR[base]
        if IR_MEASURES[ir].cut is False:
            return f"unknown measure {name!r}: {base} ({ir}) takes no cut-off."
        dotted = (
            f" or {_cut_name(base, True)}.{cut}"
            if MEASURES[base].params in (LONG_CUTS, FLOAT_CUTS) or base in ("map", "ndcg")
            else ""
        )
        return f"unknown measure {name!r}; did you mean {ir}@{cut}{dotted}?"
    return ""


def _cut_name(measure: str, cut: bool) -> str:
    return f"{measure}_cut" if cut and measure in ("ndcg", "map") else measure


def _nearest(word: str, vocabulary: list[str]) -> list[str]:
    """The closest spellings, case ignored, best first."""
    lower = {v.lower(): v for v in reversed(vocabulary)}
    return [lower[m] for m in difflib.get_close_matches(word.lower(), list(lower), n=3, cutoff=0.6)]
