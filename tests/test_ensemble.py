"""Vectorised ensembles and parameter sweeps through an executor."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import heavy_top
import numpy as np
import pytest

import mbs


@pytest.fixture(scope="module")
def top():
    return heavy_top.build().compile()


def rotated_states(model, count, seed=1):
    """Consistent states: the initial state rotated about the vertical (a symmetry of the top)
    with scaled momenta (the velocity constraint is linear in p)."""
    q0, p0 = model.initial_state()
    rng = np.random.default_rng(seed)
    states_q, states_p = [], []
    for _ in range(count):
        rotation = mbs.rotation_about_z(rng.uniform(0.0, 2.0 * np.pi))
        states_q.append((q0.reshape(4, 3) @ rotation.T).ravel())
        states_p.append(((1.0 + 0.1 * rng.standard_normal()) * p0.reshape(4, 3)
                         @ rotation.T).ravel())
    return np.array(states_q), np.array(states_p)


def _numba_available():
    from mbs.ensemble import _numba_kernels

    return _numba_kernels() is not None


BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not _numba_available(), reason="numba not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_members_equal_separate_em_runs_and_conserve(top, backend):
    q0, p0 = rotated_states(top, 6)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=0.002, t_end=0.1, backend=backend)
    assert ensemble.q.shape == (6, 51, 12)
    assert ensemble.stats["backend"] == backend
    for k in (0, 3, 5):
        single = mbs.simulate(top, "em", h=0.002, t_end=0.1, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(ensemble.q[k], single.q, atol=1e-12)
        np.testing.assert_allclose(ensemble.p[k], single.p, atol=1e-12 * np.abs(p0).max())
    energy = ensemble.energy()
    assert np.max(np.abs(energy - energy[:, :1]) / np.abs(energy[:, :1])) <= 1e-12
    j3 = ensemble.angular_momentum()[..., 2]
    assert np.max(np.abs(j3 - j3[:, :1])) <= 1e-12 * np.max(np.abs(j3))
    np.testing.assert_allclose(ensemble.potential_energy()[:, 0],
                               [top.potential(q) for q in q0], rtol=1e-14)


def assert_members_match_single_runs(model, momentum_scales, backend, relative):
    """Members q0, s * p0 of an ensemble (h = 1 ms, 50 steps) equal single EM runs to
    ``relative`` times the largest initial entry, and conserve energy to 1e-12."""
    q0, p0 = model.initial_state()
    scales = np.asarray(momentum_scales)
    ensemble = mbs.simulate_ensemble(model, (np.tile(q0, (scales.size, 1)), p0 * scales[:, None]),
                                     h=1e-3, t_end=0.05, backend=backend)
    for k, scale in enumerate(scales):
        single = mbs.simulate(model, "em", h=1e-3, t_end=0.05, initial_state=(q0, scale * p0))
        np.testing.assert_allclose(ensemble.q[k], single.q, atol=relative * np.abs(q0).max())
        np.testing.assert_allclose(ensemble.p[k], single.p, atol=relative * np.abs(p0).max())
    energy = ensemble.energy()
    assert np.max(np.abs(energy - energy[:, :1]) / np.abs(energy[:, :1])) <= 1e-12


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_predictor_correction_matches_single_runs_with_fewer_factorisations(top,
                                                                                     backend):
    """The opt-in corrected predictor: members equal single runs with the same option, and
    need fewer LU factorisations than with the plain predictor."""
    q0, p0 = rotated_states(top, 5)
    runs = {order: mbs.simulate_ensemble(top, (q0, p0), h=0.002, t_end=0.1, backend=backend,
                                         tolerance=1e-13, predictor_correction=order)
            for order in (None, 2)}
    assert runs[2].stats["factorizations"] <= 0.95 * runs[None].stats["factorizations"]
    for k in (0, 4):
        solver = mbs.solvers.make_solver("em", predictor_correction=2,
                                         newton=mbs.solvers.NewtonOptions(tolerance=1e-13))
        single = mbs.simulate(top, solver, h=0.002, t_end=0.1, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(runs[2].q[k], single.q, atol=1e-12)
    energy = runs[2].energy()
    assert np.max(np.abs(energy - energy[:, :1]) / np.abs(energy[:, :1])) <= 1e-13
    with pytest.raises(mbs.ModelError, match="predictor_correction"):
        mbs.simulate_ensemble(top, (q0, p0), h=0.002, t_end=0.1, predictor_correction=7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_at_h_1e3_and_with_a_nonlinear_potential(backend):
    """Smaller step (the issue-7 setting) and a model whose potential is not linear (spring:
    discrete gradient and its Jacobian per member) against single runs."""
    import four_particle

    assert_members_match_single_runs(four_particle.build().compile(), [1.0, 0.9, 1.1],
                                     backend, 1e-11)


def test_ensemble_backends_agree_and_fall_back_without_numba(top, monkeypatch):
    q0, p0 = rotated_states(top, 3)
    reference = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="numpy")
    if _numba_available():
        compiled = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="numba")
        np.testing.assert_allclose(compiled.q, reference.q, atol=1e-13)
    from mbs import ensemble as ensemble_module

    monkeypatch.setattr(ensemble_module, "_numba_kernels", lambda: None)  # numba not importable
    fallback = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02)
    assert fallback.stats["backend"] == "numpy"
    np.testing.assert_array_equal(fallback.q, reference.q)
    with pytest.raises(mbs.ModelError, match="numba"):
        mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="numba")
    with pytest.raises(mbs.ModelError, match="backend"):
        mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="fortran")


def test_ensemble_rejects_bad_input(top):
    q0, p0 = rotated_states(top, 2)
    with pytest.raises(mbs.ModelError, match="shape"):
        mbs.simulate_ensemble(top, (q0[:, :5], p0[:, :5]), h=0.01, t_end=0.1)
    with pytest.raises(mbs.ModelError, match="violate"):
        mbs.simulate_ensemble(top, (q0 + 0.1, p0), h=0.01, t_end=0.1)
    with pytest.raises(mbs.ModelError):
        mbs.simulate_ensemble(top, (q0, p0), h=-0.01, t_end=0.1)


def test_simulate_many_serial_and_through_a_process_pool(top):
    assert pickle.loads(pickle.dumps(top)).n == top.n  # models travel to worker processes
    runs = [(top, {"solver": "em", "h": 0.002, "t_end": 0.02}),
            (top, {"solver": "rattle", "h": 0.002, "t_end": 0.02})]
    serial = mbs.simulate_many(runs)
    with ProcessPoolExecutor(max_workers=2) as pool:
        parallel = mbs.simulate_many(runs, executor=pool)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a.q, b.q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_of_double_pendulums_with_a_partial_simd_block(backend):
    """Another model (n = 24, m = 22) and a member count that is not a multiple of the
    SIMD block (the numba path runs the whole trajectory in one call)."""
    import double_pendulum

    assert_members_match_single_runs(double_pendulum.build().compile(), [1.0, 0.5, 1.5],
                                     backend, 1e-12)


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_ensemble_static_pivot_fallback_gives_the_same_members(top, monkeypatch):
    """With an impossible pivot threshold every factorisation falls back to partial
    pivoting; the members are the same to round-off."""
    from mbs import ensemble as ensemble_module

    q0, p0 = rotated_states(top, 5)
    static = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, backend="numba")
    counted = {}
    run = ensemble_module._BatchedEnergyMomentum._run_numba

    def counting_run(self, q, p):
        iterations = run(self, q, p)
        counted["fallbacks"] = int(self.fallbacks.sum())
        return iterations

    monkeypatch.setattr(ensemble_module._BatchedEnergyMomentum, "_run_numba", counting_run)
    monkeypatch.setattr(ensemble_module._BatchedEnergyMomentum, "static_pivot_threshold",
                        1e300)
    pivoted = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, backend="numba")
    assert counted["fallbacks"] == pivoted.stats["factorizations"] > 0
    np.testing.assert_allclose(pivoted.q, static.q, atol=1e-13)
    np.testing.assert_allclose(pivoted.p, static.p, atol=1e-13 * np.abs(p0).max())
    monkeypatch.setattr(ensemble_module._BatchedEnergyMomentum, "static_pivot_threshold", 0.1)
    simd = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, backend="numba")
    assert counted["fallbacks"] == 0                  # the top's static pivots are safe
    np.testing.assert_array_equal(simd.q, static.q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_failure_carries_the_states_before_it(top, backend):
    q0, p0 = rotated_states(top, 3)
    with pytest.raises(mbs.SolverError, match="did not converge") as info:
        mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, max_iterations=2,
                              backend=backend)
    error = info.value
    assert error.step == 0 and error.solution.q.shape == (3, 1, 12)
    np.testing.assert_array_equal(error.solution.q[:, 0], q0)


def _dense_condensed(n, m, qr, qi, qj, qc, lr, li, lc, mass, minv, h, gam, lam, q_mid, q1,
                     v_mid, v1):
    """Reference: the condensed Newton matrix (rows q, d, c; columns q, lambda, gamma) of
    one member from dense blocks."""
    t = np.zeros((m, n, n))
    np.add.at(t, (qr, qi, qj), qc)
    np.add.at(t, (qr, qj, qi), qc)
    b = np.zeros((m, n))
    np.add.at(b, (lr, li), lc)
    g_mid, g1 = t @ q_mid + b, t @ q1 + b
    hv_mid, hv1 = t @ v_mid, t @ v1
    h_gam, h_lam = np.tensordot(gam, t, 1), np.tensordot(lam, t, 1)
    a = np.zeros((n + 2 * m, n + 2 * m))
    a[:n, :n] = 2.0 * mass / h**2 + 0.5 * h_lam - 0.5 * h_gam @ minv @ h_gam
    a[:n, n:n + m] = g_mid.T
    a[:n, n + m:] = hv_mid.T - (2.0 / h) * g_mid.T - h_gam @ minv @ g_mid.T
    a[n:n + m, :n] = hv1 + (2.0 / h) * g1 - g1 @ minv @ h_gam
    a[n:n + m, n + m:] = -2.0 * g1 @ minv @ g_mid.T
    a[n + m:, :n] = g1
    return a


def _random_table(rng, n, m):
    """A quadratic constraint table with dot-product-like rows and linear terms, and a dense
    symmetric positive definite mass matrix (M^-1 dense: no structure to lean on)."""
    rows, first, second, coef = [], [], [], []
    for r in range(m):
        for _ in range(3):
            i, j = sorted(rng.choice(n, 2, replace=False))
            rows.append(r), first.append(i), second.append(j), coef.append(rng.normal())
    lin_rows = np.arange(m)
    lin_i = rng.integers(0, n, m)
    root = rng.normal(size=(n, n))
    mass = root @ root.T + n * np.eye(n)
    return (np.array(rows), np.array(first), np.array(second), np.array(coef), lin_rows, lin_i,
            rng.normal(size=m), mass, np.linalg.inv(mass))


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
@pytest.mark.parametrize("case", ["top", "double_pendulum", "random"])
def test_sparse_condensed_matrix_factors_and_solves_as_the_dense_one(top, case):
    """The structural plan (_lane_plan): the matrix assembled entry by entry equals the
    dense condensed matrix, its fill holds every nonzero of the factors, and the sparse LU
    and substitutions solve the dense system (every lane)."""
    from mbs import ensemble_numba as kernels
    from mbs.ensemble import _BatchedEnergyMomentum, _lane_plan

    rng = np.random.default_rng(7)
    h = 2e-3
    if case == "random":
        n, m = 9, 4
        qr, qi, qj, qc, lr, li, lc, mass, minv = _random_table(rng, n, m)
    else:
        if case == "top":
            model = top
        else:
            import double_pendulum

            model = double_pendulum.build().compile()
        solver = _BatchedEnergyMomentum(model, h, 1e-12, 25, 1, "numpy")
        n, m = solver.n, solver.m
        qr, qi, qj, qc, lr, li, lc = (solver.qr, solver.qi, solver.qj, solver.qc, solver.lr,
                                      solver.li, solver.lc)
        mass, minv = solver.mass, solver.minv
    plan = _lane_plan(n, m, qr, qi, qj, qc, lr, li, lc, mass, minv, h)
    (nv, a_const, term_ptr, term_coef, term_var, diag, pairs, pair_ops, single_ops,
     forward_ptr, forward, backward_ptr, backward, e_row, e_col, counts) = plan
    lanes, size = kernels.LANES, n + 2 * m
    assert counts["lu_updates"] < counts["dense_lu_updates"]
    xv = rng.normal(size=(nv, lanes))
    xv[-1] = 1.0
    blocks = np.split(xv[:-1], np.cumsum([m, m, n, n, n]))   # gam, lam, q_mid, q1, v_mid, v1
    a = np.zeros((e_row.size, lanes))
    kernels._lanes_assemble(a, xv, a_const, term_ptr, term_coef, term_var)
    rhs = rng.normal(size=(size, lanes))
    x = rhs.copy()
    ok = np.ones((1, lanes))
    lu = a.copy()
    kernels._lanes_sparse_lu(lu, ok, np.zeros((size, lanes)), np.zeros((size, lanes)), 0.0,
                             diag, pairs, pair_ops, single_ops)
    kernels._lanes_sparse_solve(lu, x, diag, forward_ptr, forward, backward_ptr, backward)
    assert np.all(ok == 1.0)
    for lane in range(lanes):
        dense = _dense_condensed(n, m, qr, qi, qj, qc, lr, li, lc, mass, minv, h,
                                 *(block[:, lane] for block in blocks))
        assembled = np.zeros((size, size))
        assembled[e_row, e_col] = a[:, lane]
        scale = np.abs(dense).max()
        np.testing.assert_allclose(assembled, dense, rtol=0, atol=1e-13 * scale)
        factors = np.zeros((size, size))
        factors[e_row, e_col] = lu[:, lane]
        lower = np.tril(factors, -1) + np.eye(size)
        np.testing.assert_allclose(lower @ np.triu(factors), dense, rtol=0,
                                   atol=1e-11 * scale)
        np.testing.assert_allclose(dense @ x[:, lane], rhs[:, lane], rtol=0,   # backward error
                                   atol=1e-12 * scale * np.abs(x[:, lane]).max())


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_sparse_lu_flags_lanes_with_small_static_pivots():
    """The static pivot test of the sparse LU is the dense one's (threshold times the
    largest entry below the pivot, zero or non-finite pivots), lane by lane."""
    from mbs import ensemble_numba as kernels
    from mbs.ensemble import _lane_plan

    rng = np.random.default_rng(3)
    n, m = 6, 2
    qr, qi, qj, qc, lr, li, lc, mass, minv = _random_table(rng, n, m)
    plan = _lane_plan(n, m, qr, qi, qj, qc, lr, li, lc, mass, minv, 1e-2)
    nv, a_const, term_ptr, term_coef, term_var, diag, pairs, pair_ops, single_ops = plan[:9]
    e_row, e_col = plan[-3], plan[-2]
    lanes, size, threshold = kernels.LANES, n + 2 * m, 0.1
    xv = rng.normal(size=(nv, lanes))
    xv[-1] = 1.0
    a = np.zeros((a_const.size, lanes))
    kernels._lanes_assemble(a, xv, a_const, term_ptr, term_coef, term_var)
    below = np.flatnonzero((e_col == 0) & (e_row > 0))[0]
    a[below, 3] = 1e3 * abs(a[diag[0], 3])     # lane 3: a large entry below the first pivot
    a[diag[0], 5] = 0.0                         # lane 5: a zero pivot
    a[diag[0], 6] = np.nan                      # lane 6: not finite
    expected = []
    for lane in range(lanes):                   # dense elimination without row exchanges
        dense = np.zeros((size, size))
        dense[e_row, e_col] = a[:, lane]
        good = True
        for c in range(size):
            pivot = abs(dense[c, c])
            column = np.abs(dense[c + 1:, c])
            biggest = max(column[~np.isnan(column)], default=0.0)
            good &= bool(pivot >= threshold * biggest and 0.0 < pivot < np.inf)
            with np.errstate(all="ignore"):
                dense[c + 1:, c] *= 1.0 / dense[c, c]
                dense[c + 1:, c + 1:] -= np.outer(dense[c + 1:, c], dense[c, c + 1:])
        if not good:
            expected.append(lane)
    assert {3, 5, 6} <= set(expected) and len(expected) < lanes
    ok = np.ones((1, lanes))
    with np.errstate(all="ignore"):
        kernels._lanes_sparse_lu(a, ok, np.zeros((size, lanes)), np.zeros((size, lanes)),
                                 threshold, diag, pairs, pair_ops, single_ops)
    assert np.flatnonzero(ok[0] == 0.0).tolist() == expected
