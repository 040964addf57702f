"""Rigid bodies (director formulation), point masses, rotations and shape inertia."""

from __future__ import annotations

import numpy as np
import pytest
from mechanisms import random_rotation, random_unit
from scipy.integrate import trapezoid

import mbs
from mbs.joints.base import BuildContext
from mbs.rotations import check_rotation, skew


def point_cloud(rng, count=7):
    """Random masses at random body-frame positions, shifted so the centre of mass is 0."""
    masses = rng.uniform(0.2, 1.0, count)
    positions = rng.normal(0.0, 0.5, (count, 3)) * np.array([1.0, 0.6, 0.3])
    positions -= masses @ positions / masses.sum()
    return masses, positions


def cloud_inertia(masses, positions):
    """J = sum m (|X|^2 I - X X^T) and the second moment sum m X X^T."""
    second = np.einsum("k,ki,kj->ij", masses, positions, positions)
    return np.trace(second) * np.eye(3) - second, second


# -- mass matrix ----------------------------------------------------------------------------
def test_principal_mass_block_is_seed_101():
    i1, i2, i3 = 2.0, 3.0, 4.0
    body = mbs.RigidBody(mass=1.5, inertia=(i1, i2, i3))
    e = [0.5 * (i2 + i3 - i1), 0.5 * (i3 + i1 - i2), 0.5 * (i1 + i2 - i3)]
    expected = np.diag(np.repeat([1.5, *e], 3))
    np.testing.assert_allclose(body.mass_block(), expected, rtol=1e-15)
    np.testing.assert_allclose(body.inverse_mass_block() @ body.mass_block(), np.eye(12),
                               atol=1e-14)


def test_non_principal_euler_tensor_is_second_moment_of_mass(rng):
    masses, positions = point_cloud(rng)
    inertia, second = cloud_inertia(masses, positions)
    assert abs(inertia[0, 1]) > 1e-3  # genuinely non-principal
    body = mbs.RigidBody(mass=masses.sum(), inertia=inertia)
    np.testing.assert_allclose(body.euler_tensor, second, rtol=1e-12, atol=1e-14)
    block = body.mass_block()
    np.testing.assert_allclose(block[:3, :3], masses.sum() * np.eye(3))
    for i in range(3):
        for j in range(3):
            np.testing.assert_allclose(block[3 + 3 * i:6 + 3 * i, 3 + 3 * j:6 + 3 * j],
                                       second[i, j] * np.eye(3), atol=1e-14)
    np.testing.assert_allclose(body.inverse_mass_block() @ block, np.eye(12), atol=1e-12)


def test_kinetic_energy_equals_point_cloud_energy(rng):
    """1/2 v.M v of the director body equals sum 1/2 m_k |v + w x R X_k|^2 of the cloud."""
    masses, positions = point_cloud(rng)
    inertia, _ = cloud_inertia(masses, positions)
    rotation = random_rotation(rng)
    velocity, omega = rng.standard_normal(3), rng.standard_normal(3)
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=masses.sum(), inertia=inertia, name="cloud"))
    body.set_state(position=(0.3, -0.2, 1.0), rotation=rotation, velocity=velocity,
                   angular_velocity=omega)
    model = system.compile()
    q0, p0 = model.initial_state()
    world = positions @ rotation.T
    expected = 0.5 * np.sum(masses * np.sum((velocity + np.cross(omega, world)) ** 2, axis=1))
    assert model.kinetic_energy(p0) == pytest.approx(expected, rel=1e-13)
    # T = 1/2 m v^2 + 1/2 w . (R J R^T) w as well
    rigid = 0.5 * masses.sum() * velocity @ velocity + 0.5 * omega @ rotation @ inertia @ (
        rotation.T @ omega)
    assert model.kinetic_energy(p0) == pytest.approx(rigid, rel=1e-13)
    # angular momentum about the origin: m phi x v + R J R^T w
    expected_j = masses.sum() * np.cross(q0[:3], velocity) + rotation @ inertia @ (
        rotation.T @ omega)
    np.testing.assert_allclose(model.angular_momentum(q0, p0), expected_j, atol=1e-13)


def test_initial_coordinates_and_director_rates(rng):
    rotation = random_rotation(rng)
    omega, velocity = rng.standard_normal(3), rng.standard_normal(3)
    body = mbs.RigidBody(1.0, (1.0, 1.0, 1.5)).set_state(
        position=(1, 2, 3), rotation=rotation, velocity=velocity, angular_velocity=omega)
    q0, v0 = body.initial_coordinates(), body.initial_velocities()
    np.testing.assert_allclose(q0[:3], [1, 2, 3])
    for i in range(3):
        np.testing.assert_allclose(q0[3 + 3 * i:6 + 3 * i], rotation[:, i])
        np.testing.assert_allclose(v0[3 + 3 * i:6 + 3 * i], skew(omega) @ rotation[:, i],
                                   atol=1e-15)
    np.testing.assert_allclose(v0[:3], velocity)


def test_internal_constraints_are_seed_103(rng):
    system = mbs.System()
    system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="b"))
    model = system.compile()
    assert (model.n, model.m, model.degrees_of_freedom) == (12, 6, 6)
    q = rng.standard_normal(12)
    d1, d2, d3 = q[3:6], q[6:9], q[9:12]
    expected = [0.5 * (d1 @ d1 - 1), 0.5 * (d2 @ d2 - 1), 0.5 * (d3 @ d3 - 1),
                d1 @ d2, d1 @ d3, d2 @ d3]
    np.testing.assert_allclose(model.constraints(q), expected, atol=1e-14)
    np.testing.assert_array_equal(model.constraint_rows["b"], np.arange(6))


def test_body_fixed_points_are_affine_in_q(rng):
    """x(P) = phi + X_i d_i with X = R0^T (P - phi0), also at a moved configuration."""
    rotation = random_rotation(rng)
    body = mbs.RigidBody(1.0, (1.0, 1.0, 1.5), name="b").set_state(position=(1, 0, 2),
                                                                   rotation=rotation)
    point = np.array([0.3, -0.4, 2.5])
    context = BuildContext({"b": 12})  # body placed after 12 other coordinates
    expression = context.point(body, point)
    q = np.zeros(24)
    q[12:15], q[15:24] = (1, 0, 2), rotation.T.ravel()
    np.testing.assert_allclose(expression.evaluate(q), point, atol=1e-14)
    q_new = rng.standard_normal(24)
    local = rotation.T @ (point - np.array([1.0, 0.0, 2.0]))
    expected = q_new[12:15] + sum(local[i] * q_new[15 + 3 * i:18 + 3 * i] for i in range(3))
    np.testing.assert_allclose(expression.evaluate(q_new), expected, atol=1e-14)
    vector = context.vector(body, (0.0, 1.0, 1.0))
    local_v = rotation.T @ np.array([0.0, 1.0, 1.0])
    expected_v = sum(local_v[i] * q_new[15 + 3 * i:18 + 3 * i] for i in range(3))
    np.testing.assert_allclose(vector.evaluate(q_new), expected_v, atol=1e-14)


def test_ground_points_are_constant(rng):
    system = mbs.System()
    context = BuildContext({"ground": 0})
    np.testing.assert_allclose(context.point(system.ground, (1, 2, 3)).evaluate(
        rng.standard_normal(6)), [1, 2, 3])
    assert system.ground.n_coordinates == 0 and system.ground.name == "ground"


def test_point_mass_blocks_and_state(rng):
    system = mbs.System()
    bob = system.add(mbs.PointMass(mass=2.5, name="bob"))
    bob.set_state(position=(1, 0, 0), velocity=(0, 2, 0))
    model = system.compile()
    np.testing.assert_allclose(model.mass_matrix.toarray(), 2.5 * np.eye(3))
    np.testing.assert_allclose(model.inverse_mass_matrix.toarray(), np.eye(3) / 2.5)
    q0, p0 = model.initial_state()
    np.testing.assert_allclose(q0, [1, 0, 0])
    np.testing.assert_allclose(p0, [0, 5, 0])
    assert model.kinetic_energy(p0) == pytest.approx(0.5 * 2.5 * 4)
    assert (model.m, model.degrees_of_freedom) == (0, 3)
    assert model.coordinates("bob") == slice(0, 3)
    assert model.body("bob").kind == "point"


# -- rotations --------------------------------------------------------------------------------
def test_axis_angle_and_quaternion_agree(rng):
    for _ in range(5):
        axis, angle = random_unit(rng), rng.uniform(-np.pi, np.pi)
        quaternion = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
        r_axis = mbs.rotation_from_axis_angle(3.0 * axis, angle)  # axis normalised
        r_quat = mbs.rotation_from_quaternion(-2.0 * quaternion)  # scale and sign free
        np.testing.assert_allclose(r_axis, r_quat, atol=1e-14)
        np.testing.assert_allclose(r_axis.T @ r_axis, np.eye(3), atol=1e-14)
        assert np.linalg.det(r_axis) == pytest.approx(1.0)
        np.testing.assert_allclose(r_axis @ axis, axis, atol=1e-14)
        perpendicular = np.cross(axis, random_unit(rng))
        rotated = r_axis @ perpendicular
        cos = rotated @ perpendicular / (perpendicular @ perpendicular)
        sin = np.cross(perpendicular, rotated) @ axis / (perpendicular @ perpendicular)
        assert np.arctan2(sin, cos) == pytest.approx(angle, abs=1e-12)


def test_elementary_rotations():
    a = 0.3
    c, s = np.cos(a), np.sin(a)
    np.testing.assert_allclose(mbs.rotation_about_x(a), [[1, 0, 0], [0, c, -s], [0, s, c]],
                               atol=1e-15)
    np.testing.assert_allclose(mbs.rotation_about_y(a), [[c, 0, s], [0, 1, 0], [-s, 0, c]],
                               atol=1e-15)
    np.testing.assert_allclose(mbs.rotation_about_z(a), [[c, -s, 0], [s, c, 0], [0, 0, 1]],
                               atol=1e-15)


def test_check_rotation_tolerance_and_reflection():
    near = mbs.rotation_about_z(0.2) * (1.0 + 1e-13)
    check_rotation(near, "test")  # within the stated 1e-10 tolerance
    with pytest.raises(mbs.ModelError, match="not orthonormal"):
        check_rotation(mbs.rotation_about_z(0.2) * (1.0 + 1e-8), "test")
    with pytest.raises(mbs.ModelError, match="reflection"):
        check_rotation(np.diag([1.0, 1.0, -1.0]), "test")
    with pytest.raises(mbs.ModelError):
        check_rotation(np.eye(2), "test")
    with pytest.raises(mbs.ModelError):
        mbs.rotation_from_axis_angle((0, 0, 0), 1.0)
    with pytest.raises(mbs.ModelError):
        mbs.rotation_from_quaternion((0, 0, 0, 0))


# -- shapes ------------------------------------------------------------------------------------
SHAPES = [
    # (shape, dimensions, volume or None for thin-walled, textbook principal moments / mass)
    ("box", {"lx": 0.4, "ly": 0.6, "lz": 1.0}, 0.24,
     [(0.36 + 1.0) / 12, (0.16 + 1.0) / 12, (0.16 + 0.36) / 12]),
    ("cylinder", {"radius": 0.3, "length": 1.2}, np.pi * 0.09 * 1.2,
     [(3 * 0.09 + 1.44) / 12, (3 * 0.09 + 1.44) / 12, 0.09 / 2]),
    ("sphere", {"radius": 0.5}, 4 / 3 * np.pi * 0.125, [0.4 * 0.25] * 3),
    # cone about its centre of mass: 3/20 r^2 + 3/80 h^2 transverse, 3/10 r^2 axial
    ("cone", {"radius": 0.4, "height": 1.0}, np.pi * 0.16 / 3,
     [3 / 20 * 0.16 + 3 / 80, 3 / 20 * 0.16 + 3 / 80, 3 / 10 * 0.16]),
    # thin-walled open tube: r^2/2 + L^2/12 transverse, r^2 axial
    ("tube", {"radius": 0.3, "length": 1.2}, None,
     [0.09 / 2 + 1.44 / 12, 0.09 / 2 + 1.44 / 12, 0.09]),
    ("spherical_shell", {"radius": 0.5}, None, [2 / 3 * 0.25] * 3),
    # solid torus: R^2/2 + 5/8 r^2 transverse, R^2 + 3/4 r^2 axial
    ("torus", {"radius": 0.5, "tube_radius": 0.1}, 2 * np.pi**2 * 0.5 * 0.01,
     [0.125 + 0.625 * 0.01, 0.125 + 0.625 * 0.01, 0.25 + 0.75 * 0.01]),
]


@pytest.mark.parametrize("shape,dims,volume,moments", SHAPES, ids=[s[0] for s in SHAPES])
def test_shape_inertia_matches_textbook(shape, dims, volume, moments):
    body = mbs.RigidBody.from_shape(shape, mass=2.0, name=f"{shape}_body", **dims)
    assert body.mass == 2.0
    np.testing.assert_allclose(np.diag(body.inertia), 2.0 * np.array(moments), rtol=1e-14)
    np.testing.assert_allclose(body.inertia, np.diag(np.diag(body.inertia)), atol=0)
    assert body.shape["kind"] == shape
    if volume is None:
        with pytest.raises(mbs.ModelError, match="'thin'.*thin-walled.*give its mass="):
            mbs.RigidBody.from_shape(shape, density=7.8, name="thin", **dims)
    else:
        dense = mbs.RigidBody.from_shape(shape, density=7.8, **dims)
        assert dense.mass == pytest.approx(7.8 * volume, rel=1e-14)
        np.testing.assert_allclose(dense.inertia, body.inertia * dense.mass / 2.0, rtol=1e-13)


def test_cone_inertia_by_quadrature():
    """Independent check of the cone moments by integrating over slices of the solid cone."""
    r, h, rho = 0.4, 1.0, 3.0
    z = np.linspace(0.0, h, 200001)  # apex at z = 0, base at z = h
    radius = r * z / h
    dm = rho * np.pi * radius**2  # mass per unit height
    mass = trapezoid(dm, z)
    z_c = trapezoid(dm * z, z) / mass
    axial = trapezoid(0.5 * dm * radius**2, z)
    transverse = trapezoid(dm * (radius**2 / 4 + (z - z_c) ** 2), z)
    body = mbs.RigidBody.from_shape("cone", density=rho, radius=r, height=h)
    assert body.mass == pytest.approx(mass, rel=1e-8)
    np.testing.assert_allclose(np.diag(body.inertia), [transverse, transverse, axial],
                               rtol=1e-8)
    assert h - z_c == pytest.approx(-body.shape["base_offset"] * 1.0, rel=1e-8)


def test_torus_inertia_by_quadrature():
    """Independent check of the solid torus by integrating over its slices normal to d3: at
    height z an annulus between R -+ sqrt(r^2 - z^2)."""
    big, small, rho = 0.5, 0.15, 2.0
    z = np.linspace(-small, small, 400001)
    half = np.sqrt(np.maximum(small**2 - z**2, 0.0))
    inner, outer = big - half, big + half
    dm = rho * np.pi * (outer**2 - inner**2)  # mass per unit height
    mass = trapezoid(dm, z)
    axial = trapezoid(rho * np.pi * (outer**4 - inner**4) / 2, z)
    transverse = trapezoid(rho * np.pi * (outer**4 - inner**4) / 4 + dm * z**2, z)
    body = mbs.RigidBody.from_shape("torus", density=rho, radius=big, tube_radius=small)
    assert body.mass == pytest.approx(mass, rel=1e-7)
    np.testing.assert_allclose(np.diag(body.inertia), [transverse, transverse, axial],
                               rtol=1e-7)


def test_shape_arguments_are_checked():
    with pytest.raises(mbs.ModelError, match="exactly one"):
        mbs.RigidBody.from_shape("sphere", mass=1.0, density=2.0, radius=1.0, name="s")
    with pytest.raises(mbs.ModelError, match="unknown shape"):
        mbs.RigidBody.from_shape("dodecahedron", mass=1.0, radius=1.0, name="s")
    with pytest.raises(mbs.ModelError, match="tube_radius < radius"):
        mbs.RigidBody.from_shape("torus", mass=1.0, radius=1.0, tube_radius=1.5, name="s")
    with pytest.raises(mbs.ModelError, match="missing"):
        mbs.RigidBody.from_shape("box", mass=1.0, lx=1.0, ly=1.0, name="s")
    with pytest.raises(mbs.ModelError, match="positive"):
        mbs.RigidBody.from_shape("sphere", mass=1.0, radius=-1.0, name="s")


def test_a_body_point_follows_the_body_with_its_rigid_velocity():
    """A link swinging on a spherical joint about a skew initial pose: the point at the
    joint stays at the joint, at rest; the tip keeps its distance from the joint and moves
    with v + omega x r of the body's own trajectory (EM's node velocities satisfy the
    velocity constraints to round-off, so the two agree to round-off)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    rotation = random_rotation(np.random.default_rng(3))
    link = system.add(mbs.RigidBody(2.0, (0.2, 0.22, 0.05), name="link"))
    centre = rotation @ np.array([0.0, 0.0, -0.5])
    link.set_state(position=centre, rotation=rotation, angular_velocity=(1.0, -2.0, 0.5),
                   velocity=np.cross((1.0, -2.0, 0.5), centre))
    system.add(mbs.joints.Spherical(system.ground, link, point=(0.0, 0.0, 0.0)))
    solution = mbs.simulate(system.compile(), "em", h=1e-2, t_end=1.0)
    pivot, pivot_velocity = solution.point("link", (0.0, 0.0, 0.0))
    assert np.abs(pivot).max() < 1e-14 and np.abs(pivot_velocity).max() < 1e-12
    tip_start = 2.0 * centre
    tip, tip_velocity = solution.point("link", tip_start)
    np.testing.assert_allclose(np.linalg.norm(tip, axis=1), 1.0, rtol=1e-14)
    body = solution.body("link")
    rigid = body.velocity + np.cross(body.angular_velocity, tip - body.position)
    np.testing.assert_allclose(tip_velocity, rigid, atol=1e-12 * np.abs(rigid).max())
    with pytest.raises(mbs.ModelError, match="at must be 3 finite world coordinates"):
        solution.point("link", (0.0, 1.0))


def test_quaternions_and_euler_angles_of_a_body_turning_about_a_fixed_axis():
    """A free body spinning about its principal axis e3 turns by an angle theta_n about z,
    read off its first director: its quaternion is (cos theta/2, 0, 0, sin theta/2) with
    theta continuous over three turns (no sign flips), its ZYX Euler angles (theta, 0, 0)
    unwrapped; the directors are orthonormal to round-off, so the tolerance is 1e-12."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(2.0, (0.3, 0.4, 0.5), name="wheel"))
    body.set_state(angular_velocity=(0.0, 0.0, 9.0))
    run = mbs.simulate(system.compile(), "em", h=0.05, t_end=2.2)
    trajectory = run.body("wheel")
    theta = np.unwrap(np.arctan2(trajectory.rotation[:, 1, 0], trajectory.rotation[:, 0, 0]))
    assert theta[-1] > 6 * np.pi  # three turns
    expected = np.column_stack([np.cos(theta / 2), 0 * theta, 0 * theta, np.sin(theta / 2)])
    np.testing.assert_allclose(trajectory.quaternions(), expected, atol=1e-12)
    np.testing.assert_allclose(trajectory.quaternions(scalar_first=False),
                               np.roll(expected, -1, axis=1), atol=1e-12)
    np.testing.assert_allclose(trajectory.euler_angles("ZYX"),
                               np.column_stack([theta, 0 * theta, 0 * theta]), atol=1e-12)
    np.testing.assert_allclose(trajectory.euler_angles("ZYX", degrees=True)[:, 0],
                               np.degrees(theta), atol=1e-10)
    # turning about x, the middle angle of ZXY and of ZXZ passes 90 and 180 degrees and goes
    # on: the first and last angles stay 0 (no switch to the other set of the rotation)
    body.set_state(angular_velocity=(9.0, 0.0, 0.0))
    about_x = mbs.simulate(system.compile(), "em", h=0.05, t_end=2.2).body("wheel")
    turned = np.unwrap(np.arctan2(about_x.rotation[:, 2, 1], about_x.rotation[:, 1, 1]))
    assert turned[-1] > 6 * np.pi
    for sequence in ("ZXY", "ZXZ"):
        np.testing.assert_allclose(about_x.euler_angles(sequence),
                                   np.column_stack([0 * turned, turned, 0 * turned]),
                                   atol=1e-12)
    point = system.add(mbs.PointMass(1.0, name="bead"))
    point.set_state(position=(1.0, 0.0, 0.0))
    with pytest.raises(mbs.ModelError, match="'bead' is a point mass"):
        mbs.simulate(system.compile(), "em", h=0.05, t_end=0.1).body("bead").quaternions()


def test_mass_and_inertia_set_after_construction_are_validated_and_used():
    """Changing a body's inertia after construction changes its Euler tensor with it: a body
    spinning at omega about d3 has the angular momentum I3 omega of the inertia it was
    compiled with. Invalid values are refused when set, as in the constructor."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(1.0, 1.0, 1.0), name="b"))
    body.inertia = (1.0, 2.0, 2.5)
    body.set_state(angular_velocity=(0.0, 0.0, 1.0))
    model = system.compile()
    q0, p0 = model.initial_state()
    assert np.allclose(model.angular_momentum(q0, p0), [0.0, 0.0, 2.5], rtol=0, atol=1e-14)
    assert np.allclose(body.euler_tensor, np.diag([1.75, 0.75, 0.25]), rtol=0, atol=1e-15)
    with pytest.raises(mbs.ModelError, match="RigidBody 'b': mass must be positive"):
        body.mass = -5.0
    with pytest.raises(mbs.ModelError, match="triangle inequality"):
        body.inertia = (1.0, 1.0, 3.0)
    assert np.allclose(np.diag(body.inertia), [1.0, 2.0, 2.5])  # a refused value changes nothing
    with pytest.raises(mbs.ModelError, match="inertia has the magnitude 1e-200"):
        mbs.RigidBody(mass=1.0, inertia=(1e-200,) * 3)
    particle = mbs.PointMass(2.0, name="p")
    with pytest.raises(mbs.ModelError, match="PointMass 'p': mass must be positive"):
        particle.mass = 0.0


def test_an_inertia_changes_only_as_a_whole():
    """Editing the inertia array in place would bypass its checks and leave the Euler tensor
    of the old one: the arrays are read-only."""
    body = mbs.RigidBody(mass=1.0, inertia=(1.0, 2.0, 2.5), name="b")
    with pytest.raises(ValueError, match="read-only"):
        body.inertia[0, 0] = -5.0
    with pytest.raises(ValueError, match="read-only"):
        body.euler_tensor[0, 0] = 0.0


def test_elements_keep_the_values_given_when_the_caller_changes_its_arrays():
    """One array reused to place several bodies, and a load's force array changed after
    compile: the bodies keep their own positions and the compiled model its force."""
    system = mbs.System()
    position, bodies = np.zeros(3), []
    for k in range(3):
        position[0] = float(k)
        bodies.append(system.add(mbs.PointMass(1.0, name=f"bead{k}")).set_state(
            position=position))
    rotation = np.eye(3)
    frame = system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="frame"))
    frame.set_state(rotation=rotation)
    force = np.array([1.0, 0.0, 0.0])
    system.add(mbs.forces.Load(bodies[0], force=force, name="push"))
    model = system.compile()
    rotation[:] = mbs.rotation_about_z(0.3)
    np.testing.assert_array_equal(frame.rotation, np.eye(3))
    assert [body.position[0] for body in bodies] == [0.0, 1.0, 2.0]
    before = mbs.simulate(model, "em", h=0.1, t_end=1.0).q[-1, 0]
    force[0] = 5.0
    after = mbs.simulate(model, "em", h=0.1, t_end=1.0).q[-1, 0]
    assert before == after == pytest.approx(0.5)  # x = F t^2 / (2 m) with F = 1
