"""Running lists on disk, for the callers that resume a streamed corpus after a kill (``report
--checkpoint``, the MTEB search's ``checkpoint_dir``): a state written beside its final name, synced, then
renamed over it (``os.replace``: atomic), so a process killed at any moment leaves the last complete one."""

from __future__ import annotations

import os
from typing import Any, Optional

import torch


def write_state(path: str, state: dict[str, Any]) -> None:
    """Write ``state`` (tensors, numbers, strings) to ``path`` atomically (``OSError`` as raised)."""
    partial = path + ".partial"
    with open(partial, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def read_state(path: str) -> Optional[dict[str, Any]]:
    """The state saved at ``path`` (``None`` where there is no file); ``ValueError`` for a file that is not
    a readable state (damaged, or another file)."""
    if not os.path.exists(path):
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # unpickling errors come in many types (their advice is not for this file)
        raise ValueError(f"{path}: not a readable checkpoint (damaged or another file).") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a checkpoint.")
    return state
