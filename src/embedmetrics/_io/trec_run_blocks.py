"""A TREC run file read in blocks of whole queries, as trec_eval reads it (``--trec-eval 10`` or ``9``), so
that evaluating a run of millions of lines never holds all of it.

A block is about ``BLOCK_BYTES`` of whole lines cut where the query id changes: every line of one query
in one block, where the file is grouped by query (retrieval toolkits write it so). A query met again in a
later block means the file is not grouped: ``NotGrouped`` is raised, and the caller reads the whole file at
once instead (``read_run``). Each block is parsed as ``read_run`` parses a file; a block it refuses (a
malformed line, a document listed twice) sends the caller to the whole file too, whose reader names the
line as trec_eval would.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.trec import TREC_EVAL_RUN, Run, _check_unique, _read_table, _refuse_comments

#: Bytes of text read at a time (a block is this, up to the last whole query in it).
BLOCK_BYTES = 1 << 23


#: A line that is neither blank nor a comment.
_DATA_LINE = re.compile(rb"^[ \t]*[^#\s]", re.MULTILINE)


class NotGrouped(Exception):
    """The run's lines of one query are not all in one place: read it whole."""


def _query_start(data: bytes, end: int) -> int:
    """Where the lines of the query of the last whole line before ``end`` start (the start of the first
    of its lines that follow another query's line, or 0 where every line is that query's)."""
    start = data.rfind(b"\n", 0, end - 1) + 1
    fields = data[start:end].split(None, 1)
    qid = fields[0] if fields else b""
    while start > 0:
        before = data.rfind(b"\n", 0, start - 1) + 1
        fields = data[before:start].split(None, 1)
        if (fields[0] if fields else b"") != qid:
            return start
        start = before
    return 0


def _blocks(path: str, block_bytes: int) -> Iterator[tuple[int, bytes]]:
    """``(first line number, text)`` of each block of whole queries."""
    line = 1
    carry = b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(block_bytes)
            data = carry + chunk
            if not chunk:
                if data:
                    yield line, data
                return
            end = data.rfind(b"\n") + 1
            cut = _query_start(data, end) if end else 0
            if cut == 0:  # one query so far: read on
                carry = data
                continue
            yield line, data[:cut]
            line += data.count(b"\n", 0, cut)
            carry = data[cut:]


def run_blocks(path: str, trec_eval: int, block_bytes: int | None = None) -> Iterator[Run]:
    """Each block of ``path`` as a ``Run`` (its tag the tag of its last line); ``NotGrouped`` where a query
    comes back after another one's lines or a block is refused."""
    if not os.path.isfile(path):
        raise NotGrouped(path)  # standard input, a missing file: the whole reader says what is wrong
    seen: set[str] = set()
    for _, data in _blocks(path, BLOCK_BYTES if block_bytes is None else block_bytes):
        try:
            if trec_eval == 9:
                _refuse_comments(path, data)
            if _DATA_LINE.search(data) is None:  # blank or comment lines only: nothing to evaluate
                continue
            run = Run(*_read_table(path, TREC_EVAL_RUN, data), tag=_tag(data))
            _check_unique(path, run)
        except ReportInputError:  # the whole file's reader names the line and exits as trec_eval does
            raise NotGrouped(path) from None
        names = {str(q) for q in run.queries.tolist()}
        if names & seen:
            raise NotGrouped(path)
        seen |= names
        yield run


def _tag(data: bytes) -> str:
    from embedmetrics._io.trec import _last_tag

    return _last_tag(data)
