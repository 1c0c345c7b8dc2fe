"""Loading embeddings and labels from ``.npy``, ``.npz`` and ``.pt`` / ``.pth`` files.

Every failure is a ``ReportInputError`` whose message names the file and what is wrong.
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from typing import Any

import numpy as np
import torch

from embedmetrics._io.errors import ReportInputError

SUFFIXES = (".npy", ".npz", ".pt", ".pth")
#: How a file of each NumPy format starts: NumPy's ``.npy`` magic string (``numpy.lib.format``), a zip
#: archive (an empty one included), as ``numpy.load`` tells them apart.
MAGIC = {".npy": (b"\x93NUMPY",), ".npz": (b"PK\x03\x04", b"PK\x05\x06")}


def check_numpy_file(path: str, flag: str | None = None) -> None:
    """A ``.npy`` / ``.npz`` file (``path``, given with ``flag``) that does not start as NumPy writes one
    (a text file of that name, say) is refused in one line naming the file and the flag; numpy itself
    would call it pickled data and point at ``allow_pickle``, which no flag sets. Other suffixes pass."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in MAGIC:
        return
    with open(path, "rb") as handle:
        head = handle.read(8)
    if not head.startswith(MAGIC[suffix]):
        where = f"{flag} {path}" if flag else path
        starts = f"it starts with {head!r}" if head else "it is empty"
        writer = "numpy.save" if suffix == ".npy" else "numpy.savez"
        raise ReportInputError(
            f"{where}: is not a NumPy {suffix} file ({starts}, not {MAGIC[suffix][0]!r}); write the array "
            f"with {writer}."
        )


def _pick(container: dict[str, Any], path: str, key: str | None, option: str) -> Any:
    """The entry ``key`` of a dict-like file, or its only entry when ``key`` is ``None``."""
    names = sorted(container)
    if key is not None:
        if key not in container:
            raise ReportInputError(f"{path}: no array named {key!r} (it holds {', '.join(names) or 'none'}).")
        return container[key]
    if len(names) == 1:
        return container[names[0]]
    raise ReportInputError(
        f"{path}: holds {len(names)} arrays ({', '.join(names)}); choose one with {option} NAME."
    )


def _torch_load(path: str) -> Any:
    """``torch.load(weights_only=True)`` without torch's warnings; a file that is not made of tensors
    (any other pickled object) is bad input with a one-line reason."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise ReportInputError(
                f"{path}: cannot read it as .pt: it holds pickled objects other than tensors, arrays and "
                "dicts of them (saved with pickle, or torch.save of other objects)."
            ) from None


def load_array(
    path: str, *, key: str | None = None, option: str = "--key", flag: str | None = None
) -> np.ndarray:
    """Read one array from ``path`` (``.npy``, ``.npz`` with ``key``, ``.pt``/``.pth``) as NumPy.

    ``.pt``/``.pth`` files are read with ``torch.load(weights_only=True)`` (no code runs) and may hold
    a tensor, a NumPy array, or a dict of them (then ``key`` picks one). ``flag``: the command line
    flag that named the file, for the messages (``check_numpy_file``).
    """
    if not os.path.exists(path):
        raise ReportInputError(f"{path}: no such file.")
    if os.path.isdir(path):
        raise ReportInputError(f"{path}: is a directory, expected a file.")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise ReportInputError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of {', '.join(SUFFIXES)}."
        )
    check_numpy_file(path, flag)
    try:
        if suffix == ".npy":
            obj: Any = np.load(path, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                obj = np.asarray(_pick({name: npz[name] for name in npz.files}, path, key, option))
        else:
            obj = _torch_load(path)
            if isinstance(obj, dict):
                obj = _pick({str(k): v for k, v in obj.items()}, path, key, option)
    except ReportInputError:
        raise
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile, KeyError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ReportInputError(f"{path}: cannot read it as {suffix}: {reason}") from None
    except Exception as err:  # unpickling errors of torch.load come in many types
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ReportInputError(f"{path}: cannot read it as {suffix}: {reason}") from None
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu()
        if obj.dtype == torch.bfloat16:
            obj = obj.float()
        obj = obj.numpy()
    if not isinstance(obj, np.ndarray):
        raise ReportInputError(f"{path}: holds a {type(obj).__name__}, expected an array or a tensor.")
    return obj


def as_embeddings(array: np.ndarray, path: str) -> torch.Tensor:
    """Check a 2-D finite numeric array with at least one row and return it as a float tensor."""
    if array.ndim != 2:
        raise ReportInputError(
            f"{path}: embeddings must be 2-D (n_samples, n_features), got {array.ndim}-D shape "
            f"{tuple(array.shape)}."
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ReportInputError(f"{path}: embeddings are empty, shape {tuple(array.shape)}.")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_) or np.iscomplexobj(array):
        raise ReportInputError(f"{path}: embeddings must be real numbers, got dtype {array.dtype}.")
    dtype = np.float64 if array.dtype == np.float64 else np.float32
    out = np.ascontiguousarray(array, dtype=dtype)
    if not np.isfinite(out).all():
        raise ReportInputError(f"{path}: embeddings contain NaN or infinite values.")
    return torch.from_numpy(out)


def check_labels(array: np.ndarray, path: str, n_rows: int, embeddings_path: str) -> np.ndarray:
    """Check that ``array`` holds 1-D integer or string labels, one per embedding row."""
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ReportInputError(f"{path}: labels must be 1-D, got {array.ndim}-D shape {tuple(array.shape)}.")
    if array.shape[0] != n_rows:
        raise ReportInputError(
            f"{path}: {array.shape[0]} labels for {n_rows} embeddings in {embeddings_path}; "
            "they must have the same length."
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ReportInputError(f"{path}: labels contain NaN or infinite values.")
    if array.dtype.kind not in "biufUS":
        raise ReportInputError(f"{path}: labels must be integers or strings, got dtype {array.dtype}.")
    return array


def encode_labels(*arrays: np.ndarray) -> tuple[list[torch.Tensor], list[str]]:
    """Map label arrays jointly to dense class ids ``0..C-1`` (sorted values); return ids and names.

    Any label values work (integers, strings); the original values are kept as class names.
    """
    kinds = {"S" if a.dtype.kind in "US" else "n" for a in arrays}
    if len(kinds) > 1:
        raise ReportInputError("query and reference labels must both be numbers or both be strings.")
    sizes = [a.shape[0] for a in arrays]
    values, codes = np.unique(np.concatenate(arrays), return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    names = [v.decode() if isinstance(v, bytes) else str(v) for v in values.tolist()]
    out, start = [], 0
    for size in sizes:
        out.append(torch.from_numpy(codes[start : start + size].copy()))
        start += size
    return out, names
