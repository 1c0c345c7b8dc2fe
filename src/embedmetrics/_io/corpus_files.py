"""A corpus of embeddings read block by block: one file, or a directory of shards.

``--corpus`` names a ``.npy`` file (its rows are read in blocks through a plain file handle: never the
whole file in memory, and no mapped page of it counts in the resident memory), a ``.npz`` file (the
array is streamed out of the archive the same way), a ``.pt`` / ``.pth`` file (loaded whole), or a
**directory** of ``.npy`` / ``.npz`` shards, read in name order as one corpus. Rows are widened one
block at a time: float16 and integers to float32, float64 kept.

The ids of a file's rows come from an ``ids`` array beside the embeddings in a ``.npz`` / ``.pt`` file,
else from its sidecar ``NAME.ids.txt`` (one id per line), else (a single file only) the row numbers.
No string per document is kept: ``index_ids`` reads the ids once, checks that none is repeated (by a
64-bit hash per document, in passes of bounded memory) and returns the rows of the judged documents;
``names_at`` reads the ids of a few rows back. Every failure is a ``ReportInputError`` naming the file.
"""

from __future__ import annotations

import itertools
import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Optional

import numpy as np

from embedmetrics._io.arrays import SUFFIXES, check_numpy_file, load_array
from embedmetrics._io.errors import ReportInputError

IDS_KEY = "ids"
#: Shard files of a directory corpus.
SHARD_SUFFIXES = (".npy", ".npz")
#: Ids read (and hashed) at a time.
ID_CHUNK = 1 << 16
#: Memory for the hashes of one pass of the duplicate check (8 bytes per document).
HASH_BUDGET = 128 << 20
#: Bytes of one block of widened rows when no row count is asked.
BLOCK_BYTES = 64 << 20


def sidecar_path(path: str) -> str:
    """``dir/name.npy`` -> ``dir/name.ids.txt``."""
    return os.path.splitext(path)[0] + ".ids.txt"


@dataclass(frozen=True)
class Shard:
    """One file of the corpus: where its rows are and where its ids come from.

    ``member``: the ``.npz`` array holding the rows (``None`` for ``.npy``); ``offset``: where the rows
    start in the ``.npy`` file or the member; ``ids``: ``"sidecar"``, ``"array"`` (an ``ids`` array in
    the file) or ``"rows"`` (the row numbers); ``array``: the rows of a ``.pt`` file, loaded whole."""

    path: str
    member: Optional[str]
    offset: int
    rows: int
    width: int
    dtype: np.dtype
    ids: str
    array: Optional[np.ndarray] = field(default=None, compare=False, repr=False)

    @property
    def ids_where(self) -> str:
        """The file (or array) its ids are read from, for messages."""
        if self.ids == "sidecar":
            return sidecar_path(self.path)
        return f"{self.path}[{IDS_KEY!r}]" if self.ids == "array" else self.path

    def fingerprint(self, root: str) -> dict[str, Any]:
        """Name, size, modification time, shape and dtype of the file and of its ids file."""
        out: dict[str, Any] = {"file": os.path.relpath(self.path, root), **_stat(self.path)}
        out.update(rows=self.rows, width=self.width, dtype=str(self.dtype), member=self.member, ids=self.ids)
        if self.ids == "sidecar":
            out["ids_file"] = _stat(sidecar_path(self.path))
        return out


def _stat(path: str) -> dict[str, int]:
    info = os.stat(path)
    return {"size": int(info.st_size), "mtime_ns": int(info.st_mtime_ns)}


# ----------------------------------------------------------------------------- headers


def _read_header(handle: IO[bytes], path: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the ``.npy`` data starting at ``handle``."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(handle)
        if version in ((2, 0), (3, 0)):
            return np.lib.format.read_array_header_2_0(handle)
    except (ValueError, OSError, EOFError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ReportInputError(f"{path}: cannot read it as .npy: {reason}") from None
    raise ReportInputError(f"{path}: unsupported .npy format version {version}.")


def _check_layout(path: str, shape: tuple[int, ...], fortran: bool, dtype: np.dtype) -> None:
    if len(shape) != 2:
        raise ReportInputError(
            f"{path}: embeddings must be 2-D (n_samples, n_features), got {len(shape)}-D shape {shape}."
        )
    if shape[1] == 0:
        raise ReportInputError(f"{path}: embeddings are empty, shape {shape}.")
    if dtype.kind not in "fiub" or (dtype.kind == "f" and dtype.itemsize not in (2, 4, 8)):
        raise ReportInputError(
            f"{path}: embeddings must be float16, float32, float64 or integers, got dtype {dtype}."
        )
    if fortran and shape[0] > 1:
        raise ReportInputError(f"{path}: the array is stored in Fortran order; save it C-ordered.")


def _check_length(path: str, shape: tuple[int, ...], dtype: np.dtype, have: int) -> None:
    """A file shorter than its header says is refused, naming the rows it holds."""
    row_bytes = shape[1] * dtype.itemsize
    if have < shape[0] * row_bytes:
        raise ReportInputError(
            f"{path}: truncated: its header says {shape[0]} rows of {shape[1]} {dtype} values, "
            f"the file holds {have // row_bytes} whole rows ({have} of {shape[0] * row_bytes} data bytes)."
        )


def _npy_shard(path: str, ids: str) -> Shard:
    with open(path, "rb") as handle:
        shape, fortran, dtype = _read_header(handle, path)
        offset = handle.tell()
    _check_layout(path, shape, fortran, dtype)
    _check_length(path, shape, dtype, os.path.getsize(path) - offset)
    return Shard(path, None, offset, shape[0], shape[1], dtype, ids)


def _npz_members(path: str) -> list[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            return [n[: -len(".npy")] for n in archive.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile) as err:
        raise ReportInputError(f"{path}: cannot read it as .npz: {err}") from None


def _embeddings_member(path: str, names: list[str], key: Optional[str]) -> str:
    """``key``, else the only array besides ``ids``."""
    if key is not None:
        if key not in names:
            raise ReportInputError(f"{path}: no array named {key!r} (it holds {', '.join(sorted(names))}).")
        return key
    others = [n for n in names if n != IDS_KEY]
    if len(others) != 1:
        raise ReportInputError(
            f"{path}: holds {len(others)} arrays besides {IDS_KEY!r} ({', '.join(sorted(others))}); "
            "choose one with --key NAME."
        )
    return others[0]


def _npz_shard(path: str, key: Optional[str], single: bool) -> Shard:
    names = _npz_members(path)
    member = _embeddings_member(path, names, key)
    ids = "array" if IDS_KEY in names and member != IDS_KEY else _ids_source(path, single)
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(member + ".npy")
            with archive.open(info) as handle:
                shape, fortran, dtype = _read_header(handle, path)
                offset = handle.tell()
    except (OSError, zipfile.BadZipFile) as err:
        raise ReportInputError(f"{path}: cannot read it as .npz: {err}") from None
    _check_layout(path, shape, fortran, dtype)
    _check_length(path, shape, dtype, info.file_size - offset)
    return Shard(path, member, offset, shape[0], shape[1], dtype, ids)


def _ids_source(path: str, single: bool) -> str:
    if os.path.exists(sidecar_path(path)):
        return "sidecar"
    if single:
        return "rows"
    raise ReportInputError(
        f"{path}: no ids: each shard of a corpus directory needs {os.path.basename(sidecar_path(path))} "
        f"beside it (one id per line) or an {IDS_KEY!r} array in its .npz."
    )


def _torch_shard(path: str, key: Optional[str]) -> Shard:
    """A ``.pt`` / ``.pth`` corpus, loaded whole (its ``ids`` array, else its sidecar, else row numbers)."""
    from embedmetrics._io.arrays import _torch_load

    obj = _torch_load(path)
    names = [str(k) for k in obj] if isinstance(obj, dict) else []
    chosen = key if key is not None or IDS_KEY not in names else _embeddings_member(path, names, None)
    array = load_array(path, key=chosen)
    _check_layout(path, tuple(array.shape), False, array.dtype)
    ids = "array" if IDS_KEY in names and chosen != IDS_KEY else _ids_source(path, True)
    return Shard(path, None, 0, array.shape[0], array.shape[1], array.dtype, ids, array)


# ----------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class CorpusFiles:
    """The shards of ``--corpus`` in reading order (one for a single file); every shard has the same
    width and dtype. Global row ``r`` is row ``r - starts[i]`` of shard ``i``."""

    path: str
    shards: tuple[Shard, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def width(self) -> int:
        return self.shards[0].width

    @property
    def float64(self) -> bool:
        """Whether the rows are float64 (kept); any other dtype is widened to float32."""
        return self.shards[0].dtype == np.float64

    @property
    def starts(self) -> np.ndarray:
        """The global row of each shard's first row."""
        return np.concatenate([[0], np.cumsum([s.rows for s in self.shards])]).astype(np.int64)[:-1]

    def fingerprint(self) -> list[dict[str, Any]]:
        """What a checkpoint must find unchanged: each shard's name, size, time, shape and dtype."""
        root = self.path if os.path.isdir(self.path) else os.path.dirname(self.path)
        return [s.fingerprint(root) for s in self.shards]


def open_corpus(path: str, key: Optional[str] = None, flag: Optional[str] = None) -> CorpusFiles:
    """The corpus ``path`` names (see the module docstring), its headers checked; nothing else read.
    ``flag``: the command line flag that named it, for the messages."""
    if not os.path.exists(path):
        raise ReportInputError(f"{path}: no such file.")
    if not os.path.isdir(path):
        suffix = os.path.splitext(path)[1].lower()
        if suffix not in SUFFIXES:
            raise ReportInputError(
                f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of "
                f"{', '.join(SUFFIXES)}, or a directory of .npy / .npz shards."
            )
        shard = _open_shard(path, key, single=True, flag=flag)
        if shard.rows == 0:
            raise ReportInputError(f"{path}: embeddings are empty, shape {(0, shard.width)}.")
        return CorpusFiles(path, (shard,))
    files = sorted(
        os.path.join(path, n) for n in os.listdir(path) if os.path.splitext(n)[1].lower() in SHARD_SUFFIXES
    )
    if not files:
        raise ReportInputError(f"{path}: a corpus directory must hold .npy or .npz shards; it holds none.")
    named: dict[str, str] = {}
    for b in files:
        a = named.setdefault(os.path.splitext(b)[0].lower(), b)
        if a != b:
            raise ReportInputError(
                f"{b}: another shard of {path} has its name ({os.path.basename(a)}); each shard needs a name "
                "of its own (its ids file is NAME.ids.txt)."
            )
    shards = tuple(_open_shard(f, key, single=False, flag=flag) for f in files)
    first = shards[0]
    for shard in shards[1:]:
        if (shard.width, shard.dtype) != (first.width, first.dtype):
            raise ReportInputError(
                f"{shard.path}: {shard.width} features of {shard.dtype}, but {first.path} has {first.width} "
                f"of {first.dtype}; every shard of {path} must have the same width and dtype."
            )
    if sum(s.rows for s in shards) == 0:
        raise ReportInputError(f"{path}: every shard is empty; the corpus has no row.")
    return CorpusFiles(path, shards)


def _open_shard(path: str, key: Optional[str], single: bool, flag: Optional[str] = None) -> Shard:
    check_numpy_file(path, flag)  # a text file named .npy: said so, not read as a header
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return _npy_shard(path, _ids_source(path, single))
    if suffix == ".npz":
        return _npz_shard(path, key, single)
    return _torch_shard(path, key)


def default_block_rows(width: int) -> int:
    """Rows of one ``BLOCK_BYTES`` block of float32 rows of ``width`` features."""
    return max(1, BLOCK_BYTES // (4 * max(width, 1)))


# ----------------------------------------------------------------------------- rows, block by block


def blocks(corpus: CorpusFiles, start: int, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(global row, rows)`` for every block of at most ``block_rows`` rows from global row ``start`` on,
    widened (float32, float64 kept) and checked finite. A block never spans two shards; the array
    yielded is reused for the next block (copy it to keep it)."""
    out_dtype = np.float64 if corpus.float64 else np.float32
    out = np.empty((min(block_rows, max(s.rows for s in corpus.shards)), corpus.width), dtype=out_dtype)
    for shard, first in zip(corpus.shards, corpus.starts.tolist()):
        if first + shard.rows <= start:
            continue
        with _RowReader(shard) as reader:
            for lo in range(max(start - first, 0), shard.rows, block_rows):
                n = min(block_rows, shard.rows - lo)
                raw = reader.read(lo, n)
                rows = out[:n]
                np.copyto(rows, raw, casting="unsafe")
                _check_finite(shard.path, lo, rows)
                yield first + lo, rows


def _check_finite(path: str, first_row: int, rows: np.ndarray) -> None:
    if not np.isfinite(rows).all():
        bad = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        raise ReportInputError(f"{path}: embeddings contain NaN or infinite values (row {first_row + bad}).")


class _RowReader:
    """Reads rows ``[lo, lo + n)`` of one shard into a reused buffer of the file's dtype."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.row_bytes = shard.width * shard.dtype.itemsize
        self.buffer = np.empty(0, dtype=np.uint8)
        self.handle: Optional[IO[bytes]] = None
        self.archive: Optional[zipfile.ZipFile] = None
        self.position = -1

    def __enter__(self) -> _RowReader:
        shard = self.shard
        if shard.array is not None:
            return self
        if shard.member is None:
            self.handle = open(shard.path, "rb", buffering=0)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self.handle.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        else:
            self.archive = zipfile.ZipFile(shard.path)
            self.handle = self.archive.open(shard.member + ".npy")
        return self

    def __exit__(self, *exc: object) -> None:
        for closing in (self.handle, self.archive):
            if closing is not None:
                closing.close()

    def read(self, lo: int, n: int) -> np.ndarray:
        shard = self.shard
        if shard.array is not None:
            return shard.array[lo : lo + n]
        assert self.handle is not None
        if self.position != lo:
            self.handle.seek(shard.offset + lo * self.row_bytes)
        size = n * self.row_bytes
        if self.buffer.size < size:
            self.buffer = np.empty(size, dtype=np.uint8)
        view = self.buffer.data[:size]
        got = 0
        while got < size:
            chunk = self.handle.readinto(view[got:])  # type: ignore[attr-defined]
            if not chunk:
                raise ReportInputError(
                    f"{shard.path}: truncated while reading: row {lo + got // self.row_bytes} of "
                    f"{shard.rows} is missing (the file changed or shrank)."
                )
            got += chunk
        self.position = lo + n
        return self.buffer[:size].view(shard.dtype).reshape(n, shard.width)


# ----------------------------------------------------------------------------- ids


def id_chunks(shard: Shard) -> Iterator[list[str]]:
    """The ids of the shard's rows in order, ``ID_CHUNK`` at a time; one id per row (else bad input)."""
    seen = 0
    for names in _raw_id_chunks(shard):
        seen += len(names)
        if seen > shard.rows:
            break
        yield names
    if seen != shard.rows:
        count = seen if seen < shard.rows else f"more than {shard.rows}"
        raise ReportInputError(
            f"{shard.ids_where}: {count} ids for {shard.rows} embedding rows; one id per row."
        )


def _raw_id_chunks(shard: Shard) -> Iterator[list[str]]:
    if shard.ids == "rows":
        for lo in range(0, shard.rows, ID_CHUNK):
            yield [str(i) for i in range(lo, min(lo + ID_CHUNK, shard.rows))]
    elif shard.ids == "array":
        ids = load_array(shard.path, key=IDS_KEY).reshape(-1)
        for lo in range(0, ids.shape[0], ID_CHUNK):
            yield [v.decode() if isinstance(v, bytes) else str(v) for v in ids[lo : lo + ID_CHUNK].tolist()]
    else:
        with open(sidecar_path(shard.path), encoding="utf-8-sig") as handle:
            lines = (line.strip() for line in handle)
            names = (name for name in lines if name)
            while chunk := list(itertools.islice(names, ID_CHUNK)):
                yield chunk


def names_at(corpus: CorpusFiles, rows: np.ndarray) -> dict[int, str]:
    """The ids of the global ``rows`` (read back from the ids files of the shards holding them)."""
    wanted = np.unique(np.asarray(rows, dtype=np.int64))
    out: dict[int, str] = {}
    for shard, first in zip(corpus.shards, corpus.starts.tolist()):
        mine = wanted[(wanted >= first) & (wanted < first + shard.rows)] - first
        if mine.size == 0:
            continue
        lo = 0
        for names in id_chunks(shard):
            hit = mine[(mine >= lo) & (mine < lo + len(names))]
            out.update({first + int(r): names[int(r) - lo] for r in hit})
            lo += len(names)
    return out


@dataclass(frozen=True)
class JudgedRows:
    """The global rows of the corpus's judged documents (ascending) and their codes in the qrels."""

    rows: np.ndarray
    codes: np.ndarray


def index_ids(corpus: CorpusFiles, judged: Mapping[str, int], budget: int = HASH_BUDGET) -> JudgedRows:
    """Read every id once: refuse an id repeated (naming both files) and find the judged documents.

    The ids are checked by a 64-bit hash each, in ``ceil(8 N / budget)`` passes over the ids files (a
    pass keeps the hashes of one residue class); rows whose hashes meet are compared by name."""
    passes = max(1, -(-8 * corpus.rows // budget))
    rows: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    for part in range(passes):
        kept: list[np.ndarray] = []
        for first, names in _global_chunks(corpus):
            hashes = np.fromiter(map(hash, names), dtype=np.int64, count=len(names))
            kept.append(hashes[hashes % passes == part] if passes > 1 else hashes)
            if part == 0:
                found = [(i, judged[n]) for i, n in enumerate(names) if n in judged]
                rows.append(np.array([first + i for i, _ in found], dtype=np.int64))
                codes.append(np.array([c for _, c in found], dtype=np.int64))
        _refuse_repeats(corpus, np.concatenate(kept) if kept else np.zeros(0, np.int64), passes, part)
    return JudgedRows(np.concatenate(rows), np.concatenate(codes))


def _global_chunks(corpus: CorpusFiles) -> Iterator[tuple[int, list[str]]]:
    for shard, first in zip(corpus.shards, corpus.starts.tolist()):
        lo = first
        for names in id_chunks(shard):
            yield lo, names
            lo += len(names)


def _refuse_repeats(corpus: CorpusFiles, hashes: np.ndarray, passes: int, part: int) -> None:
    """A ``ReportInputError`` naming the files of the first id that appears twice (hashes that meet
    without equal names are no repeat)."""
    hashes.sort()
    twice = np.unique(hashes[1:][hashes[1:] == hashes[:-1]])
    if twice.size == 0:
        return
    where: dict[int, list[tuple[int, str]]] = {}
    for first, names in _global_chunks(corpus):
        for i, name in enumerate(names):
            h = hash(name)
            if (passes == 1 or h % passes == part) and h in twice:  # rare: hashes that meet
                where.setdefault(h, []).append((first + i, name))
    for found in where.values():
        by_name: dict[str, int] = {}
        for row, name in found:
            if name in by_name:
                raise _repeat_error(corpus, name, by_name[name], row)
            by_name[name] = row


def _repeat_error(corpus: CorpusFiles, name: str, row_a: int, row_b: int) -> ReportInputError:
    starts = corpus.starts
    i, j = (int(np.searchsorted(starts, r, side="right")) - 1 for r in (row_a, row_b))
    a, b = corpus.shards[i], corpus.shards[j]
    at_a, at_b = row_a - int(starts[i]), row_b - int(starts[j])
    if i == j:
        return ReportInputError(
            f"{a.ids_where}: id {name!r} appears twice (rows {at_a} and {at_b}); ids must be unique."
        )
    return ReportInputError(
        f"{b.ids_where}: id {name!r} (row {at_b}) is also the id of row {at_a} of {a.ids_where}; "
        "ids must be unique across the shards."
    )
