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
from embedmetrics._io.trec import (
    TREC_EVAL_RUN,
    Run,
    _check_unique,
    _last_tag,
    _read_table,
    _refuse_comments,
)

#: Bytes of text read at a time (a block is this, up to the last whole query in it).
BLOCK_BYTES = 1 << 23


#: A line that is neither blank nor a comment.
_DATA_LINE = re.compile(rb"^[ \t]*[^#\s]", re.MULTILINE)


class NotGrouped(Exception):
    """The run's lines of one query are not all in one place: read it whole."""


def _first_qid(line: bytes) -> bytes:
    fields = line.split(None, 1)
    return fields[0] if fields else b""


def _query_start(data: bytes, end: int, floor: int, floor_qid: bytes) -> tuple[int, bytes]:
    """Where the lines of the query of the last whole line before ``end`` start, and that query: the start of
    the first of its lines that follow another query's line, or 0 where every line is that query's. The
    lines before ``floor`` are known to be ``floor_qid``'s alone (a query longer than a block is scanned
    once, not again with every block read after it)."""
    start = data.rfind(b"\n", 0, end - 1) + 1
    qid = _first_qid(data[start:end])
    while start > floor:
        before = data.rfind(b"\n", 0, start - 1) + 1
        if _first_qid(data[before:start]) != qid:
            return start, qid
        start = before
    return (0 if qid == floor_qid or floor == 0 else floor), qid


def _blocks(path: str, block_bytes: int) -> Iterator[bytes]:
    """The text of each block of whole queries."""
    carry, scanned, carried = b"", 0, b""  # ``carry[:scanned]``: whole lines of the query ``carried``
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(block_bytes)
            data = carry + chunk
            if not chunk:
                if data:
                    yield data
                return
            end = data.rfind(b"\n") + 1
            cut, qid = _query_start(data, end, scanned, carried) if end else (0, carried)
            if cut == 0:  # one query so far: read on
                carry, scanned, carried = data, end, qid
                continue
            yield data[:cut]
            carry, scanned, carried = data[cut:], 0, b""


def run_blocks(path: str, trec_eval: int, block_bytes: int | None = None) -> Iterator[Run]:
    """Each block of ``path`` as a ``Run`` (its tag the tag of its last line); ``NotGrouped`` where a query
    comes back after another one's lines or a block is refused."""
    if not os.path.isfile(path):
        raise NotGrouped(path)  # standard input, a missing file: the whole reader says what is wrong
    seen: set[str] = set()
    for data in _blocks(path, BLOCK_BYTES if block_bytes is None else block_bytes):
        try:
            if trec_eval == 9:
                _refuse_comments(path, data)
            if _DATA_LINE.search(data) is None:  # blank or comment lines only: nothing to evaluate
                continue
            run = Run(*_read_table(path, TREC_EVAL_RUN, data), tag=_last_tag(data))
            _check_unique(path, run)
        except ReportInputError:  # the whole file's reader names the line and exits as trec_eval does
            raise NotGrouped(path) from None
        names = {str(q) for q in run.queries.tolist()}
        if names & seen:
            raise NotGrouped(path)
        seen |= names
        yield run
