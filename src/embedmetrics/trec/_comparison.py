"""``RunComparison``: systems compared on chosen measures, and the tables of a paper."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embedmetrics.trec import _tables

#: The table formats (``--table-format``, ``RunComparison.table``).
TABLE_FORMATS = ("text", "markdown", "latex", "csv")
#: How the lists were ranked where scores tie.
TREC_EVAL_TIES = "tied scores ranked as trec_eval ranks them (score descending, then docno descending)"


@dataclass
class RunComparison:
    """Systems compared measure by measure (``compare_runs``; ``embedmetrics report --run A --run B ...``).

    ``comparisons[measure]`` is the ``Comparison`` of that measure's per-query values (its means, pairs,
    p-values, ``beats``); ``names`` the systems in order, ``queries`` the number of queries compared, and
    the settings of the test. ``to_text()``, ``to_markdown()``, ``to_latex()`` and ``to_csv()`` give the
    systems × measures table; ``to_dict()`` plain values for JSON.
    """

    names: list[str]
    comparisons: dict[str, Any]
    queries: int
    test: str
    correction: str | None
    alpha: float
    seed: int
    n_resamples: int
    baseline: str | None
    ties: str
    intervals: dict[str, dict[str, tuple[float, float]]] | None = field(default=None, repr=False)

    @property
    def letters(self) -> dict[str, str]:
        """The letter of each system in the marks (``a``, ``b``, ...)."""
        letters: dict[str, str] = next(iter(self.comparisons.values())).letters()
        return letters

    def settings(self) -> dict[str, Any]:
        """What the marks depend on: the test, its seed and resamples, the correction, alpha, the
        baseline and the tie policy."""
        return {"test": self.test, "seed": self.seed, "n_resamples": self.n_resamples,
                "correction": self.correction, "alpha": self.alpha, "baseline": self.baseline,
                "ties": self.ties, "queries_compared": self.queries}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """``{"comparison": {measure: Comparison.to_dict()}, "info": {"systems": [...], **settings()}}``,
        as the command's ``--json`` writes it (which names each system's file there)."""
        comparisons = {m: c.to_dict() for m, c in self.comparisons.items()}
        return {"comparison": comparisons, "info": {"systems": list(self.names), **self.settings()}}

    def to_text(self, digits: int = 4) -> str:
        """Aligned columns for a terminal, with the caption under them."""
        return _tables.text(self, digits)

    def to_markdown(self, digits: int = 4) -> str:
        """A GitHub table (no HTML): the best value per measure in bold, the marks as superscripts."""
        return _tables.markdown(self, digits)

    def to_latex(self, digits: int = 4, label: str = "tab:results") -> str:
        """A ``table`` float that needs only ``booktabs``: the best value per measure in bold, the marks
        as superscripts, the caption naming the test, correction and alpha."""
        return _tables.latex(self, digits, label)

    def to_csv(self) -> str:
        """One row per system: the means, then the corrected p-values (one column per p-value)."""
        return _tables.csv_text(self)

    def table(self, table_format: str = "text") -> str:
        """The table in ``table_format``: ``text``, ``markdown``, ``latex`` or ``csv``."""
        if table_format not in TABLE_FORMATS:
            raise ValueError(
                f"Argument `table_format` must be one of {', '.join(TABLE_FORMATS)}, got {table_format!r}."
            )
        return {"text": self.to_text, "markdown": self.to_markdown, "latex": self.to_latex,
                "csv": self.to_csv}[table_format]()  # fmt: skip

    def __str__(self) -> str:
        return self.to_text()
