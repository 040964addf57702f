"""The compiled Model: heavy top of seed 003 section 6.2, a model with every element type
against finite differences, observables, index maps, initial states, a 1000-link chain."""

from __future__ import annotations

import warnings

import heavy_top
import numpy as np
import pytest
import scipy.sparse as sp
from mechanisms import (
    finite_difference,
    parallelogram_chain,
    random_inertia,
    random_rotation,
    relative_error,
    rotation_generator,
    spatial_four_bar,
    spherical_chain,
    stacked_four_bars,
)

import mbs
from mbs.forces import AxisProduct, PointComponent, SquaredDistance, UserPotential

# -- heavy top (seed 003, section 6.2) ------------------------------------------------------
M_TOP, I_TOP, L_TOP, G = 0.7069, 5.3014e-4, 0.075, 9.81
ALPHA0, OMEGA_P = np.pi / 3, 10.0


def paper_rotation(alpha):
    """R(alpha_0) of eq. (108)."""
    c, s = np.cos(alpha), np.sin(alpha)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def paper_constraints(q, length):
    """g_int (103) stacked on g_ext (104)."""
    phi, d1, d2, d3 = q[0:3], q[3:6], q[6:9], q[9:12]
    return np.concatenate([
        [0.5 * (d1 @ d1 - 1), 0.5 * (d2 @ d2 - 1), 0.5 * (d3 @ d3 - 1),
         d1 @ d2, d1 @ d3, d2 @ d3],
        phi / length - d3])


@pytest.fixture(scope="module")
def top_model():
    return heavy_top.build().compile()


def test_heavy_top_sizes(top_model):
    assert (top_model.n, top_model.m, top_model.degrees_of_freedom) == (12, 9, 3)
    assert top_model.redundancies == []


def test_heavy_top_mass_matrix_is_eq_101(top_model):
    e = 0.5 * (I_TOP + I_TOP - I_TOP)
    expected = np.diag(np.repeat([M_TOP, e, e, e], 3))
    np.testing.assert_allclose(top_model.mass_matrix.toarray(), expected, rtol=1e-15)
    np.testing.assert_allclose(top_model.inverse_mass_matrix.toarray(),
                               np.diag(1.0 / np.diag(expected)), rtol=1e-15)
    assert sp.issparse(top_model.mass_matrix)


def test_asymmetric_top_mass_matrix_is_eq_101():
    """Same top built through the public API with distinct principal moments."""
    i1, i2, i3 = 4e-4, 5e-4, 6e-4
    system = mbs.System(gravity=(0.0, 0.0, -G))
    top = system.add(mbs.RigidBody(mass=M_TOP, inertia=(i1, i2, i3), name="top"))
    rotation = paper_rotation(ALPHA0)
    top.set_state(position=rotation @ (0.0, 0.0, L_TOP), rotation=rotation)
    system.add(mbs.joints.Spherical(system.ground, top, point=(0.0, 0.0, 0.0)))
    model = system.compile()
    e = [0.5 * (i2 + i3 - i1), 0.5 * (i3 + i1 - i2), 0.5 * (i1 + i2 - i3)]
    np.testing.assert_allclose(model.mass_matrix.toarray(),
                               np.diag(np.repeat([M_TOP, *e], 3)), rtol=1e-14)


def test_heavy_top_constraints_are_eqs_103_104(top_model, rng):
    for _ in range(5):
        q = rng.standard_normal(12)
        np.testing.assert_allclose(top_model.constraints(q), paper_constraints(q, L_TOP),
                                   rtol=1e-13, atol=1e-14)
    assert top_model.constraint_rows["top"].tolist() == list(range(6))
    assert top_model.constraint_rows["tip"].tolist() == [6, 7, 8]


def test_heavy_top_initial_state_is_eqs_108_to_112(top_model):
    q0, p0 = top_model.initial_state()
    rotation = paper_rotation(ALPHA0)
    np.testing.assert_allclose(q0[:3], rotation @ (0.0, 0.0, L_TOP), atol=1e-15)
    for i in range(3):
        np.testing.assert_allclose(q0[3 + 3 * i:6 + 3 * i], rotation[:, i], atol=1e-15)
    assert q0[2] == pytest.approx(0.0375, rel=1e-12)  # the precession height
    omega_s = (M_TOP * G * L_TOP / (I_TOP * OMEGA_P)
               + (I_TOP + M_TOP * L_TOP**2 - I_TOP) / I_TOP * OMEGA_P * np.cos(ALPHA0))
    assert omega_s == pytest.approx(135.6, abs=0.05)  # value printed in the paper
    omega0 = OMEGA_P * np.array([0.0, 0.0, 1.0]) + omega_s * q0[9:12]
    velocities = top_model.apply_inverse_mass(p0).reshape(4, 3)
    np.testing.assert_allclose(velocities, np.cross(omega0, q0.reshape(4, 3)), atol=1e-12)
    # p0 = M v0 and the state satisfies g and G M^-1 p
    assert np.max(np.abs(top_model.constraints(q0))) < 1e-15
    assert np.max(np.abs(top_model.velocity_constraints(q0, p0))) < 1e-12


def test_heavy_top_momentum_map_and_energy_eq_107(top_model, rng):
    for _ in range(3):
        q, p = rng.standard_normal(12), rng.standard_normal(12)
        expected = sum(np.cross(q[3 * i:3 * i + 3], p[3 * i:3 * i + 3]) for i in range(4))
        np.testing.assert_allclose(top_model.angular_momentum(q, p), expected, atol=1e-14)
        m_diag = np.repeat([M_TOP, I_TOP / 2, I_TOP / 2, I_TOP / 2], 3)
        kinetic = 0.5 * np.sum(p * p / m_diag)
        assert top_model.kinetic_energy(p) == pytest.approx(kinetic, rel=1e-14)
        potential = M_TOP * G * q[2]  # V = -m b . phi with b = -9.81 e3
        assert top_model.potential(q) == pytest.approx(potential, rel=1e-14)
        assert top_model.energy(q, p) == pytest.approx(kinetic + potential, rel=1e-14)
        np.testing.assert_allclose(top_model.linear_momentum(p), p[:3])


def test_heavy_top_discrete_derivatives_conserve_vertical_momentum(top_model, rng):
    q0, _ = top_model.initial_state()
    q1 = q0 + 0.05 * rng.standard_normal(12)
    mid = 0.5 * (q0 + q1)
    xi = rotation_generator(top_model, mid, (0.0, 0.0, 1.0))
    assert abs(top_model.potential_discrete_gradient(q0, q1) @ xi) < 1e-15
    # the internal rows are invariant; g_ext = phi/l - d3 is equivariant, so
    # G_mid xi q_mid = e3 x g(q_mid), which vanishes on the manifold
    jac = top_model.constraint_discrete_jacobian(q0, q1)
    np.testing.assert_allclose(
        jac @ xi, np.concatenate([np.zeros(6), np.cross((0.0, 0.0, 1.0),
                                                        top_model.constraints(mid)[6:])]),
        atol=1e-14)


# -- a model with every element type ------------------------------------------------------
def kitchen_sink(rng) -> mbs.System:
    """Every joint type, every force type, rigid bodies with principal and non-principal
    inertia, point masses and ground attachments, in one system (state consistent)."""
    system = mbs.System(gravity=(0.5, -1.0, -9.81))
    bodies = []
    for k in range(7):
        body = mbs.RigidBody(rng.uniform(0.5, 2.0), random_inertia(rng, principal=k % 2 == 0),
                             name=f"r{k}")
        body.set_state(position=rng.normal(0.0, 1.0, 3), rotation=random_rotation(rng))
        bodies.append(system.add(body))
    p1 = system.add(mbs.PointMass(0.7, name="p1")).set_state(position=(1.0, 2.0, 0.5))
    p2 = system.add(mbs.PointMass(1.1, name="p2")).set_state(position=(-1.0, 0.5, 1.5))
    r = bodies
    j = mbs.joints
    system.add(j.Spherical(system.ground, r[0], point=r[0].position + (0.3, 0, 0)))
    system.add(j.Revolute(r[0], r[1], point=r[1].position + (0, 0.2, 0), axis=(1, 1, 0)))
    system.add(j.Universal(r[1], r[2], point=r[2].position, axis_a=(0, 0, 1),
                           axis_b=(1, 0, 0)))
    system.add(j.Cylindrical(system.ground, r[3], point=(0.1, 0.2, 0.3), axis=(0, 1, 1)))
    system.add(j.Prismatic(r[3], r[4], point=r[4].position, axis=(1, 0, 2)))
    system.add(j.Rigid(r[4], r[5]))
    system.add(j.Distance(r[5], p1, point_a=r[5].position + (0.1, 0.1, 0.1)))
    system.add(j.Distance(system.ground, p2, point_a=(0.0, 0.0, 3.0)))
    system.add(j.Spherical(r[6], p2, point=p2.position))

    initial = np.sum((r[0].position - r[1].position) ** 2)

    def quartic(q):
        r12 = q[0:3] - q[12:15]
        return np.array([(r12 @ r12) ** 2 - initial**2])

    def quartic_jacobian(q):
        r12 = q[0:3] - q[12:15]
        out = np.zeros((1, 24))
        out[0, 0:3] = 4 * (r12 @ r12) * r12
        out[0, 12:15] = -out[0, 0:3]
        return out

    system.add(j.UserConstraint([r[0], r[1]], quartic, quartic_jacobian, name="user_c"))
    f = mbs.forces
    system.add(f.Spring(r[2], p1, stiffness=20.0, rest_length=0.5,
                        point_a=r[2].position + (0, 0.3, 0)))
    system.add(f.Spring(system.ground, r[6], stiffness=3.0, point_a=(1.0, 1.0, 1.0)))
    system.add(f.QuarticSpring(r[3], r[6], stiffness=5.0, length=1.0))
    system.add(f.CentralGravity(2.0, center=(0.0, 0.0, -6.0), bodies=[r[1], r[5], p1]))
    system.add(UserPotential(
        [SquaredDistance(r[4], p2), PointComponent(r[2], (1, 0, 0)),
         AxisProduct(r[0], (0, 0, 1), system.ground, (0, 1, 0))],
        energy=lambda pi: np.sin(pi[0]) * pi[1] + pi[2] ** 4,
        gradient=lambda pi: [np.cos(pi[0]) * pi[1], np.sin(pi[0]), 4 * pi[2] ** 3],
        name="user_v"))  # Hessian by differences of the gradient (see test_forces for none)
    system.add(UserPotential(
        [SquaredDistance(r[1], r[6])], energy=lambda pi: 1.0 / (1.0 + pi[0]),
        gradient=lambda pi: [-1.0 / (1.0 + pi[0]) ** 2],
        hessian=lambda pi: [[2.0 / (1.0 + pi[0]) ** 3]], name="user_w"))
    return system


@pytest.fixture(scope="module")
def sink_model():
    return kitchen_sink(np.random.default_rng(7)).compile()


def test_kitchen_sink_sizes_and_maps(sink_model):
    model = sink_model
    assert model.n == 7 * 12 + 2 * 3
    joint_equations = 3 + 5 + 4 + 4 + 5 + 6 + 1 + 1 + 3 + 1
    assert model.m == 7 * 6 + joint_equations
    assert model.degrees_of_freedom == 7 * 6 + 2 * 3 - joint_equations  # a tree + 1 scalar
    rows = np.sort(np.concatenate(list(model.constraint_rows.values())))
    np.testing.assert_array_equal(rows, np.arange(model.m))  # every row owned exactly once
    starts = sorted(model.coordinates(b.name).start for b in model.bodies)
    assert starts == [12 * k for k in range(7)] + [84, 87]
    assert model.coordinates("p2") == slice(87, 90)
    with pytest.raises(mbs.UnknownNameError, match="no body named"):
        model.coordinates("nope")
    assert not model.is_large
    assert len(model.joints) == 10 and len(model.forces) == 7


def test_kitchen_sink_derivatives_match_finite_differences(sink_model, rng):
    model = sink_model
    q0, _ = model.initial_state()
    for scale in (0.05, 0.3):
        q = q0 + scale * rng.standard_normal(model.n)
        mult = rng.standard_normal(model.m)
        assert relative_error(model.potential_gradient(q),
                              finite_difference(model.potential, q)[0]) < 1e-6
        assert relative_error(model.potential_hessian(q),
                              finite_difference(model.potential_gradient, q)) < 1e-6
        assert relative_error(model.constraint_jacobian(q),
                              finite_difference(model.constraints, q)) < 1e-6
        assert relative_error(
            model.constraint_hessian_product(q, mult),
            finite_difference(lambda x, w=mult: model.constraint_jacobian(x).T @ w, q)) < 1e-6


def test_kitchen_sink_discrete_derivatives_directionality(sink_model, rng):
    model = sink_model
    q0 = model.initial_state()[0] + 0.1 * rng.standard_normal(model.n)
    for size in (0.3, 1e-4, 1e-8):
        q1 = q0 + size * rng.standard_normal(model.n)
        dq = q1 - q0
        v0, v1 = model.potential(q0), model.potential(q1)
        grad = model.potential_discrete_gradient(q0, q1)
        scale = max(abs(v0), abs(v1), np.abs(grad * dq).sum())
        assert abs(v1 - v0 - grad @ dq) <= 1e-12 * scale
        jac = model.constraint_discrete_jacobian(q0, q1)
        g0, g1 = model.constraints(q0), model.constraints(q1)
        scale_g = np.maximum.reduce([np.abs(g0), np.abs(g1), abs(jac) @ np.abs(dq),
                                     np.full(model.m, 1e-300)])
        assert np.max(np.abs(g1 - g0 - jac @ dq) / scale_g) <= 1e-12


def test_observables_on_states_and_trajectories(sink_model, rng):
    model = sink_model
    qs = rng.standard_normal((4, model.n))
    ps = rng.standard_normal((4, model.n))
    minv = model.inverse_mass_matrix.toarray()
    kinetic = np.array([0.5 * p @ minv @ p for p in ps])
    np.testing.assert_allclose(model.kinetic_energy(ps), kinetic, rtol=1e-13)
    np.testing.assert_allclose(model.potential_energy(qs),
                               [model.potential(q) for q in qs], rtol=1e-14)
    np.testing.assert_allclose(model.energy(qs, ps), kinetic + model.potential_energy(qs),
                               rtol=1e-13)
    # linear momentum: centres of mass and particles only
    point_starts = [b.coordinates.start for b in model.bodies]
    expected_l = sum(ps[:, s:s + 3] for s in point_starts)
    np.testing.assert_allclose(model.linear_momentum(ps), expected_l, atol=1e-13)
    # angular momentum about c: (phi - c) x p_phi for points, d_i x p_i for directors
    c = np.array([0.3, -1.0, 2.0])
    q, p = qs[0], ps[0]
    expected_j = np.zeros(3)
    for body in model.bodies:
        s = body.coordinates.start
        expected_j += np.cross(q[s:s + 3] - c, p[s:s + 3])
        if body.kind == "rigid":
            for i in range(1, 4):
                expected_j += np.cross(q[s + 3 * i:s + 3 * i + 3], p[s + 3 * i:s + 3 * i + 3])
    np.testing.assert_allclose(model.angular_momentum(q, p, about=c), expected_j, atol=1e-12)
    np.testing.assert_allclose(model.angular_momentum(qs, ps, about=c)[0], expected_j,
                               atol=1e-12)
    np.testing.assert_allclose(model.apply_inverse_mass(p), minv @ p, rtol=1e-14)
    np.testing.assert_allclose(model.velocity_constraints(q, p),
                               model.constraint_jacobian(q) @ (minv @ p), atol=1e-12)


def test_mass_matrix_is_block_diagonal_spd(sink_model):
    mass = sink_model.mass_matrix.toarray()
    np.testing.assert_allclose(mass, mass.T)
    assert np.min(np.linalg.eigvalsh(mass)) > 0
    np.testing.assert_allclose(sink_model.inverse_mass_matrix.toarray() @ mass,
                               np.eye(sink_model.n), atol=1e-12)


def test_model_records_static_information(sink_model):
    body = sink_model.body("r0")
    assert body.kind == "rigid" and body.mass > 0
    np.testing.assert_allclose(body.euler_tensor,
                               0.5 * np.trace(body.inertia) * np.eye(3) - body.inertia)
    names = {j.name: j for j in sink_model.joints}
    assert names["user_c"].type == "UserConstraint"
    assert names["user_c"].bodies == ("r0", "r1")
    assert sink_model.gravity is not None
    assert "dof=" in repr(sink_model)


def test_solver_matrix_forms_match_finite_differences(sink_model, rng):
    """The dense fast paths the solvers use agree with finite differences."""
    model = sink_model
    assert model.dense
    q = model.initial_state()[0] + 0.1 * rng.standard_normal(model.n)
    w, mult = rng.standard_normal(model.n), rng.standard_normal(model.m)
    assert relative_error(model.jacobian_matrix(q),
                          finite_difference(model.constraints, q)) < 1e-6
    assert relative_error(
        model.hessian_product_matrix(q, mult),
        finite_difference(lambda x: model.constraint_jacobian(x).T @ mult, q)) < 1e-6
    assert relative_error(model.hessian_vector_matrix(q, w),
                          finite_difference(lambda x: model.constraint_jacobian(x) @ w, q)
                          ) < 1e-6
    assert relative_error(model.potential_hessian_matrix(q),
                          finite_difference(model.potential_gradient, q)) < 1e-6
    q1 = q + 0.05 * rng.standard_normal(model.n)
    assert relative_error(model.discrete_jacobian_matrix(q, q1),
                          model.constraint_discrete_jacobian(q, q1).toarray()) < 1e-14
    np.testing.assert_allclose(model.mass_operator(), model.mass_matrix.toarray())
    np.testing.assert_allclose(model.inverse_mass_operator() @ model.mass_operator(),
                               np.eye(model.n), atol=1e-12)


def test_discrete_gradient_jacobian_exact_for_polynomial_potentials(rng):
    """d D^G V(q0, q1) / d q1 against finite differences, for potentials quadratic in their
    invariants (quartic springs, uniform gravity), where the library claims it exact."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    a = system.add(mbs.RigidBody(1.0, random_inertia(rng), name="a"))
    a.set_state(rotation=random_rotation(rng))
    b = system.add(mbs.PointMass(1.0, name="b")).set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.QuarticSpring(a, b, stiffness=10.0, length=0.8,
                                        point_a=(0.1, 0.2, 0.0)))
    system.add(mbs.forces.QuarticSpring(system.ground, a, stiffness=3.0, length=0.5))
    model = system.compile()
    q0 = model.initial_state()[0] + 0.1 * rng.standard_normal(model.n)
    q1 = q0 + 0.1 * rng.standard_normal(model.n)
    numeric = finite_difference(lambda x: model.potential_discrete_gradient(q0, x), q1)
    assert relative_error(model.potential_discrete_gradient_jacobian_matrix(q0, q1),
                          numeric) < 1e-6


# -- initial states ----------------------------------------------------------------------
def pendulum_with_bad_state():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.3, 1.0, 0.0))  # radial component
    system.add(mbs.joints.Distance(system.ground, bob, length=1.2, name="rod"))
    return system


def test_inconsistent_initial_state_is_an_error_with_both_residuals():
    with pytest.warns(UserWarning, match="inconsistent"):
        model = pendulum_with_bad_state().compile()
    g_expected = abs(0.5 * (1.0 / 1.44 - 1.0))
    gv_expected = 0.3 / 1.44  # G M^-1 p = (x . v) / l^2
    with pytest.raises(mbs.InconsistentInitialStateError) as info:
        model.initial_state()
    assert info.value.position_residual == pytest.approx(g_expected, rel=1e-12)
    assert info.value.velocity_residual == pytest.approx(gv_expected, rel=1e-12)
    assert f"{g_expected:.3e}" in str(info.value)
    assert f"{gv_expected:.3e}" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_inconsistent_initial_state_names_the_joint_it_violates_most():
    """A chain of three rods of which the second is 0.1 too short, the third set moving
    along itself: the error names the rod of each violated level."""
    system = mbs.System()
    beads = [system.add(mbs.PointMass(1.0, name=f"bead{k}")) for k in (1, 2, 3)]
    for k, bead in enumerate(beads):
        bead.set_state(position=(k + 1.0, 0.0, 0.0))
    beads[2].set_state(position=(3.0, 0.0, 0.0), velocity=(0.5, 0.0, 0.0))
    ends = [system.ground, *beads]
    for k, length in enumerate((1.0, 0.9, 1.0)):
        system.add(mbs.joints.Distance(ends[k], ends[k + 1], length=length, name=f"rod{k + 1}"))
    with pytest.warns(UserWarning, match="inconsistent"):
        model = system.compile()
    with pytest.raises(mbs.InconsistentInitialStateError,
                       match=r"largest in 'rod2' \(position\) and 'rod3' \(velocity\)"):
        model.initial_state()


def test_projection_fixes_the_initial_state_with_a_warning():
    with pytest.warns(UserWarning):
        model = pendulum_with_bad_state().compile()
    with pytest.warns(UserWarning, match="projected"):
        q, p = model.initial_state(project=True)
    assert np.linalg.norm(q) == pytest.approx(1.2, rel=1e-12)
    assert abs(q @ p) < 1e-12
    # minimal M-norm corrections: the particle moves radially, only the radial velocity goes
    np.testing.assert_allclose(q, [1.2, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(p, [0.0, 1.0, 0.0], atol=1e-12)


def test_projection_reaches_round_off():
    """Newton converges quadratically, so the projection goes on past the consistency
    tolerance down to round-off of g = |r|^2 - 1, where the schemes keep the constraints."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.05, 0.0, 0.1), velocity=(0.3, 0.5, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    with pytest.warns(UserWarning, match="inconsistent"):
        model = system.compile()
    with pytest.warns(UserWarning, match="projected"):
        q, p = model.initial_state(project=True)
    assert np.max(np.abs(model.constraints(q))) <= 4 * np.finfo(float).eps


def test_projection_of_random_velocities_of_a_parallelogram_reaches_round_off():
    """A parallelogram (3 redundant equations, an ill-conditioned Gram matrix G M^-1 G^T)
    with random body velocities: the projected momenta meet G M^-1 p = 0 to round-off of
    the velocities removed, for every seed (one least-squares solve left 1e-10 relative)."""
    for seed in range(20):
        system = parallelogram_chain(1)
        rng = np.random.default_rng(seed)
        for body in system.bodies:
            body.set_state(velocity=rng.standard_normal(3),
                           angular_velocity=rng.standard_normal(3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # redundant, inconsistent
            model = system.compile()
            q, p = model.initial_state(project=True)
        velocity = model.constraint_jacobian(q) @ model.apply_inverse_mass(p)
        assert np.max(np.abs(velocity)) <= 1e-12 * np.max(
            np.abs(model.apply_inverse_mass(model.p0))), seed


def test_consistent_initial_state_needs_no_projection():
    model = heavy_top.build().compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, p = model.initial_state(project=True)
    q_plain, p_plain = model.initial_state()
    np.testing.assert_array_equal(q, q_plain)
    np.testing.assert_array_equal(p, p_plain)
    assert model.initial_residuals()[0] < 1e-15


def test_projection_of_large_model_with_redundant_constraints(rng):
    """Sparse path (n > 600) with a singular Gram matrix G M^-1 G^T (redundant equations):
    the projection must still converge to g = 0 and G M^-1 p = 0."""
    model = stacked_four_bars(20).compile()
    assert model.is_large and model.degrees_of_freedom == 20
    assert sum(r.count for r in model.redundancies) == 60
    q0, p0 = model.initial_state()
    p_start = p0 + rng.standard_normal(model.n)
    q, p = model.project(q0 + 1e-2 * rng.standard_normal(model.n), p_start)
    assert np.max(np.abs(model.constraints(q))) <= 1e-10
    velocity = model.apply_inverse_mass(p)
    # relative to the size of the velocities that were projected away (round-off level)
    assert np.max(np.abs(model.constraint_jacobian(q) @ velocity)) <= 1e-12 * np.max(
        np.abs(model.apply_inverse_mass(p_start)))


# -- large chain --------------------------------------------------------------------------
def test_chain_of_1000_rigid_bodies_compiles_and_evaluates(rng):
    model = spherical_chain(1000).compile()
    assert (model.n, model.m) == (12000, 9000)
    assert model.degrees_of_freedom == 3000
    assert model.is_large
    q0, p0 = model.initial_state()
    assert np.max(np.abs(model.constraints(q0))) < 1e-14
    q = q0 + 0.01 * rng.standard_normal(model.n)
    jac = model.constraint_jacobian(q)
    assert sp.issparse(jac) and jac.shape == (9000, 12000)
    assert jac.nnz < 40 * model.m  # sparse: a few entries per row
    # directional finite difference of g (exact for quadratic g up to round-off)
    direction = rng.standard_normal(model.n)
    h = 1e-4
    fd = (model.constraints(q + h * direction) - model.constraints(q - h * direction)) / (2 * h)
    assert relative_error(jac @ direction, fd) < 1e-8
    mult = rng.standard_normal(model.m)
    hess = model.constraint_hessian_product(q, mult)
    fd_h = (model.constraint_jacobian(q + h * direction).T @ mult
            - model.constraint_jacobian(q - h * direction).T @ mult) / (2 * h)
    assert relative_error(hess @ direction, fd_h) < 1e-8
    grad = model.potential_gradient(q)
    fd_v = (model.potential(q + h * direction) - model.potential(q - h * direction)) / (2 * h)
    assert grad @ direction == pytest.approx(fd_v, rel=1e-8)


@pytest.mark.parametrize("name", ["kitchen sink (a user constraint)", "spatial four-bar"])
def test_vectorised_residual_norms_equal_the_state_by_state_ones(sink_model, rng, name):
    """Model.constraint_residual_norms and constraint_jacobian_transpose_products (blocks of
    states at once, the paths of Solution.constraint_residuals and Solution.reaction)
    against model.constraints, velocity_constraints and G^T y evaluated state by state,
    at random states around the initial one: the same sums in another order, so equal to
    a few units of round-off of the terms. The kitchen sink has a user constraint (the
    state-by-state path); the four-bar has quadratic constraints only (the blocks)."""
    if name == "spatial four-bar":
        sink_model = spatial_four_bar().compile()
    q0, p0 = sink_model.initial_state()
    Q = q0 + 0.1 * rng.standard_normal((7, q0.size))
    P = p0 + rng.standard_normal((7, q0.size))
    T = np.linspace(0.0, 1.0, 7)
    position, velocity = sink_model.constraint_residual_norms(Q, P, T)
    for k in range(7):
        g = np.abs(sink_model.constraints(Q[k], T[k])).max()
        gv = np.abs(sink_model.velocity_constraints(Q[k], P[k], T[k])).max()
        assert position[k] == pytest.approx(g, rel=1e-13, abs=1e-15)
        assert velocity[k] == pytest.approx(gv, rel=1e-13, abs=1e-14)
    rows = np.arange(0, sink_model.m, 2)
    Y = rng.standard_normal((7, rows.size))
    products = sink_model.constraint_jacobian_transpose_products(Q, Y, T, rows)
    for k in range(7):
        expected = sink_model.constraint_jacobian(Q[k], T[k])[rows].T @ Y[k]
        np.testing.assert_allclose(products[k], expected, rtol=1e-13,
                                   atol=1e-13 * np.abs(expected).max())


def test_projection_of_a_gram_and_millimetre_body_welded_to_a_tonne_drum():
    """A 1000 kg drum spinning at 2 rad/s with a 1 g, 1 mm box welded to it but set at rest:
    the Gram matrix G M^-1 G^T has a condition number of about 1e13 from the sizes alone.
    The projection of the state is the M-orthogonal one onto the velocities the joints
    allow (computed here with a null-space basis of G), and joint rates are met exactly."""
    import scipy.linalg

    z = np.array([0.0, 0.0, 1.0])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    drum = system.add(mbs.RigidBody.from_shape("cylinder", mass=1000.0, radius=1.0,
                                               length=0.5, name="drum"))
    drum.set_state(angular_velocity=2.0 * z)
    tiny = system.add(mbs.RigidBody.from_shape("box", mass=1e-3, lx=1e-3, ly=1e-3, lz=1e-3,
                                               name="tiny"))
    tiny.set_state(position=(0.0, 1.0, 0.25))
    system.add(mbs.joints.Revolute(system.ground, drum, point=(0, 0, 0), axis=z, name="hinge"))
    system.add(mbs.joints.Rigid(drum, tiny, point=(0.0, 1.0, 0.25)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the state set on the bodies is inconsistent
        model = system.compile()
    mass = model.mass_matrix.toarray()
    jacobian = model.constraint_jacobian(model.q0)
    basis = scipy.linalg.null_space(jacobian.toarray() if sp.issparse(jacobian) else jacobian)
    velocity = np.linalg.solve(mass, model.p0)
    exact = basis @ np.linalg.solve(basis.T @ mass @ basis, basis.T @ mass @ velocity)
    q, p = model.initial_state(project=True)
    np.testing.assert_allclose(np.linalg.solve(mass, p), exact, rtol=0, atol=1e-9)
    _, p = model.initial_state(joint_rates={"hinge": 3.0})
    assert model.joint_coordinate("hinge", q, np.linalg.solve(mass, p))[1] == pytest.approx(
        3.0, rel=1e-12)


def test_full_constraint_rank_of_a_model_without_constraints_is_zero():
    system = mbs.System()
    system.add(mbs.PointMass(1.0, name="p"))
    assert system.compile().full_constraint_rank(np.zeros(3)) == 0


def test_projection_of_a_long_chain_reaches_round_off():
    """200 thin links (10 cm, 100 g) on hinges: the Gram matrix G M^-1 G^T of the projection
    squares G's condition number, and its sparse solve holds only ~1e-5 of the residual.
    Accepted there (Gauss-Newton then still contracts by that factor per step), the
    projection of a state moved by 1e-5 of the model's size reaches round-off (1e-12)
    instead of stalling at 3e-10 in a crawling regularised solve."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(200):
        link = system.add(mbs.RigidBody.from_shape("box", mass=0.1, lx=0.1, ly=0.02, lz=0.02,
                                                   name=f"link{k}"))
        link.set_state(position=((k + 0.5) * 0.1, 0.0, 0.0))
        system.add(mbs.joints.Revolute(previous, link, point=(k * 0.1, 0.0, 0.0),
                                       axis=(0, 1, 0)))
        previous = link
    model = system.compile()
    q0, p0 = model.initial_state()
    moved = q0 + 1e-5 * model.length_scale * np.random.default_rng(0).standard_normal(q0.size)
    q, _ = model.project(moved, p0)
    assert np.max(np.abs(model.constraints(q))) < 1e-12
