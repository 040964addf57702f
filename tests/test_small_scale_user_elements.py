"""User potentials and user constraints on mechanisms of millimetres to tens of nanometres.

Their missing derivatives are central differences, and Gonzalez's discrete gradients divide
by the step: steps and round-off tests must follow the size of the quantities, not absolute
values chosen for a model of metres. Each test compares with hand-written derivatives of
the same function (or a built-in element), at the accuracy of central differences with a
relative step of 1e-6 (error ~ eps / 1e-6 ~ 2e-10 plus 1e-12 truncation) or of second
differences with a relative step of 1e-4 (~1e-8).
"""

from __future__ import annotations

import numpy as np
import pytest

import mbs
from mbs.forces import SquaredDistance, UserPotential

R0 = np.array([-0.9, 0.5, 0.8])
C0 = float(R0 @ R0) ** 2


def _quartic_distance(size: float):
    """g(q) = (|x_p - x_a| / size)^4 - C0 on two point masses (q = (x_a, x_p)), dimensionless
    as the docs ask, with its Jacobian and its multiplier-weighted Hessian by hand."""
    def value(q):
        r = (q[3:6] - q[0:3]) / size
        return np.array([(r @ r) ** 2 - C0])

    def jacobian(q):
        r = (q[3:6] - q[0:3]) / size
        out = np.zeros((1, 6))
        out[0, 3:6] = 4.0 * (r @ r) * r / size
        out[0, 0:3] = -out[0, 3:6]
        return out

    def hessian(q, multipliers):
        r = (q[3:6] - q[0:3]) / size
        block = (4.0 * (r @ r) * np.eye(3) + 8.0 * np.outer(r, r)) / size**2
        return multipliers[0] * np.block([[block, -block], [-block, block]])

    return value, jacobian, hessian


def _two_masses(size: float, offset: float = 0.0
                ) -> tuple[mbs.System, mbs.PointMass, mbs.PointMass]:
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0, name="a"))
    a.set_state(position=np.array([0.2, -0.1, 0.3]) * size + offset)
    p = system.add(mbs.PointMass(0.5, name="p"))
    p.set_state(position=np.array([-0.7, 0.4, 1.1]) * size + offset)
    return system, a, p


@pytest.mark.parametrize("size", [1e-2, 1e-3])
@pytest.mark.parametrize("given", ["none", "gradient"])
def test_a_user_spring_between_close_points_matches_the_built_in_spring(size, given):
    """V = k/2 (sqrt(pi) - l0)^2 of the squared distance pi ~ size^2: with the derivatives
    left to central differences their steps stay inside pi > 0 (an absolute step of 1e-4
    stepped below zero at 1 cm) and the gradient and Hessian equal the built-in Spring's."""
    stiffness, rest = 3.0, 0.8 * size

    def energy(pi):
        return 0.5 * stiffness * (np.sqrt(pi[0]) - rest) ** 2

    def gradient(pi):
        return [0.5 * stiffness * (1.0 - rest / np.sqrt(pi[0]))]

    models = []
    for user in (True, False):
        system = mbs.System()
        a = system.add(mbs.PointMass(1.0, name="a"))
        b = system.add(mbs.PointMass(1.0, name="b"))
        b.set_state(position=(size, 0.3 * size, 0.0))
        if user:
            system.add(UserPotential([SquaredDistance(a, b)], energy=energy,
                                     **({"gradient": gradient} if given == "gradient" else {})))
        else:
            system.add(mbs.forces.Spring(a, b, stiffness=stiffness, rest_length=rest))
        models.append(system.compile())
    user, builtin = models
    q = builtin.q0 + 0.05 * size * np.random.default_rng(1).standard_normal(6)
    expected = builtin.potential_gradient(q)
    assert np.max(np.abs(user.potential_gradient(q) - expected)) <= 1e-8 * np.max(
        np.abs(expected))
    expected = builtin.potential_hessian(q).toarray()
    # differences of the given gradient (~2e-10), or second differences of the energy (~1e-8)
    tolerance = 1e-8 if given == "gradient" else 5e-7
    assert np.max(np.abs(user.potential_hessian(q).toarray() - expected)) <= tolerance * np.max(
        np.abs(expected))
    solution = mbs.simulate(user, "em", h=1e-3, t_end=0.05)
    energies = solution.energy()
    assert np.max(np.abs(energies - energies[0])) <= 1e-10 * np.max(np.abs(energies))


@pytest.mark.parametrize("size, offset", [(1e-3, 0.0), (1e-6, 0.0), (1e-8, 0.0),
                                          (1e-6, 1e-2)])
def test_the_difference_hessian_of_a_user_constraint_follows_the_bodies_size(size, offset):
    """Without a given Hessian, the constraint Hessian products are central differences of
    the Jacobian; with a step relative to the bodies' spread they match the hand-written
    Hessian at every size (an absolute step of 1e-6 was off by 0.25 at 1 um and by 3e3 at
    10 nm). A mechanism of 1 um placed 1 cm from the origin carries the round-off of its
    coordinates, eps 1e-2 against 1e-6: with the step balancing it against the truncation
    error, both are (eps offset / size)^(2/3) ~ 2e-8 (a step of 1e-6 |q| = 1e-8 m left 3e-5)."""
    value, jacobian, hessian = _quartic_distance(size)
    system, a, p = _two_masses(size, offset)
    system.add(mbs.joints.UserConstraint([a, p], value, jacobian, name="quartic"))
    model = system.compile()
    rng = np.random.default_rng(4)
    q = model.q0 + 0.05 * size * rng.standard_normal(6)
    multipliers, direction = np.array([1.3]), rng.standard_normal(6)
    exact = hessian(q, multipliers)
    tolerance = max(1e-7, 10 * (np.finfo(float).eps * offset / size) ** (2 / 3))
    product = model.constraint_hessian_product(q, multipliers).toarray()
    assert np.max(np.abs(product - exact)) <= tolerance * np.max(np.abs(exact))
    along = model.hessian_vector_matrix(q, direction)[0]
    expected = hessian(q, np.ones(1)) @ direction
    assert np.max(np.abs(along - expected)) <= tolerance * np.max(np.abs(expected))


def test_the_discrete_jacobian_of_a_user_constraint_over_a_tiny_step():
    """Gonzalez's discrete Jacobian over q1 = q0 + s d tends to G(q_mid) as s^2; its
    correction divides g(q1) - g(q0) - G(q_mid) dq by |dq|^2, which at s = 1e-12 is round-off
    over 1e-24 (1.6e-5 of |G| before Simpson's mean replaced it there). Directionality
    g(q1) - g(q0) = D dq holds to the round-off of g."""
    value, jacobian, _ = _quartic_distance(1.0)
    system, a, p = _two_masses(1.0)
    system.add(mbs.joints.UserConstraint([a, p], value, jacobian, name="quartic"))
    model = system.compile()
    rng = np.random.default_rng(4)
    q0, direction = model.q0, rng.standard_normal(6)
    for step in (1e-10, 1e-12, 1e-13):
        q1 = q0 + step * direction
        discrete = model.constraint_discrete_jacobian(q0, q1).toarray()
        middle = model.constraint_jacobian(0.5 * (q0 + q1)).toarray()
        assert np.max(np.abs(discrete - middle)) <= 1e-12 * np.max(np.abs(middle))
        change = value(q1) - value(q0)
        roundoff = 64 * np.finfo(float).eps * (C0 + np.abs(value(q0)) + np.abs(value(q1)))
        assert np.all(np.abs(change - discrete @ (q1 - q0)) <= roundoff)


def test_a_dimensionless_user_constraint_on_a_tiny_mechanism_is_not_taken_as_redundant():
    """A hinge between two rigid bodies of 10 nm and a dimensionless user constraint on one
    of them and a point mass: the constraint's Jacobian entries (~1/size) dwarf the hinge's,
    which a rank test relative to the largest singular value took for zero ("redundant with
    each other"). The degrees of freedom are 9 at every size."""
    for size in (1.0, 1e-8):
        value, jacobian, _ = _quartic_distance(size)
        system = mbs.System()
        a = system.add(mbs.RigidBody(1.0, (0.3 * size**2, 0.4 * size**2, 0.5 * size**2),
                                     name="a"))
        a.set_state(position=(0.2 * size, -0.1 * size, 0.3 * size))
        b = system.add(mbs.RigidBody(2.0, (0.5 * size**2, 0.4 * size**2, 0.6 * size**2),
                                     name="b"))
        b.set_state(position=(size, 0.5 * size, 0.1 * size))
        p = system.add(mbs.PointMass(0.5, name="p"))
        p.set_state(position=(-0.7 * size, 0.4 * size, 1.1 * size))
        system.add(mbs.joints.Revolute(a, b, point=(0.6 * size, 0.2 * size, 0.2 * size),
                                       axis=(0, 0, 1)))

        def local_value(q, value=value):  # the constraint reads a's position and p's
            return value(np.concatenate([q[0:3], q[12:15]]))

        def local_jacobian(q, jacobian=jacobian):
            out = np.zeros((1, 15))
            full = jacobian(np.concatenate([q[0:3], q[12:15]]))
            out[0, 0:3], out[0, 12:15] = full[0, 0:3], full[0, 3:6]
            return out

        system.add(mbs.joints.UserConstraint([a, p], local_value, local_jacobian))
        assert system.compile().degrees_of_freedom == 9


def test_each_compiled_model_keeps_its_own_user_potential_steps():
    """The sizes the difference steps follow belong to the compiled model: compiling the
    same system again from a pose 1 m apart leaves the Hessian of the model compiled at
    1 cm as it was (they were shared, and its steps of 1e-4 m^2 took the squared distance
    of 1.09e-4 m^2 below zero)."""
    size, stiffness, rest = 1e-2, 3.0, 0.8e-2
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0, name="a"))
    b = system.add(mbs.PointMass(1.0, name="b"))
    system.add(UserPotential([SquaredDistance(a, b)],
                             energy=lambda pi: 0.5 * stiffness * (np.sqrt(pi[0]) - rest) ** 2))
    b.set_state(position=(size, 0.3 * size, 0.0))
    small = system.compile()
    first = small.potential_hessian(small.q0).toarray()
    b.set_state(position=(1.0, 0.3, 0.0))
    system.compile()
    np.testing.assert_array_equal(small.potential_hessian(small.q0).toarray(), first)
