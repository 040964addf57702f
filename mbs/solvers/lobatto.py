"""Constrained Lobatto IIIA-IIIB: a symplectic scheme of order 2s - 2 written as a tableau.

The scheme is Method A of Sato Martín de Almagro's variationally partitioned RKMK
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

The method is data (:class:`LobattoTableau`); the step equations are written once as terms
(:mod:`mbs.engine.equations`), so they run in tensor form on models with quadratic
constraints and through the model's evaluators on any other, with the shared Newton engine.
With s = 2 it is RATTLE when no force depends on velocities (RATTLE evaluates such forces
at the node velocities M^-1 p_k, M^-1 p_{k+1}, this scheme at its stage velocities V_i: the
two then differ at second order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mbs.engine.equations import weighted_sum
from mbs.engine.newton import NewtonOptions
from mbs.errors import ModelError, ModelTypeError
from mbs.solvers.base import SchemeProperties, Solver, StepResult


def _stage_newton_options() -> NewtonOptions:
    """Newton defaults of the stage schemes: the factors are kept once the relative increment
    is below 1e-3 (instead of 1e-5). The LU of an (s n + s m)-sized matrix costs more than an
    iteration, and contraction from there on is fast, so an extra iteration is cheaper than
    an extra factorisation. The iteration stops once its estimated error is below 1e-15
    (``NewtonOptions.estimate_level``)."""
    return NewtonOptions(refactor_above=1e-3, estimate_level=1e-15)


#: At rest without forces, the stage velocities' Newton increments are round-off of the
#: length scale per step, amplified by the conditioning of the step equations (about twice
#: eps L / h on a hinge held by a drive): their relative increments are measured against
#: this many eps L / h, so that they stall below 1 and the residual test decides.
REST_VELOCITY = 16 * np.finfo(float).eps

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
        """The s-stage Lobatto IIIA tableau of order 2s - 2, for 2 <= s <= MAX_STAGES.

        s = 2, 3, 4 are the closed forms of Hairer, Wanner, Solving Ordinary Differential
        Equations II (1996), Sect. IV.5; larger s are the collocation coefficients on the
        Lobatto nodes (0, 1 and the roots of P'_{s-1} mapped to [0, 1]):
        a_ij = int_0^{c_i} l_j, b_j = int_0^1 l_j with l_j the Lagrange basis polynomials of
        the nodes."""
        if (isinstance(stages, bool) or not isinstance(stages, (int, np.integer))
                or not 2 <= stages <= MAX_STAGES):
            raise ModelError(f"Lobatto: stages must be an integer from 2 to {MAX_STAGES} "
                             f"(order 2s - 2), got {stages!r}")
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
        if stages in tables:
            a, b = tables[stages]
            return cls(np.array(a), np.array(b))
        return cls(*_collocation_tableau(int(stages)))


#: The largest number of stages :meth:`LobattoTableau.with_stages` builds (order 18).
MAX_STAGES = 10


def _collocation_tableau(stages: int) -> tuple[np.ndarray, np.ndarray]:
    """Lobatto IIIA (a, b) with ``stages`` nodes as the collocation integrals of the Lagrange
    basis (see :meth:`LobattoTableau.with_stages`). Each integral over [0, c_i] is a
    Gauss-Legendre quadrature with ``stages`` points, exact for the basis polynomials (degree
    s - 1), which are evaluated in product form: no monomial coefficients, whose
    cancellation would cost digits as s grows."""
    interior = np.polynomial.legendre.Legendre.basis(stages - 1).deriv().roots()
    nodes = (np.concatenate([[-1.0], np.sort(interior.real), [1.0]]) + 1.0) / 2.0
    points, weights = np.polynomial.legendre.leggauss(stages)
    points, weights = (points + 1.0) / 2.0, weights / 2.0  # on [0, 1]
    a = np.zeros((stages, stages))
    for i, upper in enumerate(nodes[1:], start=1):
        tau = upper * points  # quadrature points on [0, c_i]
        for j in range(stages):
            others = np.delete(nodes, j)
            basis = np.prod((tau[:, None] - others) / (nodes[j] - others), axis=1)
            a[i, j] = upper * (weights @ basis)
    return a, a[-1].copy()  # c_s = 1: the last row is b (stiffly accurate)


@dataclass
class Lobatto(Solver):
    """Constrained Lobatto IIIA-IIIB with ``stages`` s = 2 .. 10 (order 2s - 2: 2, 4, 6, 8,
    ...), or any ``tableau`` of that structure (:meth:`LobattoTableau.check`).

    Symplectic; momentum maps of symmetric potentials and constraints are conserved; energy
    oscillates in a band of size O(h^(2s-2)). g holds at every stage (so at both step ends),
    G M^-1 p at the step end. ``initial_guess`` is not used: Newton starts from the previous
    step's stage velocities and multipliers continued over the new step (their interpolation
    polynomial on the nodes c_i evaluated at 1 + r c_i, r the ratio of the step lengths), at
    the first step from M^-1 p_k. That guess is corrected by the defects of past steps: with
    ``predictor_correction="auto"`` by their linear prediction with coefficients fitted per
    block (stage velocities, p1, multipliers; order ``prediction_order``, see
    :func:`~mbs.engine.defects.fitted_prediction`) once 2 ``prediction_order`` defects are
    known, which follows a fast spin where a polynomial cannot (the first Newton increment
    then tends to fall below the 1e-3 up to which the factorisation is kept, saving an
    iteration and a factorisation per step);
    an integer ``predictor_correction`` keeps the polynomial extrapolation of that degree. On
    the compiled backend whole steps run in the kernel when the potential is linear in q
    and there are no applied forces (:mod:`~mbs.backends.compiled_stages`). The solution's
    ``multipliers`` are the first stage's Lambda_1 and its ``velocity_multipliers`` the last
    stage's Lambda_s (lambda and mu of RATTLE for s = 2).
    """

    stages: int = 3
    tableau: LobattoTableau | None = field(default=None, repr=False)
    newton: NewtonOptions = field(default_factory=_stage_newton_options)

    properties = SchemeProperties(
        name="lobatto", order_q="2s - 2 (stages s = 2 .. 10)", order_p="2s - 2",
        symplectic=True, energy="bounded oscillation, O(h^(2s-2))",
        momentum="exact (symmetric potentials)",
        constraints_at_step_end="g at every stage; G M^-1 p^{n+1}",
        multiplier_times="Lambda at every stage",
        reference="Sato Martín de Almagro, Method A; Hairer, Lubich, Wanner VII.1.2")

    def __post_init__(self):
        super().__post_init__()
        if self.tableau is not None:
            if not isinstance(self.tableau, LobattoTableau):
                raise ModelTypeError(f"lobatto: tableau must be a LobattoTableau (or give "
                                     f"stages=2 .. 10), got {self.tableau!r}")
            self.tableau.check()
            self.stages = self.tableau.stages
            return
        self.tableau = LobattoTableau.with_stages(self.stages)

    #: the unknowns are stage velocities and multipliers, not (q1, p1, lambda, gamma)
    _state_unknowns = False

    def start(self, model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        super().start(model, q0, p0, h)
        self._stage_multipliers = np.zeros((self.tableau.stages, model.m))
        self._stage_velocities = None
        self._x0 = np.zeros(self.tableau.stages * (model.n + model.m) + model.n)
        self._stage_step = h  # the step length the stage values come from
        self._continuations: dict[float, np.ndarray] = {}
        gradient = self._constant_gradient
        # M^-1 grad V, the acceleration scale of the stage velocities (constant for gravity)
        self._acceleration = (None if gradient is None
                              else self._max(model.inverse_mass_matrix @ gradient))

    #: Order of the fitted linear prediction of the defects (``predictor_correction="auto"``)
    prediction_order = 4

    def _fitted_prediction(self) -> tuple[int | None, np.ndarray | None]:
        if self.predictor_correction != "auto":
            return None, None
        s, n, m = self.tableau.stages, self.model.n, self.model.m
        # the stage velocities, p1 and the multipliers are fitted apart: their defects
        # differ in size and in the frequencies they carry
        return self.prediction_order, np.array([0, s * n, (s + 1) * n, (s + 1) * n + s * m])

    def _continuation(self) -> np.ndarray:
        """The Lagrange basis on the nodes c_j evaluated at 1 + r c_i, r = h / (the length of
        the step the stage values come from): the last step's stage polynomial continued over
        the next step, also after a change of h (sub-steps of a refined step)."""
        ratio = self.h / self._stage_step
        matrix = self._continuations.get(ratio)
        if matrix is None:
            nodes = self.tableau.a.sum(axis=1)
            matrix = self._continuations[ratio] = np.array(
                [[np.prod([(1.0 + ratio * ci - ck) / (cj - ck)
                           for k, ck in enumerate(nodes) if k != j])
                  for j, cj in enumerate(nodes)] for ci in nodes])
        return matrix

    def _polynomial_key(self) -> tuple:
        return (self.tableau.a.tobytes(), self.tableau.b.tobytes())

    drive_effort = "mean"  # the first and last stages' multipliers are stored

    def _equations(self, layout, shifted: bool = False):
        """The step equations over the data (q0, p0) and the unknowns (V_1 .. V_s, p1,
        Lambda_1 .. Lambda_s); p_{k+1} is an unknown so that every term is at most quadratic
        (G(q_{k+1}) M^-1 p_{k+1} would otherwise be cubic)::

            M V_i - p_k + h sum_j Ahat_ij (grad V(Q_j) - F_j + G(Q_j)^T Lambda_j) = 0
            (p1 - p_k)/h + sum_j b_j (grad V(Q_j) - F_j + G(Q_j)^T Lambda_j)      = 0
            g(Q_i) = 0 (i = 2 .. s),   G(Q_s) M^-1 p1 = 0

        with F_j = F(t + c_j h, Q_j, V_j) the applied forces at the stages (the partitioned
        Runge-Kutta form of the forced equations, still of order 2s - 2).
        """
        model, h, tab = self.model, self.h, self.tableau
        s, n, m = tab.stages, model.n, model.m
        a, b, a_hat = tab.a, tab.b, tab.a_hat
        unknowns = {**{f"V{i}": n for i in range(s)}, "p1": n,
                    **{f"L{i}": m for i in range(s)}}
        builder = layout({"q0": n, "p0": n}, unknowns)
        q0, p0, p1 = builder.variables("q0", "p0", "p1")
        velocities = builder.variables(*(f"V{i}" for i in range(s)))
        multipliers = builder.variables(*(f"L{i}" for i in range(s)))
        stages = [q0 + weighted_sum(velocities, h * a[j]) for j in range(s)]

        nodes = a.sum(axis=1)

        def add_force(equation: str, weights: np.ndarray, work: float = 0.0) -> None:
            for j in np.flatnonzero(weights):  # sum_j w_j (grad V - F + G^T Lambda)(Q_j)
                builder.add_potential_gradient(equation, stages[j], weights[j])
                builder.add_applied_force(equation, stages[j], velocities[j], nodes[j] * h,
                                          -weights[j], work * weights[j])
                builder.add_jacobian_transpose_product(equation, stages[j], multipliers[j],
                                                       weights[j], nodes[j] * h)

        for i in range(s):
            builder.equation(f"stage{i}", n)
            builder.add_linear(f"stage{i}", velocities[i].mapped(model.mass_matrix) - p0)
            add_force(f"stage{i}", h * a_hat[i])
        builder.equation("momentum", n)
        builder.add_linear("momentum", (p1 - p0) * (1.0 / h))
        add_force("momentum", b, h)  # work: h sum_j b_j F(Q_j, V_j) . V_j
        for i in range(1, s):
            builder.equation(f"position{i}", m)
            builder.add_constraints(f"position{i}", stages[i], nodes[i] * h)
        builder.equation("velocity", m)
        builder.add_jacobian_product("velocity", stages[-1],
                                     p1.mapped(model.inverse_mass_matrix), 1.0, h)
        return builder

    @property
    def _runs_in_kernel(self) -> bool:
        """Whether whole steps run in the compiled kernel (:mod:`~mbs.backends.compiled_stages`):
        on the compiled backend, with a potential linear in q and no applied forces."""
        return (self._compiled is not None and self._compiled.runs_stage_steps
                and self._acceleration is not None)

    @property
    def batch_capable(self) -> bool:
        return self._runs_in_kernel

    def run_compiled(self, q: np.ndarray, p: np.ndarray, velocities: np.ndarray,
                     multipliers: np.ndarray, velocity_multipliers: np.ndarray,
                     enforced: np.ndarray, iterations: np.ndarray, first: int,
                     count: int) -> int:
        done, *_, factorizations = self._run_kernel(q, p, velocities, multipliers,
                                                    velocity_multipliers, enforced,
                                                    iterations, first, count)
        self._newton_state.factorizations += factorizations
        return done

    def _run_kernel(self, *arrays_and_range) -> tuple:
        """:meth:`CompiledRun.run_stages` with this run's stage values, updated in place."""
        model, s = self.model, self.tableau.stages
        started = np.array([self._stage_velocities is not None], dtype=np.int64)
        velocities = (self._stage_velocities if self._stage_velocities is not None
                      else np.zeros((s, model.n)))
        # the kernel runs only with a constant force, where the p scale's floor is constant
        scheme = (velocities, self._stage_multipliers, started, self.tableau.b,
                  self._continuation(), float(self.h), self._compiled.inverse_mass,
                  float(self._acceleration), float(self._floor_minimum[1]))
        result = self._compiled.run_stages(*arrays_and_range, scheme, (s + 1) * model.n)
        if started[0]:
            self._stage_velocities, self._stage_step = velocities, self.h
        return result

    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        self._time = t
        if self._runs_in_kernel:
            *result, factorizations = self._compiled.single_step(self._run_kernel, q, p)
            self._newton_state.factorizations += factorizations
            return StepResult(*result, 0.0)
        model, h, s = self.model, self.h, self.tableau.stages
        n, m = model.n, model.m
        velocity = self._minv @ p
        x0 = self._x0.copy()
        if self._stage_velocities is None:
            x0[:s * n].reshape(s, n)[:] = velocity
            x0[(s + 1) * n:] = self._stage_multipliers.ravel()
        else:
            continuation = self._continuation()
            x0[:s * n].reshape(s, n)[:] = continuation @ self._stage_velocities
            x0[(s + 1) * n:] = (continuation @ self._stage_multipliers).ravel()
        x0[s * n:(s + 1) * n] = p
        # stage velocities against their natural size: |v|, or the change a force makes in a
        # step when the system starts from rest, or at rest without forces the velocity
        # that moves the length scale by a few round-offs in a step (REST_VELOCITY); p1
        # against |p| or the impulse of a step
        acceleration = (self._acceleration if self._acceleration is not None else
                        self._max(model.inverse_mass_matrix @ model.potential_gradient(q)))
        acceleration = max(acceleration, self._applied_acceleration(q, p))
        blocks = [slice(0, s * n), slice(s * n, (s + 1) * n)]
        scales = [max(self._max(velocity), abs(h) * acceleration,
                      REST_VELOCITY * model.length_scale / abs(h)),
                  self._scales(q, p)[1]]
        evaluate, _ = self.newton_system(q, p)
        # the past steps' defects x - x0 vary smoothly: their extrapolation is a guess of
        # order (L h)^(degree + 1) (no guard against the predicted change: x0 holds
        # velocities, not a state)
        guess = self._warm.corrected(x0, x0[:0], True)
        x, iterations, residual = self._solve_system(evaluate, guess, blocks, scales,
                                                     residual_from=(s + 1) * n)
        self._warm.remember(x, x0, True)
        velocities = x[:s * n].reshape(s, n)
        multipliers = x[(s + 1) * n:].reshape(s, m)
        self._stage_multipliers = multipliers.copy()
        self._stage_velocities, self._stage_step = velocities.copy(), h
        q1 = q + h * (self.tableau.b @ velocities)  # = Q_s (last row of a is b)
        constraint_rows = np.abs(residual[(s + 1) * n:])
        enforced = (self._max(constraint_rows[:(s - 1) * m]), self._max(constraint_rows[-m:]))
        return StepResult(q1, x[s * n:(s + 1) * n].copy(), velocities[-1].copy(),
                          multipliers[0].copy(), multipliers[-1].copy(), iterations, enforced,
                          self._work(x))

    def _sample_unknowns(self, q0: np.ndarray, p0: np.ndarray, rng: np.random.Generator
                         ) -> np.ndarray:
        s, m = self.tableau.stages, self.model.m
        velocity = self.model.inverse_mass_matrix @ p0
        return np.concatenate([np.tile(velocity, s), p0, rng.standard_normal(s * m)])

    def _identity_block(self) -> tuple[slice, slice, float]:
        # the momentum equation (p1 - p_k)/h + ...: d/dp1 = I/h, condensed out
        s, n = self.tableau.stages, self.model.n
        rows = slice(s * n, (s + 1) * n)
        return rows, rows, 1.0 / self.h

    def _initial_guess(self, q0: np.ndarray, p0: np.ndarray) -> None:
        return None  # step() builds the stage guess (see the class docstring)

    def checkpoint(self) -> dict:
        state = super().checkpoint()
        state["stage_multipliers"] = self._stage_multipliers.copy()
        if self._stage_velocities is not None:
            state["stage_velocities"] = self._stage_velocities.copy()
            state["stage_step"] = self._stage_step
        return state

    def restore(self, state: dict) -> None:
        super().restore(state)
        self._stage_multipliers = np.asarray(state["stage_multipliers"], dtype=float).copy()
        velocities = state.get("stage_velocities")
        self._stage_velocities = (None if velocities is None
                                  else np.asarray(velocities, dtype=float).copy())
        self._stage_step = float(state.get("stage_step", self.h))
