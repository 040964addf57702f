"""JointEfforts: one law of several joints' coordinates, against independent truths (the
same laws as separate joint torques, the gravity torques of the minimal coordinates, the
energy of a coupled joint-space spring, finite differences of the generalized force)."""

from __future__ import annotations

import warnings

import double_pendulum as dp
import numpy as np
import pytest

import mbs
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.forces import JointEfforts, JointForce, JointTorque

GRAVITY = 9.81


def pendulum_with(*elements) -> mbs.Model:
    """The double pendulum of the examples with efforts added: ``elements`` are functions
    of the two hinges returning the elements to add."""
    system = dp.build()
    hinges = [system["hinge1"], system["hinge2"]]
    for make in elements:
        for element in make(*hinges):
            system.add(element)
    return system.compile()


def first(t, angle, rate):
    return -3.0 * angle - 0.5 * rate


def second(t, angle, rate):
    return -2.0 * angle - 0.2 * rate + 0.4 * np.sin(t)


def test_a_coupled_law_of_separate_laws_gives_the_separate_torques_motion():
    """Both runs solve the same step equations to Newton's tolerance (1e-12 relative per
    step); over 200 steps of this pendulum their difference stays far below 1e-9."""
    separate = pendulum_with(lambda a, b: [JointTorque(a, first), JointTorque(b, second)])
    coupled = pendulum_with(lambda a, b: [JointEfforts(
        [a, b], lambda t, s, r: [first(t, s[0], r[0]), second(t, s[1], r[1])], name="ctrl")])
    one = mbs.simulate(separate, "em", h=0.01, t_end=2.0)
    other = mbs.simulate(coupled, "em", h=0.01, t_end=2.0)
    np.testing.assert_allclose(other.q, one.q, rtol=0.0, atol=1e-9)
    works = one.force("force1").work + one.force("force2").work
    np.testing.assert_allclose(other.force("ctrl").work, works, rtol=0.0, atol=1e-9)
    assert other.force("ctrl").effort is None
    assert np.max(np.abs(other.energy_balance())) < 1e-12 * np.max(np.abs(other.energy()))


def gravity_torques(s: np.ndarray) -> np.ndarray:
    """dV/ds of the examples' double pendulum in its joint angles, derived by hand: link k
    at phi_k from the downward vertical has its centre at height -(L/2) cos phi_k below its
    hinge; a rotation s about +y turns a link's phi by -s, so phi_1 = phi_1(0) - s_1 and
    phi_2 = phi_2(0) - s_1 - s_2."""
    phi1, phi2 = dp.ANGLES[0] - s[0], dp.ANGLES[1] - s[0] - s[1]
    weight, half = dp.MASS * GRAVITY, 0.5 * dp.LENGTH
    # V = m g (-(L/2) cos phi1) + m g (-L cos phi1 - (L/2) cos phi2)
    d_phi1 = weight * (half + dp.LENGTH) * np.sin(phi1)
    d_phi2 = weight * half * np.sin(phi2)
    return np.array([-d_phi1 - d_phi2, -d_phi2])


def test_gravity_compensation_holds_the_pendulum_where_it_is_released():
    """tau = dV/ds cancels gravity's generalized forces: released at rest, the pendulum
    stays at rest (to Newton's tolerance); without the law it falls."""
    held = pendulum_with(lambda a, b: [JointEfforts([a, b],
                                                    lambda t, s, r: gravity_torques(s))])
    solution = mbs.simulate(held, "em", h=0.01, t_end=1.0)
    assert np.max(np.abs(solution.q - solution.q[0])) < 1e-10
    falling = mbs.simulate(pendulum_with(), "em", h=0.01, t_end=1.0)
    assert np.max(np.abs(falling.q - falling.q[0])) > 0.1


STIFFNESS = np.array([[6.0, 2.0], [2.0, 3.0]])


@pytest.mark.parametrize("scheme", ["em", "rattle"])
def test_a_coupled_joint_space_spring_conserves_its_energy_at_second_order(scheme):
    """tau = -K s with K symmetric is a conservative joint-space spring, U = s^T K s / 2:
    E + U is a first integral. The schemes apply the efforts as work-doing forces, whose
    midpoint work differs from -dU by O(h^2) per unit time."""
    spring = pendulum_with(lambda a, b: [JointEfforts([a, b], lambda t, s, r: -STIFFNESS @ s)])
    drifts = []
    for h in (0.004, 0.002):
        solution = mbs.simulate(spring, scheme, h=h, t_end=1.0)
        s = np.column_stack([solution.joint(f"hinge{k}").position for k in (1, 2)])
        total = solution.energy() + 0.5 * np.einsum("ni,ij,nj->n", s, STIFFNESS, s)
        drifts.append(np.max(np.abs(total - total[0])))
    assert np.log2(drifts[0] / drifts[1]) == pytest.approx(2.0, abs=0.3)


def cart_pendulum(law=None, separate=()) -> mbs.Model:
    """A cart on a prismatic joint and a link on a cylindrical joint to it (angle and slide
    along the same axis), with ``law`` on the cart's displacement and both coordinates of
    the cylindrical joint (as JointEfforts), and ``separate`` = (element class, joint name,
    law) actuators."""
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    cart = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.4, ly=0.2, lz=0.1,
                                               name="cart"))
    link = system.add(mbs.RigidBody.from_shape("cylinder", mass=0.5, radius=0.02, length=0.6,
                                               name="link"))
    link.set_state(position=(0.0, 0.0, -0.3))
    rail = system.add(mbs.joints.Prismatic(system.ground, cart, point=(0.0, 0.0, 0.0),
                                           axis=(1.0, 0.0, 0.0), name="rail"))
    sleeve = system.add(mbs.joints.Cylindrical(cart, link, point=(0.0, 0.0, 0.0),
                                               axis=(0.0, 1.0, 0.0), name="sleeve"))
    if law is not None:
        system.add(JointEfforts([rail, sleeve, (sleeve, "displacement")], law, name="ctrl"))
    for element, joint, single in separate:
        system.add(element(system[joint], single))
    return system.compile()


def nonlinear(t, s, r):
    return np.array([np.sin(s[1]) * r[0] + s[0] ** 2, np.cos(s[0]) * s[1] + r[0] * r[2],
                     -4.0 * s[2] + s[1] * r[1] + t])


def test_the_generalized_force_derivatives_match_finite_differences(angle_kernels):
    """At a state off the constraints (where Newton's iterates are): central differences
    with step 1e-6 carry a truncation error ~1e-12 and a round-off ~1e-10 relative."""
    model = cart_pendulum(nonlinear)
    rng = np.random.default_rng(7)
    q = model.q0 + 1e-2 * rng.standard_normal(model.n)
    v = rng.standard_normal(model.n)
    _, by_q, by_v = model.applied_force_derivatives(0.3, q, v)
    by_q, by_v = (np.asarray(d.toarray() if hasattr(d, "toarray") else d) for d in (by_q, by_v))
    step = 1e-6
    columns = np.eye(model.n) * step
    difference_q = np.column_stack([(model.applied_force(0.3, q + e, v)
                                     - model.applied_force(0.3, q - e, v)) / (2 * step)
                                    for e in columns])
    difference_v = np.column_stack([(model.applied_force(0.3, q, v + e)
                                     - model.applied_force(0.3, q, v - e)) / (2 * step)
                                    for e in columns])
    for exact, estimate in ((by_q, difference_q), (by_v, difference_v)):
        assert np.max(np.abs(exact - estimate)) < 1e-7 * np.max(np.abs(estimate))


def push(t, x, rate):
    return 3.0 - 2.0 * x - 0.5 * rate


def twist(t, angle, rate):
    return 0.4 * np.cos(t) - 1.5 * angle


def slide(t, y, rate):
    return -8.0 * y - 0.1 * rate + 0.2


def test_each_effort_acts_on_the_coordinate_listed_at_its_place():
    """Three different laws, one per coordinate (rail displacement, sleeve angle, sleeve
    slide): as JointEfforts they give the motion of the three single-joint actuators, which
    any other assignment of laws to coordinates would not. Both runs solve the same step
    equations to Newton's tolerance (1e-12 per step); over 100 steps the difference stays
    far below 1e-9."""
    coupled = cart_pendulum(lambda t, s, r: [push(t, s[0], r[0]), twist(t, s[1], r[1]),
                                             slide(t, s[2], r[2])])
    separate = cart_pendulum(separate=[(JointForce, "rail", push), (JointTorque, "sleeve", twist),
                                       (JointForce, "sleeve", slide)])
    one = mbs.simulate(coupled, "em", h=0.01, t_end=1.0)
    other = mbs.simulate(separate, "em", h=0.01, t_end=1.0)
    np.testing.assert_allclose(one.q, other.q, rtol=0.0, atol=1e-9)
    for joint, coordinate in (("rail", None), ("sleeve", "angle"), ("sleeve", "displacement")):
        assert np.ptp(one.joint(joint, coordinate).position) > 1e-3  # every law moved it


@pytest.mark.parametrize("joints, law, error, match", [
    ([], lambda t: [], ModelTypeError, "non-empty list of joints"),
    (["hinge1"], lambda t: [0.0], ModelTypeError, "is not a joint"),
    (lambda a, b: [a, a], lambda t: [0.0, 0.0], ModelError, "listed twice"),
    (lambda a, b: [(a, "displacement")], lambda t: [0.0], ModelError,
     "no 'displacement' coordinate; it has angle"),
    (lambda a, b: [a, b], lambda t, s: [0.0, 0.0], ModelTypeError,
     r"must take \(t\) or \(t, positions, rates\)"),
])
def test_bad_joint_efforts_get_clear_errors(joints, law, error, match):
    system = dp.build()
    hinges = [system["hinge1"], system["hinge2"]]
    listed = joints(*hinges) if callable(joints) else joints
    with pytest.raises(error, match=match):
        JointEfforts(listed, law)


def test_a_law_returning_the_wrong_count_is_refused_at_compile_naming_the_element():
    with pytest.raises(ModelError, match="JointEfforts 'ctrl'.*must return 2 real numbers"):
        pendulum_with(lambda a, b: [JointEfforts([a, b], lambda t, s, r: [1.0], name="ctrl")])


def test_a_law_failing_during_the_run_stops_it_with_the_steps_so_far():
    model = pendulum_with(lambda a, b: [JointEfforts(
        [a, b], lambda t, s, r: [0.0, 0.0] if t < 0.05 else [np.nan, 0.0], name="ctrl")])
    with pytest.raises(ForceFunctionError, match="JointEfforts 'ctrl'.*non-finite") as error:
        mbs.simulate(model, "em", h=0.01, t_end=0.2)
    assert error.value.solution.t.size >= 5


def test_a_spherical_joint_is_refused():
    system = mbs.System()
    ball = system.add(mbs.RigidBody(mass=1.0, inertia=(1.0, 1.0, 1.0), name="ball"))
    joint = system.add(mbs.joints.Spherical(system.ground, ball, point=(0.0, 0.0, 0.0)))
    with pytest.raises(ModelError, match="has no axis coordinate"):
        JointEfforts([joint], [1.0])


def disc_pair(law) -> mbs.Model:
    """A disc on a ground hinge about z and a second disc on a hinge to it, both driven by
    one law of both angles."""
    system = mbs.System()
    first = system.add(mbs.RigidBody(2.0, np.diag([0.3, 0.3, 0.5]), name="first"))
    second = system.add(mbs.RigidBody(1.0, np.diag([0.12, 0.12, 0.2]), name="second"))
    second.set_state(position=(0.5, 0.0, 0.0))
    axle = system.add(mbs.joints.Revolute(system.ground, first, point=(0, 0, 0),
                                          axis=(0, 0, 1), name="axle"))
    pin = system.add(mbs.joints.Revolute(first, second, point=(0.5, 0, 0), axis=(0, 0, 1),
                                         name="pin"))
    system.add(JointEfforts([axle, pin], law, name="ctrl"))
    return system.compile()


def test_a_coupled_law_not_periodic_in_a_wrapped_angle_is_named_after_the_run():
    """A PD law on 20 t - angle for the axle: the angle it receives jumps by -2 pi at
    t ~ 0.17; the pin's law, periodic in its angle, is not named."""
    model = disc_pair(lambda t, s, r: [200.0 * (20.0 * t - s[0]) + 2.0 * (20.0 - r[0]),
                                       -np.sin(s[1]) - 0.1 * r[1]])
    with pytest.warns(RuntimeWarning, match="JointEfforts 'ctrl' reads the angle of joint "
                                            "'axle', which turned beyond \\+-pi at t = 0\\.17"):
        solution = mbs.simulate(model, "em", h=1e-3, t_end=0.3)
    assert np.max(np.abs(solution.joint("axle").position)) > np.pi


def test_a_coupled_law_with_wrapped_errors_turns_several_times_without_warning():
    def wrapped(error):
        return (error + np.pi) % (2.0 * np.pi) - np.pi

    model = disc_pair(lambda t, s, r: [200.0 * wrapped(20.0 * t - s[0]) + 2.0 * (20.0 - r[0]),
                                       -np.sin(s[1]) - 0.1 * r[1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solution = mbs.simulate(model, "em", h=1e-3, t_end=0.6)
    assert np.max(solution.joint("axle").position) > 2 * 2 * np.pi * 0.8


def test_one_constant_effort_may_be_given_as_a_list_and_a_foreign_joint_is_named():
    """The efforts are k numbers, also for k = 1; a joint of another system is named."""
    system = dp.build()
    system.add(JointEfforts([system["hinge2"]], [0.5], name="hold"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.2)
    assert solution.force("hold").work[-1] != 0.0
    other = dp.build()
    with pytest.raises(ModelError, match="JointEfforts 'stray': joint 'hinge1' belongs to "
                                         "another system"):
        system.add(JointEfforts([other["hinge1"]], [0.5], name="stray"))
