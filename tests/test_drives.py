"""Prescribed joint motion (mbs.joints.Drive): exact tracking, reactions and their work.

Tolerances: schemes that enforce the constraints at the step ends hold the drive's equation
g = sin(angle - f(t)) to Newton's tolerance (~1e-12), so the angle to 1e-10; reactions and
work are second-order quantities, checked against closed forms to O(h^2) with the constant
estimated from two step sizes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.joints import Drive
from tests.mechanisms import slider_crank

Z = (0.0, 0.0, 1.0)
END_ENFORCING = [("em", {}), ("rattle", {}), ("lobatto", {"stages": 3}), ("hbvm", {}),
                 ("ggl-vi-s", {}), ("ggl-vi-b", {}), ("em", {"order": 4})]


def crank_angle(t):
    return 5.0 * t + 0.3 * np.sin(3.0 * t)


def crank_rate(t):
    return 5.0 + 0.9 * np.cos(3.0 * t)


def driven_slider_crank(rate=crank_rate) -> mbs.Model:
    system = slider_crank()
    system.add(Drive(system["crank_pivot"], crank_angle, rate, name="motor"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the planar loop's redundant equations
        return system.compile()


def start(model: mbs.Model):
    return model.initial_state(project=True, joint_rates={"crank_pivot": crank_rate(0.0)})


def test_a_drive_removes_the_degree_of_freedom():
    model = driven_slider_crank()
    assert model.degrees_of_freedom == 0 and model.is_rheonomic


@pytest.mark.parametrize("solver, options", END_ENFORCING)
def test_prescribed_crank_angle_is_followed_at_every_step(solver, options):
    model = driven_slider_crank()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the projection of the rod's velocity
        state = start(model)
    solution = mbs.simulate(model, solver, h=2e-3, t_end=0.5, initial_state=state,
                            **options)
    angle = solution.joint("crank_pivot").position
    assert np.max(np.abs(angle - crank_angle(solution.t))) <= 1e-10
    assert np.max(solution.constraint_residuals()["position"]) <= 1e-10


def test_the_rate_by_differences_gives_the_same_motion():
    given, differenced = driven_slider_crank(), driven_slider_crank(rate=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        first = mbs.simulate(given, "em", h=2e-3, t_end=0.2, initial_state=start(given))
        second = mbs.simulate(differenced, "em", h=2e-3, t_end=0.2,
                              initial_state=start(differenced))
    # central differences with step 1e-5: error ~ 1e-10 |f'''| ~ 3e-9 in the rate
    np.testing.assert_allclose(second.q, first.q, rtol=0, atol=1e-7)


def test_em_balances_energy_with_the_drive_work_exactly():
    model = driven_slider_crank()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state = start(model)
    for options in ({}, {"order": 4}):
        solution = mbs.simulate(model, "em", h=2e-3, t_end=0.5, initial_state=state,
                                **options)
        energy = solution.energy()
        scale = max(float(np.max(np.abs(energy))), float(np.max(np.abs(solution.work))))
        assert abs(solution.work[-1]) > 1.0  # the drive does real work
        assert np.max(np.abs(np.diff(solution.energy_balance()))) <= 1e-12 * scale


def test_drive_work_estimate_equals_the_energy_change_to_second_order():
    """The reaction times the displacement (``Solution.drive(name).work``) agrees with the
    energy change to O(h^2), for em and (rattle: the mean of its two multipliers) rattle."""
    model = driven_slider_crank()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state = start(model)
    estimate, balance = [], []
    for h in (2e-3, 1e-3):
        em = mbs.simulate(model, "em", h=h, t_end=1.0, initial_state=state)
        change = em.energy()[-1] - em.energy()[0]
        estimate.append(abs(change - em.drive("motor").work[-1]) / abs(change))
        rattle = mbs.simulate(model, "rattle", h=h, t_end=1.0, initial_state=state)
        balance.append(np.max(np.abs(rattle.energy_balance())) / abs(change))
    for errors in (estimate, balance):
        assert errors[1] <= 1e-4
        assert np.log2(errors[0] / errors[1]) == pytest.approx(2.0, abs=0.25)


def disc(drive_position, rate) -> tuple[mbs.Model, float]:
    system = mbs.System()
    body = system.add(mbs.RigidBody.from_shape("cylinder", mass=3.0, radius=0.4, length=0.1,
                                               name="disc"))
    hinge = system.add(mbs.joints.Revolute(system.ground, body, point=(0, 0, 0), axis=Z,
                                           name="hinge"))
    system.add(Drive(hinge, drive_position, rate, name="spin"))
    model = system.compile()
    return model, float(np.asarray(model.body("disc").inertia)[2, 2])


def test_reaction_torque_of_a_constant_angular_acceleration():
    """angle = a t^2 / 2 on a free disc: the drive's torque is I a (exact for EM: the
    motion is quadratic in t)."""
    acceleration = 4.0
    model, inertia = disc(lambda t: 0.5 * acceleration * t**2, lambda t: acceleration * t)
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0)
    drive = solution.drive("spin")
    np.testing.assert_allclose(drive.effort, inertia * acceleration, rtol=1e-3)
    np.testing.assert_allclose(drive.rate, acceleration * solution.t, atol=1e-9)
    kinetic = 0.5 * inertia * (acceleration * solution.t) ** 2
    np.testing.assert_allclose(drive.work, kinetic, rtol=1e-3, atol=1e-12)
    # power I a^2 t at the step midpoints, with the effort's tolerance
    np.testing.assert_allclose(drive.power, inertia * acceleration ** 2 * drive.effort_times,
                               rtol=1e-3)


def test_prismatic_drive_prescribes_the_displacement():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    block = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.2, ly=0.1, lz=0.1,
                                                name="block"))
    block.set_state(velocity=(0.0, 0.0, 0.2))  # the drive's initial rate
    lift = system.add(mbs.joints.Prismatic(system.ground, block, point=(0, 0, 0), axis=Z,
                                           name="lift"))
    system.add(Drive(lift, lambda t: 0.1 * np.sin(2.0 * t), lambda t: 0.2 * np.cos(2.0 * t),
                     name="jack"))
    solution = mbs.simulate(system.compile(), "em", h=1e-3, t_end=1.0)
    drive = solution.drive("jack")
    np.testing.assert_allclose(drive.position, 0.1 * np.sin(2.0 * solution.t), atol=1e-12)
    # the jack carries the weight and accelerates the block: m (g + s'')
    t_mid = drive.effort_times  # the step midpoints, where the effort belongs
    np.testing.assert_allclose(t_mid, solution.t[:-1] + 0.5e-3, rtol=0, atol=1e-15)
    expected = 2.0 * (9.81 - 0.4 * np.sin(2.0 * t_mid))
    np.testing.assert_allclose(drive.effort, expected, rtol=0, atol=1e-3 * 2.0 * 9.81)


def test_trajectories_carry_their_node_times(tmp_path):
    """Started at t = 0.5: each trajectory's own t are the nodes t_start + k h, so a driven
    coordinate is compared with its prescription without rebuilding the time grid, also
    after a save and load."""
    model, _ = disc(lambda t: 0.5 * t**2, lambda t: t)
    with pytest.warns(UserWarning, match="projected"):  # onto the drive's angle at t = 0.5
        state = model.initial_state(t=0.5, project=True)
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0, t_start=0.5, initial_state=state)
    nodes = 0.5 + 0.01 * np.arange(51)
    loaded = mbs.load_solution(mbs.save_solution(solution, tmp_path / "run"))
    for drive in (solution.drive("spin"), loaded.drive("spin")):
        np.testing.assert_allclose(drive.t, nodes, rtol=0, atol=1e-14)
        np.testing.assert_allclose(drive.position, 0.5 * drive.t**2, atol=1e-12)
    for trajectory in (solution.joint("hinge"), solution.body("disc")):
        np.testing.assert_allclose(trajectory.t, nodes, rtol=0, atol=1e-14)


def pushed_slider(scheme: str, options: dict, h: float) -> tuple[np.ndarray, np.ndarray]:
    """A block on a rail driven along x = sin(3t) against a load and a joint damper: the
    drive's force is m x'' - F + c x' (returned at the step midpoints with the effort)."""
    mass, load, damping = 2.0, 3.0, 0.7
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    block = system.add(mbs.RigidBody.from_shape("box", mass=mass, lx=0.2, ly=0.1, lz=0.1,
                                                name="block"))
    block.set_state(velocity=(3.0, 0.0, 0.0))
    rail = system.add(mbs.joints.Prismatic(system.ground, block, point=(0, 0, 0),
                                           axis=(1.0, 0.0, 0.0), name="rail"))
    system.add(mbs.forces.Load(block, force=(load, 0.0, 0.0)))
    system.add(mbs.forces.JointDamper(rail, damping))
    system.add(Drive(rail, lambda t: np.sin(3.0 * t), lambda t: 3.0 * np.cos(3.0 * t),
                     name="push"))
    solution = mbs.simulate(system.compile(), scheme, h=h, t_end=1.0, **options)
    t = solution.t[:-1] + 0.5 * h
    exact = -9.0 * mass * np.sin(3.0 * t) - load + 3.0 * damping * np.cos(3.0 * t)
    return solution.drive("push").effort, exact


@pytest.mark.parametrize("scheme, options, order", [
    ("em", {}, 2), ("ggl-vi-s", {}, 2), ("ggl-vi-a", {}, 2), ("ggl-vi-b", {}, 2),
    ("rattle", {}, 2), ("hbvm", {}, 2), ("lobatto", {"stages": 3}, 2),
    ("em", {"order": 4}, 2), ("ggl-vi-a", {"order": 4}, 2), ("rattle", {"order": 4}, 2)])
def test_drive_effort_converges_at_every_step(scheme, options, order):
    """The effort against the exact force at the step midpoints, including the first and
    last steps: second order (the midpoint value of a step's mean force). The multipliers of
    ggl-vi-a and hbvm alternate from step to step about the force, and a composed step holds
    several sub-steps' multipliers. (On this slider the constraint directions do not turn;
    on a hinge ggl-vi-s and ggl-vi-b are first order, see test_reactions.)"""
    errors = []
    for h in (1e-2, 5e-3):
        effort, exact = pushed_slider(scheme, options, h)
        errors.append(np.abs(effort - exact).max())
    assert np.log2(errors[0] / errors[1]) == pytest.approx(order, abs=0.25)


def test_a_drive_redundant_with_another_is_an_error_at_compile():
    """Two drives of one hinge: a drive's row cannot be dropped as redundant (it is not a
    quadratic form), so compiling names both instead of reporting one removed and failing
    with a singular Newton matrix."""
    system = mbs.System()
    body = system.add(mbs.RigidBody.from_shape("cylinder", mass=1.0, radius=0.1, length=0.02,
                                               name="disc"))
    hinge = system.add(mbs.joints.Revolute(system.ground, body, point=(0, 0, 0), axis=Z,
                                           name="hinge"))
    system.add(Drive(hinge, lambda t: t, lambda t: 1.0, name="first"))
    system.add(Drive(hinge, lambda t: t, lambda t: 1.0, name="second"))
    with pytest.raises(ModelError, match="first, second are redundant with each other"):
        system.compile()


def test_a_rate_that_is_not_the_derivative_of_the_position_is_warned_about():
    """A wrong rate makes the nodes' joint rates wrong while the angle and the energy
    balance stay exact: compile compares it with differences of the position."""
    for factor in (2.0, 1.0):
        system = slider_crank()
        system.add(Drive(system["crank_pivot"], crank_angle,
                         lambda t, factor=factor: factor * crank_rate(t), name="motor"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            system.compile()
        found = [str(w.message) for w in caught if "not the derivative" in str(w.message)]
        if factor == 1.0:
            assert not found
        else:
            assert found == ["Drive 'motor': rate(t) is not the derivative of position(t): at "
                             "t = 0 rate gives 11.8, central differences of position 5.9 (0.5 "
                             "relative); fix rate, or omit it and let mbs use differences"]


def test_a_move_at_rest_at_the_checked_times_is_not_warned_about():
    """A quintic move of 0.5 rad over [0, 0.1] s, then held, with its exact rate: the rate
    is 0 at each of the checked times (0, 0.3 and 1 s), where differences of the position
    leave 5e-8 of truncation error at the start of the move. Against the move's mean rate
    between those times (0.5 rad/s) that is 1e-7, no mismatch (it read as 100 % of the
    largest rate seen, 5e-8)."""
    def position(t):
        s = np.clip(t / 0.1, 0.0, 1.0)
        return 0.5 * s**3 * (10.0 - 15.0 * s + 6.0 * s**2)

    def rate(t):
        s = np.clip(t / 0.1, 0.0, 1.0)
        return 15.0 * s**2 * (1.0 - s) ** 2 / 0.1

    system = mbs.System()
    arm = system.add(mbs.RigidBody(1.0, (0.1, 0.12, 0.15), name="arm"))
    arm.set_state(position=(0.5, 0.0, 0.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, arm, point=(0.0, 0.0, 0.0),
                                           axis=(0.0, 0.0, 1.0)))
    system.add(Drive(hinge, position, rate=rate, name="move"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system.compile()
    assert not [w for w in caught if "not the derivative" in str(w.message)]
    system = mbs.System()  # the same move with twice its rate is still caught
    arm = system.add(mbs.RigidBody(1.0, (0.1, 0.12, 0.15), name="arm"))
    arm.set_state(position=(0.5, 0.0, 0.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, arm, point=(0.0, 0.0, 0.0),
                                           axis=(0.0, 0.0, 1.0)))
    system.add(Drive(hinge, lambda t: 0.5 * t, rate=lambda t: 1.0, name="ramp"))
    with pytest.warns(UserWarning, match="'ramp': rate.t. is not the derivative"):
        system.compile()


def test_joint_rates_that_contradict_a_drive_name_the_drive():
    model = driven_slider_crank()
    with pytest.raises(ModelError, match="the drives prescribe the rates of driven joints "
                                         r"\(crank_pivot by 'motor'"):
        model.initial_state(project=True, joint_rates={"crank_pivot": 2.0})


def test_bad_drives_get_clear_errors():
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, (0.1, 0.1, 0.1), name="body"))
    ball = system.add(mbs.joints.Spherical(system.ground, body, point=(0, 0, 0), name="ball"))
    with pytest.raises(ModelError, match="Spherical 'ball'"):
        Drive(ball, lambda t: t)
    hinge = mbs.joints.Revolute(system.ground, body, point=(0, 0, 0), axis=Z, name="hinge")
    with pytest.raises(ModelTypeError, match="rate must be a function"):
        Drive(hinge, lambda t: t, rate=2.0)
    with pytest.raises(ModelError, match="no 'displacement'"):
        Drive(hinge, lambda t: t, coordinate="displacement")
    with pytest.raises(ModelError, match="not in a system"):
        system.add(Drive(hinge, lambda t: t))


@pytest.mark.filterwarnings("ignore:initial state")  # the disc starts at rest
def test_a_drive_function_that_fails_stops_the_run_with_the_steps_so_far():
    model, _ = disc(lambda t: np.nan if t > 0.045 else t, lambda t: 1.0)
    with pytest.raises(ForceFunctionError, match="Drive 'spin'.*position") as error:
        mbs.simulate(model, "em", h=0.01, t_end=1.0, project=True)
    assert error.value.solution.t.size == error.value.step + 1 >= 5


def test_stream_resume_and_ensembles_with_a_drive(tmp_path):
    from tests.mechanisms import assert_stream_resume_and_ensemble_repeat_the_run

    model, _ = disc(lambda t: 0.5 * t**2, lambda t: t)
    assert_stream_resume_and_ensemble_repeat_the_run(model, "em", {}, 0.01, 20, tmp_path)


def test_compiled_backend_runs_a_drive_on_the_assembled_path():
    """A drive's constraint is not a quadratic form, so the kernel cannot hold it: asking
    for the compiled backend warns and gives the assembled run, bitwise."""
    model, _ = disc(lambda t: 0.5 * t**2, lambda t: t)
    plain = mbs.simulate(model, "em", h=0.01, t_end=0.2, project=True)
    with pytest.warns(UserWarning, match="falls back to the assembled path: the "
                      "constraints of 'spin' are not quadratic forms"):
        compiled = mbs.simulate(model, "em", h=0.01, t_end=0.2, project=True,
                                backend="compiled")
    np.testing.assert_array_equal(compiled.q, plain.q)


def fast_rotor() -> tuple[mbs.Model, object]:
    """A free rotor whose angle is driven as 10 t, started at the drive's rate."""
    system = mbs.System()
    rotor = system.add(mbs.RigidBody(1.0, (0.02, 0.03, 0.04), name="rotor"))
    axle = system.add(mbs.joints.Revolute(system.ground, rotor, point=(0, 0, 0),
                                          axis=(0, 0, 1), name="axle"))
    system.add(Drive(axle, lambda t: 10.0 * t, rate=lambda t: 10.0, name="motor"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drive leaves no degree of freedom
        model = system.compile()
    return model, model.initial_state(project=True, joint_rates={"axle": 10.0})


@pytest.mark.parametrize("scheme", ["em", "rattle", "lobatto"])
def test_a_drive_turning_far_in_one_step_keeps_its_prescribed_angle(scheme):
    """g = sin(angle - f) also vanishes half a turn away from f: at 2.5 rad per step Newton
    can converge there; such a step is refined instead of accepted."""
    model, state = fast_rotor()
    solution = mbs.simulate(model, scheme, h=0.25, t_end=2.0, initial_state=state)
    offset = solution.drive("motor").position - 10.0 * solution.t
    assert np.abs(np.angle(np.exp(1j * offset))).max() < 1e-12
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() < 1e-12 * energy[0]  # the rotor keeps its spin


@pytest.mark.parametrize("scheme", ["em", "rattle"])
def test_a_drive_turning_far_in_one_step_stays_on_its_branch_without_refinement(scheme):
    """The step that converges half a turn away lies farther from its explicit guess than
    the step moves, and is redone from the guess q + h M^-1 p: the run keeps the prescribed
    angle with refinement off too."""
    model, state = fast_rotor()
    solution = mbs.simulate(model, scheme, h=0.25, t_end=2.0, initial_state=state,
                            on_failure="raise")
    offset = solution.drive("motor").position - 10.0 * solution.t
    assert np.abs(np.angle(np.exp(1j * offset))).max() < 1e-12


def test_a_drive_on_the_wrong_branch_is_reported_when_refinement_is_off():
    """From the explicit guess such a step is redone from another guess (it lies farther from
    the guess than the step moves); from the state itself (the "simple" guess) RATTLE
    converges half a turn away in its first step, which is named."""
    model, state = fast_rotor()
    with pytest.raises(mbs.SolverError, match="'motor' converged half a turn away") as error:
        mbs.simulate(model, "rattle", h=0.25, t_end=2.0, initial_state=state,
                     on_failure="raise", initial_guess="simple")
    assert error.value.solution.t.size >= 1


def hinged_link_driven_by(position, rate: float = 1.0, quiet: bool = True) -> mbs.Model:
    """A link on a y-hinge, set at angle 0 and at rest, driven by ``position(t)`` at
    ``rate`` (compiled with its warnings silenced when ``quiet``)."""
    system = mbs.System(gravity=(0, 0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=1.0, ly=0.05, lz=0.05,
                                               name="link"))
    link.set_state(position=(0.5, 0, 0))
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0),
                                           axis=(0, 1, 0), name="hinge"))
    system.add(mbs.joints.Drive(hinge, position, rate=lambda t: rate, name="motor"))
    if not quiet:
        return system.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pose is off the drive's angle
        return system.compile()


@pytest.mark.parametrize("start", [0.0, 1.0])
def test_a_pose_more_than_a_quarter_turn_from_a_drive_is_refused_not_projected_half_a_turn_off(
        start):
    """sin(angle - f) = 0 holds at f and at f + pi: a pose 2 rad from f(t_start) (0.6 rad
    past the quarter turn) projects onto the second solution, where the run then failed at
    its first step asking for smaller steps. The initial state is refused instead, naming
    the drive; a pose within a quarter turn projects onto f itself."""
    model = hinged_link_driven_by(lambda t: 2.0 - start + t)
    match = r"more than a quarter turn from the angle that 'motor' prescribes"
    with pytest.raises(mbs.InconsistentInitialStateError, match=match):
        model.initial_state(project=True, t=start)
    with pytest.raises(mbs.InconsistentInitialStateError, match=match), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the positions are projected before the rates
        model.initial_state(project=True, joint_rates={"hinge": 1.0}, t=start)
    with pytest.raises(mbs.InconsistentInitialStateError, match=match):
        mbs.simulate(model, "em", h=0.01, t_end=start + 0.1, t_start=start, project=True)
    near = hinged_link_driven_by(lambda t: 1.2 - start + t)
    with pytest.warns(UserWarning, match="projected"):
        solution = mbs.simulate(near, "em", h=0.01, t_end=start + 0.1, t_start=start,
                                project=True)
    np.testing.assert_allclose(solution.drive("motor").position, 1.2 - start + solution.t,
                               rtol=0, atol=1e-12)


def test_compile_and_ensembles_name_a_drive_half_a_turn_off():
    """compile's warning about such a pose says what initial_state will say (not "project
    it", which raises), and an ensemble member starting there is named."""
    with pytest.warns(UserWarning, match="more than a quarter turn from the angle that "
                                         "'motor' prescribes"):
        hinged_link_driven_by(lambda t: np.pi, rate=0.0, quiet=False)
    model = hinged_link_driven_by(lambda t: np.pi, rate=0.0)
    states = (np.stack([model.q0] * 2), np.stack([model.p0] * 2))
    with pytest.raises(mbs.ModelError, match="simulate_ensemble: member 0: initial state: "
                                             "the pose set on the bodies is more than a "
                                             "quarter turn"):
        mbs.simulate_ensemble(model, states, h=0.01, t_end=0.1)


def test_is_consistent_is_false_for_a_drive_half_a_turn_off():
    """A state exactly half a turn from a drive's angle satisfies g = 0 and G v = 0 but is
    not the motion the drive prescribes."""
    model = hinged_link_driven_by(lambda t: np.pi, rate=0.0)
    q, p = model.q0, model.p0
    assert np.max(np.abs(model.constraints(q))) < 1e-12
    assert np.max(np.abs(model.velocity_constraints(q, p))) < 1e-12
    assert not model.is_consistent(q, p)
    assert hinged_link_driven_by(lambda t: 0.0, rate=0.0).is_consistent(q, p)


def test_an_unknown_joint_name_is_reported_as_unknown():
    model, state = fast_rotor()
    solution = mbs.simulate(model, "em", h=0.05, t_end=0.1, initial_state=state)
    with pytest.raises(mbs.UnknownNameError, match="no joint 'axel'; joints with an axis "
                                                   "coordinate: axle"):
        solution.joint("axel")


def test_a_drive_without_a_rate_differences_its_position_exactly_late_in_a_run():
    """The rate by differences of f(t) = 0.5 sin 2t + 0.3 t - f(50) errs by round-off of |f|
    over the step plus step^4 |f^(5)| / 30 (5e-15), not by an amount growing with t: the
    exact state at t_start = 50 is consistent (tolerance 1e-10), and the nodes follow f'."""
    t_start = 50.0

    def position(t):
        return 0.5 * np.sin(2.0 * t) + 0.3 * t - (0.5 * np.sin(2.0 * t_start) + 0.3 * t_start)

    def rate(t):
        return np.cos(2.0 * t) + 0.3

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.5, lx=0.8, ly=0.05, lz=0.05,
                                               name="link"))
    omega, arm = np.array([0.0, rate(t_start), 0.0]), np.array([0.4, 0.0, 0.0])
    link.set_state(position=arm, velocity=np.cross(omega, arm), angular_velocity=omega)
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0),
                                           axis=(0, 1, 0), name="hinge"))
    system.add(Drive(hinge, position, name="motor"))
    with pytest.warns(UserWarning, match=r"quarter turn .* at t = 0.*initial_state\(t=t_start\)"):
        model = system.compile()
    solution = mbs.simulate(model, "em", h=0.01, t_start=t_start, t_end=t_start + 0.5)
    drive = solution.drive("motor")
    np.testing.assert_allclose(drive.rate, rate(drive.t), rtol=0, atol=1e-10)


def law_on(start: float, end: float, law):
    """``law`` defined on [start, end] only, like a table or a fitted curve."""
    def position(t):
        if not start <= t <= end:
            raise ValueError(f"t = {t} outside the table [{start}, {end}]")
        return law(t)
    return position


@pytest.mark.parametrize("scheme", ["em", "rattle", "lobatto"])
def test_a_drive_law_defined_on_the_run_interval_only_is_enough(scheme):
    """Without rate=, the rate at t_start and t_end comes from one-sided differences of the
    same order: exact for this quadratic law up to round-off, about 11 eps |f| / 5e-5 (3e-11),
    so the joint rate follows f'(t) = a t to Newton's tolerance at every node."""
    acceleration = 4.0
    model, _ = disc(law_on(0.0, 1.0, lambda t: 0.5 * acceleration * t**2), None)
    solution = mbs.simulate(model, scheme, h=0.05, t_end=1.0)
    assert solution.t[-1] == pytest.approx(1.0)
    np.testing.assert_allclose(solution.drive("spin").rate, acceleration * solution.t,
                               rtol=0, atol=1e-9)


def test_a_drive_law_defined_at_one_instant_only_asks_for_its_rate():
    with pytest.raises(ForceFunctionError, match=r"Drive 'spin'.*position function failed.*"
                                                 r"outside the table.*give rate="):
        disc(law_on(0.0, 0.0, lambda t: 0.0), None)


def driven_arm(position, rate=None, prismatic: bool = False, gravity: bool = True):
    system = mbs.System(gravity=(0.0, -9.81, 0.0) if gravity else None)
    arm = system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="arm"))
    arm.set_state(position=(0.5, 0.0, 0.0))
    joint_type = mbs.joints.Prismatic if prismatic else mbs.joints.Revolute
    joint = system.add(joint_type(system.ground, arm, point=(0, 0, 0),
                                  axis=(1, 0, 0) if prismatic else (0, 0, 1), name="joint"))
    system.add(Drive(joint, position=position, rate=rate, name="crank"))
    return system.compile()


def jump_warnings(model, solver, **options) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mbs.simulate(model, solver, project=True, **options)
    return [str(w.message) for w in caught if "drive 'crank' moved" in str(w.message)]


@pytest.mark.parametrize("solver", ["em", "rattle", "lobatto"])
def test_a_drive_that_holds_a_joint_still_is_no_jump(solver):
    """Moves of round-off (1e-16 and below) of a held slider are not tested."""
    assert jump_warnings(driven_arm(0.3, prismatic=True), solver, h=0.01, t_end=1.0) == []


def test_a_ramp_and_hold_drive_is_no_jump():
    """A kink of the position law (the rate drops from 2 to 0 inside a step) is an impulsive
    drive that the step's effort carries: the energy balances the drive's work."""
    model = driven_arm(lambda t: 2.0 * min(t, 1.033), lambda t: 2.0 if t < 1.033 else 0.0,
                       gravity=False)
    assert jump_warnings(model, "em", h=0.01, t_end=2.0) == []


def test_nodes_of_schemes_off_the_constraints_are_not_read_as_jumps():
    """ggl-vi-a enforces the drive at q^{n+theta}: its nodes are off the law by its error."""
    model = driven_arm(lambda t: t * t, lambda t: 2.0 * t)
    assert jump_warnings(model, "ggl-vi-a", h=0.01, t_end=0.1) == []


@pytest.mark.parametrize("solver", ["em", "rattle", "lobatto", "ggl-vi-b"])
def test_a_position_law_that_jumps_is_warned_of(solver):
    model = driven_arm(lambda t: 0.0 if t < 0.255 else 0.5, lambda t: 0.0)
    messages = jump_warnings(model, solver, h=0.01, t_end=0.5)
    assert len(messages) == 1
    assert "moved its angle by 0.5 more than its rate does in the step to t = 0.26" in messages[0]


@pytest.mark.parametrize("position, rate, step_end", [
    # at a node, the rate by differences spikes to 0.5 / 2e-4 there (and only there)
    (lambda t: 0.0 if t < 0.25 else 0.5, None, 0.25),
    # 0.2 on top of a ramp at 10 rad/s: twice the step's move of 0.1
    (lambda t: 10.0 * t + (0.2 if t >= 0.255 else 0.0), lambda t: 10.0, 0.26),
    # 0.25 back against a ramp at 10 rad/s: a net move of -0.15 against the rate's 0.1
    (lambda t: 10.0 * t - (0.25 if t >= 0.255 else 0.0), lambda t: 10.0, 0.26),
])
def test_jumps_at_a_node_and_on_a_moving_drive_are_warned_of(position, rate, step_end):
    messages = jump_warnings(driven_arm(position, rate), "em", h=0.01, t_end=0.5)
    assert len(messages) == 1 and f"in the step to t = {step_end:g}," in messages[0]


def table_ending_at(t_end: float):
    """A drive law given as a table on [0, t_end] that refuses any time outside it, as
    ``scipy.interpolate.interp1d(..., bounds_error=True)`` does."""
    def position(t):
        if not 0.0 <= t <= t_end:
            raise ValueError(f"t = {t!r} is outside the table's [0, {t_end}]")
        return 0.5 * t**2
    return position


@pytest.mark.parametrize("h, t_end", [(0.1, 0.3), (0.01, 0.7), (0.007, 0.7)])
@pytest.mark.parametrize("scheme, options", [(scheme, options) for scheme, options
                                             in END_ENFORCING + [("ggl-vi-a", {})]
                                             if "order" not in options])
def test_a_law_tabulated_up_to_t_end_is_never_read_past_it(scheme, options, h, t_end):
    """k h summed in floating point ends past t_end for these steps (3 * 0.1 is
    0.30000000000000004): the run ends at t_end itself, and the laws are read there.
    (Compositions are left out: their sub-steps run beyond the step by design.)"""
    model, _ = disc(table_ending_at(t_end), lambda t: t)
    solution = mbs.simulate(model, scheme, h=h, t_end=t_end, project=True, **options)
    assert solution.t[-1] == t_end and solution.stats["completed"]
    assert solution.t.size == round(t_end / h) + 1


def test_streams_and_ensembles_end_at_t_end(tmp_path):
    model, _ = disc(table_ending_at(0.3), lambda t: t)
    q0, p0 = model.initial_state(project=True)
    solution = mbs.simulate(model, "em", h=0.1, t_end=0.3, initial_state=(q0, p0),
                            output=str(tmp_path / "run.npz"))
    loaded = mbs.io.load_solution(str(tmp_path / "run.npz"), model)
    np.testing.assert_array_equal(loaded.t, solution.t)
    assert loaded.t[-1] == 0.3
    ensemble = mbs.simulate_ensemble(model, (np.stack([q0, q0]), np.stack([p0, p0])), h=0.1,
                                     t_end=0.3)
    assert ensemble.t[-1] == 0.3
    np.testing.assert_array_equal(ensemble.q[0], solution.q)


def test_a_step_that_does_not_reach_t_end_keeps_its_own_end_far_from_zero():
    """Far from t = 0 the rounding of t (64 eps |t| = 1.4e-5 at t = 1e9) exceeds what
    simulate accepts as reaching t_end (1e-6 h): a run that falls short by 2e-5 is warned of
    and ends at its own last node, not at t_end."""
    model, _ = disc(lambda t: 0.0, lambda t: 0.0)
    with pytest.warns(UserWarning, match="does not divide the interval"):
        solution = mbs.simulate(model, "em", h=1.0, t_start=1e9, t_end=1e9 + 10.00002)
    assert solution.t[-1] == 1e9 + 10.0


def test_compile_is_quiet_about_a_state_that_only_misses_the_drives_motion():
    """A link set at rest and driven at 2 rad/s from its pose: compile does not warn (the
    documented start projects the state), simulate refuses it unprojected naming the drive,
    and the projected state runs at the drive's rate. A state that also breaks a joint is
    still warned about at compile."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = hinged_link_driven_by(lambda t: 2.0 * t, rate=2.0, quiet=False)
    with pytest.raises(mbs.errors.InconsistentInitialStateError, match="'motor' \\(velocity\\)"):
        mbs.simulate(model, "em", h=0.01, t_end=0.1)
    start = model.initial_state(project=True, joint_rates={"hinge": 2.0})
    solution = mbs.simulate(model, "em", h=0.01, t_end=0.1, initial_state=start)
    np.testing.assert_allclose(solution.joint("hinge").rate, 2.0, rtol=0, atol=1e-12)

    system = mbs.System()
    link = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=1.0, ly=0.05, lz=0.05,
                                               name="link"))
    link.set_state(position=(0.5, 0.0, 0.0), velocity=(0.0, 0.0, 1.0))  # off the hinge's
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0.0, 0.0, 0.0),
                                           axis=(1.0, 0.0, 0.0), name="hinge"))  # circle
    system.add(Drive(hinge, lambda t: 2.0 * t, rate=lambda t: 2.0, name="motor"))
    with pytest.warns(UserWarning, match="initial state is inconsistent"):
        system.compile()
