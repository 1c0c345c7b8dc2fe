"""Test-suite setup: helper imports, derandomized hypothesis, and no draws from global generators.

The suite must give the same answer on every run. Hypothesis runs derandomized (examples derived
from each test's source, no example database), so a failure reproduces; set ``HYPOTHESIS_PROFILE=explore``
to search with fresh random examples instead. Every random draw in a test comes from a generator seeded
in that test (``torch.Generator().manual_seed(n)``, ``np.random.default_rng(n)``): the autouse fixture
below fails any test that draws from, or reseeds, torch's, NumPy's or Python's global generator.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))

# Third-party modules that draw from Python's global generator once, when first imported (rich, which
# sentence-transformers' dependencies bring, seeds its style ids with ``random.getrandbits``): imported
# here, so the fixture below does not blame the first test that happens to import them.
for _module in ("rich.style",):
    with contextlib.suppress(ImportError):
        __import__(_module)

settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(autouse=True)
def _no_global_random_state() -> Iterator[None]:
    """Fail a test that used a global random generator (unseeded draws, or global seeding)."""
    before = (torch.random.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())  # noqa: NPY002
    yield
    after = (torch.random.get_rng_state(), np.random.get_state()[1], random.getstate())  # noqa: NPY002
    used = [
        name
        for name, changed in (
            ("torch", not torch.equal(before[0], after[0])),
            ("numpy", not np.array_equal(before[1], after[1])),
            ("random", before[2] != after[2]),
        )
        if changed
    ]
    if used:
        pytest.fail(
            f"the test drew from (or reseeded) the global {', '.join(used)} generator: "
            "draw from a generator seeded in the test instead"
        )
