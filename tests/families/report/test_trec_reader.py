"""The vectorised TREC readers give exactly what the line parser gives, and the same errors.

``read_run`` / ``read_qrels`` take Arrow's CSV reader for plain files (:mod:`trec_arrow`), the NumPy
reader (:func:`fast_columns`) for other well-formed ASCII files and the line parser otherwise; the
line parser is the reference here (it is the simple, obviously-correct reading of the format:
``str.strip().split()`` per line).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedmetrics._io import trec, trec_arrow
from embedmetrics._io.errors import ReportInputError

_ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789_-.:/", min_size=1, max_size=12)
_SCORE = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False).map(repr),
    st.integers(-1000, 1000).map(str),
    st.sampled_from(["+.5", "-2e3", "1_0", "5.", "1E-3", "0"]),
)
#: scores as decimal text (``1_0`` is a number to Python only: Arrow's reader leaves it to the others)
_DECIMAL_SCORE = _SCORE.filter(lambda text: "_" not in text)
#: each file kind's format and the dataclass it is read into
_KINDS = {"run": (trec.RUN, trec.Run), "qrels": (trec.QRELS, trec.Qrels)}
_GAP = st.sampled_from([" ", "\t", "  ", " \t "])


@st.composite
def _files(draw: st.DrawFn, n_fields: int) -> bytes:
    """A file of ``n_fields``-field lines with every layout the format allows."""
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    lines = ["\ufeff"] if draw(st.booleans()) else [""]
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["row", "row", "row", "row", "blank", "comment"]))
        if kind == "blank":
            lines.append(draw(_GAP) if draw(st.booleans()) else "")
        elif kind == "comment":
            lines.append(draw(st.sampled_from(["", "  "])) + "#" + draw(_ID) + " x y")
        else:
            fields = [draw(_ID), "Q0" if n_fields == 6 else "0", draw(_ID)]
            fields += [str(draw(st.integers(1, 99))), draw(_SCORE), "tag"] if n_fields == 6 else []
            fields += [str(draw(st.integers(-2, 3)))] if n_fields == 4 else []
            fields += draw(st.lists(_ID, max_size=2)) if n_fields == 6 else []  # ignored, as trec_eval does
            pad = draw(st.sampled_from(["", " ", "\t"]))
            lines.append(pad + "".join(f + draw(_GAP) for f in fields[:-1]) + fields[-1] + pad)
    text = lines[0] + eol.join(lines[1:]) + (eol if draw(st.booleans()) else "")
    return text.encode("utf-8")


def _same(a: trec.Run | trec.Qrels, b: trec.Run | trec.Qrels) -> None:
    for name in a.__dataclass_fields__:
        got, want = getattr(a, name), getattr(b, name)
        if isinstance(got, str):  # the run's tag
            assert got == want, name
            continue
        assert got.dtype.kind == want.dtype.kind, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def _read(tmp_path: Path, data: bytes, which: str) -> trec.Run | trec.Qrels:
    path = tmp_path / "file.txt"
    path.write_bytes(data)
    return trec.read_run(str(path)) if which == "run" else trec.read_qrels(str(path))


def _lines(data: bytes, which: str) -> trec.Run | trec.Qrels:
    fmt, kind = _KINDS[which]
    return kind(*trec.parse_lines("file.txt", data, fmt))


def _columns(data: bytes, which: str) -> trec.Columns | None:
    fmt = _KINDS[which][0]
    return trec.fast_columns(data, fmt.n_fields, (0, 2, fmt.value), fmt.extra_fields)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.one_of(_files(6).map(lambda d: ("run", d)), _files(4).map(lambda d: ("qrels", d))))
def test_fast_reader_equals_the_line_parser(data: tuple[str, bytes]) -> None:
    which, raw = data
    try:
        want = _lines(raw, which)
    except ReportInputError:  # empty (only blanks and comments): both must refuse
        assert _columns(raw, which) is None
        return
    cols = _columns(raw, which)
    assert cols is not None, "a well-formed ASCII file must take the vectorised path"
    fmt, kind = _KINDS[which]
    fast = trec.fast_table(cols, fmt)
    assert fast is not None
    _same(kind(*fast), want)


def _arrow(data: bytes, which: str) -> trec.Run | trec.Qrels | None:
    fmt, kind = _KINDS[which]
    table = trec_arrow.arrow_table(data, fmt.n_fields, (0, 2, fmt.value), fmt.dtype, fmt.extra_fields)
    return None if table is None else kind(*table)


@st.composite
def _plain_files(draw: st.DrawFn, n_fields: int) -> bytes:
    """Files as retrieval toolkits write them: one space between fields, ``\\n`` line ends (run lines
    with the same number of fields after the sixth, ignored)."""
    lines = []
    extra = draw(st.integers(0, 2)) if n_fields == 6 else 0
    for _ in range(draw(st.integers(1, 30))):
        fields = [draw(_ID), "Q0" if n_fields == 6 else "0", draw(_ID)]
        fields += [str(draw(st.integers(1, 99))), draw(_DECIMAL_SCORE), "tag"] if n_fields == 6 else []
        fields += [str(draw(st.integers(-(2**63), 2**63 - 1)))] if n_fields == 4 else []
        fields += [draw(_ID) for _ in range(extra)]
        lines.append(" ".join(fields))
    return ("\n".join(lines) + ("\n" if draw(st.booleans()) else "")).encode()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.one_of(_plain_files(6).map(lambda d: ("run", d)), _plain_files(4).map(lambda d: ("qrels", d))))
def test_arrow_reader_equals_the_line_parser_on_plain_files(data: tuple[str, bytes]) -> None:
    which, raw = data
    got = _arrow(raw, which)
    if got is None:  # only a grade file with hexadecimal-looking text ("0x") goes to the NumPy reader
        assert which == "qrels", "a plain file must take Arrow's reader"
        assert b"0x" in raw.lower(), "a plain file must take Arrow's reader"
        return
    _same(got, _lines(raw, which))


def test_arrow_reader_takes_plain_files(tmp_path: Path) -> None:
    raw = b"q2 Q0 d9 1 2.5 t\nq1 Q0 d9 1 -1e-3 t\nq2 Q0 d1 2 +.5 t\n"
    got = _arrow(raw, "run")
    assert got is not None  # not vacuous: the plain path is taken
    _same(got, _lines(raw, "run"))
    assert list(got.queries) == ["q1", "q2"]  # codes in sorted order of the ids
    assert list(got.docno) == [1, 1, 0]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.one_of(_files(6).map(lambda d: ("run", d)), _files(4).map(lambda d: ("qrels", d))))
def test_arrow_reader_refuses_or_equals_on_any_layout(data: tuple[str, bytes]) -> None:
    which, raw = data
    got = _arrow(raw, which)
    if got is not None:  # tabs, double spaces, CRLF, comments, blank lines must have been refused
        _same(got, _lines(raw, which))


@pytest.mark.parametrize(
    "raw",
    [
        b"q1 Q0 d1 1 0.5 t\nq1 Q0  d2 2 0.4 t\n",  # two spaces: an empty field to Arrow
        b" q1 Q0 d1 1 0.5 t\n",  # leading space
        b"q1 Q0 d1 1 0.5 t \n",  # trailing space
        b"q1 Q0 d1 1 0.5 t\n\nq1 Q0 d2 2 0.4 t\n",  # blank line
        b"# a b c d e\nq1 Q0 d1 1 0.5 t\n",  # a comment of six words
        b"#q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4 t\n",  # a comment that reads like a run line
        b"q1 Q0 d2 2 0.4 t\n#q1 Q0 d1 1 0.5 t\n",  # the same after a run line
        b" q1 Q0 d1 1 0.5\n",  # five fields after a space: six to Arrow, the first empty
        b"q1 Q0 d1 1 0.5 t\n q1 Q0 d2 2 0.4\n",  # the same on a later line
        b"q1 Q0 d1 1 0.5 \n",  # five fields before a space: six to Arrow, the last empty
        b"q1 Q0 d1 1 0.5 ",  # the same at the end of the file
        b"q1 Q0 d2 2 0.4 t\n\n",  # a blank last line
        b"q1 Q0  d2 2 0.4\n",  # five fields and two spaces: six to Arrow, one of them empty
        b"q1 Q0 d2 2 0.4  \n",  # two trailing spaces
        b"q1 Q0 d1 1 0.5 t\r\n",  # CRLF
        b"q1\tQ0 d1 1 0.5 t\n",  # tab
        b"q1 Q0 d1 1 1_0 t\n",  # Python reads 10, Arrow refuses: the other readers decide
        b"q1 Q0 d1 1 1e999 t\n",  # not finite: the line parser names the line
        b"q1 Q0 d1 1 0.5\n",  # five fields
    ],
)
def test_arrow_reader_leaves_other_files_to_the_other_readers(tmp_path: Path, raw: bytes) -> None:
    assert _arrow(raw, "run") is None
    try:
        want = _lines(raw, "run")
    except ReportInputError as err:
        with pytest.raises(ReportInputError, match=str(err).split(":")[1]):
            _read(tmp_path, raw, "run")
        return
    _same(_read(tmp_path, raw, "run"), want)


def test_qrels_grade_out_of_range_is_left_to_the_line_parser() -> None:
    assert _arrow(b"q1 0 d1 99999999999999999999\n", "qrels") is None


def test_without_pyarrow_the_numpy_reader_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = b"q2 Q0 d9 1 2.5 t\nq1 Q0 d9 1 -1e-3 t\n"
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    assert _arrow(raw, "run") is None
    _same(_read(tmp_path, raw, "run"), _lines(raw, "run"))


@pytest.mark.parametrize(
    "raw",
    [
        "q1 Q0 d\u00e9 1 0.5 t\n".encode(),  # non-ASCII id
        b"q1 Q0 d1 1 0.5 t\rq1 Q0 d2 2 0.4 t\r",  # old Mac line ends
        b"q1\x0cQ0 d1 1 0.5 t\n",  # form feed: whitespace to str.split
        b"q1\x1fQ0 d1 1 0.5 t\n",  # unit separator: whitespace to str.split
    ],
)
def test_unusual_files_take_the_line_parser_and_read_the_same(tmp_path: Path, raw: bytes) -> None:
    assert _columns(raw, "run") is None
    _same(_read(tmp_path, raw, "run"), _lines(raw, "run"))


@pytest.mark.parametrize(
    ("which", "raw", "message"),
    [
        ("run", b"q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", "file.txt:2: expected 6 fields"),
        ("run", b"# c\nq1 Q0 d1 1 zero t\n", "file.txt:2: score 'zero' is not a number."),
        ("run", b"q1 Q0 d1 1 0.5 t\n\nq1 Q0 d2 2 nan t\n", "file.txt:3: score 'nan' is not finite."),
        ("run", b"q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", "file.txt:2: document 'd1' appears twice"),
        ("run", b"# only a comment\n\n", "the run is empty"),
        ("run", b"q1 Q0 d1 1 0.5 t\nq1 Q0 d1\x00 2 0.4 t\n", "file.txt:2: a NUL byte"),
        ("qrels", b"q1 0 d1\x00 1\n", "file.txt:1: a NUL byte"),
        ("qrels", b"q1 0 d1 1\nq1 0 d2 1.5\n", "file.txt:2: relevance '1.5' is not an integer."),
        ("qrels", b"q1 0 d1 99999999999999999999\n", "file.txt:1: relevance '99999999999999999999' is out"),
        ("qrels", b"q1 0 d1\n", "file.txt:1: expected 4 fields"),
        ("qrels", b"q1 0 d1 1\nq1 0 d2 1 x\n", "file.txt:2: expected 4 fields (qid iter docno rel), got 5"),
        ("run", b"q1 Q0 d1 1 0.5 t x\nq1 Q0 d2 2 0.4\n", "file.txt:2: expected 6 fields (qid Q0 docno rank"),
        ("qrels", b"q1 0 d1 1\r\nq1 0 d1 0\r\n", "file.txt:2: document 'd1' appears twice"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, which: str, raw: bytes, message: str) -> None:
    with pytest.raises(ReportInputError) as err:
        _read(tmp_path, raw, which)
    assert message in str(err.value).replace(str(tmp_path / "file.txt"), "file.txt")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    scores=st.lists(st.sampled_from([0.5, -1.0, 2.0, 0.0, -0.0, 1e300]), min_size=1, max_size=40),
    data=st.data(),
)
def test_trec_eval_order_is_score_then_docno_descending(scores: list[float], data: st.DataObject) -> None:
    """Within every query: score descending, then docno descending, whether the run is written query by
    query with scores descending (the fast path: no sort by score) or in any order."""
    score = np.array(scores)
    doc = np.array(data.draw(st.lists(st.integers(0, 9), min_size=score.size, max_size=score.size)))
    query = np.array(data.draw(st.lists(st.integers(0, 2), min_size=score.size, max_size=score.size)))
    if data.draw(st.booleans()):  # as toolkits write runs: query by query, scores descending
        written = np.lexsort((-score, query))
        score, doc, query = score[written], doc[written], query[written]
    for n_docs in (10, 2**61):  # the one-key sort, and the lexsort where the key would overflow
        got = trec._trec_eval_order(score, doc, n_docs, query)
        assert sorted(got.tolist()) == list(range(score.size))
        for q in np.unique(query):
            mine = got[query[got] == q]
            rows = np.flatnonzero(query == q)
            want = rows[np.lexsort((-doc[rows], -score[rows]))]
            # rows equal in both keys may come in any order: compare the keys in the order given
            assert np.array_equal(score[mine], score[want]), n_docs
            assert np.array_equal(doc[mine], doc[want]), n_docs


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    text=st.one_of(
        st.text(alphabet="0123456789.eE+-_xnaifINF ", min_size=1, max_size=12),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.from_regex(
            r"[+-]?([0-9]{1,20}\.?[0-9]{0,20}|\.[0-9]{1,20})([eE][+-]?[0-9]{1,3})?", fullmatch=True
        ),
    )
)
def test_arrow_reads_a_finite_score_only_as_python_does(text: str) -> None:
    """The plain-file reader takes Arrow's reading of run scores without a pattern check: every text
    Arrow reads as a finite double, Python's ``float`` reads as the same double (bit for bit)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        value = pc.cast(pa.array([text]), pa.float64()).to_pylist()[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return  # refused: the other readers read the file
    if not np.isfinite(value):
        return  # refused too (a score must be finite)
    assert np.float64(float(text)).tobytes() == np.float64(value).tobytes(), text


#: One run written with fields after the sixth, in each layout that takes another reader: Arrow's
#: (one space, every line as long as the first), NumPy's (lines of different lengths, a tab), the line
#: parser's (a non-ASCII id).
_TRAILING = {
    "arrow": "q2 Q0 d9 1 2.5 t 1 x\nq1 Q0 d9 7 -1e-3 t 2 y\nq2 Q0 d1 2 0.5 t 3 z\n",
    "numpy": "q2 Q0 d9 1 2.5 t 1\nq1 Q0 d9 7 -1e-3 t\nq2\tQ0 d1 2 0.5 t a b c\n",
    "lines": "q2 Q0 d9 1 2.5 t \u00e9\nq1 Q0 d\u00e9 7 -1e-3 t\nq2 Q0 d1 2 0.5 t 3 z\n",
}


@pytest.mark.parametrize("route", sorted(_TRAILING))
@pytest.mark.parametrize("pyarrow", [True, False])
def test_run_fields_after_the_sixth_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, pyarrow: bool
) -> None:
    """trec_eval's run reader (``get_trec_results.c``) ignores every field after ``run_id``: the run reads
    as the same file cut to its first six fields, by every reader, with or without pyarrow."""
    text = _TRAILING[route]
    cut = "".join(" ".join(line.split()[:6]) + "\n" for line in text.splitlines())
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    raw = text.encode()
    assert (_arrow(raw, "run") is not None) == (pyarrow and route == "arrow")  # the route is taken
    assert (_columns(raw, "run") is not None) == (route != "lines")
    _same(_read(tmp_path, raw, "run"), _lines(cut.encode(), "run"))
    assert _read(tmp_path, raw, "run").docs.tolist() == sorted({line.split()[2] for line in cut.splitlines()})
