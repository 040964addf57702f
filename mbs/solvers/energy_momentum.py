"""Energy-momentum scheme of seed 003, eqs. (84a-e)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbs.solvers.base import SchemeProperties, Solver


@dataclass
class EnergyMomentum(Solver):
    """Energy-momentum (EM) scheme with primary and secondary constraints (seed 003, (84)).

    Unknowns per step: q^{n+1}, p^{n+1}, lambda^{n+1}, gamma^{n+1}; v^{n+1/2} = M^-1 p^{n+1/2}
    is eliminated with (84c). With the Model's discrete derivatives (midpoint for the quadratic
    constraints and kinetic energy, the invariant-based discrete gradient (125)-(126) for the
    potential) the residual is::

        M (q1 - q0)/h - p_mid - G(q_mid)^T gamma                       = 0   (84a)
        (p1 - p0)/h + D^G V(q0, q1) + D^G g^T lambda
                    + sum_k gamma_k d2 g_k M^-1 p_mid - Q               = 0   (84b)
        g(q1)                                                           = 0   (84d)
        G(q1) M^-1 p1                                                   = 0   (84e)

    Order, symplecticity, what the scheme conserves, which constraint levels hold at the step
    ends and the times of its multipliers are declared once in ``properties``
    (:class:`~mbs.solvers.base.SchemeProperties`); :func:`mbs.solvers.solver_table`
    renders them for every scheme.

    Energy is conserved to round-off given the Newton tolerance 1e-12; the linear and angular
    momentum maps of symmetric potentials (quadratic invariants) are conserved, not for user
    constraints that are not quadratic. lambda^{n+1} is the mean constraint force of the step
    (it multiplies the discrete Jacobian between q^n and q^{n+1}): it approximates the force
    at t_{n+1/2} with order 2 (and the force at t_{n+1} with order 1 only).

    Q = Q(t + h/2, q_mid, (q1 - q0)/h) are the applied forces (loads, dampers, actuators).
    With them the energy changes by exactly their work: E(q1, p1) - E(q0, p0) =
    Q . (q1 - q0) (multiply (84b) by q1 - q0 and use (84a), (84d) and the difference of
    (84e) between the step ends). That difference is G(q1) v1 - G(q0) v0 = Gbar (v1 - v0)
    + (G(q1) - G(q0)) v_mid with Gbar = (G(q0) + G(q1)) / 2. For quadratic constraints Gbar
    is G(q_mid) and the last term is the Hessian product of (84b) applied to q1 - q0, as
    written above; for user constraints of any other form the scheme takes Gbar in (84a) and
    a discrete gradient of gamma . G(q) v_mid in (84b) (:meth:`mbs.Model.mean_jacobian_matrix`,
    :meth:`mbs.Model.discrete_hessian_vector`), which keeps the identity, and the energy,
    exact.

    The equations are written once (:meth:`_equations`) and evaluated in tensor form or
    through the model (:mod:`mbs.engine.equations`). Newton's Jacobian follows from them; it
    is exact for every potential (the derivative of Gonzalez's quotient included, see
    :meth:`mbs.potential_group.PotentialGroup.discrete_gradient_jacobian`). With user
    constraints that are not quadratic, the derivatives of the mean Jacobian and of the
    corrected Hessian product are taken at the midpoint; Newton then converges linearly and
    goes on until its iterate is exact to round-off (:attr:`iterates_to_roundoff`).
    """

    properties = SchemeProperties(
        name="em", symplectic=False, energy="exact (round-off)",
        momentum="exact (symmetric potentials, quadratic constraints)",
        multiplier_times="lambda^{n+1}, gamma^{n+1}: the step's mean forces (~ t_{n+1/2})",
        reference="Kinon, Betsch, Schneider (2023), (84)")
    composable = True

    def _equations(self, layout, shifted: bool = False):
        """(84a-e) over the data (q0, p0) and the unknowns (q1, p1, lambda, gamma)."""
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        builder = layout({"q0": n, "p0": n}, {"q1": n, "p1": n, "lam": m, "gam": m})
        q0, p0, q1, p1, lam, gam = builder.variables("q0", "p0", "q1", "p1", "lam", "gam")
        q_mid, p_mid = 0.5 * (q0 + q1), 0.5 * (p0 + p1)
        for name, size in (("a", n), ("b", n), ("c", m), ("d", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(model.mass_matrix / h) - p_mid)
        mid, end = 0.5 * h, h  # the times of q_mid and q1 (drives)
        builder.add_mean_jacobian_transpose_product("a", q0, q1, gam, -1.0, mid)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        builder.add_discrete_jacobian_transpose_product("b", q0, q1, lam, 1.0, mid)
        builder.add_discrete_hessian_product("b", q0, q1, gam,
                                             p_mid.mapped(model.inverse_mass_matrix), 1.0, mid)
        builder.add_potential_discrete_gradient("b", q0, q1)
        # applied forces at the midpoint with the secant velocity: then E1 - E0 equals
        # their work Q . (q1 - q0) exactly (the balance below (84) with Q added to (84b))
        builder.add_applied_force("b", q_mid, (q1 - q0) * (1.0 / h), 0.5 * h, -1.0, h)
        builder.add_constraints("c", q1, end)
        builder.add_jacobian_product("d", q1, p1.mapped(model.inverse_mass_matrix), 1.0, end)
        return builder

    #: The step's work includes that of the drives' reactions (see :meth:`_work`).
    reports_drive_work = True

    def _work(self, x: np.ndarray) -> float:
        """Work of the applied forces, plus that of the drives' reactions such that the
        energy balance E1 - E0 = work holds exactly: for the drive rows k (weights at
        t_mid), -lambda_k (g_k(q1) - g_k(q0)) - gamma_k (G_k(q1) v1 - G_k(q0) v0), the
        terms by which the balance below (84) differs from that of time-independent
        constraints."""
        work = super()._work(x)
        model = self.model
        if not model.is_rheonomic:
            return work
        n, m = model.n, model.m
        q0, p0 = self._step_data[:n], self._step_data[n:]
        q1, p1 = x[:n], x[n:2 * n]
        lam, gam = x[2 * n:2 * n + m], x[2 * n + m:]
        rows, middle = model.drive_rows, self._time + 0.5 * self.h
        change = model.constraints(q1, middle)[rows] - model.constraints(q0, middle)[rows]
        rate_change = (model.constraint_jacobian(q1, middle) @ self._minv.dot(p1)
                       - model.constraint_jacobian(q0, middle) @ self._minv.dot(p0))[rows]
        return work - float(lam[rows] @ change + gam[rows] @ rate_change)

    def _identity_block(self):
        n = self.model.n
        return (slice(0, n), slice(n, 2 * n), -0.5)  # d(84a)/dp1 = -I/2

    def _step_velocity(self, q0: np.ndarray, p0: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._minv.dot(0.5 * (p0 + x[self.model.n:2 * self.model.n]))  # v^{n+1/2}

    def _velocity_map(self):
        n, m = self.model.n, self.model.m
        half_inverse = 0.5 * self.model.inverse_mass_matrix.toarray()
        from_data, from_unknowns = np.zeros((n, 2 * n)), np.zeros((n, 2 * n + 2 * m))
        from_data[:, n:] = half_inverse  # v^{n+1/2} = M^-1 (p0 + p1) / 2
        from_unknowns[:, n:2 * n] = half_inverse
        return from_data, from_unknowns
