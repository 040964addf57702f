"""Shared fixtures: import paths for the examples and the test helper module, seeded RNG."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import mbs.forces.applied

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
for path in (TESTS, EXAMPLES):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator with a fixed seed for every test (deterministic, order independent)."""
    return np.random.default_rng(20240601)


@pytest.fixture(params=[pytest.param(True, id="compiled-angles", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed")),
    pytest.param(False, id="numpy-angles")])
def angle_kernels(request, monkeypatch) -> bool:
    """Joint-angle efforts evaluated by the compiled kernels and by the NumPy form."""
    monkeypatch.setattr(mbs.forces.applied, "USE_ANGLE_KERNELS", request.param)
    return request.param
