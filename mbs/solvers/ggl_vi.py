"""GGL variational integrators of seed 003: first-order scheme (55) and theta-methods (79), (82).

All three are symplectic and conserve momentum maps of symmetric systems (seed 003, App. A.6,
A.7). They differ in where the position constraint g and the velocity constraint G v are
enforced:

* variant "S" (55): g(q^{n+1}) = 0 and G(q_bar) M^-1 p^{n+1} = 0 with q_bar = q^n + h v^n;
* variant "A" (79): g(q^{n+theta}) = 0 and G(q^{n+theta}) v^{n+1} = 0 only (both are violated
  at the step ends by design);
* variant "B" (82): g(q^{n+1}) = 0 and G(q^{n+theta}) v^{n+1} = 0.

Here q^{n+theta} = (1 - theta) q^n + theta q^{n+1} and p^{n+1-theta} = theta p^n +
(1 - theta) p^{n+1}.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mbs.errors import ModelError
from mbs.solvers.base import SchemeProperties, Solver, StepResult, assemble
from mbs.solvers.polynomial import QuadraticSystem, QuadraticSystemBuilder

_PROPERTIES = {
    "S": SchemeProperties(
        name="ggl-vi-s", order_q="1", order_p="1", symplectic=True,
        energy="bounded oscillation", momentum="exact (symmetric potentials)",
        constraints_at_step_end="g(q^{n+1}); G(q_bar) M^-1 p^{n+1} at q_bar = q^n + h v^n",
        multiplier_times="lambda^n, gamma^{n+1}",
        reference="Kinon, Betsch, Schneider (2023), (55)"),
    "A": SchemeProperties(
        name="ggl-vi-a", order_q="2", order_p="2", symplectic=True,
        energy="bounded oscillation", momentum="exact (symmetric potentials)",
        constraints_at_step_end="none: g and G v hold at q^{n+theta} only",
        multiplier_times="lambda^n, gamma^n",
        reference="Kinon, Betsch, Schneider (2023), (79)"),
    "B": SchemeProperties(
        name="ggl-vi-b", order_q="1", order_p="1", symplectic=True,
        energy="bounded oscillation", momentum="exact (symmetric potentials)",
        constraints_at_step_end="g(q^{n+1}); G v^{n+1} at q^{n+theta}",
        multiplier_times="lambda^n, gamma^n",
        reference="Kinon, Betsch, Schneider (2023), (82)"),
}


@dataclass
class GGLVI(Solver):
    """GGL variational integrator (seed 003, section 4).

    Parameters
    ----------
    variant : {"S", "A", "B"}
        "S" first-order scheme (55); "A" theta-method with intermediate constraint
        evaluation (79); "B" theta-method with trapezoidal constraint evaluation (82).
    theta : float or None
        Variant A: theta in (0, 1) as the paper allows, default 1/2 (second order). Any
        other theta is accepted but warned about, because the scheme is then unstable: for
        theta < 1/2, g(q^{n+theta}) = 0 multiplies a deviation of q^n from the constraint
        manifold by -(1 - theta)/theta each step; for theta > 1/2, G(q^{n+theta}) v^{n+1} = 0
        with M v^{n+1} = theta p^n + (1 - theta) p^{n+1} (79c) multiplies the momentum
        component normal to the constraints, G M^-1 p^n, by -theta/(1 - theta). Both
        factors hold exactly for linear constraints and do not depend on h, so smaller steps
        do not help (measured on the 3D pendulum at h = 0.01: q.p grows by 1.225 per step
        at theta = 0.55 (theta/(1 - theta) = 1.222) and Newton fails after 152 steps; 0.52:
        342 steps; 0.6: 69; the heavy top and the four-bar fail alike). Variant B: theta in
        [0, 1], default 1 (scheme (83)). Ignored by variant S.
    vartheta : float or None
        Variant B only: in (0, 1), default 1/2. The paper allows vartheta = 1, but then
        lambda^n drops out of M v^{n+1} (its coefficient is h (1 - vartheta) G(q^n)^T once
        p^{n+1} is eliminated) and the step equations are singular, so it is rejected.

    Orders, conserved quantities and constraint levels per variant:
    :func:`mbs.solvers.solver_table`.

    Energy is not conserved but oscillates boundedly; momentum maps of symmetric systems are
    conserved to round-off. Newton Jacobians are analytic (exact for quadratic constraints).
    """

    variant: str = "A"
    theta: float | None = None
    vartheta: float | None = None

    def __post_init__(self):
        super().__post_init__()
        variant = str(self.variant).upper()
        if variant not in _PROPERTIES:
            raise ModelError(f"GGLVI: variant must be 'S', 'A' or 'B', got {self.variant!r}")
        self.variant = variant
        if variant == "A":
            self.theta = 0.5 if self.theta is None else float(self.theta)
            if not 0.0 < self.theta < 1.0:
                raise ModelError(f"GGLVI variant A: theta must lie in (0, 1), got "
                                 f"{self.theta}")
            if self.theta < 0.5:
                # g(q^{n+theta}) = 0 maps a normal deviation e_n of q^n to
                # e_{n+1} = -(1 - theta)/theta e_n: growth for theta < 1/2.
                warnings.warn(
                    f"GGLVI variant A with theta = {self.theta} < 1/2 amplifies the "
                    f"constraint drift of q^n by (1 - theta)/theta = "
                    f"{(1 - self.theta) / self.theta:.3g} per step, at any step size, and is "
                    f"unstable; use theta = 1/2 (or variant B)", stacklevel=3)
            elif self.theta > 0.5:
                # G v^{n+1} = 0 with M v^{n+1} = theta p^n + (1 - theta) p^{n+1} maps the
                # normal momentum f_n = G M^-1 p^n to f_{n+1} = -theta/(1 - theta) f_n.
                warnings.warn(
                    f"GGLVI variant A with theta = {self.theta} > 1/2 amplifies the momentum "
                    f"normal to the constraints (G M^-1 p^n) by theta/(1 - theta) = "
                    f"{self.theta / (1 - self.theta):.3g} per step, at any step size, and is "
                    f"unstable; use theta = 1/2 (or variant B)", stacklevel=3)
        elif variant == "B":
            self.theta = 1.0 if self.theta is None else float(self.theta)
            self.vartheta = 0.5 if self.vartheta is None else float(self.vartheta)
            if not 0.0 <= self.theta <= 1.0:
                raise ModelError(f"GGLVI variant B: theta must lie in [0, 1], got "
                                 f"{self.theta}")
            if not 0.0 < self.vartheta < 1.0:
                # Eliminating p^{n+1} from (82b,c) leaves lambda^n in the velocity update
                # only through h (1 - vartheta) G(q^n)^T lambda^n: at vartheta = 1 nothing
                # enforces g(q^{n+1}) = 0 and the Newton matrix is singular.
                raise ModelError(f"GGLVI variant B: vartheta must lie in (0, 1), got "
                                 f"{self.vartheta} (vartheta = 1 removes lambda from the "
                                 f"velocity update and leaves the step equations singular)")
        self.properties = _PROPERTIES[variant]

    def _polynomial_applies(self, model) -> bool:
        # Variant A only: there (79c) is linear, so v^{n+1} = M^-1 (theta p^n + (1 - theta)
        # p^{n+1}) is eliminated and the step has the unknowns of EM. In S and B the velocity
        # equation is bilinear and the assembled path is used.
        return self.variant == "A" and super()._polynomial_applies(model)

    def _build_polynomial(self) -> QuadraticSystem:
        """(79a-e) with v^{n+1} eliminated, as a quadratic polynomial in (q0, p0) and the
        unknowns (q1, p1, lambda, gamma) -- for small (dense) models in the shifted unknowns
        y = q1 + (1 - theta)/theta q0 = q^{n+theta}/theta, z = p1 + theta/(1 - theta) p0 =
        M v^{n+1}/(1 - theta) instead of q1, p1.

        In (q1, p1) the products G(q^{n+theta})^T gamma, H(gamma) v^{n+1}, g(q^{n+theta})
        and G(q^{n+theta}) v^{n+1} mix data and unknowns (81 data-data and 162 data-unknown
        terms on the heavy top, folded into every step); in (y, z) the data enter linearly
        only, so the Newton matrix does not depend on the step data at all. The system's
        public methods still take and return (q1, p1, lambda, gamma) (see
        :meth:`QuadraticSystemBuilder.build`). Large (sparse) models keep q1, p1: with the
        shifted unknowns their simplified Newton needed 20 instead of 6 LU factorisations
        over 20 steps of the 1000-body chain (measured; the cause was not analysed)."""
        model, h, n, m, theta = self.model, self.h, self.model.n, self.model.m, self.theta
        dense = self._dense_polynomial()
        q_shift, p_shift = (1.0 - theta) / theta, theta / (1.0 - theta)
        if dense:
            builder = QuadraticSystemBuilder(model.quadratic_constraint_table,
                                             {"q0": n, "p0": n},
                                             {"y": n, "z": n, "lam": m, "gam": m})
            q0, p0, y, z, lam, gam = (builder.variable(name)
                                      for name in ("q0", "p0", "y", "z", "lam", "gam"))
            q_th = y * theta
            momentum = z * (1.0 - theta)  # = M v^{n+1} by (79c)
            q1, p1 = y - q0 * q_shift, z - p0 * p_shift
        else:
            builder, (q0, p0, q1, p1, lam, gam) = self._polynomial_builder()
            q_th = q0 * (1.0 - theta) + q1 * theta
            momentum = p0 * theta + p1 * (1.0 - theta)
        v1 = momentum.mapped(model.inverse_mass_matrix)
        for name, size in (("a", n), ("b", n), ("d", m), ("e", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(model.mass_matrix / h) - momentum)
        builder.add_jacobian_transpose_product("a", q_th, gam, -1.0)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        builder.add_jacobian_transpose_product("b", q_th, lam)
        builder.add_hessian_product("b", gam, v1)
        force = model.constant_potential_gradient()
        if force is not None:
            builder.add_constant("b", force)
        builder.add_constraints("d", q_th)
        builder.add_jacobian_product("e", q_th, v1)
        if not dense:
            return builder.build(dense=False)
        identity = sp.identity(n, format="csr")
        shift = sp.bmat([[q_shift * identity, None], [None, p_shift * identity],
                         [sp.csr_matrix((2 * m, n)), None]], format="csr")
        return builder.build(dense=True, shift=shift)

    @property
    def _multiplier_lag(self) -> int:
        # variant A's lambda^n, gamma^n alternate from step to step (measured on the heavy top)
        return 2 if self.variant == "A" else 1

    @property
    def _new_momentum_weight(self) -> float:
        # q1 = q0 + h M^-1 ((theta p0 + (1 - theta) p1) for A/B; p1 for S
        return 1.0 if self.variant == "S" else 1.0 - self.theta

    def _polynomial_key(self) -> tuple:
        return (self.variant, self.theta, self.vartheta)

    def _identity_block(self, polynomial: bool):
        n = self.model.n
        if self.variant == "S":
            return None
        if polynomial:  # (79a) with v1 eliminated: d/dp1 = -(1 - theta) I
            return (slice(0, n), slice(n, 2 * n), -(1.0 - self.theta))
        # assembled theta variants: d(79c)/dp1 = -(1 - theta) I (rows of (79c), columns of p1)
        return (slice(2 * n, 3 * n), slice(n, 2 * n), -(1.0 - self.theta))

    def _potential_force(self, q0: np.ndarray, q1: np.ndarray, jacobian: bool):
        # grad V(q^{n+theta}) of (79b), derivative theta Hess V(q^{n+theta})
        model, theta = self.model, self.theta
        q_th = (1.0 - theta) * q0 + theta * q1
        return (model.potential_gradient(q_th),
                theta * model.potential_hessian_matrix(q_th) if jacobian else None)

    def _velocity_map(self):
        n, m, theta = self.model.n, self.model.m, self.theta
        inverse = self.model.inverse_mass_matrix.toarray()
        from_data, from_unknowns = np.zeros((n, 2 * n)), np.zeros((n, 2 * n + 2 * m))
        from_data[:, n:] = theta * inverse  # v^{n+1} = M^-1 (theta p0 + (1 - theta) p1)
        from_unknowns[:, n:2 * n] = (1.0 - theta) * inverse
        return from_data, from_unknowns

    _warm_gamma = True

    def start(self, model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        super().start(model, q0, p0, h)
        if self.theta is not None:
            # v^{n+1} = theta M^-1 p^n + (1 - theta) M^-1 p^{n+1} (79c), factors folded in
            self._theta_minv = self.theta * self._minv
            self._rest_minv = (1.0 - self.theta) * self._minv

    def _polynomial_step(self, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        if self._compiled is not None:
            return self._compiled_step(q0, p0)
        n, m = self.model.n, self.model.m
        x, iterations, residual = self._solve_polynomial(
            q0, p0, self._initial_guess(q0, p0), self._potential_terms(q0))
        q1, p1 = x[:n], x[n:2 * n]
        lam, gam = x[2 * n:2 * n + m], x[2 * n + m:]
        self._record_multipliers(lam, gam, copy=False)
        inner = getattr(self._polynomial, "shifted_solution", None)
        if inner is not None:  # z = p1 + theta/(1 - theta) p0 = M v1/(1 - theta): one product
            v1 = self._rest_minv.dot(inner[n:2 * n])
        else:
            v1 = self._theta_minv.dot(p0) + self._rest_minv.dot(p1)
        # (79d), (79e) at the accepted iterate
        return StepResult(q1, p1, v1, lam, gam, iterations, self._enforced_rows(residual))

    def newton_system(self, q0: np.ndarray, p0: np.ndarray):
        """(residual_and_jacobian, x0) of the step from (q0, p0); x = (q1, p1, v, lambda,
        gamma), or (q1, p1, lambda, gamma) with the polynomial backend (variant A)."""
        if self._polynomial is not None:
            return self._polynomial_newton_system(q0, p0)
        if self.variant == "S":
            return self._system_first_order(q0, p0)
        return self._system_theta(q0, p0)

    def _step(self, t: float, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        if self._polynomial is not None:
            return self._polynomial_step(q0, p0)
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        residual_and_jacobian, x0 = self.newton_system(q0, p0)
        x, iterations, _ = self._solve(residual_and_jacobian, x0, q0, p0)
        q1, p1, v = x[:n], x[n:2 * n], x[2 * n:3 * n]
        self._record_multipliers(x[3 * n:3 * n + m], x[3 * n + m:])
        if self.variant == "S":
            q_bar = q0 + h * v
            position = model.constraints(q1)
            velocity = model.jacobian_matrix(q_bar) @ (self._minv @ p1)
        else:
            q_th = (1.0 - self.theta) * q0 + self.theta * q1
            position = model.constraints(q1 if self.variant == "B" else q_th)
            velocity = model.jacobian_matrix(q_th) @ v
        return StepResult(q1, p1, v, self._lam.copy(), self._gam.copy(), iterations,
                          (self._max(position), self._max(velocity)))

    def _assembled_guess(self, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
        """x0 = (q1, p1, v, lambda, gamma) of the assembled systems; v follows the predicted
        momenta as in (79c) / (55c)."""
        q1, p1 = self._predict_state(q0, p0)
        weight = self._new_momentum_weight
        return np.concatenate([q1, p1, self._minv @ ((1.0 - weight) * p0 + weight * p1),
                               *self._multiplier_guess()])

    # -- (55) -------------------------------------------------------------------------------
    def _system_first_order(self, q0, p0):
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        mass, minv, eye, dense = self._mass, self._minv, self._identity, model.dense
        force0 = model.potential_gradient(q0)
        jac0 = model.jacobian_matrix(q0)
        # unknowns x = (q1, p1, v, lambda^n, gamma^{n+1})

        def residual_and_jacobian(x, jacobian=True):
            q1, p1, v = x[:n], x[n:2 * n], x[2 * n:3 * n]
            lam, gam = x[3 * n:3 * n + m], x[3 * n + m:]
            q_bar = q0 + h * v
            w = minv @ p1
            g_bar = model.jacobian_matrix(q_bar)
            h_gam = model.hessian_product_matrix(q_bar, gam)
            k_w = model.hessian_vector_matrix(q_bar, w)
            residual = np.concatenate([
                mass @ (q1 - q0) / h - mass @ v - g_bar.T @ gam,          # (55a)
                (p1 - p0) / h + force0 + jac0.T @ lam + h_gam @ w,       # (55b)
                mass @ v - p1 - h * (h_gam @ w),                         # (55c)
                model.constraints(q1),                                   # (55d)
                g_bar @ w,                                               # (55e)
            ])
            if not jacobian:
                return residual, None
            jac = assemble([
                [mass / h, None, -mass - h * h_gam, None, -g_bar.T],
                [None, eye / h + h_gam @ minv, None, jac0.T, k_w.T],
                [None, -eye - h * (h_gam @ minv), mass, None, -h * k_w.T],
                [model.jacobian_matrix(q1), None, None, None, None],
                [None, g_bar @ minv, h * k_w, None, None],
            ], dense)
            return residual, jac

        return residual_and_jacobian, self._assembled_guess(q0, p0)

    # -- (79) and (82) ----------------------------------------------------------------------
    def _system_theta(self, q0, p0):
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        mass, eye, dense = self._mass, self._identity, model.dense
        theta = self.theta
        option_b = self.variant == "B"
        vartheta = self.vartheta if option_b else None
        jac0 = model.jacobian_matrix(q0)
        # unknowns x = (q1, p1, v1, lambda^n, gamma^n)

        def residual_and_jacobian(x, jacobian=True):
            q1, p1, v1 = x[:n], x[n:2 * n], x[2 * n:3 * n]
            lam, gam = x[3 * n:3 * n + m], x[3 * n + m:]
            q_th = (1.0 - theta) * q0 + theta * q1
            g_th = model.jacobian_matrix(q_th)
            h_gam = model.hessian_product_matrix(q_th, gam)
            h_lam = model.hessian_product_matrix(q_th, lam)
            k_v = model.hessian_vector_matrix(q_th, v1)
            hess_v = model.potential_hessian_matrix(q_th)
            r_a = mass @ (q1 - q0) / h - mass @ v1 - g_th.T @ gam
            r_c = mass @ v1 - theta * p0 - (1.0 - theta) * p1
            if option_b:
                jac1 = model.jacobian_matrix(q1)
                g_trap = (1.0 - vartheta) * jac0 + vartheta * jac1
                g_c = h * (theta * (1.0 - vartheta) * jac0 - (1.0 - theta) * vartheta * jac1)
                r_b = ((p1 - p0) / h + model.potential_gradient(q_th) + g_trap.T @ lam
                       + h_gam @ v1)
                r_c = r_c + g_c.T @ lam
                r_d = model.constraints(q1)
                d_rb_dq = theta * hess_v + vartheta * h_lam
                d_rc_dq = -h * (1.0 - theta) * vartheta * h_lam
                d_rd_dq = jac1
                d_rb_dlam, d_rc_dlam = g_trap.T, g_c.T
            else:
                r_b = ((p1 - p0) / h + model.potential_gradient(q_th) + g_th.T @ lam
                       + h_gam @ v1)
                r_d = model.constraints(q_th)
                d_rb_dq = theta * (hess_v + h_lam)
                d_rc_dq = None
                d_rd_dq = theta * g_th
                d_rb_dlam, d_rc_dlam = g_th.T, None
            residual = np.concatenate([r_a, r_b, r_c, r_d, g_th @ v1])
            if not jacobian:
                return residual, None
            jac = assemble([
                [mass / h - theta * h_gam, None, -mass, None, -g_th.T],
                [d_rb_dq, eye / h, h_gam, d_rb_dlam, k_v.T],
                [d_rc_dq, -(1.0 - theta) * eye, mass, d_rc_dlam, None],
                [d_rd_dq, None, None, None, None],
                [theta * k_v, None, g_th, None, None],
            ], dense)
            return residual, jac

        return residual_and_jacobian, self._assembled_guess(q0, p0)
