"""Each scheme's analytic Newton Jacobian against central finite differences of its residual.

Checked on a mechanism with a non-quadratic potential, rigid bodies, joints and point masses,
at a random iterate x (not the solution), so that every block of the Jacobian is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
from mechanisms import spring_link

import mbs
from mbs.solvers import GGLVI, EnergyMomentum


def mechanism() -> mbs.Model:
    with pytest.warns(UserWarning):
        return spring_link().compile()


def finite_difference_jacobian(function, x, step=1e-6):
    columns = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = step * max(1.0, abs(x[k]))
        columns.append((function(x + e) - function(x - e)) / (2 * e[k]))
    return np.column_stack(columns)


@pytest.mark.parametrize("solver", [
    GGLVI(variant="S"), GGLVI(variant="A"), GGLVI(variant="A", theta=0.3),
    GGLVI(variant="B"), GGLVI(variant="B", theta=0.4, vartheta=0.7)],
    ids=["S", "A", "A-0.3", "B", "B-0.4-0.7"])
def test_ggl_vi_jacobian(solver):
    model = mechanism()
    rng = np.random.default_rng(7)
    with pytest.warns(UserWarning, match="projected"):
        q0, p0 = model.initial_state(project=True)
    solver.start(model, q0, p0, 0.01)
    system, x0 = solver.newton_system(q0, p0)
    x = x0 + 0.01 * rng.standard_normal(x0.size)
    analytic = system(x)[1]
    numeric = finite_difference_jacobian(lambda y: system(y)[0], x)
    np.testing.assert_allclose(analytic, numeric, atol=1e-6 * np.max(np.abs(numeric)))


def test_em_jacobian_exact_for_polynomial_invariant_potentials():
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0, name="a"))
    b = system.add(mbs.PointMass(2.0, name="b"))
    a.set_state(position=(0, 0, 0), velocity=(0.1, 0.2, 0))
    b.set_state(position=(1, 0, 0), velocity=(0, -0.1, 0.3))
    c = system.add(mbs.RigidBody(1.0, (1.0, 1.5, 2.0), name="c"))
    c.set_state(position=(0, 1, 0), angular_velocity=(0.2, 0.1, 0.4))
    system.add(mbs.forces.QuarticSpring(a, b, stiffness=10.0, length=0.8))
    system.add(mbs.joints.Distance(b, c, point_b=(0, 1.5, 0)))
    with pytest.warns(UserWarning):
        model = system.compile()
        q0, p0 = model.initial_state(project=True)
    solver = EnergyMomentum()
    solver.start(model, q0, p0, 0.01)
    newton_system, x0 = solver.newton_system(q0, p0)
    x = x0 + 0.01 * np.random.default_rng(3).standard_normal(x0.size)
    numeric = finite_difference_jacobian(lambda y: newton_system(y)[0], x)
    np.testing.assert_allclose(newton_system(x)[1], numeric,
                               atol=1e-6 * np.max(np.abs(numeric)))


def test_em_jacobian_close_for_non_quadratic_potentials():
    """The derivative of the discrete gradient is approximated by 1/2 Hess V(q_mid): the
    difference is O(|q1 - q0|), small for a step-sized increment."""
    model = mechanism()
    solver = EnergyMomentum()
    with pytest.warns(UserWarning, match="projected"):
        q0, p0 = model.initial_state(project=True)
    solver.start(model, q0, p0, 0.001)
    newton_system, x0 = solver.newton_system(q0, p0)
    numeric = finite_difference_jacobian(lambda y: newton_system(y)[0], x0)
    np.testing.assert_allclose(newton_system(x0)[1], numeric,
                               atol=1e-3 * np.max(np.abs(numeric)))


@pytest.mark.parametrize("name", ["em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle"])
def test_jacobian_of_a_driven_model(name):
    """A crank driven at a varying angle f(t) = 3 t + 0.4 sin 2t with a pendulum hung from
    it: the drive's velocity row G(u) v + dg/dt(u) depends on u also through dg/dt, whose
    derivative the Jacobian must hold."""
    from mbs.joints import Drive
    from mbs.solvers import make_solver

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    crank = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.4, ly=0.05, lz=0.05,
                                                name="crank"))
    bob = system.add(mbs.PointMass(0.5, name="bob"))
    crank.set_state(position=(0.2, 0.0, 0.0), velocity=(0.0, 0.76, 0.0),
                    angular_velocity=(0.0, 0.0, 3.8))
    bob.set_state(position=(0.4, 0.0, -0.3), velocity=(0.0, 1.52, 0.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, crank, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="hinge"))
    system.add(mbs.joints.Distance(crank, bob, point_a=(0.2, 0.0, 0.0), length=0.3))
    system.add(Drive(hinge, lambda t: 3.0 * t + 0.4 * np.sin(2.0 * t),
                     lambda t: 3.0 + 0.8 * np.cos(2.0 * t), name="motor"))
    model = system.compile()
    q0, p0 = model.initial_state(project=True, joint_rates={"hinge": 3.8})
    solver = make_solver(name)
    solver.start(model, q0, p0, 0.01)
    evaluate, x0 = solver.newton_system(q0, p0)
    x = x0 + 0.01 * np.random.default_rng(3).standard_normal(x0.size)
    analytic = evaluate(x)[1]
    analytic = analytic.toarray() if hasattr(analytic, "toarray") else analytic
    numeric = finite_difference_jacobian(lambda y: evaluate(y)[0], x)
    # central differences of step 1e-6 on entries of size ~1e3: error ~1e-12 * 1e3 / 1e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-6 * np.max(np.abs(numeric)))
