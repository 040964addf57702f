"""Constrained Lobatto IIIA-IIIB: a symplectic scheme of order 2s - 2 written as a tableau.

The scheme is Method A of Mata-Díaz and Ober-Blöbaum's variationally partitioned RKMK
integrators specialised to a vector space (the group (R^n, +)), which is the partitioned
Lobatto IIIA-IIIB pair with the position constraints at every stage and the hidden
(velocity) constraint at the step end (Hairer, Lubich, Wanner, Geometric Numerical
Integration (2006), VII.1.2). With s stages, unknowns V (s, n) stage velocities and
Lambda (s, m) stage multipliers::

    Q_i  = q_k + h sum_j A_ij V_j                       (IIIA; Q_1 = q_k, Q_s = q_{k+1})
    F_j  = -grad V(Q_j) - G(Q_j)^T Lambda_j
    M V_i = p_k + h sum_j Ahat_ij F_j                   (IIIB, Ahat_ij = b_j (1 - A_ji / b_i))
    g(Q_i) = 0,  i = 2 .. s
    p_{k+1} = p_k + h sum_j b_j F_j,   G(q_{k+1}) M^-1 p_{k+1} = 0

The method is data (:class:`LobattoTableau`); the step residual and its Jacobian are written
once here against the Model's evaluators, and Newton's method is the shared engine
(:func:`mbs.solvers.newton.newton`). With s = 2 it is RATTLE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mbs.errors import ModelError
from mbs.solvers.base import SchemeProperties, Solver, StepResult, assemble
from mbs.solvers.newton import newton


@dataclass(frozen=True)
class LobattoTableau:
    """Lobatto IIIA coefficients ``a``, ``b`` with s stages and the IIIB partner ``a_hat``."""

    a: np.ndarray
    b: np.ndarray

    @property
    def stages(self) -> int:
        return self.b.size

    def check(self) -> None:
        """Raise ModelError unless the tableau has the structure the constrained scheme
        needs: s >= 2 stages, a (s, s), b (s,) with positive weights, the first row of a
        zero and the last equal to b (stiffly accurate, Lobatto type: the first and last
        stages are the step's end points)."""
        a, b = np.asarray(self.a, dtype=float), np.asarray(self.b, dtype=float)
        s = b.size
        if (b.ndim != 1 or s < 2 or a.shape != (s, s) or not np.all(np.isfinite(a))
                or not np.all(b > 0.0) or np.any(a[0] != 0.0)
                or not np.allclose(a[-1], b, rtol=0.0, atol=1e-14)):
            raise ModelError("Lobatto: the tableau must have s >= 2 stages, positive weights "
                             "b, a first row of zeros and a last row equal to b (Lobatto "
                             "IIIA type)")

    @property
    def a_hat(self) -> np.ndarray:
        """IIIB: a_hat_ij = b_j (1 - a_ji / b_i), the symplectic partner of IIIA."""
        return self.b[None, :] * (1.0 - self.a.T / self.b[:, None])

    @classmethod
    def with_stages(cls, stages: int) -> LobattoTableau:
        """The s-stage Lobatto IIIA tableau, s = 2, 3, 4 (orders 2, 4, 6)."""
        root5 = np.sqrt(5.0)
        tables = {
            2: ([[0.0, 0.0], [0.5, 0.5]], [0.5, 0.5]),
            3: ([[0.0, 0.0, 0.0], [5 / 24, 1 / 3, -1 / 24], [1 / 6, 2 / 3, 1 / 6]],
                [1 / 6, 2 / 3, 1 / 6]),
            4: ([[0.0, 0.0, 0.0, 0.0],
                 [(11 + root5) / 120, (25 - root5) / 120, (25 - 13 * root5) / 120,
                  (-1 + root5) / 120],
                 [(11 - root5) / 120, (25 + 13 * root5) / 120, (25 + root5) / 120,
                  (-1 - root5) / 120],
                 [1 / 12, 5 / 12, 5 / 12, 1 / 12]],
                [1 / 12, 5 / 12, 5 / 12, 1 / 12]),
        }
        if stages not in tables:
            raise ModelError(f"Lobatto: stages must be 2, 3 or 4 (orders 2, 4, 6), got "
                             f"{stages!r}")
        a, b = tables[stages]
        return cls(np.array(a), np.array(b))


@dataclass
class Lobatto(Solver):
    """Constrained Lobatto IIIA-IIIB with ``stages`` = 2, 3 or 4 (orders 2, 4, 6), or any
    ``tableau`` of that structure (:meth:`LobattoTableau.check`).

    Symplectic; momentum maps of symmetric potentials and constraints are conserved; energy
    oscillates in a band of size O(h^(2s-2)). g holds at every stage (so at both step ends),
    G M^-1 p at the step end. ``initial_guess`` is not used: Newton starts from the stage
    velocities M^-1 p_k and the previous step's stage multipliers. The solution's
    ``multipliers`` are the first stage's Lambda_1 and its ``velocity_multipliers`` the last
    stage's Lambda_s (lambda and mu of RATTLE for s = 2).
    """

    stages: int = 3
    tableau: LobattoTableau | None = field(default=None, repr=False)

    properties = SchemeProperties(
        name="lobatto", order_q="2s - 2 (stages s = 2, 3, 4)", order_p="2s - 2",
        symplectic=True, energy="bounded oscillation, O(h^(2s-2))",
        momentum="exact (symmetric potentials)",
        constraints_at_step_end="g at every stage; G M^-1 p^{n+1}",
        multiplier_times="Lambda at every stage",
        reference="Mata-Díaz, Ober-Blöbaum, Method A; Hairer, Lubich, Wanner VII.1.2")

    def __post_init__(self):
        super().__post_init__()
        if self.tableau is not None:
            self.tableau.check()
            self.stages = self.tableau.stages
            return
        if isinstance(self.stages, bool) or not isinstance(self.stages, (int, np.integer)):
            raise ModelError(f"Lobatto: stages must be an integer 2, 3 or 4, got "
                             f"{self.stages!r}")
        self.tableau = LobattoTableau.with_stages(int(self.stages))

    def start(self, model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        super().start(model, q0, p0, h)
        self._stage_multipliers = np.zeros((self.tableau.stages, model.m))

    def _residual_and_jacobian(self, q0: np.ndarray, p0: np.ndarray):
        """R(x) and dR/dx for x = (V (s n), Lambda (s m)), as a closure over the step data."""
        model, h, tab = self.model, self.h, self.tableau
        s, n, m = tab.stages, model.n, model.m
        a, b, a_hat = tab.a, tab.b, tab.a_hat
        mass, inverse_mass = model.mass_matrix, model.inverse_mass_matrix

        dense = model.dense
        mass_block, inverse_block = model.mass_operator(), model.inverse_mass_operator()

        def evaluate(x: np.ndarray, jacobian: bool = True):
            velocities = x[:s * n].reshape(s, n)
            multipliers = x[s * n:].reshape(s, m)
            stages = q0 + h * (a @ velocities)
            constraint_jacobians = [model.jacobian_matrix(q) for q in stages]
            forces = np.array([-model.potential_gradient(stages[j])
                               - constraint_jacobians[j].T @ multipliers[j] for j in range(s)])
            p1 = p0 + h * (b @ forces)
            end_velocity = inverse_mass @ p1
            residual = np.concatenate([
                (velocities @ mass.T - (p0 + h * (a_hat @ forces))).ravel(),
                np.concatenate([model.constraints(q) for q in stages[1:]]),
                constraint_jacobians[-1] @ end_velocity])
            if not jacobian:
                return residual, None
            # dF_j/dQ_j; a stage position moves with every stage velocity, dQ_j/dV_k = h a_jk
            stiffness = [-(model.potential_hessian_matrix(stages[j])
                           + model.hessian_product_matrix(stages[j], multipliers[j]))
                         for j in range(s)]
            end_map = constraint_jacobians[-1] @ inverse_block
            blocks = []
            for i in range(s):  # M V_i - p_k - h sum_j a_hat_ij F_j
                row = []
                for k in range(s):
                    terms = [-h * h * a_hat[i, j] * a[j, k] * stiffness[j] for j in range(s)
                             if a_hat[i, j] != 0.0 and a[j, k] != 0.0]
                    if i == k:
                        terms.append(mass_block)
                    row.append(sum(terms[1:], terms[0]) if terms else None)
                row += [h * a_hat[i, j] * constraint_jacobians[j].T if a_hat[i, j] != 0.0
                        else None for j in range(s)]
                blocks.append(row)
            for i in range(1, s):  # g(Q_i)
                blocks.append([h * a[i, k] * constraint_jacobians[i] if a[i, k] != 0.0
                               else None for k in range(s)] + [None] * s)
            # G(Q_s) M^-1 p_{k+1}
            curvature = model.hessian_vector_matrix(stages[-1], end_velocity)
            blocks.append([sum((h * h * b[j] * a[j, k] * (end_map @ stiffness[j])
                                for j in range(s) if a[j, k] != 0.0),
                               h * a[s - 1, k] * curvature) for k in range(s)]
                          + [-h * b[j] * (end_map @ constraint_jacobians[j].T)
                             for j in range(s)])
            return residual, assemble(blocks, dense)

        return evaluate

    def step(self, t: float, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        model, h, s = self.model, self.h, self.tableau.stages
        n, m = model.n, model.m
        velocity = model.inverse_mass_matrix @ p0
        x0 = np.concatenate([np.tile(velocity, s), self._stage_multipliers.ravel()])
        # stage velocities against their natural size: |v|, or the change a force makes in a
        # step when the system starts from rest
        acceleration = model.inverse_mass_matrix @ model.potential_gradient(q0)
        scale = max(self._max(velocity), h * self._max(acceleration), 1e-300)
        x, iterations, _ = newton(self._residual_and_jacobian(q0, p0), x0,
                                  [slice(0, s * n)], [scale], self.newton, self._newton_state,
                                  self._simplified)
        velocities = x[:s * n].reshape(s, n)
        multipliers = x[s * n:].reshape(s, m)
        self._stage_multipliers = multipliers.copy()
        stages = q0 + h * (self.tableau.a @ velocities)
        forces = np.array([-model.potential_gradient(q) - model.constraint_jacobian(q).T @ lam
                           for q, lam in zip(stages, multipliers)])
        q1 = stages[-1]
        p1 = p0 + h * (self.tableau.b @ forces)
        enforced = (max((self._max(model.constraints(q)) for q in stages[1:]), default=0.0),
                    self._max(model.constraint_jacobian(q1) @ (model.inverse_mass_matrix @ p1)))
        return StepResult(q1.copy(), p1, velocities[-1].copy(), multipliers[0].copy(),
                          multipliers[-1].copy(), iterations, enforced)

    def checkpoint(self) -> dict:
        state = super().checkpoint()
        state["stage_multipliers"] = self._stage_multipliers.copy()
        return state

    def restore(self, state: dict) -> None:
        super().restore(state)
        self._stage_multipliers = np.asarray(state["stage_multipliers"], dtype=float).copy()
