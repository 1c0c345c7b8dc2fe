"""Seeding for test code that must draw from the global generators (model init, Lightning, docs)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run code that draws from the global generators (model init, a documentation page, a Trainer)
    with all three seeded to ``seed``, and put their previous states back afterwards."""
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)  # noqa: NPY002
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)  # noqa: NPY002
            random.setstate(py_state)


@contextlib.contextmanager
def global_generators_kept() -> Iterator[None]:
    """Put torch's, NumPy's and Python's global generators back as they were after code that seeds them
    itself (a Lightning or sentence-transformers trainer, mteb's tasks and evaluation)."""
    state = (torch.random.get_rng_state(), np.random.get_state(), random.getstate())  # noqa: NPY002
    try:
        yield
    finally:
        torch.random.set_rng_state(state[0])
        np.random.set_state(state[1])  # noqa: NPY002
        random.setstate(state[2])
