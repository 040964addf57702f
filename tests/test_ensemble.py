"""Vectorised ensembles and parameter sweeps through an executor."""

from __future__ import annotations

import importlib.util
import pickle
from concurrent.futures import ProcessPoolExecutor

import heavy_top
import numpy as np
import pytest
from mechanisms import rod_pendulum

import mbs
from mbs.backends import compiled


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
    return importlib.util.find_spec("numba") is not None


NUMBA = pytest.param("numba", marks=pytest.mark.skipif(not _numba_available(),
                                                       reason="numba not installed"))
#: the batched kernels ("numba") and every member through simulate's numpy path ("numpy")
BACKENDS = ["numpy", NUMBA]
#: what ``stats["backend"]`` reports for each
BACKEND_LABELS = {"numpy": "member by member", "numba": "numba"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_members_equal_separate_em_runs_and_conserve(top, backend):
    q0, p0 = rotated_states(top, 6)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=0.002, t_end=0.1, backend=backend)
    assert ensemble.q.shape == (6, 51, 12)
    assert ensemble.stats["backend"] == BACKEND_LABELS[backend]
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


@pytest.mark.parametrize("backend", [NUMBA])
def test_ensemble_predictor_correction_matches_single_runs_with_fewer_factorisations(top,
                                                                                     backend):
    """The corrected predictor (degree 2, and the default 6): members equal single runs with
    the same option, and need fewer LU factorisations than with the plain predictor."""
    q0, p0 = rotated_states(top, 5)
    runs = {order: mbs.simulate_ensemble(top, (q0, p0), h=0.002, t_end=0.1, backend=backend,
                                         tolerance=1e-13, predictor_correction=order)
            for order in (None, 2, 6)}
    for order in (2, 6):
        assert runs[order].stats["factorizations"] <= 0.95 * runs[None].stats["factorizations"]
        for k in (0, 4):
            solver = mbs.solvers.make_solver("em", predictor_correction=order,
                                             newton=mbs.solvers.NewtonOptions(tolerance=1e-13))
            single = mbs.simulate(top, solver, h=0.002, t_end=0.1,
                                  initial_state=(q0[k], p0[k]))
            np.testing.assert_allclose(runs[order].q[k], single.q, atol=1e-12)
    energy = runs[6].energy()
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
    """The batched kernels solve each member's EM steps to the same 1e-12 relative Newton
    tolerance as single runs (20 steps: 1e-13); without numba the members are the single
    runs."""
    q0, p0 = rotated_states(top, 3)
    reference = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="numpy")
    for k in range(3):
        single = mbs.simulate(top, "em", h=1e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(reference.q[k], single.q)
    if _numba_available():
        compiled = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02, backend="numba")
        np.testing.assert_allclose(compiled.q, reference.q, atol=1e-13)
    from mbs import ensemble as ensemble_module

    monkeypatch.setattr(ensemble_module, "_numba_kernels", lambda: None)  # numba not importable
    fallback = mbs.simulate_ensemble(top, (q0, p0), h=1e-3, t_end=0.02)
    assert fallback.stats["backend"] == "member by member"
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


def test_a_list_of_states_is_read_as_the_pair_or_refused_when_ambiguous(top):
    """[Q0, P0] is the pair (Q0, P0); with two members it reads as [[q, p], [q, p]] as well,
    which would swap states between members silently: refused."""
    q0, p0 = rotated_states(top, 3)
    as_list = mbs.simulate_ensemble(top, [q0, p0], h=0.01, t_end=0.05, backend="numpy")
    as_tuple = mbs.simulate_ensemble(top, (q0, p0), h=0.01, t_end=0.05, backend="numpy")
    assert np.array_equal(as_list.q, as_tuple.q)
    with pytest.raises(mbs.ModelError, match=r"give the pair as a tuple \(Q0, P0\)"):
        mbs.simulate_ensemble(top, [q0[:2], p0[:2]], h=0.01, t_end=0.05)
    with pytest.raises(mbs.ModelError, match=r"give the pair as a tuple"):
        mbs.simulate_ensemble(top, [[q0[0], p0[0]], [q0[1], p0[1]]], h=0.01, t_end=0.05)
    members = np.stack([q0, p0], axis=1)  # an array (K, 2, n) stays a stack of members
    assert np.array_equal(mbs.simulate_ensemble(top, members[:2], h=0.01, t_end=0.05,
                                                backend="numpy").q,
                          mbs.simulate_ensemble(top, (q0[:2], p0[:2]), h=0.01, t_end=0.05,
                                                backend="numpy").q)


def test_simulate_many_serial_and_through_a_process_pool(top):
    assert pickle.loads(pickle.dumps(top)).n == top.n  # models travel to worker processes
    runs = [(top, {"solver": "em", "h": 0.002, "t_end": 0.02}),
            (top, {"solver": "rattle", "h": 0.002, "t_end": 0.02})]
    serial = mbs.simulate_many(runs)
    with ProcessPoolExecutor(max_workers=2) as pool:
        parallel = mbs.simulate_many(runs, executor=pool)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a.q, b.q)


def test_models_with_every_built_in_force_element_pickle_and_run_in_a_process_pool():
    """Dampers (two-point, on joints, of springs) and constant joint torques and forces are
    built-in elements: their models travel to worker processes and run there as here."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    arm = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.4, ly=0.05, lz=0.05,
                                              name="arm"))
    arm.set_state(position=(0.2, 0.0, 0.0), angular_velocity=(0.0, 0.0, 1.0),
                  velocity=(0.0, 0.2, 0.0))
    bob = system.add(mbs.PointMass(mass=0.5, name="bob"))
    bob.set_state(position=(0.4, 0.0, -0.3))
    hinge = system.add(mbs.joints.Revolute(system.ground, arm, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="hinge"))
    slider = system.add(mbs.RigidBody.from_shape("box", mass=0.3, lx=0.1, ly=0.1, lz=0.1,
                                                 name="slider"))
    slider.set_state(position=(0.0, 0.5, 0.0))
    rail = system.add(mbs.joints.Prismatic(system.ground, slider, point=(0, 0.5, 0),
                                           axis=(1, 0, 0), name="rail"))
    system.add(mbs.forces.Spring(arm, bob, stiffness=50.0, rest_length=0.25, damping=0.2,
                                 point_a=(0.2, 0.0, 0.0)))
    system.add(mbs.forces.Damper(arm, bob, 0.1, point_a=(0.2, 0.0, 0.0)))
    system.add(mbs.forces.JointDamper(hinge, 0.05))
    system.add(mbs.forces.JointTorque(hinge, 0.3))
    system.add(mbs.forces.JointForce(rail, 0.2))
    model = system.compile()
    runs = [(model, {"solver": "em", "h": 0.005, "t_end": 0.05})]
    with ProcessPoolExecutor(max_workers=1) as pool:
        parallel = mbs.simulate_many(runs, executor=pool)[0]
    np.testing.assert_array_equal(parallel.q, mbs.simulate(model, "em", h=0.005, t_end=0.05).q)


def test_simulate_many_keeps_the_runs_around_a_failing_one(top):
    """A run that fails (RATTLE allowed one Newton iteration) does not lose the others:
    the error comes after every run, names the failed one and lists every outcome."""
    one_iteration = mbs.solvers.NewtonOptions(max_iterations=1)
    runs = [(top, {"solver": "em", "h": 0.002, "t_end": 0.02}),
            (top, {"solver": "rattle", "h": 0.05, "t_end": 0.2, "on_failure": "raise",
                   "newton": one_iteration}),
            (top, {"solver": "rattle", "h": 0.002, "t_end": 0.02})]
    with pytest.raises(mbs.SolverError, match=r"1 of 3 runs failed \(runs \[1\]\)") as info:
        mbs.simulate_many(runs)
    results = info.value.results
    assert isinstance(results[1], mbs.SolverError)
    for k in (0, 2):
        alone = mbs.simulate(top, **runs[k][1])
        np.testing.assert_array_equal(results[k].q, alone.q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ensemble_of_double_pendulums_with_a_partial_simd_block(backend):
    """Another model (n = 24, m = 22) and a member count that is not a multiple of the
    SIMD block (the numba path runs the whole trajectory in one call)."""
    import double_pendulum

    assert_members_match_single_runs(double_pendulum.build().compile(), [1.0, 0.5, 1.5],
                                     backend, 1e-12)


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_members_the_kernel_cannot_solve_are_their_single_runs(top):
    """A member whose batched Newton iteration fails (here: two iterations allowed) is run
    again through mbs.simulate, with its retries and sub-steps: it is its single run."""
    q0, p0 = rotated_states(top, 3)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, max_iterations=2)
    assert ensemble.stats["rerun_members"] == [(0, 0), (1, 0), (2, 0)]
    for k in range(3):
        single = mbs.simulate(top, "em", h=2e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(ensemble.q[k], single.q)


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_a_member_whose_corrected_guess_fails_retries_from_the_predictor(top):
    """At h = 10 ms (1.4 rad of spin per step) the extrapolated defect of degree 2 spoils
    some guesses; those steps start again from the predictor alone, in the kernel. A member
    whose step then converges farther from its guess than the step moves is run again as
    its single run, which redoes such a step from another guess (two of the four here). All
    members match their single runs to the Newton tolerance."""
    q0, p0 = rotated_states(top, 4)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=1e-2, t_end=0.3)
    assert ensemble.stats["guess_retries"] > 0 and len(ensemble.stats["rerun_members"]) < 4
    for k in range(4):
        single = mbs.simulate(top, "em", h=1e-2, t_end=0.3, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(ensemble.q[k], single.q, rtol=0.0, atol=1e-12)


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_ensemble_failure_keeps_every_member(top):
    """Members that mbs.simulate cannot advance either (a spin 10^4 times the top's) do not
    stop the others: the error, raised once every member has run, names the failed members
    and holds the whole ensemble, the completed members equal to their single runs and the
    failed ones NaN after their last accepted state."""
    q0, p0 = rotated_states(top, 4)
    p0[1] *= 1e4
    p0[3] *= 1e4
    with pytest.raises(mbs.SolverError, match=r"2 of 4 members failed: 1 \(step 0\), "
                                              r"3 \(step 0\)") as info:
        mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02)
    ensemble = info.value.solution
    assert ensemble.q.shape == (4, 11, 12)
    np.testing.assert_array_equal(ensemble.stats["completed"], [True, False, True, False])
    assert ensemble.stats["failed_members"] == {1: 0, 3: 0}
    for k in (0, 2):
        single = mbs.simulate(top, "em", h=2e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(ensemble.q[k], single.q, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ensemble.q[1, 0], q0[1])
    assert np.isnan(ensemble.q[1, 1:]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", ["em", "ggl-vi-a", "rattle"])
def test_batched_schemes_match_their_single_runs(top, scheme, backend):
    """The batched kernel evaluates each scheme's own step equations: every member matches
    the single run from its initial state to the Newton tolerance (relative increments of
    1e-12; after the last, quadratically convergent iteration the error is far below it),
    and conserves what the scheme conserves. Member by member ("numpy") it is bitwise the
    single run."""
    q0, p0 = rotated_states(top, 3)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.04, solver=scheme,
                                     backend=backend)
    assert ensemble.stats["backend"] == BACKEND_LABELS[backend]
    assert ensemble.q.shape == (3, 21, top.n)
    for k in range(3):
        single = mbs.simulate(top, scheme, h=2e-3, t_end=0.04, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(ensemble.q[k], single.q, rtol=0.0, atol=1e-12)
        np.testing.assert_allclose(ensemble.p[k], single.p, rtol=0.0,
                                   atol=1e-12 * np.abs(p0).max())
        if backend == "numpy":
            np.testing.assert_array_equal(ensemble.q[k], single.q)
    j3 = ensemble.angular_momentum()[..., 2]   # a symmetry of the top, kept by all three
    assert np.max(np.abs(j3 - j3[:, :1])) <= 1e-12 * np.max(np.abs(j3))


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_batched_members_whose_static_pivots_fail_are_factorised_with_pivoting(top,
                                                                             monkeypatch):
    """A member whose Newton matrix fails the static pivot test is factorised again with
    partial pivoting (a threshold above 1 fails every pivot): same solutions to the Newton
    tolerance."""
    from mbs.backends import ensemble_numba

    monkeypatch.setattr(ensemble_numba, "STATIC_PIVOT_THRESHOLD", 2.0)
    q0, p0 = rotated_states(top, 3)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, backend="numba")
    stats = ensemble.stats
    assert stats["pivoted_factorizations"] == stats["factorizations"] > 0
    for k in range(3):
        single = mbs.simulate(top, "em", h=2e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        np.testing.assert_allclose(ensemble.q[k], single.q, rtol=0.0, atol=1e-12)


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
@pytest.mark.parametrize("scheme", ["em", "rattle"])
def test_batched_closed_loop_members_match_their_single_runs(scheme, monkeypatch):
    """A planar four-bar (a closed loop, its redundant equations dropped): members match
    their single runs to the Newton tolerance, also when the Schur complement of the
    multipliers is factorised with partial pivoting (the static pivot test made to fail:
    a pivot order that degrades as a loop moves)."""
    from mechanisms import planar_four_bar

    from mbs.backends import ensemble_numba

    with pytest.warns(UserWarning, match="redundant"):
        model = planar_four_bar().compile()
    q0, p0 = model.initial_state()
    states = (np.stack([q0] * 3), np.stack([scale * p0 for scale in (0.8, 1.0, 1.2)]))
    for threshold in (ensemble_numba.STATIC_PIVOT_THRESHOLD, 2.0):
        monkeypatch.setattr(ensemble_numba, "STATIC_PIVOT_THRESHOLD", threshold)
        ensemble = mbs.simulate_ensemble(model, states, h=1e-3, t_end=0.1, solver=scheme)
        assert ensemble.stats["backend"] == "numba"
        if threshold > 1.0:
            assert ensemble.stats["pivoted_factorizations"] == \
                ensemble.stats["factorizations"] > 0
        for k in range(3):
            single = mbs.simulate(model, scheme, h=1e-3, t_end=0.1,
                                  initial_state=(states[0][k], states[1][k]))
            np.testing.assert_allclose(ensemble.q[k], single.q, rtol=0.0,
                                       atol=1e-12 * np.abs(q0).max())


@pytest.mark.parametrize("scheme", ["ggl-vi-s", "ggl-vi-b", "hbvm"])
def test_ensembles_of_every_scheme_are_the_single_runs(top, scheme):
    """Schemes without the batched kernel run member by member through the single-run
    driver: each member is bitwise the single run from its initial state."""
    q0, p0 = rotated_states(top, 3)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, solver=scheme)
    assert ensemble.q.shape == (3, 11, top.n)
    assert ensemble.stats["backend"] == "member by member"
    for k in range(3):
        single = mbs.simulate(top, scheme, h=2e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(ensemble.q[k], single.q)
        np.testing.assert_array_equal(ensemble.p[k], single.p)


def test_newton_settings_of_an_ensemble_reach_members_run_one_by_one(top):
    """tolerance= and max_iterations= of the ensemble are the members' Newton options when
    they run one by one (here hbvm): each member is bitwise the single run with
    newton=NewtonOptions(tolerance=1e-4, ...), which stops earlier than the default
    tolerance and so differs from it; an instance cannot take them."""
    q0, p0 = rotated_states(top, 2)
    loose = mbs.solvers.NewtonOptions(tolerance=1e-4, max_iterations=30)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, solver="hbvm",
                                     tolerance=1e-4, max_iterations=30)
    for k in range(2):
        single = mbs.simulate(top, "hbvm", h=2e-3, t_end=0.02, newton=loose,
                              initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(ensemble.q[k], single.q)
        default = mbs.simulate(top, "hbvm", h=2e-3, t_end=0.02, initial_state=(q0[k], p0[k]))
        assert not np.array_equal(ensemble.q[k], default.q)
    with pytest.raises(mbs.ModelError, match="newton=NewtonOptions"):
        mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.02, tolerance=1e-4,
                              solver=mbs.solvers.make_solver("hbvm"))


@pytest.mark.skipif(not compiled.available(), reason="numba not installed")
@pytest.mark.parametrize("scheme", ["lobatto"])
def test_compiled_members_on_threads_are_the_single_runs(top, scheme):
    """With backend="numba" members whose steps run in the kernel run on one thread per
    core; each is still bitwise the single compiled run from its initial state."""
    q0, p0 = rotated_states(top, 5)
    ensemble = mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.04, solver=scheme,
                                     backend="numba")
    for k in range(5):
        single = mbs.simulate(top, scheme, h=2e-3, t_end=0.04, backend="compiled",
                              initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(ensemble.q[k], single.q)
        np.testing.assert_array_equal(ensemble.p[k], single.p)


@pytest.mark.skipif(not compiled.available(), reason="numba not installed")
def test_a_failing_member_on_threads_leaves_the_others_complete(top):
    """Every member in member order, whatever order the threads finish in: the completed
    ones as their single runs, the failing one up to its failed step."""
    q0, p0 = rotated_states(top, 4)
    p0[2] *= 40.0  # a spin that Lobatto IIIA-IIIB cannot follow at this step
    with pytest.raises(mbs.SolverError, match="1 of 4 members failed: 2") as info:
        mbs.simulate_ensemble(top, (q0, p0), h=2e-3, t_end=0.04, solver="lobatto",
                              backend="numba", on_failure="raise")
    ensemble = info.value.solution
    assert ensemble.q.shape == (4, 21, 12)
    for k in (0, 3):
        single = mbs.simulate(top, "lobatto", h=2e-3, t_end=0.04, backend="compiled",
                              initial_state=(q0[k], p0[k]))
        np.testing.assert_array_equal(ensemble.q[k], single.q)
    failed = ensemble.stats["failed_members"][2]
    assert np.isfinite(ensemble.q[2, :failed + 1]).all()
    assert np.isnan(ensemble.q[2, failed + 1:]).all()


def test_ensemble_of_a_large_model_runs_member_by_member():
    """Models above the dense size (sparse linear algebra) are integrated too."""
    from mechanisms import parallelogram_chain

    model = parallelogram_chain(8).compile()
    assert not model.dense
    q0, p0 = model.initial_state()
    ensemble = mbs.simulate_ensemble(model, (np.stack([q0, q0]), np.stack([p0, -p0])),
                                     h=1e-3, t_end=0.01)
    energy = ensemble.energy()
    assert np.abs(energy - energy[:, :1]).max() <= 1e-12 * np.abs(energy).max()
    assert ensemble.stats["backend"] == "member by member"


def test_failing_members_run_one_by_one_are_all_reported(top):
    q0, p0 = rotated_states(top, 3)
    solver_options = {"newton": mbs.solvers.NewtonOptions(max_iterations=1)}
    with pytest.raises(mbs.SolverError, match="3 of 3 members failed") as info:
        mbs.simulate_ensemble(top, (q0, p0), h=0.05, t_end=0.2, solver="rattle",
                              on_failure="raise", **solver_options)
    ensemble = info.value.solution
    assert ensemble.q.shape == (3, 5, 12)
    assert not ensemble.stats["completed"].any()


def test_an_ensemble_keeps_the_work_of_drives():
    """A hinge driven through 0.8 sin(2t)^2: the drive alone does work, which each member
    holds as its single run does (and its energy balance closes to round-off with em)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.6, ly=0.05, lz=0.05,
                                               name="link"))
    link.set_state(position=(0.3, 0.0, 0.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0),
                                           axis=(0, 1, 0)))
    system.add(mbs.joints.Drive(hinge, lambda t: 0.8 * np.sin(2.0 * t) ** 2))
    model = system.compile()
    q0, p0 = model.initial_state()
    ensemble = mbs.simulate_ensemble(model, (np.tile(q0, (2, 1)), np.tile(p0, (2, 1))),
                                     h=0.01, t_end=0.5, backend="numpy")
    single = mbs.simulate(model, "em", h=0.01, t_end=0.5)
    assert ensemble.work is not None
    for member in ensemble.work:
        np.testing.assert_array_equal(member, single.work)
    energy = ensemble.energy()
    balance = energy - energy[:, :1] - ensemble.work
    assert np.max(np.abs(balance)) <= 1e-12 * np.max(np.abs(single.work))


def interrupting_pendulum() -> tuple[mbs.Model, dict]:
    """A pendulum whose load raises KeyboardInterrupt (a Ctrl-C) once, at its call number
    ``calls["interrupt_at"]``, and ValueError at ``calls["fail_at"]`` (never while 0), and
    counts its calls."""
    calls = {"count": 0, "interrupt_at": 0, "fail_at": 0}

    def push(t):
        calls["count"] += 1
        if calls["count"] == calls["interrupt_at"]:
            raise KeyboardInterrupt
        if calls["count"] == calls["fail_at"]:
            raise ValueError("the load fails once")
        return (0.0, 0.0, 0.0)

    system = rod_pendulum()
    system.add(mbs.forces.Load(system["bob"], force=push, name="push"))
    return system.compile(), calls


def uninterrupted_run() -> tuple[mbs.Solution, mbs.Model, dict]:
    """The reference run, and the model set to be interrupted halfway through the second run
    after it (counted from the calls of the reference)."""
    model, calls = interrupting_pendulum()
    reference = mbs.simulate(model, "em", h=0.01, t_end=0.2)
    calls["interrupt_at"], calls["count"] = calls["count"] + calls["count"] // 2, 0
    return reference, model, calls


def test_ctrl_c_in_a_sweep_stops_it_and_keeps_the_runs_before():
    """The second of four runs is interrupted: no further run starts, and the first run and
    the second's steps up to the interrupt are handed over."""
    reference, model, calls = uninterrupted_run()
    runs = [(model, {"solver": "em", "h": 0.01, "t_end": 0.2})] * 4
    with pytest.raises(mbs.SimulationInterrupted, match="simulate_many interrupted in run 1 "
                                                        "of 4") as caught:
        mbs.simulate_many(runs)
    first, partial = caught.value.results
    np.testing.assert_array_equal(first.q, reference.q)
    assert 1 < partial.t.size < reference.t.size
    np.testing.assert_array_equal(partial.q, reference.q[:partial.t.size])
    assert calls["count"] == calls["interrupt_at"]  # the runs after it never started


def test_ctrl_c_in_an_ensemble_run_member_by_member_keeps_the_members_before():
    reference, model, _ = uninterrupted_run()
    q0, p0 = model.initial_state()
    with pytest.raises(mbs.SimulationInterrupted, match="ensemble interrupted in member 1 "
                                                        "of 3") as caught:
        mbs.simulate_ensemble(model, (np.tile(q0, (3, 1)), np.tile(p0, (3, 1))), h=0.01,
                              t_end=0.2)
    ensemble = caught.value.solution
    assert ensemble.stats["completed"].tolist() == [True, False, False]
    np.testing.assert_array_equal(ensemble.q[0], reference.q)
    accepted = np.isfinite(ensemble.q[1]).all(axis=1)
    assert 1 < accepted.sum() < reference.t.size
    np.testing.assert_array_equal(ensemble.q[1][accepted], reference.q[:accepted.sum()])
    assert np.isnan(ensemble.q[2]).all()



def test_ctrl_c_after_a_failed_member_keeps_that_failure():
    """Member 0 fails in its second step, member 1 is interrupted: member 0 is flagged
    failed (not completed) with its step and keeps its accepted step."""
    model, calls = interrupting_pendulum()
    mbs.simulate(model, "em", h=0.01, t_end=0.01)
    per_step = calls["count"]  # load calls of the first step
    calls["fail_at"], calls["interrupt_at"], calls["count"] = per_step + 1, 11 * per_step, 0
    q0, p0 = model.initial_state()
    with pytest.raises(mbs.SimulationInterrupted, match=r"member 1 of 3.*\(1 of them failed"
                       ) as caught:
        mbs.simulate_ensemble(model, (np.tile(q0, (3, 1)), np.tile(p0, (3, 1))), h=0.01,
                              t_end=0.2)
    ensemble = caught.value.solution
    assert ensemble.stats["completed"].tolist() == [False, False, False]
    assert ensemble.stats["failed_members"] == {0: 1}
    assert np.isfinite(ensemble.q[0]).all(axis=1).sum() == 2  # the initial state and step 0
