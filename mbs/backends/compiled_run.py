"""The compiled backend bound to one solver run (see :mod:`mbs.backends.compiled`).

:class:`CompiledRun` builds (or takes from the model's cache) the
:class:`~mbs.backends.compiled.CompiledSystem` of a scheme's tensor form and runs blocks of
steps in it with the run's warm start (:class:`~mbs.engine.guess.WarmStart`), which it reads
before and updates after every call, so that a run may alternate between compiled blocks and
single steps (refinement, streaming) and still repeat itself bitwise on resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mbs.engine.cache import model_cache
from mbs.engine.guess import mirrored_frames
from mbs.engine.newton import NEWTON_HINT, NewtonConvergenceError
from mbs.errors import warn_user
from mbs.model import DENSE_LIMIT

if TYPE_CHECKING:
    from mbs.backends.compiled import CompiledSystem


def _compiled():
    """:mod:`mbs.backends.compiled`, imported on first use (it imports numba, which takes
    longer to import than the rest of mbs)."""
    from mbs.backends import compiled

    return compiled

_GUESS_MODES = {"simple": 0, "advanced": 1, "explicit": 2}


class CompiledRun:
    """The compiled kernel of ``solver``'s step equations; construct with :meth:`create`."""

    def __init__(self, solver, system: CompiledSystem, velocity_maps: tuple):
        self.solver, self.system, self.velocity_maps = solver, system, velocity_maps
        self._work = self._residual = None
        self.inverse_mass = np.ascontiguousarray(solver.model.inverse_mass_matrix.toarray())

    @classmethod
    def create(cls, solver) -> CompiledRun | None:
        """The compiled run of ``solver`` (started, with its tensor form), or None with a
        warning saying why the compiled kernel does not apply."""
        model, compiled = solver.model, _compiled()
        reason = None
        if not compiled.available():
            reason = "numba is not installed (pip install numba)"
        elif not model.dense:
            reason = (f"large models (n > {DENSE_LIMIT}) use sparse linear algebra, which "
                      f"is not compiled")
        if reason is not None:
            warn_user(f"{type(solver).__name__}: backend='compiled' falls back to the "
                      f"numpy polynomial path: {reason}")
            return None
        # immutable arrays: built once per (model, scheme, h), like the tensor form
        cache = model_cache(model, "compiled_systems")
        key = (type(solver).__name__, solver._polynomial_key(), solver.h)
        if key not in cache:
            terms = solver._polynomial.potential_terms
            # (indptr, indices, data) of V_d and V_x: a row of a velocity map has few entries;
            # steps with terms evaluated in Python run one by one, Newton in the kernel
            velocity_maps = (tuple(compiled.csr_arrays(a) for a in solver._velocity_map())
                             if solver._state_unknowns and terms is None else None)
            extra_pattern = None if terms is None else terms.jacobian_pattern()
            identity = solver._identity_block()
            if identity is not None and extra_pattern is not None and np.any(
                    _inside(extra_pattern, identity)):
                identity = None  # the extra terms fill the block: no alpha I to condense
            cache[key] = (compiled.CompiledSystem(solver._polynomial, model.m, identity,
                                                  _sample_newton_matrix(solver),
                                                  extra_pattern),
                          velocity_maps)
        return cls(solver, *cache[key])

    @property
    def runs_steps(self) -> bool:
        """Whether whole steps (predictor, Newton, outputs) run in the kernel: schemes whose
        unknowns are (q1, p1, lambda, gamma). Others use :meth:`solve` for Newton only."""
        return self.velocity_maps is not None

    @property
    def runs_stage_steps(self) -> bool:
        """Whether whole steps of a stage scheme may run in the kernel
        (:mod:`mbs.backends.compiled_stages`): no terms evaluated in Python, unknowns not
        shifted."""
        return (not self.solver._state_unknowns
                and self.solver._polynomial.potential_terms is None
                and not self.system.shift[1])

    def run_stages(self, q, p, velocities, multipliers, velocity_multipliers, enforced,
                   iterations, first: int, count: int, scheme: tuple, residual_from: int
                   ) -> tuple:
        """Steps ``first`` .. ``first + count - 1`` of a stage scheme in the kernel
        (:func:`mbs.backends.compiled_stages.run_stage_steps` with ``scheme``, its arrays
        updated in place) with the run's warm start. Returns (steps done, code, residual norm,
        increment, iterations, factorisations) as :meth:`run`."""
        from mbs.backends.compiled_stages import run_stage_steps

        solver, warm = self.solver, self.solver._warm
        if self._work is None:
            self._work = self.system.workspace()
            self._residual = np.empty(self.system.equations.constant.shape[0])
        defects = self.defect_rows(self.system.n_unknowns)
        order = solver.correction_degree
        *result, defect_count, warm.startup_defects = run_stage_steps(
            q, p, velocities, multipliers, velocity_multipliers, enforced, iterations, first,
            count, scheme, (self.system.equations, self.limits(),
                            self.system.condensation, residual_from, self._work[0]),
            (-1 if order is None else order, defects, len(warm.defects),
             warm.startup_defects, warm.defects.fit_order or 0,
             np.zeros(1, np.int64) if warm.defects.fit_blocks is None
             else np.asarray(warm.defects.fit_blocks, dtype=np.int64)))
        warm.defects.load(defects[:defect_count])
        return tuple(result)

    def solve(self, data: np.ndarray, guess: np.ndarray, blocks: list[slice],
              scales: list[float], residual_from: int, simplified: bool
              ) -> tuple[np.ndarray, int, np.ndarray]:
        """Newton (``simplified`` or exact) on the step from ``data`` = (q0, p0) in the
        kernel (any scheme's tensor form): (x, iterations, R(x) with its rows from
        ``residual_from`` at x); raises NewtonConvergenceError when it fails."""
        if self._work is None:
            self._work = self.system.workspace()
            self._residual = np.empty(self.system.equations.constant.shape[0])
        segments = (np.array([b.start for b in blocks], dtype=np.int64),
                    np.array([b.stop for b in blocks], dtype=np.int64))
        x = np.array(guess, dtype=float)
        code, iterations, norm, increment, factorizations = self.system.solve(
            data, x, segments, np.asarray(scales, dtype=float),
            self.limits()._replace(simplified=simplified),
            residual_from, self._work, self._residual, self.solver._bound_terms)
        self.solver._newton_state.factorizations += factorizations
        if code != _compiled().CONVERGED:
            raise NewtonConvergenceError(*_failure(code, norm, increment, iterations))
        return x, iterations, self._residual.copy()

    def run(self, q, p, velocities, multipliers, velocity_multipliers, enforced, iterations,
            first: int, count: int) -> tuple:
        """:meth:`CompiledSystem.run` with the solver's state; the defect history goes in as
        the kernel's ((degree + 1) L, n_x) buffer and comes back updated. Returns (steps
        done, code, residual norm, increment, iterations, factorisations) of the kernel."""
        warm = self.solver._warm
        defects = self.defect_rows()
        *result, defect_count, warm.startup_defects = self.system.run(
            q, p, velocities, multipliers, velocity_multipliers, enforced, iterations, first,
            count, self.argument_groups(), warm.lam, warm.gam, *warm.older(), defects,
            len(warm.defects), warm.startup_defects)
        warm.defects.load(defects[:defect_count])
        return tuple(result)

    def argument_groups(self) -> tuple:
        """:meth:`CompiledSystem.argument_groups` with the solver's settings. The kernel's
        momentum scale is max(|p|, |h| F) with F the force scale: F is at least the
        solver's momentum floor / |h| (:meth:`~mbs.solvers.base.Solver._scales`), without
        which a model at rest without forces measured round-off increments against 1e-300."""
        solver = self.solver
        order = solver.correction_degree
        force_scale = max(solver._constant_force or 0.0, solver._momentum_floor / abs(solver.h))
        return self.system.argument_groups(
            self.inverse_mass, solver.h, _GUESS_MODES[solver.initial_guess],
            force_scale, solver.model.length_scale, solver._warm_gamma,
            self.velocity_maps, self.limits(), solver._constant_gradient,
            solver._new_momentum_weight, 1.0 if solver._predict_with_gamma else 0.0,
            solver._warm.lag, -1 if order is None else order)

    def limits(self):
        """The kernel's :class:`~mbs.backends.compiled.NewtonLimits` of this run."""
        return _compiled().newton_limits(self.solver.newton, self.solver.uses_simplified_newton)

    def defect_rows(self, width: int | None = None) -> np.ndarray:
        """The kernel's defect buffer, ((degree + 1) L, ``width``), with the history's rows
        (oldest first) in its first rows; ``width`` is n_x, by default 2 n + 2 m."""
        model, warm = self.solver.model, self.solver._warm
        width = 2 * model.n + 2 * model.m if width is None else width
        defects = np.zeros((warm.defects.capacity, width))
        if warm.defects:
            defects[:len(warm.defects)] = warm.defects.rows()
        return defects

    def run_block(self, q, p, velocities, multipliers, velocity_multipliers, enforced,
                  iterations, first: int, count: int) -> tuple[int, int]:
        """Steps ``first`` .. ``first + count - 1`` (see ``Solver.run_compiled``); returns
        (steps done, factorisations) and keeps the last multipliers as the warm start."""
        done, _, _, _, _, factorizations = self.run(
            q, p, velocities, multipliers, velocity_multipliers, enforced, iterations, first,
            count)
        self.solver._warm.record_run(multipliers[first:first + done],
                                     velocity_multipliers[first:first + done])
        return done, factorizations

    def step(self, q0: np.ndarray, p0: np.ndarray) -> tuple:
        """One step: (q1, p1, velocity, lambda, gamma, iterations, enforced, factorisations);
        raises NewtonConvergenceError when the kernel fails or ends on a mirrored frame
        (:func:`~mbs.engine.guess.mirrored_frames`), leaving the warm start as before."""
        warm = self.solver._warm
        before = warm.checkpoint()
        result = self.single_step(self.run, q0, p0)
        mirrored = mirrored_frames(self.solver.model, q0, result[0], result[5])
        if mirrored is not None:
            warm.restore(before)
            raise NewtonConvergenceError(mirrored, 0.0, 0.0, result[5],
                                         "reduce the step size")
        warm.record(result[3], result[4])
        return result

    def single_step(self, run, q0: np.ndarray, p0: np.ndarray) -> tuple:
        """One step from (q0, p0) as a block of one of ``run`` (:meth:`run` or a bound
        :meth:`run_stages`): (q1, p1, velocity, lambda, gamma, iterations, enforced,
        factorisations); raises NewtonConvergenceError when the kernel fails."""
        n, m = self.solver.model.n, self.solver.model.m
        q, p = np.empty((2, n)), np.empty((2, n))
        q[0], p[0] = q0, p0
        velocity, lam, gam = np.empty((1, n)), np.empty((1, m)), np.empty((1, m))
        enforced, iterations = np.empty((1, 2)), np.zeros(1, dtype=np.int64)
        _, code, norm, increment, its, factorizations = run(
            q, p, velocity, lam, gam, enforced, iterations, 0, 1)
        if code != _compiled().CONVERGED:
            raise NewtonConvergenceError(*_failure(code, norm, increment, its))
        return (q[1], p[1], velocity[0], lam[0], gam[0], int(iterations[0]),
                (float(enforced[0, 0]), float(enforced[0, 1])), factorizations)


def _sample_newton_matrix(solver) -> np.ndarray | None:
    """The tensor form's Newton matrix at the model's own initial state, with multipliers
    drawn from a fixed seed (so that their Hessian terms are present): the sample on which the
    compiled backend measures LU orders. Depends on the model only, never on the run that
    happens to build the compiled system first."""
    model, system = solver.model, solver._polynomial
    q0, p0 = model.q0, model.p0
    try:
        solver._start_system(system, q0, p0)
        _, jacobian = system.evaluate(solver._sample_unknowns(q0, p0,
                                                              np.random.default_rng(0)))
    except (ArithmeticError, ValueError, np.linalg.LinAlgError):
        return None
    return jacobian.toarray() if sp.issparse(jacobian) else np.asarray(jacobian)


def _inside(pattern: tuple[np.ndarray, np.ndarray], block: tuple[slice, slice, float]
            ) -> np.ndarray:
    """Which entries (rows, cols) of ``pattern`` lie in the block (rows, cols, alpha)."""
    rows, cols = pattern
    return ((rows >= block[0].start) & (rows < block[0].stop)
            & (cols >= block[1].start) & (cols < block[1].stop))


def _failure(code: int, norm: float, increment: float, iterations: int) -> tuple:
    """NewtonConvergenceError arguments for a failure code of the compiled kernel."""
    compiled = _compiled()
    if code == compiled.RESIDUAL_NOT_FINITE:
        return ("residual is not finite", norm, np.inf, iterations,
                "the state blew up: reduce the step size")
    if code == compiled.SINGULAR:
        return ("singular Newton matrix", norm, np.inf, iterations,
                "singular configuration or redundant constraints; check model.redundancies")
    if code == compiled.FAR_FROM_GUESS:
        return (f"Newton converged farther from the explicit guess than the step moves "
                f"(after {iterations} iterations): possibly another root of the step "
                f"equations", norm, increment, iterations,
                "the step is redone from the advanced guess")
    if code == compiled.INCREMENT_NOT_FINITE:
        return ("Newton increment is not finite", norm, np.inf, iterations,
                "singular Newton matrix: singular configuration, redundant constraints, or a "
                "too large step")
    return (f"Newton did not converge in {iterations} iterations (last relative increment "
            f"{increment:.3e}, residual {norm:.3e})", norm, increment, iterations,
            NEWTON_HINT)
