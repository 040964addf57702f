"""Solver base class, step results and the property record every scheme registers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from mbs.backends.compiled_run import CompiledRun
from mbs.backends.polynomial import QuadraticSystemBuilder, explicit_predictor_map
from mbs.engine.cache import model_cache
from mbs.engine.defects import MAX_CORRECTION_DEGREE
from mbs.engine.equations import EquationLayout, ModelEquations
from mbs.engine.guess import (
    FAR_ROOT_FLOOR,
    ExplicitPredictor,
    WarmStart,
    far_from_guess,
    mirrored_frames,
)
from mbs.engine.newton import (
    SIMPLIFIED_NEWTON_ABOVE,
    NewtonConvergenceError,
    NewtonOptions,
    NewtonState,
    _segments,
    matrix_state,
    newton,
    state_factorization,
)
from mbs.errors import ModelError, ModelTypeError, warn_user
from mbs.model import Model

#: max of an array without ndarray.max's Python-level wrapper (hot path of small models)
_max = np.maximum.reduce

#: After the k-th step whose "explicit" guess failed, the next 2^min(k, ADVANCED_BACKOFF) - 1
#: steps start from the "advanced" guess (see :meth:`Solver.step`).
ADVANCED_BACKOFF = 6


def instance_or_key(solver, kinds: type | tuple, options: dict, expected: str):
    """``solver`` itself when it is an instance of ``kinds`` (then ``options`` must be
    empty: they belong to a name), else its name in lower case; ``expected`` says what a
    valid ``solver`` is, for the error raised on anything else."""
    if isinstance(solver, kinds):
        if options:
            raise ModelError("solver options can only be given with a solver name; set them "
                             "on the instance instead")
        return solver
    if not isinstance(solver, str):
        raise ModelTypeError(f"{expected}, got {solver!r}")
    return solver.lower()


@dataclass(frozen=True, kw_only=True)
class SchemeProperties:
    """What a scheme promises (the README solver table is generated from these). The
    defaults are the promises of most director schemes: order 2, momentum maps exact for
    symmetric potentials, both constraint levels enforced at the step end."""

    name: str
    order_q: str = "2"
    order_p: str = "2"
    symplectic: bool
    #: The variables in which the step map is symplectic when they are not (q, p).
    symplectic_in: str = ""
    energy: str
    momentum: str = "exact (symmetric potentials)"
    constraints_at_step_end: str = "g(q^{n+1}) and G M^-1 p^{n+1}"
    multiplier_times: str
    reference: str
    #: Whether the nodes (q^n, p^n) meet both constraint levels exactly: then a drive's
    #: coordinate and rate at the nodes are its prescribed ones.
    nodes_meet_constraints: bool = True


@dataclass
class StepResult:
    """One accepted step n -> n+1.

    ``velocity`` is the scheme's velocity unknown (v^n for VI-S, v^{n+1} for VI-A/B,
    v^{n+1/2} for EM, M^-1 p^{n+1/2} for RATTLE); ``multiplier`` and
    ``velocity_multiplier`` are the scheme's lambda and gamma (see ``multiplier_times``).
    ``enforced`` holds max-norms of the position- and velocity-level residuals the scheme
    itself enforces (which may be at an intermediate configuration). ``work`` is the work
    the scheme's applied forces (loads, dampers, actuators) do in the step.
    """

    q: np.ndarray
    p: np.ndarray
    velocity: np.ndarray
    multiplier: np.ndarray
    velocity_multiplier: np.ndarray
    iterations: int
    enforced: tuple[float, float]
    work: float = 0.0

    @classmethod
    def of_sub_steps(cls, results: list[StepResult], fractions) -> StepResult:
        """One step made of consecutive sub-steps taking ``fractions`` of it: the last one's
        state and velocity; the fraction-weighted sum of the multipliers, the step's mean
        constraint force (its impulse / h), which reactions and drive efforts are taken
        from; the largest enforced residuals; the total iterations and work."""
        multiplier = sum(f * r.multiplier for f, r in zip(fractions, results))
        velocity_multiplier = sum(f * r.velocity_multiplier
                                  for f, r in zip(fractions, results))
        last = results[-1]
        return cls(last.q, last.p, last.velocity, multiplier, velocity_multiplier,
                   sum(r.iterations for r in results),
                   (max(r.enforced[0] for r in results), max(r.enforced[1] for r in results)),
                   sum(r.work for r in results))


@dataclass
class Solver:
    """Base class of the time integrators; subclasses implement :meth:`step`.

    Attributes
    ----------
    newton : NewtonOptions
        Tolerance (default 1e-12 relative increment) and iteration limit.
    initial_guess : {"explicit", "advanced", "simple"}
        Newton predictor. Seed 003 section 6.3: "simple" takes the values at t^n, "advanced"
        q^n + h M^-1 p^n. "explicit" (default) also predicts the momentum, p^{n+1} = p^n -
        h (grad V(q^n) + G(q^n)^T lambda^n) with the previous multipliers, and updates q
        with it as the scheme does, which saves Newton iterations.
    backend : {"auto", "polynomial", "compiled", "assembled"}
        How the scheme's step equations (written once as terms, :meth:`_equations`) are
        evaluated. "polynomial": in tensor form (:mod:`mbs.backends.polynomial`; models with
        quadratic constraints only); "compiled": that tensor form's Newton solve in one numba
        kernel (:mod:`mbs.backends.compiled_run`), whole blocks of steps for the schemes whose
        unknowns are (q1, p1, lambda, gamma) (EM, GGL-VI A), one kernel call per step for the
        others; falls back to "polynomial" with a warning where it does not apply;
        "assembled": term by term through the model's functions
        (:mod:`mbs.engine.equations`; any model); "auto" picks
        "polynomial" where it applies, else "assembled". All solve the same equations (they
        agree to round-off).
    predictor_correction : int, None or "auto"
        With the "explicit" predictor (all backends of EM and the GGL schemes): the degree
        (0 .. 6) of the polynomial through the predictor's errors (defects x^{k+1} -
        guess^{k+1}) of past steps that is added to its next guess. The defect of a smooth
        motion varies smoothly, so its extrapolation removes the leading error terms; for the
        GGL theta methods, whose q^n and multipliers alternate, every second defect is used
        (see :class:`~mbs.engine.guess.WarmStart`). None turns it off. "auto" (default)
        takes degree 3, or 6 where every second defect is used: the extrapolation error grows
        with the spacing (L h)^(k+1), and these degrees make the first Newton increment small
        enough at moderate steps that the second one is under the default tolerance, which
        saves about one Newton iteration per step against lower degrees.
        The converged steps are those of the uncorrected guess to round-off. Constrained
        Lobatto with "auto" predicts with fitted coefficients instead, once enough defects are
        known (see :class:`~mbs.solvers.lobatto.Lobatto`); an integer keeps the polynomial.
    """

    newton: NewtonOptions = field(default_factory=NewtonOptions)
    initial_guess: str = "explicit"
    backend: str = "auto"
    predictor_correction: int | str | None = "auto"

    properties = SchemeProperties(name="base", order_q="-", order_p="-", symplectic=False,
                                  energy="-", momentum="-", constraints_at_step_end="-",
                                  multiplier_times="-", reference="-")

    #: Whether symmetric compositions raise the scheme to order 4 and 6
    #: (:class:`~mbs.solvers.composition.Composition`): the step is symmetric and of order 2.
    composable = False

    #: Whether the step tends to a reflection through the constraint manifold rather than to
    #: the identity as h -> 0 (states off the manifold are mirrored, as by GGL-VI A, whose
    #: constraints hold at the midpoint only). A composition then takes each of its sub-steps
    #: as two half steps, whose limit is the identity (see
    #: :mod:`mbs.solvers.composition`).
    composed_in_pairs = False

    #: Steps of a base scheme taken per step, each with its own Newton solve: more than one
    #: for a composition (:class:`~mbs.solvers.composition.Composition`).
    sub_steps = 1

    def __post_init__(self):
        if self.initial_guess not in ("explicit", "advanced", "simple"):
            raise ModelError(f"{type(self).__name__}: initial_guess must be 'explicit', "
                             f"'advanced' or 'simple', got {self.initial_guess!r}")
        if self.backend not in ("auto", "polynomial", "compiled", "assembled"):
            raise ModelError(f"{type(self).__name__}: backend must be 'auto', 'polynomial', "
                             f"'compiled' or 'assembled', got {self.backend!r}")
        correction = self.predictor_correction
        if correction != "auto" and correction is not None and (
                isinstance(correction, bool) or not isinstance(correction, (int, np.integer))
                or not 0 <= correction <= MAX_CORRECTION_DEGREE):
            raise ModelError(f"{type(self).__name__}: predictor_correction must be None, "
                             f"'auto' or an integer 0 .. {MAX_CORRECTION_DEGREE} (degree of the "
                             f"defect extrapolation), got {correction!r}")
        if not isinstance(self.newton, NewtonOptions):
            raise ModelTypeError(f"{type(self).__name__}: newton must be a NewtonOptions, got "
                                 f"{self.newton!r}; e.g. newton=mbs.solvers.NewtonOptions("
                                 f"max_iterations=30)")
        if not (0.0 < self.newton.tolerance < 1.0) or self.newton.max_iterations < 1:
            raise ModelError(f"{type(self).__name__}: Newton tolerance must be in (0, 1) and "
                             f"max_iterations >= 1")

    @property
    def name(self) -> str:
        return self.properties.name

    def start(self, model: Model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        """Prepare for a run (constant matrices, previous multipliers)."""
        self.model = model
        self.h = h
        self._minv = model.inverse_mass_operator()
        self._warm = WarmStart(model.m, self.correction_degree, self._multiplier_lag,
                               *self._fitted_prediction())
        self._newton_state = NewtonState()
        #: steps retried from the "advanced" guess after the "explicit" one failed
        self.guess_retries = 0
        self._advanced_steps = 0  # steps left to start from "advanced" (see :meth:`step`)
        self._simplified = (self.newton.simplified if self.newton.simplified is not None
                            else model.n > SIMPLIFIED_NEWTON_ABOVE)
        constant = model.constant_potential_gradient()
        self._constant_gradient = constant
        # |grad V| enters the Newton scale of p; constant for uniform gravity
        self._constant_force = (None if constant is None else
                                float(np.abs(constant).max()) if model.n else 0.0)
        # the size of the potential forces in the model's initial configuration: the p scale
        # where they cancel (an equilibrium, which a damped run approaches), as round-off of
        # them moves p there; of the model, not of the run's start, so that resumed runs and
        # ensemble members repeat single runs. Evaluated in the first step, whose errors
        # (a user potential that raises) hand over the run so far.
        self._force_magnitude = self._constant_force
        self._polynomial = None
        self._time, self._bound_terms = 0.0, None  # the step's start time and bound terms
        self._general_by_h = {}  # the model evaluation of this run, per step size
        self._compiled = None
        self._blocks = [slice(0, model.n), slice(model.n, 2 * model.n)]  # q, p convergence
        self._block_starts = np.array([0, model.n] if model.n else [], dtype=np.intp)
        self._block_sizes = np.array([model.n, model.n] if model.n else [], dtype=np.intp)
        self._blocks_lead = slice(0, 2 * model.n)
        self._update_floor_minimum()
        if self.backend != "assembled" and self._polynomial_applies(model):
            self._polynomial = self._shared_polynomial()
            if self.backend == "compiled":
                self._compiled = CompiledRun.create(self)
        elif self.backend == "compiled":
            warn_user(f"{type(self).__name__}: backend='compiled' falls back to the "
                      f"assembled path: {self._no_tensor_form(model)}")
        elif self.backend == "polynomial":
            raise ModelError(f"{type(self).__name__}: backend={self.backend!r} needs "
                             f"quadratic time-independent constraints only (no UserConstraint, "
                             f"no Drive) and step equations written as terms (every implicit "
                             f"scheme; hbvm with iteration='newton'); use "
                             f"backend='auto'")
        self._predictor = self._make_predictor()

    def _velocity_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(V_d, V_x): the scheme velocity of :meth:`_step_velocity` as V_d (q0, p0) + V_x x,
        for the compiled kernel; by default that of the mean velocity (q1 - q0) / h."""
        n, m, h = self.model.n, self.model.m, self.h
        from_data, from_unknowns = np.zeros((n, 2 * n)), np.zeros((n, 2 * n + 2 * m))
        from_data[:, :n] = -np.eye(n) / h
        from_unknowns[:, :n] = np.eye(n) / h
        return from_data, from_unknowns

    #: Whether the compiled kernel starts gamma from the previous step (else from zero).
    _warm_gamma = False
    #: Whether gamma is a velocity-level multiplier the explicit predictor applies (see
    #: :class:`~mbs.engine.guess.ExplicitPredictor`); False when it is a constraint force.
    _predict_with_gamma = True

    @property
    def batch_capable(self) -> bool:
        """True when :meth:`run_compiled` can advance many steps in one call."""
        return self._compiled is not None and self._compiled.runs_steps

    def run_compiled(self, q: np.ndarray, p: np.ndarray, velocities: np.ndarray,
                     multipliers: np.ndarray, velocity_multipliers: np.ndarray,
                     enforced: np.ndarray, iterations: np.ndarray, first: int,
                     count: int) -> int:
        """Advance steps ``first`` .. ``first + count - 1`` in the compiled kernel.

        Row k of ``q``, ``p`` holds the state at step k; rows k + 1 (and row k of the other
        arrays) are written. Returns the number of steps done: fewer than ``count`` when a
        step fails, which is then left to :meth:`step` (errors, refinement, retries). The
        steps that :meth:`step` would start from the "advanced" guess after a retry start
        from it here too.
        """
        arrays = (q, p, velocities, multipliers, velocity_multipliers, enforced, iterations)
        advanced = min(count, self._advanced_steps)
        if advanced:
            with self._guess_from("advanced"):
                done, factorizations = self._compiled.run_block(*arrays, first, advanced)
            self._newton_state.factorizations += factorizations
            self._advanced_steps -= done
            if done < advanced or done == count:
                return done
            return done + self.run_compiled(*arrays, first + done, count - done)
        done, factorizations = self._compiled.run_block(*arrays, first, count)
        self._newton_state.factorizations += factorizations
        return done

    #: Steps between the multipliers a new step resembles most: 1 when they vary smoothly
    #: (EM), 2 for the GGL theta methods, whose lambda^n, gamma^n alternate from step to step
    #: (they differ far less from the step before last than from the last).
    _multiplier_lag = 1

    @property
    def active_backend(self) -> str:
        """How this run evaluates its step equations: "compiled", "polynomial" or
        "assembled" (``backend="auto"`` resolved, fallbacks applied). Known after
        :meth:`start`."""
        if self._compiled is not None:
            return "compiled"
        return "polynomial" if self._polynomial is not None else "assembled"

    @property
    def uses_simplified_newton(self) -> bool:
        """Whether this run reuses the factorised Newton matrix across iterations and steps
        (``NewtonOptions.simplified``; by default for models above
        :data:`SIMPLIFIED_NEWTON_ABOVE` coordinates). Known after :meth:`start`."""
        return bool(self._simplified)

    @property
    def correction_degree(self) -> int | None:
        """The degree of the defect extrapolation in use (``predictor_correction`` with
        "auto" resolved: 3, or 6 for schemes that use every second defect)."""
        if self.predictor_correction == "auto":
            return 3 if self._multiplier_lag == 1 else 6
        return None if self.predictor_correction is None else int(self.predictor_correction)

    def _fitted_prediction(self) -> tuple[int | None, np.ndarray | None]:
        """(order, block boundaries) of the fitted linear prediction of the defects
        (:func:`~mbs.engine.defects.fitted_prediction`), or (None, None) for the polynomial
        extrapolation alone."""
        return None, None

    def _update_floor_minimum(self) -> None:
        """Lower bounds of the Newton scales of q and p (see :meth:`_scales`) when they do
        not depend on the state (constant force), as an array for the hot path."""
        force = self._constant_force
        model = self.model
        # The momentum that would move the lightest coordinate by round-off of the length
        # scale in one step: the p scale of a system at rest without forces, where every
        # increment is round-off (below it, a relative test would never pass).
        diagonal = model.mass_matrix.diagonal() if model.n else np.ones(1)
        lightest = float(np.min(diagonal[diagonal > 0.0], initial=1.0))
        self._momentum_floor = (np.finfo(float).eps * lightest * model.length_scale
                                / abs(self.h))
        self._floor_minimum = (None if force is None or not model.n
                               or model.has_applied_forces else
                               np.array([model.length_scale,
                                         max(abs(self.h) * force, self._momentum_floor)]))

    def _enforced_rows(self, residual: np.ndarray) -> tuple[float, float]:
        """Max-norms of the two constraint blocks of a step residual (its last 2m rows, in
        every scheme's equations): the position- and velocity-level residuals enforced."""
        m = self.model.m
        if m == 0:
            return 0.0, 0.0
        position, velocity = np.maximum.reduceat(np.abs(residual[residual.size - 2 * m:]),
                                                 (0, m)).tolist()
        return position, velocity

    def _make_predictor(self) -> ExplicitPredictor:
        """The run's :class:`~mbs.engine.guess.ExplicitPredictor`, with its tensor map (built
        once per model, scheme and h and kept in :mod:`mbs.engine.cache`) where the step's
        unknowns are (q1, p1, lambda, gamma), the tensor form is dense and the potential is
        linear in q (the map's tensor has (outputs x inputs) rows, which only small models
        afford)."""
        tensor_map = None
        if (self._state_unknowns and self._polynomial is not None and self._polynomial.dense
                and self._constant_gradient is not None):
            cache = model_cache(self.model, "polynomial_systems")
            key = ("predictor", type(self).__name__, self._polynomial_key(), self.h)
            if key not in cache:
                cache[key] = explicit_predictor_map(self.model, self.h, self._new_momentum_weight,
                                       self._warm_gamma, self._predict_with_gamma,
                                       self._constant_gradient)
            tensor_map = cache[key].for_run()
        return ExplicitPredictor(self.model, self.h, self._new_momentum_weight,
                                 self._warm_gamma, self._predict_with_gamma,
                                 self._constant_gradient, tensor_map)

    def _initial_guess(self, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
        """Newton's x0 = (q1, p1, lambda, gamma) from the predictor and the multiplier warm
        start (see :mod:`mbs.engine.guess`)."""
        self._predictor.time = self._time  # drives: the constraint directions at t
        return self._predictor.unknowns(q0, p0, *self._warm.multipliers(), self.initial_guess)

    def _start_system(self, system, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
        """Set the step data (q0, p0) of a polynomial step system, with its potential and
        applied-force terms bound to it (and to the step's start time); returns the data
        vector."""
        data = self._step_data = np.concatenate((q0, p0))
        terms = system.potential_terms
        self._bound_terms = (None if terms is None else
                             terms.bind(self.model, data, system.shift, self._time))
        system.start(data, self._bound_terms)
        return data

    #: Whether :meth:`_work` includes the work of the drives' reactions (else the driver
    #: estimates it from the multipliers, see :meth:`mbs.Solution.drive`).
    reports_drive_work = False
    #: How the step's reaction of a drive follows from the stored multipliers: "multiplier"
    #: (the multiplier is the step's constraint force), "mean" (of the multiplier and the
    #: velocity multiplier, the forces at the step's two ends: rattle, lobatto) or "centred"
    #: (the multiplier carries a mode alternating from step to step, removed by a centred
    #: average over neighbouring steps; see :meth:`mbs.Solution.drive`), or "none" (the
    #: multipliers are no constraint force of the step: no reactions).
    drive_effort = "multiplier"

    def _work(self, x: np.ndarray) -> float:
        """The work of the applied forces in the step just solved (unknowns x)."""
        bound = self._bound_terms
        return 0.0 if bound is None or not self.model.has_applied_forces else bound.work(x)

    def newton_system(self, q0: np.ndarray, p0: np.ndarray):
        """(residual_and_jacobian, x0) of the step from (q0, p0): the scheme's equations
        (:meth:`_equations`) evaluated by the backend of this run, and Newton's start from
        the predictor (None for the stage schemes, whose :meth:`step` sets it)."""
        if self._compiled is not None:  # the kernel folds the step data itself
            data = self._step_data = np.concatenate((q0, p0))
            terms = self._polynomial.potential_terms  # and adds the terms bound here
            self._bound_terms = (None if terms is None else terms.bind(
                self.model, data, self._polynomial.shift, self._time))
            return self._polynomial.evaluate, self._initial_guess(q0, p0)
        if self._polynomial is not None:
            self._start_system(self._polynomial, q0, p0)
            return self._polynomial.evaluate, self._initial_guess(q0, p0)
        system = self._general_system()
        self._step_data = np.concatenate((q0, p0))
        system.start(self._step_data, self._time)
        self._bound_terms = system.bound_terms
        return system.evaluate, self._initial_guess(q0, p0)

    def _general_system(self):
        """The scheme's equations evaluated through the model (:class:`~mbs.solvers.
        equations.ModelSystem`), built once per step size and kept by this solver (it holds
        the model, so it is not put in the model's cache)."""
        systems = self._general_by_h
        if self.h not in systems:
            systems[self.h] = self._equations(
                lambda data, unknowns: ModelEquations(self.model, data, unknowns)).build()
        return systems[self.h]

    def _step(self, t: float, q0: np.ndarray, p0: np.ndarray) -> StepResult:
        if self._compiled is not None and self._compiled.runs_steps:
            *result, factorizations = self._compiled.step(q0, p0)
            self._newton_state.factorizations += factorizations
            return StepResult(*result)
        evaluate, x0 = self.newton_system(q0, p0)
        x, iterations, residual = self._solve(evaluate, x0, q0, p0)
        m = self.model.m
        lam, gam = x[x.size - 2 * m:x.size - m], x[x.size - m:]
        self._warm.record(lam, gam, copy=False)
        return StepResult(x[:self.model.n], x[self.model.n:2 * self.model.n],
                          self._step_velocity(q0, p0, x), lam, gam, iterations,
                          self._enforced_rows(residual), self._work(x))

    def _step_velocity(self, q0: np.ndarray, p0: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The scheme's velocity (see :class:`StepResult`) of a solved step; by default the
        mean velocity (q1 - q0) / h (RATTLE's M^-1 p^{n+1/2}). A scheme with a velocity of
        its own overrides this and :meth:`_velocity_map`."""
        return (x[:self.model.n] - q0) / self.h

    #: Whether the step's unknowns are (q1, p1, lambda, gamma) (with the equations' last 2m
    #: rows the position and velocity constraints): the layout of the explicit predictor,
    #: the compiled kernel and :meth:`_step`.
    _state_unknowns = True

    def _solve_system(self, evaluate, guess: np.ndarray, blocks: list[slice],
                      scales: list[float], residual_from: int | None = 0
                      ) -> tuple[np.ndarray, int, np.ndarray | None]:
        """Newton on the current step system from ``guess`` with convergence judged on
        ``blocks``: the compiled kernel, the dense tensor form's own loop where it applies,
        else :func:`~mbs.engine.newton.newton` on ``evaluate``. Returns (x, iterations,
        R(x)), where rows before ``residual_from`` may be left unevaluated (None: R is not
        evaluated).

        A simplified Newton iteration that does not converge is repeated from the guess with
        exact Newton: a Jacobian kept from an earlier iterate contracts slowly from a far
        guess (light bodies that carry large constraint forces), where exact Newton still
        converges quadratically."""
        try:
            return self._newton(evaluate, guess, blocks, scales, residual_from, self._simplified)
        except NewtonConvergenceError as failure:
            if not self._simplified or not math.isfinite(failure.increment_norm):
                raise
            spent = failure.iterations
        x, iterations, residual = self._newton(evaluate, guess, blocks, scales, residual_from,
                                               False)
        return x, spent + iterations, residual

    def _newton(self, evaluate, guess: np.ndarray, blocks: list[slice], scales: list[float],
                residual_from: int | None, simplified: bool
                ) -> tuple[np.ndarray, int, np.ndarray | None]:
        """One Newton solve of :meth:`_solve_system`, simplified or exact."""
        if self._compiled is not None:
            return self._compiled.solve(self._step_data, guess, blocks, scales,
                                        residual_from or 0, simplified)
        system = self._polynomial
        if system is not None and system.dense and not simplified:
            starts, floors, lead = _segments(blocks, scales)
            sizes = np.array([b.stop - b.start for b in blocks if b.stop > b.start],
                             dtype=np.intp)
            x, iterations, factorizations, residual = system.solve(
                guess.copy(), (starts, sizes, lead), floors, self.newton)
            self._newton_state.factorizations += factorizations
            return x, iterations, residual
        # the model-evaluated system measures the terms of its rows, step data included
        x, iterations, _ = newton(evaluate, guess, blocks, scales, self.newton,
                                  self._newton_state, simplified, self._identity_block(),
                                  getattr(getattr(evaluate, "__self__", None), "term_sizes",
                                          None), self.iterates_to_roundoff)
        if residual_from is None:
            return x, iterations, None
        return x, iterations, evaluate(x, False, first_row=residual_from)[0]

    def _polynomial_applies(self, model: Model) -> bool:
        return (type(self)._equations is not Solver._equations
                and model.quadratic_constraint_table is not None)

    def _no_tensor_form(self, model: Model) -> str:
        """Why the step equations have no tensor form (which the compiled kernel runs)."""
        if model.quadratic_constraint_table is None:
            names = [joint.name for joint in model.joints
                     if joint.type in ("Drive", "UserConstraint")]
            named = ", ".join(repr(name) for name in names) or "a drive or user constraint"
            return (f"the constraints of {named} are not quadratic forms (drives and user "
                    f"constraints are evaluated element by element)")
        return f"the {self.name} scheme writes no tensor form of its step equations"

    def _polynomial_key(self) -> tuple:
        """What the polynomial step equations depend on besides the model and h."""
        return ()

    def _shared_polynomial(self):
        """The polynomial step equations, built once per (model, scheme, h) and kept in
        :mod:`mbs.engine.cache` (building them for a large model is costly); each
        solver gets its own copy of the per-step buffers, so runs may share a model across
        threads."""
        cache = model_cache(self.model, "polynomial_systems")
        key = (type(self).__name__, self._polynomial_key(), self.h, self._dense_polynomial())
        system = cache.get(key)
        if system is None:
            system = cache[key] = self._build_polynomial()
        return system.for_run()

    def _dense_polynomial(self) -> bool:
        """Dense per-iteration arrays (n_eq x n_unknowns) only for small models and for the
        compiled kernel; otherwise the Jacobian lives on its sparsity pattern, because dense
        arrays cost more than the assembled form for all but the smallest models."""
        return self.model.dense and (self.backend == "compiled"
                                     or self.model.n <= SIMPLIFIED_NEWTON_ABOVE)

    def _polynomial_layout(self, data: dict[str, int], unknowns: dict[str, int]
                           ) -> QuadraticSystemBuilder:
        """A builder of the tensor form over the given blocks (see :meth:`_equations`)."""
        return QuadraticSystemBuilder(self.model.quadratic_constraint_table, data, unknowns,
                                      self._constant_gradient, self.model.has_applied_forces)

    def _build_polynomial(self):
        """The scheme's equations as a :class:`~mbs.backends.polynomial.QuadraticSystem`."""
        return self._equations(self._polynomial_layout).build(dense=self._dense_polynomial())

    def _equations(self, layout, shifted: bool = False) -> EquationLayout:
        """The scheme's step equations, written once: ``layout(data, unknowns)`` returns an
        empty builder over those blocks (tensor form or model evaluation, see
        :mod:`mbs.engine.equations`); the scheme declares its residual blocks and adds its
        terms, and returns the builder. ``shifted`` asks for the shifted unknowns of a
        scheme that has them (see :meth:`QuadraticSystemBuilder.build`). Schemes with an
        implicit step written this way implement it."""
        raise NotImplementedError(f"{type(self).__name__} defines neither step() nor "
                                  f"_equations(): see the page 'Adding a scheme'")

    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        """Advance one step from the state (q, p) at time t (t enters through time-dependent
        loads and drives; autonomous models do not use it).

        With the "explicit" predictor a step whose Newton iteration fails is retried once from
        the "advanced" guess: at very large steps the extrapolated momentum can start Newton
        outside its region of convergence, where the "advanced" guess still converges. So is a
        step whose solution lies farther from the explicit guess than the step moves (see
        :func:`~mbs.engine.guess.far_from_guess`): the explicit prediction, which applies the
        previous constraint forces, is then worse than standing still (light bodies holding
        heavy ones), and Newton may have wandered to another root. The explicit prediction is
        also an explicit integrator, unstable where h times the model's fastest frequency
        (long chains under high tension) passes its limit; then it fails at every step. The
        k-th retry therefore makes the next min(2^k, 64) - 1 steps start from the "advanced"
        guess directly (falling back to the "explicit" one where that fails): failed attempts
        then cost a few per cent of the run at most."""
        self._time = t
        if self.initial_guess != "explicit":
            return self._step(t, q, p)
        if self._advanced_steps > 0:
            # the count changes once the step is done: a step that fails on an error in user
            # code leaves the state that a checkpoint of the run so far holds as it was
            try:
                result, remaining = self._step_from("advanced", t, q, p), self._advanced_steps - 1
            except NewtonConvergenceError:
                result, remaining = self._step(t, q, p), 0
            self._advanced_steps = remaining
            return result
        try:
            return self._step(t, q, p)
        except NewtonConvergenceError:
            pass
        result = self._step_from("advanced", t, q, p)
        self.guess_retries += 1  # once the step is done, as above
        self._advanced_steps = 2 ** min(self.guess_retries, ADVANCED_BACKOFF) - 1
        return result

    def _step_from(self, guess: str, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        """A step from the ``guess`` predictor instead of the solver's own."""
        with self._guess_from(guess):
            return self._step(t, q, p)

    @contextmanager
    def _guess_from(self, guess: str) -> Iterator[None]:
        """Steps inside start from the ``guess`` predictor instead of the solver's own."""
        own, self.initial_guess = self.initial_guess, guess
        try:
            yield
        finally:
            self.initial_guess = own

    def set_step_size(self, h: float) -> None:
        """Change h between steps (used to refine a failed step); the polynomial step
        equations depend on h and are kept per step size."""
        if h == self.h:
            return
        self._warm.defects.clear()  # they scale with h
        self._newton_state.factorization = None  # the Newton matrix depends on h
        if self._polynomial is not None:
            cache = self.__dict__.setdefault("_polynomial_by_h", {})
            cache[self.h] = self._polynomial
            self.h = h
            self._polynomial = cache.get(h) or self._shared_polynomial()
            if self._compiled is not None:
                self._compiled = CompiledRun.create(self)
        self.h = h
        self._predictor = self._make_predictor()
        self._update_floor_minimum()

    def unstable_growth(self) -> float | None:
        """The factor by which this scheme's parameters amplify a constraint violation per
        step at any step size (an unstable setting), or None."""
        return None

    def unstable_setting(self) -> str | None:
        """Why this scheme's parameters make it unstable (see :meth:`unstable_growth`), or
        None; a run that fails after the violation grew by :data:`~mbs.simulate.
        UNSTABLE_GROWTH` names it as the cause."""
        return None

    def annotate(self, solution) -> None:
        """Add to a run's :class:`~mbs.solution.Solution` (complete or partial) what only
        this scheme knows; nothing for the director schemes."""

    def checkpoint(self) -> dict:
        """Everything the next step depends on, as plain arrays (restored by :meth:`restore`
        on resume, so that a resumed run repeats the uninterrupted one bitwise): the warm
        start and, with simplified Newton, the Jacobian its factorisation was made from (the
        resumed run factorises the same matrix and gets the same factors)."""
        state = self._warm.checkpoint()
        state["guess_retries"] = np.array([self.guess_retries, self._advanced_steps])
        newton_state = self._newton_state
        if newton_state.symbolic_values is not None:  # the run's sparse pivot order
            state["newton_symbolic_values"] = newton_state.symbolic_values.copy()
        if newton_state.factorization is not None:
            state.update(matrix_state(newton_state.factorization))
        return state

    def restore(self, state: dict) -> None:
        """Inverse of :meth:`checkpoint`."""
        self._warm.restore(state)
        self.guess_retries, self._advanced_steps = (
            int(value) for value in state.get("guess_retries", (0, 0)))
        newton_state = self._newton_state
        newton_state.factorization = state_factorization(state, self._identity_block())
        symbolic = state.get("newton_symbolic_values")
        newton_state.symbolic_values = (None if symbolic is None
                                        else np.asarray(symbolic, dtype=float))

    # helpers ------------------------------------------------------------------------------
    def _solve(self, evaluate, x0: np.ndarray, q0: np.ndarray, p0: np.ndarray):
        """Newton on the step system started by :meth:`newton_system`, from the predictor's
        ``x0`` corrected by the extrapolated defects, with convergence judged on the q and p
        blocks: (x, iterations, R(x) with its constraint rows evaluated)."""
        data = np.concatenate((q0, p0))
        explicit = self.initial_guess == "explicit"
        guess = self._warm.corrected(x0, data, explicit)
        start = guess[:q0.size].copy() if explicit else None  # Newton overwrites the guess
        system = self._polynomial
        if (system is not None and system.dense and not self._simplified
                and self._compiled is None):
            # the hot path of small models: block layout precomputed, floors in three calls
            if self._floor_minimum is not None:
                floors = np.maximum(np.maximum.reduceat(np.abs(data), self._block_starts),
                                    self._floor_minimum)
            else:
                floors = np.array(self._scales(q0, p0))
            x, iterations, factorizations, residual = system.solve(
                guess, (self._block_starts, self._block_sizes, self._blocks_lead), floors,
                self.newton)
            self._newton_state.factorizations += factorizations
        else:
            x, iterations, residual = self._solve_system(
                evaluate, guess, self._blocks, list(self._scales(q0, p0)),
                residual_from=self._first_constraint_row(x0.size))
        if start is not None and far_from_guess(x[:q0.size], start, q0,
                                                FAR_ROOT_FLOOR * self.model.length_scale,
                                                self._warm.multipliers()[0], iterations):
            raise NewtonConvergenceError(
                f"Newton converged {_max(np.abs(x[:q0.size] - start)):.3e} away from the "
                f"explicit guess, farther than the step moves: possibly another root of the "
                f"step equations", 0.0, 0.0, iterations,
                "the step is redone from the advanced guess")
        mirrored = mirrored_frames(self.model, q0, x[:q0.size], iterations)
        if mirrored is not None:
            raise NewtonConvergenceError(mirrored, 0.0, 0.0, iterations,
                                         "reduce the step size")
        self._warm.remember(x, x0, explicit)
        return x, iterations, residual

    def _first_constraint_row(self, size: int) -> int:
        """The first of the last 2m rows (the enforced constraints) of a square system."""
        return size - 2 * self.model.m

    def _sample_unknowns(self, q0: np.ndarray, p0: np.ndarray, rng: np.random.Generator
                         ) -> np.ndarray:
        """Unknowns of a step from (q0, p0) with multipliers drawn from ``rng`` (so that
        their Hessian terms are present): where a sample Newton matrix is taken (the
        compiled backend's choice of LU order)."""
        return np.concatenate([q0, p0, rng.standard_normal(2 * self.model.m)])

    def _identity_block(self) -> tuple[slice, slice, float] | None:
        """(rows, cols, alpha) of a block of the Newton matrix equal to alpha I, which sparse
        factorisations condense out (see :class:`Factorization`)."""
        return None

    @property
    def iterates_to_roundoff(self) -> bool:
        """Whether Newton goes on until its iterate is exact to round-off rather than until
        its increment is at the tolerance: for schemes that conserve energy exactly, on
        models with constraints that are not quadratic, whose terms' derivatives are taken
        at the midpoint (the model-evaluated equations, the only ones such models use).
        Newton then converges linearly, and an iterate accepted at the tolerance keeps an
        error of one sign from step to step, which shows as an energy drift; the other
        schemes' energy errors are of the order of h^p anyway."""
        return (self.properties.energy == "exact (round-off)"
                and not self.model.quadratic_forms_only)

    @property
    def newton_factorizations(self) -> int:
        """Newton-matrix factorisations so far (simplified Newton reuses them)."""
        return self._newton_state.factorizations

    #: Weight of p^{n+1} in the scheme's position update q1 = q0 + h M^-1 ((1 - w) p0 + w p1)
    #: (1/2 for EM's midpoint; 1 - theta for the GGL theta methods).
    _new_momentum_weight = 0.5

    def _scales(self, q: np.ndarray, p: np.ndarray) -> tuple[float, float]:
        if not q.size:
            return 1e-300, 1e-300
        force = self._constant_force
        if force is None:
            if self._force_magnitude is None:
                self._force_magnitude = self.model.potential_force_scale(self.model.q0)
            force = max(float(np.abs(self.model.potential_gradient(q)).max()),
                        self._force_magnitude)
        if self.model.has_applied_forces:  # a motor starting a mechanism from rest
            applied = self.model.applied_force(self._time, q, self._minv @ p)
            force = max(force, float(np.abs(applied).max()))
        return (max(float(_max(np.abs(q))), self.model.length_scale),
                max(float(_max(np.abs(p))), abs(self.h) * force, self._momentum_floor))

    def _applied_acceleration(self, q: np.ndarray, p: np.ndarray) -> float:
        """max |M^-1 Q(t, q, M^-1 p)|: the size of the applied forces' acceleration (0
        without them), part of the Newton scales of velocity unknowns."""
        if not self.model.has_applied_forces:
            return 0.0
        force = self.model.applied_force(self._time, q, self._minv @ p)
        return self._max(self._minv @ force)

    def _max(self, values: np.ndarray) -> float:
        return float(_max(np.abs(values))) if values.size else 0.0
