"""Ensembles: one model integrated from many initial states in one vectorised run.

:func:`simulate_ensemble` advances K copies of a small model at once. The schemes whose unknowns are
(q^{n+1}, p^{n+1}, lambda, gamma) -- energy-momentum, GGL-VI A, RATTLE -- run in one batched kernel
compiled with numba (:mod:`mbs.backends.ensemble_numba`), members in SIMD lanes: the kernel
evaluates the scheme's own step equations, turned into tables once per model and step size
(:mod:`mbs.backends.ensemble_plan`). Each member runs the Newton iteration of a single run (explicit
predictor, exact Newton that keeps its factors near the solution) and stops as soon as it converges,
so the cost per member is a fraction of a separate run (e.g. Monte Carlo studies of tops). Every
other case runs the members one by one through :func:`mbs.simulate`.

Parameter sweeps (different masses, stiffnesses, geometry) are different models: run them with
:func:`simulate_many`, which maps :func:`mbs.simulate` over (model, options) pairs with any
``concurrent.futures.Executor`` — a ``ProcessPoolExecutor`` on one machine or, unchanged, the
executor of a Dask cluster (``distributed.Client(...).get_executor()``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from mbs.backends.ensemble_plan import lane_plan
from mbs.engine.cache import model_cache
from mbs.engine.defects import COEFFICIENT_TABLE, MAX_CORRECTION_DEGREE
from mbs.engine.newton import NewtonOptions
from mbs.errors import ModelError, ModelTypeError, SimulationInterrupted, SolverError
from mbs.liegroup.model import LieGroupModel
from mbs.model import POSITION_TOLERANCE, VELOCITY_TOLERANCE, Model
from mbs.run_context import single_threaded_blas, subnormals_flushed
from mbs.simulate import simulate, step_count
from mbs.solvers import Solver, make_solver
from mbs.time_span import last_node_time, node_times
from mbs.validation import as_scalar


@dataclass
class EnsembleSolution:
    """States of every member: ``q``, ``p`` of shape (K, N+1, n) at times ``t`` (N+1,);
    ``work`` (K, N+1) the cumulative work of the applied forces and drives (see
    :attr:`mbs.Solution.work`), None for models without either."""

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
                      solver: str | Solver | None = None, tolerance: float | None = None,
                      max_iterations: int | None = None, backend: str = "auto",
                      predictor_correction: int | None = 6, **solver_options
                      ) -> EnsembleSolution:
    """Integrate K members of ``model`` from K initial states.

    With numba installed, "em", "ggl-vi-a" or "rattle" given by name, and a small model
    (``model.dense``) with quadratic constraints (all built-in joints), a potential linear in
    q (gravity) and no applied forces or drives, the members are advanced together by the
    batched kernel; they match single runs to the Newton tolerance. Any other scheme, a
    solver instance, solver options, a large model, user constraints, nonlinear potentials,
    applied forces or ``backend="numpy"`` run each member through :func:`mbs.simulate` with
    that solver (bitwise the single runs).

    Parameters
    ----------
    model : Model or LieGroupModel
        The compiled model. A Lie-group model runs its members one by one
        (``solver`` "vrkmk", the default for it, or "vcg"), from director states of
        ``model.director_model``.
    initial_states : (Q0, P0) arrays of shape (K, n), or an array (K, 2, n)
        Consistent initial states (check them with ``model.is_consistent``). A list [Q0, P0]
        is read as the pair; with K = 2 it is refused, as it would read as two members
        [[q, p], [q, p]] as well.
    h, t_end : float
        Step size and end time (start at 0).
    solver : str, Solver or None
        Any scheme :func:`mbs.simulate` accepts; None (default): "em", or "vrkmk" for a
        Lie-group model; ``**solver_options`` as there, plus ``on_failure`` and
        ``max_refinements`` of :func:`mbs.simulate`.
    tolerance, max_iterations
        Newton stopping rule, as :class:`mbs.solvers.NewtonOptions` (relative increment of q
        and p of every member). The batched kernel's defaults are 1e-12 and 25; members run
        one by one take them as the solver's ``newton`` options (default: the solver's
        own), which a solver instance must carry itself (an error otherwise).
    backend : {"auto", "numba", "numpy"}
        "numba": the batched kernel (parallel over blocks of members); "numpy": every member
        through the numpy path of :func:`mbs.simulate` (batched numpy kernels would be no
        faster than single runs); "auto": numba when it can be imported. Members run one by
        one take "numba" as the solver's ``backend="compiled"`` (unless ``solver_options``
        set a backend) and then run on one thread per core when their steps run in the
        kernel; "compiled" is accepted for "numba".
    predictor_correction : int or None
        Degree of the extrapolated predictor defect added to each member's guess, as
        ``Solver.predictor_correction`` of a single run (default 6; None turns it off). A
        step whose Newton iteration fails from the corrected guess starts once more from
        the predictor's own (``stats["guess_retries"]``). A higher degree saves more LU
        factorisations per step; the energy drift stays at round-off.

    Returns
    -------
    EnsembleSolution
        Every member conserves what a single run of its scheme conserves (EM: energy and
        momentum maps).
    """
    if not isinstance(model, Model | LieGroupModel):
        raise ModelError("simulate_ensemble expects a compiled Model")
    h = as_scalar(h, "h", "simulate_ensemble", positive=True)
    t_end = as_scalar(t_end, "t_end", "simulate_ensemble", positive=True)
    # warned once here, not once per member: every member runs on the grid of its steps
    steps = step_count(h, 0.0, t_end, "simulate_ensemble")
    t_end = last_node_time(0.0, h, steps, t_end)
    single_run = sorted(set(solver_options) & set(_SINGLE_RUN_OPTIONS))
    if single_run:
        raise ModelError(f"simulate_ensemble: {', '.join(single_run)} belong to single runs "
                         f"(mbs.simulate); ensemble members start at t = 0 from "
                         f"initial_states and are kept in memory")
    if isinstance(model, LieGroupModel):
        # Lie-group members run one by one; their states are the director model's
        q0, p0 = _initial_arrays(model.director_model, initial_states)
        solver = "vrkmk" if solver is None else solver
        return _member_by_member(model, q0, p0, h, t_end, solver, _with_newton(
            solver, solver_options, tolerance, max_iterations))
    solver = "em" if solver is None else solver
    q0, p0 = _initial_arrays(model, initial_states)
    if backend not in ("auto", "numba", "numpy", "compiled"):
        raise ModelError(f"simulate_ensemble: backend must be 'auto', 'numba' or 'numpy', "
                         f"got {backend!r}")
    backend = "numba" if backend == "compiled" else backend
    if backend == "numba" and _numba_kernels() is None:
        raise ModelError("simulate_ensemble: backend='numba' needs numba (pip install numba); "
                         "use 'numpy'")
    batched = None
    if backend != "numpy" and _numba_kernels() is not None and isinstance(solver, str) \
            and not solver_options:
        batched = _batched_solver(model, solver, q0[0], p0[0], h)
    if batched is None:
        if backend == "numba" and isinstance(solver, str):
            solver_options.setdefault("backend", "compiled")
        return _member_by_member(model, q0, p0, h, t_end, solver, _with_newton(
            solver, solver_options, tolerance, max_iterations))
    count, n = q0.shape
    if predictor_correction is not None and (
            isinstance(predictor_correction, bool)
            or not isinstance(predictor_correction, (int, np.integer))
            or not 0 <= predictor_correction <= MAX_CORRECTION_DEGREE):
        raise ModelError(f"simulate_ensemble: predictor_correction must be None or an integer "
                         f"0 .. {MAX_CORRECTION_DEGREE}, got {predictor_correction!r}")
    kernel = _BatchedRun(batched, t_end, 1e-12 if tolerance is None else tolerance,
                         25 if max_iterations is None else max_iterations, predictor_correction)
    q = np.empty((count, steps + 1, n))
    p = np.empty((count, steps + 1, n))
    q[:, 0], p[:, 0] = q0, p0
    started = time.perf_counter()
    # BLAS on one thread: idle BLAS threads spinning on the cores slow the numba threads down
    with single_threaded_blas(), subnormals_flushed():
        iterations = kernel.run(q, p)
    ensemble = EnsembleSolution(model, node_times(0.0, h, 0, steps, t_end), q, p,
                                {"solver": f"{batched.name} (ensemble)", "h": h,
                                 "members": count, "backend": "numba",
                                 "newton_iterations": iterations,
                                 "factorizations": kernel.factorizations,
                                 "pivoted_factorizations": int(kernel.fallbacks.sum()),
                                 "guess_retries": int(kernel.retries.sum()),
                                 "rerun_members": kernel.rerun,
                                 "wall_time": time.perf_counter() - started})
    if kernel.failures:
        _raise_member_failures(kernel.failures, ensemble)
    return ensemble


def _batched_solver(model: Model, name: str, q0: np.ndarray, p0: np.ndarray,
                    h: float) -> Solver | None:
    """The scheme ``name`` started on ``model`` when the SIMD kernel runs it: unknowns (q1,
    p1, lambda, gamma), step equations in tensor form (quadratic constraints, no drives),
    a potential linear in q, no applied forces, a small (dense) model; else None."""
    if not (model.dense and not model.has_applied_forces and not model.is_rheonomic
            and model.constant_potential_gradient() is not None):
        return None
    try:
        solver = make_solver(name)
    except ModelError:
        return None     # an unknown name: simulate() reports it
    if not isinstance(solver, Solver):
        return None
    solver.backend = "polynomial"
    try:
        solver.start(model, q0, p0, h)
    except ModelError:
        return None
    return solver if solver._state_unknowns and solver._polynomial is not None else None


#: Options of :func:`mbs.simulate` (not of the solver) that members run member by member
#: accept.
_RUN_OPTIONS = ("on_failure", "max_refinements")
#: Options of mbs.simulate that an ensemble does not take.
_SINGLE_RUN_OPTIONS = ("t_start", "initial_state", "project", "output", "resume",
                       "flush_every")


def _with_newton(solver: str | Solver, solver_options: dict, tolerance: float | None,
                 max_iterations: int | None) -> dict:
    """``solver_options`` with the ensemble's Newton settings, where given, as the members'
    ``newton`` options."""
    given = {key: value for key, value in (("tolerance", tolerance),
                                           ("max_iterations", max_iterations))
             if value is not None}
    if not given:
        return solver_options
    if not isinstance(solver, str):
        raise ModelError(f"simulate_ensemble: {', '.join(given)} cannot reach a solver given "
                         f"as an instance; set newton=NewtonOptions(...) when creating it")
    if "newton" in solver_options:
        raise ModelError(f"simulate_ensemble: give either {', '.join(given)} or newton=, "
                         f"not both")
    return {**solver_options, "newton": NewtonOptions(**given)}


def _member_by_member(model: Model, q0: np.ndarray, p0: np.ndarray, h: float, t_end: float,
                      solver: str | Solver, solver_options: dict) -> EnsembleSolution:
    """Every member through :func:`mbs.simulate` (see :func:`simulate_ensemble`). Members that
    fail do not stop the others: see :func:`_raise_member_failures`.

    Members whose whole steps run in the compiled kernel (``backend="compiled"``, a potential
    linear in q, no applied forces) run on one thread per core: the kernel releases the GIL,
    and each member gives bitwise the same states as alone. Members on the numpy path hold
    the GIL and run one after the other."""
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
    members, failures, interrupted = [], {}, None
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        # every member submitted at once; the results are taken in member order
        results = ([pool.submit(member, k).result for k in range(q0.shape[0])] if pool
                   else [functools.partial(member, k) for k in range(q0.shape[0])])
        for k, result in enumerate(results):
            try:
                members.append(result())
            except KeyboardInterrupt as interrupt:  # Ctrl-C: the members so far are kept
                interrupted = interrupt
                # a member run here hands over its steps; one in a worker thread does not
                members.append(getattr(interrupt, "solution", None))
                break
            except SolverError as error:
                failures[k] = error
                members.append(error.solution)
    finally:
        if pool is not None:  # after Ctrl-C, members already running finish in the background
            pool.shutdown(wait=interrupted is None, cancel_futures=True)
    steps = max(1, int(round(t_end / h)))
    times = node_times(0.0, h, 0, steps, t_end)
    q, p = (_padded([None if m is None else m.q for m in members], steps, q0.shape),
            _padded([None if m is None else m.p for m in members], steps, q0.shape))
    if interrupted is not None:
        _raise_interrupted(model, members, failures, q, p, h, times, interrupted)
    first = members[0]
    stats = {"solver": f"{first.stats['solver']} (ensemble)", "h": h, "members": q0.shape[0],
             "backend": "member by member"}
    if failures:
        _raise_member_failures(failures, EnsembleSolution(first.model, times, q, p, stats))
    stats.update({
        "newton_iterations": np.stack([m.stats["newton_iterations"] for m in members]),
        "refined_steps": [m.stats["refined_steps"] for m in members],
        "restarts": [m.stats["restarts"] for m in members],
        "wall_time": time.perf_counter() - started})
    return EnsembleSolution(
        first.model, first.t, q, p, stats,
        work=np.stack([m.work for m in members]) if first.model.non_conservative else None)


def _raise_interrupted(model: Model, members: list, failures: dict, q: np.ndarray,
                       p: np.ndarray, h: float, times: np.ndarray,
                       interrupt: BaseException):
    """Raise :class:`SimulationInterrupted` for Ctrl-C in member k = len(members) - 1 of a
    member-by-member ensemble, with ``error.solution`` the ensemble so far: the members
    before it (completed, or failed up to their last accepted step), member k up to its
    last accepted step when it ran here (a member in a worker thread keeps nothing), NaN for
    the rest; ``stats["completed"]`` and ``stats["failed_members"]`` as for failures."""
    (count, nodes, _), k = q.shape, len(members) - 1
    steps, interrupted = nodes - 1, members[k]
    indices = np.arange(count)
    stats = {"solver": "(ensemble)", "h": h, "members": count, "backend": "member by member",
             "completed": (indices < k) & ~np.isin(indices, list(failures)),
             "failed_members": {j: error.step for j, error in failures.items()}}
    failed = f" ({len(failures)} of them failed, see stats['failed_members'])" if failures else ""
    done = ("nothing kept of it (it ran in a worker thread)" if interrupted is None else
            f"after {interrupted.t.size - 1} of its {steps} steps")
    director = model.director_model if isinstance(model, LieGroupModel) else model
    raise SimulationInterrupted(
        f"ensemble interrupted in member {k} of {count}, {done}; error.solution holds the "
        f"{k} members before it{failed}, member {k} up to its last accepted step and the "
        f"members not run as NaN (stats['completed'] flags the finished ones)",
        solution=EnsembleSolution(director, times, q, p, stats)
    ) from interrupt


def _padded(rows: list[np.ndarray | None], steps: int, shape: tuple[int, int]) -> np.ndarray:
    """The K = shape[0] members' (N_k + 1, n) arrays stacked to (K, steps + 1, n), NaN after
    a member's last accepted step and for members without a row (None, or not run)."""
    out = np.full((shape[0], steps + 1, shape[1]), np.nan)
    for k, row in enumerate(rows):
        if row is not None:
            out[k, :row.shape[0]] = row
    return out


def _raise_member_failures(failures: dict[int, SolverError], ensemble: EnsembleSolution):
    """Raise the SolverError of the first failed member, after every member has run, with
    ``error.solution`` the whole ensemble: completed members in full, a failed member up to
    its last accepted step and NaN after it; ``stats["failed_members"]`` maps each failed
    member to its failed step and ``stats["completed"]`` flags the members that finished."""
    count = ensemble.q.shape[0]
    ensemble.stats["failed_members"] = {k: error.step for k, error in failures.items()}
    ensemble.stats["completed"] = np.array([k not in failures for k in range(count)])
    k = min(failures)
    error = failures[k]
    error.solution = ensemble
    listed = ", ".join(f"{j} (step {e.step})" for j, e in sorted(failures.items()))
    error.args = (f"ensemble: {len(failures)} of {count} members failed: {listed}. Member "
                  f"{k}: {error}. As an ensemble, error.solution holds every member (NaN "
                  f"after a failed member's last accepted step)",)
    raise error


def simulate_many(runs: Iterable[tuple[Model, dict]], executor: Executor | None = None) -> list:
    """``mbs.simulate(model, **options)`` for every (model, options) pair.

    With ``executor=None`` the runs execute here one after the other; with any
    ``concurrent.futures.Executor`` (process pool, Dask ``Client.get_executor()``) they run
    where the executor puts them. Models must be picklable for process or cluster executors
    (true for every built-in element; user potentials holding lambdas are not).

    Raises
    ------
    Exception
        The error of the first run that failed, once every run has finished; its
        ``results`` attribute lists every run's :class:`~mbs.Solution` or error, in order.
    SimulationInterrupted
        On Ctrl-C, at once (no further run starts); ``results`` lists the runs before and,
        for runs made here (``executor=None``), the interrupted run's partial Solution. Runs
        an executor already started finish there.
    """
    runs = [_run_pair(run, i) for i, run in enumerate(runs)]
    outcomes, futures = [], []
    try:
        if executor is None:
            for model, options in runs:
                outcomes.append(_outcome(functools.partial(simulate, model, **options)))
        else:
            futures = [executor.submit(simulate, model, **options) for model, options in runs]
            for future in futures:
                outcomes.append(_outcome(future.result))
    except KeyboardInterrupt as interrupt:  # Ctrl-C: no further run starts
        for future in futures:
            future.cancel()
        partial = getattr(interrupt, "solution", None)  # None for a run in an executor
        error = SimulationInterrupted(
            f"simulate_many interrupted in run {len(outcomes)} of {len(runs)}; error.results "
            f"holds the Solutions or errors of the runs before it"
            + ("" if partial is None else " and the interrupted run's partial Solution "
               "(also error.solution)"), solution=partial)
        error.results = outcomes + ([] if partial is None else [partial])
        raise error from interrupt
    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, Exception)]
    if failed:
        error = outcomes[failed[0]]
        error.results = outcomes
        error.args = (f"simulate_many: {len(failed)} of {len(runs)} runs failed (runs "
                      f"{failed[:10]}); run {failed[0]}: {error}; error.results holds every "
                      f"run's Solution or error",)
        raise error
    return outcomes


def _run_pair(run, index: int) -> tuple[Model, dict]:
    """A run of :func:`simulate_many` checked to be a (model, options) pair."""
    if not (isinstance(run, tuple | list) and len(run) == 2 and isinstance(run[1], dict)):
        raise ModelTypeError(f"simulate_many: run {index} must be a (model, options) pair with "
                             f"options a dict of mbs.simulate's arguments, e.g. (model, "
                             f"{{'solver': 'em', 'h': 0.01, 't_end': 1.0}}); got {run!r:.120}")
    return run[0], run[1]


def _outcome(call):
    """The result of ``call()``, or the exception it raised (Ctrl-C is not kept: it ends
    the sweep)."""
    try:
        return call()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - every run's error is kept and reported
        return exc


def _initial_arrays(model: Model, initial_states) -> tuple[np.ndarray, np.ndarray]:
    try:
        if isinstance(initial_states, tuple) and len(initial_states) == 2:
            q0, p0 = (np.asarray(a, dtype=float) for a in initial_states)
        else:
            states = np.asarray(initial_states, dtype=float)
            q0 = p0 = None
            if isinstance(initial_states, list) and states.shape[:1] == (2,) \
                    and states.ndim == 3 and states.shape[1] != 2:
                q0, p0 = states  # a list [Q0, P0]: a pair, as it cannot be K = 2 members
            elif states.ndim == 3 and states.shape[1] == 2:
                q0, p0 = states[:, 0], states[:, 1]
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelError(f"simulate_ensemble: initial_states must be (Q0, P0) of shape (K, "
                         f"{model.n}) or an array (K, 2, {model.n})") from exc
    if isinstance(initial_states, list) and q0 is not None and q0.shape[0] == 2:
        raise ModelError(f"simulate_ensemble: a list of two (2, {model.n}) arrays reads as "
                         f"[Q0, P0] of two members and as [[q, p], [q, p]] alike; give the "
                         f"pair as a tuple (Q0, P0) or the members as one array of shape (K, "
                         f"2, {model.n})")
    if q0 is None:
        raise ModelError(f"simulate_ensemble: initial_states must be a pair (Q0, P0) of arrays "
                         f"(K, {model.n}) or one array (K, 2, {model.n}), got one array of "
                         f"shape {states.shape}" + (" (the momenta P0 are missing)"
                                                    if states.shape[-1:] == (model.n,) else ""))
    if q0.ndim != 2 or q0.shape != p0.shape or q0.shape[1] != model.n or not len(q0):
        raise ModelError(f"simulate_ensemble: initial states must have shape (K, {model.n}) "
                         f"with K >= 1 members, got {q0.shape} and {p0.shape}")
    if not (np.all(np.isfinite(q0)) and np.all(np.isfinite(p0))):
        raise ModelError("simulate_ensemble: initial states must be finite")
    mirrored = np.flatnonzero((model.frame_determinants(q0) < 0.0).any(axis=1))[:10].tolist()
    if mirrored:
        raise ModelError(f"simulate_ensemble: members {mirrored} start with the directors of "
                         f"a body forming a left-handed frame (a mirror image, det = -1); "
                         f"give rotations (det = +1)")
    if model.drives:  # a drive's angle half a turn off satisfies every residual test
        for k in range(q0.shape[0]):
            try:
                model.check_drive_branches(q0[k])
            except ModelError as exc:
                raise ModelError(f"simulate_ensemble: member {k}: {exc}") from None
    unsure = np.flatnonzero(~_clearly_consistent(model, q0, p0))
    bad = [int(k) for k in unsure if not model.is_consistent(q0[k], p0[k])]
    if bad:
        raise ModelError(f"simulate_ensemble: members {bad[:10]} violate the constraints; "
                         f"project them with model.project(q, p)")
    return q0.copy(), p0.copy()


def _clearly_consistent(model: Model, q0: np.ndarray, p0: np.ndarray) -> np.ndarray:
    """Members that satisfy :meth:`Model.is_consistent` with half its tolerances to spare,
    checked for all members at once (one call per member would cost as much as many steps
    of the ensemble run); the others are left to ``model.is_consistent``."""
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


def _numba_kernels():
    """The compiled kernels (:mod:`mbs.backends.ensemble_numba`), or None without numba."""
    try:
        from mbs.backends import ensemble_numba
    except ImportError:  # numba not installed (or not importable): members one by one
        return None
    return ensemble_numba


class _BatchedRun:
    """A scheme's steps for K members at once in the SIMD kernel
    (:func:`mbs.backends.ensemble_numba.run_lanes`) from the tables of its step equations
    (:func:`mbs.backends.ensemble_plan.lane_plan`).

    Every member runs the Newton iteration of a single run on its own: it starts from the
    explicit predictor with the previous step's multipliers, corrected by the extrapolated
    defects of its past steps, factorises its Newton matrix there, and refactorises only
    while its relative increment is above ``refactor_above`` or contracts slower than
    ``contraction`` (:func:`mbs.engine.newton.newton`); it stops at the tolerance on the
    relative increments of q and p, including the stagnation rule for fresh matrices, so
    converged members cost nothing. A member whose iteration fails at some step is run again
    as its single run through :func:`mbs.simulate` (``rerun`` lists (member, failed step)).
    """

    def __init__(self, solver: Solver, t_end: float, tolerance: float, max_iterations: int,
                 predictor_correction: int | None):
        self.solver, self.model, self.h, self.t_end = solver, solver.model, solver.h, t_end
        self.limits = (float(tolerance), int(max_iterations), float(NewtonOptions.contraction),
                       float(NewtonOptions.refactor_above),
                       float(NewtonOptions.stagnation_level))
        self.predictor_correction = predictor_correction
        cache = model_cache(self.model, "lane_plans")
        key = (type(solver).__name__, solver._polynomial_key(), self.h)
        if key not in cache:
            cache[key] = lane_plan(solver)
        self.plan = cache[key]
        self.factorizations = 0

    def run(self, q: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Fill rows 1.. of ``q``, ``p`` (K, N + 1, n) from row 0; returns the Newton
        iterations of the slowest member per step. On failure raises SolverError with the
        states up to the failing step."""
        kernels = _numba_kernels()
        count, steps, n = q.shape[0], q.shape[1] - 1, self.model.n
        iterations = np.zeros((count, steps), dtype=np.int32)
        factorizations = np.zeros(count, dtype=np.int64)
        self.fallbacks = np.zeros(count, dtype=np.int64)
        self.retries = np.zeros(count, dtype=np.int64)
        failed_step = np.full(count, -1, dtype=np.int64)
        status = np.zeros(count, dtype=np.int64)
        floors = self.solver._floor_minimum
        kernels.run_lanes(kernels.LANES, n, kernels.STATIC_PIVOT_THRESHOLD, q, p,
                          (float(floors[0]), float(floors[1])), self.limits,
                          -1 if self.predictor_correction is None
                          else int(self.predictor_correction), self.solver._multiplier_lag,
                          COEFFICIENT_TABLE,
                          self.plan[:-1], status, iterations, factorizations,
                          failed_step, self.fallbacks, self.retries)
        self.factorizations += int(factorizations.sum())
        self.rerun, self.failures = [], {}
        for k in np.flatnonzero(status != kernels.CONVERGED):
            self._rerun(int(k), int(failed_step[k]), q, p, iterations)
        return iterations.max(axis=0) if count else np.zeros(steps, dtype=int)

    def _rerun(self, k: int, failed: int, q: np.ndarray, p: np.ndarray,
               iterations: np.ndarray) -> None:
        """Member k, whose batched iteration failed at step ``failed``, as its single run
        through :func:`mbs.simulate` (with its retries from another guess and its sub-steps).
        If that fails too, its states up to the step it failed at are kept, NaN after it, and
        its SolverError goes into ``failures``."""
        try:
            single = simulate(self.model, self.solver.name, h=self.h,
                              t_end=self.t_end, initial_state=(q[k, 0], p[k, 0]))
        except SolverError as error:
            size = error.solution.t.size
            q[k, :size], p[k, :size] = error.solution.q, error.solution.p
            q[k, size:], p[k, size:] = np.nan, np.nan
            self.failures[k] = error
            return
        q[k], p[k] = single.q, single.p
        iterations[k] = single.stats["newton_iterations"]
        self.rerun.append((k, failed))
