"""Solver selection, option validation, failure contract and the Solution object."""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import heavy_top as ht
import numpy as np
import pendulum_3d
import pytest
from mechanisms import rod_pendulum

import mbs
from mbs.errors import ModelError
from mbs.solvers import GGLVI, EnergyMomentum, NewtonOptions, Rattle, make_solver, solver_table


@pytest.fixture(scope="module")
def pendulum():
    return pendulum_3d.build().compile()


@pytest.fixture(scope="module")
def top():
    return ht.build().compile()


def test_names_and_instances_select_the_same_scheme(pendulum):
    by_name = mbs.simulate(pendulum, "ggl-vi-a", h=0.05, t_end=0.5)
    by_instance = mbs.simulate(pendulum, GGLVI(variant="A", theta=0.5), h=0.05, t_end=0.5)
    np.testing.assert_array_equal(by_name.q, by_instance.q)
    assert isinstance(make_solver("em"), EnergyMomentum)
    assert isinstance(make_solver("RATTLE"), Rattle)
    assert make_solver("ggl-vi-b").theta == 1.0 and make_solver("ggl-vi-b").vartheta == 0.5
    assert make_solver("ggl-vi-a").theta == 0.5


@pytest.mark.parametrize("kwargs", [
    {"solver": "leapfrog"},
    {"solver": "ggl-vi-a", "theta": 1.0},
    {"solver": "ggl-vi-a", "theta": 0.0},
    {"solver": "ggl-vi-b", "theta": 1.5},
    {"solver": "ggl-vi-b", "vartheta": 0.0},
    {"solver": "ggl-vi-b", "vartheta": 1.0},
    {"solver": "ggl-vi-s", "theta": 0.5},
    {"solver": "ggl-vi-s", "vartheta": 0.5},
    {"solver": "ggl-vi-a", "vartheta": 0.5},
    {"solver": "em", "initial_guess": "clever"},
    {"solver": "em", "h": 0.0},
    {"solver": "em", "h": -0.1},
    {"solver": "em", "h": float("nan")},
    {"solver": "em", "t_end": -1.0},
    {"solver": "em", "no_such_option": 3},
])
def test_bad_solver_options_raise_model_error(pendulum, kwargs):
    args = {"h": 0.05, "t_end": 0.5, **kwargs}
    with pytest.raises(mbs.ModelError):
        mbs.simulate(pendulum, **args)


def test_theta_variants_accept_their_documented_ranges(pendulum):
    with pytest.warns(UserWarning, match="unstable"):
        unstable = GGLVI(variant="A", theta=0.7)
    for solver in (unstable, GGLVI(variant="B", theta=0.0, vartheta=0.5),
                   GGLVI(variant="B", theta=0.5, vartheta=0.25)):
        sol = mbs.simulate(pendulum, solver, h=0.05, t_end=0.5)
        assert np.all(np.isfinite(sol.q)) and np.all(np.isfinite(sol.p))


def test_non_convergence_raises_with_partial_solution(pendulum):
    solver = EnergyMomentum(newton=NewtonOptions(max_iterations=3))
    with pytest.raises(mbs.SolverError) as info:
        mbs.simulate(pendulum, solver, h=0.9, t_end=50.0, on_failure="raise")
    error = info.value
    partial = error.solution
    assert partial is not None and partial.stats["completed"] is False
    assert partial.t.size == error.step + 1
    assert partial.q.shape == (error.step + 1, pendulum.n)
    assert "step" in str(error) and "hint" in str(error)


def test_solution_arrays_and_time_association(top):
    h = 0.002
    sol = mbs.simulate(top, "em", h=h, t_end=0.02)
    assert sol.t.shape == (11,) and sol.q.shape == (11, 12) and sol.p.shape == (11, 12)
    assert sol.multipliers.shape == (10, 9) and sol.velocity_multipliers.shape == (10, 9)
    np.testing.assert_allclose(sol.t, h * np.arange(11), atol=1e-15)
    assert sol.stats["newton_iterations"].shape == (10,)
    assert sol.stats["wall_time"] > 0.0 and sol.stats["completed"]
    # EM: v^{n+1/2} = M^-1 (p^n + p^{n+1}) / 2
    np.testing.assert_allclose(
        sol.scheme_velocities,
        (top.inverse_mass_matrix @ (0.5 * (sol.p[:-1] + sol.p[1:])).T).T, atol=1e-12)


def test_body_trajectory_of_rigid_body(top):
    sol = mbs.simulate(top, "em", h=0.002, t_end=0.01)
    body = sol.body("top")
    rotation0 = mbs.rotation_about_x(ht.NUTATION)
    np.testing.assert_allclose(body.rotation[0], rotation0, atol=1e-15)
    omega0 = ht.PRECESSION_RATE * np.array([0.0, 0.0, 1.0]) + ht.spin_rate() * rotation0[:, 2]
    np.testing.assert_allclose(body.angular_velocity[0], omega0, rtol=1e-12)
    np.testing.assert_allclose(body.angular_velocity_body[0], rotation0.T @ omega0, rtol=1e-12)
    np.testing.assert_allclose(body.position[0], ht.LENGTH * rotation0[:, 2], atol=1e-15)
    for r in body.rotation:
        np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-12)


def test_observables_match_hand_formulas(top):
    sol = mbs.simulate(top, "em", h=0.002, t_end=0.01)
    q, p = sol.q[-1], sol.p[-1]
    v = top.inverse_mass_matrix @ p
    assert sol.kinetic_energy()[-1] == pytest.approx(0.5 * p @ v, rel=1e-14)
    assert sol.potential_energy()[-1] == pytest.approx(ht.MASS * ht.GRAVITY * q[2], rel=1e-14)
    blocks_q, blocks_p = q.reshape(4, 3), p.reshape(4, 3)
    np.testing.assert_allclose(sol.angular_momentum()[-1],
                               np.cross(blocks_q, blocks_p).sum(axis=0), atol=1e-15)
    about = np.array([0.1, 0.2, 0.3])
    shifted = np.cross(blocks_q[0] - about, blocks_p[0]) + np.cross(blocks_q[1:],
                                                                    blocks_p[1:]).sum(axis=0)
    np.testing.assert_allclose(sol.angular_momentum(about)[-1], shifted, atol=1e-15)
    np.testing.assert_allclose(sol.linear_momentum()[-1], blocks_p[0], atol=0)


def test_progress_bar_and_summary(pendulum, capsys):
    sol = mbs.simulate(pendulum, "em", h=0.05, t_end=0.5, progress=True)
    text = sol.conservation_summary()
    for word in ("energy", "angular momentum", "constraints", "scheme enforces"):
        assert word in text


def test_solver_table_lists_every_solver():
    table = solver_table()
    for name in ("em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle"):
        assert f"`{name}`" in table


def test_simple_and_advanced_initial_guess_reach_the_same_solution(pendulum):
    simple = mbs.simulate(pendulum, EnergyMomentum(initial_guess="simple"), h=0.05, t_end=1.0)
    advanced = mbs.simulate(pendulum, EnergyMomentum(initial_guess="advanced"), h=0.05,
                            t_end=1.0)
    np.testing.assert_allclose(simple.q, advanced.q, atol=1e-12)
    assert (np.mean(advanced.stats["newton_iterations"])
            <= np.mean(simple.stats["newton_iterations"]))


def test_inconsistent_initial_state_needs_projection():
    system = pendulum_3d.build()
    system["bob"].set_state(position=(1.1, 0.0, 0.0), velocity=(0.3, 1.0, 0.0))
    with pytest.warns(UserWarning):
        model = system.compile()
    with pytest.raises(mbs.InconsistentInitialStateError):
        mbs.simulate(model, "em", h=0.05, t_end=0.1)
    with pytest.warns(UserWarning, match="projected"):
        sol = mbs.simulate(model, "em", h=0.05, t_end=0.1, project=True)
    assert np.max(sol.constraint_residuals()["position"]) <= 1e-12


@pytest.mark.parametrize("theta", [0.55, 0.6])
def test_vi_a_past_its_limit_warns_and_amplifies_normal_momentum(pendulum, theta):
    """The normal momentum f_n = q^n . p^n of the pendulum (m = l = 1) grows by a factor
    -theta/(1 - theta) per step, at any h: for variant A with theta > 1/2,
    G(q^{n+theta}) v^{n+1} = 0 with M v^{n+1} = theta p^n + (1 - theta) p^{n+1}. The
    measured growth per step matches that factor. In the stable default (theta = 1/2) f_n
    stays of the size of the constraint force g + v^2 times h^2 (second order; measured 0.95
    of it at h = 0.01 and 0.005)."""
    with pytest.warns(UserWarning, match="unstable"):
        # 25 iterations keep Newton converging into the blow-up past step 50
        solver = GGLVI(variant="A", theta=theta, newton=NewtonOptions(max_iterations=25))
    with pytest.raises(mbs.SolverError) as info:
        mbs.simulate(pendulum, solver, h=0.01, t_end=10.0, on_failure="raise")
    q, p = info.value.solution.q, info.value.solution.p
    normal = np.abs(np.einsum("ij,ij->i", q, p))
    # the growth factor of most steps between the start-up and the blow-up (where Newton
    # needs many iterations and some steps are redone from another guess)
    rate = np.median(normal[21:51] / normal[20:50])
    assert rate == pytest.approx(theta / (1.0 - theta), rel=0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = mbs.simulate(pendulum, GGLVI(variant="A", theta=0.5), h=0.01, t_end=10.0)
    force = 9.81 + np.abs(run.p).max() ** 2
    assert np.abs(np.einsum("ij,ij->i", run.q, run.p)).max() < 2 * 0.01**2 * force


@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_vi_b_moves_alike_for_every_vartheta_with_its_momentum_on_the_constraints(
        pendulum, theta):
    """(82) fixes q^{n+1} and v^{n+1} but not the momentum component normal to the
    constraints, which the scheme takes off p^{n+1}: the normal momentum q^n . p^n of the
    pendulum (m = l = 1) is round-off, and since only (1 - vartheta) lambda^n then enters
    the step equations the motion is the same for every vartheta in (0, 1) (without the
    projection vartheta > 1/2 amplified the normal momentum by vartheta/(1 - vartheta) per
    step). Runs differ by Newton's tolerance (1e-12 relative per step) accumulated over 1000
    steps of a stable motion: below 1e-9."""
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for vartheta in (0.3, 0.5, 0.9):
            runs.append(mbs.simulate(pendulum, GGLVI(variant="B", theta=theta,
                                                     vartheta=vartheta), h=0.01, t_end=10.0))
    for run in runs:
        assert run.stats["completed"]
        assert np.abs(np.einsum("ij,ij->i", run.q, run.p)).max() <= 1e-13 * np.abs(run.p).max()
        assert np.abs(run.q - runs[1].q).max() <= 1e-9


def test_vi_a_with_theta_below_half_warns_and_drifts_off_the_manifold(pendulum):
    with pytest.warns(UserWarning, match="unstable"):
        solver = GGLVI(variant="A", theta=0.3)
    with pytest.raises(mbs.SolverError) as info:
        mbs.simulate(pendulum, solver, h=0.01, t_end=2.0, on_failure="raise")
    radius = np.linalg.norm(info.value.solution.q, axis=1)
    assert radius[-1] > 10.0  # |q| = l = 1 on the manifold


def test_summary_labels_what_the_model_conserves_and_handles_zero_references():
    """A pendulum released from rest at the height of its pivot: E0 = 0 and its vertical
    angular momentum is zero throughout, so relative drifts are measured against the
    kinetic energy and the zero is stated; the linear momentum is not conserved (the rod
    pulls on the ground) and says why."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    text = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0).conservation_summary()
    energy_line = next(line for line in text.splitlines() if line.startswith("energy"))
    drift = float(energy_line.split("max |E - E0| / max T = ")[1].split()[0])
    assert drift <= 1e-12 and "(conserved by this model)" in energy_line
    assert "J = 0 throughout" in text
    assert "linear momentum" in text and "(not conserved: joints to the ground, gravity)" in text
    free = mbs.System()
    body = free.add(mbs.RigidBody(1.0, (1.0, 2.0, 2.5), name="free"))
    body.set_state(angular_velocity=(1.0, 0.0, 1.0))
    text = mbs.simulate(free.compile(), "em", h=0.01, t_end=0.5).conservation_summary()
    assert "linear momentum   L = 0 throughout  (conserved by this model)" in text
    assert "angular momentum  J0 = [1.  0.  2.5]" in text


def test_the_summary_says_how_a_scheme_that_does_not_conserve_energy_exactly_keeps_it():
    """RATTLE's energy error is its bounded oscillation, declared in its properties: the
    energy line says so next to the model's verdict, EM's (exact) does not add it."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    model = system.compile()
    lines = {name: mbs.simulate(model, name, h=0.01, t_end=0.5).conservation_summary()
             .splitlines()[1] for name in ("rattle", "em")}
    assert lines["rattle"].endswith("(conserved by this model; rattle: bounded oscillation)")
    assert lines["em"].endswith("(conserved by this model)")


def test_the_summary_says_how_a_scheme_that_does_not_conserve_momentum_exactly_keeps_it():
    """The spherical pendulum's vertical angular momentum: exact for RATTLE, to O(h^r) for
    vi-conversion (its discrete Noether momentum is another) and not guaranteed for hbvm,
    as their properties declare."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 2.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    model = system.compile()
    lines = {name: mbs.simulate(model, name, h=0.01, t_end=0.5).conservation_summary()
             .splitlines()[2] for name in ("rattle", "vi-conversion", "hbvm")}
    assert lines["rattle"].endswith("(conserved by this model)")
    assert lines["vi-conversion"].endswith("(conserved by this model; vi-conversion: discrete "
                                           "Noether momentum mu . (xi q_bar) exact; the "
                                           "continuous one to O(h^r))")
    assert lines["hbvm"].endswith("(conserved by this model; hbvm: not guaranteed)")


def test_summary_calls_a_momentum_cancelled_to_round_off_zero():
    """Two discs on a hinge, spun up against each other by a motor from rest: their angular
    momenta cancel, so the total is zero up to the rounding of their sum, which the summary
    must not report as a drift of 100 %."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, (0.012, 0.012, 0.02), name="a"))
    b = system.add(mbs.RigidBody(2.0, (0.03, 0.03, 0.05), name="b"))
    b.set_state(position=(0.0, 0.0, 0.1))
    hinge = system.add(mbs.joints.Revolute(a, b, point=(0, 0, 0.05), axis=(0, 0, 1),
                                           name="hinge"))
    system.add(mbs.forces.JointTorque(hinge, lambda t: 0.3 * np.sin(3.0 * t) + 0.1))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    spin = np.abs(solution.body("a").angular_velocity[-1, 2]) * 0.02
    assert np.abs(solution.angular_momentum()).max() <= 1e3 * np.finfo(float).eps * spin
    text = solution.conservation_summary()
    assert "J = 0 throughout" in text
    assert "/ max |J|" not in text


def test_summary_takes_the_angular_momentum_about_a_pivot_away_from_the_origin():
    """A top on a ball joint at P = (1, 2, 0.5): its vertical angular momentum about P is
    conserved, the one about the origin is not (the pivot's horizontal reaction has a
    vertical moment about the origin). The default summary reports it about P."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    top = system.add(mbs.RigidBody(1.0, (0.1, 0.1, 0.15), name="top"))
    pivot, tilt = np.array([1.0, 2.0, 0.5]), mbs.rotation_about_x(0.3)
    centre, spin = pivot + tilt @ np.array([0.0, 0.0, 0.2]), 50.0 * tilt[:, 2]
    top.set_state(position=centre, rotation=tilt, velocity=np.cross(spin, centre - pivot),
                  angular_velocity=spin)
    system.add(mbs.joints.Spherical(system.ground, top, point=pivot, name="pivot"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.5)
    line = solution.conservation_summary().splitlines()[2]
    assert line.startswith("vertical angular momentum about [1.  2.  0.5]")
    assert line.endswith("(conserved by this model)")
    drift = float(line.split("max |J - J0| / max |J| = ")[1].split()[0])
    assert drift <= 1e-13  # 50 steps of EM's round-off
    origin = solution.conservation_summary(about=(0.0, 0.0, 0.0)).splitlines()[2]
    assert "(not conserved: joints to the ground, gravity)" in origin  # weight off the origin


def test_a_given_initial_state_is_checked_and_projected_on_request():
    """simulate(initial_state=...) with a bob 1.2 m from the pivot of a 1 m rod: projected
    onto the rod with project=True, otherwise used as given with a warning; a NaN is an
    error naming the entry."""
    model = rod_pendulum().compile()
    off = (np.array([1.2, 0.0, 0.0]), np.zeros(3))
    with pytest.warns(UserWarning, match="projected onto the constraint manifold"):
        projected = mbs.simulate(model, "em", h=0.01, t_end=0.1, initial_state=off,
                                 project=True)
    np.testing.assert_allclose(np.linalg.norm(projected.q, axis=1), 1.0, atol=1e-12)
    with pytest.warns(UserWarning, match="violates the constraints.*project=True"):
        mbs.simulate(model, "em", h=0.01, t_end=0.1, initial_state=off)
    with pytest.raises(ModelError, match=r"q0\[1\] = nan is not finite"):
        mbs.simulate(model, "em", h=0.01, t_end=0.1,
                     initial_state=(np.array([1.0, np.nan, 0.0]), np.zeros(3)))


def test_nodes_at_finds_output_times(pendulum):
    """Times on the output grid map to their nodes; a time between nodes maps to the nearer
    one and is reported as not coinciding; times outside the run clip to its ends."""
    solution = mbs.simulate(pendulum, "em", h=0.1, t_end=1.0)
    nodes, coincide = solution.nodes_at([0.0, 0.3, 0.74, 1.0, 5.0])
    np.testing.assert_array_equal(nodes, [0, 3, 7, 10, 10])
    np.testing.assert_array_equal(coincide, [True, True, False, True, False])


def test_a_solution_prints_as_one_line(top, tmp_path):
    """repr(Solution) names the solver, the step, the nodes and the model instead of
    printing every array."""
    solution = mbs.simulate(top, "rattle", h=0.01, t_end=0.5)
    assert repr(solution) == (f"Solution(solver='rattle', h=0.01, steps=50, t=[0, 0.5], "
                              f"model={top!r})")
    loaded = mbs.load_solution(mbs.save_solution(solution, tmp_path / "run.npz"))
    assert repr(loaded).startswith("LoadedSolution(solver='rattle', h=0.01, steps=50, ")


def test_options_of_the_high_order_methods_are_checked_where_they_are_given():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    top = system.add(mbs.RigidBody(mass=1.0, inertia=(0.02, 0.02, 0.01), name="top"))
    top.set_state(position=(0.0, 0.0, 0.1), angular_velocity=(0.0, 0.0, 20.0))
    system.add(mbs.joints.Spherical(system.ground, top, point=(0, 0, 0)))
    model = system.compile()
    with pytest.raises(mbs.ModelTypeError, match="tableau must be a LobattoTableau"):
        mbs.simulate(model, "lobatto", stages=3, tableau="gauss-2", h=0.01, t_end=0.02)
    with pytest.raises(mbs.ModelError, match="max_iterations must be a whole number of at "
                                             "least 1, got 0"):
        mbs.simulate(system.compile(formulation="lie-group"), "vrkmk", max_iterations=0,
                     h=0.01, t_end=0.02)
    assert mbs.solvers.make_solver("em", order=4.0).name == "em-order4"
    with pytest.warns(UserWarning, match="backend='compiled' has no effect"):
        mbs.simulate(model, "vi-conversion", backend="compiled", h=0.01, t_end=0.02)


def test_one_solver_instance_runs_one_simulation_at_a_time():
    """An instance holds the state of its run: a second run of the same instance started
    while the first is under way (another thread) is refused, and the first completes with
    the states of a run of its own."""
    started, release = threading.Event(), threading.Event()

    def held(t):
        if t > 0.05 and not release.is_set():
            started.set()
            release.wait(timeout=60)
        return (0.0, 0.0, 0.0)

    system = rod_pendulum()
    system.add(mbs.forces.Load(system["bob"], force=held, name="push"))
    model = system.compile()
    solver = EnergyMomentum(newton=NewtonOptions(tolerance=1e-13))
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(mbs.simulate, model, solver, h=0.01, t_end=0.2)
        assert started.wait(timeout=60)
        with pytest.raises(ModelError, match="this EnergyMomentum instance is running in "
                                             "another simulate call"):
            mbs.simulate(model, solver, h=0.01, t_end=0.2)
        release.set()
        solution = first.result()
    alone = mbs.simulate(model, EnergyMomentum(newton=NewtonOptions(tolerance=1e-13)),
                         h=0.01, t_end=0.2)
    np.testing.assert_array_equal(solution.q, alone.q)
    again = mbs.simulate(model, solver, h=0.01, t_end=0.2)  # free again once the run ended
    np.testing.assert_array_equal(again.q, alone.q)


def test_a_run_failing_with_an_unstable_theta_names_it():
    """VI-A with theta = 0.3 amplifies the constraint drift by 7/3 per step: the run fails
    within a few steps, whatever else the failure looks like (here a mirrored frame), and
    the hint is the unstable setting."""
    model = ht.build().compile()
    with pytest.warns(UserWarning, match="theta = 0.3 < 1/2 amplifies"):
        solver = GGLVI(variant="A", theta=0.3)
    with pytest.raises(mbs.SolverError) as caught:
        mbs.simulate(model, solver, h=0.002, t_end=2.0)
    assert "theta = 0.3 < 1/2 amplifies the constraint drift" in caught.value.hint
    assert caught.value.step < 50


def test_a_nearly_stable_theta_does_not_hide_the_cause_of_a_failure():
    """theta = 0.5001 grows a violation by 1.0004 per step, no explanation of a failure in
    the first step: the kept redundant equation that makes the Newton matrix singular is
    named instead."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81), redundant="keep")
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    for name in ("rod", "rod2"):
        system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name=name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = system.compile()
        solver = GGLVI(variant="A", theta=0.5001)
    with pytest.raises(mbs.SolverError) as caught:
        mbs.simulate(model, solver, h=0.01, t_end=1.0)
    assert "keeps 1 redundant constraint equation" in caught.value.hint
