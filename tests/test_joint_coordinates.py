"""Joint coordinates as outputs (Solution.joint) and as inputs (initial_state(joint_rates=))."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs
from mbs.errors import ModelError
from tests.mechanisms import (
    assert_effort_derivatives_exact_off_the_constraints,
    double_pendulum,
    finite_difference,
    slider_crank,
)


def compiled(system: mbs.System) -> mbs.Model:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # redundant planar-loop equations are removed
        return system.compile()


def test_double_pendulum_joint_angles_match_the_links_rotations():
    model = double_pendulum().compile()
    solution = mbs.simulate(model, "em", h=0.005, t_end=2.0)
    rotation1 = solution.body("link1").rotation
    rotation2 = solution.body("link2").rotation
    # hinge axes along y: the angle about +y of link1 against the ground, of link2 against 1
    def angle_about_y(rotation):
        return np.unwrap(np.arctan2(-rotation[:, 2, 0], rotation[:, 0, 0]))

    first = angle_about_y(rotation1) - angle_about_y(rotation1[:1])
    second = angle_about_y(rotation2) - angle_about_y(rotation1) - (
        angle_about_y(rotation2[:1]) - angle_about_y(rotation1[:1]))
    hinge1, hinge2 = solution.joint("hinge1"), solution.joint("hinge2")
    assert hinge1.coordinate == "angle"
    np.testing.assert_allclose(hinge1.position, first, atol=1e-9)
    np.testing.assert_allclose(hinge2.position, second, atol=1e-9)
    # rates: the difference of the links' angular velocities about y
    omega1 = solution.body("link1").angular_velocity[:, 1]
    omega2 = solution.body("link2").angular_velocity[:, 1]
    np.testing.assert_allclose(hinge1.rate, omega1, atol=1e-9)
    np.testing.assert_allclose(hinge2.rate, omega2 - omega1, atol=1e-9)


def test_joint_rate_is_the_time_derivative_of_the_joint_position():
    """Central differences of the angle over the nodes give the rate to O(h^2)."""
    model = double_pendulum().compile()
    h = 1e-3
    solution = mbs.simulate(model, "em", h=h, t_end=0.5)
    joint = solution.joint("hinge2")
    central = (joint.position[2:] - joint.position[:-2]) / (2 * h)
    scale = np.max(np.abs(joint.rate))
    # error h^2/6 |theta'''| with |theta'''| ~ a few hundred rad/s^3 here: ~1e-4 of the scale
    np.testing.assert_allclose(central, joint.rate[1:-1], atol=1e-3 * scale)


def test_prismatic_displacement_and_its_row():
    model = compiled(slider_crank())
    q, p = model.initial_state()
    v = model.apply_inverse_mass(p)
    position, rate, row = model.joint_coordinate("guide", q, v)
    assert position == 0.0 and rate == pytest.approx(row @ v)
    np.testing.assert_allclose(row, finite_difference(
        lambda x: np.array([model.joint_coordinate("guide", x, v)[0]]), q)[0], atol=1e-8)


def test_joint_coordinates_along_a_run_equal_those_of_each_state():
    """The batched evaluation (Solution.joint) against the single-state one, whose row is
    checked by finite differences above; rates are the same dot products summed in another
    order, equal to round-off of their terms (~10 rad/s here)."""
    model = compiled(slider_crank())
    solution = mbs.simulate(model, "em", h=2e-3, t_end=0.2)
    velocities = solution.velocities
    for name, kinds in model.joint_coordinates.items():
        for kind in kinds:
            positions, rates = model.joint_coordinate_path(name, solution.q, velocities, kind)
            single = np.array([model.joint_coordinate(name, q, v, kind)[:2]
                               for q, v in zip(solution.q, velocities)])
            np.testing.assert_array_equal(positions, single[:, 0])
            np.testing.assert_allclose(rates, single[:, 1], rtol=0, atol=1e-13)


def test_initial_joint_rates_are_met_exactly_on_a_closed_loop():
    system = slider_crank()
    system["crank"].set_state(angular_velocity=(0.0, 0.0, 10.0))  # rod and slider at rest
    model = compiled(system)
    with pytest.warns(UserWarning, match=r"changed joint rates: crank_pivot 10 ->"):
        model.initial_state(project=True)  # the plain projection says what it changed
    q, p = model.initial_state(project=True, joint_rates={"crank_pivot": 10.0})
    assert model.is_consistent(q, p)
    rate = model.joint_coordinate("crank_pivot", q, model.apply_inverse_mass(p))[1]
    assert rate == pytest.approx(10.0, rel=1e-10)
    solution = mbs.simulate(model, "em", h=1e-3, t_end=0.01, initial_state=(q, p))
    assert solution.joint("crank_pivot").rate[0] == pytest.approx(10.0, rel=1e-10)


def spatial_four_bar() -> mbs.System:
    """A crank-rocker closed by a spherical and a universal joint (no redundant rows), in
    the x-z plane under gravity: ground link 0.4 m, crank 0.1, coupler 0.35, rocker 0.3."""
    ground_link, crank, coupler, rocker = 0.4, 0.1, 0.35, 0.3
    y_axis = np.array([0.0, 1.0, 0.0])
    pivot, rocker_pivot = np.zeros(3), np.array([ground_link, 0.0, 0.0])
    angle = np.radians(50.0)
    pin_a = crank * np.array([np.cos(angle), 0.0, np.sin(angle)])
    # pin B: the intersection of the coupler's and the rocker's circles, above the line A-C
    chord = rocker_pivot - pin_a
    distance = np.linalg.norm(chord)
    along = (coupler**2 - rocker**2 + distance**2) / (2.0 * distance)
    direction = chord / distance
    normal = np.array([-direction[2], 0.0, direction[0]])
    pin_b = pin_a + along * direction + np.sqrt(coupler**2 - along**2) * normal
    system = mbs.System(gravity=(0.0, 0.0, -9.81))

    def bar(name, start, end, mass):
        length = np.linalg.norm(end - start)
        axis = (end - start) / length
        body = mbs.RigidBody.from_shape("box", mass=mass, lx=length, ly=0.02, lz=0.02,
                                        name=name)
        body.set_state(position=0.5 * (start + end),
                       rotation=np.column_stack([axis, y_axis, np.cross(axis, y_axis)]))
        return system.add(body)

    links = (bar("crank", pivot, pin_a, 0.3), bar("coupler", pin_a, pin_b, 0.8),
             bar("rocker", rocker_pivot, pin_b, 0.6))
    system.add(mbs.joints.Revolute(system.ground, links[0], point=pivot, axis=y_axis,
                                   name="pivot"))
    system.add(mbs.joints.Revolute(links[0], links[1], point=pin_a, axis=y_axis, name="pin_a"))
    system.add(mbs.joints.Spherical(links[1], links[2], point=pin_b, name="pin_b"))
    rocker_axis = (pin_b - rocker_pivot) / rocker
    system.add(mbs.joints.Universal(links[2], system.ground, point=rocker_pivot,
                                    axis_a=np.cross(y_axis, rocker_axis), axis_b=y_axis,
                                    name="pin_c"))
    return system


def test_joint_rates_on_a_spatial_loop_meet_the_velocity_constraints_to_round_off():
    """The Gram matrix of a spatial loop is ill-conditioned: one least-squares solve left
    max |G v| at ~300 units of round-off of the largest row sum_j |G_ij v_j|; the start must
    be as consistent as the states the schemes keep, within a few units."""
    model = compiled(spatial_four_bar())
    q, p = model.initial_state(project=True, joint_rates={"pivot": 7.0})
    velocity = model.apply_inverse_mass(p)
    jacobian = model.constraint_jacobian(q)
    terms = np.max(abs(jacobian) @ np.abs(velocity))
    assert np.max(np.abs(jacobian @ velocity)) <= 16 * np.finfo(float).eps * terms
    rate = model.joint_coordinate("pivot", q, velocity)[1]
    assert rate == pytest.approx(7.0, rel=1e-12)


def test_coupled_joint_rates_get_a_clear_error():
    model = compiled(slider_crank())
    with pytest.raises(ModelError, match="do not allow the joint rates.*guide"):
        model.initial_state(joint_rates={"crank_pivot": 10.0, "guide": 3.0})
    with pytest.raises(mbs.UnknownNameError,
                       match="no joint 'no_such_joint'; joints with an axis coordinate: "
                             "crank_pivot"):
        model.initial_state(joint_rates={"no_such_joint": 1.0})


CROSS_A, CROSS_B = np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0])


def cardan_shaft(*elements) -> mbs.Model:
    """A hub on a bearing about z and a shaft on a universal joint to it (axis_a = z in
    the hub, axis_b = x in the shaft), tumbling under gravity; ``elements`` are functions
    of the universal joint returning elements to add."""
    system = mbs.System(gravity=(0.0, -9.81, 0.0))
    hub = system.add(mbs.RigidBody(2.0, np.diag([0.3, 0.4, 0.5]), name="hub"))
    hub.set_state(angular_velocity=(0.0, 0.0, 2.0))
    system.add(mbs.joints.Revolute(system.ground, hub, point=(0, 0, 0), axis=(0, 0, 1),
                                   name="bearing"))
    shaft = system.add(mbs.RigidBody(1.0, np.diag([0.05, 0.2, 0.22]), name="shaft"))
    spin = np.array([1.0, 0.7, 2.0])
    shaft.set_state(position=(0.0, 0.0, 0.6), angular_velocity=spin,
                    velocity=np.cross(spin, (0.0, 0.0, 0.6)))
    cardan = system.add(mbs.joints.Universal(hub, shaft, point=(0, 0, 0), axis_a=CROSS_A,
                                             axis_b=CROSS_B, name="cardan"))
    for make in elements:
        for element in make(cardan):
            system.add(element)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the spin is made consistent by projection
        return system.compile()


def cross_angles_from_rotations(solution: mbs.Solution) -> tuple[np.ndarray, np.ndarray]:
    """The universal joint's angles from the bodies' rotation matrices: angle_a turns the
    shaft's axis_b about the hub's axis_a (measured in the hub's plane (axis_b, axis_a x
    axis_b)), angle_b turns the shaft about its axis_b (the hub's axis_a seen from the
    shaft, whose frame sees it turn by -angle_b)."""
    hub, shaft = solution.body("hub").rotation, solution.body("shaft").rotation
    normal = np.cross(CROSS_A, CROSS_B)
    alpha, beta = [], []
    for r_a, r_b in zip(hub, shaft):
        in_hub, in_shaft = r_a @ hub[0].T, r_b @ shaft[0].T  # turns from the initial pose
        axis_b = in_shaft @ CROSS_B
        alpha.append(np.arctan2(axis_b @ (in_hub @ normal), axis_b @ (in_hub @ CROSS_B)))
        seen = in_shaft.T @ (in_hub @ CROSS_A)
        beta.append(np.arctan2(seen @ normal, seen @ CROSS_A))
    return np.unwrap(alpha), np.unwrap(beta)


def test_a_universal_joint_gives_its_two_cross_angles_and_their_rates():
    h = 1e-3
    solution = mbs.simulate(cardan_shaft(), "em", h=h, t_end=2.0, project=True)
    expected = cross_angles_from_rotations(solution)
    for coordinate, angle in zip(("angle_a", "angle_b"), expected):
        path = solution.joint("cardan", coordinate)
        assert path.coordinate == coordinate and np.ptp(angle) > 3.0  # past +-pi: unwrapped
        np.testing.assert_allclose(path.position, angle, rtol=0, atol=1e-12)
        # central differences of em's nodes differ from its node velocities by the Taylor
        # term h^2 |angle'''| / 6 and by em's own O(h^2) gap between the node velocity and
        # the mean of its two secants, of the same size: 4 times the term bounds both
        third = np.max(np.abs(np.diff(angle, 3))) / h**3
        differences = np.gradient(angle, solution.t)[1:-1]
        np.testing.assert_allclose(path.rate[1:-1], differences, rtol=0,
                                   atol=4 * h**2 * third / 6)
    assert solution.joint("cardan").coordinate == "angle_a"


STIFFNESS = (3.0, 5.0)


def test_cross_angle_springs_as_joint_efforts_conserve_their_energy_at_second_order():
    """tau = -k angle about each cross axis is a conservative spring, U = k angle^2 / 2:
    E + U is a first integral if each torque does the work of its angle (the efforts act
    on the rates (omega_b - omega_a) . axis); em applies them as work-doing forces, whose
    midpoint work differs from -dU by O(h^2)."""
    springs = cardan_shaft(lambda joint: [mbs.forces.JointEfforts(
        [(joint, "angle_a"), (joint, "angle_b")],
        lambda t, s, r: -np.array(STIFFNESS) * s)])
    drifts = []
    for h in (0.004, 0.002):
        solution = mbs.simulate(springs, "em", h=h, t_end=1.0, project=True)
        angles = [solution.joint("cardan", c).position for c in ("angle_a", "angle_b")]
        total = solution.energy() + sum(0.5 * k * a**2 for k, a in zip(STIFFNESS, angles))
        drifts.append(np.max(np.abs(total - total[0])))
    assert np.log2(drifts[0] / drifts[1]) == pytest.approx(2.0, abs=0.3)


def test_cross_angle_effort_derivatives_and_runs_agree_in_both_angle_forms(angle_kernels):
    """The efforts about both cross axes differentiate exactly off the constraints, and a
    run with them is the same in the compiled and the NumPy form of the angle geometry (one
    formula in two evaluation orders: round-off apart)."""
    springs = cardan_shaft(lambda joint: [mbs.forces.JointEfforts(
        [(joint, "angle_a"), (joint, "angle_b")],
        lambda t, s, r: -np.array(STIFFNESS) * s - 0.2 * r)])
    assert_effort_derivatives_exact_off_the_constraints(springs, seed=11)
    run = mbs.simulate(springs, "em", h=0.004, t_end=0.4, project=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mbs.forces.applied, "USE_ANGLE_KERNELS", not angle_kernels)
        other = mbs.simulate(springs, "em", h=0.004, t_end=0.4, project=True)
    np.testing.assert_allclose(run.q, other.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.work, other.work, rtol=0,
                               atol=1e-12 * np.abs(run.work).max())


def test_a_drive_on_a_universal_joint_is_refused():
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.0), name="body"))
    joint = system.add(mbs.joints.Universal(system.ground, body, point=(0, 0, 0),
                                            axis_a=CROSS_A, axis_b=CROSS_B))
    with pytest.raises(ModelError, match="revolute, cylindrical and prismatic"):
        mbs.joints.Drive(joint, lambda t: t)


def test_initial_rates_of_a_universal_joint_are_given_per_coordinate():
    """joint_rates takes (name, coordinate) for a joint's second coordinate."""
    model = cardan_shaft()
    q, p = model.initial_state(joint_rates={"bearing": 2.0, ("cardan", "angle_b"): 1.5,
                                            ("cardan", "angle_a"): -0.5})
    v = model.apply_inverse_mass(p)
    assert model.joint_coordinate("cardan", q, v, "angle_b")[1] == pytest.approx(1.5, abs=1e-12)
    assert model.joint_coordinate("cardan", q, v)[1] == pytest.approx(-0.5, abs=1e-12)
