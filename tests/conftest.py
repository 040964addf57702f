"""Shared fixtures: import paths for the examples and the test helper module, seeded RNG."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
for path in (TESTS, EXAMPLES):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator with a fixed seed for every test (deterministic, order independent)."""
    return np.random.default_rng(20240601)
