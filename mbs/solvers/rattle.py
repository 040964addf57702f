"""RATTLE (Andersen 1983; Hairer, Lubich, Wanner, Geometric Numerical Integration, VII.1.4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mbs.solvers.base import SchemeProperties, Solver, StepResult
from mbs.solvers.newton import NewtonConvergenceError, newton, solve_linear


@dataclass
class Rattle(Solver):
    """RATTLE, the classical symplectic constrained Stormer-Verlet scheme::

        p_half = p0 - h/2 (grad V(q0) + G(q0)^T lambda)
        q1     = q0 + h M^-1 p_half,          g(q1) = 0
        p1     = p_half - h/2 (grad V(q1) + G(q1)^T mu),   G(q1) M^-1 p1 = 0

    Applied forces F (loads, dampers, actuators) enter both half kicks as -F, evaluated at
    (t, q0, M^-1 p0) and (t + h, q1, M^-1 p1): the forced discrete Euler-Lagrange equations
    of the trapezoidal discrete Lagrangian, so a momentum map changes by exactly the impulse
    h/2 (F0 . xi(q0) + F1 . xi(q1)). A velocity-dependent F makes the second kick implicit;
    it is solved by Newton on (p1, mu) with dF/dv. The work reported per step is
    (F0 + F1) . (q1 - q0) / 2.

    Order, symplecticity, what the scheme conserves, which constraint levels hold at the step
    ends and the times of its multipliers are declared once in ``properties``
    (:class:`~mbs.solvers.base.SchemeProperties`); :func:`mbs.solvers.solver_table`
    renders them for every scheme.

    The energy error oscillates with amplitude O(h^2).

    The position step is Newton's method on lambda (m unknowns) with the exact Jacobian
    -h^2/2 G(q1) M^-1 G(q0)^T, started from the previous step's lambda (``initial_guess`` has
    no effect) and stopped when the change of q1 it causes is below the relative tolerance;
    mu follows from one linear solve. The step is explicit in the
    potential force, so stiff springs limit h as for Stormer-Verlet.
    """

    properties = SchemeProperties(
        name="rattle", order_q="2", order_p="2", symplectic=True,
        energy="bounded oscillation", momentum="exact (symmetric potentials)",
        constraints_at_step_end="g(q^{n+1}) and G M^-1 p^{n+1}",
        multiplier_times="lambda^n (position), mu^{n+1} (velocity)",
        reference="Hairer, Lubich, Wanner, Geometric Numerical Integration (2006), VII.1")
    composable = True
    drive_effort = "mean"  # lambda^n and mu^{n+1} act for half a step each

    def step(self, t: float, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        model, h, m = self.model, self.h, self.model.m
        minv = self._minv
        t1 = t + h
        jac0 = model.jacobian_matrix(q0, t)
        forced = model.has_applied_forces
        force0 = model.applied_force(t, q0, minv @ p0) if forced else 0.0
        p_free = p0 - 0.5 * h * (model.potential_gradient(q0) - force0)
        q_free = q0 + h * (minv @ p_free)
        minv_jac0_t = minv @ jac0.T
        if m:
            def residual_and_jacobian(lam, jacobian=True):
                q1 = q_free - 0.5 * h * h * (minv_jac0_t @ lam)
                if not jacobian:
                    return model.constraints(q1, t1), None
                return (model.constraints(q1, t1),
                        -0.5 * h * h * (model.jacobian_matrix(q1, t1) @ minv_jac0_t))

            def position_change(lam):
                return -0.5 * h * h * (minv_jac0_t @ lam)

            # converged when lambda's effect on q1 is below the tolerance: lambda passes
            # through zero (a pendulum released from rest), its effect has the size of q
            scale = max(float(np.max(np.abs(q0))), model.length_scale)
            lam, iterations, _ = newton(residual_and_jacobian, self._warm.lam.copy(),
                                        [slice(0, model.n)], [scale], self.newton,
                                        state_map=position_change, state_offset=q_free)
        else:
            lam, iterations = np.zeros(0), 0
        p_half = p_free - 0.5 * h * (jac0.T @ lam)
        q1 = q0 + h * (minv @ p_half)
        p_unconstrained = p_half - 0.5 * h * model.potential_gradient(q1)
        drift = model.constraint_time_derivative(q1, t1) if model.is_rheonomic else 0.0
        if forced:
            p1, mu, force1 = self._forced_kick(t1, q1, p_unconstrained, drift)
        elif m:
            jac1 = model.jacobian_matrix(q1, t1)
            gram = jac1 @ minv @ jac1.T
            try:
                mu = solve_linear(gram, (2.0 / h) * (jac1 @ (minv @ p_unconstrained) + drift))
            except (np.linalg.LinAlgError, RuntimeError) as exc:
                raise NewtonConvergenceError(
                    f"singular velocity projection ({exc})", np.inf, np.inf, iterations,
                    "redundant constraints or a singular configuration") from exc
            p1 = p_unconstrained - 0.5 * h * (jac1.T @ mu)
        else:
            mu, p1 = np.zeros(0), p_unconstrained
        self._warm.lam = lam
        enforced = (self._max(model.constraints(q1, t1)),
                    self._max(model.velocity_constraints(q1, p1, t1)))
        work = float(0.5 * (force0 + force1) @ (q1 - q0)) if forced else 0.0
        return StepResult(q1, p1, minv @ p_half, lam.copy(), mu, iterations, enforced, work)

    def _forced_kick(self, t1: float, q1: np.ndarray, p_unconstrained: np.ndarray, drift):
        """(p1, mu, F1) of p1 = p_u + h/2 (F(t1, q1, M^-1 p1) - G(q1)^T mu),
        G(q1) M^-1 p1 + dg/dt = 0, by the Newton engine on (p1, mu) from (p_u, 0) with the
        Jacobian from dF/dv (exact in one iteration for forces linear in the velocity)."""
        model, h, m, minv = self.model, self.h, self.model.m, self._minv
        n = model.n
        jac1 = model.jacobian_matrix(q1, t1)
        constraint_rows = jac1 @ (minv if model.dense else model.inverse_mass_matrix)

        def residual_and_jacobian(x, jacobian=True):
            p1, mu = x[:n], x[n:]
            force, _, by_velocity = model.applied_force_derivatives(t1, q1, minv @ p1)
            residual = np.concatenate([p1 - p_unconstrained - 0.5 * h * (force - jac1.T @ mu),
                                       jac1 @ (minv @ p1) + drift])
            if not jacobian:
                return residual, None
            top = (np.eye(n) if model.dense else sp.identity(n)) \
                - 0.5 * h * (by_velocity @ model.inverse_mass_matrix)
            matrix = (np.block([[top, 0.5 * h * jac1.T], [constraint_rows, np.zeros((m, m))]])
                      if model.dense else sp.bmat([[top, 0.5 * h * jac1.T],
                                                   [constraint_rows, None]], format="csc"))
            return residual, matrix

        scale = max(self._max(p_unconstrained), 1e-300)
        x, _, _ = newton(residual_and_jacobian, np.concatenate([p_unconstrained, np.zeros(m)]),
                         [slice(0, n)], [scale], self.newton)
        p1, mu = x[:n], x[n:]
        return p1, mu, model.applied_force(t1, q1, minv @ p1)
