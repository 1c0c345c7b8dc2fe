"""Integer codes of the query and document ids of TREC files, without string hashing or sorting.

Ids of one to eight ASCII bytes (what retrieval toolkits write: ``q12``, ``d4711``, ``MARCO_123``) are
packed big-endian into one ``uint64``, zero-padded on the right. The integers then compare as the ids
compare byte by byte (``strcmp``, and NumPy's order of ``str`` arrays): at the first differing byte,
and a proper prefix first, since its padding byte 0 is below every character. So one integer sort
codes them in sorted order (``sorted_codes``, the readers' numbering) or in order of first appearance
(``first_appearance_codes``). Anything else (a
longer id, a non-ASCII character) returns ``None``, and the caller codes the strings themselves.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

#: Bytes in one packed id.
WIDTH = 8


def pack_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Optional[np.ndarray]:
    """``uint64`` keys of the ids ``data[starts[i] : starts[i] + lengths[i]]`` (``data``: ``uint8``), or
    ``None`` where an id is empty, longer than ``WIDTH`` bytes or holds a byte outside 1..127.

    Every id is read as the eight bytes from its start (one big-endian load, the data padded with
    zeros), and the bytes past its end are shifted out."""
    if lengths.size == 0 or int(lengths.min()) < 1 or int(lengths.max()) > WIDTH:
        return None
    end = int((starts + lengths).max())
    data = data[int(starts.min()) : end]
    if not (int(data.min()) >= 1 and int(data.max()) <= 127):
        return None
    padded = np.zeros(data.size + WIDTH, dtype=np.uint8)
    padded[: data.size] = data
    windows = np.ndarray(shape=(data.size,), dtype=np.uint64, buffer=padded, strides=(1,))
    keys: np.ndarray = windows[starts - int(starts.min())]
    if np.little_endian:
        keys = keys.byteswap()  # big-endian: the first byte is the most significant
    cut = (np.uint64(8) * (WIDTH - lengths)).astype(np.uint64)
    packed: np.ndarray = (keys >> cut) << cut
    return packed


def pack_names(names: np.ndarray) -> Optional[np.ndarray]:
    """``uint64`` keys of a NumPy ``bytes`` or ``str`` array (see ``pack_bytes``), or ``None``."""
    if names.dtype.kind not in "SU" or names.size == 0:
        return None
    unit = np.dtype(np.uint8 if names.dtype.kind == "S" else np.uint32)
    width = names.dtype.itemsize // unit.itemsize
    if width > WIDTH:
        return None
    chars: np.ndarray = names.view(unit).reshape(names.size, width)
    used = chars > 0
    if int(chars.max()) > 127 or not used[:, 0].all() or (used[:, 1:] & ~used[:, :-1]).any():
        return None  # non-ASCII, an empty id, or a NUL inside one
    padded = np.zeros((names.size, WIDTH), dtype=np.uint8)
    padded[:, :width] = chars
    return padded.view(">u8").reshape(-1).astype(np.uint64)


def unpack(keys: np.ndarray) -> np.ndarray:
    """The ids (``str``) of packed keys."""
    return keys.astype(">u8").view(f"S{WIDTH}").astype(str)


def run_starts(values: np.ndarray) -> np.ndarray:
    """Where a run of equal neighbours starts: ``True`` at 0 and wherever a value differs from the one
    before it."""
    head = np.empty(values.size, dtype=bool)
    head[:1] = True
    np.not_equal(values[1:], values[:-1], out=head[1:])
    return head


def first_appearance_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``keys`` numbered in order of first appearance (``int64``), and the position of each
    code's first appearance. Runs of equal neighbours (a file grouped by query) are coded once."""
    head = run_starts(keys)
    if keys.size and 2 * int(head.sum()) < keys.size:
        at = np.flatnonzero(head)
        codes, first = first_appearance_codes(keys[at])
        return codes[np.cumsum(head) - 1], at[first]
    order = np.argsort(keys)
    ordered = keys[order]
    new = run_starts(ordered)
    first = np.minimum.reduceat(order, np.flatnonzero(new)) if keys.size else order
    appearance = np.argsort(first)
    rank = np.empty(first.size, dtype=np.int64)
    rank[appearance] = np.arange(first.size)
    codes = np.empty(keys.size, dtype=np.int64)
    codes[order] = rank[np.cumsum(new) - 1]
    return codes, first[appearance]


def sorted_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys ascending and the code (position among them) of every key. Runs of equal
    neighbours (a file grouped by query) are coded once."""
    head = run_starts(keys)
    if keys.size and 2 * int(head.sum()) < keys.size:
        distinct, codes = sorted_codes(keys[head])
        return distinct, codes[np.cumsum(head) - 1]
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, inverse.reshape(-1).astype(np.int64, copy=False)


def sorted_vocabulary(codes: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``codes`` into a vocabulary of ``names`` (distinct, any order) recoded so that code order is name
    order, and the names sorted."""
    order = np.argsort(names, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[codes], names[order]


def in_name_order(
    codes: np.ndarray, names: np.ndarray, codes_name: str, names_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """``codes`` (``int64``) into ``names`` (``str``) such that code order is name order: names
    already sorted are kept (one comparison pass, what every reader gives), others are sorted and the
    codes renumbered (``sorted_vocabulary``). A repeated name or a code outside ``0..len(names)-1``
    raises a ``ValueError`` naming the argument (``codes_name``, ``names_name``) and the value."""
    names = np.asarray(names)
    if names.ndim != 1:
        raise ValueError(f"{names_name} must be 1-D; got shape {names.shape}.")
    if names.dtype.kind != "U":
        names = names.astype(str)
    codes = np.asarray(codes)
    if codes.ndim != 1 or (codes.size and codes.dtype.kind not in "iu"):
        raise ValueError(f"{codes_name} must be 1-D integer codes; got {codes.dtype} of shape {codes.shape}.")
    codes = codes.astype(np.int64, copy=False)
    low, high = (int(codes.min()), int(codes.max())) if codes.size else (0, -1)
    if low < 0 or high >= names.size:
        raise ValueError(
            f"{codes_name}: code {low if low < 0 else high} is not a position in {names_name} "
            f"({names.size} names)."
        )
    if bool((names[1:] > names[:-1]).all()):
        return codes, names
    ordered = np.sort(names)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        raise ValueError(
            f"{names_name}: the name {str(ordered[1:][repeated][0])!r} appears twice; names are distinct."
        )
    return sorted_vocabulary(codes, names)
