"""Symmetric compositions: order 4 and 6 from a symmetric scheme of order 2.

A step of size h is the sequence of steps of sizes gamma_1 h, ..., gamma_s h of a symmetric
second-order scheme Phi::

    Psi_h = Phi_{gamma_s h} o ... o Phi_{gamma_1 h},     sum_i gamma_i = 1,

with coefficients symmetric (gamma_i = gamma_{s+1-i}) and chosen so that the error terms of
Phi cancel up to the order asked for (Hairer, Lubich, Wanner, Geometric Numerical Integration
(2006), II.4 and V.3). Every property of Phi that is kept by each step is kept by the
composition: a composed energy-momentum step conserves energy and momentum maps exactly, a
composed symplectic scheme is symplectic, and the constraints Phi enforces at its step ends
hold at every sub-step end. Every such composition of order above 2 has a negative
coefficient (Sheng 1989; Suzuki 1991), so some sub-steps run backwards in time, and some
are longer than h (the triple jump's are 1.35 h and -1.70 h; Kahan and Li's at most 0.80 h):
the step sizes at which Newton converges and the energy error of a symplectic base stays
small are correspondingly smaller than the base scheme's. Laws of time (loads, actuators,
drives) are read at the sub-steps' times, which leave [t_n, t_n + h] (the triple jump's
reach from t_n - 0.35 h to t_n + 1.35 h): a law given only on the run's interval must be
defined a step beyond it.

Composable schemes (:attr:`Solver.composable`) are "em", "rattle" and "ggl-vi-a" (theta =
1/2). GGL-VI A is composed differently. Its constraints hold at the midpoint only,
g(q^{n+1/2}) = 0 and G(q^{n+1/2}) v^{n+1} = 0, so a state off the constraint manifold is
mirrored through it by every step, however small h is: Phi_h tends to a reflection R, not to
the identity, and the error expansion on which composition rests does not exist. Composed
directly, its sub-steps alternate the sign of the off-manifold error instead of cancelling it,
and the composition stays of order 2 in p. Since R o R is the identity, the double step
Phi_{h/2} o Phi_{h/2} is a consistent, symmetric, second-order map near the manifold, and
the composition is taken over it: each gamma_i h becomes two sub-steps of gamma_i h / 2
(:attr:`Solver.composed_in_pairs`), which gives orders 4 and 6 in q and in p and keeps the
scheme symplectic.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from mbs.errors import ModelError
from mbs.solvers.base import SchemeProperties, Solver, StepResult


def _triple_jump(order: int) -> np.ndarray:
    """Yoshida's triple jump (Yoshida 1990, Suzuki 1990; GNI II.4 (4.4)): from order 2k to
    2k + 2 with gamma_1 = gamma_3 = 1/(2 - 2^(1/(2k+1))), applied recursively up to
    ``order`` (4: 3 sub-steps, 6: 9)."""
    coefficients = np.ones(1)
    for inner in range(2, order, 2):
        outer = 1.0 / (2.0 - 2.0 ** (1.0 / (inner + 1)))
        coefficients = np.concatenate([outer * coefficients,
                                       (1.0 - 2.0 * outer) * coefficients,
                                       outer * coefficients])
    return coefficients


def _suzuki() -> np.ndarray:
    """Suzuki's five-step composition of order 4 (Suzuki 1990; GNI II.4 (4.5)):
    gamma_1 = gamma_2 = gamma_4 = gamma_5 = 1/(4 - 4^(1/3))."""
    outer = 1.0 / (4.0 - 4.0 ** (1.0 / 3.0))
    return np.array([outer, outer, 1.0 - 4.0 * outer, outer, outer])


def _symmetric(half: list[float]) -> np.ndarray:
    """gamma_1 .. gamma_k of a symmetric composition given up to its middle coefficient."""
    return np.array(half + half[-2::-1])


COMPOSITIONS = {
    ("triple-jump", 4): lambda: _triple_jump(4),
    ("suzuki", 4): _suzuki,
    ("triple-jump", 6): lambda: _triple_jump(6),
    ("kahan-li", 6): lambda: _symmetric([0.39216144400731413928, 0.33259913678935943860,
                                         -0.70624617255763935981, 0.082213596293550800230,
                                         0.79854399093482996340]),
    ("yoshida", 6): lambda: _symmetric([0.784513610477560, 0.235573213359357,
                                        -1.17767998417887, 1.31518632068391]),
}
"""Compositions by name and order. "kahan-li" is Kahan and Li's s9odr6a (Kahan, Li, Composition
constants for raising the orders of unconventional schemes for ordinary differential
equations, Math. Comp. 66 (1997); GNI V.3 (3.11)), "yoshida" Yoshida's solution A (Yoshida,
Construction of higher order symplectic integrators, Phys. Lett. A 150 (1990))."""

_REFERENCES = {"triple-jump": "Yoshida's triple jump (1990)",
               "suzuki": "Suzuki's five-step composition (1990)",
               "kahan-li": "Kahan and Li's s9odr6a composition (1997)",
               "yoshida": "Yoshida's seven-step composition (1990)"}

#: The composition used when only the order is given.
DEFAULT_COMPOSITION = {4: "triple-jump", 6: "kahan-li"}


def composition_coefficients(order: int, method: str | None = None) -> np.ndarray:
    """The step fractions gamma_1 .. gamma_s of a symmetric composition of ``order`` 4 or 6
    (``method`` one of :data:`COMPOSITIONS`, default :data:`DEFAULT_COMPOSITION`)."""
    if isinstance(order, bool) or order not in DEFAULT_COMPOSITION:
        raise ModelError(f"composition: order must be 4 or 6, got {order!r}")
    method = DEFAULT_COMPOSITION[order] if method is None else method
    if (method, order) not in COMPOSITIONS:
        known = sorted(name for name, o in COMPOSITIONS if o == order)
        raise ModelError(f"composition: no {method!r} composition of order {order}; choose "
                         f"one of {known}")
    coefficients = COMPOSITIONS[method, order]()
    # the published coefficients sum to 1 to their printed digits; the middle one absorbs
    # the rest so that the composed step has exactly the length h
    coefficients[coefficients.size // 2] += 1.0 - coefficients.sum()
    return coefficients


@dataclass
class Composition(Solver):
    """A symmetric second-order scheme composed to ``order`` 4 or 6 (see the module doc).

    Built by :func:`mbs.solvers.make_solver` from ``solver="em", order=4`` (also
    ``"rattle"`` and ``"ggl-vi-a"``; ``composition=`` picks the coefficients). Each sub-step has
    its own instance of the base scheme, so Newton starts from the warm start and predictor
    defects of the same sub-step of the previous step.

    Parameters
    ----------
    base : Solver
        An unstarted instance of a composable scheme (:attr:`Solver.composable`).
    order : int
        4 or 6.
    method : str or None
        One of :data:`COMPOSITIONS` for that order (default: "triple-jump" for 4, 3
        sub-steps; "kahan-li" for 6, 9 sub-steps; twice as many, of half the size, for a
        base that is :attr:`~mbs.solvers.base.Solver.composed_in_pairs`).
    """

    base: Solver | None = None
    order: int = 4
    method: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.base, Solver) or not self.base.composable:
            raise ModelError(f"composition: the base scheme must be composable (em, "
                             f"rattle or ggl-vi-a with theta = 1/2: symmetric, second "
                             f"order), got {getattr(self.base, 'name', self.base)!r}")
        self.coefficients = composition_coefficients(self.order, self.method)
        self.order = int(self.order)  # 4.0 names the scheme "order4" as 4 does
        if self.base.composed_in_pairs:
            self.coefficients = np.repeat(0.5 * self.coefficients, 2)
        self.method = self.method or DEFAULT_COMPOSITION[self.order]

    @property
    def properties(self) -> SchemeProperties:
        base = self.base.properties
        return SchemeProperties(
            name=f"{base.name}-order{self.order}", order_q=str(self.order),
            order_p=str(self.order), symplectic=base.symplectic, energy=base.energy,
            momentum=base.momentum, constraints_at_step_end=base.constraints_at_step_end,
            multiplier_times=f"{base.multiplier_times}, mean over the sub-steps weighted by "
                             f"their fractions of the step",
            reference=f"{_REFERENCES[self.method]} of {base.name}"
                      + (" over its double step" if self.base.composed_in_pairs else ""),
            nodes_meet_constraints=base.nodes_meet_constraints)

    def start(self, model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        self.model, self.h = model, h
        self.substeps = [copy.deepcopy(self.base) for _ in self.coefficients]
        for solver, fraction in zip(self.substeps, self.coefficients):
            solver.start(model, q0, p0, fraction * h)
        self._offsets = np.concatenate([[0.0], np.cumsum(self.coefficients)[:-1]])

    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        """The sub-steps in turn. The step's multipliers are the sub-steps' weighted by
        their fractions gamma_i: the mean constraint force of the step (its impulse / h),
        as the base scheme's multiplier is of its own step.

        In the run's first step each sub-step after the first starts its multipliers from
        the constraint forces of the sub-step before (its own warm start has none yet):
        from zero, the explicit guess of a long backward sub-step can lie far enough off the
        constraints for Newton to settle on another root of the step equations."""
        results = []
        for solver, offset in zip(self.substeps, self._offsets):
            if results:
                solver._warm.seed(results[-1].multiplier)
            results.append(solver.step(t + offset * self.h, q, p))
            q, p = results[-1].q, results[-1].p
        return StepResult.of_sub_steps(results, self.coefficients)

    def set_step_size(self, h: float) -> None:
        for solver, fraction in zip(self.substeps, self.coefficients):
            solver.set_step_size(fraction * h)
        self.h = h

    def checkpoint(self) -> dict:
        return {f"{i}:{key}": value for i, solver in enumerate(self.substeps)
                for key, value in solver.checkpoint().items()}

    def restore(self, state: dict) -> None:
        for i, solver in enumerate(self.substeps):
            prefix = f"{i}:"
            solver.restore({key[len(prefix):]: value for key, value in state.items()
                            if key.startswith(prefix)})

    @property
    def reports_drive_work(self) -> bool:
        return self.base.reports_drive_work

    @property
    def drive_effort(self) -> str:
        # ggl-vi-a is composed in pairs of sub-steps, over which its alternation cancels
        return "mean" if self.base.drive_effort == "mean" else "multiplier"

    @property
    def sub_steps(self) -> int:
        return len(self.coefficients)

    @property
    def guess_retries(self) -> int:
        return sum(solver.guess_retries for solver in self.substeps)

    @property
    def active_backend(self) -> str:
        return self.substeps[0].active_backend

    @property
    def uses_simplified_newton(self) -> bool:
        return self.substeps[0].uses_simplified_newton

    @property
    def newton_factorizations(self) -> int:
        return sum(solver.newton_factorizations for solver in self.substeps)

    @property
    def batch_capable(self) -> bool:
        """True when every sub-step runs whole steps in the compiled kernel (EM, RATTLE or
        GGL-VI A with ``backend="compiled"``): then blocks of composed steps run in one
        kernel call."""
        return all(solver.batch_capable for solver in self.substeps)

    def run_compiled(self, q: np.ndarray, p: np.ndarray, velocities: np.ndarray,
                     multipliers: np.ndarray, velocity_multipliers: np.ndarray,
                     enforced: np.ndarray, iterations: np.ndarray, first: int,
                     count: int) -> int:
        """Composed steps ``first`` .. ``first + count - 1`` in one call of the compiled
        kernel (see :meth:`Solver.run_compiled`): the same sub-steps, with the same warm
        starts, as :meth:`step` takes one kernel call at a time. A step that fails is left
        to :meth:`step`, with every sub-step's warm start as before it."""
        from mbs.backends.compiled import run_composed

        warm = [solver._warm for solver in self.substeps]
        if not all(w.started for w in warm):
            return 0  # the first step seeds the sub-steps' multipliers (see :meth:`step`)
        runs = [solver._compiled for solver in self.substeps]
        older = [w.older() for w in warm]
        lam, gam = np.array([w.lam for w in warm]), np.array([w.gam for w in warm])
        lam_before = np.array([o[0] for o in older])
        gam_before = np.array([o[1] for o in older])
        defects = np.array([run.defect_rows() for run in runs])
        defect_counts = np.array([len(w.defects) for w in warm], dtype=np.int64)
        startups = np.array([w.startup_defects for w in warm], dtype=np.int64)
        done, factorizations = run_composed(
            q, p, velocities, multipliers, velocity_multipliers, enforced, iterations, first,
            count, tuple(run.argument_groups() for run in runs), lam, gam, lam_before,
            gam_before, defects, defect_counts, startups, self.coefficients)
        if done:
            for i, w in enumerate(warm):
                w.lam_before, w.gam_before = lam_before[i].copy(), gam_before[i].copy()
                w.lam, w.gam = lam[i].copy(), gam[i].copy()
                w.defects.load(defects[i, :defect_counts[i]])
                w.startup_defects = int(startups[i])
        self.substeps[0]._newton_state.factorizations += factorizations
        return done
