"""TREC run and qrels files, and the flat tensors the retrieval functionals take.

Run lines: ``qid Q0 docno rank score tag`` (six whitespace-separated fields; ``Q0``, ``rank`` and
``tag`` are ignored, as trec_eval ignores them: the order comes from ``score``). Fields after the
sixth are ignored too, as trec_eval's run reader ignores them (the lines of a run may then have
different numbers of fields).
Qrels lines: ``qid iter docno rel`` (four fields, ``rel`` an integer; ``iter`` is ignored). A fifth
field is an error, as it is to trec_eval's qrels reader.
Blank lines and lines starting with ``#`` are skipped.

``read_run`` and ``read_qrels`` given ``trec_eval=10`` or ``9`` read the files as that trec_eval version
does where the two readings differ (``docs/trec-eval.md``, "Inputs"): ``-`` is a run on standard input;
a run's score may be infinite (a NaN score is refused: trec_eval's order of it is undefined); a decimal
grade is truncated (``atol``); under 9, a ``#`` line is refused (9.0.8 has no comments).

What is evaluated follows trec_eval 9 with its default options:

- queries of the run without any qrels line are skipped, and so are queries of the qrels that the run
  does not contain (trec_eval without ``-c``);
- a query with qrels lines but no relevant document scores 0 on every measure and is averaged in;
- a document is relevant when ``rel >= 1`` (trec_eval's default ``-l 1``); nDCG uses ``rel`` itself as
  the gain (negative values count as 0);
- relevant documents that the run did not retrieve still count in R (recall, MAP, R-precision) and in
  the ideal DCG: they enter the flat tensors with ``retrieved=False``.
"""

from __future__ import annotations

import io
import itertools
import math
import operator
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.id_codes import (
    in_name_order,
    pack_names,
    run_starts,
    sorted_codes,
    sorted_vocabulary,
    unpack,
)
from embedmetrics._io.progress import progress_bar, show_progress
from embedmetrics._io.trec_arrow import arrow_table

if TYPE_CHECKING:
    import torch

RUN_FORMAT = "qid Q0 docno rank score tag"
QRELS_FORMAT = "qid iter docno rel"


@dataclass
class Run:
    """A parsed run: one entry per retrieved document (``line`` is the 1-based line number).

    ``qid`` and ``docno`` are integer codes into the name arrays ``queries`` and ``docs`` (distinct
    names). Code order is name order, as ``join_run`` requires: names given in another order are put in
    order here, codes renumbered (``id_codes.in_name_order``), however the run is built.
    """

    qid: np.ndarray
    docno: np.ndarray
    score: np.ndarray
    line: np.ndarray
    queries: np.ndarray
    docs: np.ndarray
    tag: str = ""  # the tag (sixth field) of the last line: trec_eval's ``runid`` (read with ``trec_eval=``)

    def __post_init__(self) -> None:
        _order_ids(self, "Run")


@dataclass
class Qrels:
    """Parsed relevance judgements: one entry per judged (query, document), ids coded as in ``Run``
    (put in name order here too)."""

    qid: np.ndarray
    docno: np.ndarray
    rel: np.ndarray
    line: np.ndarray
    queries: np.ndarray
    docs: np.ndarray

    def __post_init__(self) -> None:
        _order_ids(self, "Qrels")


def _order_ids(table: Run | Qrels, kind: str) -> None:
    """Check that the columns of ``table`` have one length, and put its names in sorted order."""
    value = table.score if isinstance(table, Run) else table.rel
    sizes = {np.shape(column)[0] for column in (table.qid, table.docno, value, table.line)}
    if len(sizes) != 1:
        raise ValueError(
            f"{kind}: qid, docno, {'score' if isinstance(table, Run) else 'rel'} and line must have one "
            f"length; got {[np.shape(c)[0] for c in (table.qid, table.docno, value, table.line)]}."
        )
    table.qid, table.queries = in_name_order(table.qid, table.queries, f"{kind}.qid", f"{kind}.queries")
    table.docno, table.docs = in_name_order(table.docno, table.docs, f"{kind}.docno", f"{kind}.docs")


@dataclass
class TrecTensors:
    """Flat inputs of the retrieval functionals, one row per (query, document).

    Rows with ``retrieved=False`` are relevant documents the run did not return: they count in R and
    in the ideal DCG but are never ranked.
    """

    preds: torch.Tensor
    target: torch.Tensor  # graded relevance, int64 >= 0
    indexes: torch.Tensor
    retrieved: torch.Tensor
    query_ids: list[str]
    n_run_queries: int
    n_qrels_queries: int


@dataclass
class JoinedRun:
    """``TrecTensors`` as NumPy arrays: what reading and joining give without torch."""

    preds: np.ndarray
    target: np.ndarray
    indexes: np.ndarray
    retrieved: np.ndarray
    query_ids: list[str]
    n_run_queries: int
    n_qrels_queries: int

    def tensors(self) -> TrecTensors:
        """The same rows as tensors (sharing the arrays' memory)."""
        import torch  # here: reading and joining need no torch (see preflight.read_trec_while_importing)

        return TrecTensors(
            preds=torch.from_numpy(self.preds),
            target=torch.from_numpy(self.target),
            indexes=torch.from_numpy(self.indexes),
            retrieved=torch.from_numpy(self.retrieved),
            query_ids=self.query_ids,
            n_run_queries=self.n_run_queries,
            n_qrels_queries=self.n_qrels_queries,
        )


def _read_bytes(path: str) -> bytes:
    """The file's bytes (with a progress bar on a TTY); a missing or unreadable file is a one-line error."""
    if not os.path.exists(path):
        raise ReportInputError(f"{path}: no such file.")
    if os.path.isdir(path):
        raise ReportInputError(f"{path}: is a directory, expected a file.")
    chunks = []
    name = os.path.basename(path)
    try:
        if not show_progress():  # no bar to move: one read, no copy to join the chunks
            with open(path, "rb") as handle:
                return handle.read()
        with (
            open(path, "rb") as handle,
            progress_bar(
                total=os.path.getsize(path), desc=f"reading {name}", unit="B", unit_scale=True
            ) as bar,
        ):
            while chunk := handle.read(1 << 24):
                chunks.append(chunk)
                bar.update(len(chunk))
    except OSError as err:
        raise ReportInputError(f"{path}: cannot read it: {err.strerror or err}.") from None
    return b"".join(chunks)


def _lines(path: str, data: bytes) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` of the non-blank, non-comment lines of a file's bytes."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ReportInputError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}).") from None
    for number, line in enumerate(io.StringIO(text, newline=None), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped.split()


@dataclass
class Columns:
    """The fields of a whitespace-separated file with a fixed number of fields per line, vectorised:
    ``fields[j]`` is the ``j``-th wanted field of every row as a NumPy bytes array, ``line`` the 1-based
    line numbers."""

    fields: list[np.ndarray]
    line: np.ndarray


#: Bytes that are whitespace to ``str.split`` but not to the fast reader's tokeniser (``\r`` alone,
#: vertical tab, form feed, the information separators), and NUL (NumPy's bytes arrays drop trailing
#: NULs): a file holding one takes the line parser.
_ODD_SPACE = np.zeros(256, dtype=bool)
_ODD_SPACE[[0, 11, 12, 13, 28, 29, 30, 31]] = True
_SPACE = np.zeros(256, dtype=bool)
_SPACE[[9, 10, 32]] = True


def fast_columns(
    data: bytes, n_fields: int, wanted: tuple[int, ...], extra_fields: bool = False
) -> Optional[Columns]:
    """The rows of a well-formed ASCII file without a Python loop over lines, or ``None`` where the file
    needs the line parser (non-ASCII bytes, unusual whitespace, a line with another number of fields,
    or fewer where ``extra_fields`` lets a line have more): the line parser then gives the result, or
    the error with its line number."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.isascii():
        return None
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0 or _ODD_SPACE[raw].any():
        return None
    space = _SPACE[raw]
    begins = ~space
    begins[1:] &= space[:-1]
    starts = np.flatnonzero(begins)
    del space, begins
    token_line = np.searchsorted(np.flatnonzero(raw == 10), starts)  # 0-based line of each token
    first = np.ones(starts.size, dtype=bool)
    first[1:] = token_line[1:] != token_line[:-1]
    comment = first & (raw[starts] == ord("#"))
    tokens = data.split()
    if len(tokens) != starts.size:
        return None
    if comment.any():  # drop every token of a comment line
        dropped = np.isin(token_line, token_line[comment])
        tokens = list(itertools.compress(tokens, (~dropped).tolist()))
        token_line, first = token_line[~dropped], first[~dropped]
    row_line = token_line[first]
    if row_line.size == 0:
        return None
    row_start = np.flatnonzero(first)
    width = np.diff(np.append(row_start, first.size))  # fields per row
    if int(width.min()) < n_fields or (int(width.max()) > n_fields and not extra_fields):
        return None
    return Columns(_pick_fields(tokens, row_start, width, wanted), row_line + 1)


def _pick_fields(
    tokens: list[bytes], row_start: np.ndarray, width: np.ndarray, wanted: tuple[int, ...]
) -> list[np.ndarray]:
    """The ``wanted`` fields of every row, from the tokens of all rows (row ``r``'s tokens start at
    ``row_start[r]``, ``width[r]`` of them): slices where every row has one width, else an index."""
    if int(width.min()) == int(width.max()):
        step = int(width[0])
        return [np.array(tokens[i::step]) for i in wanted]
    return [np.array(operator.itemgetter(*(row_start + i).tolist())(tokens)) for i in wanted]


def _coded(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a bytes column and the names (str) of the codes, in sorted order of the names
    (as every reader numbers them). Names of at most 8 bytes are compared as one 64-bit integer."""
    keys = pack_names(names)
    if keys is not None:
        distinct, codes = sorted_codes(keys)
        return codes, unpack(distinct)
    distinct, codes = sorted_codes(names)
    return codes, distinct.astype(str)


class DuplicateDocument(ReportInputError):
    """A document listed twice for one query: ``embedmetrics trec_eval`` exits with trec_eval's status
    (4: ``form_res_rels`` refuses it, and the measure cannot be calculated)."""

    status = 4


def _check_unique(path: str, table: Run | Qrels) -> None:
    """Reject a document listed twice for the same query (trec_eval refuses these too)."""
    keys = table.qid * max(len(table.docs), 1) + table.docno
    ordered = np.sort(keys)
    if not (ordered[1:] == ordered[:-1]).any():  # the usual case: one sort, no bookkeeping
        return
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    repeat = np.flatnonzero(first[inverse] != np.arange(keys.size))
    if repeat.size:
        i = int(repeat[0])
        raise DuplicateDocument(
            f"{path}:{table.line[i]}: document {str(table.docs[table.docno[i]])!r} appears twice for query "
            f"{str(table.queries[table.qid[i]])!r} (first on line {table.line[first[inverse[i]]]})."
        )


def _names(vocabulary: dict[str, int]) -> np.ndarray:
    return np.array(list(vocabulary), dtype=str)  # insertion order = code order


#: ``(qid, docno, value, line, query names, doc names)``: the fields of ``Run`` and ``Qrels``.
_Table = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _score(text: str) -> float:
    try:
        score = float(text)
    except ValueError:
        raise ValueError(f"score {text!r} is not a number.") from None
    if not math.isfinite(score):
        raise ValueError(f"score {text!r} is not finite.")
    return score


def _trec_eval_score(text: str) -> float:
    """A score as trec_eval reads it (``atof``): infinities rank first or last; a NaN is refused (every
    comparison with it is false, so trec_eval's order of it depends on its sort's algorithm)."""
    try:
        score = float(text)
    except ValueError:
        raise ValueError(f"score {text!r} is not a number.") from None
    if math.isnan(score):
        raise ValueError(
            f"score {text!r} is not a number (NaN): trec_eval compares it with nothing, so its rank there "
            "is undefined."
        )
    return score


_DECIMAL = re.compile(r"([+-]?)([0-9]*)\.[0-9]*")


def _atol_grade(text: str) -> int:
    """A grade as trec_eval reads it (``atol``): a decimal is truncated toward zero (``1.7`` -> 1,
    ``-0.5`` -> 0)."""
    decimal = _DECIMAL.fullmatch(text)
    if decimal is not None and text.strip("+-.") != "":
        return _relevance(f"{decimal[1]}{decimal[2] or '0'}")
    return _relevance(text)


def _relevance(text: str) -> int:
    try:
        rel = int(text)
    except ValueError:
        raise ValueError(f"relevance {text!r} is not an integer.") from None
    if not -(2**63) <= rel < 2**63:
        raise ValueError(f"relevance {text!r} is out of range (a 64-bit integer is expected).")
    return rel


@dataclass(frozen=True)
class TableFormat:
    """One of the two line formats: its fields, the field holding the value and how to read it, and
    whether a line may have more fields (ignored)."""

    layout: str
    empty: str
    value: int
    dtype: type
    parse: Callable[[str], float | int]
    extra_fields: bool
    finite: bool = True  # a value must be finite (else: only not NaN)

    @property
    def n_fields(self) -> int:
        return len(self.layout.split())

    def wrong_count(self, count: int) -> Optional[str]:
        """What is wrong with a line of ``count`` fields, or ``None``."""
        if count == self.n_fields or (count > self.n_fields and self.extra_fields):
            return None
        later = "; later fields are ignored" if self.extra_fields else ""
        return f"expected {self.n_fields} fields ({self.layout}{later}), got {count}"


RUN = TableFormat(RUN_FORMAT, "the run is empty", 4, np.float64, _score, extra_fields=True)
QRELS = TableFormat(QRELS_FORMAT, "the qrels are empty", 3, np.int64, _relevance, extra_fields=False)
#: The two formats as trec_eval reads them (``trec_eval=`` of ``read_run`` and ``read_qrels``).
TREC_EVAL_RUN = TableFormat(
    RUN_FORMAT, "the run is empty", 4, np.float64, _trec_eval_score, extra_fields=True, finite=False
)
TREC_EVAL_QRELS = TableFormat(
    QRELS_FORMAT, "the qrels are empty", 3, np.int64, _atol_grade, extra_fields=False
)


def fast_table(cols: Columns, fmt: TableFormat) -> Optional[_Table]:
    """The table from ``fast_columns``' ``(qid, docno, value)`` columns, or ``None`` where a value
    needs the line parser's check (not a number, not finite, out of range)."""
    try:
        value: np.ndarray = cols.fields[2].astype(fmt.dtype)
    except (ValueError, OverflowError):
        return None
    if value.dtype.kind == "f" and (np.isnan(value) if not fmt.finite else ~np.isfinite(value)).any():
        return None
    qid, queries = _coded(cols.fields[0])
    docno, docs = _coded(cols.fields[1])
    return qid, docno, value, cols.line, queries, docs


def parse_lines(path: str, data: bytes, fmt: TableFormat) -> _Table:
    """The line parser (``path`` names the file in errors): the reference reading of the format."""
    queries: dict[str, int] = {}
    docs: dict[str, int] = {}
    qids: list[int] = []
    docnos: list[int] = []
    values: list[float | int] = []
    lines: list[int] = []
    for number, fields in _lines(path, data):
        wrong = fmt.wrong_count(len(fields))
        if wrong is not None:
            raise ReportInputError(f"{path}:{number}: {wrong}: {' '.join(fields)!r}.")
        try:
            values.append(fmt.parse(fields[fmt.value]))
        except ValueError as err:
            raise ReportInputError(f"{path}:{number}: {err}") from None
        qids.append(queries.setdefault(fields[0], len(queries)))
        docnos.append(docs.setdefault(fields[2], len(docs)))
        lines.append(number)
    if not lines:
        raise ReportInputError(f"{path}: {fmt.empty} (no '{fmt.layout}' lines).")
    qid, query_names = sorted_vocabulary(np.array(qids, dtype=np.int64), _names(queries))
    docno, doc_names = sorted_vocabulary(np.array(docnos, dtype=np.int64), _names(docs))
    return (
        qid,
        docno,
        np.array(values, dtype=fmt.dtype),
        np.array(lines, dtype=np.int64),
        query_names,
        doc_names,
    )


def _refuse_nul(path: str, data: bytes) -> None:
    """A NUL byte is no text: NumPy's string arrays (and trec_eval's C strings) would end an id there,
    so ``d1\\0`` would be read as ``d1``. Refused with its line number."""
    at = data.find(b"\0")
    if at >= 0:
        line = data.count(b"\n", 0, at) + 1
        raise ReportInputError(f"{path}:{line}: a NUL byte (\\0) in the line; TREC files are text.")


#: The size from which Arrow's reader reads a file (its import alone takes about as long as the NumPy
#: reader takes on a file of this size).
ARROW_MIN_BYTES = 1 << 20


def _read_table(path: str, fmt: TableFormat, data: bytes | None = None) -> _Table:
    """Plain files are read by Arrow's CSV reader (``trec_arrow``), other
    well-formed ASCII files without a loop over lines (``fast_columns``); anything else goes through
    the line parser, which gives the same result or names the offending line."""
    data = _read_bytes(path) if data is None else data
    _refuse_nul(path, data)
    plain = None
    if len(data) >= ARROW_MIN_BYTES:  # (a smaller file is read sooner than pyarrow is imported)
        plain = arrow_table(data, fmt.n_fields, (0, 2, fmt.value), fmt.dtype, fmt.extra_fields)
    if plain is not None:
        return plain  # type: ignore[return-value]
    cols = fast_columns(data, fmt.n_fields, (0, 2, fmt.value), fmt.extra_fields)
    table = None if cols is None else fast_table(cols, fmt)
    return parse_lines(path, data, fmt) if table is None else table


#: The name of standard input in messages (a run given as ``-``).
STDIN = "<stdin>"
_COMMENT = re.compile(rb"^[ \t]*#", re.MULTILINE)


def _trec_eval_bytes(path: str, trec_eval: int, stdin: bool = False) -> tuple[str, bytes]:
    """The name and bytes of a file trec_eval reads: ``-`` is standard input where ``stdin`` (a run); under
    9, a ``#`` line is refused (trec_eval 9.0.8 reads it as data, or refuses it as malformed)."""
    if path == "-" and stdin:
        path, data = STDIN, sys.stdin.buffer.read()
    else:
        data = _read_bytes(path)
    if trec_eval == 9:
        _refuse_comments(path, data)
    return path, data


def _refuse_comments(path: str, data: bytes) -> None:
    """Under trec_eval 9, a ``#`` line is refused (9.0.8 reads it as data, or refuses it as malformed)."""
    comment = _COMMENT.search(data, 3 if data.startswith(b"\xef\xbb\xbf") else 0)
    if comment is not None:
        line = data.count(b"\n", 0, comment.start()) + 1
        raise ReportInputError(
            f"{path}:{line}: a '#' comment line: trec_eval 9.0.8 reads no comments (it takes the line as "
            "data or refuses it); --trec-eval 10 skips them."
        )


def _last_tag(data: bytes) -> str:
    """The sixth field of the last line that is neither blank nor a comment (trec_eval keeps the last
    line's ``run_id``)."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        fields = data[start:end].split()
        if fields and not fields[0].startswith(b"#"):
            return fields[5].decode("utf-8", "replace") if len(fields) > 5 else ""
        end = start
    return ""


def read_run(path: str, *, trec_eval: int | None = None) -> Run:
    """Parse a TREC run file; a malformed line raises with its line number. ``trec_eval`` (10 or 9): read
    it as that trec_eval version does (see the module's docstring)."""
    if trec_eval is None:
        run = Run(*_read_table(path, RUN))
    else:
        path, data = _trec_eval_bytes(path, trec_eval, stdin=True)
        run = Run(*_read_table(path, TREC_EVAL_RUN, data), tag=_last_tag(data))
    _check_unique(path, run)
    return run


def read_qrels(path: str, *, trec_eval: int | None = None) -> Qrels:
    """Parse a TREC qrels file; a malformed line raises with its line number. ``trec_eval`` (10 or 9):
    read it as that trec_eval version does (see the module's docstring)."""
    if trec_eval is None:
        qrels = Qrels(*_read_table(path, QRELS))
    else:
        path, data = _trec_eval_bytes(path, trec_eval)
        qrels = Qrels(*_read_table(path, TREC_EVAL_QRELS, data))
    _check_unique(path, qrels)
    return qrels


def _joint_codes(
    names_a: np.ndarray, codes_a: np.ndarray, names_b: np.ndarray, codes_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Re-code two coded columns (each vocabulary sorted, as the readers give them) into one: the names
    of ``a`` first, with their own codes (so code order is name order among them), then the names only
    ``b`` has. Each name of ``b`` is looked up among ``a``'s by binary search (as one 64-bit integer
    where every name packs into 64 bits, ``id_codes``); nothing is sorted again.
    Returns the vocabulary (packed names, or the names; ``_vocabulary_names``) and the codes."""
    keys_a, keys_b = pack_names(names_a), pack_names(names_b)
    if keys_a is None or keys_b is None:
        keys_a, keys_b = names_a, names_b
    at = np.searchsorted(keys_a, keys_b)
    present = at < keys_a.size
    present[present] = keys_a[at[present]] == keys_b[present]
    code_b = np.where(present, at, keys_a.size + np.cumsum(~present) - 1)
    return np.concatenate([keys_a, keys_b[~present]]), codes_a, code_b[codes_b]


def _vocabulary_names(vocabulary: np.ndarray) -> list[str]:
    """The names of (part of) a ``_joint_codes`` vocabulary."""
    names = unpack(vocabulary) if vocabulary.dtype == np.uint64 else vocabulary
    return [str(name) for name in names.tolist()]


def _trec_eval_order(
    score: np.ndarray, doc: np.ndarray, n_docs: int, query: np.ndarray, single: bool = True
) -> np.ndarray:
    """An order of the rows that ranks every query's rows as trec_eval does: score descending, then
    docno descending (doc codes follow the sorted docno strings); rows of different queries are never
    compared, so only their order within each query counts.

    A run written query by query, scores descending (what retrieval toolkits write), is in that order
    already except inside runs of equal scores: a stable sort of ``tie run * n_docs + reversed doc code``,
    sorted already but for those runs (timsort's best case), orders it. Any other file: one sort by
    score, then the same stable sort with the score's rank; the two-key ``lexsort`` where that key would
    not fit in 64 bits. The scores are compared as trec_eval stores them: with ``single``, in single
    precision (9.0.8's ``float sim``: scores equal in float32 are tied and ordered by docno, and one past
    float32's range is infinite, silently), else as doubles (10.0's ``double sim``)."""
    if single:
        with np.errstate(over="ignore"):  # 1e39 is infinite in single precision, as in trec_eval 9
            score = score.astype(np.float32)
    grouped = _grouped_order(score, doc, n_docs, query)
    if grouped is not None:
        return grouped
    by_score = np.argsort(-score)
    ordered = score[by_score]
    rank = np.cumsum(run_starts(ordered)) - 1
    if rank.size and int(rank[-1]) >= (2**62) // n_docs:
        return np.lexsort((-doc, -score))
    key = rank * n_docs + (n_docs - 1 - doc[by_score])
    return by_score[np.argsort(key, kind="stable")]


def _grouped_order(
    score: np.ndarray, doc: np.ndarray, n_docs: int, query: np.ndarray
) -> Optional[np.ndarray]:
    """``_trec_eval_order`` of a run whose queries each fill one stretch of rows, scores not increasing
    within it; ``None`` for any other run."""
    if score.size < 2:
        return None
    same = query[1:] == query[:-1]
    present = np.zeros(int(query.max()) + 1, dtype=bool)
    present[query] = True
    if int(same.size - same.sum()) + 1 != int(present.sum()):
        return None  # a query in more than one stretch
    if bool((same & (score[1:] > score[:-1])).any()):
        return None
    new_run = run_starts(score)
    new_run[1:] |= ~same
    run = np.cumsum(new_run) - 1
    if int(run[-1]) >= (2**62) // n_docs:
        return None
    key = run * n_docs + (n_docs - 1 - doc)
    if not bool((key[1:] < key[:-1]).any()):  # no tie to reorder (the usual run): in order already
        return np.arange(key.size)
    return np.argsort(key, kind="stable")


def _judged(
    run_q: np.ndarray, run_d: np.ndarray, qr_q: np.ndarray, qr_d: np.ndarray, qr_rel: np.ndarray, n_docs: int
) -> tuple[np.ndarray, np.ndarray]:
    """The grade of every run row (0 when unjudged) and, per qrels row (at least one), whether the run
    retrieved it: the run pairs whose document is judged for some query are looked up among the sorted
    qrels pairs (pairs are unique in a file); the other rows (most of them) cannot match."""
    judged_doc = np.zeros(n_docs, dtype=bool)
    judged_doc[qr_d] = True
    rows = np.flatnonzero(judged_doc[run_d])
    run_key, qr_key = run_q[rows] * n_docs + run_d[rows], qr_q * n_docs + qr_d
    order = np.argsort(qr_key)
    at = np.searchsorted(qr_key[order], run_key)
    np.minimum(at, qr_key.size - 1, out=at)  # (np.clip is several times slower)
    found = qr_key[order[at]] == run_key
    matched = order[at[found]]
    grade = np.zeros(run_d.size, dtype=qr_rel.dtype)
    grade[rows[found]] = qr_rel[matched]
    was_retrieved = np.zeros(qr_key.size, dtype=bool)
    was_retrieved[matched] = True
    return grade, was_retrieved


def join_run(run: Run, qrels: Qrels, *, trec_eval_ties: bool = False, trec_eval: int = 10) -> JoinedRun:
    """Join a run with its qrels into flat ``preds``/``target``/``indexes``/``retrieved`` arrays.

    Vectorised: ids are integer codes in one joint vocabulary, and the ``(query, document)`` pairs of
    the run are looked up among the qrels' by binary search; there is no loop over queries.
    With ``trec_eval_ties`` the scores are replaced by trec_eval's strict order (score descending,
    then docno descending), so no ties remain; ``trec_eval`` is the version whose scores are compared:
    10.0's doubles, or 9.0.8's single precision (``9``). Needs no torch (``JoinedRun.tensors`` converts).
    """
    queries, run_q, qr_q = _joint_codes(run.queries, run.qid, qrels.queries, qrels.qid)
    docs, run_d, qr_d = _joint_codes(run.docs, run.docno, qrels.docs, qrels.docno)
    in_run = np.zeros(queries.size, dtype=bool)
    in_run[run_q] = True
    judged = np.zeros(queries.size, dtype=bool)
    judged[qr_q] = True
    evaluated = in_run & judged  # trec_eval: queries of the run that have qrels lines
    if not evaluated.any():
        raise ReportInputError(
            "no query of the run has relevance judgements in the qrels (the query ids do not match)."
        )
    dense = np.cumsum(evaluated) - 1  # evaluated query -> 0..Q-1 (in sorted qid order)
    run_s, qr_rel = run.score, qrels.rel
    keep_run, keep_qr = evaluated[run_q], evaluated[qr_q]
    if not keep_run.all():  # (usually every run query has judgements: no copies)
        run_q, run_d, run_s = run_q[keep_run], run_d[keep_run], run_s[keep_run]
    if not keep_qr.all():
        qr_q, qr_d, qr_rel = qr_q[keep_qr], qr_d[keep_qr], qr_rel[keep_qr]
    # relevance of each retrieved row (0 when unjudged), and the judged-relevant rows never retrieved
    run_rel, was_retrieved = _judged(run_q, run_d, qr_q, qr_d, qr_rel, max(docs.size, 1))
    missing = np.flatnonzero((qr_rel >= 1) & ~was_retrieved)
    n_run, total = run_s.size, run_s.size + missing.size  # the run's rows, then the missing relevant
    preds = np.zeros(total, dtype=np.float64)  # a missing row is never ranked: any score would do
    if trec_eval_ties:
        order = _trec_eval_order(run_s, run_d, max(docs.size, 1), run_q, single=trec_eval == 9)
        preds[order] = -np.arange(n_run, dtype=np.float64)
    else:
        preds[:n_run] = run_s
    target = np.empty(total, dtype=np.int64)
    target[:n_run], target[n_run:] = run_rel, qr_rel[missing]
    np.maximum(target, 0, out=target)
    indexes = np.empty(total, dtype=np.int64)
    np.take(dense, run_q, out=indexes[:n_run])
    indexes[n_run:] = dense[qr_q[missing]]
    retrieved = np.zeros(total, dtype=bool)
    retrieved[:n_run] = True
    return JoinedRun(
        preds=preds,
        target=target,
        indexes=indexes,
        retrieved=retrieved,
        query_ids=_vocabulary_names(queries[evaluated]),
        n_run_queries=int(in_run.sum()),
        n_qrels_queries=int(judged.sum()),
    )
