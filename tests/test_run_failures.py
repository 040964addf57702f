"""How runs fail or warn (user code, the disk, singular configurations, steps beyond what a
scheme takes): every step done is handed over, and the message names the cause."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from mechanisms import link, thrust_ending_at

import mbs
from mbs.forces import SquaredDistance, UserPotential
from mbs.streaming import load_stream


def pendulum_with_a_faulty_potential(fails_below: float) -> mbs.Model:
    """A point mass on a spring-like user potential that raises below a squared distance."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.5, 0.0, 0.0))

    def energy(pi):
        if pi[0] < fails_below:
            raise ZeroDivisionError("the potential's formula divides by zero here")
        return 0.5 * 10.0 * (np.sqrt(pi[0]) - 1.0) ** 2

    system.add(UserPotential([SquaredDistance(system.ground, bob, point_a=(0, 0, 0))], energy))
    return system.compile()


def test_an_exception_in_user_code_keeps_the_steps_done():
    model = pendulum_with_a_faulty_potential(fails_below=1.1)
    with pytest.raises(mbs.SimulationError, match="ZeroDivisionError") as error:
        mbs.simulate(model, "em", h=0.01, t_end=1.0)
    solution = error.value.solution
    assert isinstance(error.value, mbs.ForceFunctionError)  # naming the potential
    assert "UserPotential" in str(error.value)
    assert isinstance(error.value.__cause__, ZeroDivisionError)  # the user's own exception
    assert solution.t.size == error.value.step + 1 > 2
    assert np.min(np.linalg.norm(solution.q, axis=1)) ** 2 >= 1.1  # all before the fault


def test_the_steps_of_a_run_stopped_by_a_load_at_a_step_point_can_be_summarised_and_saved(
        tmp_path):
    """The load raises at t = 0.3, a step point: the last state of error.solution is where
    it fails, and the momentum check of the summary and of save_solution leaves it out."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(1.0, 1.0, 1.0), name="body"))
    body.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Spherical(system.ground, body, point=(0.0, 0.0, 0.0)))

    system.add(mbs.forces.Load(body, force=thrust_ending_at(0.3), name="thruster"))
    with pytest.raises(mbs.ForceFunctionError) as error:
        mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    solution = error.value.solution
    assert solution.t[-1] == pytest.approx(0.3)
    assert "vertical angular momentum" in solution.conservation_summary()
    path = tmp_path / "partial.npz"
    mbs.save_solution(solution, path)
    loaded = mbs.load_solution(path, solution.model)
    np.testing.assert_array_equal(loaded.q, solution.q)


def test_a_failing_stream_write_reports_it_and_keeps_the_steps(tmp_path, monkeypatch):
    model = pendulum_with_a_faulty_potential(fails_below=0.0)  # never fails
    writes = []
    original = np.savez

    def savez(file, *args, **kwargs):  # the disk fills up after the first chunk
        writes.append(file)
        if len(writes) > 3:  # initial state, first chunk and its checkpoint written
            raise OSError(28, "No space left on device")
        return original(file, *args, **kwargs)

    monkeypatch.setattr(np, "savez", savez)
    with pytest.raises(mbs.SimulationError, match="No space left") as error:
        mbs.simulate(model, "em", h=0.01, t_end=1.0, output=str(tmp_path / "run"),
                     flush_every=10)
    monkeypatch.undo()
    solution = error.value.solution
    assert solution.t.size == error.value.step + 1 >= 11
    flushed = load_stream(str(tmp_path / "run"), model)  # the first chunk is on disk
    np.testing.assert_array_equal(flushed.q, solution.q[:flushed.q.shape[0]])


def test_a_spring_too_stiff_for_the_step_is_named():
    system = mbs.System()
    body = system.add(mbs.PointMass(0.01, name="bead"))
    body.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, body, 1e6, point_a=(0, 0, 0), name="stiff"))
    model = system.compile()
    # omega = sqrt(1e6 / 0.01) = 1e4 rad/s: h = 1e-3 gives h omega = 10
    with pytest.warns(RuntimeWarning, match=r"Spring 'stiff'.*h omega = 10.*rattle's stability"):
        mbs.simulate(model, "rattle", h=1e-3, t_end=2e-3)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mbs.simulate(model, "em", h=1e-5, t_end=2e-5)  # h omega = 0.1: no warning


def test_a_spring_on_a_long_arm_is_named_by_its_own_frequency():
    """A 1 kg, 2 cm cube hinged at its centre, turned by a k = 100 spring 0.5 m from the
    hinge: omega = sqrt(k r^2 / I) = 612 rad/s, not sqrt(k / m) = 10; at h = 0.01 (h omega
    = 6.1) the run is wrong, and the warning says so."""
    system = mbs.System()
    cube = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.02, ly=0.02, lz=0.02,
                                               name="cube"))
    system.add(mbs.joints.Revolute(system.ground, cube, point=(0.0, 0.0, 0.0),
                                   axis=(0.0, 0.0, 1.0)))
    system.add(mbs.forces.Spring(system.ground, cube, stiffness=100.0, rest_length=0.3,
                                 point_a=(0.5, 0.3, 0.0), point_b=(0.5, 0.0, 0.0),
                                 name="lever"))
    inertia = 1.0 * 0.02**2 / 6.0
    omega = np.sqrt(100.0 * 0.5**2 / inertia)
    with pytest.warns(RuntimeWarning, match=rf"Spring 'lever' oscillates at up to omega = "
                                            rf"{omega:.3g} rad"):
        mbs.simulate(system.compile(), "em", h=0.01, t_end=0.02)


def test_a_diverging_run_stops_with_its_steps():
    """RATTLE is explicit in its momenta: on a spring with h omega = 10 (beyond its
    stability limit 2) the state grows by a factor of about (h omega)^2 / 2 = 50 per step, so
    within some 50 steps it passes 1e75, which no model in any units reaches. The run stops
    there with an error that holds the steps done and dates the millionfold growth (about
    four steps in), instead of returning states of size 1e171 with an energy of inf; the
    steps kept have finite energies and momenta, evaluated without overflow warnings."""
    system = mbs.System()
    body = system.add(mbs.PointMass(0.01, name="bead"))
    body.set_state(position=(1.0, 1e-3, 0.0))
    system.add(mbs.forces.Spring(system.ground, body, 1e6, rest_length=0.5, point_a=(0, 0, 0),
                                 name="stiff"))
    with pytest.warns(RuntimeWarning, match="Spring 'stiff'"), \
            pytest.raises(mbs.SolverError, match=r"values beyond 1e75 \(the run diverged\)"
                          ) as failure:
        mbs.simulate(system.compile(), "rattle", h=1e-3, t_end=1.0)
    partial = failure.value.solution
    assert 1 <= len(partial.t) - 1 < 100
    grown_at = re.search(r"grown 1e\+06-fold from its size at t = 0 by t = ([0-9.e-]+)",
                         str(failure.value))
    assert grown_at is not None and 2e-3 <= float(grown_at.group(1)) <= 8e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        partial.conservation_summary()
        assert np.isfinite(partial.energy()).all()
        assert np.isfinite(partial.angular_momentum()).all()


def _pushed_two_rod_linkage() -> mbs.Model:
    """A bob on two rods of length 1: one to the ground at the origin, one to a slider
    pushed along x from x = 1 at unit speed. The bob's circle of positions shrinks to a
    point when the slider reaches x = 2 (t = 1), where the rods' rows of G become parallel;
    beyond it the constraints have no solution."""
    system = mbs.System()
    slider = system.add(mbs.RigidBody(1.0, (0.1, 0.1, 0.1), name="slider"))
    slider.set_state(position=(1.0, 0.0, 0.0), velocity=(1.0, 0.0, 0.0))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    height = np.sqrt(0.75)
    bob.set_state(position=(0.5, 0.0, height), velocity=(0.5, 0.0, -0.25 / height))
    guide = system.add(mbs.joints.Prismatic(system.ground, slider, point=(1.0, 0.0, 0.0),
                                            axis=(1.0, 0.0, 0.0), name="guide"))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, point_a=(0.0, 0.0, 0.0)))
    system.add(mbs.joints.Distance(slider, bob, length=1.0))
    system.add(mbs.joints.Drive(guide, position=lambda t: t, rate=lambda t: 1.0, name="push"))
    return system.compile()


def test_a_mechanism_pushed_into_a_position_it_cannot_pass_is_named_as_such():
    """The failing step's error says where the constraints lose rank (t = 1 to the
    accuracy of the sqrt(t* - t) fit, 2 ms here at h = 0.01) instead of advising a smaller
    step, and keeps the steps done; a Newton failure away from a singular configuration
    keeps the usual hint."""
    with pytest.raises(mbs.SolverError, match="also as 8 sub-steps") as failure:
        mbs.simulate(_pushed_two_rod_linkage(), "em", h=0.01, t_end=1.5, max_refinements=3)
    singular_at = float(failure.value.hint.split("near t = ")[1].split(":")[0])
    assert singular_at == pytest.approx(1.0, abs=2e-3)
    assert "smaller steps do not help" in str(failure.value)
    assert failure.value.solution.t[-1] == pytest.approx(0.99)

    # a pendulum hit by a sudden load at t = 0.5 that Newton cannot follow in 5 iterations
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 3.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    system.add(mbs.forces.Load(bob, force=lambda t: (0.0, 1e4 * (t >= 0.5), 0.0)))
    five_iterations = mbs.solvers.EnergyMomentum(
        newton=mbs.solvers.NewtonOptions(max_iterations=5))
    with pytest.raises(mbs.SolverError, match="hint: reduce the step size") as failure:
        mbs.simulate(system.compile(), five_iterations, h=0.05, t_end=2.0, on_failure="raise")
    assert "lose rank" not in str(failure.value) and failure.value.step == 10


def test_a_run_that_needs_sub_steps_at_most_steps_says_so_while_it_runs():
    """RATTLE at h omega = 4.24 on a stiff spring (beyond its stability limit 2): Newton
    fails from the predictor at nearly every step and the refinement goes on at a multiple
    of the cost; a warning says so once, early, naming the scheme. EM at the same step
    needs two refined steps and gets no such warning."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    first = system.add(mbs.PointMass(1.0, name="a"))
    first.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    second = system.add(mbs.PointMass(1.0, name="b"))
    second.set_state(position=(1.0, 0.0, -0.5))
    system.add(mbs.joints.Distance(system.ground, first, length=1.0))
    system.add(mbs.forces.Spring(first, second, stiffness=1e4, rest_length=0.45))
    model = system.compile()
    with pytest.warns(RuntimeWarning) as caught:
        rattle = mbs.simulate(model, "rattle", h=0.03, t_end=0.9)
    pervasive = [str(w.message) for w in caught if "needed sub-steps" in str(w.message)]
    assert len(pervasive) == 1 and "steps of rattle" in pervasive[0]
    assert len(rattle.stats["refined_steps"]) >= 20
    with pytest.warns(RuntimeWarning) as caught:
        mbs.simulate(model, "em", h=0.03, t_end=0.9)
    assert not [w for w in caught if "needed sub-steps" in str(w.message)]


def test_equations_dropped_at_a_singular_initial_pose_are_named_when_the_run_breaks_them():
    """A parallelogram four-bar (hinges along z) started folded flat, all pins on the x axis:
    there its constraints lose rank (the parallelogram and anti-parallelogram branches
    cross), so compile drops four equations where three are redundant along the motion,
    and the run breaks the fourth while the kept ones hold. The run warns, naming the
    dropped equations; a regular start (crank at 1 rad) does not."""
    def parallelogram(angle: float) -> mbs.Model:
        crank_end = np.array([np.cos(angle), np.sin(angle), 0.0])
        pins = [np.zeros(3), crank_end, crank_end + [2.0, 0.0, 0.0], np.array([2.0, 0.0, 0.0])]
        system = mbs.System(gravity=(0.0, -9.81, 0.0))
        crank = system.add(link("crank", pins[0], pins[1]))
        coupler = system.add(link("coupler", pins[1], pins[2]))
        rocker = system.add(link("rocker", pins[3], pins[2]))
        crank.set_state(angular_velocity=(0.0, 0.0, 2.0),
                        velocity=np.cross([0.0, 0.0, 2.0], 0.5 * pins[1]))
        for name, a, b, point in (("O", system.ground, crank, pins[0]),
                                  ("A", crank, coupler, pins[1]),
                                  ("B", coupler, rocker, pins[2]),
                                  ("C", rocker, system.ground, pins[3])):
            system.add(mbs.joints.Revolute(a, b, point=point, axis=(0.0, 0.0, 1.0), name=name))
        with pytest.warns(UserWarning, match="redundant constraints removed") as caught:
            model = system.compile()
        singular = [str(w.message) for w in caught
                    if "initial state is a singular configuration" in str(w.message)]
        return model, singular

    flat, singular = parallelogram(0.0)
    assert flat.degrees_of_freedom == 2  # at the singular pose
    # compile already names it: the loop has one more independent equation next to it
    (message,) = singular
    assert "degrees_of_freedom counts 2 here, 1 at those configurations" in message
    for h in (1e-3, 0.05):  # at 0.05 the first step already breaks them
        with pytest.warns(RuntimeWarning, match=r"dropped at compile time as redundant "
                                                r"\(.*\) are violated by up to") as caught:
            solution = mbs.simulate(flat, "em", h=h, t_end=1.0, project=True)
        assert "The initial state is a singular configuration" in str(caught[-1].message)
        assert flat.removed_constraint_norms(solution.q).max() > 1e-2
        assert solution.constraint_residuals()["position"].max() < 1e-12

    regular, singular = parallelogram(1.0)
    assert regular.degrees_of_freedom == 1 and not singular
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        solution = mbs.simulate(regular, "em", h=1e-3, t_end=1.0, project=True)
    assert regular.removed_constraint_norms(solution.q).max() < 1e-12


def test_the_step_size_check_sees_the_fastest_mode_of_a_spring_network_and_warns_once():
    """20 unit masses in a line on 21 springs k = 400 N/m, fixed at both ends: the highest
    mode is 2 sqrt(k/m) sin(20 pi / 42) = 39.9 rad/s, above the sqrt(2 k/m) = 28.3 of any
    one spring between two masses. At h = 0.03 (h omega = 1.2, per spring 0.85) the run
    warns, once for the whole network, naming the stiffest springs."""
    system = mbs.System()
    previous, anchor = system.ground, (0.0, 0.0, 0.0)
    for k in range(20):
        bead = system.add(mbs.PointMass(1.0, name=f"m{k}"))
        bead.set_state(position=(float(k + 1), 0.0, 0.0))
        system.add(mbs.forces.Spring(previous, bead, stiffness=400.0, rest_length=1.0,
                                     point_a=anchor, name=f"s{k}"))
        previous, anchor = bead, None
    system.add(mbs.forces.Spring(previous, system.ground, stiffness=400.0, rest_length=1.0,
                                 point_b=(21.0, 0.0, 0.0), name="s20"))
    with pytest.warns(RuntimeWarning) as caught:
        mbs.simulate(system.compile(), "em", h=0.03, t_end=0.06)
    stiff = [str(w.message) for w in caught if "oscillates at up to omega" in str(w.message)]
    assert len(stiff) == 1
    omega = float(stiff[0].split("omega = ")[1].split()[0])
    assert 39.9 <= omega <= 40.0  # the Gershgorin bound 2 sqrt(k/m) of the true 39.9
    assert "more springs beyond it" in stiff[0]


def relay_pendulum(law) -> mbs.Model:
    """A link hanging from a hinge, its torque given by ``law(angle, rate)``."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    arm = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.04, ly=0.04, lz=0.5,
                                              name="arm"))
    arm.set_state(position=(0.0, 0.0, -0.25))
    hinge = system.add(mbs.joints.Revolute(system.ground, arm, point=(0, 0, 0),
                                           axis=(0, 1, 0), name="hinge"))
    system.add(mbs.forces.JointTorque(hinge, lambda t, angle, rate: law(angle, rate),
                                      name="relay"))
    return system.compile()


def switching(angle, rate):
    return angle - 0.6 + 0.3 * rate


@pytest.mark.parametrize("h", [0.02, 0.005])
def test_a_force_law_that_jumps_in_the_state_is_named_when_no_step_size_helps(h):
    """A relay torque -3 sign(s) on a sliding surface s = 0 has no classical solution past
    the surface (the motion chatters across it): Newton fails at every sub-step, and the
    failure names the discontinuous law instead of advising smaller steps."""
    model = relay_pendulum(lambda angle, rate: -3.0 * np.sign(switching(angle, rate)))
    with pytest.raises(mbs.SolverError, match="generalized force of 'relay' jumps by") as error:
        mbs.simulate(model, "em", h=h, t_end=1.0)
    assert "reduce the step size" not in error.value.hint
    assert 0.0 < error.value.solution.t[-1] < 0.2  # the first crossing, near t = 0.05


def test_a_friction_relay_at_rest_is_named():
    """Coulomb friction -3 sign(rate) on a link released from rest beside its lowest point:
    the law jumps where the state is, at rate 0, which no extrapolation of a state at rest
    moves across; the failure still names it."""
    model = relay_pendulum(lambda angle, rate: -3.0 * np.sign(rate))
    q, p = model.initial_state()
    tilted = mbs.rotation_about_y(0.3)
    q = np.concatenate([tilted @ q[:3], (q[3:].reshape(3, 3) @ tilted.T).ravel()])
    with pytest.raises(mbs.SolverError, match="generalized force of 'relay' jumps by") as error:
        mbs.simulate(model, "em", h=0.01, t_end=0.5, initial_state=(q, p))
    assert "reduce the step size" not in error.value.hint


def test_a_rate_law_far_from_its_jump_is_not_blamed_for_a_failed_step():
    """The same relay on a link spinning at 40 rad/s, whose rate never comes near zero: a
    step too large for Newton is not put down to the law's jump at rest."""
    model = relay_pendulum(lambda angle, rate: -0.01 * np.sign(rate))
    state = model.initial_state(joint_rates={"hinge": 40.0})
    with pytest.raises(mbs.SolverError) as error:
        mbs.simulate(model, "em", h=0.3, t_end=3.0, initial_state=state, on_failure="raise")
    assert "jumps" not in error.value.hint and "reduce the step size" in error.value.hint


def test_the_jump_test_tells_a_jump_from_a_steep_continuous_law():
    """On a path across the switching surface (the link turned from 0.5 to 0.7 rad, s from
    -0.1 to 0.1): sign(s) flips the generalized force, a jump of the size of its entries;
    tanh(s / 1e-3), a thousand times steeper than the path, is continuous and is not
    reported."""
    for law, expected in ((lambda a, r: -3.0 * np.sign(switching(a, r)), True),
                          (lambda a, r: -3.0 * np.tanh(switching(a, r) / 1e-3), False)):
        model = relay_pendulum(law)
        q, p = model.initial_state()
        v = model.apply_inverse_mass(p)
        states = []
        for angle in (0.5, 0.7):
            turned = mbs.rotation_about_y(angle)
            directors = (q[3:].reshape(3, 3) @ turned.T).ravel()
            states.append((np.concatenate([turned @ q[:3], directors]), v))
        found = model.applied_forces.jump_along(0.0, *states)
        assert (found is not None) == expected
        if expected:
            name, jump, size = found
            assert name == "relay" and 0.5 * size < jump <= 2.0 * size


def test_the_summary_of_a_run_that_failed_in_its_first_step_shows_the_initial_state():
    """A pendulum hit at t = 0 by a load Newton cannot follow in 5 iterations: the error's
    solution holds the initial state only, and its summary says so (no statistics of
    steps that were never taken, no numpy warnings)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    system.add(mbs.forces.Load(bob, force=(0.0, 1e4, 0.0)))
    five_iterations = mbs.solvers.EnergyMomentum(
        newton=mbs.solvers.NewtonOptions(max_iterations=5))
    with pytest.raises(mbs.SolverError) as failure:
        mbs.simulate(system.compile(), five_iterations, h=0.5, t_end=2.0, on_failure="raise")
    solution = failure.value.solution
    assert solution.t.size == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = solution.conservation_summary()
    assert "no steps taken" in summary and "nan" not in summary
    assert f"E0 = {solution.energy()[0]:.12g}" in summary


def test_a_force_too_large_for_any_state_is_named_without_numpy_warnings():
    """A load of 1e200 N from t = 0.3 on: no step size keeps the state finite (it would
    reach 1e200 h^2), so the failing step's hint names the load, not the step size, and
    the overflow inside the step raises no numpy RuntimeWarning of its own."""
    system = mbs.System(gravity=(0, 0, -9.81))
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=(1, 0, 0), velocity=(0, 1, 0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    system.add(mbs.forces.Load(bob, force=lambda t: (0, 0, 1e200) if t > 0.3 else (0, 0, 0),
                               name="thruster"))
    model = system.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(mbs.SolverError, match=r"step 30 .*hint: the generalized force of "
                                                  r"'thruster' is 1e\+200") as failure:
            mbs.simulate(model, "em", h=0.01, t_end=1.0)
    assert len(failure.value.solution.t) == 31


def test_a_body_falling_into_an_attracting_centre_is_named():
    """A particle released from rest at r = 1 under mu = 1 reaches the centre at the
    free-fall time pi / 2^(3/2) = 1.11; the step that cannot be solved is within one step's
    travel of the singularity, and the hint says so instead of asking for smaller steps."""
    system = mbs.System()
    particle = system.add(mbs.PointMass(mass=1.0, name="p"))
    particle.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.CentralGravity(mu=1.0, name="earth"))
    with pytest.raises(mbs.SolverError, match=r"hint: the state at t = .* from where the "
                                              r"potential 'earth' is singular") as failure:
        mbs.simulate(system.compile(), "em", h=0.01, t_end=2.0)
    assert abs(failure.value.time - np.pi / 2**1.5) < 0.02


def test_a_fast_body_far_from_an_attracting_centre_does_not_blame_the_centre():
    """A satellite at r = 1 (speed 1) and a probe at r = 1000 moving 10 per step: the whole
    state travels 10 per step, more than the satellite's distance 1 from the centre, but the
    satellite itself moves 0.01. A step that fails for another reason (one Newton iteration
    allowed) gets the iteration hint, not the singularity's."""
    system = mbs.System()
    satellite = system.add(mbs.PointMass(mass=1.0, name="satellite"))
    satellite.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    probe = system.add(mbs.PointMass(mass=1.0, name="probe"))
    probe.set_state(position=(1000.0, 0.0, 0.0), velocity=(0.0, 1000.0, 0.0))
    system.add(mbs.forces.CentralGravity(mu=1.0, name="earth"))
    with pytest.raises(mbs.SolverError) as failure:
        mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0, on_failure="raise",
                     newton=mbs.solvers.NewtonOptions(max_iterations=1))
    assert "singular" not in failure.value.hint
    assert "max_iterations" in failure.value.hint


def test_a_stream_deleted_mid_run_leaves_a_message_that_says_what_the_error_holds(tmp_path):
    """A cleanup job removes the output directory at t = 0.5 (flushes every 10 steps): the
    run stops at the next write; the flushed steps 0-50 cannot be read back, so the error
    holds the 10 steps from t = 0.5 and says so, and the warning about the stream points at
    the line that called simulate."""
    import shutil

    output = tmp_path / "run"
    system = mbs.System(gravity=(0, 0, -9.81))
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=(1, 0, 0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))

    def cleanup_job(t):
        if t > 0.5 and output.exists():
            shutil.rmtree(output)
        return (0.0, 0.0, 0.0)

    system.add(mbs.forces.Load(bob, force=cleanup_job, name="cleanup"))
    model = system.compile()
    with pytest.warns(UserWarning, match="cannot be read back") as record, \
            pytest.raises(mbs.SimulationError, match=r"error.solution holds the last 10 of the "
                                                     r"60 accepted steps, from t = 0.5 ") as error:
        mbs.simulate(model, "em", h=0.01, t_end=1.0, output=output, flush_every=10)
    partial = error.value.solution
    assert len(partial.t) == 11 and partial.t[0] == pytest.approx(0.5)
    assert {warning.filename for warning in record} == {__file__}
