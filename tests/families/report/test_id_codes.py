"""Packed integer codes of short TREC ids (:mod:`embedmetrics._io.id_codes`) against plain Python:
the integer order is the byte order of the ids, codes number ids by first appearance, and the report's
joint vocabulary is the one ``np.unique`` gives on the strings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedmetrics._io import id_codes, trec, trec_arrow

#: ids as files hold them: printable ASCII without the space, 1 to 8 bytes (prefixes of each other)
_SHORT_ID = st.text(alphabet="0123456789ab-_.:AZz~!", min_size=1, max_size=8)


def _pack(ids: list[bytes]) -> np.ndarray | None:
    data = np.frombuffer(b"".join(ids) + b"-", dtype=np.uint8)  # a byte past the last id
    lengths = np.array([len(i) for i in ids], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return id_codes.pack_bytes(data, starts, lengths)


def _by_first_appearance(ids: list[bytes]) -> tuple[list[int], list[int]]:
    seen: dict[bytes, int] = {}
    first = []
    for at, name in enumerate(ids):
        if name not in seen:
            seen[name] = len(seen)
            first.append(at)
    return [seen[name] for name in ids], first


@settings(max_examples=200, deadline=None, derandomize=True)
@given(names=st.lists(_SHORT_ID, min_size=1, max_size=40), runs=st.booleans())
def test_packed_ids_order_as_bytes_and_code_by_first_appearance(names: list[str], runs: bool) -> None:
    if runs:  # a file grouped by query: long runs of one id
        names = [name for name in names for _ in range(3)]
    ids = [name.encode() for name in names]
    keys = _pack(ids)
    assert keys is not None
    assert keys.dtype == np.uint64
    assert id_codes.unpack(keys).tolist() == names
    assert [ids[i] for i in np.argsort(keys, kind="stable")] == sorted(ids)
    np.testing.assert_array_equal(id_codes.pack_names(np.array(names)), keys)
    np.testing.assert_array_equal(id_codes.pack_names(np.array(ids)), keys)
    codes, first = id_codes.first_appearance_codes(keys)
    want_codes, want_first = _by_first_appearance(ids)
    assert codes.tolist() == want_codes
    assert first.tolist() == want_first


@pytest.mark.parametrize("ids", [[b"d1", b"123456789"], [b"d1", b""], [b"d\xc3\xa9"], [b"d\x00x"]])
def test_ids_that_do_not_pack_are_left_to_the_string_path(ids: list[bytes]) -> None:
    assert _pack(ids) is None
    names = np.array([i.decode() for i in ids])
    assert id_codes.pack_names(names) is None
    assert id_codes.pack_names(np.array(ids)) is None


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    a=st.lists(_SHORT_ID, min_size=1, max_size=20, unique=True),
    b=st.lists(_SHORT_ID, min_size=1, max_size=20, unique=True),
)
def test_joint_vocabulary_keeps_the_first_codes_and_adds_the_others(a: list[str], b: list[str]) -> None:
    """Two sorted vocabularies (as the readers give them): ``a``'s names keep their codes (code order is
    name order among them), ``b``'s names are found among them or added after, each name once."""
    names_a, names_b = np.unique(np.array(a)), np.unique(np.array(b))
    codes_a = np.arange(len(names_a))[::-1]
    codes_b = np.arange(len(names_b))
    vocabulary, got_a, got_b = trec._joint_codes(names_a, codes_a, names_b, codes_b)
    names = trec._vocabulary_names(vocabulary)
    assert names[: len(names_a)] == names_a.tolist()
    assert sorted(names) == sorted(set(a) | set(b))
    assert [names[c] for c in got_a] == names_a[codes_a].tolist()
    assert [names[c] for c in got_b] == names_b[codes_b].tolist()


@pytest.mark.parametrize("doc", ["d7", "document-9"])  # packed ids, and Arrow's dictionary past 8 bytes
def test_arrow_reader_codes_both_kinds_of_ids_like_the_line_parser(doc: str) -> None:
    lines = [f"q{(q * 5) % 7} Q0 {doc}{d} {d} {1.0 / (d + 1)} tag" for q in range(7) for d in range(4)]
    data = ("\n".join(lines) + "\n").encode()
    table = trec_arrow.arrow_table(data, 6, (0, 2, 4), np.float64)
    assert table is not None
    want = trec.parse_lines("run.txt", data, trec.RUN)
    for got_column, want_column in zip(table, want):
        np.testing.assert_array_equal(got_column, want_column)


def test_joint_vocabulary_of_ids_that_do_not_pack() -> None:
    names_a, names_b = np.array(["d1", "d10", "document-7"]), np.array(["d10", "d2"])
    vocabulary, codes_a, codes_b = trec._joint_codes(names_a, np.arange(3), names_b, np.arange(2))
    assert trec._vocabulary_names(vocabulary) == ["d1", "d10", "document-7", "d2"]
    assert codes_a.tolist() == [0, 1, 2]
    assert codes_b.tolist() == [1, 3]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(values=st.lists(st.integers(0, 9), min_size=1, max_size=40), repeat=st.integers(1, 5))
def test_sorted_codes_equal_numpy_unique_with_or_without_runs(values: list[int], repeat: int) -> None:
    """The readers' numbering: codes in sorted order of the keys, runs of equal neighbours (a file
    grouped by query) coded once."""
    keys = np.repeat(np.array(values, dtype=np.uint64), repeat)
    distinct, codes = id_codes.sorted_codes(keys)
    want_distinct, want_codes = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(distinct, want_distinct)
    np.testing.assert_array_equal(codes, want_codes.reshape(-1))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    names=st.lists(  # (no NUL: NumPy's str arrays drop trailing NULs)
        st.text(st.characters(blacklist_characters="\0"), min_size=1, max_size=6),
        min_size=1,
        max_size=20,
        unique=True,
    ),
    data=st.data(),
)
def test_in_name_order_keeps_every_row_its_name(names: list[str], data: st.DataObject) -> None:
    """``Run``/``Qrels``' ordering of names given in any order: the names come out sorted (as Python
    sorts them) and every code still names what it named."""
    codes = np.array(data.draw(st.lists(st.integers(0, len(names) - 1), max_size=30)), dtype=np.int64)
    got_codes, got_names = id_codes.in_name_order(codes, np.array(names), "codes", "names")
    assert got_names.tolist() == sorted(names)
    assert [str(got_names[c]) for c in got_codes] == [names[c] for c in codes]
