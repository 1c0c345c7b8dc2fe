"""The one exception type the command turns into a one-line message and exit status 2."""

from __future__ import annotations


class ReportInputError(Exception):
    """Bad input to ``embedmetrics report``: a missing or unreadable file, a malformed line, a
    shape or length mismatch, or arguments that do not go together.

    The message is printed on one line to stderr and the command exits with status 2.
    """


def as_flags(message: str) -> str:
    """A message of a Python call in the words of the command line: ``Argument `n_resamples``` is
    ``--n-resamples``."""
    import re

    return re.sub(r"Argument `(\w+)`", lambda m: "--" + m[1].replace("_", "-"), message)
