"""Comparing ``S`` systems on the same queries: every pair tested at once, corrected, summarised."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from embedmetrics._engine.comparison.corrections import correct
from embedmetrics._engine.comparison.options import RESAMPLING
from embedmetrics._engine.comparison.paired import run_test
from embedmetrics._engine.comparison.systems import Systems, check_fits


def check_per_query(names: tuple[str, ...], values: list[Tensor]) -> Tensor:
    """``(len(values), Q)`` float64: the ``checked_rows`` stacked."""
    return torch.stack(checked_rows(names, values))


def checked_rows(names: tuple[str, ...], values: list[Tensor]) -> list[Tensor]:
    """The values as 1-D float64 rows (a float64 row as it is, not copied): 1-D per-query values of one
    length ``Q >= 2``, finite, whose sums over the queries are finite too (a resampled sum never
    overflows)."""
    for name, v in zip(names, values):
        if v.ndim != 1:
            raise ValueError(f"Argument `{name}` must be 1-D per-query values, got shape {tuple(v.shape)}.")
        if v.is_complex() or not (
            v.is_floating_point() or v.dtype == torch.bool or v.dtype.is_signed or v.dtype == torch.uint8
        ):
            raise TypeError(f"Argument `{name}` must hold real numbers, got dtype {v.dtype}.")
    lengths = {name: int(v.shape[0]) for name, v in zip(names, values)}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"Arguments {', '.join(f'`{n}`' for n in names)} must have the same length (the same "
            f"queries), got {lengths}."
        )
    rows = [v.detach().to(torch.float64) for v in values]
    for name, row in zip(names, rows):
        if bool(torch.isnan(row).any()):
            raise ValueError(
                f"Argument `{name}` must not contain NaN per-query values, "
                f"got {int(torch.isnan(row).sum())} NaN."
            )
        _check_sums(f"Argument `{name}`", row)
    if rows[0].shape[0] < 2:
        raise ValueError(
            f"Arguments {', '.join(f'`{n}`' for n in names)} must hold at least 2 queries, "
            f"got {rows[0].shape[0]}."
        )
    return rows


def systems_to_compare(names: tuple[str, ...], values: list[Tensor], test: str, n_resamples: int) -> Systems:
    """The checked ``Systems`` of ``values``: no more systems than queries and pairs that fit in the memory
    at hand (refused before anything is copied), then ``checked_rows`` and ``check_differences``."""
    if len({tuple(v.shape) for v in values}) > 1:
        checked_rows(names, values)  # the shapes' own refusal (lengths, dimensions), before the counts
    queries = int(values[0].shape[0]) if values[0].ndim else 1
    check_shape((len(values), queries))
    check_fits((len(values), queries), n_resamples, test in RESAMPLING, values[0].device)
    rows = checked_rows(names, values)
    check_differences(names, rows)
    return Systems(rows)


def check_differences(names: tuple[str, ...], rows: Sequence[Tensor]) -> None:
    """The per-query differences of every two of the systems' rows, and their sums over the queries,
    must be finite (the tests resample differences)."""
    top, bottom = rows[0].clone(), rows[0].clone()
    for row in rows[1:]:
        torch.maximum(top, row, out=top)
        torch.minimum(bottom, row, out=bottom)
    _check_sums(f"The differences of {', '.join(f'`{n}`' for n in names)}", top.sub_(bottom))


def _check_sums(what: str, row: Tensor) -> None:
    """``row`` finite, and ``Q max|row|`` (the largest sum a resample can give) finite."""
    top = row.abs().max() if row.numel() else row.new_zeros(())
    if not bool(torch.isfinite(top)):
        bad = row[~torch.isfinite(row)][0]
        raise ValueError(f"{what} must be finite per-query values, got {float(bad)!r}.")
    if not bool(torch.isfinite(top * row.shape[0])):
        raise ValueError(
            f"{what} overflow float64 when summed over the {row.shape[0]} queries: "
            f"got values up to {float(top)!r} in absolute value."
        )


def per_query(values: Any) -> Tensor:
    """``values`` as a tensor: a tensor or an array keeps its dtype; Python numbers (lists, tuples) are
    doubles, so float64 (torch would make them float32)."""
    if isinstance(values, (list, tuple, float)):
        return torch.as_tensor(values, dtype=torch.float64)
    return torch.as_tensor(values)


def result_dtype(values: list[Tensor]) -> torch.dtype:
    """The dtype of the statistics, means and intervals: float64 for float64 values, else the default
    dtype. p-values are float64 always."""
    return torch.float64 if any(v.dtype == torch.float64 for v in values) else torch.get_default_dtype()


def systems_of(values: Any) -> tuple[list[str], list[Tensor]]:
    """Names and per-query tensors of ``values``: a mapping name -> values, or an ``(S, Q)`` tensor.
    More systems than queries are refused, before any copy (``check_shape``)."""
    if isinstance(values, Mapping):
        names = [str(k) for k in values]
        if len(set(names)) < len(names):
            same = [k for k in values if names.count(str(k)) > 1]
            raise ValueError(
                f"Argument `values` must name every system differently as text, got keys {same!r}, "
                f"which all read {sorted({str(k) for k in same})!r}."
            )
        return names, [per_query(v) for v in values.values()]
    tensor = per_query(values)
    if tensor.ndim != 2:
        raise ValueError(
            "Argument `values` must be a mapping of systems or an (S, Q) tensor, "
            f"got shape {tuple(tensor.shape)}."
        )
    check_shape(tuple(tensor.shape), transposed_hint=True)
    return [str(i) for i in range(tensor.shape[0])], list(tensor)


def check_shape(shape: tuple[int, ...], transposed_hint: bool = False) -> None:
    """``(S, Q)``: no more systems than queries (a table of queries as rows would be read as that many
    systems, and their pairs would not fit)."""
    systems, queries = shape
    if systems > queries >= 1 and systems > 2:  # two systems of one query: "at least 2 queries"
        hint = "; a (queries, systems) table is given as `values.T`" if transposed_hint else ""
        raise ValueError(
            f"Argument `values` must hold no more systems than queries, got shape {shape}: {systems} systems "
            f"of {queries} queries{hint}."
        )


@dataclass(frozen=True)
class Comparison:
    """Every pair of ``S`` systems tested on the same queries, or each against ``baseline`` (see
    :func:`compare`).

    ``pairs[i] = (a, b)`` with ``statistic``, ``p_value``, ``p_value_corrected``,
    ``mean_difference`` (``a - b``) and ``effect_size`` at ``i``; ``significant[s, t]``: systems ``s``
    and ``t`` differ at ``alpha`` after the correction (symmetric).
    """

    names: list[str]
    means: Tensor
    pairs: list[tuple[str, str]]
    statistic: Tensor
    p_value: Tensor
    p_value_corrected: Tensor
    mean_difference: Tensor
    effect_size: Tensor
    significant: Tensor
    test: str
    correction: Optional[str]
    alpha: float
    baseline: Optional[str] = None

    def beats(self, name: str) -> list[str]:
        """The systems ``name`` is significantly better than (higher mean, significant difference)."""
        s = self.names.index(name)
        return [
            t
            for j, t in enumerate(self.names)
            if bool(self.significant[s, j]) and bool(self.means[s] > self.means[j])
        ]

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (JSON-ready)."""
        rows = zip(
            self.pairs,
            self.statistic.tolist(),
            self.p_value.tolist(),
            self.p_value_corrected.tolist(),
            self.mean_difference.tolist(),
            self.effect_size.tolist(),
        )
        return {
            "test": self.test, "correction": self.correction, "alpha": self.alpha, "baseline": self.baseline,
            "means": dict(zip(self.names, self.means.tolist())),
            "pairs": [
                {"a": a, "b": b, "statistic": st, "p_value": p, "p_value_corrected": pc,
                 "mean_difference": md, "effect_size": es, "significant": pc <= self.alpha}
                for (a, b), st, p, pc, md, es in rows
            ],
            "beats": {n: self.beats(n) for n in self.names},
        }  # fmt: skip

    def letters(self) -> dict[str, str]:
        """The letter of each system in the markers (``a``, ``b``, ...)."""
        alphabet = string.ascii_lowercase
        return {n: alphabet[i % 26] + ("" if i < 26 else str(i // 26)) for i, n in enumerate(self.names)}

    def to_markdown(self, digits: int = 4) -> str:
        """A Markdown table: each system's mean with the letters of the systems it beats as superscripts."""
        letters = self.letters()
        lines = ["| | system | mean |", "| --- | --- | --- |"]
        for name, mean in zip(self.names, self.means.tolist()):
            marks = "".join(letters[t] for t in self.beats(name))
            sup = f"<sup>{marks}</sup>" if marks else ""
            lines.append(f"| {letters[name]} | {name} | {mean:.{digits}f}{sup} |")
        rule = f"{self.test} test" + (f", {self.correction} correction" if self.correction else "")
        lines.append("")
        lines.append(
            f"Superscripts: the systems a mean is significantly better than ({rule}, alpha = {self.alpha})."
        )
        return "\n".join(lines)


def compare_systems(
    dtype: torch.dtype,
    names: list[str],
    systems: Systems,
    test: str,
    correction: Optional[str],
    alpha: float,
    n_resamples: int,
    seed: int,
    baseline: Optional[str] = None,
) -> Comparison:
    """Every pair of the systems, or with ``baseline`` each other system against it (``(system,
    baseline)``: the difference is the system's gain), tested two-sided at once (one resample matrix for
    all) and corrected over those pairs."""
    S = len(systems.rows)
    device = systems.rows[0].device
    index = [(i, j) for i in range(S) for j in range(i + 1, S)]
    if baseline is not None:
        b = names.index(baseline)
        index = [(i, b) for i in range(S) if i != b]
    left = torch.tensor([i for i, _ in index], dtype=torch.long, device=device)
    right = torch.tensor([j for _, j in index], dtype=torch.long, device=device)
    means = systems.means()  # before the test, which may release the rows
    result = run_test(systems, left, right, test, "two-sided", n_resamples, seed)
    corrected = correct(result.p_value, correction)
    significant = torch.zeros(S, S, dtype=torch.bool, device=device)
    significant[left, right] = corrected <= alpha
    significant = significant | significant.T
    stat, diff, effect = (v.to(dtype) for v in (result.statistic, result.mean_difference, result.effect_size))
    return Comparison(  # p-values in float64 whatever the values: a far tail is no float32 number
        names, means.to(dtype), [(names[i], names[j]) for i, j in index], stat,
        result.p_value.double(), corrected.double(), diff, effect, significant, test, correction, alpha,
        baseline,
    )  # fmt: skip
