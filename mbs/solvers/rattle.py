"""RATTLE (Andersen 1983; Hairer, Lubich, Wanner, Geometric Numerical Integration, VII.1.4)."""

from __future__ import annotations

from dataclasses import dataclass

from mbs.solvers.base import SchemeProperties, Solver


@dataclass
class Rattle(Solver):
    """RATTLE, the classical symplectic constrained Stormer-Verlet scheme::

        p_half = p0 - h/2 (grad V(q0) + G(q0)^T lambda)
        q1     = q0 + h M^-1 p_half,          g(q1) = 0
        p1     = p_half - h/2 (grad V(q1) + G(q1)^T mu),   G(q1) M^-1 p1 = 0

    Applied forces F (loads, dampers, actuators) enter both half kicks as -F, evaluated at
    (t, q0, M^-1 p0) and (t + h, q1, M^-1 p1): the forced discrete Euler-Lagrange equations
    of the trapezoidal discrete Lagrangian, so a momentum map changes by exactly the impulse
    h/2 (F0 . xi(q0) + F1 . xi(q1)). The work reported per step is (F0 + F1) . (q1 - q0) / 2.

    Order, symplecticity, what the scheme conserves, which constraint levels hold at the step
    ends and the times of its multipliers are declared once in ``properties``
    (:class:`~mbs.solvers.base.SchemeProperties`); :func:`mbs.solvers.solver_table`
    renders them for every scheme.

    The energy error oscillates with amplitude O(h^2).

    The step equations are written once (:meth:`_equations`) over the unknowns (q1, p1,
    lambda, mu), with p_half eliminated by the position update, and solved by the shared
    Newton engine on every backend (tensor form, compiled kernel, or through the model).
    The step is explicit in the potential force, so stiff springs limit h as for
    Stormer-Verlet.
    """

    properties = SchemeProperties(
        name="rattle", symplectic=True, energy="bounded oscillation",
        multiplier_times="lambda^n (position), mu^{n+1} (velocity)",
        reference="Hairer, Lubich, Wanner, Geometric Numerical Integration (2006), VII.1")
    composable = True
    drive_effort = "mean"  # lambda^n and mu^{n+1} act for half a step each
    # mu is a constraint force like lambda: it starts from the last step's and is not a
    # position correction of the predictor
    _warm_gamma = True
    _predict_with_gamma = False

    def _equations(self, layout, shifted: bool = False):
        """RATTLE over the data (q0, p0) and the unknowns (q1, p1, lambda, mu)::

            (a)  M (q1 - q0)/h - p0 + h/2 (grad V(q0) + G(q0)^T lambda - F0)          = 0
            (b)  (p1 - p0)/h + 1/2 (grad V(q0) + G(q0)^T lambda - F0)
                             + 1/2 (grad V(q1) + G(q1)^T mu - F1)                    = 0
            (c)  g(q1) = 0,   (d)  G(q1) M^-1 p1 + dg/dt = 0

        (a) is the position update with p_half = M (q1 - q0)/h; (b) the sum of both half
        kicks."""
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        builder = layout({"q0": n, "p0": n}, {"q1": n, "p1": n, "lam": m, "mu": m})
        q0, p0, q1, p1, lam, mu = builder.variables("q0", "p0", "q1", "p1", "lam", "mu")
        v0, v1 = p0.mapped(model.inverse_mass_matrix), p1.mapped(model.inverse_mass_matrix)
        for name, size in (("a", n), ("b", n), ("c", m), ("d", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(model.mass_matrix / h) - p0)
        step = q1 - q0  # the work of the forces is (F0 + F1) . (q1 - q0) / 2
        for equation, scale, work in (("a", 0.5 * h, 0.0), ("b", 0.5, 0.5)):  # first half kick
            builder.add_potential_gradient(equation, q0, scale)
            builder.add_jacobian_transpose_product(equation, q0, lam, scale, 0.0)
            builder.add_applied_force(equation, q0, v0, 0.0, -scale, work, step)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        builder.add_potential_gradient("b", q1, 0.5)  # the second half kick
        builder.add_jacobian_transpose_product("b", q1, mu, 0.5, h)
        builder.add_applied_force("b", q1, v1, h, -0.5, 0.5, step)
        builder.add_constraints("c", q1, h)
        builder.add_jacobian_product("d", q1, v1, 1.0, h)
        return builder

    def _identity_block(self):
        n = self.model.n
        return (slice(n, 2 * n), slice(n, 2 * n), 1.0 / self.h)  # d(b)/dp1 = I/h
