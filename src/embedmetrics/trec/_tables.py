"""The tables of a comparison of systems: text, Markdown (GitHub renders it without HTML), LaTeX (needs only
``booktabs``) and CSV, each a grid of systems × measures with the best value per measure in bold (not in
the text), the significance marks and a caption naming the test, the correction and alpha."""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any, Callable

#: Unicode superscripts of the letters that have one (``q`` has none: written ``^q``).
_SUPERSCRIPT = dict(zip("abcdefghijklmnoprstuvwxyz0123456789", "ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻ⁰¹²³⁴⁵⁶⁷⁸⁹"))
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
    ">": r"\textgreater{}", "|": r"\textbar{}",
}  # fmt: skip
_TESTS = {"t": "paired t test", "wilcoxon": "Wilcoxon signed-rank test",
          "randomization": "randomization test", "bootstrap": "bootstrap test"}  # fmt: skip


def caption(grid: Any, bold: bool = True, dagger: str = "\u2020") -> str:
    """One paragraph: the test (its resamples and seed where it resamples), the correction, alpha, the
    queries, how tied scores were ranked, and what the bold (``bold``) and the marks mean."""
    test = _TESTS[grid.test]
    if grid.test in ("randomization", "bootstrap"):
        test += f" ({grid.n_resamples:,} resamples, seed {grid.seed})"
    correction = f"{grid.correction.capitalize()} correction" if grid.correction else "no correction"
    pairs = "every pair" if grid.baseline is None else f"each system against the baseline, {grid.baseline}"
    marks = (
        f"{dagger}: significantly better than the baseline"
        if grid.baseline is not None
        else "superscripts: the systems a value is significantly better than"
    )
    marks = ("Bold: the best value per measure; " + marks) if bold else marks[0].upper() + marks[1:]
    return (
        f"Two-sided {test} of {pairs}, {correction}, alpha = {grid.alpha:g}, over {grid.queries} queries; "
        f"{grid.ties}. {marks}."
    )


def marks(grid: Any, measure: str, name: str) -> str:
    """The letters of the systems ``name`` is significantly better than on ``measure``, or the dagger
    against the baseline."""
    comparison = grid.comparisons[measure]
    beaten = comparison.beats(name)
    if grid.baseline is not None:
        return "\u2020" if grid.baseline in beaten else ""
    letters = grid.letters
    return "".join(letters[t] for t in beaten)


def _mean(grid: Any, measure: str, name: str) -> float:
    comparison = grid.comparisons[measure]
    return float(comparison.means[comparison.names.index(name)])


def _best(grid: Any, measure: str, name: str) -> bool:
    values = [_mean(grid, measure, n) for n in grid.names]
    top = max((v for v in values if not math.isnan(v)), default=math.nan)
    return _mean(grid, measure, name) == top


def _number(value: float, digits: int) -> str:
    return "nan" if math.isnan(value) else f"{value:.{digits}f}"


def text(grid: Any, digits: int = 4) -> str:
    """Aligned columns: ``mean^letters`` (``mean†`` against a baseline), ``[low, high]`` where intervals
    were asked; the caption under it."""
    header = ["", "system", *grid.comparisons]
    rows = [header]
    for name in grid.names:
        row = [grid.letters[name], name]
        for measure in grid.comparisons:
            mark = marks(grid, measure, name)
            cell = _number(_mean(grid, measure, name), digits)
            cell += mark if grid.baseline is not None else (f"^{mark}" if mark else "")
            if grid.intervals:
                low, high = grid.intervals[measure][name]
                cell += f" [{low:.{digits}f}, {high:.{digits}f}]"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, caption(grid, bold=False)])


def _superscript(letters: str) -> str:
    return "".join(_SUPERSCRIPT.get(c, f"^{c}") for c in letters)


def _md(value: str) -> str:
    """Markdown's backslash escape of every character that could start markup (``<`` of HTML too)."""
    return "".join("\\" + c if c in "\\|_*<>`[]" else c for c in value)


def markdown(grid: Any, digits: int = 4) -> str:
    """A GitHub table (no HTML): the best value in ``**bold**``, the marks as Unicode superscripts."""
    lines = [
        "| | System | " + " | ".join(_md(m) for m in grid.comparisons) + " |",
        "|---|---|" + "---:|" * len(grid.comparisons),
    ]
    marked = (lambda m: m) if grid.baseline is not None else _superscript
    for name in grid.names:
        cells = _row_cells(grid, name, digits, lambda v: f"**{v}**", marked)
        lines.append(f"| {grid.letters[name]} | {_md(name)} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", caption(grid)])


def _row_cells(grid: Any, name: str, digits: int, bold: Callable[[str], str], marked: Callable[[str], str]
               ) -> list[str]:  # fmt: skip
    """A system's cells: each measure's mean (``bold`` where it is the best) and its marks (``marked``)."""
    cells = []
    for measure in grid.comparisons:
        value = _number(_mean(grid, measure, name), digits)
        cells.append(
            (bold(value) if _best(grid, measure, name) else value) + marked(marks(grid, measure, name))
        )
    return cells


def _tex_mark(mark: str) -> str:
    return "" if not mark else r"$^{\dagger}$" if mark == "\u2020" else f"$^{{{mark}}}$"


def _tex(value: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in value)


def latex(grid: Any, digits: int = 4, label: str = "tab:results") -> str:
    """A ``table`` float with a ``booktabs`` tabular, ready to ``\\input``: the best value in
    ``\\textbf``, the marks as superscripts, the caption above."""
    if not re.fullmatch(r"[A-Za-z0-9:._-]+", label):
        raise ValueError(f"Argument `label` must be letters, digits and : . _ - only, got {label!r}.")
    title = _tex(caption(grid, dagger="DAGGER")).replace("DAGGER", r"$^{\dagger}$")
    lines = [
        r"\begin{table}[t]", r"\centering", r"\caption{" + title + "}", rf"\label{{{label}}}",
        r"\begin{tabular}{ll" + "r" * len(grid.comparisons) + "}", r"\toprule",
        " & System & " + " & ".join(_tex(m) for m in grid.comparisons) + r" \\", r"\midrule",
    ]  # fmt: skip
    for name in grid.names:
        cells = _row_cells(grid, name, digits, lambda v: rf"\textbf{{{v}}}", _tex_mark)
        lines.append(f"({grid.letters[name]}) & {_tex(name)} & " + " & ".join(cells) + r" \\")
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", r"\end{table}"])


def csv_text(grid: Any) -> str:
    """One row per system: its name, one column per measure (the mean, full precision), then one column
    per p-value (corrected): against the baseline (``MEASURE p``), or against each other system
    (``MEASURE p vs OTHER``); empty where a system meets itself."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    others = [grid.baseline] if grid.baseline is not None else grid.names
    p_columns = [(m, o) for m in grid.comparisons for o in others]
    heads = [f"{m} p" if grid.baseline is not None else f"{m} p vs {o}" for m, o in p_columns]
    writer.writerow(["system", *grid.comparisons, *heads])
    for name in grid.names:
        means = [repr(_mean(grid, m, name)) for m in grid.comparisons]
        writer.writerow([name, *means, *(_p_value(grid, m, name, o) for m, o in p_columns)])
    return buffer.getvalue()


def _p_value(grid: Any, measure: str, a: str, b: str) -> str:
    comparison = grid.comparisons[measure]
    for i, pair in enumerate(comparison.pairs):
        if pair in ((a, b), (b, a)):
            return repr(float(comparison.p_value_corrected[i]))
    return ""
