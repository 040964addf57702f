"""The condensed sparse Newton path of large models: Schur complement on a precomputed
pattern, the compiled condensed solve and the compiled evaluation of the sparse polynomial
step equations (mbs.engine.newton, mbs.backends.polynomial_sparse)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mbs
from benchmarks.chain_compile import build_chain
from mbs.engine import newton as newton_module
from mbs.engine.newton import Factorization
from mbs.solvers import make_solver

#: SuperLU itself, for reference solves that the ``superlu_calls`` fixture does not count
SPLU = spla.splu
needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="numba is not installed")
KERNELS = [pytest.param(True, marks=needs_numba, id="numba"), pytest.param(False, id="scipy")]


def saddle_matrix(seed: int, size: int = 700, block: int = 150, zeros: int = 40):
    """A well-conditioned sparse matrix with ``matrix[0:block, block:2 block] = -I/2`` (the
    rows of the position update: their own q-diagonal, -I/2 on p, a few other entries) and
    some explicit zeros in its pattern (as the Jacobian of a straight chain has)."""
    rng = np.random.default_rng(seed)
    matrix = sp.random(size, size, density=0.006, random_state=seed, format="lil")
    matrix.setdiag(10.0 + rng.random(size))
    matrix[0:block, :] = 0.0
    matrix[0:block, 0:block] = sp.identity(block)
    matrix[0:block, block:2 * block] = -0.5 * sp.identity(block)
    matrix[0:block, 2 * block:3 * block] = 0.3 * sp.random(block, block, density=0.02,
                                                           random_state=seed + 1)
    matrix = matrix.tocsr()
    matrix.sort_indices()
    # explicit zeros on the pattern outside the identity block (scipy keeps them in .data)
    entry_row = np.repeat(np.arange(size), np.diff(matrix.indptr))
    outside = np.flatnonzero((entry_row >= block) & (matrix.indices != entry_row))
    matrix.data[rng.choice(outside, zeros, replace=False)] = 0.0
    return matrix, (slice(0, block), slice(block, 2 * block), -0.5)


@pytest.fixture
def kernels(request, monkeypatch):
    monkeypatch.setattr(newton_module, "USE_NUMBA", request.param)
    return request.param


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
def test_condensed_solve_matches_a_direct_solve_of_the_full_matrix(kernels):
    matrix, block = saddle_matrix(1)
    rhs = np.random.default_rng(5).standard_normal(matrix.shape[0])
    reference = spla.splu(matrix.tocsc()).solve(rhs)
    factor = Factorization(matrix, block)
    np.testing.assert_allclose(factor.solve(rhs), reference, rtol=0,
                               atol=1e-12 * np.abs(reference).max())


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
def test_schur_pattern_is_reused_and_equals_the_sparse_formula(kernels):
    matrix, block = saddle_matrix(2)
    rows, cols, alpha = block
    first = Factorization(matrix, block)
    # same pattern, other values (zeros included): the cached index arrays are reused
    changed = matrix.copy()
    entry_row = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    in_block = ((entry_row >= rows.start) & (entry_row < rows.stop)
                & (matrix.indices >= cols.start) & (matrix.indices < cols.stop))
    changed.data[~in_block] *= np.random.default_rng(3).uniform(0.5, 1.5, (~in_block).sum())
    second = Factorization(changed, block)
    assert second.pattern is first.pattern
    other_rows = np.r_[0:rows.start, rows.stop:changed.shape[0]]
    other_cols = np.r_[0:cols.start, cols.stop:changed.shape[0]]
    expected = (changed[other_rows][:, other_cols]
                - changed[other_rows][:, cols] @ changed[rows][:, other_cols] / alpha)
    schur = second.pattern.schur(second.pattern.values(changed.data, alpha))
    assert not np.any(schur.data == 0.0)  # zeros dropped before the ordering
    np.testing.assert_allclose(schur.toarray(), expected.toarray(), rtol=0, atol=1e-13)
    rhs = np.random.default_rng(4).standard_normal(changed.shape[0])
    reference = spla.splu(changed.tocsc()).solve(rhs)
    np.testing.assert_allclose(second.solve(rhs), reference, rtol=0,
                               atol=1e-12 * np.abs(reference).max())
    # another pattern gets its own index arrays
    other, _ = saddle_matrix(6)
    assert Factorization(other, block).pattern is not first.pattern


@pytest.fixture
def superlu_calls(monkeypatch):
    """Counts the SuperLU factorisations of mbs.engine.newton."""
    calls = []

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return SPLU(*args, **kwargs)

    monkeypatch.setattr(newton_module.spla, "splu", counting)
    return calls


@needs_numba
def test_refactorisation_reuses_superlu_pivots_and_falls_back(superlu_calls, monkeypatch):
    matrix, block = saddle_matrix(7)
    rng = np.random.default_rng(8)
    rhs = rng.standard_normal(matrix.shape[0])

    def check(candidate, symbolic_values=None):
        reference = SPLU(candidate.tocsc()).solve(rhs)
        factorization = Factorization(candidate, block, symbolic_values)
        solution = factorization.solve(rhs)
        np.testing.assert_allclose(solution, reference, rtol=0,
                                   atol=1e-12 * np.abs(reference).max())
        return factorization.symbolic_values

    newton_module._PATTERNS.clear()
    own = check(matrix)
    assert len(superlu_calls) == 1
    # other values on the same pattern with the pivot order of the first: refactorised
    # without SuperLU
    entry_row = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    outside_block = entry_row >= block[0].stop
    changed = matrix.copy()
    changed.data[outside_block] *= rng.uniform(0.8, 1.2, outside_block.sum())
    assert np.array_equal(check(changed, own), own)
    assert len(superlu_calls) == 1
    # the same matrix again, as the first factorisation of another run: its pivot order is
    # its own, found again without SuperLU
    assert np.array_equal(check(matrix), own)
    assert len(superlu_calls) == 1
    # the explicit zeros become nonzero: new fill is detected, SuperLU factorises anew
    filled = changed.copy()
    filled.data[filled.data == 0.0] = 3.0
    assert not np.array_equal(check(filled, own), own)
    assert len(superlu_calls) == 2
    # a pivot test no refactorisation passes: SuperLU every time
    monkeypatch.setattr(newton_module, "REFACTOR_PIVOT_THRESHOLD", np.inf)
    calls = len(superlu_calls)
    check(changed, own)
    assert len(superlu_calls) == calls + 1


def chain(links: int) -> mbs.Model:
    """Boxes hanging from the ground by spherical joints (2n + 2m > 400 unknowns from 10
    links on: the condensed sparse factorisation)."""
    return build_chain(links).compile()


@pytest.mark.parametrize("kernels", KERNELS, indirect=True)
@pytest.mark.parametrize("scheme", ["em", "ggl-vi-a", "ggl-vi-s", "ggl-vi-b", "lobatto"])
def test_chain_trajectory_matches_the_assembled_backend(kernels, scheme):
    """The condensed sparse factorisation with and without the numba kernels (``kernels``)
    and the sparse polynomial evaluation against the element-wise assembled reference."""
    model = chain(15)
    solver = make_solver(scheme)
    run = mbs.simulate(model, solver, h=1e-3, t_end=0.1)
    reference = mbs.simulate(model, make_solver(scheme, backend="assembled"), h=1e-3,
                             t_end=0.1)
    assert solver.uses_simplified_newton
    assert np.abs(run.q - reference.q).max() <= 1e-10
    assert np.abs(run.p - reference.p).max() <= 1e-10 * np.abs(reference.p).max()
    if scheme == "em":
        energy = run.energy()
        scale = np.abs(model.kinetic_energy(run.p)).max() + np.abs(energy[0])
        assert np.abs(energy - energy[0]).max() <= 1e-12 * scale
        assert np.max(run.constraint_residuals()["position"]) <= 1e-12


@pytest.mark.parametrize("scheme", ["em", "ggl-vi-a", "ggl-vi-s", "ggl-vi-b", "rattle",
                                    "lobatto", "hbvm"])
def test_chain_resume_at_a_random_step_repeats_the_run_bitwise(scheme, tmp_path):
    """The sparse path (n = 120, simplified Newton, condensed LU): a run stopped at a random
    step and resumed from its stream repeats the uninterrupted run bitwise, whatever other
    runs in the process did with the model before (each run keeps its own pivot order)."""
    model = chain(10)
    options = {} if scheme == "rattle" else {"backend": "auto"}
    stop = int(np.random.default_rng(sum(map(ord, scheme))).integers(3, 37))
    mbs.simulate(model, scheme, h=1e-3, t_end=0.013, **options)  # another run first
    reference = mbs.simulate(model, scheme, h=1e-3, t_end=0.04, **options)
    stream = str(tmp_path / "run")
    mbs.simulate(model, scheme, h=1e-3, t_end=stop * 1e-3, output=stream, flush_every=4,
                 **options)
    resumed = mbs.simulate(model, scheme, h=1e-3, t_end=0.04, resume=stream, **options)
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


def test_a_long_spinning_chain_backs_off_from_the_explicit_predictor():
    """The gallery chain of 800 links turning at 1.5 rad/s, h = 2e-3: the explicit
    prediction (a symplectic-Euler step with the last multipliers) is unstable for the
    transverse waves of a chain under this tension, so its Newton iteration fails at almost
    every step, while the "advanced" guess q + h M^-1 p converges in a few iterations.
    After the k-th failure the solver starts the next 2^k - 1 steps from the advanced guess
    directly: over 60 steps at most 6 retries (failures at steps 1, 3, 7, 15, 31), not one per
    step. Energy stays conserved to round-off (60 steps of ~1e-15)."""
    from mbs.gallery import load_example

    module, *_ = load_example("chain")
    model = module.build(800, turn_rate=1.5).compile()
    solution = mbs.simulate(model, "em", h=2e-3, t_end=0.12)
    assert solution.stats["guess_retries"] <= 6
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-13 * np.abs(energy[0])
