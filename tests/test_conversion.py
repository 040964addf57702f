"""Variational conversion of a one-step method (Patrick, Cuell, Spiteri, Zhang, "On converting
any one-step method to a variational integrator of the same order"): the acceptance checks 1-8
of its reproduction, through the public API.

Problems: the spherical pendulum (m = 1, unit sphere, V = x_3, q0 = (sqrt(3)/2, 0, 1/2),
v0 = (0, -1/3, 0); symmetric about e3) and Free2D, L = |v|^2/2 + cos x - y^2/2 with
q0 = (0.7, -0.3), v0 = (0.4, 0.9), written as a free point mass in R^3 whose potential
-cos x + y^2/2 does not depend on z (v_z = 0, so z stays 0 and (x, y) is Free2D exactly).
References are DOP853 (rtol 1e-13) integrations of the index-1 equations written here.
"""

from __future__ import annotations

import numpy as np
import pytest
from mechanisms import spherical_pendulum
from scipy.integrate import solve_ivp
from scipy.optimize import root

import mbs
from mbs.solvers import NewtonOptions
from mbs.solvers.conversion import VariationalConversion

E3 = np.array([0.0, 0.0, 1.0])
STEPS = np.array([10, 20, 40, 80])


@pytest.fixture(scope="module")
def pendulum() -> mbs.Model:
    return spherical_pendulum().compile()


@pytest.fixture(scope="module")
def free2d() -> mbs.Model:
    system = mbs.System()
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=(0.7, -0.3, 0.0), velocity=(0.4, 0.9, 0.0))
    forces = mbs.forces
    system.add(forces.UserPotential(
        [forces.PointComponent(bob, (1.0, 0.0, 0.0)), forces.PointComponent(bob, (0.0, 1.0, 0.0))],
        energy=lambda pi: -np.cos(pi[0]) + 0.5 * pi[1] ** 2,
        gradient=lambda pi: [np.sin(pi[0]), pi[1]],
        hessian=lambda pi: [[np.cos(pi[0]), 0.0], [0.0, 1.0]], name="free2d"))
    return system.compile()


def pendulum_rhs(t, y):
    """Index-1 spherical pendulum: M = I, V = x_3, g = (|q|^2 - 1)/2, so G = q^T, D^2 g = I
    and q^T A + |v|^2 = 0 with A = -e3 + lambda q."""
    q, v = y[:3], y[3:]
    lam = (q[2] - v @ v) / (q @ q)
    return np.concatenate((v, -E3 + lam * q))


def free2d_rhs(t, y):
    return [y[3], y[4], y[5], -np.sin(y[0]), -y[1], 0.0]


def reference(rhs, model: mbs.Model, t_end: float) -> np.ndarray:
    q0, p0 = model.initial_state()
    result = solve_ivp(rhs, (0.0, t_end), np.concatenate((q0, p0)), method="DOP853",
                       rtol=1e-13, atol=1e-15)
    return result.y[:, -1]


def end_errors(model: mbs.Model, exact: np.ndarray, bias, t_end: float = 2.0) -> np.ndarray:
    """Max error in (q, v) at t_end for 10, 20, 40, 80 steps."""
    errors = []
    for count in STEPS:
        solution = mbs.simulate(model, VariationalConversion(bias=bias), h=t_end / count,
                                t_end=t_end)
        errors.append(max(np.abs(solution.q[-1] - exact[:3]).max(),
                          np.abs(solution.scheme_velocities[-1] - exact[3:]).max()))
    return np.array(errors)


def slopes(errors: np.ndarray) -> np.ndarray:
    return np.log2(errors[:-1] / errors[1:])


def fitted_slope(errors: np.ndarray, steps: np.ndarray = STEPS) -> float:
    return -np.polyfit(np.log(steps), np.log(errors), 1)[0]


def constraint_residuals(model: mbs.Model, solution: mbs.Solution) -> tuple[float, float]:
    """max_k |g(q_k)| and max_k |G(q_k) M^-1 p_k| from the model, not the solver."""
    position = max(np.abs(model.constraints(q)).max() for q in solution.q)
    velocity = max(np.abs(model.velocity_constraints(q, p)).max()
                   for q, p in zip(solution.q, solution.p))
    return position, velocity


# -- check 1 and 2: order of the standard layer; exact TQ ------------------------------------
@pytest.mark.parametrize("bias, bound", [((0.0, 1.0), 4e-7), ("centered", 3e-8)])
def test_order_four_on_the_spherical_pendulum(pendulum, bias, bound):
    """Check 1: T = 2, n = 10 .. 80 steps, RK4 layer: the last two slopes of the max error in
    (q, v) at T, and the slope fitted to n = 20 .. 80, are in [3.85, 4.15]; the error at n = 80
    is below 4e-7 (bias (0, 1)) / 3e-8 (centred) (reproduction: 2.07e-7, 1.30e-8).
    Check 2 on every run: g and G v at round-off."""
    errors = end_errors(pendulum, reference(pendulum_rhs, pendulum, 2.0), bias)
    local = slopes(errors)
    assert np.all((local[-2:] >= 3.85) & (local[-2:] <= 4.15)), (errors, local)
    assert 3.85 <= fitted_slope(errors[1:], STEPS[1:]) <= 4.15
    assert errors[-1] <= bound


def test_other_explicit_tableau_keeps_its_order(pendulum):
    """An explicit tableau given as arrays (Heun's second-order method): the converted scheme
    has order 2 (last two slopes within 0.1, n = 20 .. 160), and stays on TQ."""
    heun = ([[0.0, 0.0], [1.0, 0.0]], [0.5, 0.5], [0.0, 1.0])
    exact = reference(pendulum_rhs, pendulum, 2.0)
    errors = []
    for count in 2 * STEPS:
        solution = mbs.simulate(pendulum, VariationalConversion(tableau=heun),
                                h=2.0 / count, t_end=2.0)
        errors.append(max(np.abs(solution.q[-1] - exact[:3]).max(),
                          np.abs(solution.scheme_velocities[-1] - exact[3:]).max()))
        assert max(constraint_residuals(pendulum, solution)) <= 1e-12
    local = slopes(np.array(errors))
    assert np.all(np.abs(local[-2:] - 2.0) <= 0.1), local


# -- checks 2, 3 and 5: one long run ------------------------------------------------------------
@pytest.fixture(scope="module")
def long_run(pendulum):
    solver = VariationalConversion(bias=(0.0, 1.0))
    solution = mbs.simulate(pendulum, solver, h=0.1, t_end=200.0)
    return solver, solution


def discrete_momentum(solver: VariationalConversion) -> np.ndarray:
    """J_k = mu_k . (e3 x q_bar_k), the discrete Noether momentum of rotations about e3."""
    nodes, momenta = np.array(solver.nodes), np.array(solver.node_momenta)
    return np.einsum("ki,ki->k", momenta, np.cross(E3, nodes))


def test_long_run_stays_on_the_constraint_manifold(pendulum, long_run):
    """Check 2: over 2000 steps max |g(q_k)| and max |G(q_k) v_k| <= 1e-12 (reproduction
    <= 2.3e-14)."""
    _, solution = long_run
    position, velocity = constraint_residuals(pendulum, solution)
    assert position <= 1e-12 and velocity <= 1e-12
    assert np.abs(solution.enforced_residuals).max() <= 1e-12


def test_discrete_noether_momentum_is_exact(long_run):
    """Check 3: bias (0, 1), h = 0.1, 2000 steps: max - min of mu_k . (e3 x q_bar_k) <= 1e-10
    (reproduction 1.1e-12, J = -0.288676), while the continuous L_z = (q x v)_3 varies by
    >= 1e-7 (reproduction 1.2e-5), so the test discriminates."""
    solver, solution = long_run
    momentum = discrete_momentum(solver)
    assert momentum.size == 2000
    assert np.ptp(momentum) <= 1e-10
    assert momentum[0] == pytest.approx(-0.288676, abs=1e-6)
    angular = np.cross(solution.q, solution.p)[:, 2]  # p = v (M = I)
    assert np.ptp(angular) >= 1e-7


def test_no_energy_drift(long_run):
    """Check 5: pendulum, bias (0, 1), h = 0.1, T = 200: max |E - E0| over the last 10 % of
    the run is at most 1.1 x that over the first 10 % (reproduction: 1.072e-4 both)."""
    _, solution = long_run
    deviation = np.abs(solution.energy() - solution.energy()[0])
    tenth = deviation.size // 10
    first, last = deviation[:tenth].max(), deviation[-tenth:].max()
    assert last <= 1.1 * first
    assert 1e-5 <= first <= 1e-3  # the O(h^4) oscillation is there: the test discriminates


@pytest.mark.slow
def test_no_energy_drift_centered(pendulum):
    """Check 5 with bias (-1/2, 1/2) (reproduction 6.85e-6 in both tenths), and checks 2-3
    for that bias (the node momentum conserved to round-off)."""
    solver = VariationalConversion(bias="centered")
    solution = mbs.simulate(pendulum, solver, h=0.1, t_end=200.0)
    deviation = np.abs(solution.energy() - solution.energy()[0])
    tenth = deviation.size // 10
    assert deviation[-tenth:].max() <= 1.1 * deviation[:tenth].max()
    assert np.ptp(discrete_momentum(solver)) <= 1e-10
    assert max(constraint_residuals(pendulum, solution)) <= 1e-12


# -- check 4: symplecticity -------------------------------------------------------------------
def rk4_map(z: np.ndarray, h: float) -> np.ndarray:
    """The bare standard layer on Free2D's (q, v) (M = I)."""
    def f(y):
        return np.array([y[3], y[4], y[5], -np.sin(y[0]), -y[1], 0.0])

    k1 = f(z)
    k2 = f(z + 0.5 * h * k1)
    k3 = f(z + 0.5 * h * k2)
    k4 = f(z + h * k3)
    return z + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def symplecticity_defect(mapping, z0: np.ndarray, eps: float = 1e-6) -> float:
    """|J^T Omega J - Omega|max with J by central differences (step eps)."""
    n = z0.size // 2
    omega = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    jacobian = np.empty((2 * n, 2 * n))
    for j in range(2 * n):
        step = np.zeros(2 * n)
        step[j] = eps
        jacobian[:, j] = (mapping(z0 + step) - mapping(z0 - step)) / (2.0 * eps)
    return float(np.abs(jacobian.T @ omega @ jacobian - omega).max())


@pytest.mark.parametrize("bias", [(0.0, 1.0), "centered"])
def test_node_map_is_symplectic(free2d, bias):
    """Check 4: Free2D, h = 0.5: the node map (q_bar, mu) -> (q_bar', mu') has
    |J^T Omega J - Omega|max <= 1e-8 (reproduction 6.1e-11 / 1.6e-10, finite-difference noise),
    and the bare RK4 map on (q, v) fails the same test (reproduction 2.1e-4)."""
    h = 0.5
    q0, p0 = free2d.initial_state()
    solver = VariationalConversion(bias=bias)
    solver.start(free2d, q0, p0, h)
    node, momentum, _, _ = solver.node_from_state(q0, p0)

    def node_map(z):
        result = solver.node_map(z[:3], z[3:])
        return np.concatenate((result.node, result.momentum))

    assert symplecticity_defect(node_map, np.concatenate((node, momentum))) <= 1e-8
    bare = symplecticity_defect(lambda z: rk4_map(z, h), np.concatenate((q0, p0)))
    assert bare > 1e-8


# -- check 6: the chord iteration ---------------------------------------------------------------
@pytest.mark.parametrize("h", [0.05, 0.1])
def test_chord_iteration_with_the_approximate_jacobian(pendulum, h):
    """Check 6: J0 from the approximates, pendulum, 10 time units: every step converges to
    |Delta(q2, v2)|_inf < 1e-13 (relative tolerance 5e-14: |q| <= 1, |v| < 2) within 50
    iterations (reproduction: max 23 at h = 0.05, 40 at h = 0.1; ``jacobian="approximate"``
    raises rather than falling back, and on_failure="raise" forbids refinement), and the
    steps equal an independent hybr solve of the same equations to <= 1e-12."""
    solver = VariationalConversion(jacobian="approximate",
                                   newton=NewtonOptions(tolerance=5e-14))
    solution = mbs.simulate(pendulum, solver, h=h, t_end=10.0, on_failure="raise")
    iterations = solution.stats["newton_iterations"]
    assert iterations.max() <= 50 and solver.fallbacks == 0
    for k in range(0, iterations.size, 25):
        node, momentum = solver.nodes[k], solver.node_momenta[k]
        guess = np.concatenate((node, momentum, momentum, np.zeros(3)))
        hybr = root(lambda x, a=node, b=momentum: solver.node_equations(a, b, x), guess,
                    method="hybr", tol=1e-13)
        assert np.abs(hybr.fun).max() <= 1e-13
        assert np.abs(hybr.x[:3] - solution.q[k + 1]).max() <= 1e-12
        assert np.abs(hybr.x[3:6] - solution.scheme_velocities[k]).max() <= 1e-12


def test_chord_iteration_with_finite_differences_at_large_steps(pendulum):
    """Check 6 at h = 0.2, where the reproduction's J0 needed up to 100 iterations: the chord
    iteration with a finite-difference Jacobian converges in <= 20 iterations at every step
    (reproduction: max 17)."""
    solver = VariationalConversion(jacobian="finite-difference",
                                   newton=NewtonOptions(tolerance=5e-14))
    solution = mbs.simulate(pendulum, solver, h=0.2, t_end=10.0, on_failure="raise")
    assert solution.stats["newton_iterations"].max() <= 20


def test_unsolvable_step_is_refined(pendulum):
    """A step J0 cannot solve raises NewtonConvergenceError, which the driver refines; the
    sub-steps stay on TQ and are recorded as nodes."""
    solver = VariationalConversion(jacobian="approximate")
    solution = mbs.simulate(pendulum, solver, h=0.4, t_end=2.0)
    refined = solution.stats["refined_steps"]
    assert refined
    assert len(solver.nodes) == 5 + sum(2**depth - 1 for _, depth in refined)
    assert max(constraint_residuals(pendulum, solution)) <= 1e-12
    with pytest.raises(mbs.SolverError):
        mbs.simulate(pendulum, VariationalConversion(jacobian="approximate"), h=0.4,
                     t_end=2.0, on_failure="raise")


# -- check 7: multiplier reuse ----------------------------------------------------------------
def test_next_step_multipliers_are_this_steps(pendulum):
    """Check 7: solving the w^n side afresh at every step, lambda^+ of step k equals mu of step
    k + 1 and lambda^- of step k + 1 equals -mu of step k to <= 1e-12 (reproduction 1.1e-16 /
    1.7e-16), so the solve may be skipped; the run with reuse agrees to round-off.

    The identity holds at the solution of the equations; lambda^+ comes from the chord
    iteration, so the difference is its iteration error. The iteration runs to the
    reproduction's tolerance, 1e-13 (at the default 1e-12 the difference measured 1.0e-12)."""
    fresh = VariationalConversion(reuse_multipliers=False, newton=NewtonOptions(tolerance=1e-13))
    solution = mbs.simulate(pendulum, fresh, h=0.1, t_end=5.0)
    exits, entries = np.array(fresh.exit_momenta[:-1]), np.array(fresh.node_momenta[1:])
    assert np.abs(exits - entries).max() <= 1e-12
    backward = np.array(fresh.backward_multipliers[1:])
    assert np.abs(backward + np.array(fresh.node_momenta[:-1])).max() <= 1e-12
    assert np.abs(np.array(fresh.exit_nodes[:-1]) - np.array(fresh.nodes[1:])).max() <= 1e-12
    reused = mbs.simulate(pendulum, VariationalConversion(), h=0.1, t_end=5.0)
    assert np.abs(reused.q - solution.q).max() <= 1e-11


# -- check 8: unconstrained reduction ---------------------------------------------------------
@pytest.mark.parametrize("bias", [(0.0, 1.0), "centered"])
def test_unconstrained_order_four(free2d, bias):
    """Check 8: m = 0 (Free2D, T = 2): order 4 (the fitted slope and the last two slopes within
    0.1) for both biases (reproduction: 4.05 .. 4.01 and 3.98 .. 4.00)."""
    assert free2d.m == 0
    errors = end_errors(free2d, reference(free2d_rhs, free2d, 2.0), bias)
    assert abs(fitted_slope(errors) - 4.0) <= 0.1
    assert np.all(np.abs(slopes(errors)[-2:] - 4.0) <= 0.1)


# -- driver features, input checks ------------------------------------------------------------
@pytest.mark.parametrize("bias", ["left", "centered"])
def test_resume_repeats_the_uninterrupted_run_bitwise(pendulum, tmp_path, bias):
    """The reused node and momentum and the extrapolation history are in the checkpoint: a
    streamed run stopped and resumed repeats the uninterrupted one bitwise."""
    full = mbs.simulate(pendulum, VariationalConversion(bias=bias), h=0.1, t_end=4.0)
    stream = tmp_path / "run"
    mbs.simulate(pendulum, VariationalConversion(bias=bias), h=0.1, t_end=2.0,
                 output=str(stream), flush_every=5)
    resumed = mbs.simulate(pendulum, VariationalConversion(bias=bias), h=0.1, t_end=4.0,
                           resume=str(stream))
    np.testing.assert_array_equal(resumed.q, full.q)
    np.testing.assert_array_equal(resumed.p, full.p)
    np.testing.assert_array_equal(resumed.multipliers, full.multipliers)


def test_ensemble_members_repeat_the_single_run(pendulum):
    """Through its registered name, in an ensemble: each member is the single run bitwise."""
    full = mbs.simulate(pendulum, "vi-conversion", h=0.1, t_end=1.0)
    states = (np.stack([pendulum.q0, pendulum.q0]), np.stack([pendulum.p0, pendulum.p0]))
    ensemble = mbs.simulate_ensemble(pendulum, states, h=0.1, t_end=1.0,
                                     solver="vi-conversion")
    np.testing.assert_array_equal(ensemble.q[1], full.q)
    np.testing.assert_array_equal(ensemble.p[0], full.p)


def test_scheme_properties():
    solver = VariationalConversion()
    assert solver.name == "vi-conversion"
    assert solver.properties.symplectic and not solver.composable
    assert (solver.alpha_minus, solver.alpha_plus) == (0.0, 1.0)
    centered = VariationalConversion(bias="centered")
    assert (centered.alpha_minus, centered.alpha_plus) == (-0.5, 0.5)


@pytest.mark.parametrize("options, match", [
    ({"bias": (0.5, 1.5)}, "alpha_minus"),
    ({"bias": (-0.3, 0.6)}, "alpha_plus - alpha_minus = 1"),
    ({"bias": "right"}, "bias"),
    ({"bias": (0.0, 1.0, 2.0)}, "pair"),
    ({"tableau": "rk5"}, "rk4"),
    ({"tableau": ([[0.0, 1.0], [0.0, 0.0]], [0.5, 0.5], [0.0, 1.0])}, "strictly lower"),
    ({"tableau": ([[0.5, 0.0], [0.5, 0.5]], [0.5, 0.5], [0.5, 1.0])}, "strictly lower"),
    ({"tableau": ([[0.0, 0.0], [1.0, 0.0]], [0.5, 0.5, 0.0], [0.0, 1.0])}, "shape"),
    ({"tableau": ([[0.0, 0.0], [1.0, 0.0]], [0.5, 0.6], [0.0, 1.0])}, "sum"),
    ({"tableau": np.zeros((2, 2))}, "triple"),
    ({"jacobian": "newton"}, "jacobian"),
])
def test_bad_options_raise_model_error(options, match):
    with pytest.raises(mbs.ModelError, match=match):
        VariationalConversion(**options)


def test_user_constraint_model_is_rejected_with_alternatives():
    """Non-quadratic constraints: the sensitivity of the standard layer needs D^3 g = 0."""
    system = mbs.System(gravity=(0.0, 0.0, -1.0))
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 0.5, 0.0))
    system.add(mbs.joints.UserConstraint(
        [bob], lambda q: [q @ q - 1.0], lambda q: [2.0 * q],
        lambda q, lam: 2.0 * lam[0] * np.eye(3), name="sphere"))
    model = system.compile()
    with pytest.raises(mbs.ModelError, match="quadratic.*'lobatto' or 'em'"):
        mbs.simulate(model, VariationalConversion(), h=0.1, t_end=1.0)


def test_a_large_model_is_warned_about_the_dense_cost():
    """Above the dense limit the scheme warns that its step is O(n^3) and names the sparse
    high-order alternative (the step still runs)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(13):  # 13 bodies: n = 156 coordinates, above the dense limit
        link = system.add(mbs.RigidBody(mass=1.0, inertia=(0.1, 0.1, 0.05), name=f"link{k}"))
        link.set_state(position=(0.0, 0.0, -0.5 - k))
        system.add(mbs.joints.Spherical(previous, link, point=(0.0, 0.0, -float(k))))
        previous = link
    model = system.compile()
    assert model.is_large
    with pytest.warns(RuntimeWarning, match=r"n = 156 coordinates.*O\(n\^3\).*'lobatto'"):
        solution = mbs.simulate(model, "vi-conversion", h=1e-3, t_end=1e-3)
    assert solution.stats["completed"]
