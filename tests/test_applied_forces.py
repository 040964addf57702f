"""Loads, dampers and joint actuators: closed forms, energy balance, momentum impulses, bad
input.

Tolerances: the closed-form comparisons use schemes that are exact for the problem (constant
force: every second-order scheme integrates a quadratic motion exactly) or of order 6 at
h = 0.01 (error ~ (h omega)^6); the energy balance of EM is exact up to Newton's tolerance
(1e-12 relative increments) and round-off of sums of O(n) terms, so 1e-12 of the energy
scale per step; momentum impulses are exact up to round-off of |J| (1e-12 relative)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs
from mbs.backends import compiled
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.forces import Damper, JointDamper, JointForce, JointTorque, Load, Spring
from mbs.streaming import load_stream
from tests.mechanisms import (
    assert_effort_derivatives_exact_off_the_constraints,
    assert_stream_resume_and_ensemble_repeat_the_run,
    finite_difference,
    link,
    slider_crank,
)

Z = (0.0, 0.0, 1.0)
SECOND_ORDER = ["em", "ggl-vi-a", "rattle", "hbvm"]
EVERY_SCHEME = [("em", {}), ("ggl-vi-a", {}), ("ggl-vi-s", {}), ("ggl-vi-b", {}),
                ("rattle", {}), ("hbvm", {}), ("lobatto", {"stages": 3}), ("em", {"order": 4})]

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba not installed")


# -- damped oscillator ---------------------------------------------------------------------------
MASS, STIFFNESS, DAMPING, STRETCH = 2.0, 50.0, 1.5, 0.3


def damped_oscillator(separate_damper: bool = False) -> mbs.Model:
    """A point mass on a spring-damper to the ground point at the origin, along x."""
    system = mbs.System()
    body = system.add(mbs.PointMass(MASS, name="mass"))
    body.set_state(position=(1.0 + STRETCH, 0.0, 0.0))
    if separate_damper:
        system.add(Spring(system.ground, body, STIFFNESS, rest_length=1.0, point_a=(0, 0, 0)))
        system.add(Damper(system.ground, body, DAMPING, point_a=(0, 0, 0)))
    else:
        system.add(Spring(system.ground, body, STIFFNESS, rest_length=1.0, point_a=(0, 0, 0),
                          damping=DAMPING))
    return system.compile()


def oscillator_displacement(t: float) -> float:
    omega0, decay = np.sqrt(STIFFNESS / MASS), DAMPING / (2.0 * MASS)
    omega = np.sqrt(omega0**2 - decay**2)
    return STRETCH * np.exp(-decay * t) * (np.cos(omega * t) + decay / omega * np.sin(omega * t))


def fitted_order(errors: list[float], steps: list[float]) -> float:
    return float(np.polyfit(np.log(steps), np.log(errors), 1)[0])


@pytest.mark.parametrize("solver, options, order", [
    ("em", {}, 2), ("ggl-vi-a", {}, 2), ("rattle", {}, 2), ("hbvm", {"s": 1, "k": 2}, 2),
    ("lobatto", {"stages": 2}, 2), ("lobatto", {"stages": 3}, 4), ("em", {"order": 4}, 4),
    ("ggl-vi-s", {}, 1), ("ggl-vi-b", {}, 1)])
def test_damped_oscillator_matches_the_closed_form_with_the_schemes_order(solver, options,
                                                                          order):
    model = damped_oscillator()
    steps = [0.02, 0.01, 0.005] if order > 1 else [0.01, 0.005, 0.0025]  # asymptotic range
    errors = [abs(mbs.simulate(model, solver, h=h, t_end=2.0, **options).q[-1, 0] - 1.0
                  - oscillator_displacement(2.0)) for h in steps]
    assert fitted_order(errors, steps) == pytest.approx(order, abs=0.1)


def test_spring_damping_equals_a_separate_damper():
    joint = mbs.simulate(damped_oscillator(), "em", h=0.01, t_end=1.0)
    separate = mbs.simulate(damped_oscillator(separate_damper=True), "em", h=0.01, t_end=1.0)
    np.testing.assert_allclose(joint.q, separate.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(joint.work, separate.work, rtol=0, atol=1e-13)


def energy_balance_per_step(solution: mbs.Solution) -> float:
    """max |E_{k+1} - E_k - W_k| over the steps, relative to the energy scale of the run."""
    energy = solution.energy()
    scale = max(float(np.max(np.abs(energy))), float(np.max(solution.kinetic_energy())),
                float(np.max(np.abs(solution.work))))
    return float(np.max(np.abs(np.diff(energy - solution.work)))) / scale


def test_em_energy_balance_of_the_damped_oscillator():
    solution = mbs.simulate(damped_oscillator(), "em", h=0.01, t_end=5.0)
    assert solution.work[-1] < -0.9 * 0.5 * STIFFNESS * STRETCH**2  # most energy dissipated
    assert energy_balance_per_step(solution) <= 1e-12
    assert np.all(np.diff(solution.work) <= 0.0)  # a damper never does positive work


def motor_slider_crank() -> mbs.Model:
    """The slider-crank driven by a motor with a speed-dependent torque and a dashpot on the
    slider."""
    system = slider_crank()
    system.add(JointTorque(system["crank_pivot"], lambda t, angle, rate: 5.0 - 0.5 * rate,
                           name="motor"))
    system.add(Damper(system.ground, system["slider"], 3.0, point_a=(3.0, 0.0, 0.0),
                      name="dashpot"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its redundant constraints are removed
        return system.compile()


def damped_chain(links: int = 10) -> mbs.Model:
    """A hanging chain of links with damped revolute joints, released horizontally."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(links):
        body = system.add(link(f"link{k}", (0.5 * k, 0, 0), (0.5 * (k + 1), 0, 0)))
        system.add(mbs.joints.Revolute(previous, body, point=(0.5 * k, 0, 0), axis=(0, 1, 0),
                                       damping=0.2, name=f"joint{k}"))
        previous = body
    return system.compile()


def test_em_energy_balance_of_the_motor_slider_crank():
    solution = mbs.simulate(motor_slider_crank(), "em", h=1e-3, t_end=1.0)
    assert solution.work[-1] > 1.0  # the motor drives it
    assert energy_balance_per_step(solution) <= 1e-12


def test_em_energy_balance_of_a_chain_with_joint_dampers():
    solution = mbs.simulate(damped_chain(), "em", h=1e-3, t_end=0.5)
    assert solution.work[-1] < 0.0
    assert energy_balance_per_step(solution) <= 1e-12
    summary = solution.conservation_summary()
    assert "energy balance" in summary and "work of loads" in summary


@pytest.mark.parametrize("solver", ["ggl-vi-a", "rattle", "lobatto"])
def test_other_schemes_balance_energy_to_their_order(solver):
    """Not exact, but the balance error shrinks with the scheme's order (factor >= 3 from
    h = 2e-3 to 1e-3)."""
    model = motor_slider_crank()
    coarse, fine = (np.max(np.abs(mbs.simulate(model, solver, h=h, t_end=0.2)
                                  .energy_balance())) for h in (2e-3, 1e-3))
    assert fine < coarse / 3.0


# -- closed forms ------------------------------------------------------------------------------
def test_constant_force_on_a_free_point_mass_is_exact():
    system = mbs.System()
    body = system.add(mbs.PointMass(2.0, name="mass"))
    body.set_state(position=(1.0, 2.0, 3.0), velocity=(0.5, -1.0, 0.2))
    force = np.array([0.3, -0.7, 1.1])
    system.add(Load(body, force=force))
    model = system.compile()
    exact = np.array([1.0, 2.0, 3.0]) + np.array([0.5, -1.0, 0.2]) * 1.5 + force / 4.0 * 1.5**2
    for solver, options in EVERY_SCHEME:
        if solver in ("ggl-vi-s", "ggl-vi-b"):
            continue  # first order: the force enters at one end of the step
        final = mbs.simulate(model, solver, h=0.01, t_end=1.5, **options).q[-1]
        assert np.linalg.norm(final - exact) <= 1e-10 * np.linalg.norm(exact), solver


def disc_on_hinge(torque) -> tuple[mbs.Model, float]:
    system = mbs.System()
    disc = system.add(mbs.RigidBody.from_shape("cylinder", mass=3.0, radius=0.4, length=0.1,
                                               name="disc"))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0, 0, 0), axis=Z,
                                           name="hinge"))
    system.add(JointTorque(hinge, torque, name="motor"))
    model = system.compile()
    return model, float(np.asarray(model.body("disc").inertia)[2, 2])


@pytest.mark.parametrize("solver, options", [("lobatto", {"stages": 4}), ("em", {"order": 6})])
def test_constant_joint_torque_on_a_disc_gives_the_closed_form_angle(solver, options):
    model, inertia = disc_on_hinge(0.8)
    solution = mbs.simulate(model, solver, h=0.01, t_end=1.0, **options)
    rotation = solution.body("disc").rotation
    angle = np.unwrap(np.arctan2(rotation[:, 1, 0], rotation[:, 0, 0]))
    exact = 0.8 * solution.t**2 / (2.0 * inertia)
    assert np.max(np.abs(angle - exact)) <= 1e-10 * exact[-1]
    assert solution.work[-1] == pytest.approx(0.8 * exact[-1], rel=1e-12)


def test_joint_torque_of_the_rate_gives_the_exponential_approach_to_the_motor_speed():
    """tau = k (w* - w): the hinge rate approaches w* as 1 - exp(-k t / I)."""
    target, gain = 3.0, 0.05
    model, inertia = disc_on_hinge(lambda t, angle, rate: gain * (target - rate))
    solution = mbs.simulate(model, "lobatto", stages=4, h=0.01, t_end=1.0)
    rate = solution.body("disc").angular_velocity[:, 2]
    exact = target * (1.0 - np.exp(-gain * solution.t / inertia))
    np.testing.assert_allclose(rate, exact, rtol=0, atol=1e-10 * target)


# -- momentum impulses -------------------------------------------------------------------------
def torqued_free_body(torque) -> mbs.Model:
    system = mbs.System()
    body = system.add(mbs.RigidBody(2.0, (0.3, 0.4, 0.5), name="body"))
    body.set_state(position=(0.1, 0.2, 0.3), rotation=mbs.rotation_about_y(0.3),
                   angular_velocity=(1.0, 2.0, 30.0))
    system.add(Load(body, torque=torque, name="thruster"))
    return system.compile()


@pytest.mark.filterwarnings("ignore:simulate")  # first-order schemes at a fast spin
@pytest.mark.parametrize("solver, options", [(s, o) for s, o in EVERY_SCHEME if s != "hbvm"])
def test_angular_momentum_changes_by_exactly_the_applied_impulse(solver, options):
    """Every momentum-conserving scheme (hbvm is not one)."""
    torque = np.array([0.2, -0.1, 0.7])
    solution = mbs.simulate(torqued_free_body(torque), solver, h=0.01, t_end=0.3, **options)
    momentum = solution.angular_momentum()
    change = np.diff(momentum, axis=0) - 0.01 * torque
    assert np.max(np.abs(change)) <= 1e-12 * np.max(np.abs(momentum))


@pytest.mark.parametrize("solver, fraction", [("em", 0.5), ("ggl-vi-a", 0.5), ("rattle", None)])
def test_time_dependent_torque_impulse_is_the_schemes_quadrature(solver, fraction):
    """tau(t) = tau0 (1 + t): midpoint (em, ggl-vi-a) and trapezoidal (rattle) rules are
    exact for it, so every step's momentum change is h tau(t_n + h/2)."""
    torque = np.array([0.0, 0.0, 0.7])
    h = 0.01
    solution = mbs.simulate(torqued_free_body(lambda t: torque * (1.0 + t)), solver, h=h,
                            t_end=0.3)
    momentum = solution.angular_momentum()
    expected = h * torque[None, :] * (1.0 + solution.t[:-1, None] + 0.5 * h)
    assert np.max(np.abs(np.diff(momentum, axis=0) - expected)) <= 1e-12 * np.max(
        np.abs(momentum))


def test_body_frame_thrust_moves_with_the_body():
    """A thrust fixed in the body along its spin axis: the centre of mass accelerates along
    the (precessing-free, spinning) axis, |p| grows at the thrust's rate."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(2.0, (0.3, 0.3, 0.5), name="body"))
    body.set_state(rotation=mbs.rotation_about_y(0.4), angular_velocity=(0.0, 0.0, 0.0))
    system.add(Load(body, force=(0.0, 0.0, 1.0), frame="body"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    axis = mbs.rotation_about_y(0.4)[:, 2]
    np.testing.assert_allclose(solution.body("body").velocity[-1], axis * 0.5, atol=1e-12)


# -- derivatives ---------------------------------------------------------------------------------
def test_damper_and_load_derivatives_match_finite_differences():
    """dQ/dq and dQ/dv of a damper between two bodies and of a body-frame force."""
    system = mbs.System()
    a = system.add(link("a", (0, 0, 0), (1, 0, 0)))
    b = system.add(link("b", (1, 0.5, 0.2), (2, 0.5, 0.2)))
    a.set_state(velocity=(0.1, 0.2, -0.3), angular_velocity=(0.5, -0.2, 0.1))
    system.add(Damper(a, b, 2.0, point_a=(0.8, 0, 0), point_b=(1.2, 0.5, 0.2)))
    system.add(Load(b, force=(0.3, -0.2, 0.5), point=(1.5, 0.5, 0.2), frame="body"))
    model = system.compile()
    rng = np.random.default_rng(3)
    q = model.q0 + 0.01 * rng.standard_normal(model.n)
    v = rng.standard_normal(model.n)
    _, by_q, by_v = model.applied_force_derivatives(0.0, q, v)
    np.testing.assert_allclose(by_q, finite_difference(lambda x: model.applied_force(0.0, x, v),
                                                       q), atol=1e-7)
    np.testing.assert_allclose(by_v, finite_difference(lambda x: model.applied_force(0.0, q, x),
                                                       v), atol=1e-7)


def two_bodies_with(element: str) -> mbs.Model:
    """Two boxes joined by a joint with an oblique axis, and one work-doing element."""
    system = mbs.System()
    a = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.3, ly=0.2, lz=0.1,
                                            name="a"))
    b = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.2, ly=0.1, lz=0.3,
                                            name="b"))
    b.set_state(position=(0.1, 0.2, 0.3))
    axis, point = (0.3, 0.4, np.sqrt(1.0 - 0.25)), (0.05, 0.1, 0.15)
    if element in ("joint torque", "hinge damper"):
        joint = system.add(mbs.joints.Revolute(a, b, point=point, axis=axis, name="j"))
    else:
        joint = system.add(mbs.joints.Prismatic(a, b, point=point, axis=axis, name="j"))
    law = lambda t, s, rate: 2.0 - 0.7 * s - 0.3 * rate  # noqa: E731
    system.add({"joint torque": lambda: JointTorque(joint, law),
                "hinge damper": lambda: JointDamper(joint, 0.4),
                "joint force": lambda: JointForce(joint, law),
                "slide damper": lambda: JointDamper(joint, 0.4),
                "world torque": lambda: Load(b, torque=(0.3, -0.5, 0.2)),
                "body torque": lambda: Load(b, force=(0.1, 0.0, -0.2), torque=(0.3, -0.5, 0.2),
                                            frame="body")}[element]())
    return system.compile()


@pytest.mark.parametrize("element", ["joint torque", "hinge damper", "joint force",
                                     "slide damper", "world torque", "body torque"])
def test_effort_derivatives_match_finite_differences_off_the_constraints(element,
                                                                        angle_kernels):
    """Newton's iterates leave the orthonormal directors and the joint's constraints, so
    dQ/dq must be the derivative in every direction, not only along rotations: torques
    act through c = K(D)^-1 tau, and a joint coordinate's gradient differs from the
    force's direction J off the constraints."""
    assert_effort_derivatives_exact_off_the_constraints(two_bodies_with(element), seed=7)


def test_batched_joint_efforts_differentiate_like_single_ones(angle_kernels):
    """Four hinges with oblique axes, each damped and driven by its own law: the efforts of
    one kind are evaluated as one batch, whose derivatives must be as exact as the single
    terms'."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(4):
        link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.5, ly=0.05, lz=0.05,
                                                   name=f"link{k}"))
        link.set_state(position=(0.25 + 0.5 * k, 0.0, 0.0))
        hinge = system.add(mbs.joints.Revolute(
            previous, link, point=(0.5 * k, 0.0, 0.0),
            axis=(0.0, np.sin(0.2 * k), np.cos(0.2 * k)), name=f"hinge{k}", damping=0.3))
        system.add(JointTorque(hinge, lambda t, s, rate, k=k: 0.5 * k - 0.2 * s - 0.1 * rate**2))
        previous = link
    assert_effort_derivatives_exact_off_the_constraints(system.compile(), seed=8)


def test_joint_actuator_rate_derivative_matches_finite_differences(angle_kernels):
    model, _ = disc_on_hinge(lambda t, angle, rate: -0.3 * angle - 2.0 * rate)
    q = model.q0.copy()
    v = np.zeros(model.n)
    v[3:12] = np.cross([0.0, 0.0, 1.5], q[3:12].reshape(3, 3)).ravel()  # spin about z
    _, _, by_v = model.applied_force_derivatives(0.0, q, v)
    np.testing.assert_allclose(by_v, finite_difference(lambda x: model.applied_force(0.0, q, x),
                                                       v), atol=1e-7)


# -- driver features --------------------------------------------------------------------------
@pytest.mark.parametrize("solver, options", [
    ("em", {}), ("lobatto", {"stages": 3}),
    pytest.param("em", {"backend": "compiled"}, marks=needs_numba),
    pytest.param("lobatto", {"stages": 3, "backend": "compiled"}, marks=needs_numba)])
def test_stream_resume_and_ensembles_keep_the_work(solver, options, tmp_path):
    model = damped_oscillator()
    assert_stream_resume_and_ensemble_repeat_the_run(model, solver, options, 0.01, 20,
                                                     tmp_path)
    full = mbs.simulate(model, solver, h=0.01, t_end=0.2, **options)
    resumed = load_stream(str(tmp_path / "run"), model)
    np.testing.assert_array_equal(resumed.work, full.work)
    states = (np.stack([model.q0, model.q0]), np.stack([model.p0, model.p0]))
    ensemble = mbs.simulate_ensemble(model, states, h=0.01, t_end=0.2, solver=solver,
                                     **options)
    np.testing.assert_array_equal(ensemble.work[0], full.work)


@needs_numba
def test_compiled_backend_runs_dampers_in_the_kernel():
    """The damper's force is evaluated in Python at the kernel's Newton iterates: no
    fallback, the same equations solved (to Newton's relative increment of 1e-12)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.PointMass(1.0, name="mass"))
    system.add(Damper(system.ground, body, 0.5, point_a=(0.0, 0.0, 1.0)))
    model = system.compile()
    plain = mbs.simulate(model, "em", h=0.01, t_end=0.2, backend="polynomial")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = mbs.simulate(model, "em", h=0.01, t_end=0.2, backend="compiled")
    np.testing.assert_allclose(compiled.q, plain.q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(compiled.work, plain.work, rtol=0, atol=1e-11)


def test_saved_solution_keeps_the_work(tmp_path):
    solution = mbs.simulate(damped_oscillator(), "em", h=0.01, t_end=0.2)
    path = mbs.save_solution(solution, tmp_path / "run")
    loaded = mbs.load_solution(path, damped_oscillator())
    np.testing.assert_array_equal(loaded.work, solution.work)
    damper = solution.model.forces[0].name  # the spring reports its damper
    np.testing.assert_array_equal(loaded.force(damper).work, solution.force(damper).work)
    with pytest.raises(ModelError, match="load the file with its compiled model"):
        mbs.load_solution(path).force(damper)


# -- bad input ----------------------------------------------------------------------------------
def test_bad_loads_and_actuators_get_clear_errors():
    system = mbs.System()
    point = system.add(mbs.PointMass(1.0, name="point"))
    point.set_state(position=(1.0, 0.0, 0.0))
    rod = system.add(link("rod", (0, 0, 0), (1, 0, 0)))
    ball = system.add(mbs.joints.Spherical(system.ground, rod, point=(0, 0, 0), name="ball"))
    with pytest.raises(ModelError, match="point mass"):
        Load(point, torque=(0, 0, 1))
    with pytest.raises(ModelError, match="Spherical 'ball'.*Load"):
        JointTorque(ball, 1.0)
    with pytest.raises(ModelError, match="Prismatic"):
        JointForce(ball, 1.0)
    with pytest.raises(ModelError, match="positive"):
        JointDamper(ball if False else mbs.joints.Revolute(system.ground, rod, (0, 0, 0), Z),
                    -1.0)
    with pytest.raises(ModelTypeError, match=r"\(t\) or \(t, state\)"):
        Load(rod, force=lambda t, a, b: (0, 0, 0))
    with pytest.raises(ModelError, match="give a force, a torque"):
        Load(rod)
    system.add(Load(rod, force=lambda t: (1.0, 2.0), name="short"))
    with pytest.raises(ModelError, match="Load 'short'.*3-vector"):
        system.compile()


def test_a_force_that_turns_non_finite_stops_the_run_with_the_steps_so_far():
    system = mbs.System()
    body = system.add(mbs.PointMass(1.0, name="mass"))
    system.add(Load(body, force=lambda t: (np.nan if t > 0.045 else 1.0, 0.0, 0.0),
                    name="faulty"))
    model = system.compile()
    with pytest.raises(ForceFunctionError, match="Load 'faulty'.*non-finite") as error:
        mbs.simulate(model, "em", h=0.01, t_end=1.0)
    assert error.value.step >= 4
    assert error.value.solution.t.size == error.value.step + 1  # every step before it


def test_vi_conversion_refuses_applied_forces():
    with pytest.raises(ModelError, match="no forcing terms"):
        mbs.simulate(damped_oscillator(), "vi-conversion", h=0.01, t_end=0.1)


def test_constant_joint_force_on_a_slider_gives_the_closed_form_displacement():
    system = mbs.System()
    block = system.add(mbs.RigidBody.from_shape("box", mass=1.5, lx=0.2, ly=0.1, lz=0.1,
                                                name="block"))
    guide = system.add(mbs.joints.Prismatic(system.ground, block, point=(0, 0, 0),
                                            axis=(1, 1, 0), name="guide"))
    system.add(JointForce(guide, 0.6))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    displacement = solution.joint("guide").position
    np.testing.assert_allclose(displacement, 0.6 * solution.t**2 / 3.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(solution.body("block").position[-1],
                               0.2 / np.sqrt(2.0) * np.array([1.0, 1.0, 0.0]), atol=1e-12)



@pytest.mark.parametrize("joint, element", [("Prismatic", "force"), ("Prismatic", "damper"),
                                            ("Cylindrical", "force")])
def test_efforts_along_a_sliding_axis_keep_momentum_and_do_the_work_of_the_slide(joint,
                                                                                 element):
    """A tumbling hub and a tip on a prismatic (cylindrical) joint, pushed apart by a constant
    internal force f or braked by a damper c along the axis, no external force: em keeps the
    linear and angular momentum to round-off (the pair acts along the axis, which turns with
    the hub), and its work per step is f (s_{n+1} - s_n), or -c (s_{n+1} - s_n)^2 / h for the
    damper, with s the slide of the joint: the scheme's work equals that sum to round-off.
    500 steps each solved to round-off: 1e-12 relative."""
    system = mbs.System()
    hub = system.add(mbs.RigidBody.from_shape("box", mass=50.0, lx=1.0, ly=1.0, lz=1.0,
                                              name="hub"))
    tip = system.add(mbs.RigidBody.from_shape("box", mass=5.0, lx=0.2, ly=0.2, lz=0.2,
                                              name="tip"))
    spin, offset = np.array([0.1, 0.3, -0.2]), np.array([1.0, 0.0, 0.0])
    hub.set_state(angular_velocity=spin)
    tip.set_state(position=offset, velocity=np.cross(spin, offset) + [0.3, 0.0, 0.0],
                  angular_velocity=spin)
    boom = system.add(getattr(mbs.joints, joint)(hub, tip, point=offset, axis=(1.0, 0.0, 0.0),
                                                 name="boom"))
    push, damping, h = 2.0, 0.5, 0.01
    system.add(JointForce(boom, push) if element == "force"
               else JointDamper(boom, damping))
    solution = mbs.simulate(system.compile(), "em", h=h, t_end=5.0)
    for momentum in (solution.angular_momentum(), solution.linear_momentum()):
        assert np.max(np.abs(momentum - momentum[0])) < 1e-12 * np.max(np.abs(momentum))
    slide = np.diff(solution.joint("boom", "displacement").position)
    steps = push * slide if element == "force" else -damping * slide**2 / h
    work = np.concatenate([[0.0], np.cumsum(steps)])
    assert np.max(np.abs(solution.work - work)) < 1e-12 * np.max(np.abs(solution.energy()))
    assert np.max(np.abs(solution.energy_balance())) < 1e-12 * np.max(np.abs(solution.energy()))

def satellite_with_wheel(law) -> mbs.Model:
    system = mbs.System()
    satellite = system.add(mbs.RigidBody(100.0, (10.0, 12.0, 15.0), name="satellite"))
    satellite.set_state(rotation=mbs.rotation_about_z(0.3))
    wheel = system.add(mbs.RigidBody(2.0, (0.011, 0.011, 0.02), name="wheel"))
    wheel.set_state(rotation=mbs.rotation_about_z(0.3))
    spin = system.add(mbs.joints.Revolute(satellite, wheel, point=(0, 0, 0), axis=(0, 0, 1),
                                          name="spin"))
    system.add(JointTorque(spin, law, name="control"))
    return system.compile()


def yaw_law(t, angle, rate, bodies):
    """PD attitude law on the satellite's yaw (the wheel's reaction turns the satellite)."""
    rotation, omega = bodies[0].rotation, bodies[0].angular_velocity
    return 20.0 * np.arctan2(rotation[1, 0], rotation[0, 0]) + 60.0 * omega[2]


def test_a_joint_torque_may_read_the_bodies_states():
    model = satellite_with_wheel(yaw_law)
    solution = mbs.simulate(model, "em", h=0.05, t_end=20.0)
    rotation = solution.body("satellite").rotation
    yaw = np.arctan2(rotation[:, 1, 0], rotation[:, 0, 0])
    # closed loop yaw'' I = -20 yaw - 60 yaw' with I ~ 15: slowest decay rate ~ 0.37/s
    assert abs(yaw[-1]) <= 0.3 * np.exp(-0.3 * 20.0)
    momentum = solution.angular_momentum()
    assert np.max(np.abs(momentum)) <= 1e-12 * 15.0  # internal torque: L stays zero
    assert energy_balance_per_step(solution) <= 1e-12


def test_state_dependent_actuator_derivatives_match_finite_differences():
    model = satellite_with_wheel(yaw_law)
    rng = np.random.default_rng(5)
    q = model.q0.copy()
    v = rng.standard_normal(model.n)
    _, by_q, by_v = model.applied_force_derivatives(0.0, q, v)
    np.testing.assert_allclose(by_q, finite_difference(lambda x: model.applied_force(0.0, x, v),
                                                       q), atol=1e-5)
    np.testing.assert_allclose(by_v, finite_difference(lambda x: model.applied_force(0.0, q, x),
                                                       v), atol=1e-5)


def test_constant_loads_and_dampers_round_trip_through_json(tmp_path):
    system = slider_crank()
    system.add(JointTorque(system["crank_pivot"], 2.0, name="motor"))
    system.add(Damper(system.ground, system["slider"], 3.0, point_a=(3.0, 0.0, 0.0)))
    system.add(JointDamper(system["crank_pin"], 0.01))
    system.add(Load(system["rod"], force=(0.0, -1.0, 0.0), point=(0.5, 0.2, 0.0)))
    path = tmp_path / "model.json"
    mbs.save_system(system, path)
    loaded = mbs.load_system(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = mbs.simulate(system.compile(), "em", h=1e-3, t_end=0.05)
        second = mbs.simulate(loaded.compile(), "em", h=1e-3, t_end=0.05)
    np.testing.assert_array_equal(first.q, second.q)
    np.testing.assert_array_equal(first.work, second.work)
    system.add(Load(system["crank"], torque=lambda t: (0.0, 0.0, t), name="varying"))
    with pytest.raises(ModelError, match="Load 'varying'.*Python function"):
        mbs.save_system(system, tmp_path / "other.json")


def speed_controlled_disc(law) -> mbs.Model:
    """A disc on a ground hinge about z driven by a motor law f(t, angle, rate)."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody(2.0, np.diag([0.3, 0.3, 0.5]), name="disc"))
    axle = system.add(mbs.joints.Revolute(system.ground, disc, point=(0, 0, 0),
                                          axis=(0, 0, 1), name="axle"))
    system.add(JointTorque(axle, law, name="motor"))
    return system.compile()


def test_a_motor_law_not_periodic_in_the_wrapped_angle_is_named_after_the_run():
    """A PD law on 20 t - angle: the angle it receives jumps by -2 pi at t ~ 0.16."""
    model = speed_controlled_disc(lambda t, angle, rate: 200.0 * (20.0 * t - angle)
                                  + 2.0 * (20.0 - rate))
    with pytest.warns(RuntimeWarning, match="JointTorque 'motor' reads the angle of joint "
                                            "'axle', which turned beyond \\+-pi at t = 0.15"):
        mbs.simulate(model, "em", h=1e-3, t_end=0.3)


def test_a_motor_law_receives_angles_in_its_documented_range_only():
    """Every call, by the scheme, by the checks of compile and by the turn check after the
    run, passes an angle in (-pi, pi]."""
    received = []

    def law(t, angle, rate):
        received.append(angle)
        return 200.0 * (20.0 * t - angle) + 2.0 * (20.0 - rate)

    model = speed_controlled_disc(law)
    with pytest.warns(RuntimeWarning, match="turned beyond"):
        mbs.simulate(model, "em", h=1e-3, t_end=0.3)
    received = np.array(received)
    assert received.size > 300 and np.all((-np.pi < received) & (received <= np.pi))


def test_a_motor_law_with_a_wrapped_error_tracks_several_turns_without_warning():
    """The same law with its error wrapped: the disc follows 20 rad/s over three turns."""
    model = speed_controlled_disc(
        lambda t, angle, rate: 200.0 * ((20.0 * t - angle + np.pi) % (2 * np.pi) - np.pi)
        + 2.0 * (20.0 - rate))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solution = mbs.simulate(model, "em", h=1e-3, t_end=1.0)
    t, angle = solution.t, solution.joint("axle").position
    assert angle[-1] > 3 * 2 * np.pi
    # the lag e = 20 t - angle solves e'' + 4 e' + 400 e = 0, e(0) = 0, e'(0) = 20; EM's
    # error is O((omega h)^2) = 4e-4 of the lag's amplitude 1
    damped = np.sqrt(396.0)
    lag = 20.0 / damped * np.exp(-2.0 * t) * np.sin(damped * t)
    assert np.abs(20.0 * t - angle - lag).max() < 2e-3


def test_unnamed_joint_elements_are_named_by_their_category():
    """Unnamed elements are called <category><k> (body, joint, force, drive): actuators and
    dampers on a joint are forces like torsion springs, and a drive is a drive."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.0)))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0.0, 0.0, 0.0),
                                           axis=(0.0, 0.0, 1.0)))
    slider = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.0)))
    guide = system.add(mbs.joints.Prismatic(system.ground, slider, point=(0.0, 0.0, 0.0),
                                            axis=(1.0, 0.0, 0.0)))
    names = [system.add(element).name for element in (
        mbs.forces.JointTorque(hinge, 1.0), mbs.forces.JointDamper(hinge, 0.5),
        mbs.forces.JointForce(guide, 1.0), mbs.forces.TorsionSpring(hinge, 2.0),
        mbs.joints.Drive(guide, lambda t: 0.1 * t))]
    assert [disc.name, hinge.name, slider.name, guide.name] == ["body1", "joint1", "body2",
                                                                "joint2"]
    assert names == ["force1", "force2", "force3", "force4", "drive1"]


def test_the_effort_and_work_of_each_element_along_a_run():
    """A flywheel with a constant motor torque and a damped axle: the motor's effort is its
    torque; its work in a step that turns the wheel by d is the torque times 2 tan(d / 2)
    (the directors' chord, 2 sin(d / 2), over their midpoint's length, cos(d / 2)), d plus
    O(d^3); the damper's effort is -c times the rate that chord gives; the elements' works
    sum to the scheme's work for EM."""
    system = mbs.System()
    wheel = system.add(mbs.RigidBody(5.0, np.diag([0.06, 0.06, 0.1]), name="wheel"))
    axle = system.add(mbs.joints.Revolute(system.ground, wheel, point=(0, 0, 0),
                                          axis=(0, 0, 1), name="axle"))
    system.add(JointTorque(axle, 2.0, name="motor"))
    system.add(mbs.forces.JointDamper(axle, 0.02, name="friction"))
    solution = mbs.simulate(system.compile(), "em", h=1e-2, t_end=2.0)
    angle = solution.joint("axle").position
    motor, friction = solution.force("motor"), solution.force("friction")
    np.testing.assert_allclose(motor.effort, 2.0, rtol=1e-12)
    turned = np.concatenate([[0.0], np.cumsum(2.0 * np.tan(np.diff(angle) / 2.0))])
    np.testing.assert_allclose(motor.work, 2.0 * turned, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(friction.effort, -0.02 * np.diff(turned) / 1e-2, rtol=1e-10)
    np.testing.assert_allclose(motor.work + friction.work, solution.work,
                               atol=1e-12 * np.abs(solution.work).max())
    np.testing.assert_allclose(motor.t, solution.t[:-1] + 5e-3, rtol=1e-12)
    # power: torque times rate, against the exact spin-up w = (tau / c)(1 - exp(-c t / I))
    # at the step midpoints; second order, with error ~ (h c / I)^2 = 4e-6 of the scale
    rate = 2.0 / 0.02 * -np.expm1(-0.02 * motor.t / 0.1)
    tolerance = 4.0 * (1e-2 * 0.02 / 0.1) ** 2 * 2.0 * rate.max()
    np.testing.assert_allclose(motor.power, 2.0 * rate, atol=tolerance)
    np.testing.assert_allclose(friction.power, -0.02 * rate ** 2, atol=tolerance)
    with pytest.raises(mbs.UnknownNameError, match="no load, damper, actuator or torsion "
                                                   "spring 'brake'; this model's: friction, "
                                                   "motor"):
        solution.force("brake")


@pytest.mark.parametrize("damping", [None, 0.0, 0])
def test_zero_damping_of_springs_and_joints_is_no_damping(damping):
    """A sweep over damping values may start at 0: Spring, TorsionSpring and a revolute
    joint given damping 0 move exactly as without it (energy conserved by EM to round-off);
    a negative damping is an error naming the element."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=1.0, ly=0.1, lz=0.1,
                                               name="link"))
    link.set_state(position=(0.5, 0.0, 0.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0.0, 0.0, 0.0),
                                           axis=(0.0, 1.0, 0.0), damping=damping,
                                           name="hinge"))
    system.add(mbs.forces.TorsionSpring(hinge, stiffness=2.0, damping=damping, name="coil"))
    bob = system.add(mbs.PointMass(0.5, name="bob"))
    bob.set_state(position=(1.0, 0.0, -1.0))
    system.add(mbs.forces.Spring(link, bob, stiffness=30.0, rest_length=0.8,
                                 point_a=(1.0, 0.0, 0.0), damping=damping, name="cord"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.5)
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * np.abs(energy).max()
    with pytest.raises(mbs.ModelError, match="Spring 'bad'.*damping"):
        mbs.forces.Spring(link, bob, stiffness=1.0, damping=-1.0, name="bad")
