"""Time integration driver: runs a solver over a time grid and collects a Solution."""

from __future__ import annotations

import time
import warnings

import numpy as np

from mbs.errors import ModelError, SolverError
from mbs.model import Model
from mbs.solution import Solution
from mbs.solvers import Solver, make_solver
from mbs.solvers.newton import NewtonConvergenceError
from mbs.validation import as_scalar


def simulate(model: Model, solver: str | Solver = "em", *, h: float, t_end: float,
             t_start: float = 0.0, project: bool = False, progress: bool = False,
             initial_state: tuple[np.ndarray, np.ndarray] | None = None,
             **solver_options) -> Solution:
    """Integrate ``model`` from ``t_start`` to ``t_end`` with constant step ``h``.

    Parameters
    ----------
    model : Model
        From ``System.compile()``.
    solver : str or Solver
        "em" (default), "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle", or an instance such as
        ``mbs.solvers.GGLVI(variant="A", theta=0.5)``.
    h : float
        Step size (> 0). The number of steps is round((t_end - t_start) / h); a warning is
        given if that does not reach t_end exactly.
    project : bool
        Project an inconsistent initial state onto the constraints (otherwise an error).
    progress : bool
        Show a progress bar (tqdm).
    initial_state : (q0, p0), optional
        Start from this state instead of the one set on the bodies.
    **solver_options
        Passed to the solver when ``solver`` is a name (e.g. ``theta=0.5``).

    Raises
    ------
    SolverError
        When a step fails; ``error.solution`` holds every step accepted before it.
    """
    if not isinstance(model, Model):
        raise ModelError(f"simulate expects a compiled Model (system.compile()), got "
                         f"{type(model).__name__}")
    h = as_scalar(h, "h", "simulate", positive=True)
    t_end = as_scalar(t_end, "t_end", "simulate")
    t_start = as_scalar(t_start, "t_start", "simulate")
    if t_end <= t_start:
        raise ModelError(f"simulate: t_end = {t_end} must be greater than t_start = {t_start}")
    steps = max(1, int(round((t_end - t_start) / h)))
    if abs(steps * h - (t_end - t_start)) > 1e-9 * max(1.0, t_end - t_start):
        warnings.warn(f"simulate: h = {h} does not divide the interval; {steps} steps end at "
                      f"t = {t_start + steps * h}", stacklevel=2)
    solver = make_solver(solver, **solver_options)
    if initial_state is None:
        q0, p0 = model.initial_state(project=project)
    else:
        q0, p0 = (np.asarray(a, dtype=float).copy() for a in initial_state)
    return _run(model, solver, q0, p0, h, t_start, steps, progress)


def _run(model: Model, solver: Solver, q0: np.ndarray, p0: np.ndarray, h: float,
         t_start: float, steps: int, progress: bool) -> Solution:
    n, m = model.n, model.m
    q = np.empty((steps + 1, n))
    p = np.empty((steps + 1, n))
    velocities = np.empty((steps, n))
    lam = np.empty((steps, m))
    gam = np.empty((steps, m))
    enforced = np.empty((steps, 2))
    iterations = np.zeros(steps, dtype=int)
    q[0], p[0] = q0, p0
    solver.start(model, q0, p0, h)
    bar = _progress_bar(steps, solver.name) if progress else None
    started = time.perf_counter()
    done = 0

    def solution(count: int) -> Solution:
        return Solution(
            model=model, t=t_start + h * np.arange(count + 1), q=q[:count + 1].copy(),
            p=p[:count + 1].copy(), scheme_velocities=velocities[:count].copy(),
            multipliers=lam[:count].copy(), velocity_multipliers=gam[:count].copy(),
            enforced_residuals=enforced[:count].copy(),
            stats={"solver": solver.name, "h": h, "steps": count,
                   "newton_iterations": iterations[:count].copy(),
                   "wall_time": time.perf_counter() - started,
                   "completed": count == steps},
            solver_properties=solver.properties)

    try:
        for k in range(steps):
            try:
                result = solver.step(q[k], p[k])
            except NewtonConvergenceError as failure:
                partial = solution(done)
                raise SolverError(
                    f"{solver.name}: step {k} (t = {t_start + k * h:.6g} -> "
                    f"{t_start + (k + 1) * h:.6g}) failed: {failure} (residual "
                    f"{failure.residual_norm:.3e}); hint: {failure.hint}. "
                    f"error.solution holds the {done} accepted steps",
                    solution=partial, step=k, time=t_start + k * h) from failure
            if not (np.all(np.isfinite(result.q)) and np.all(np.isfinite(result.p))):
                raise SolverError(f"{solver.name}: step {k} produced non-finite values; reduce "
                                  f"the step size", solution=solution(done), step=k,
                                  time=t_start + k * h)
            q[k + 1], p[k + 1] = result.q, result.p
            velocities[k], lam[k], gam[k] = (result.velocity, result.multiplier,
                                             result.velocity_multiplier)
            enforced[k] = result.enforced
            iterations[k] = result.iterations
            done = k + 1
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return solution(done)


def _progress_bar(total: int, label: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc=f"mbs {label}", unit="step", leave=False)
