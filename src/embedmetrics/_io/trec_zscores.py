"""trec_eval's ``-Z`` file (``get_zscores.c``) and the z-scores it turns values into (``convert_zscores.c``).

Lines ``qid measure mean stddev`` (four whitespace-separated fields; blank lines skipped). Each per-query
value ``v`` of a measure becomes ``(v - mean) / stddev``; where ``stddev`` is 0, 0 if ``v == mean`` and
``MISSING`` otherwise; ``MISSING`` (-1000000) too where the file has no line for the query and measure.
trec_eval converts every query's values before it averages them, so the summary is the mean of the
z-scores (``num_q`` still counts, ``gm_map`` is the geometric mean of what its logarithm became).
No torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from embedmetrics._io.errors import ReportInputError

#: The value of a query and measure that the file does not give (trec_eval's ``MISSING_ZSCORE_VALUE``).
MISSING = -1000000.0
#: trec_eval's exit status where it cannot read the file (``return (UNDEF)`` from ``main``: -1).
EXIT_STATUS = 255

#: ``{qid: {measure: (mean, stddev)}}``
ZScores = dict[str, dict[str, tuple[float, float]]]


class ZScoreFileError(ReportInputError):
    """A ``-Z`` file trec_eval would not read: the command exits with trec_eval's status, 255."""

    status = EXIT_STATUS


def _number(path: str, number: int, text: str) -> float:
    """A mean or deviation (``nan`` as trec_eval's ``atof`` reads it: the z-score is then NaN)."""
    try:
        return float(text)
    except ValueError:
        raise ZScoreFileError(
            f"{path}:{number}: {text!r} is not a number (qid measure mean stddev)."
        ) from None


def read_zscores(path: str) -> ZScores:
    """The means and standard deviations of a ``-Z`` file, by query then measure (a repeated pair: the
    first line's). A missing file or a line of other than four fields is one line naming it."""
    if not os.path.isfile(path):
        raise ZScoreFileError(f"{path}: no such file (-Z: qid measure mean stddev lines).")
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            text = handle.read()
    except OSError as err:
        raise ZScoreFileError(f"{path}: cannot read it: {err.strerror or err}.") from None
    table: ZScores = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise ZScoreFileError(
                f"{path}:{number}: expected 4 fields (qid measure mean stddev), got {len(fields)}: "
                f"{line.strip()!r}."
            )
        means = table.setdefault(fields[0], {})
        if fields[1] not in means:
            means[fields[1]] = (_number(path, number, fields[2]), _number(path, number, fields[3]))
    return table


def to_zscores(
    values: Mapping[str, np.ndarray], query_ids: Sequence[str], zscores: ZScores
) -> dict[str, np.ndarray]:
    """Each column of per-query ``values`` (``{label: (Q,)}``, ``query_ids`` naming the rows) as z-scores."""
    out = {}
    for label, column in values.items():
        value = np.asarray(column, dtype=np.float64)
        pairs = [zscores.get(q, {}).get(label) for q in query_ids]
        found = np.array([p is not None for p in pairs], dtype=bool)
        mean, std = (np.array([(p or (0.0, 0.0))[i] for p in pairs], dtype=np.float64) for i in (0, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            scored = np.where(
                std != 0, (value - mean) / np.where(std != 0, std, 1.0), np.where(value == mean, 0.0, MISSING)
            )
        out[label] = np.where(found, scored, MISSING)
    return out
