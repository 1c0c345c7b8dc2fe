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
    """Each column of per-query ``values`` (``{label: (Q,)}``, ``query_ids`` naming the rows) as z-scores.
    Refused (``ZScoreFileError``) where trec_eval's output is undefined or the file is surely not the
    run's: ``_undefined``."""
    wrong = _undefined(list(values), query_ids, zscores)
    if wrong is not None:
        raise ZScoreFileError(f"-Z: {wrong}")
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


def _undefined(labels: Sequence[str], query_ids: Sequence[str], zscores: ZScores) -> str | None:
    """Why the z-scores are refused, or ``None``: no query of the run has a line in the file (every value
    would be ``MISSING``: the wrong file), or a query, or a query's measure, that the file lacks sorts
    (``strcmp``) after the file's last: trec_eval's binary search (``convert_zscores.c``'s ``find_qid``,
    ``find_meas``, ``end`` one past the table) then reads past its table, undefined (it crashes)."""
    if not any(q in zscores for q in query_ids):
        return f"the file has no line for any of the run's {len(query_ids)} queries: not the run's file."
    last_query = max(q.encode() for q in zscores)
    for query in query_ids:
        if query not in zscores:
            if query.encode() > last_query:
                return (f"the file has no line for query {query!r}, which sorts after its last query: "
                        "trec_eval's lookup reads past its table there (undefined: it crashes).")  # fmt: skip
            continue
        last = max((m.encode() for m in zscores[query]), default=b"")
        beyond = [label for label in labels if label not in zscores[query] and label.encode() > last]
        if beyond:
            return (f"the file has no line for query {query!r} and measure {beyond[0]!r}, which sorts after "
                    "that query's last measure: trec_eval's lookup reads past its table there (undefined: "
                    "it crashes).")  # fmt: skip
    return None
