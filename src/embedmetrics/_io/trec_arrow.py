"""The fastest reading of a TREC run or qrels file: Apache Arrow's CSV reader, for plain files only.

A *plain* file is ASCII with fields separated by exactly one space, lines ended by ``\\n``, no blank
line, no comment, no leading or trailing space, no control character, and values written as decimal
numbers (run scores as Arrow and Python both read them; qrels grades: ``[+-]digits``). Those are
the files that retrieval toolkits write, and for them Arrow's multi-threaded reader gives exactly what
the line parser gives: the same fields (one delimiter, no quoting), the same values (both round
decimal text to the nearest double), ids coded in sorted order (packed into integers, or by Arrow's
dictionary encoding past eight bytes) and the line number of row ``i`` is ``i + 1``. A run's lines
may have fields after the sixth (ignored, as trec_eval ignores them) where each line has as many as
the first.
Anything else, a field count Arrow refuses, or ``pyarrow`` not being installed (it comes with the
``report`` extra) returns ``None``: the NumPy reader or the line parser then reads the file, or names
the offending line.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from embedmetrics._io.id_codes import pack_bytes, sorted_codes, sorted_vocabulary, unpack

#: Qrels grades that Arrow and Python read the same way (a full match is required). Run scores need
#: no such check: every text Arrow reads as a finite double, Python's ``float`` reads as the same double
#: (both round to the nearest; what only Arrow takes, like ``nan(1)``, is not finite and goes to the line
#: parser), and what Arrow refuses goes to the other readers (``tests/families/report``).
_INTEGER = r"^[+-]?[0-9]+$"
#: The bytes of a plain file: printable ASCII, the space and ``\n``.
_PLAIN_BYTES = bytes(range(32, 127)) + b"\n"


def is_plain(data: bytes) -> bool:
    """Whether ``data`` holds only the bytes of a plain file (one pass; the layout is checked on the
    fields: an empty field, a missing or extra one, a comment)."""
    return bool(data) and not data.translate(None, _PLAIN_BYTES)


def arrow_modules() -> Optional[tuple[Any, Any, Any]]:
    """``(pyarrow, pyarrow.compute, pyarrow.csv)``, or ``None`` where pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv
    except ImportError:
        return None
    return pa, pc, pcsv


def _coded(column: Any, pa: Any, pc: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes (in sorted order of the ids) and names of a string column: ids of at most eight bytes
    packed into integers (``id_codes``), longer ones by Arrow's dictionary."""
    parts = [_packed(chunk, pa) for chunk in column.chunks]  # no copy of the strings into one array
    packed = [part for part in parts if part is not None]
    if packed and len(packed) == len(parts):
        distinct, codes = sorted_codes(np.concatenate(packed) if len(packed) > 1 else packed[0])
        return codes, unpack(distinct)
    encoded = pc.dictionary_encode(column.combine_chunks())
    return sorted_vocabulary(
        encoded.indices.to_numpy().astype(np.int64), np.asarray(encoded.dictionary.to_pylist(), dtype=str)
    )


def _packed(array: Any, pa: Any) -> Optional[np.ndarray]:
    """The ids of a string array packed into ``uint64`` (straight from Arrow's buffers), or ``None``."""
    if not pa.types.is_string(array.type) or len(array) == 0 or array.null_count:
        return None
    _validity, offsets_buffer, data_buffer = array.buffers()
    if data_buffer is None:
        return None
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    return pack_bytes(data, offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64))


def _read_strings(data: bytes, names: list[str], pa: Any, pcsv: Any) -> Any:
    """Every field of every line as a string column: one space between fields, no quoting, a blank line
    kept (as a row of one field, which Arrow refuses)."""
    parse = pcsv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False, escape_char=False)
    parse.ignore_empty_lines = False
    convert = pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False)
    convert.quoted_strings_can_be_null = False
    return pcsv.read_csv(
        pa.BufferReader(data), read_options=pcsv.ReadOptions(column_names=names), parse_options=parse,
        convert_options=convert,
    )  # fmt: skip


def _plain_layout(table: Any) -> bool:
    """No empty field (two spaces in a row, a line starting with a space) and no comment line. A blank
    line, a trailing space or another number of fields already made Arrow refuse the file. Read off the
    string columns' buffers with NumPy (a first call of ``pyarrow.compute`` imports pandas: ~1 s)."""
    for j, column in enumerate(table.columns):
        for chunk in column.chunks:
            if len(chunk) == 0:
                continue
            _validity, offsets_buffer, data_buffer = chunk.buffers()
            offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[
                chunk.offset : chunk.offset + len(chunk) + 1
            ]
            if data_buffer is None or bool((np.diff(offsets) == 0).any()):
                return False
            if j == 0 and bool((np.frombuffer(data_buffer, dtype=np.uint8)[offsets[:-1]] == ord("#")).any()):
                return False
    return True


def arrow_table(
    data: bytes, n_fields: int, wanted: tuple[int, int, int], dtype: type, extra_fields: bool = False
) -> Optional[tuple[np.ndarray, ...]]:
    """``(qid codes, docno codes, values, line numbers, query names, doc names)`` of a plain file, fields
    ``wanted`` = (query, document, value) of ``n_fields``; ``None`` where another reader must read it.
    With ``extra_fields``, lines of more fields (ignored) are read too where every line has as many
    fields as the first one (lines of different lengths: the NumPy reader)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    modules = arrow_modules()
    if modules is None or not is_plain(data):
        return None
    pa, pc, pcsv = modules
    if extra_fields:
        end = data.find(b"\n")
        n_fields = max(n_fields, (data if end < 0 else data[:end]).count(b" ") + 1)
    names = [f"f{i}" for i in range(n_fields)]
    try:
        table = _read_strings(data, names, pa, pcsv)
        if not _plain_layout(table):
            return None
        text = table.column(names[wanted[2]])
        if dtype is not np.float64 and not pc.all(pc.match_substring_regex(text, _INTEGER)).as_py():
            return None
        values = pc.cast(text, pa.float64() if dtype is np.float64 else pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a line with another number of fields, a grade out of range: the other readers say
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        return None
    qid, queries = _coded(table.column(names[wanted[0]]), pa, pc)
    docno, docs = _coded(table.column(names[wanted[1]]), pa, pc)
    lines = np.arange(1, values.size + 1, dtype=np.int64)
    return qid, docno, np.asarray(values, dtype=dtype), lines, queries, docs
