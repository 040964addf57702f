"""Ensembles: one model integrated from many initial states in one vectorised run.

:func:`simulate_ensemble` advances K copies of a small model at once with the energy-momentum
scheme (seed 003, (84)): residuals and Jacobians of all members are evaluated with batched
kernels compiled with numba (:mod:`mbs.ensemble_numba`); without numba the members run one
by one through :func:`mbs.simulate`. With the kernels each member runs the Newton iteration
of a single run (explicit predictor, exact Newton that keeps its factors near the solution)
on a condensed system (p^{n+1} eliminated exactly) and stops as soon as it converges, so the
cost per member is a fraction of a separate run (e.g. Monte Carlo studies of tops).

Parameter sweeps (different masses, stiffnesses, geometry) are different models: run them with
:func:`simulate_many`, which maps :func:`mbs.simulate` over (model, options) pairs with any
``concurrent.futures.Executor`` — a ``ProcessPoolExecutor`` on one machine or, unchanged, the
executor of a Dask cluster (``distributed.Client(...).get_executor()``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from mbs.errors import ModelError, SolverError
from mbs.liegroup.model import LieGroupModel
from mbs.model import POSITION_TOLERANCE, VELOCITY_TOLERANCE, Model
from mbs.simulate import simulate
from mbs.solvers import Solver
from mbs.solvers.defects import COEFFICIENT_TABLE, MAX_CORRECTION_DEGREE, extrapolated_defect
from mbs.solvers.newton import NewtonOptions
from mbs.validation import as_scalar


@dataclass
class EnsembleSolution:
    """States of every member: ``q``, ``p`` of shape (K, N+1, n) at times ``t`` (N+1,);
    ``work`` (K, N+1) the cumulative work of the applied forces (see
    :attr:`mbs.Solution.work`), None for conservative models."""

    model: Model
    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    stats: dict = field(default_factory=dict)
    work: np.ndarray | None = None

    def kinetic_energy(self) -> np.ndarray:
        """(K, N+1)."""
        flat = self.p.reshape(-1, self.model.n)
        return self.model.kinetic_energy(flat).reshape(self.p.shape[:2])

    def potential_energy(self) -> np.ndarray:
        """(K, N+1)."""
        flat = self.q.reshape(-1, self.model.n)
        return self.model.potential_energies(flat).reshape(self.q.shape[:2])

    def energy(self) -> np.ndarray:
        """(K, N+1)."""
        return self.kinetic_energy() + self.potential_energy()

    def angular_momentum(self, about=(0.0, 0.0, 0.0)) -> np.ndarray:
        """(K, N+1, 3)."""
        return self.model.angular_momentum(self.q, self.p, about=about)

    def member(self, k: int):
        """Arrays (q, p) of member k."""
        return self.q[k], self.p[k]


def simulate_ensemble(model: Model, initial_states, *, h: float, t_end: float,
                      solver: str | Solver = "em", tolerance: float = 1e-12,
                      max_iterations: int = 25, backend: str = "auto",
                      predictor_correction: int | None = 2, **solver_options
                      ) -> EnsembleSolution:
    """Integrate K members of ``model`` from K initial states.

    With the EM scheme on a small model with quadratic constraints (the default) and numba
    installed, the members are advanced together by batched kernels. Any other scheme, a
    solver instance, solver options, a large model, user constraints or ``backend="numpy"``
    run each member through :func:`mbs.simulate` with that solver (bitwise the single
    runs).

    Parameters
    ----------
    model : Model or LieGroupModel
        The compiled model; the batched EM path needs ``model.dense`` and quadratic
        constraints (all built-in joints). A Lie-group model runs its members one by one
        (``solver`` "vrkmk", the default for it, or "vcg"), from director states of
        ``model.director_model``.
    initial_states : (Q0, P0) arrays of shape (K, n), or an array (K, 2, n)
        Consistent initial states (check them with ``model.is_consistent``).
    h, t_end : float
        Step size and end time (start at 0).
    solver : str or Solver
        "em" (default) or any scheme :func:`mbs.simulate` accepts; ``**solver_options`` as
        there, plus ``on_failure`` and ``max_refinements`` of :func:`mbs.simulate`.
    tolerance, max_iterations
        Newton stopping rule of the batched kernels, as :class:`mbs.solvers.NewtonOptions`
        (relative increment of q and p of every member); members run one by one use their
        solver's ``newton`` options.
    backend : {"auto", "numba", "numpy"}
        "numba": the batched kernels (parallel over the members); "numpy": every member
        through the numpy path of :func:`mbs.simulate` (batched numpy kernels would be no
        faster: 79 us per member and step on the heavy top against 70-95 us for a single
        run); "auto": numba when it can be imported. Members run one by one take "numba" as
        the solver's ``backend="compiled"`` (unless ``solver_options`` set a backend) and
        then run on one thread per core when their steps run in the kernel; "compiled" is
        accepted for "numba".
    predictor_correction : int or None
        Degree of the extrapolated predictor defect added to each member's guess, as
        ``Solver.predictor_correction`` of a single run (default 2; None turns it off).
        Measured on 1000 heavy tops, h = 2 ms, 100 steps: 2.02 instead of 2.99 LU
        factorisations per member and step and 1.2 instead of 1.5 us per member and step,
        energy drift 2.7e-15 against 2.4e-15 without it (64 tops over 2000 steps: 2.1e-14
        against 1.1e-14).

    Returns
    -------
    EnsembleSolution
        Every member conserves energy and momentum maps as a single EM run does.
    """
    if not isinstance(model, Model | LieGroupModel):
        raise ModelError("simulate_ensemble expects a compiled Model")
    h = as_scalar(h, "h", "simulate_ensemble", positive=True)
    t_end = as_scalar(t_end, "t_end", "simulate_ensemble", positive=True)
    if isinstance(model, LieGroupModel):
        # Lie-group members run one by one; their states are the director model's
        q0, p0 = _initial_arrays(model.director_model, initial_states)
        return _member_by_member(model, q0, p0, h, t_end,
                                 "vrkmk" if solver == "em" else solver, solver_options)
    q0, p0 = _initial_arrays(model, initial_states)
    if backend not in ("auto", "numba", "numpy", "compiled"):
        raise ModelError(f"simulate_ensemble: backend must be 'auto', 'numba' or 'numpy', "
                         f"got {backend!r}")
    backend = "numba" if backend == "compiled" else backend
    if backend == "numba" and _numba_kernels() is None:
        raise ModelError("simulate_ensemble: backend='numba' needs numba (pip install numba); "
                         "use 'numpy'")
    batched = (backend != "numpy" and _numba_kernels() is not None
               and isinstance(solver, str) and solver.lower() == "em" and not solver_options
               and model.dense and model.constraints_are_quadratic
               and not model.has_applied_forces)
    if not batched:
        if backend == "numba" and isinstance(solver, str):
            solver_options.setdefault("backend", "compiled")
        return _member_by_member(model, q0, p0, h, t_end, solver, solver_options)
    steps = max(1, int(round(t_end / h)))
    count, n = q0.shape
    if predictor_correction is not None and (
            isinstance(predictor_correction, bool)
            or not isinstance(predictor_correction, (int, np.integer))
            or not 0 <= predictor_correction <= MAX_CORRECTION_DEGREE):
        raise ModelError(f"simulate_ensemble: predictor_correction must be None or an integer "
                         f"0 .. {MAX_CORRECTION_DEGREE}, got {predictor_correction!r}")
    kernel = _BatchedEnergyMomentum(model, h, tolerance, max_iterations, count,
                                    predictor_correction)
    q = np.empty((count, steps + 1, n))
    p = np.empty((count, steps + 1, n))
    q[:, 0], p[:, 0] = q0, p0
    started = time.perf_counter()
    with _single_threaded_blas():
        iterations = kernel.run(q, p)
    return EnsembleSolution(model, h * np.arange(steps + 1), q, p,
                            {"solver": "em (ensemble)", "h": h, "members": count,
                             "backend": "numba", "newton_iterations": iterations,
                             "factorizations": kernel.factorizations,
                             "wall_time": time.perf_counter() - started})


#: Options of :func:`mbs.simulate` (not of the solver) that members run member by member
#: accept.
_RUN_OPTIONS = ("on_failure", "max_refinements")


def _member_by_member(model: Model, q0: np.ndarray, p0: np.ndarray, h: float, t_end: float,
                      solver: str | Solver, solver_options: dict) -> EnsembleSolution:
    """Every member through :func:`mbs.simulate` (see :func:`simulate_ensemble`). A failing
    member raises its SolverError with an EnsembleSolution of the members before it, and of
    it up to the failing step.

    Members whose whole steps run in the compiled kernel (``backend="compiled"``, a potential
    linear in q, no applied forces) run on one thread per core: the kernel releases the GIL,
    and each member is the same run as alone (measured on 100 heavy tops with RATTLE, 2
    cores: 17.9 -> 9.6 us per member-step, bitwise the same states). Members on the numpy
    path hold the GIL and run one after the other."""
    started = time.perf_counter()
    run_options = {key: solver_options.pop(key) for key in _RUN_OPTIONS
                   if key in solver_options}

    def member(k: int):
        return simulate(model, solver, h=h, t_end=t_end, initial_state=(q0[k], p0[k]),
                        **run_options, **solver_options)

    # a solver named, not given: every member builds its own, so threads share no state
    in_kernel = (isinstance(solver, str) and solver_options.get("backend") == "compiled"
                 and isinstance(model, Model) and model.constant_potential_gradient() is not None
                 and not model.has_applied_forces)
    workers = min(os.cpu_count() or 1, q0.shape[0]) if in_kernel else 1
    members = []
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        # every member submitted at once; the results are taken in member order
        results = ([pool.submit(member, k).result for k in range(q0.shape[0])] if pool
                   else [functools.partial(member, k) for k in range(q0.shape[0])])
        for k, result in enumerate(results):
            try:
                members.append(result())
            except SolverError as error:
                partial = [*members, error.solution]
                size = partial[-1].t.size
                error.solution = EnsembleSolution(
                    partial[-1].model, partial[-1].t, np.stack([m.q[:size] for m in partial]),
                    np.stack([m.p[:size] for m in partial]),
                    {"solver": f"{partial[-1].stats['solver']} (ensemble)", "h": h,
                     "members": len(partial), "failed_member": k})
                error.args = (f"ensemble member {k}: {error}",)
                raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    first = members[0]
    return EnsembleSolution(
        first.model, first.t, np.stack([m.q for m in members]), np.stack([m.p for m in members]),
        {"solver": f"{first.stats['solver']} (ensemble)", "h": h, "members": len(members),
         "backend": "member by member",
         "newton_iterations": np.stack([m.stats["newton_iterations"] for m in members]),
         "refined_steps": [m.stats["refined_steps"] for m in members],
         "restarts": [m.stats["restarts"] for m in members],
         "wall_time": time.perf_counter() - started},
        work=np.stack([m.work for m in members]) if first.model.has_applied_forces else None)


def simulate_many(runs: Iterable[tuple[Model, dict]], executor: Executor | None = None) -> list:
    """``mbs.simulate(model, **options)`` for every (model, options) pair.

    With ``executor=None`` the runs execute here one after the other; with any
    ``concurrent.futures.Executor`` (process pool, Dask ``Client.get_executor()``) they run
    where the executor puts them. Models must be picklable for process or cluster executors
    (true for every built-in element; user potentials holding lambdas are not).
    """
    runs = list(runs)
    if executor is None:
        return [simulate(model, **options) for model, options in runs]
    futures = [executor.submit(simulate, model, **options) for model, options in runs]
    return [future.result() for future in futures]


def _initial_arrays(model: Model, initial_states) -> tuple[np.ndarray, np.ndarray]:
    try:
        if isinstance(initial_states, tuple) and len(initial_states) == 2:
            q0, p0 = (np.asarray(a, dtype=float) for a in initial_states)
        else:
            states = np.asarray(initial_states, dtype=float)
            q0, p0 = states[:, 0], states[:, 1]
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelError(f"simulate_ensemble: initial_states must be (Q0, P0) of shape (K, "
                         f"{model.n}) or an array (K, 2, {model.n})") from exc
    if q0.ndim != 2 or q0.shape != p0.shape or q0.shape[1] != model.n:
        raise ModelError(f"simulate_ensemble: initial states must have shape (K, {model.n}), "
                         f"got {q0.shape} and {p0.shape}")
    if not (np.all(np.isfinite(q0)) and np.all(np.isfinite(p0))):
        raise ModelError("simulate_ensemble: initial states must be finite")
    unsure = np.flatnonzero(~_clearly_consistent(model, q0, p0))
    bad = [int(k) for k in unsure if not model.is_consistent(q0[k], p0[k])]
    if bad:
        raise ModelError(f"simulate_ensemble: members {bad[:10]} violate the constraints; "
                         f"project them with model.project(q, p)")
    return q0.copy(), p0.copy()


def _clearly_consistent(model: Model, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
    """Members that satisfy :meth:`Model.is_consistent` with half its tolerances to spare,
    checked for all members at once (one call per member costs ~0.25 ms, as much as ~100
    steps of the ensemble run); the others are left to ``model.is_consistent``."""
    table = model._table
    if model._removed.n_rows or table.n_rows != model.m or not model.m:
        return np.zeros(q0.shape[0], dtype=bool)
    jacobians = table.jacobians_dense(q0)
    velocities = p0 @ model.inverse_mass_operator()
    position = np.abs(table.values(q0)).max(axis=1)
    velocity = np.abs(np.einsum("kmn,kn->km", jacobians, velocities)).max(axis=1)
    scale = np.maximum(1.0, np.einsum("kmn,kn->km", np.abs(jacobians),
                                      np.abs(velocities)).max(axis=1))
    return ((position <= 0.5 * POSITION_TOLERANCE)
            & (velocity <= 0.5 * VELOCITY_TOLERANCE * scale))


def _single_threaded_blas():
    """BLAS limited to one thread while the ensemble runs: its operands are small, and idle
    BLAS threads spinning on the cores slow the numba threads (and numpy) down several fold.
    A no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _numba_kernels():
    """The compiled kernels (:mod:`mbs.ensemble_numba`), or None without numba."""
    try:
        from mbs import ensemble_numba
    except ImportError:  # numba not installed (or not importable): members one by one
        return None
    return ensemble_numba


def _csr(matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    csr = sp.csr_matrix(matrix)
    csr.eliminate_zeros()
    return (csr.indptr.astype(np.int64), csr.indices.astype(np.int64),
            csr.data.astype(float))


class _BatchedEnergyMomentum:
    """The EM step (84) for K members at once (cf. :class:`mbs.solvers.EnergyMomentum`).

    Newton's linear systems are condensed exactly: the first block row of EM's Jacobian has
    the p-block -1/2 I, so dp = 2 (J_qq dq + J_qgamma dgamma + r_a) is substituted into the
    other rows, leaving n + 2m unknowns (q1, lambda, gamma) per member. Every member runs the
    Newton iteration of a single run on its own (:func:`mbs.solvers.newton.newton`, exact
    Newton with ``refactor_above``): it starts from the explicit predictor
    (:meth:`mbs.solvers.guess.ExplicitPredictor.state`) with lambda from its previous step and
    gamma = 0, factorises its condensed matrix there, and refactorises only while its
    relative increment is above ``refactor_above`` or contracts slower than ``contraction``
    (measured on 1000 heavy tops at h = 2 ms: 4 iterations and 2.0 factorisations per
    member and step; simplified Newton from the same predictor needs 7 iterations and leaves
    energy errors of ~5e-12, the old simplified Newton from q + h M^-1 p 6 iterations and
    ~2e-13). It stops at the
    tolerance on the relative increments of q and p, including the stagnation rule for
    fresh matrices, so converged members cost nothing.

    With a potential linear in q (constant force, e.g. gravity) the whole run is one
    compiled call (:func:`mbs.ensemble_numba.run_lanes`): no Python per step or iteration.
    Otherwise each iteration is one call of :func:`mbs.ensemble_numba.iterate`, parallel
    over the members, and the discrete gradients of the potential come from the model's
    potential groups.
    """

    contraction = NewtonOptions.contraction
    refactor_above = NewtonOptions.refactor_above
    stagnation_level = NewtonOptions.stagnation_level
    #: see :data:`mbs.ensemble_numba.STATIC_PIVOT_THRESHOLD` (tests raise it to force the
    #: partially pivoted fallback)
    static_pivot_threshold = 0.1

    def __init__(self, model: Model, h: float, tolerance: float, max_iterations: int,
                 count: int, predictor_correction: int | None = None):
        self.model, self.h = model, h
        self.predictor_correction = predictor_correction
        self._defects: list[np.ndarray] = []  # (K, 2n + 2m) per past step, newest last
        self._started = False
        self.tolerance, self.max_iterations = tolerance, max_iterations
        n, m = model.n, model.m
        self.n, self.m, self.count = n, m, count
        self.mass = np.ascontiguousarray(model.mass_operator())
        self.minv = np.ascontiguousarray(model.inverse_mass_operator())
        table = self.table = model._table
        self.qr, self.qi, self.qj = (table.quad_row.astype(np.int64),
                                     table.quad_i.astype(np.int64),
                                     table.quad_j.astype(np.int64))
        self.qc = table.quad_coef.astype(float)
        self.lr, self.li = table.lin_row.astype(np.int64), table.lin_i.astype(np.int64)
        self.lc = table.lin_coef.astype(float)
        # G(q) = T q + B with T[k, i, l] (dense: small models), H(mu) = sum_k mu_k T[k]
        t = np.zeros((m, n, n))
        np.add.at(t, (self.qr, self.qi, self.qj), self.qc)
        np.add.at(t, (self.qr, self.qj, self.qi), self.qc)
        self.t_flat = np.ascontiguousarray(t.reshape(m * n, n).T)     # (n, m n)
        self.h_flat = np.ascontiguousarray(t.reshape(m, n * n))       # (m, n n)
        b = np.zeros((m, n))
        np.add.at(b, (self.lr, self.li), self.lc)
        self.b = b
        groups = model.potential_groups
        self.linear_potential = all(g.linear_in_q for g in groups)
        self.constant_force = (sum((g._constant_gradient for g in groups), np.zeros(n))
                               if self.linear_potential else None)
        size = n + 2 * m
        self.refresh = np.ones(count, dtype=bool)
        self.factorizations = 0
        self.lu = np.zeros((count, size, size))
        self.piv = np.zeros((count, size), dtype=np.int64)
        self.status = np.zeros(count, dtype=np.int64)
        self.increments = np.zeros(count)
        self.dvjac = np.zeros((count if not self.linear_potential else 1, n, n))
        self.vec = np.zeros((count, 12, max(2 * n + 2 * m, 1)))
        self.wnn = np.zeros((count, 2, n, n))
        self.wmn = np.zeros((count, 4, m, n))
        self._setup_numba()
        self.hg = np.zeros((count, n, n))
        self.gm = np.zeros((count, m, n))
        self.g1 = np.zeros((count, m, n))

    def run(self, q: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Fill rows 1.. of ``q``, ``p`` (K, N + 1, n) from row 0; returns the Newton
        iterations of the slowest member per step. On failure raises SolverError with the
        states up to the failing step."""
        if self.linear_potential:
            return self._run_numba(q, p)
        steps = q.shape[1] - 1
        lam = np.zeros((self.count, self.m))
        gam = np.zeros((self.count, self.m))
        iterations = np.zeros(steps, dtype=int)
        for step in range(steps):
            try:
                q[:, step + 1], p[:, step + 1], lam, gam, iterations[step] = self.step(
                    q[:, step], p[:, step], lam, gam)
            except SolverError as error:
                self._attach(error, q, p, step)
                raise
        return iterations

    def _attach(self, error: SolverError, q: np.ndarray, p: np.ndarray, step: int) -> None:
        """The states before ``step`` as the error's partial solution."""
        error.solution = EnsembleSolution(self.model, self.h * np.arange(step + 1),
                                          q[:, :step + 1], p[:, :step + 1])
        error.step, error.time = step, step * self.h

    # -- shared pieces ------------------------------------------------------------------------
    def _forces(self, q0, q1):
        """D^G V for the given members, or None when it is the constant gradient."""
        if self.linear_potential:
            return None
        out = np.zeros_like(q0)
        for group in self.model.potential_groups:
            out += group.discrete_gradients(q0, q1)
        return out

    def _force_jacobians(self, q0, q1):
        out = np.zeros((q0.shape[0], self.n, self.n))
        for group in self.model.potential_groups:
            out += group.discrete_gradient_jacobians(q0, q1)
        return out

    def _predict(self, q0, p0, gradient, lam, gam):
        """The explicit predictor of the single runs (see :func:`mbs.ensemble_numba._predict`)
        for every member: (q1, p1)."""
        velocity = p0 @ self.minv
        g0 = self._jacobians(q0)
        p1 = p0 - self.h * (gradient + np.einsum("kmn,km->kn", g0, lam)
                            + np.einsum("kij,kj->ki", self._hessians(gam), velocity))
        q1 = q0 + self.h * ((0.5 * (p0 + p1) + np.einsum("kmn,km->kn", g0, gam)) @ self.minv)
        return q1, p1

    def step(self, q0, p0, lam_prev, gam_prev):
        """One step of every member from the previous step's multipliers; returns q1, p1,
        lambda1, gamma1 and the largest number of iterations a member needed."""
        count = q0.shape[0]
        h = self.h
        q0 = np.ascontiguousarray(q0)
        p0 = np.ascontiguousarray(p0)
        gradient = (self.constant_force[None, :] if self.linear_potential
                    else self.model.potential_gradients(q0))
        force = np.abs(gradient).max(axis=1) if self.n else np.zeros(1)
        q1, p1 = self._predict(q0, p0, gradient, lam_prev, gam_prev)
        lam = np.array(lam_prev, dtype=float, order="C")
        gam = np.zeros((count, self.m))
        raw = np.concatenate([q1, p1, lam, gam], axis=1)
        q1, p1, lam, gam = self._corrected_guess(raw, np.concatenate([q0, p0], axis=1))
        q_scale = np.maximum(np.abs(q0).max(axis=1), self.model.length_scale)
        p_scale = np.maximum(np.maximum(np.abs(p0).max(axis=1), h * force), 1e-300)
        previous = np.full(count, np.inf)
        self.refresh[:] = True      # exact Newton: a fresh matrix at the predictor
        active = np.arange(count)
        for iteration in range(1, self.max_iterations + 1):
            fresh = self.refresh[active]
            self.factorizations += int(np.count_nonzero(fresh))
            increment = self._iterate_numba(active, q0, p0, q1, p1, lam, gam, q_scale,
                                            p_scale)
            last = previous[active]
            done = (increment <= self.tolerance) | (
                fresh & (increment <= self.stagnation_level) & (increment > 0.5 * last))
            # as newton(): keep the factors once the increment is small and contracting
            self.refresh[active] = ~done & ((increment > self.contraction * last)
                                            | (increment > self.refactor_above))
            previous[active] = increment
            active = active[~done]
            if active.size == 0:
                if self.predictor_correction is not None and self._started:
                    self._defects.append(np.concatenate([q1, p1, lam, gam], axis=1) - raw)
                    del self._defects[:-(self.predictor_correction + 1)]
                self._started = True  # step 0's defect (zero multipliers) is not kept
                return q1, p1, lam, gam, iteration
        worst = float(np.max(previous[active]))
        raise SolverError(f"ensemble EM: Newton did not converge in {self.max_iterations} "
                          f"iterations for members {active[:10].tolist()} (relative increment "
                          f"{worst:.3e})", hint="reduce the step size")

    def _corrected_guess(self, raw: np.ndarray, data: np.ndarray):
        """(q1, p1, lambda, gamma) of every member: the predictor's ``raw`` guess plus the
        extrapolated defect of :meth:`mbs.solvers.guess.WarmStart.corrected` (same terms
        and the same guard per member), as C-ordered arrays."""
        guess = raw.copy()
        correction = extrapolated_defect(self._defects, self.predictor_correction)
        if correction is not None:
            lead = data.shape[1]
            take = (np.abs(correction[:, :lead]).max(axis=1, initial=0.0)
                    <= np.abs(raw[:, :lead] - data).max(axis=1, initial=0.0))
            guess[take] += correction[take]
        n, m = self.n, self.m
        return (np.ascontiguousarray(guess[:, :n]), np.ascontiguousarray(guess[:, n:2 * n]),
                np.ascontiguousarray(guess[:, 2 * n:2 * n + m]),
                np.ascontiguousarray(guess[:, 2 * n + m:]))

    # -- the explicit predictor's constraint terms ------------------------------------------
    def _jacobians(self, q, with_linear=True):
        out = (q @ self.t_flat).reshape(q.shape[0], self.m, self.n)
        return out + self.b if with_linear else out

    def _hessians(self, mult):
        return (mult @ self.h_flat).reshape(mult.shape[0], self.n, self.n)

    # -- numba kernels ------------------------------------------------------------------------
    def _setup_numba(self):
        factored = self.table.factored
        if factored is not None:
            u_ptr, u_idx, u_val = _csr(factored.u_map)
            v_ptr, v_idx, v_val = _csr(factored.v_map)
            values = (True, factored.row.astype(np.int64), factored.scale.astype(float),
                      u_ptr, u_idx, u_val, np.ascontiguousarray(factored.u_const, dtype=float),
                      v_ptr, v_idx, v_val, np.ascontiguousarray(factored.v_const, dtype=float),
                      np.asarray(factored.explicit_constant, dtype=float))
        else:
            empty_i, empty_f = np.zeros(1, np.int64), np.zeros(1)
            values = (False, np.zeros(0, np.int64), np.zeros(0), empty_i, empty_i, empty_f,
                      np.zeros((0, 3)), empty_i, empty_i, empty_f, np.zeros((0, 3)),
                      np.zeros(self.m))
        self._table_args = (self.qr, self.qi, self.qj, self.qc, self.lr, self.li, self.lc,
                            *_csr(self.mass), *_csr(self.minv), *values,
                            self.table.constant.astype(float))
        if self.linear_potential:   # the whole run in one call: sparse condensed matrices
            *self._lane_args, self.lane_counts = _cached_lane_plan(
                self.n, self.m, self.qr, self.qi, self.qj, self.qc, self.lr, self.li, self.lc,
                self.mass, self.minv, self.h)

    def _iterate_numba(self, active, q0, p0, q1, p1, lam, gam, q_scale, p_scale):
        kernels = _numba_kernels()
        if self.linear_potential:
            dv, dv_step = self.constant_force[None, :], 0
        else:
            dv, dv_step = self._forces(q0[active], q1[active]), 1
            refresh = active[self.refresh[active]]
            if refresh.size:
                self.dvjac[refresh] = self._force_jacobians(q0[refresh], q1[refresh])
        kernels.iterate(active, self.refresh, self.h, q0, p0, q1, p1, lam, gam, dv, dv_step,
                        self.dvjac, 0 if self.linear_potential else 1, q_scale, p_scale,
                        *self._table_args, self.lu, self.piv, self.hg, self.gm, self.g1,
                        self.vec, self.wnn, self.wmn, self.increments, self.status)
        status = self.status[active]
        if np.any(status == 1):
            raise SolverError("ensemble EM: singular Newton matrix for members "
                              f"{active[status == 1][:10].tolist()}",
                              hint="singular configuration or redundant constraints")
        if np.any(status == 2):
            raise SolverError("ensemble EM: non-finite Newton increment",
                              hint="reduce the step size")
        return self.increments[active]

    def _run_numba(self, q: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The whole run in one compiled call (linear potential; see :meth:`run`)."""
        kernels = _numba_kernels()
        count, steps, n = q.shape[0], q.shape[1] - 1, self.n
        iterations = np.zeros((count, steps), dtype=np.int32)
        factorizations = np.zeros(count, dtype=np.int64)
        self.fallbacks = np.zeros(count, dtype=np.int64)
        failed_step = np.full(count, -1, dtype=np.int64)
        force = np.ascontiguousarray(self.constant_force, dtype=float).reshape(1, n)
        force_scale = float(np.abs(force).max()) if n else 0.0
        kernels.run_lanes(kernels.LANES, self.static_pivot_threshold, self.h, q, p, force,
                          force_scale, self.model.length_scale, self.tolerance,
                          self.max_iterations, self.contraction,
                          self.refactor_above, self.stagnation_level,
                          -1 if self.predictor_correction is None
                          else int(self.predictor_correction), COEFFICIENT_TABLE,
                          *self._table_args,
                          *self._lane_args, self.increments, self.status, iterations,
                          factorizations, failed_step, self.fallbacks)
        self.factorizations += int(factorizations.sum())
        failed = np.flatnonzero(self.status != kernels.CONVERGED)
        if failed.size:
            step = int(failed_step[failed].min())
            members = failed[failed_step[failed] == step]
            codes = set(self.status[members].tolist())
            if kernels.SINGULAR in codes:
                error = SolverError("ensemble EM: singular Newton matrix for members "
                                    f"{members[:10].tolist()}",
                                    hint="singular configuration or redundant constraints")
            elif kernels.NOT_FINITE in codes:
                error = SolverError("ensemble EM: non-finite Newton increment",
                                    hint="reduce the step size")
            else:
                worst = float(np.max(self.increments[members]))
                error = SolverError(f"ensemble EM: Newton did not converge in "
                                    f"{self.max_iterations} iterations for members "
                                    f"{members[:10].tolist()} (relative increment "
                                    f"{worst:.3e})", hint="reduce the step size")
            self._attach(error, q, p, step)
            raise error
        return iterations.max(axis=0) if count else np.zeros(steps, dtype=int)


_LANE_PLANS: dict = {}


def _cached_lane_plan(n, m, *arrays_and_h) -> tuple:
    """:func:`_lane_plan`, kept for the last few (table, mass matrix, h): building it costs
    ~10 ms, a few percent of a 1000-member run of 100 steps."""
    key = (n, m) + tuple(np.asarray(a).tobytes() if isinstance(a, np.ndarray) else a
                         for a in arrays_and_h)
    plan = _LANE_PLANS.pop(key, None)
    if plan is None:
        plan = _lane_plan(n, m, *arrays_and_h)
    _LANE_PLANS[key] = plan      # most recent last
    while len(_LANE_PLANS) > 8:
        del _LANE_PLANS[next(iter(_LANE_PLANS))]
    return plan


def _lane_plan(n, m, qr, qi, qj, qc, lr, li, lc, mass, minv, h) -> tuple:
    """Structure of the condensed Newton matrix and the operation lists of the compiled
    sparse kernels (:func:`mbs.ensemble_numba._lanes_assemble`, ``_lanes_sparse_lu``,
    ``_lanes_sparse_solve``), computed once per model and step size.

    Lane variables, rows of ``xv``: gamma (m), lambda (m), q_mid (n), q1 (n), v_mid (n),
    v1 (n), 1. Every entry of the matrix (rows q, d, c; columns q, lambda, gamma; see
    :func:`mbs.ensemble_numba.run_lanes`) is expanded into a constant plus monomials
    c x_a x_b of those variables: H(mu), G(q) and HV(v) are linear forms from the quadratic
    table, M^-1 enters through its nonzero entries, and products such as H(gam) M^-1 H(gam)
    become sums of gam_r gam_s terms. The pattern (with the diagonal) and the fill of
    elimination without row exchanges in this order give the stored entries (row-major);
    the operations are those of the dense elimination and substitutions that are not
    structurally zero, in their order.

    Returns (nv, a_const, term_ptr, term_coef, term_var, diag, pairs, pair_ops,
    single_ops, forward_ptr, forward, backward_ptr, backward, e_row, e_col, counts) (see
    :func:`mbs.ensemble_numba.run_lanes`) with ``counts`` a dict of operation counts (also
    of the dense kernels they replace).
    """
    size = n + 2 * m
    gam0, lam0, qm0, q10, vm0, v10 = 0, m, 2 * m, 2 * m + n, 2 * m + 2 * n, 2 * m + 3 * n
    one = 2 * m + 4 * n
    nv = one + 1

    def hessian(base):          # H(mu)[i, j] -> {variable: coefficient}
        out = defaultdict(lambda: defaultdict(float))
        for r, i, j, c in zip(qr, qi, qj, qc):
            out[i, j][base + r] += c
            out[j, i][base + r] += c
        return out

    def jacobian(base, linear):  # G(q)[r, i] (HV(v) without the linear part)
        out = defaultdict(lambda: defaultdict(float))
        for r, i, j, c in zip(qr, qi, qj, qc):
            out[r, i][base + j] += c
            out[r, j][base + i] += c
        if linear:
            for r, i, c in zip(lr, li, lc):
                out[r, i][one] += c
        return out

    def rows_of(form):           # {row: [(column, linear form)]}
        out = defaultdict(list)
        for (r, i), f in form.items():
            out[r].append((i, f))
        return out

    h_gam, h_lam = hessian(gam0), hessian(lam0)
    g_mid, g1 = jacobian(qm0, True), jacobian(q10, True)
    hv_mid, hv1 = jacobian(vm0, False), jacobian(v10, False)
    h_rows = rows_of(h_gam)
    minv_rows = defaultdict(list)
    for a, b in zip(*np.nonzero(minv)):
        minv_rows[a].append((b, minv[a, b]))
    gm_cols = defaultdict(list)   # G_mid by column: {b: [(s, form)]}
    for (s, b), f in g_mid.items():
        gm_cols[b].append((s, f))
    terms = defaultdict(lambda: defaultdict(float))    # (row, col) -> {(a, b): coefficient}

    def linear(entry, form, scale):
        for v, c in form.items():
            terms[entry][v, one] += scale * c

    def product(entry, left, right, scale):
        for v, c in left.items():
            for w, d in right.items():
                terms[entry][min(v, w), max(v, w)] += scale * c * d

    for i, j in zip(*np.nonzero(mass)):
        terms[i, j][one, one] += 2.0 * mass[i, j] / (h * h)
    for (i, j), f in h_lam.items():
        linear((i, j), f, 0.5)
    for (s, i), f in g_mid.items():
        linear((i, n + s), f, 1.0)
        linear((i, n + m + s), f, -2.0 / h)
    for (s, i), f in hv_mid.items():
        linear((i, n + m + s), f, 1.0)
    for (r, j), f in hv1.items():
        linear((n + r, j), f, 1.0)
    for (r, j), f in g1.items():
        linear((n + r, j), f, 2.0 / h)
        linear((n + m + r, j), f, 1.0)
    for i, row in h_rows.items():          # - H M^-1 H / 2 and - H M^-1 G_mid^T
        for a, left in row:
            for b, w in minv_rows[a]:
                for j, right in h_rows[b]:
                    product((i, j), left, right, -0.5 * w)
                for s, right in gm_cols[b]:
                    product((i, n + m + s), left, right, -w)
    for (r, a), left in g1.items():         # - G1 M^-1 H and - 2 G1 M^-1 G_mid^T
        for b, w in minv_rows[a]:
            for j, right in h_rows[b]:
                product((n + r, j), left, right, -w)
            for s, right in gm_cols[b]:
                product((n + r, n + m + s), left, right, -2.0 * w)
    pattern = np.eye(size, dtype=bool)
    for (i, j), monomials in terms.items():
        if any(c != 0.0 for c in monomials.values()):
            pattern[i, j] = True
    nnz_matrix = int(pattern.sum())
    # fill of elimination without row exchanges, and its update operations
    fill = pattern.copy()
    for c in range(size):
        rows = np.flatnonzero(fill[c + 1:, c]) + c + 1
        cols = np.flatnonzero(fill[c, c + 1:]) + c + 1
        fill[np.ix_(rows, cols)] = True
    e_row, e_col = (x.astype(np.int64) for x in np.nonzero(fill))
    index = np.full((size, size), -1, dtype=np.int64)
    index[e_row, e_col] = np.arange(e_row.size)
    diag = index[np.arange(size), np.arange(size)].copy()
    # elimination row by row, the L entries (i, c) of row i (c ascending) in pairs (c1, c2):
    # the multiplier of c1, the update of (i, c2) by c1, the multiplier of c2, then the
    # updates of row i from the U entries of rows c1 and c2 (j > c2: c1's U columns below
    # c2 would be L entries of row i between them), fused where both rows have column j,
    # single otherwise; the row's inverse pivot after its last pair. Every entry receives
    # the updates of column-by-column elimination in its order, so the factors are those
    # of the dense elimination. (Measured on the top: the fused pairs save ~10 % of the
    # factorisation against single updates; blocks of rows sharing the reads of rows c1,
    # c2 saved nothing.)
    # pairs[p]: l1, c1, l2, c2 (-1: none), pre (index of (c1, c2) or -1), first fused op,
    # first single op of c1, first single op of c2, row finished after it (or -1); a last
    # row closes the ranges
    pairs, pair_ops, single_ops = [], [], []
    for i in range(size):
        columns = np.flatnonzero(fill[i, :i])
        for k in range(0, max(columns.size, 1), 2):
            c1 = columns[k] if columns.size else -1
            c2 = columns[k + 1] if k + 1 < columns.size else -1
            u1 = set(np.flatnonzero(fill[c1, c1 + 1:]) + c1 + 1) if c1 >= 0 else set()
            u2 = set(np.flatnonzero(fill[c2, c2 + 1:]) + c2 + 1) if c2 >= 0 else set()
            u1.discard(c2)
            pre = index[c1, c2] if c2 >= 0 and fill[c1, c2] else -1
            row = [index[i, c1] if c1 >= 0 else -1, c1, index[i, c2] if c2 >= 0 else -1, c2,
                   pre, len(pair_ops)]
            pair_ops.extend([index[i, j], index[c1, j], index[c2, j]] for j in sorted(u1 & u2))
            row.append(len(single_ops))
            single_ops.extend([index[i, j], index[c1, j]] for j in sorted(u1 - u2))
            row.append(len(single_ops))
            single_ops.extend([index[i, j], index[c2, j]] for j in sorted(u2 - u1))
            pairs.append(row + [i if k + 2 >= columns.size else -1])
    pairs.append([-1] * 5 + [len(pair_ops), len(single_ops), len(single_ops), -1])
    updates = 2 * len(pair_ops) + len(single_ops) + sum(row[4] >= 0 for row in pairs)
    # substitutions: forward by columns of L (rows t of x, entries u), backward by rows of U
    # (entries u, columns j)
    forward_ptr, forward, backward_ptr, backward = [0], [], [0], []
    for j in range(size):
        rows = np.flatnonzero(fill[j + 1:, j]) + j + 1
        forward.extend([t, index[t, j]] for t in rows)
        forward_ptr.append(len(forward))
        cols = np.flatnonzero(fill[j, j + 1:]) + j + 1
        backward.extend([index[j, c], c] for c in cols)
        backward_ptr.append(len(backward))
    # assembly: per stored entry a constant and its monomials (term_coef, term_var)
    a_const = np.zeros(e_row.size)
    entries = [[] for _ in range(e_row.size)]
    for (i, j), monomials in terms.items():
        e = index[i, j]
        for (a, b), c in monomials.items():
            if c == 0.0:
                continue
            if a == one:
                a_const[e] += c
            else:
                entries[e].append((c, a, b))
    term_ptr = np.cumsum([0] + [len(entry) for entry in entries])
    term_coef = np.array([t[0] for entry in entries for t in entry], dtype=float)
    term_var = [t[1:] for entry in entries for t in entry]

    def ints(x, columns=None):
        x = np.asarray(x, dtype=np.int64)
        return x.reshape(-1, columns) if columns else x

    counts = {"size": size, "nnz_matrix": nnz_matrix, "nnz_lu": int(e_row.size),
              "assembly_terms": int(term_coef.size),
              "lu_multipliers": int(fill[np.tril_indices(size, -1)].sum()),
              "lu_updates": int(updates), "lu_fused_pairs": len(pair_ops),
              "solve_updates": len(forward) + len(backward),
              "dense_lu_updates": sum((size - 1 - c) ** 2 for c in range(size)),
              "dense_solve_updates": size * (size - 1)}
    return (nv, a_const, ints(term_ptr), term_coef, ints(term_var, 2), ints(diag),
            ints(pairs, 9), ints(pair_ops, 3), ints(single_ops, 2), ints(forward_ptr),
            ints(forward, 2), ints(backward_ptr), ints(backward, 2), e_row, e_col, counts)
