"""GGL variational integrators of seed 003: first-order scheme (55) and theta-methods (79), (82).

All three are symplectic and conserve momentum maps of symmetric systems (seed 003, App. A.6,
A.7). They differ in where the position constraint g and the velocity constraint G v are
enforced:

* variant "S" (55): g(q^{n+1}) = 0 and G(q_bar) M^-1 p^{n+1} = 0 with q_bar = q^n + h v^n;
* variant "A" (79): g(q^{n+theta}) = 0 and G(q^{n+theta}) v^{n+1} = 0 only (both are violated
  at the step ends by design);
* variant "B" (82): g(q^{n+1}) = 0 and G(q^{n+theta}) v^{n+1} = 0; its node momentum
  p^{n+1} is taken on the velocity constraints by an impulse -G(q^{n+1})^T mu, which leaves
  the motion as it is (see :meth:`GGLVI._equations_trapezoidal`).

Here q^{n+theta} = (1 - theta) q^n + theta q^{n+1} and p^{n+1-theta} = theta p^n +
(1 - theta) p^{n+1}.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mbs.errors import ModelError, warn_user
from mbs.solvers.base import SchemeProperties, Solver

#: Per variant: (order in q and p, constraints at the step end, multiplier times, equation of
#: Kinon, Betsch, Schneider (2023)); every variant is symplectic, with bounded energy error and
#: exact momentum maps for symmetric potentials.
_VARIANTS = {
    "S": ("1", "g(q^{n+1}); G(q_bar) M^-1 p^{n+1} at q_bar = q^n + h v^n",
          "lambda^n, gamma^{n+1}", "(55)"),
    "A": ("2", "none: g and G v hold at q^{n+theta} only", "lambda^n, gamma^n", "(79)"),
    "B": ("1", "g(q^{n+1}); G M^-1 p^{n+1} at q^{n+1}; G v^{n+1} at q^{n+theta}",
          "lambda^n + mu/h (mean force of the step), gamma^n", "(82)"),
}
_PROPERTIES = {
    variant: SchemeProperties(
        name=f"ggl-vi-{variant.lower()}", order_q=order, order_p=order, symplectic=True,
        energy="bounded oscillation", constraints_at_step_end=constraints,
        multiplier_times=multipliers,
        reference=f"Kinon, Betsch, Schneider (2023), {equation}",
        nodes_meet_constraints=variant == "B")
    for variant, (order, constraints, multipliers, equation) in _VARIANTS.items()
}


@dataclass
class GGLVI(Solver):
    """GGL variational integrator (seed 003, section 4).

    Parameters
    ----------
    variant : {"S", "A", "B"}
        "S" first-order scheme (55); "A" theta-method with intermediate constraint
        evaluation (79); "B" theta-method with trapezoidal constraint evaluation (82), with
        its node momenta on the velocity constraints.
    theta : float or None
        Variant A: theta in (0, 1) as the paper allows, default 1/2 (second order). Any
        other theta is accepted but warned about, because the scheme is then unstable: for
        theta < 1/2, g(q^{n+theta}) = 0 multiplies a deviation of q^n from the constraint
        manifold by -(1 - theta)/theta each step; for theta > 1/2, G(q^{n+theta}) v^{n+1} = 0
        with M v^{n+1} = theta p^n + (1 - theta) p^{n+1} (79c) multiplies the momentum
        component normal to the constraints, G M^-1 p^n, by -theta/(1 - theta). Both
        factors hold exactly for linear constraints and do not depend on h, so smaller steps
        do not help: the deviation grows geometrically until Newton fails. Variant B: theta
        in [0, 1], default 1 (scheme (83)). Variant S has no theta (an error if given).
    vartheta : float or None
        Variant B only (an error for the others): in (0, 1), default 1/2. The paper allows
        vartheta = 1, but then lambda^n drops out of M v^{n+1} (its coefficient is
        h (1 - vartheta) G(q^n)^T once p^{n+1} is eliminated) and the step equations are
        singular, so it is rejected.
        Within (0, 1) it does not change the motion: with the node momenta on the velocity
        constraints only (1 - vartheta) lambda^n enters the step equations (see
        :meth:`_equations_trapezoidal`).

    Notes
    -----
    Orders, conserved quantities and constraint levels per variant:
    :func:`mbs.solvers.solver_table`.

    Energy is not conserved but oscillates boundedly; momentum maps of symmetric systems are
    conserved to round-off. Newton Jacobians are analytic (exact for quadratic constraints).
    """

    variant: str = "A"
    theta: float | None = None
    vartheta: float | None = None

    def unstable_growth(self) -> float | None:
        """The factor by which variant A with theta != 1/2 multiplies, per step and at any
        step size, the constraint drift of q^n (theta < 1/2: g(q^{n+theta}) = 0 maps a
        normal deviation e_n to -(1 - theta)/theta e_n) or the momentum normal to the
        constraints (theta > 1/2: G v^{n+1} = 0 with M v^{n+1} = theta p^n +
        (1 - theta) p^{n+1} maps f_n = G M^-1 p^n to -theta/(1 - theta) f_n); None when
        stable."""
        if self.variant != "A" or self.theta is None or self.theta == 0.5:
            return None
        return (1.0 - self.theta) / self.theta if self.theta < 0.5 else (
            self.theta / (1.0 - self.theta))

    def unstable_setting(self) -> str | None:
        growth = self.unstable_growth()
        if growth is None:
            return None
        grown = ("the constraint drift of q^n by (1 - theta)/theta" if self.theta < 0.5 else
                 "the momentum normal to the constraints (G M^-1 p^n) by theta/(1 - theta)")
        return (f"GGLVI variant A with theta = {self.theta} {'<' if self.theta < 0.5 else '>'} "
                f"1/2 amplifies {grown} = {growth:.6g} per step, at any step size, and is "
                f"unstable; use theta = 1/2 (or variant B)")

    def __post_init__(self):
        super().__post_init__()
        variant = str(self.variant).upper()
        if variant not in _PROPERTIES:
            raise ModelError(f"GGLVI: variant must be 'S', 'A' or 'B', got {self.variant!r}")
        self.variant = variant
        misplaced = [name for name, allowed in (("theta", "AB"), ("vartheta", "B"))
                     if getattr(self, name) is not None and variant not in allowed]
        if misplaced:
            raise ModelError(f"GGLVI variant {variant}: {' and '.join(misplaced)} "
                             f"{'do' if len(misplaced) > 1 else 'does'} not apply (theta: "
                             f"variants A and B, vartheta: variant B); leave "
                             f"{'them' if len(misplaced) > 1 else 'it'} out or choose another "
                             f"variant")
        if variant == "A":
            self.theta = 0.5 if self.theta is None else float(self.theta)
            if not 0.0 < self.theta < 1.0:
                raise ModelError(f"GGLVI variant A: theta must lie in (0, 1), got "
                                 f"{self.theta}")
            if self.unstable_setting() is not None:
                warn_user(self.unstable_setting())
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
        # Variant A at theta = 1/2 is the midpoint rule on the GGL equations: symmetric and
        # of order 2. g(q^{n+1/2}) = 0 and G v^{n+1} = 0 mirror the part of (q^n, p^n) off
        # the constraint manifold at any h, so the step tends to a reflection as h -> 0.
        self.composable = variant == "A" and self.theta == 0.5
        self.composed_in_pairs = self.composable

    @property
    def _state_unknowns(self) -> bool:
        # In S and B the velocity equation is bilinear and v stays an unknown; in A (79c) is
        # linear and v^{n+1} = M^-1 (theta p^n + (1 - theta) p^{n+1}) is eliminated, leaving
        # the unknowns of EM (explicit predictor map, compiled kernel).
        return self.variant == "A"

    def _equations(self, layout, shifted: bool = False):
        """(55a-e), (79a-e) or (82a-e) over the data (q0, p0).

        Unknowns: (q1, p1, v, lambda, gamma) for S and B; for A, v^{n+1} = M^-1 (theta p^n +
        (1 - theta) p^{n+1}) (79c) is eliminated, leaving (q1, p1, lambda, gamma) -- or, when
        ``shifted``, y = q1 + (1 - theta)/theta q0 = q^{n+theta}/theta and z = p1 +
        theta/(1 - theta) p0 = M v^{n+1}/(1 - theta) instead of q1, p1.

        In (q1, p1) the products G(q^{n+theta})^T gamma, H(gamma) v^{n+1}, g(q^{n+theta}) and
        G(q^{n+theta}) v^{n+1} mix data and unknowns (81 data-data and 162 data-unknown terms
        on the heavy top, folded into every step); in (y, z) the data enter linearly only, so
        the Newton matrix of the tensor form does not depend on the step data at all.
        """
        model, h, n, m, theta = self.model, self.h, self.model.n, self.model.m, self.theta
        mass, inverse = model.mass_matrix, model.inverse_mass_matrix
        data = {"q0": n, "p0": n}
        if self.variant == "S":
            builder = layout(data, {"q1": n, "p1": n, "v": n, "lam": m, "gam": m})
            q0, p0, q1, p1, v, lam, gam = builder.variables("q0", "p0", "q1", "p1", "v",
                                                            "lam", "gam")
            return self._equations_first_order(builder, q0, p0, q1, p1, v, lam, gam)
        if self.variant == "B":
            builder = layout(data, {"q1": n, "p1": n, "v": n, "lam": m, "force": m,
                                    "gam": m})
            return self._equations_trapezoidal(builder, *builder.variables(
                "q0", "p0", "q1", "p1", "v", "lam", "force", "gam"))
        if shifted:
            builder = layout(data, {"y": n, "z": n, "lam": m, "gam": m})
            q0, p0, y, z, lam, gam = builder.variables("q0", "p0", "y", "z", "lam", "gam")
            q_th = y * theta
            momentum = z * (1.0 - theta)  # = M v^{n+1} by (79c)
            q1 = y - q0 * ((1.0 - theta) / theta)
            p1 = z - p0 * (theta / (1.0 - theta))
        else:
            builder = layout(data, {"q1": n, "p1": n, "lam": m, "gam": m})
            q0, p0, q1, p1, lam, gam = builder.variables("q0", "p0", "q1", "p1", "lam", "gam")
            q_th = q0 * (1.0 - theta) + q1 * theta
            momentum = p0 * theta + p1 * (1.0 - theta)
        v1 = momentum.mapped(inverse)
        for name, size in (("a", n), ("b", n), ("d", m), ("e", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(mass / h) - momentum)
        at = theta * h  # the time of q^{n+theta} (drives)
        builder.add_jacobian_transpose_product("a", q_th, gam, -1.0, at)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        builder.add_jacobian_transpose_product("b", q_th, lam, 1.0, at)
        builder.add_hessian_product("b", q_th, gam, v1, 1.0, at)
        builder.add_potential_gradient("b", q_th)
        self._add_applied_force(builder, q_th, q0, q1, theta)
        builder.add_constraints("d", q_th, at)
        builder.add_jacobian_product("e", q_th, v1, 1.0, at)
        return builder

    def _add_applied_force(self, builder, point, q0, q1, fraction: float) -> None:
        """-Q(t + fraction h, point, (q1 - q0)/h) in (b), where the potential force acts:
        the forced discrete Euler-Lagrange equations (discrete Lagrange-d'Alembert
        principle), so a momentum map changes by exactly h Q(point) . xi(point), the
        impulse the scheme applies."""
        h = self.h
        builder.add_applied_force("b", point, (q1 - q0) * (1.0 / h), fraction * h, -1.0, h)

    def _equations_first_order(self, builder, q0, p0, q1, p1, v, lam, gam):
        """(55a-e), with the velocity v as an unknown."""
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        mass = model.mass_matrix
        for name, size in (("a", n), ("b", n), ("c", n), ("d", m), ("e", m)):
            builder.equation(name, size)
        builder.add_linear("a", (q1 - q0).mapped(mass / h) - v.mapped(mass))
        builder.add_linear("b", (p1 - p0) * (1.0 / h))
        q_bar = q0 + v * h
        w = p1.mapped(model.inverse_mass_matrix)
        builder.add_jacobian_transpose_product("a", q_bar, gam, -1.0, h)    # (55a)
        builder.add_potential_gradient("b", q0)                              # (55b)
        self._add_applied_force(builder, q0, q0, q1, 0.0)
        builder.add_jacobian_transpose_product("b", q0, lam)
        builder.add_hessian_product("b", q_bar, gam, w, 1.0, h)
        builder.add_linear("c", v.mapped(mass) - p1)                         # (55c)
        builder.add_hessian_product("c", q_bar, gam, w, -h, h)
        builder.add_constraints("d", q1, h)                                  # (55d)
        builder.add_jacobian_product("e", q_bar, w, 1.0, h)                  # (55e)
        return builder

    def _equations_trapezoidal(self, builder, q0, p0, q1, p1, v, lam, force, gam):
        """(82a-e) with the node momentum on the velocity constraints.

        (82) fixes q^{n+1} and v^{n+1} but not the component of p^{n+1} normal to the
        constraints: adding G(q^n)^T mu to p^n changes lambda^n and that component of p^{n+1}
        only. Left alone, that component carries h times the applied force normal to the
        constraints, which in director coordinates acts on small director inertias (a
        hinged link with a torsion spring: joint rates from M^-1 p off by 17 rad/s at
        h = 5 ms, for rates up to 5 rad/s), and for vartheta > 1/2 it grows without bound.
        So p1 is the momentum of (82b) less an impulse G(q^{n+1})^T mu with
        G(q^{n+1}) M^-1 p1 + dg/dt = 0: the same motion, with velocities M^-1 p1 consistent
        with the constraints (a symplectic map of the constrained phase space, momentum maps
        of symmetries of the constraints unchanged).
        Its multiplier is taken as ``force`` = lambda^n + mu / h, the mean constraint force of
        the step: in (82b) the momentum changes by -h [(1 - vartheta) G(q^n)^T lambda^n +
        G(q^{n+1})^T (force - (1 - vartheta) lambda^n)], and (82c) takes p^{n+1} + G^T mu.
        The rows end with g(q^{n+1}) and G(q^{n+1}) M^-1 p1, the constraints at the step end.
        """
        model, h, n, m = self.model, self.h, self.model.n, self.model.m
        theta, vartheta = self.theta, self.vartheta
        mass = model.mass_matrix
        for name, size in (("a", n), ("b", n), ("c", n), ("e", m), ("d", m), ("f", m)):
            builder.equation(name, size)
        q_th, at = q0 * (1.0 - theta) + q1 * theta, theta * h
        builder.add_linear("a", (q1 - q0).mapped(mass / h) - v.mapped(mass))
        builder.add_jacobian_transpose_product("a", q_th, gam, -1.0, at)        # (82a)
        builder.add_linear("b", (p1 - p0) * (1.0 / h))                           # (82b)
        builder.add_potential_gradient("b", q_th)
        self._add_applied_force(builder, q_th, q0, q1, theta)
        builder.add_jacobian_transpose_product("b", q0, lam, 1.0 - vartheta)
        builder.add_jacobian_transpose_product("b", q1, lam, -(1.0 - vartheta), h)
        builder.add_jacobian_transpose_product("b", q1, force, 1.0, h)
        builder.add_hessian_product("b", q_th, gam, v, 1.0, at)
        builder.add_linear("c", v.mapped(mass) - p0 * theta - p1 * (1.0 - theta))  # (82c)
        builder.add_jacobian_transpose_product("c", q0, lam, h * theta * (1.0 - vartheta))
        if theta != 1.0:
            builder.add_jacobian_transpose_product(
                "c", q1, lam, h * (1.0 - theta) * (1.0 - vartheta), h)
            builder.add_jacobian_transpose_product("c", q1, force, -h * (1.0 - theta), h)
        builder.add_jacobian_product("e", q_th, v, 1.0, at)                      # (82e)
        builder.add_constraints("d", q1, h)                                      # (82d)
        builder.add_jacobian_product("f", q1, p1.mapped(model.inverse_mass_matrix), 1.0, h)
        return builder

    def _build_polynomial(self):
        """The tensor form; variant A on small (dense) models in the shifted unknowns (see
        :meth:`_equations`). Large (sparse) models keep q1, p1: with the shifted unknowns
        their simplified Newton refactorises far more often."""
        if self.variant != "A" or not self._dense_polynomial():
            return super()._build_polynomial()
        n, m, theta = self.model.n, self.model.m, self.theta
        identity = sp.identity(n, format="csr")
        shift = sp.bmat([[(1.0 - theta) / theta * identity, None],
                         [None, theta / (1.0 - theta) * identity],
                         [sp.csr_matrix((2 * m, n)), None]], format="csr")
        return self._equations(self._polynomial_layout, shifted=True).build(dense=True,
                                                                             shift=shift)

    @property
    def drive_effort(self) -> str:
        # A enforces the constraints at q^{n+theta} only: lambda^n then carries a mode
        # alternating from step to step. B would too through the momentum component normal
        # to the constraints, which its equations take out (see _equations_trapezoidal)
        return "centred" if self.variant == "A" else "multiplier"

    @property
    def _multiplier_lag(self) -> int:
        # the multipliers of variant A alternate from step to step
        return 2 if self.variant == "A" else 1

    @property
    def _new_momentum_weight(self) -> float:
        # q1 = q0 + h M^-1 ((theta p0 + (1 - theta) p1) for A/B; p1 for S
        return 1.0 if self.variant == "S" else 1.0 - self.theta

    def _polynomial_key(self) -> tuple:
        return (self.variant, self.theta, self.vartheta)

    def _identity_block(self):
        n = self.model.n
        if self.variant == "S" or self.theta == 1.0:
            return None  # no such block (S), or a zero one (B at theta = 1)
        # A: (79a) with v1 eliminated, d/dp1 = -(1 - theta) I; B: d(82c)/dp1 likewise
        rows = slice(0, n) if self.variant == "A" else slice(2 * n, 3 * n)
        return (rows, slice(n, 2 * n), -(1.0 - self.theta))

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
        self._turning_multipliers = np.zeros(model.m)
        if self.theta is not None:
            # v^{n+1} = theta M^-1 p^n + (1 - theta) M^-1 p^{n+1} (79c), factors folded in
            self._theta_minv = self.theta * self._minv
            self._rest_minv = (1.0 - self.theta) * self._minv

    def _step_velocity(self, q0: np.ndarray, p0: np.ndarray, x: np.ndarray) -> np.ndarray:
        n = self.model.n
        if self.variant != "A":
            return x[2 * n:3 * n]
        inner = getattr(self._polynomial, "shifted_solution", None)
        if inner is not None:  # z = p1 + theta/(1 - theta) p0 = M v1/(1 - theta): one product
            return self._rest_minv.dot(inner[n:2 * n])
        return self._theta_minv.dot(p0) + self._rest_minv.dot(x[n:2 * n])

    def _initial_guess(self, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
        """x0 of variant S, (q1, p1, v, lambda, gamma), and of variant B, (q1, p1, v,
        lambda, force, gamma): the predicted state with the last step's multipliers; v
        follows the predicted momenta as in (55c) / (82c), for B (where lambda^n, which
        only turns v^{n+1} onto the constraints, starts at zero) with the impulse
        -h (1 - theta) G^T force of (82c) (G(q^{n+1}) taken at q^n), which the position
        update carries on to q1; variant A as EM."""
        if self.variant == "A":
            return super()._initial_guess(q0, p0)
        lam, gam = self._warm.multipliers()
        q1, p1 = self._predictor.state(q0, p0, lam, gam, self.initial_guess)
        weight = self._new_momentum_weight
        velocity = self._minv @ ((1.0 - weight) * p0 + weight * p1)
        if self.variant == "S":
            return np.concatenate([q1, p1, velocity, lam, gam])
        turning = self._turning_multipliers
        if self.initial_guess == "explicit":
            impulse = self._minv @ (-self.h * self.model.constraint_jacobian_transpose_product(
                q0, (1.0 - self.vartheta) * turning - (1.0 - self.theta) * lam, self._time))
            velocity += impulse
            q1 = q1 + self.h * impulse
        return np.concatenate([q1, p1, velocity, turning, lam, gam])

    def _solve(self, evaluate, x0: np.ndarray, q0: np.ndarray, p0: np.ndarray):
        x, iterations, residual = super()._solve(evaluate, x0, q0, p0)
        if self.variant == "B":  # lambda^n, the next step's guess (see _initial_guess)
            n, m = self.model.n, self.model.m
            self._turning_multipliers = x[3 * n:3 * n + m].copy()
        return x, iterations, residual

    def checkpoint(self) -> dict:
        state = super().checkpoint()
        if self.variant == "B":
            state["turning_multipliers"] = self._turning_multipliers.copy()
        return state

    def restore(self, state: dict) -> None:
        super().restore(state)
        if self.variant == "B" and "turning_multipliers" in state:
            self._turning_multipliers = np.asarray(state["turning_multipliers"],
                                                   dtype=float).copy()
