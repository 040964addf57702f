"""Joints: equation counts, kinematics (allowed motions keep g = 0, others do not), textbook
degrees of freedom, derivatives against finite differences, user constraints."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mechanisms import (
    finite_difference,
    random_inertia,
    random_rotation,
    random_unit,
    relative_error,
    rotation_generator,
)

import mbs
from mbs.rotations import rotation_from_axis_angle

POINT = np.array([0.4, -0.3, 0.7])
AXIS = np.array([0.2, 0.5, 1.0]) / np.linalg.norm([0.2, 0.5, 1.0])
CROSS = np.cross(AXIS, [1.0, 0.0, 0.0]) / np.linalg.norm(np.cross(AXIS, [1.0, 0.0, 0.0]))

# joint type -> (equations, textbook dof of one rigid body jointed to the ground)
JOINTS = {"Spherical": (3, 3), "Revolute": (5, 1), "Universal": (4, 2),
          "Cylindrical": (4, 2), "Prismatic": (5, 1), "Rigid": (6, 0), "Distance": (1, 5)}


def make_joint(kind: str, a, b, name: str = "joint"):
    if kind == "Spherical":
        return mbs.joints.Spherical(a, b, point=POINT, name=name)
    if kind == "Universal":
        return mbs.joints.Universal(a, b, point=POINT, axis_a=AXIS, axis_b=CROSS, name=name)
    if kind == "Distance":
        return mbs.joints.Distance(a, b, point_a=POINT, point_b=POINT + (0.5, 0.2, -0.1),
                                   name=name)
    if kind == "Rigid":
        return mbs.joints.Rigid(a, b, point=POINT, axis=AXIS, name=name)
    return getattr(mbs.joints, kind)(a, b, point=POINT, axis=AXIS, name=name)


def rigid(rng, name, position, principal=False):
    body = mbs.RigidBody(mass=rng.uniform(0.5, 2.0), inertia=random_inertia(rng, principal),
                         name=name)
    body.set_state(position=position, rotation=random_rotation(rng))
    return body


def one_body_on_ground(rng, kind):
    system = mbs.System()
    body = system.add(rigid(rng, "body", POINT + (0.6, 0.1, -0.4)))
    system.add(make_joint(kind, system.ground, body))
    return system, system.compile()


def moved(q: np.ndarray, rotation: np.ndarray, center, shift=0.0) -> np.ndarray:
    """Rigid motion of the one-body q = (phi, d1, d2, d3): rotate about center, then shift."""
    out = q.copy()
    out[:3] = center + rotation @ (q[:3] - center) + shift
    for i in range(3):
        out[3 + 3 * i:6 + 3 * i] = rotation @ q[3 + 3 * i:6 + 3 * i]
    return out


@pytest.mark.parametrize("kind", list(JOINTS))
def test_equation_count_consistency_and_textbook_dof(rng, kind):
    equations, dof = JOINTS[kind]
    system, model = one_body_on_ground(rng, kind)
    assert model.constraint_rows["joint"].size == equations
    assert model.m == 6 + equations
    q0, _ = model.initial_state()
    assert np.max(np.abs(model.constraints(q0))) < 1e-14
    assert model.degrees_of_freedom == dof
    # independent rank count of the full Jacobian
    rank = np.linalg.matrix_rank(model.constraint_jacobian(q0).toarray(), tol=1e-9)
    assert model.n - rank == dof
    assert model.redundancies == []


# allowed motions (rotation axis or None, rotation angle, translation) keep g = 0 exactly
ALLOWED = {
    "Spherical": [(random_unit(np.random.default_rng(1)), 0.7, 0.0)],
    "Revolute": [(AXIS, 1.1, 0.0), (AXIS, -2.5, 0.0)],
    "Cylindrical": [(AXIS, 0.8, 0.6), (None, 0.0, -1.3)],
    "Prismatic": [(None, 0.0, 0.9)],
    "Rigid": [],
    "Distance": [],
    "Universal": [],
}
FORBIDDEN = {
    "Spherical": [(None, 0.0, 0.1)],
    "Revolute": [(None, 0.0, 0.1), (CROSS, 0.1, 0.0)],
    "Cylindrical": [(CROSS, 0.1, 0.0)],
    "Prismatic": [(AXIS, 0.1, 0.0), (CROSS, 0.1, 0.0)],
    "Rigid": [(AXIS, 0.1, 0.0), (None, 0.0, 0.1)],
    "Universal": [(np.cross(AXIS, CROSS), 0.1, 0.0), (None, 0.0, 0.1)],
    "Distance": [(None, 0.0, 0.1)],
}


@pytest.mark.parametrize("kind", list(JOINTS))
def test_allowed_and_forbidden_motions(rng, kind):
    _, model = one_body_on_ground(rng, kind)
    q0, _ = model.initial_state()
    for axis, angle, slide in ALLOWED[kind]:
        rotation = np.eye(3) if axis is None else rotation_from_axis_angle(axis, angle)
        q = moved(q0, rotation, POINT, slide * AXIS)
        assert np.max(np.abs(model.constraints(q))) < 1e-13, (axis, angle, slide)
    for axis, angle, slide in FORBIDDEN[kind]:
        rotation = np.eye(3) if axis is None else rotation_from_axis_angle(axis, angle)
        q = moved(q0, rotation, POINT, slide * (AXIS if kind != "Distance" else CROSS))
        assert np.max(np.abs(model.constraints(q))) > 1e-3, (axis, angle, slide)


def test_universal_allows_both_cross_rotations(rng):
    _, model = one_body_on_ground(rng, "Universal")
    q0, _ = model.initial_state()
    # rotate about axis_b (fixed in the body: CROSS at the initial pose), then about axis_a
    spin_b = rotation_from_axis_angle(CROSS, 0.9)
    spin_a = rotation_from_axis_angle(AXIS, -0.6)
    q = moved(moved(q0, spin_b, POINT), spin_a, POINT)
    assert np.max(np.abs(model.constraints(q))) < 1e-13


def test_distance_allows_rotation_about_its_anchor(rng):
    _, model = one_body_on_ground(rng, "Distance")
    q0, _ = model.initial_state()
    q = moved(q0, random_rotation(rng), POINT)
    assert np.max(np.abs(model.constraints(q))) < 1e-13


@pytest.mark.parametrize("kind", list(JOINTS))
def test_joint_between_two_bodies_is_invariant_under_common_motion(rng, kind):
    system = mbs.System()
    a = system.add(rigid(rng, "a", POINT - (0.5, 0.2, 0.1), principal=True))
    b = system.add(rigid(rng, "b", POINT + (0.6, 0.1, -0.4)))
    system.add(make_joint(kind, a, b))
    model = system.compile()
    equations, dof = JOINTS[kind]
    assert model.degrees_of_freedom == 12 - equations
    q0, _ = model.initial_state()
    rotation, shift = random_rotation(rng), rng.standard_normal(3)
    q = q0.copy()
    q[:12] = moved(q0[:12], rotation, np.zeros(3), shift)
    q[12:] = moved(q0[12:], rotation, np.zeros(3), shift)
    assert np.max(np.abs(model.constraints(q))) < 1e-13
    # The midpoint Jacobian is orthogonal to every rotation generator (seed 003, (85)):
    # for any states for the invariant rows (dot products), and for states on the manifold
    # for the point-coincidence rows, which rotate with the bodies (g(Rq) = R g(q)).
    coincidence = 3 if kind in ("Spherical", "Revolute", "Universal", "Rigid") else 0
    invariant_rows = np.setdiff1d(np.arange(model.m),
                                  model.constraint_rows["joint"][:coincidence])
    pairs = [(q0 + 0.1 * rng.standard_normal(24), q0 + 0.1 * rng.standard_normal(24),
              invariant_rows), (q0, q, np.arange(model.m))]
    for q_start, q_end, rows in pairs:
        mid = 0.5 * (q_start + q_end)
        jac = model.constraint_discrete_jacobian(q_start, q_end).toarray()[rows]
        for axis in np.eye(3):
            xi = rotation_generator(model, mid, axis)
            assert np.max(np.abs(jac @ xi)) < 1e-13 * max(1.0, np.max(np.abs(xi)))


@pytest.mark.parametrize("kind", list(JOINTS))
@pytest.mark.parametrize("to_ground", [True, False], ids=["ground", "bodies"])
def test_constraint_derivatives_match_finite_differences(rng, kind, to_ground):
    system = mbs.System()
    a = system.ground if to_ground else system.add(rigid(rng, "a", POINT - (0.5, 0.2, 0.1)))
    b = system.add(rigid(rng, "b", POINT + (0.6, 0.1, -0.4), principal=True))
    system.add(make_joint(kind, a, b))
    model = system.compile()
    q = model.initial_state()[0] + 0.3 * rng.standard_normal(model.n)  # off the manifold
    mult = rng.standard_normal(model.m)
    assert relative_error(model.constraint_jacobian(q),
                          finite_difference(model.constraints, q)) < 1e-6
    assert relative_error(
        model.constraint_hessian_product(q, mult),
        finite_difference(lambda x: model.constraint_jacobian(x).T @ mult, q)) < 1e-6
    # quadratic constraints: the Hessian product does not depend on q
    q_other = rng.standard_normal(model.n)
    assert relative_error(model.constraint_hessian_product(q_other, mult),
                          model.constraint_hessian_product(q, mult).toarray()) < 1e-15
    # exact midpoint discrete Jacobian
    q1 = q + 0.2 * rng.standard_normal(model.n)
    lhs = model.constraints(q1) - model.constraints(q)
    rhs = model.constraint_discrete_jacobian(q, q1) @ (q1 - q)
    assert np.max(np.abs(lhs - rhs)) <= 1e-12 * max(1.0, np.max(np.abs(lhs)))


def test_spherical_rows_are_scaled_point_coincidence(rng):
    """g = (x_b(P) - x_a(P)) / L, with x = phi + X_i d_i and L the largest distance from a
    centre of mass to P (computed here by hand)."""
    system = mbs.System()
    pa, pb = POINT - (0.5, 0.2, 0.1), POINT + (0.6, 0.1, -0.4)
    a = system.add(rigid(rng, "a", pa))
    b = system.add(rigid(rng, "b", pb))
    system.add(mbs.joints.Spherical(a, b, point=POINT, name="ball"))
    model = system.compile()
    local_a, local_b = a.rotation.T @ (POINT - pa), b.rotation.T @ (POINT - pb)
    scale = max(np.linalg.norm(POINT - pa), np.linalg.norm(POINT - pb))
    q = rng.standard_normal(24)

    def body_point(qb, local):
        return qb[:3] + sum(local[i] * qb[3 + 3 * i:6 + 3 * i] for i in range(3))

    expected = (body_point(q[12:], local_b) - body_point(q[:12], local_a)) / scale
    np.testing.assert_allclose(model.constraints(q)[model.constraint_rows["ball"]], expected,
                               atol=1e-13)


def test_distance_row_formula_and_point_masses(rng):
    """g = 1/2 (|x_b - x_a|^2 / l^2 - 1) between a rigid-body point and a particle."""
    system = mbs.System()
    body = system.add(rigid(rng, "body", (0.0, 0.0, 1.0)))
    bob = system.add(mbs.PointMass(1.3, name="bob"))
    bob.set_state(position=(1.0, 0.5, 0.0))
    anchor = np.array([0.2, 0.1, 1.1])
    system.add(mbs.joints.Distance(body, bob, length=2.0, point_a=anchor, name="rope"))
    system.add(mbs.joints.Spherical(system.ground, body, point=(0.0, 0.0, 0.0), name="ball"))
    with pytest.warns(UserWarning, match="inconsistent"):
        model = system.compile()
    local = body.rotation.T @ (anchor - body.position)
    q = rng.standard_normal(model.n)
    x_a = q[:3] + sum(local[i] * q[3 + 3 * i:6 + 3 * i] for i in range(3))
    x_b = q[12:15]
    expected = 0.5 * (np.sum((x_b - x_a) ** 2) / 4.0 - 1.0)
    assert model.constraints(q)[model.constraint_rows["rope"]][0] == pytest.approx(
        expected, rel=1e-13)
    assert model.degrees_of_freedom == 3 + 3 - 1


def test_particles_on_distance_and_spherical_joints():
    system = mbs.System()
    p1 = system.add(mbs.PointMass(1.0, name="p1")).set_state(position=(1, 0, 0))
    p2 = system.add(mbs.PointMass(2.0, name="p2")).set_state(position=(1, 0, -1))
    p3 = system.add(mbs.PointMass(1.5, name="p3")).set_state(position=(1, 0, -1))
    system.add(mbs.joints.Distance(system.ground, p1))  # length = initial distance = 1
    system.add(mbs.joints.Distance(p1, p2))
    system.add(mbs.joints.Spherical(p2, p3, point=(1, 0, -1)))
    model = system.compile()
    q0, _ = model.initial_state()
    assert np.max(np.abs(model.constraints(q0))) == 0.0
    assert model.degrees_of_freedom == 9 - 1 - 1 - 3


def test_rigid_joint_defaults_to_body_b_reference_point(rng):
    system = mbs.System()
    a = system.add(rigid(rng, "a", (0.0, 0.0, 0.0)))
    b = system.add(rigid(rng, "b", (1.0, 0.0, 0.0)))
    weld = system.add(mbs.joints.Fixed(a, b, name="weld"))
    np.testing.assert_allclose(weld.point, [1.0, 0.0, 0.0])
    assert system.compile().degrees_of_freedom == 6


# -- user constraints ----------------------------------------------------------------------
def quartic_constraint_system(with_hessian: bool):
    """A non-quadratic user constraint: (|phi_a - phi_b|^4 - 1) / 4 = 0 between two bodies."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, (1.0, 1.1, 1.2), name="a"))
    b = system.add(mbs.PointMass(1.0, name="b")).set_state(position=(1.0, 0.0, 0.0))

    def value(q):
        r = q[:3] - q[12:15]
        return np.array([(r @ r) ** 2 / 4.0 - 0.25])

    def jacobian(q):
        r = q[:3] - q[12:15]
        out = np.zeros((1, 15))
        out[0, :3] = (r @ r) * r
        out[0, 12:15] = -(r @ r) * r
        return out

    def hessian(q, mult):
        r = q[:3] - q[12:15]
        block = mult[0] * ((r @ r) * np.eye(3) + 2.0 * np.outer(r, r))
        out = np.zeros((15, 15))
        out[:3, :3], out[12:, 12:] = block, block
        out[:3, 12:], out[12:, :3] = -block, -block
        return out

    constraint = mbs.joints.UserConstraint([a, b], value, jacobian,
                                           hessian if with_hessian else None, name="quartic")
    system.add(constraint)
    return system


@pytest.mark.parametrize("with_hessian", [True, False], ids=["hessian", "fd_hessian"])
def test_user_constraint_derivatives(rng, with_hessian):
    model = quartic_constraint_system(with_hessian).compile()
    assert model.m == 7 and not model.constraints_are_quadratic
    assert model.constraint_rows["quartic"].tolist() == [6]
    q0, _ = model.initial_state()
    assert abs(model.constraints(q0)[6]) < 1e-15
    q = q0 + 0.2 * rng.standard_normal(model.n)
    mult = rng.standard_normal(model.m)
    assert relative_error(model.constraint_jacobian(q),
                          finite_difference(model.constraints, q)) < 1e-6
    assert relative_error(
        model.constraint_hessian_product(q, mult),
        finite_difference(lambda x: model.constraint_jacobian(x).T @ mult, q)) < 1e-6
    assert model.degrees_of_freedom == 6 + 3 - 1


@pytest.mark.parametrize("size", [0.3, 1e-3, 1e-6, 1e-9])
def test_user_constraint_gonzalez_discrete_jacobian_directionality(rng, size):
    model = quartic_constraint_system(True).compile()
    q0 = model.initial_state()[0] + 0.1 * rng.standard_normal(model.n)
    q1 = q0 + size * rng.standard_normal(model.n)
    jac = model.constraint_discrete_jacobian(q0, q1)
    lhs = model.constraints(q1) - model.constraints(q0)
    rhs = jac @ (q1 - q0)
    terms = np.abs(jac.toarray()) @ np.abs(q1 - q0)
    scale = np.maximum.reduce([np.abs(model.constraints(q0)), np.abs(model.constraints(q1)),
                               terms, np.full(model.m, 1e-300)])
    assert np.max(np.abs(lhs - rhs) / scale) <= 1e-12
    # identical states: the discrete Jacobian is the Jacobian
    assert relative_error(model.constraint_discrete_jacobian(q0, q0),
                          model.constraint_jacobian(q0).toarray()) < 1e-15


def test_universal_axes_perpendicular_to_round_off_are_made_exact():
    """Axes computed by the user with |cos| = 5e-9 (accepted as perpendicular) start
    consistent: the joint's equation holds at the initial pose to round-off, not to 5e-9."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    rod = system.add(mbs.RigidBody.from_shape("cylinder", mass=1.0, radius=0.02, length=1.0,
                                              name="rod"))
    rod.set_state(position=(0.0, 0.0, -0.5))
    system.add(mbs.joints.Universal(system.ground, rod, point=(0.0, 0.0, 0.0),
                                    axis_a=(1.0, 0.0, 0.0), axis_b=(5e-9, 1.0, 0.0),
                                    name="cardan"))
    model = system.compile()
    q0, p0 = model.initial_state()
    assert np.abs(model.constraints(q0)).max() <= 4 * np.finfo(float).eps


def cardan_shaft(inclination: float = np.radians(30.0), input_rate: float = 10.0
                 ) -> mbs.Model:
    """An input shaft along x driven at ``input_rate``, a universal joint, and an output
    shaft inclined by ``inclination`` in the x-y plane, each in a bearing."""
    length, inputs = 0.4, np.array([1.0, 0.0, 0.0])
    outputs = np.array([np.cos(inclination), np.sin(inclination), 0.0])
    system = mbs.System()
    shaft_in = system.add(mbs.RigidBody.from_shape("cylinder", mass=2.0, radius=0.03,
                                                   length=length, name="in"))
    shaft_out = system.add(mbs.RigidBody.from_shape("cylinder", mass=1.5, radius=0.05,
                                                    length=length, name="out"))
    vertical = np.array([0.0, 0.0, 1.0])
    shaft_in.set_state(position=-length / 2 * inputs,
                       rotation=np.column_stack([[0.0, 1.0, 0.0], vertical, inputs]),
                       angular_velocity=input_rate * inputs)
    shaft_out.set_state(position=length / 2 * outputs,
                        rotation=np.column_stack([vertical, np.cross(outputs, vertical),
                                                  outputs]),
                        angular_velocity=input_rate / np.cos(inclination) * outputs)
    bearing = system.add(mbs.joints.Revolute(system.ground, shaft_in, point=-length / 2 * inputs,
                                             axis=inputs, name="bearing_in"))
    system.add(mbs.joints.Revolute(system.ground, shaft_out, point=length / 2 * outputs,
                                   axis=outputs, name="bearing_out"))
    system.add(mbs.joints.Universal(shaft_in, shaft_out, point=(0.0, 0.0, 0.0),
                                    axis_a=(0.0, 1.0, 0.0), axis_b=vertical, name="cardan"))
    system.add(mbs.joints.Drive(bearing, lambda t: input_rate * t, rate=lambda t: input_rate,
                                name="motor"))
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        return system.compile()


@pytest.mark.parametrize("h", [0.05, 0.08, 0.1])
def test_a_cardan_shaft_flipped_by_a_coarse_step_is_warned_of(h):
    """tan(phi_out) = tan(phi_in) / cos(beta) exactly (the shaft has no free motion). A
    coarse step may land on the output turned half a revolution (em at h = 0.08 does, with
    energy and constraints intact); every run that does is warned of, and a run whose steps
    turn the shafts by less than a quarter turn (0.5 rad of input and at most 0.58 rad of
    output per step at h = 0.05) is not."""
    model, inclination = cardan_shaft(), np.radians(30.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = mbs.simulate(model, "em", h=h, t_end=1.6)
    exact = np.unwrap(np.arctan2(np.sin(10.0 * solution.t),
                                 np.cos(10.0 * solution.t) * np.cos(inclination)))
    error = np.abs(solution.joint("bearing_out").position - exact).max()
    warned = any("quarter turn" in str(w.message) for w in caught)
    assert error < 1e-12 or abs(error - np.pi) < 1e-9
    if error > 1.0:
        assert warned
    if h == 0.05:
        assert error < 1e-12 and not warned
