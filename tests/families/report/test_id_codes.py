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
def test_joint_vocabulary_equals_the_sorted_strings(a: list[str], b: list[str]) -> None:
    names_a, names_b = np.array(a), np.array(b)
    codes_a, codes_b = np.arange(len(a))[::-1], np.arange(len(b))
    got = trec._joint_codes(names_a, codes_a, names_b, codes_b)
    want_names, inverse = np.unique(np.concatenate([names_a, names_b]), return_inverse=True)
    assert trec._vocabulary_names(got[0]) == want_names.tolist()
    np.testing.assert_array_equal(got[1], inverse[: len(a)][codes_a])
    np.testing.assert_array_equal(got[2], inverse[len(a) :][codes_b])


@pytest.mark.parametrize("doc", ["d7", "document-9"])  # packed ids, and Arrow's dictionary past 8 bytes
def test_arrow_reader_codes_both_kinds_of_ids_like_the_line_parser(doc: str) -> None:
    lines = [f"q{(q * 5) % 7} Q0 {doc}{d} {d} {1.0 / (d + 1)} tag" for q in range(7) for d in range(4)]
    data = ("\n".join(lines) + "\n").encode()
    table = trec_arrow.arrow_table(data, 6, (0, 2, 4), np.float64)
    assert table is not None
    want = trec.parse_lines("run.txt", data, trec.RUN)
    for got_column, want_column in zip(table, want):
        np.testing.assert_array_equal(got_column, want_column)


def test_joint_vocabulary_of_ids_that_do_not_pack_is_the_sorted_strings() -> None:
    names_a, names_b = np.array(["d10", "document-7", "d1"]), np.array(["d2", "d10"])
    vocabulary, codes_a, codes_b = trec._joint_codes(names_a, np.arange(3), names_b, np.arange(2))
    assert trec._vocabulary_names(vocabulary) == ["d1", "d10", "d2", "document-7"]
    assert codes_a.tolist() == [1, 3, 0]
    assert codes_b.tolist() == [2, 1]
