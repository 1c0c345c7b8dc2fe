"""The fastest reading of a TREC run or qrels file: Apache Arrow's CSV reader, for plain files only.

A *plain* file is ASCII with fields separated by exactly one space, lines ended by ``\\n``, no blank
line, no comment, no leading or trailing space, no control character, and values written as decimal
numbers (run scores as Arrow and Python both read them; qrels grades: ``[+-]digits``). Those are
the files that retrieval toolkits write, and for them Arrow's multi-threaded reader gives exactly what
the line parser gives: the same fields (one delimiter, no quoting), the same values (both round
decimal text to the nearest double), ids coded in sorted order (packed into integers, or as NumPy byte
strings past eight bytes) and the line number of row ``i`` is ``i + 1``. A run's lines
may have fields after the sixth (ignored, as trec_eval ignores them) where each line has as many as
the first.
Anything else, a field count Arrow refuses, or ``pyarrow`` not being installed (it comes with the
``report`` extra) returns ``None``: the NumPy reader or the line parser then reads the file, or names
the offending line.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from embedmetrics._io.id_codes import pack_bytes, sorted_codes, unpack

#: The bytes of a plain file: printable ASCII, the space and ``\n``.
_PLAIN_BYTES = bytes(range(32, 127)) + b"\n"


def is_plain(data: bytes) -> bool:
    """Whether ``data`` holds only the bytes of a plain file (one pass; the layout is checked on the
    fields: an empty field, a missing or extra one, a comment)."""
    return bool(data) and not data.translate(None, _PLAIN_BYTES)


def arrow_modules() -> Optional[tuple[Any, Any]]:
    """``(pyarrow, pyarrow.csv)``, or ``None`` where pyarrow is not installed. (``pyarrow.compute`` is not
    used: its first call, like an array's ``to_numpy``, imports pandas, ~1.5 s; every column here is read
    off its buffers with NumPy.)"""
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        return None
    return pa, pcsv


def _buffers(chunk: Any) -> tuple[np.ndarray, np.ndarray]:
    """A string array's ``int64`` offsets (``len + 1``, its own) and its bytes."""
    _validity, offsets_buffer, data_buffer = chunk.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
    data = np.zeros(0, np.uint8) if data_buffer is None else np.frombuffer(data_buffer, dtype=np.uint8)
    return offsets.astype(np.int64), data


def _coded(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes (in sorted order of the ids) and names of a string column: ids of at most eight bytes
    packed into integers (``id_codes``), longer ones as NumPy byte strings (``S``: a NUL byte was refused
    before, so none is lost)."""
    parts = [_buffers(chunk) for chunk in column.chunks if len(chunk)]
    packed = [pack_bytes(data, offsets[:-1], np.diff(offsets)) for offsets, data in parts]
    keys = [part for part in packed if part is not None]
    if keys and len(keys) == len(packed):
        distinct, codes = sorted_codes(np.concatenate(keys) if len(keys) > 1 else keys[0])
        return codes, unpack(distinct)
    strings = np.concatenate([_fixed_width(offsets, data) for offsets, data in parts])
    distinct, codes = sorted_codes(strings)
    return codes, distinct.astype(str)


def _fixed_width(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The strings of one array as a NumPy ``S`` array (zero-padded to the longest)."""
    lengths = np.diff(offsets)
    width = max(int(lengths.max()), 1)
    at = np.arange(width)
    inside = at < lengths[:, None]
    taken = np.where(inside, data[np.minimum(offsets[:-1, None] + at, max(data.size - 1, 0))], 0)
    return np.ascontiguousarray(taken.astype(np.uint8)).view(f"S{width}").reshape(-1)


def _numbers(column: Any, dtype: type) -> Optional[np.ndarray]:
    """A numeric column's values (``None`` where one is missing: an empty field, or a text Arrow reads as
    null, like ``nan``)."""
    parts: list[np.ndarray] = []
    for chunk in column.chunks:
        if chunk.null_count:
            return None
        data = chunk.buffers()[1]
        parts.append(np.frombuffer(data, dtype=dtype)[chunk.offset : chunk.offset + len(chunk)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _read_columns(data: bytes, names: list[str], value: str, dtype: type, pa: Any, pcsv: Any) -> Any:
    """Every field of every line as a string column but ``value``'s, read as numbers by Arrow's
    converter: one space between fields, no quoting, a blank line kept (as a row of one field, which
    Arrow refuses)."""
    parse = pcsv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False, escape_char=False)
    parse.ignore_empty_lines = False
    types = dict.fromkeys(names, pa.string())
    types[value] = pa.float64() if dtype is np.float64 else pa.int64()
    convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False)
    convert.quoted_strings_can_be_null = False
    return pcsv.read_csv(
        pa.BufferReader(data), read_options=pcsv.ReadOptions(column_names=names), parse_options=parse,
        convert_options=convert,
    )  # fmt: skip


def _plain_layout(table: Any) -> bool:
    """No empty field (two spaces in a row, a line starting with a space) and no comment line. A blank
    line, a trailing space or another number of fields already made Arrow refuse the file."""
    for j, column in enumerate(table.columns):
        if str(column.type) != "string":
            continue  # the value: an empty one is null (``_numbers``)
        for chunk in column.chunks:
            if len(chunk) == 0:
                continue
            offsets, data = _buffers(chunk)
            if data.size == 0 or bool((np.diff(offsets) == 0).any()):
                return False
            if j == 0 and bool((data[offsets[:-1]] == ord("#")).any()):
                return False
    return True


def arrow_table(
    data: bytes, n_fields: int, wanted: tuple[int, int, int], dtype: type, extra_fields: bool = False
) -> Optional[tuple[np.ndarray, ...]]:
    """``(qid codes, docno codes, values, line numbers, query names, doc names)`` of a plain file, fields
    ``wanted`` = (query, document, value) of ``n_fields``; ``None`` where another reader must read it.
    With ``extra_fields``, lines of more fields (ignored) are read too where every line has as many
    fields as the first one (lines of different lengths: the NumPy reader). A grade is read by Arrow as
    Python reads it ([+-]digits) but for hexadecimal (``0x10``: Arrow's alone), left to the others."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    modules = arrow_modules()
    if modules is None or not is_plain(data) or (dtype is not np.float64 and b"0x" in data.lower()):
        return None
    pa, pcsv = modules
    if extra_fields:
        end = data.find(b"\n")
        n_fields = max(n_fields, (data if end < 0 else data[:end]).count(b" ") + 1)
    names = [f"f{i}" for i in range(n_fields)]
    try:
        table = _read_columns(data, names, names[wanted[2]], dtype, pa, pcsv)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a line with another number of fields, a value not a number: the other readers say
    values = _numbers(table.column(names[wanted[2]]), dtype)
    if values is None or not _plain_layout(table):
        return None
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        return None
    qid, queries = _coded(table.column(names[wanted[0]]))
    docno, docs = _coded(table.column(names[wanted[1]]))
    lines = np.arange(1, values.size + 1, dtype=np.int64)
    return qid, docno, np.asarray(values, dtype=dtype), lines, queries, docs
