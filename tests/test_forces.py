"""Potentials: values against hand formulas, derivatives against finite differences, and the
momentum-conserving discrete gradient (directionality and orthogonality, seed 003 (85)-(86))."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from mechanisms import (
    finite_difference,
    random_inertia,
    random_rotation,
    relative_error,
    rotation_generator,
    second_difference,
)

import mbs
from mbs.forces import AxisProduct, PointComponent, SquaredDistance, UserPotential


@dataclass
class Case:
    """A small system with one kind of potential, the potential by hand, and its symmetries."""

    system: mbs.System
    truth: object  # callable q -> V on the manifold (orthonormal directors)
    axes: list = field(default_factory=list)  # rotation axes under which V is invariant
    center: tuple = (0.0, 0.0, 0.0)
    hessian_from_energy: bool = False  # derivatives are approximated by the library
    model: mbs.Model | None = None

    def compile(self) -> mbs.Model:
        if self.model is None:
            self.model = self.system.compile()
        return self.model


def body_point(q_body, local):
    """x = phi + X_i d_i, written out by hand."""
    return q_body[:3] + sum(local[i] * q_body[3 + 3 * i:6 + 3 * i] for i in range(3))


def two_bodies(rng, gravity=None):
    system = mbs.System(gravity=gravity)
    a = system.add(mbs.RigidBody(1.3, random_inertia(rng), name="a"))
    a.set_state(position=(0.5, -0.2, 0.3), rotation=random_rotation(rng))
    b = system.add(mbs.RigidBody(0.8, random_inertia(rng, principal=True), name="b"))
    b.set_state(position=(-0.4, 0.6, 1.0), rotation=random_rotation(rng))
    p = system.add(mbs.PointMass(0.6, name="p")).set_state(position=(1.0, 1.0, -0.5))
    return system, a, b, p


ANY_AXIS = list(np.eye(3)) + [np.array([1.0, -2.0, 0.5]) / np.linalg.norm([1.0, -2.0, 0.5])]


def case_uniform_gravity(rng):
    gravity = np.array([1.0, -2.0, -9.0])
    system, a, b, p = two_bodies(rng, gravity=gravity)

    def truth(q):
        return -(1.3 * gravity @ q[0:3] + 0.8 * gravity @ q[12:15] + 0.6 * gravity @ q[24:27])

    return Case(system, truth, axes=[gravity / np.linalg.norm(gravity)])


def case_spring_bodies(rng):
    system, a, b, p = two_bodies(rng)
    pa, pb = np.array([0.7, -0.1, 0.2]), np.array([-0.3, 0.5, 1.2])
    system.add(mbs.forces.Spring(a, b, stiffness=7.0, rest_length=0.4, point_a=pa, point_b=pb))
    system.add(mbs.forces.Spring(b, p, stiffness=3.0, point_a=pb))  # rest = initial length
    la, lb = a.rotation.T @ (pa - a.position), b.rotation.T @ (pb - b.position)
    rest2 = np.linalg.norm(p.position - pb)

    def truth(q):
        xa, xb, xp = body_point(q[0:12], la), body_point(q[12:24], lb), q[24:27]
        return (0.5 * 7.0 * (np.linalg.norm(xb - xa) - 0.4) ** 2
                + 0.5 * 3.0 * (np.linalg.norm(xp - xb) - rest2) ** 2)

    return Case(system, truth, axes=ANY_AXIS)


def case_spring_ground(rng):
    """Springs to ground points on the z axis: invariant under rotations about z only."""
    system, a, b, p = two_bodies(rng)
    pa = np.array([0.6, -0.1, 0.4])
    system.add(mbs.forces.Spring(system.ground, a, stiffness=5.0, rest_length=0.2,
                                 point_a=(0.0, 0.0, 2.0), point_b=pa))
    system.add(mbs.forces.Spring(p, system.ground, stiffness=2.0, rest_length=0.0))
    la = a.rotation.T @ (pa - a.position)

    def truth(q):
        xa = body_point(q[0:12], la)
        return (0.5 * 5.0 * (np.linalg.norm(xa - (0.0, 0.0, 2.0)) - 0.2) ** 2
                + 0.5 * 2.0 * q[24:27] @ q[24:27])

    return Case(system, truth, axes=[np.array([0.0, 0.0, 1.0])])


def case_quartic_spring(rng):
    system, a, b, p = two_bodies(rng)
    pb = np.array([-0.3, 0.5, 1.2])
    system.add(mbs.forces.QuarticSpring(b, p, stiffness=50.0, length=1.0, point_a=pb))
    system.add(mbs.forces.QuarticSpring(a, b, stiffness=5.0, length=0.5))
    lb = b.rotation.T @ (pb - b.position)

    def truth(q):
        r1 = q[24:27] - body_point(q[12:24], lb)
        r2 = q[12:15] - q[0:3]
        return 0.5 * 50.0 * (r1 @ r1 - 1.0) ** 2 + 0.5 * 5.0 * (r2 @ r2 - 0.25) ** 2

    return Case(system, truth, axes=ANY_AXIS)


def central_truth(mu, center, mass, inertia_world, phi):
    """MacCullagh: V = -mu m / r - mu / (2 r^3) (tr J - 3 n.J n), J in world axes."""
    r_vec = phi - center
    r = np.linalg.norm(r_vec)
    n = r_vec / r
    value = -mu * mass / r
    if inertia_world is not None:
        value -= mu / (2 * r**3) * (np.trace(inertia_world) - 3.0 * n @ inertia_world @ n)
    return value


def case_central_gravity(rng, center=(0.0, 0.0, 0.0)):
    system, a, b, p = two_bodies(rng)
    system.add(mbs.forces.CentralGravity(mu=4.0, center=center))  # every body
    ja, jb = a.inertia, b.inertia

    def truth(q):
        def world(qb, inertia):
            rotation = np.column_stack([qb[3:6], qb[6:9], qb[9:12]])
            return rotation @ inertia @ rotation.T

        c = np.asarray(center)
        return (central_truth(4.0, c, 1.3, world(q[0:12], ja), q[0:3])
                + central_truth(4.0, c, 0.8, world(q[12:24], jb), q[12:15])
                + central_truth(4.0, c, 0.6, None, q[24:27]))

    return Case(system, truth, axes=ANY_AXIS, center=center)


def case_central_without_gradient_term(rng):
    system, a, b, p = two_bodies(rng)
    system.add(mbs.forces.CentralGravity(mu=2.0, center=(0.0, 0.0, -1.0), bodies=[a, p],
                                         gravity_gradient=False))
    c = np.array([0.0, 0.0, -1.0])

    def truth(q):
        return (central_truth(2.0, c, 1.3, None, q[0:3])
                + central_truth(2.0, c, 0.6, None, q[24:27]))

    return Case(system, truth, axes=ANY_AXIS, center=tuple(c))


def user_case(rng, with_derivatives: bool, symmetric: bool):
    system, a, b, p = two_bodies(rng)
    pa = np.array([0.7, -0.1, 0.2])
    la = a.rotation.T @ (pa - a.position)

    def energy(pi):
        return np.exp(0.3 * pi[0]) * np.cos(pi[1]) + pi[1] ** 3 + pi[0] * pi[1]

    def gradient(pi):
        return np.array([0.3 * np.exp(0.3 * pi[0]) * np.cos(pi[1]) + pi[1],
                         -np.exp(0.3 * pi[0]) * np.sin(pi[1]) + 3 * pi[1] ** 2 + pi[0]])

    def hessian(pi):
        e = np.exp(0.3 * pi[0])
        off = -0.3 * e * np.sin(pi[1]) + 1.0
        return np.array([[0.09 * e * np.cos(pi[1]), off],
                         [off, -e * np.cos(pi[1]) + 6 * pi[1]]])

    if symmetric:
        invariants = [SquaredDistance(a, p, point_a=pa), SquaredDistance(a, b)]

        def invariant_values(q):
            r1 = q[24:27] - body_point(q[0:12], la)
            r2 = q[12:15] - q[0:3]
            return np.array([r1 @ r1, r2 @ r2])
    else:
        direction = np.array([0.0, 0.6, 0.8])
        axis_a, axis_b = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 1.0]) / np.sqrt(2)
        lb_axis = b.rotation.T @ axis_b
        la_axis = a.rotation.T @ axis_a
        invariants = [PointComponent(a, direction, point=pa),
                      AxisProduct(a, axis_a, b, axis_b)]

        def invariant_values(q):
            u_a = sum(la_axis[i] * q[3 + 3 * i:6 + 3 * i] for i in range(3))
            u_b = sum(lb_axis[i] * q[15 + 3 * i:18 + 3 * i] for i in range(3))
            return np.array([direction @ body_point(q[0:12], la), u_a @ u_b])

    kwargs = {"gradient": gradient, "hessian": hessian} if with_derivatives else {}
    system.add(UserPotential(invariants, energy, name="user", **kwargs))
    return Case(system, lambda q: energy(invariant_values(q)),
                axes=ANY_AXIS if symmetric else [],
                hessian_from_energy=not with_derivatives)


def case_torsion_spring(rng, grounded: bool):
    """A torsion spring between two free bodies (invariant under every rotation), or on a
    cylindrical joint to the ground (no symmetry: turning the body about the axis is what
    the spring resists). The potential by hand needs the joint closed: see
    tests/test_torsion_spring.py."""
    system, a, b, p = two_bodies(rng)
    if grounded:
        joint = system.add(mbs.joints.Cylindrical(system.ground, a, point=(0.0, 0.0, 0.0),
                                                  axis=(0.0, 0.0, 1.0)))
        system.add(mbs.forces.TorsionSpring(joint, stiffness=2.0, rest_angle=-2.5))
        return Case(system, None)
    joint = system.add(mbs.joints.Revolute(a, b, point=(0.1, 0.2, 0.6), axis=(1.0, -2.0, 0.5)))
    system.add(mbs.forces.TorsionSpring(joint, stiffness=3.0, rest_angle=0.4))
    return Case(system, None, axes=ANY_AXIS)


CASES = {
    "uniform_gravity": case_uniform_gravity,
    "spring_bodies": case_spring_bodies,
    "spring_ground": case_spring_ground,
    "quartic_spring": case_quartic_spring,
    "central_gravity": case_central_gravity,
    "central_gravity_offset": lambda rng: case_central_gravity(rng, center=(0.5, -1.0, 2.0)),
    "central_point_only": case_central_without_gradient_term,
    "user_derivatives": lambda rng: user_case(rng, True, True),
    "user_fd": lambda rng: user_case(rng, False, True),
    "user_not_invariant": lambda rng: user_case(rng, True, False),
    "torsion_spring": lambda rng: case_torsion_spring(rng, False),
    "torsion_spring_ground": lambda rng: case_torsion_spring(rng, True),
}


def on_manifold(rng, model: mbs.Model) -> np.ndarray:
    """Random state with orthonormal directors (needed where the truth uses R)."""
    q = rng.normal(0.0, 1.0, model.n)
    for body in model.bodies:
        if body.kind == "rigid":
            start = body.coordinates.start
            q[start + 3:start + 12] = random_rotation(rng).T.ravel()
    return q


@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("torsion")])
def test_potential_matches_hand_formula(rng, name):
    case = CASES[name](rng)
    model = case.compile()
    for _ in range(3):
        q = on_manifold(rng, model)
        assert model.potential(q) == pytest.approx(case.truth(q), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_and_hessian_match_finite_differences(rng, name):
    case = CASES[name](rng)
    model = case.compile()
    q = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)  # off the manifold
    gradient = model.potential_gradient(q)
    assert relative_error(gradient, finite_difference(model.potential, q)[0]) < 1e-6
    hessian = model.potential_hessian(q)
    assert hessian.shape == (model.n, model.n)
    if case.hessian_from_energy:  # the gradient itself is a difference quotient
        reference = second_difference(model.potential, q)
    else:
        reference = finite_difference(model.potential_gradient, q)
    assert relative_error(hessian, reference) < 1e-6
    assert relative_error(hessian, hessian.toarray().T) < 1e-14


def directionality_error(model, q0, q1) -> float:
    """|V1 - V0 - D.(q1 - q0)| relative to max(|V0|, |V1|, sum |D_i dq_i|)."""
    v0, v1 = model.potential(q0), model.potential(q1)
    discrete = model.potential_discrete_gradient(q0, q1)
    terms = np.abs(discrete * (q1 - q0))
    scale = max(abs(v0), abs(v1), terms.sum(), 1e-300)
    return abs(v1 - v0 - discrete @ (q1 - q0)) / scale


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [0.5, 1e-2, 1e-5, 1e-6, 3e-7, 1e-9])
def test_discrete_gradient_directionality(rng, name, size):
    case = CASES[name](rng)
    model = case.compile()
    q0 = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)
    q1 = q0 + size * rng.standard_normal(model.n)
    assert directionality_error(model, q0, q1) <= 1e-12


@pytest.mark.parametrize("name", [n for n in CASES if n != "user_not_invariant"])
def test_discrete_gradient_orthogonality(rng, name):
    """D^G V(q0, q1) . (xi q_mid) = 0 for rotation-invariant potentials (seed 003 (85))."""
    case = CASES[name](rng)
    model = case.compile()
    for size in (0.5, 1e-3, 1e-8):
        q0 = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)
        q1 = q0 + size * rng.standard_normal(model.n)
        discrete = model.potential_discrete_gradient(q0, q1)
        mid = 0.5 * (q0 + q1)
        for axis in case.axes:
            xi = rotation_generator(model, mid, axis, case.center)
            terms = np.abs(discrete * xi).sum()
            assert abs(discrete @ xi) <= 1e-12 * max(terms, 1e-300), (axis, size)


def test_non_invariant_user_potential_is_not_orthogonal(rng):
    """Sanity check of the orthogonality test itself: a potential of PointComponent and
    AxisProduct invariants is not rotation invariant, and the test detects it."""
    case = user_case(rng, True, False)
    model = case.compile()
    q0 = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)
    q1 = q0 + 0.3 * rng.standard_normal(model.n)
    discrete = model.potential_discrete_gradient(q0, q1)
    xi = rotation_generator(model, 0.5 * (q0 + q1), (1.0, 0.0, 0.0))
    assert abs(discrete @ xi) > 1e-3


def test_discrete_gradient_of_equal_states_is_gradient(rng):
    for name in ("spring_bodies", "central_gravity", "user_fd"):
        model = CASES[name](rng).compile()
        q = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)
        assert relative_error(model.potential_discrete_gradient(q, q),
                              model.potential_gradient(q)) < 1e-14


def test_gravity_gradient_matches_point_cloud(rng):
    """Far from the centre the MacCullagh term equals the exact potential of a symmetric cloud
    of particles with the same mass and inertia, up to O((size / r)^2) of that term."""
    half = rng.normal(0.0, 0.4, (4, 3))
    positions = np.vstack([half, -half])  # centrally symmetric: odd moments vanish
    masses = np.tile(rng.uniform(0.5, 1.0, 4), 2)
    second = np.einsum("k,ki,kj->ij", masses, positions, positions)
    inertia = np.trace(second) * np.eye(3) - second
    mu, phi, rotation = 3.0, np.array([30.0, -20.0, 25.0]), random_rotation(rng)
    system = mbs.System()
    body = system.add(mbs.RigidBody(masses.sum(), inertia, name="satellite"))
    body.set_state(position=phi, rotation=rotation)
    system.add(mbs.forces.CentralGravity(mu))
    model = system.compile()
    q0, _ = model.initial_state()
    cloud = -np.sum(mu * masses / np.linalg.norm(phi + positions @ rotation.T, axis=1))
    monopole = -mu * masses.sum() / np.linalg.norm(phi)
    tidal_model = model.potential(q0) - monopole
    tidal_cloud = cloud - monopole
    assert abs(tidal_cloud) > 1e-9
    assert tidal_model == pytest.approx(tidal_cloud, rel=1e-2)


def test_uniform_gravity_acts_on_every_body_and_on_none_when_off(rng):
    system, a, b, p = two_bodies(rng)
    assert system.compile().potential(np.ones(27)) == 0.0
    on = two_bodies(rng, gravity=(0, 0, -10.0))[0].compile()
    np.testing.assert_allclose(on.potential_gradient(np.zeros(27)).reshape(-1, 3)[[0, 4, 8]],
                               [[0, 0, 13.0], [0, 0, 8.0], [0, 0, 6.0]])


@pytest.mark.parametrize("name", list(CASES))
def test_discrete_gradient_is_consistent_for_small_steps(rng, name):
    """D^G V(q0, q1) -> grad V(q_mid) as q1 -> q0, without amplified round-off."""
    model = CASES[name](rng).compile()
    q0 = model.initial_state()[0] + 0.2 * rng.standard_normal(model.n)
    for size in (1e-5, 1e-7, 1e-9, 1e-12):
        q1 = q0 + size * rng.standard_normal(model.n)
        gradient = model.potential_gradient(0.5 * (q0 + q1))
        tolerance = 1e-5 if name == "user_fd" else 1e-7  # its gradient is a difference
        assert relative_error(model.potential_discrete_gradient(q0, q1), gradient) < tolerance


def test_em_conserves_the_energy_of_springs_at_small_steps_without_drift():
    """Three point masses on Hookean springs (no gravity, no constraints): at h = 1e-4 most
    steps move each spring's squared length so little that V~1 - V~0 is known only to its
    round-off, and the discrete gradient must still not err by the same sign step after
    step. Round-off alone changes the energy by about eps times the springs' energy scale
    k |d| (L + l0) (d the stretch) per step in random directions; the bound is ten times
    that random walk over the run."""
    system = mbs.System(gravity=None)
    starts = [((1.0, 0.0, 0.0), (0.0, 0.5, 0.0)), ((2.0, 0.2, 0.0), (0.0, 0.0, 0.0)),
              ((3.0, 0.0, 0.1), (0.3, 0.0, 0.0))]
    masses = []
    for k, ((position, velocity), mass) in enumerate(zip(starts, (1.0, 2.0, 0.5))):
        masses.append(system.add(mbs.PointMass(mass, name=f"m{k}")))
        masses[-1].set_state(position=position, velocity=velocity)
    springs = [(system.ground, masses[0], 40.0), (masses[0], masses[1], 25.0),
               (masses[1], masses[2], 60.0)]
    for a, b, stiffness in springs:
        system.add(mbs.forces.Spring(a, b, stiffness=stiffness, rest_length=1.0,
                                     point_a=(0.0, 0.0, 0.0) if a is system.ground else None))
    solution = mbs.simulate(system.compile(), "em", h=1e-4, t_end=1.0)
    energy = solution.energy()
    positions = [np.zeros((solution.t.size, 3))] + [solution.body(m.name).position
                                                     for m in masses]
    spring_scale = np.zeros(solution.t.size)
    for (a, b), (_, _, stiffness) in zip([(0, 1), (1, 2), (2, 3)], springs):
        length = np.linalg.norm(positions[b] - positions[a], axis=1)
        stretch = np.abs(length - 1.0)
        spring_scale += stiffness * stretch * (length + 1.0 + 0.5 * stretch)
    per_step = np.finfo(float).eps * (energy[0] + spring_scale.max())
    bound = 10.0 * per_step * np.sqrt(solution.t.size - 1)
    assert np.abs(energy - energy[0]).max() <= bound


def test_discrete_gradient_independent_of_initial_invariant_scale(rng):
    """A spring that starts almost collapsed (|x|^2 = 1e-10 at the initial state) later
    stretched to length ~1: tiny steps must not divide round-off by a tiny pi1 - pi0."""
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0, name="a"))
    b = system.add(mbs.PointMass(1.0, name="b")).set_state(position=(1e-5, 0.0, 0.0))
    system.add(mbs.forces.Spring(a, b, stiffness=100.0, rest_length=1.0))
    system.add(mbs.forces.CentralGravity(1.0, center=(0.0, 0.0, -5.0)))
    model = system.compile()
    q0 = np.array([0.0, 0.0, 0.0, 1.3, 0.2, 0.1])
    for size in (1e-6, 1e-8, 1e-10, 1e-12):
        q1 = q0 + size * rng.standard_normal(6)
        assert relative_error(model.potential_discrete_gradient(q0, q1),
                              model.potential_gradient(0.5 * (q0 + q1))) < 1e-9
        assert directionality_error(model, q0, q1) <= 1e-12


def test_remembered_invariants_follow_the_configuration(rng):
    """The two-entry cache of PotentialGroup.invariants is keyed by value: a configuration
    changed in place, or a third one, gets fresh invariants, and callers get copies."""
    sys_ = mbs.System()
    a = sys_.add(mbs.PointMass(mass=1.0, name="a"))
    b = sys_.add(mbs.PointMass(mass=1.0, name="b"))
    a.set_state(position=(0.0, 0.0, 0.0))
    b.set_state(position=(1.0, 0.0, 0.0))
    sys_.add(mbs.forces.Spring(a, b, stiffness=2.0, rest_length=0.5))
    model = sys_.compile()
    group = model.potential_groups[0]
    q = rng.standard_normal(model.n)

    def fresh(x):
        return group.table.value(x).reshape(group.n_elements, group.n_invariants)

    first = group.invariants(q)
    np.testing.assert_array_equal(first, fresh(q))
    first += 1.0  # a caller's in-place change must not reach the cache
    np.testing.assert_array_equal(group.invariants(q), fresh(q))
    q[0] += 0.5  # same array, new content
    np.testing.assert_array_equal(group.invariants(q), fresh(q))
    for _ in range(3):  # more configurations than entries
        other = rng.standard_normal(model.n)
        np.testing.assert_array_equal(group.invariants(other), fresh(other))
    np.testing.assert_array_equal(group.invariants(q), fresh(q))


@pytest.mark.parametrize("scheme", ["em", "rattle"])
def test_zero_length_spring_passes_through_zero_length(scheme):
    """V = k/2 |x|^2 (rest length 0) is regular where the spring's length vanishes. A point
    mass starts at the anchor and oscillates through it. The schemes' exact discrete
    solutions of this linear oscillator: EM is the implicit midpoint rule, which turns
    (omega x, v) by 2 atan(omega h / 2) per step; RATTLE is Stormer-Verlet, x_n =
    h v0 sin(n theta) / sin(theta) with cos(theta) = 1 - (omega h)^2 / 2."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(2.0, name="bob"))
    bob.set_state(position=(0.0, 0.0, 0.0), velocity=(1.5, 0.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=50.0, rest_length=0.0,
                                 point_a=(0.0, 0.0, 0.0)))
    h, omega, speed = 0.01, 5.0, 1.5
    solution = mbs.simulate(system.compile(), scheme, h=h, t_end=2.0)
    steps = np.arange(solution.t.size)
    if scheme == "em":
        expected = speed / omega * np.sin(2.0 * np.arctan(omega * h / 2.0) * steps)
    else:
        theta = np.arccos(1.0 - (omega * h) ** 2 / 2.0)
        expected = h * speed * np.sin(theta * steps) / np.sin(theta)
    # the phase's round-off grows linearly: 200 steps * eps * amplitude 0.3 ~ 1.3e-14
    np.testing.assert_allclose(solution.q[:, 0], expected, rtol=0.0, atol=1e-13)


def test_a_zero_rest_length_by_default_is_pointed_out():
    """A spring whose points coincide at the initial pose gets rest length 0 by default (a
    zero-length spring): a warning says so unless rest_length=0 is given."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=5.0, point_a=(0.0, 0.0, 0.0),
                                 name="tether"))
    with pytest.warns(UserWarning, match=r"Spring 'tether'.* rest length .* is 0"):
        system.compile()
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=5.0, rest_length=0.0,
                                 point_a=(0.0, 0.0, 0.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        system.compile()


def test_spring_and_damper_geometry_is_that_of_the_initial_pose_at_compile():
    """Elements created before the bodies' initial state is set take the attachment points
    of the initial pose at compile(), as joints do: no early warning or error from the
    pose at creation. A spring created while its bob still sat at its anchor, once the bob
    is placed 1 m away, has the rest length 1 (V = 0 at the initial pose)."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        system.add(mbs.forces.Spring(system.ground, bob, stiffness=5.0, point_a=(0, 0, 0),
                                     name="tether"))
        system.add(mbs.forces.Damper(system.ground, bob, damping=1.0, point_a=(0, 0, 0),
                                     name="dash"))
        bob.set_state(position=(1.0, 0.0, 0.0))
        model = system.compile()
    assert model.potential(model.q0) == 0.0
    assert model.potential(model.q0 + np.array([1.0, 0.0, 0.0])) == 0.5 * 5.0 * 1.0**2


@pytest.mark.parametrize("stiffness, h", [(1e8, 1e-3), (1e8, 2e-5), (1e6, 1e-4)])
def test_stiff_preloaded_spring_pendulum_runs_with_em(stiffness, h):
    """A mass hangs on a stiff spring of rest length 1 stretched by its weight, m g cos(0.5) /
    k (8.8e-8 m at k = 1e8). The stretch is a difference of two lengths near 1, so V~
    carries a round-off of eps k |d| (L + l0), far above eps V~: the discrete gradient must
    take that as its round-off level, or it divides noise by tiny invariant changes and
    Newton fails. EM then runs without refinement and keeps the energy: the model has 7
    significant digits in |d| but the energy error is a sum of 20 steps' round-off
    (~ 20 eps) against E0 ~ k d^2 / 2 + m g y."""
    mass, gravity, angle = 1.0, 9.81, 0.5
    system = mbs.System(gravity=(0.0, -gravity, 0.0))
    bob = system.add(mbs.PointMass(mass, name="bob"))
    length = 1.0 + mass * gravity * np.cos(angle) / stiffness
    bob.set_state(position=(length * np.sin(angle), -length * np.cos(angle), 0.0))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=stiffness, rest_length=1.0,
                                 point_a=(0.0, 0.0, 0.0), name="rod"))
    solution = mbs.simulate(system.compile(), "em", h=h, t_end=20 * h)
    assert solution.stats["refined_steps"] == []
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-13 * np.abs(energy[0])


def test_spring_with_rest_length_between_coinciding_points_is_rejected():
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=1.0, rest_length=0.5,
                                 point_a=(0.0, 0.0, 0.0), name="stuck"))
    with pytest.raises(mbs.ModelError, match="coincide at the initial pose.*rest_length=0"):
        system.compile()


def test_the_energy_of_each_element_along_a_run():
    """A wheel on a hinge with a torsion spring, and a bob hung on a spring from its rim:
    the energy of each element alone follows its hand formula along the run (1/2 k
    (l - l0)^2 from the bob's distance to the attachment point, 1/2 k (theta - theta0)^2
    from the joint angle, m g z for gravity), to round-off of the invariants (1e-12 of the
    energy scale), and the elements' energies sum to the model's potential."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    wheel = system.add(mbs.RigidBody(3.0, (0.2, 0.2, 0.3), name="wheel"))
    wheel.set_state(angular_velocity=(0.0, 0.0, 1.5))
    hinge = system.add(mbs.joints.Revolute(system.ground, wheel, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="hinge"))
    system.add(mbs.forces.TorsionSpring(hinge, stiffness=4.0, rest_angle=0.3, name="coil"))
    bob = system.add(mbs.PointMass(0.5, name="bob"))
    bob.set_state(position=(0.4, 0.0, -1.2))
    system.add(mbs.forces.Spring(wheel, bob, stiffness=80.0, rest_length=1.0,
                                 point_a=(0.4, 0.0, 0.0), name="rope"))
    run = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    scale = np.abs(run.potential_energy()).max()

    attachment = run.point("wheel", (0.4, 0.0, 0.0))[0]
    length = np.linalg.norm(run.body("bob").position - attachment, axis=1)
    np.testing.assert_allclose(run.potential_energy("rope"), 40.0 * (length - 1.0) ** 2,
                               rtol=0, atol=1e-12 * scale)
    angle = run.joint("hinge").position
    np.testing.assert_allclose(run.potential_energy("coil"), 2.0 * (angle - 0.3) ** 2,
                               rtol=0, atol=1e-12 * scale)
    heights = np.array([run.body(name).position[:, 2] for name in ("wheel", "bob")])
    np.testing.assert_allclose(run.potential_energy("gravity"),
                               9.81 * np.array([3.0, 0.5]) @ heights, rtol=0,
                               atol=1e-12 * scale)
    np.testing.assert_allclose(sum(run.potential_energy(name)
                                   for name in ("rope", "coil", "gravity")),
                               run.potential_energy(), rtol=0, atol=1e-12 * scale)
    with pytest.raises(mbs.UnknownNameError, match="no element 'hinge' with a potential; "
                                                   "this model's: coil, gravity, rope"):
        run.potential_energy("hinge")


def test_a_user_potential_of_one_invariant_needs_no_list():
    """UserPotential(invariant, ...) is UserPotential([invariant], ...): the same energy,
    0.5 pi^2 with pi = |x|^2 = 1.25 at the initial state (exact in floating point)."""
    energies = []
    for wrap in (lambda invariant: invariant, lambda invariant: [invariant]):
        system = mbs.System()
        bob = system.add(mbs.PointMass(1.0, name="bob"))
        bob.set_state(position=(1.0, 0.5, 0.0))
        system.add(UserPotential(wrap(SquaredDistance(system.ground, bob, point_a=(0, 0, 0))),
                                 lambda pi: 0.5 * pi[0] ** 2, name="well"))
        model = system.compile()
        energies.append(model.potential(model.initial_state()[0]))
    assert energies == [0.5 * 1.25**2] * 2


def test_user_functions_of_the_wrong_shape_are_refused_at_compile():
    """compile() evaluates user potentials and constraints at the initial state: a value of
    the wrong shape or type is an error there, not at the first step of a run."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.5, 0.0, 0.0))
    system.add(UserPotential(SquaredDistance(system.ground, bob), lambda pi: np.r_[pi, pi],
                             name="pair"))
    with pytest.raises(mbs.ForceFunctionError, match=r"UserPotential 'pair': the energy "
                                                     r"function returned shape \(2,\)"):
        system.compile()
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.UserConstraint([bob], lambda q: [0.5 * (q @ q - 1.0)],
                                         lambda q: [q], lambda q, lam: np.eye(2), name="sphere"))
    with pytest.raises(mbs.ForceFunctionError, match=r"UserConstraint 'sphere': the hessian "
                                                     r"function returned shape \(2, 2\)"):
        system.compile()


def test_the_summary_takes_the_angular_momentum_about_a_user_potentials_anchor():
    """A central pull towards P = (1, 2, -0.5) written as a user potential of the distance
    from P conserves the angular momentum about P, as the same pull as a spring does: the
    summary takes it about P, and it stays at round-off."""
    anchor = np.array([1.0, 2.0, -0.5])
    system = mbs.System()
    ball = system.add(mbs.RigidBody(mass=1.0, inertia=(0.1, 0.2, 0.25), name="ball"))
    ball.set_state(position=(1.5, 2.0, -0.5), velocity=(0.0, 1.0, 0.3),
                   angular_velocity=(1.0, 2.0, 3.0))
    system.add(UserPotential(SquaredDistance(system.ground, ball, point_a=anchor),
                             lambda pi: 2.0 * pi[0], name="pull"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    assert np.array_equal(solution.momentum_reference_point(), anchor)
    momentum = solution.angular_momentum(about=anchor)
    assert np.abs(momentum - momentum[0]).max() <= 1e-13 * np.abs(momentum).max()
    assert f"angular momentum about {anchor}" in solution.conservation_summary()


def test_a_user_potential_defined_on_one_side_of_its_initial_state_compiles():
    """E = pi^1.5 of a squared distance that starts at 0 is undefined for pi < 0, where the
    derivative check's differences step: compile() evaluates the functions at the initial
    state itself and only compares derivatives where they can be evaluated."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(velocity=(1.0, 0.0, 0.0))
    with np.errstate(invalid="ignore"):
        system.add(UserPotential(SquaredDistance(system.ground, bob), lambda pi: pi[0] ** 1.5,
                                 gradient=lambda pi: [1.5 * np.sqrt(pi[0])], name="soft"))
        solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.5)
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-13 * energy[0]


@pytest.mark.parametrize("damping", [None, 0.5])
def test_the_summary_of_a_model_at_rest_with_zero_energy_has_no_nan(damping):
    """A spring pair at its rest length, nothing moving: E0 = 0 and no kinetic energy, so
    there is no scale to divide by; the summary gives the absolute change (0)."""
    system = mbs.System()
    first = system.add(mbs.PointMass(1.0, name="first"))
    second = system.add(mbs.PointMass(1.0, name="second"))
    second.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.Spring(first, second, stiffness=100.0, damping=damping,
                                 name="spring"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's 0/0 warning included
        summary = solution.conservation_summary()
    energy_line = summary.splitlines()[1]
    assert "nan" not in energy_line
    assert ("max |E - E0| = 0.000e+00 (E0 = 0 and no motion)" if damping is None else
            "max |E - E0 - W| = 0.000e+00 (E0 = 0, no motion and no work)") in energy_line
