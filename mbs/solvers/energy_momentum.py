"""Energy-momentum scheme of seed 003, eqs. (84a-e)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbs.solvers.base import SchemeProperties, Solver, StepResult, assemble
from mbs.solvers.polynomial import QuadraticSystem


@dataclass
class EnergyMomentum(Solver):
    """Energy-momentum (EM) scheme with primary and secondary constraints (seed 003, (84)).

    Unknowns per step: q^{n+1}, p^{n+1}, lambda^{n+1}, gamma^{n+1}; v^{n+1/2} = M^-1 p^{n+1/2}
    is eliminated with (84c). With the Model's discrete derivatives (midpoint for the quadratic
    constraints and kinetic energy, the invariant-based discrete gradient (125)-(126) for the
    potential) the residual is::

        M (q1 - q0)/h - p_mid - G(q_mid)^T gamma                       = 0   (84a)
        (p1 - p0)/h + D^G V(q0, q1) + D^G g^T lambda
                    + sum_k gamma_k d2 g_k M^-1 p_mid                   = 0   (84b)
        g(q1)                                                           = 0   (84d)
        G(q1) M^-1 p1                                                   = 0   (84e)

    ============================  ==============================================================
    order (q, p)                  2, 2 (lambda: 1)
    symplectic                    no
    energy                        conserved to round-off (given Newton tolerance 1e-12)
    momentum                      linear and angular momentum maps conserved for symmetric
                                  potentials (quadratic invariants); not for user constraints
                                  that are not quadratic
    constraints at step ends      g(q^{n+1}) = 0 and G(q^{n+1}) M^-1 p^{n+1} = 0 exactly
    ============================  ==============================================================

    Newton's Jacobian is analytic and exact when every potential term is a polynomial of
    degree <= 2 in its invariants (gravity, quartic springs); for other potentials the
    derivative of the discrete gradient is taken as 1/2 Hess V(q_mid), which differs by
    O(|q1 - q0|): Newton then converges linearly with a rate O(h).
    """

    properties = SchemeProperties(
        name="em", order_q="2", order_p="2", symplectic=False,
        energy="exact (round-off)", momentum="exact (symmetric potentials)",
        constraints_at_step_end="g(q^{n+1}) and G M^-1 p^{n+1}",
        multiplier_times="lambda^{n+1}, gamma^{n+1}",
        reference="Kinon, Betsch, Schneider (2023), (84)")

    def _build_polynomial(self) -> QuadraticSystem:
        """(84a-e) as a quadratic polynomial in (q0, p0; q1, p1, lambda, gamma)."""
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        builder, (q0, p0, q1, p1, lam, gam) = self._polynomial_builder()
        q_mid, p_mid = 0.5 * (q0 + q1), 0.5 * (p0 + p1)
        for name, size in (("a", n), ("b", n), ("c", m), ("d", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(model.mass_matrix / h) - p_mid)
        builder.add_jacobian_transpose_product("a", q_mid, gam, -1.0)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        builder.add_jacobian_transpose_product("b", q_mid, lam)
        builder.add_hessian_product("b", gam, p_mid.mapped(model.inverse_mass_matrix))
        force = model.constant_potential_gradient()
        if force is not None:
            builder.add_constant("b", force)
        builder.add_constraints("c", q1)
        builder.add_jacobian_product("d", q1, p1.mapped(model.inverse_mass_matrix))
        return builder.build(dense=self._dense_polynomial())

    def _identity_block(self, polynomial: bool):
        n = self.model.n
        return (slice(0, n), slice(n, 2 * n), -0.5)  # d(84a)/dp1 = -I/2

    def _potential_force(self, q0: np.ndarray, q1: np.ndarray, jacobian: bool):
        # the discrete gradient D^G V(q0, q1) of (84b)
        model = self.model
        return (model.potential_discrete_gradient(q0, q1),
                model.potential_discrete_gradient_jacobian_matrix(q0, q1) if jacobian else None)

    def _velocity_map(self):
        n, m = self.model.n, self.model.m
        half_inverse = 0.5 * self.model.inverse_mass_matrix.toarray()
        from_data, from_unknowns = np.zeros((n, 2 * n)), np.zeros((n, 2 * n + 2 * m))
        from_data[:, n:] = half_inverse  # v^{n+1/2} = M^-1 (p0 + p1) / 2
        from_unknowns[:, n:2 * n] = half_inverse
        return from_data, from_unknowns

    def _polynomial_step(self, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        if self._compiled is not None:
            return self._compiled_step(q0, p0)
        n, m = self.model.n, self.model.m
        x, iterations, residual = self._solve_polynomial(
            q0, p0, self._initial_guess(q0, p0), self._potential_terms(q0))
        q1, p1 = x[:n], x[n:2 * n]
        self._record_multipliers(x[2 * n:2 * n + m], x[2 * n + m:], copy=False)
        # rows (84d) and (84e) of the residual at the accepted iterate
        return StepResult(q1, p1, self._minv.dot(0.5 * (p0 + p1)), x[2 * n:2 * n + m],
                          x[2 * n + m:], iterations, self._enforced_rows(residual))

    def newton_system(self, q0: np.ndarray, p0: np.ndarray):
        """(residual_and_jacobian, x0) of the step from (q0, p0); x = (q1, p1, lambda,
        gamma)."""
        if self._polynomial is not None:
            return self._polynomial_newton_system(q0, p0)
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        mass, minv, eye, dense = self._mass, self._minv, self._identity, model.dense

        def residual_and_jacobian(x, jacobian=True):
            q1, p1 = x[:n], x[n:2 * n]
            lam, gam = x[2 * n:2 * n + m], x[2 * n + m:]
            q_mid, p_mid = 0.5 * (q0 + q1), 0.5 * (p0 + p1)
            v_mid = minv @ p_mid
            g_mid = model.discrete_jacobian_matrix(q0, q1)
            h_gam = model.hessian_product_matrix(q_mid, gam)
            h_lam = model.hessian_product_matrix(q_mid, lam)
            g1 = model.jacobian_matrix(q1)
            v1 = minv @ p1
            r_a = mass @ (q1 - q0) / h - p_mid - g_mid.T @ gam
            r_b = ((p1 - p0) / h + model.potential_discrete_gradient(q0, q1)
                   + g_mid.T @ lam + h_gam @ v_mid)
            residual = np.concatenate([r_a, r_b, model.constraints(q1), g1 @ v1])
            if not jacobian:
                return residual, None
            d_force = model.potential_discrete_gradient_jacobian_matrix(q0, q1)
            if m == 0:
                return residual, assemble([[mass / h, -0.5 * eye],
                                           [d_force, eye / h]], dense)
            jac = assemble([
                [mass / h - 0.5 * h_gam, -0.5 * eye, None, -g_mid.T],
                [d_force + 0.5 * h_lam, eye / h + 0.5 * (h_gam @ minv), g_mid.T,
                 model.hessian_vector_matrix(q_mid, v_mid).T],
                [g1, None, None, None],
                [model.hessian_vector_matrix(q1, v1), g1 @ minv, None, None],
            ], dense)
            return residual, jac

        return residual_and_jacobian, self._initial_guess(q0, p0)

    def _step(self, t: float, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        if self._polynomial is not None:
            return self._polynomial_step(q0, p0)
        model, n, m = self.model, self.model.n, self.model.m
        residual_and_jacobian, x0 = self.newton_system(q0, p0)
        x, iterations, _ = self._solve(residual_and_jacobian, x0, q0, p0)
        q1, p1 = x[:n], x[n:2 * n]
        gam = x[2 * n + m:]
        self._record_multipliers(x[2 * n:2 * n + m], gam)
        enforced = (self._max(model.constraints(q1)),
                    self._max(model.jacobian_matrix(q1) @ (self._minv @ p1)))
        return StepResult(q1, p1, self._minv @ (0.5 * (p0 + p1)), self._lam.copy(), gam,
                          iterations, enforced)
