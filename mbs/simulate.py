"""Time integration driver: runs a solver over a time grid and collects a Solution.

Failure contract: with ``on_failure="refine"`` (default) a step that Newton's method cannot
solve is retried as 2, 4, ... sub-steps (bounded depth) on the same output grid; when no
refinement of the step itself succeeds, the run goes back 1, 2, 4, ... steps and takes them
and all later ones as twice as many sub-steps (a state that earlier steps already spoiled
cannot be rescued by refining the step that fails on it). A step that still cannot be
solved raises :class:`mbs.SolverError` carrying the partial Solution (every accepted step),
the step index and time, the residual and a hint. Ctrl-C raises
:class:`mbs.SimulationInterrupted` (a KeyboardInterrupt) that carries the partial Solution.
Long runs can stream to disk (``output=``) and be resumed (``resume=``) with results identical
to an uninterrupted run.
"""

from __future__ import annotations

import difflib
import inspect
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.linalg import null_space

from mbs import solvers
from mbs.analysis import MAX_BLOCK_COLUMNS, rank_loss_time
from mbs.engine.guess import FAR_ROOT_ITERATIONS, MIRROR_MOTION, mirrored_frames
from mbs.engine.newton import NewtonConvergenceError
from mbs.errors import (
    ForceFunctionError,
    InconsistentInitialStateError,
    MbsError,
    ModelError,
    ModelTypeError,
    SimulationError,
    SimulationInterrupted,
    SolverError,
    warn_user,
)
from mbs.liegroup.model import LieGroupModel
from mbs.liegroup.simulation import (
    LIE_GROUP_SOLVERS,
    is_lie_group_solver,
    lie_group_solver,
)
from mbs.model import Model
from mbs.run_checks import warn_after_run, warn_if_springs_are_too_stiff
from mbs.run_context import (
    interrupts_deferred,
    progress_bar,
    single_threaded_blas,
    subnormals_flushed,
)
from mbs.solution import Solution
from mbs.solvers import Solver, make_solver
from mbs.solvers.base import StepResult
from mbs.streaming import (
    StreamWriter,
    check_chunks,
    model_differences,
    model_digest,
    model_digest_parts,
    model_matches,
    read_last_state,
    read_solver_state,
    read_stream,
    run_rules,
    solver_options_digest,
)
from mbs.time_span import evaluation_span, last_node_time, node_times
from mbs.validation import as_scalar, is_integer

ON_FAILURE = ("raise", "refine")

#: A step whose |q|^2 + |p|^2 is not below this (NaN, inf, or a state beyond 1e75) ends
#: the run as diverged.
DIVERGED_SQUARED_NORM = 1e150

#: The growth of |(q, p)| over the first state held that a diverged run's message dates.
DIVERGENCE_GROWTH = 1e6


def simulate(model: Model | LieGroupModel, solver: str | Solver = "em", *, h: float, t_end: float,
             t_start: float = 0.0, project: bool = False, progress: bool | None = None,
             initial_state: tuple[np.ndarray, np.ndarray] | None = None,
             on_failure: str = "refine", max_refinements: int = 6,
             output: str | None = None, flush_every: int = 100, resume: str | None = None,
             **solver_options) -> Solution:
    """Integrate ``model`` from ``t_start`` to ``t_end`` with constant step ``h``.

    Parameters
    ----------
    model : Model or LieGroupModel
        From ``System.compile()``; with ``formulation="lie-group"`` the solver is "vrkmk"
        or "vcg" (:func:`mbs.liegroup.simulation.make_method` lists their options) and the
        run returns the Solution of the director model.
    solver : str or Solver
        A name of :data:`mbs.solvers.REGISTRY`: "em" (default), "ggl-vi-s", "ggl-vi-a",
        "ggl-vi-b", "rattle", "hbvm", "lobatto", "vi-conversion" (options such as
        ``stages=4`` or, for "em", "rattle" and "ggl-vi-a", ``order=4`` / ``6`` as
        ``**solver_options``),
        or an instance such as ``mbs.solvers.GGLVI(variant="A", theta=0.5)``. An instance
        holds the state of its run: it serves one run at a time (a second run of it started
        from another thread meanwhile is refused; runs may share the model).
    h : float
        Step size (> 0). The number of steps is round((t_end - t_start) / h), and the nodes
        are t_start + k h. When h does not divide the interval, the last node falls short of
        (or beyond) t_end, with a warning (h = 0.07 to t_end = 1 ends at 0.98). When it does
        up to rounding, the last node is t_end itself (not the rounded sum, e.g.
        0.30000000000000004 for 3 steps of 0.1), and laws of time are read at t_end there
        (see :mod:`mbs.time_span`; compositions' sub-steps read them up to 0.35 h beyond the
        run's ends).
    t_end : float
        End of the run (> ``t_start``).
    t_start : float
        Time of the initial state (default 0); time-dependent loads and drives are
        evaluated at absolute times t_start + k h.
    project : bool
        Project an inconsistent initial state (set on the bodies or given as
        ``initial_state``) onto the constraints (otherwise an error, or for
        ``initial_state`` a warning).
    progress : bool or None
        Progress bar (tqdm): True shows it, False hides it; None (default) shows it on an
        interactive terminal once the run has taken 3 s.
    initial_state : (q0, p0), optional
        Start from this state instead of the one set on the bodies. Non-finite entries are
        an error; a state that violates the constraints is projected with ``project``, and
        otherwise used as given with a warning (a node state of ggl-vi-a, which lies off the
        constraints by design, continues its run exactly).
    on_failure : {"refine", "raise"}
        What to do when Newton's method cannot solve a step (too large a step for the
        predictor, a near-singular configuration). "refine" (default) retries the step as
        2, 4, ... 2**max_refinements sub-steps of the same scheme, on the same output grid;
        the sub-steps are steps of the same scheme, so what the scheme conserves is still
        conserved. ``stats["refined_steps"]`` lists (step, depth) pairs, i.e. step k was
        done as 2**depth sub-steps (times the sub-steps per step after a restart). When no
        refinement of step k succeeds, the steps from k - 1, k - 2, k - 4, ... (not before
        the last flush of a stream) are redone, each and every later one as twice as many
        sub-steps as before; ``stats["restarts"]`` lists (failed step, first redone step,
        sub-steps per step) triples. "raise" raises :class:`mbs.SolverError` at once.
    max_refinements : int
        Deepest refinement (default 6: up to 64 sub-steps per step, also after restarts).
    output : str, optional
        Stream completed steps to this directory (or to ``name.npz``, packed at the end),
        flushing every ``flush_every`` steps; see :mod:`mbs.streaming`.
    flush_every : int
        Steps between flushes of a stream (default 100): a crash or interruption loses at
        most the steps since the last flush, and a resumed run starts after it.
    resume : str, optional
        Continue the stream at this path from its last flushed step (same model, solver and
        h) up to ``t_end``; further steps are appended to it.
    **solver_options
        Passed to the solver when ``solver`` is a name (e.g. ``theta=0.5``).

    Raises
    ------
    SolverError
        When a step fails; ``error.solution`` holds every step accepted before it.
    SimulationInterrupted
        On Ctrl-C; ``error.solution`` holds every completed step.
    """
    if isinstance(model, LieGroupModel) or is_lie_group_solver(solver):
        # the director model's states, stepped by the Lie-group scheme
        model, solver, initial_state = lie_group_solver(model, solver, initial_state,
                                                        **solver_options)
        solver_options = {}
    if not isinstance(model, Model):
        raise ModelError(f"simulate expects a compiled Model (system.compile()), got "
                         f"{type(model).__name__}")
    h = as_scalar(h, "h", "simulate", positive=True)
    t_end = as_scalar(t_end, "t_end", "simulate")
    t_start = as_scalar(t_start, "t_start", "simulate")
    if t_end <= t_start:
        raise ModelError(f"simulate: t_end = {t_end} must be greater than t_start = {t_start}")
    if project not in (True, False):  # "no" would read as True
        raise ModelTypeError(f"simulate: project must be True or False, got {project!r}")
    if on_failure not in ON_FAILURE:
        raise ModelError(f"simulate: on_failure must be one of {ON_FAILURE}, got "
                         f"{on_failure!r}")
    if not is_integer(max_refinements) or not 0 <= max_refinements <= 20:
        raise ModelError(f"simulate: max_refinements must be an integer in [0, 20], got "
                         f"{max_refinements!r}")
    if not is_integer(flush_every) or flush_every < 1:
        raise ModelError(f"simulate: flush_every must be a positive integer, got "
                         f"{flush_every!r}")
    max_refinements, flush_every = int(max_refinements), int(flush_every)  # numpy integers
    if output is not None and resume is not None:
        raise ModelError("simulate: give output= for a new stream or resume= for an existing "
                         "one, not both")
    if resume is not None and (initial_state is not None or project):
        raise ModelError("simulate: resume= continues the stream from its last flushed state; "
                         "leave out initial_state= and project= (or start a new run)")
    ratio = (t_end - t_start) / h
    streamed = output is not None or resume is not None
    # the states of every step (or of a flush window when streaming) are kept in memory:
    # refuse runs that cannot fit before allocating (or that overflow the step count)
    kept = min(ratio, flush_every) if streamed else ratio
    memory = kept * (2 * model.n + model.n + 2 * model.m + 4) * 8.0
    if not ratio < MAX_STEPS:
        raise ModelError(f"simulate: (t_end - t_start) / h = {ratio:.3g} steps, more than the "
                         f"{MAX_STEPS:.3g} a run takes; enlarge h, or split the run into runs "
                         f"continued from each other's last state (initial_state=)")
    if memory > MAX_MEMORY_BYTES:
        raise ModelError(f"simulate: (t_end - t_start) / h = {ratio:.3g} steps would need "
                         f"{memory / 2**30:.3g} GiB for the states; shorten the run, enlarge h, "
                         f"stream it (output=) with a smaller flush_every, or split it into "
                         f"runs continued from each other's last state (initial_state=)")
    steps = step_count(h, t_start, t_end, "simulate")
    if isinstance(solver, str) and solver.lower() not in solvers.REGISTRY:
        raise ModelError(f"simulate: unknown solver {solver!r}; choose one of "
                         f"{sorted(solvers.REGISTRY) + list(LIE_GROUP_SOLVERS)}")
    _refuse_misspelled_keywords(solver, solver_options)
    solver = make_solver(solver, **solver_options)
    with _claimed(solver):  # the instance holds its run's state
        # before the solver starts: starting may settle options left open (e.g. hbvm's iteration)
        options_digest = solver_options_digest(solver) if streamed else None
        warn_if_springs_are_too_stiff(model, h, solver.name)
        run = _Run(model, solver, h, t_start, steps, on_failure, max_refinements,
                   end=last_node_time(t_start, h, steps, t_end),
                   window=flush_every if streamed else None,
                   stream=str(output if output is not None else resume) if streamed else None)
        if resume is not None:
            _check_resume(read_last_state(resume)[3], model, solver, options_digest, h, t_start)
            check_chunks(resume)
            run.load(resume)
            writer = StreamWriter(resume, {}, run.q[0], run.p[0], resume=True)
        else:
            if initial_state is None:
                q0, p0 = model.initial_state(project=project, t=t_start)
            else:
                length = len(initial_state) if hasattr(initial_state, "__len__") else None
                if length != 2 or isinstance(initial_state, (dict, str)):
                    raise ModelError(f"simulate: initial_state must be a pair (q0, p0) of arrays "
                                     f"of shape ({model.n},), got a {type(initial_state).__name__}"
                                     + ("" if length is None else f" of {length} items"))
                q0, p0 = (model.checked_state(a, what, "simulate: initial_state", single=True)
                          .copy() for a, what in zip(initial_state, ("q0", "p0")))
                q0, p0 = _given_state(model, q0, p0, project, t_start)
            run.begin(q0, p0)
            writer = None if output is None else StreamWriter(
                output, {"solver": solver.name, "h": h, "t_start": t_start, "n": model.n,
                         "m": model.m, "solver_options": options_digest,
                         "model_digest": model_digest(model),
                         "model_parts": model_digest_parts(model),
                         "solver_properties": asdict(solver.properties),
                         **run_rules(solver)}, q0, p0)
        # overflow in the scheme's arithmetic is caught as a non-finite residual or state and
        # reported with its cause; numpy's own warnings about it would only repeat it
        with (single_threaded_blas(), subnormals_flushed(),
              np.errstate(over="ignore", invalid="ignore"), evaluation_span(t_start, run.end, h)):
            return run.execute(writer, flush_every, progress)


def step_count(h: float, t_start: float, t_end: float, caller: str) -> int:
    """round((t_end - t_start) / h): an error when that is no step, a warning when the steps
    do not end at t_end."""
    steps = int(round((t_end - t_start) / h))
    if steps < 1:
        raise ModelError(f"{caller}: h = {h} gives round((t_end - t_start) / h) = 0 steps on "
                         f"[{t_start}, {t_end}]; give h <= t_end - t_start = "
                         f"{t_end - t_start}")
    if abs(steps * h - (t_end - t_start)) > 1e-6 * h:  # a millionth of a step, in any units
        warn_user(f"{caller}: h = {h} does not divide the interval; {steps} "
                  f"step{'s' if steps > 1 else ''} end{'s' if steps == 1 else ''} at "
                  f"t = {t_start + steps * h}")
    return steps


def _given_state(model: Model, q0: np.ndarray, p0: np.ndarray, project: bool,
                 t_start: float) -> tuple[np.ndarray, np.ndarray]:
    """An ``initial_state`` checked: non-finite entries are an error; with ``project`` an
    inconsistent state is projected, without it the run starts from it with a warning (the
    node states of ggl-vi-a lie off the constraints by design, and a run continued from one
    must start there)."""
    if project:
        return model.consistent_state(q0, p0, True, t_start)
    try:
        return model.consistent_state(q0, p0, False, t_start)
    except InconsistentInitialStateError as exc:
        warn_user(f"simulate: the initial_state violates the constraints: max |g(q0)| = "
                  f"{exc.position_residual:.3e}, max |G M^-1 p0| = "
                  f"{exc.velocity_residual:.3e}; the run starts from it as given (pass "
                  f"project=True to project it onto the constraints)")
        return q0, p0


def _check_resume(manifest: dict, model: Model, solver: Solver, options: dict, h: float,
                  t_start: float):
    """Refuse to continue a stream with another scheme, step, model or scheme option
    (streams written before these were recorded are checked for what they hold)."""
    expected = {"solver": solver.name, "h": h, "t_start": t_start, "n": model.n, "m": model.m}
    for key, value in expected.items():
        if manifest.get(key) != value:
            raise ModelError(f"simulate(resume=...): the stream was written with {key} = "
                             f"{manifest.get(key)!r}, this call has {value!r}")
    stored = manifest.get("solver_options")
    if isinstance(stored, dict):
        changed = sorted(key for key in set(stored) | set(options)
                         if stored.get(key) != options.get(key))
        if changed:
            raise ModelError(f"simulate(resume=...): the stream was written by {solver.name} "
                             f"with other values of {', '.join(changed)}; resume with the "
                             f"options of the run that wrote it")
    if "model_digest" in manifest and not model_matches(model, manifest["model_digest"],
                                                        manifest.get("model_parts")):
        raise ModelError(f"simulate(resume=...): the model differs from the one the stream "
                         f"was written for ({model_differences(model, manifest.get('model_parts'))}"
                         f"); resume with the model of the run that wrote it")


@dataclass
class _Run:
    """State of one simulation: preallocated arrays filled step by step.

    Without a stream the arrays hold every step. With one (``stream`` its path) they hold a
    window of ``window`` steps after step ``base`` (the last flushed one): memory stays
    O(flush_every) however long the run, and :meth:`solution` reads the flushed steps back
    when they fit in :data:`MAX_READBACK_BYTES`.
    """

    model: Model
    solver: Solver
    h: float
    t_start: float
    steps: int
    on_failure: str
    max_refinements: int
    end: float  # the time of the last node (t_end when the steps reach it up to rounding)
    done: int = 0
    refined: list = field(default_factory=list)
    restarts: list = field(default_factory=list)
    #: solver steps per output step since the last restart (1 until a restart)
    substeps: int = 1
    window: int | None = None
    stream: str | None = None

    def __post_init__(self):
        n, m = self.model.n, self.model.m
        rows = self.steps if self.window is None else min(self.steps, self.window)
        self.base = 0  # the step held in row 0
        self.q = np.empty((rows + 1, n))
        self.p = np.empty((rows + 1, n))
        self.velocities = np.empty((rows, n))
        self.lam = np.empty((rows, m))
        self.gam = np.empty((rows, m))
        self.enforced = np.empty((rows, 2))
        self.work = np.zeros(rows)
        self.iterations = np.zeros(rows, dtype=int)
        self.started = time.perf_counter()
        self.resumed_at = None  # the step a resumed run starts from
        self.restart_stopped_at_base = False  # the last failed restart could go no further
        # a resumed run's refinements and restarts before it (known once the stream is read)
        self.earlier_events = {"refined_steps": [], "restarts": []}
        self.solver_state = (-1, None)  # (steps done, solver checkpoint) of a streamed run
        self.warned_refinement = False
        # angle drives can converge half a turn off (see Drive.branch_error)
        self.checks_branches = isinstance(self.model, Model) and self.model.has_branch_checks
        self.has_frames = (isinstance(self.model, Model)
                           and self.model.director_columns.size > 0)
        self.has_singular_potentials = (isinstance(self.model, Model) and bool(
            self.model.potential_singular_distances(self.model.q0)))

    def begin(self, q0: np.ndarray, p0: np.ndarray) -> None:
        self.q[0], self.p[0] = q0, p0
        self.solver.start(self.model, q0, p0, self.h)

    def load(self, path: str) -> None:
        """Continue the stream at ``path`` from its last flushed state."""
        done, q, p, manifest = read_last_state(path)
        if done > self.steps:
            raise ModelError(f"simulate(resume=...): the stream already holds {done} steps, "
                             f"up to t = {self.t_start + done * self.h:.6g}, more than the "
                             f"{self.steps} up to t_end = "
                             f"{self.t_start + self.steps * self.h:.6g}; give a later t_end")
        self.q[0], self.p[0] = q, p
        self.base = self.done = self.resumed_at = done
        self.solver.start(self.model, q, p, self.h)
        state = read_solver_state(path, manifest)
        self.substeps = int(state.pop(_SUBSTEPS_KEY, 1)) if state else 1
        if self.substeps > 1:
            self.solver.set_step_size(self.h / self.substeps)
        if state:
            try:
                self.solver.restore(state)
            except (KeyError, ValueError, TypeError, IndexError) as exc:
                raise ModelError(f"{path}: its checkpoint does not hold a {self.solver.name} "
                                 f"solver state ({type(exc).__name__}: {exc}); resume with "
                                 f"the solver and options that wrote it, or start a new "
                                 f"run") from exc

    def rotate(self) -> None:
        """After a flush: the window restarts at the last (now flushed) step."""
        if self.window is not None:
            row = self.done - self.base
            self.q[0], self.p[0] = self.q[row], self.p[row]
            self.base = self.done

    def _held(self, failing: bool = False) -> tuple[int, dict]:
        """(first step, arrays) of the steps available: the window alone, or with the
        flushed steps before it read back from the stream. When that read-back fails, a run
        that is ``failing`` hands over the window (with a warning: its own error comes
        first); a run that completed raises SimulationError carrying the window."""
        rows = self.done - self.base
        held = {"q": self.q[:rows + 1], "p": self.p[:rows + 1],
                "scheme_velocities": self.velocities[:rows], "multipliers": self.lam[:rows],
                "velocity_multipliers": self.gam[:rows], "enforced_residuals":
                self.enforced[:rows], "step_work": self.work[:rows],
                "newton_iterations": self.iterations[:rows]}
        if self.window is None:  # the run's own arrays: no other run or window reuses them
            return 0, held
        if self.base == 0:
            return 0, {name: array.copy() for name, array in held.items()}
        row_bytes = 8 * (3 * self.model.n + 2 * self.model.m + 4)
        if self.done * row_bytes > MAX_READBACK_BYTES:
            warn_user(f"simulate: the run's {self.done} steps are in the stream "
                      f"{self.stream}; the solution holds the last {rows} (reading all "
                      f"back would take {self.done * row_bytes / 2**30:.3g} GiB)")
            return self.base, {name: array.copy() for name, array in held.items()}
        try:
            disk = read_stream(self.stream)
            flushed = disk["q"].shape[0] - 1
            if flushed == self.done:  # the window too was flushed (at the end of the run)
                self._note_earlier_events(disk)
                return 0, disk
            if flushed != self.base:
                raise ModelError(f"{self.stream}: holds {flushed} steps, the run flushed "
                                 f"{self.base}; was it changed while the run wrote it?")
        except (MbsError, KeyboardInterrupt) as exc:
            # the stream is gone or damaged, or a second Ctrl-C stopped reading it (the
            # steps are on disk): keep what is in memory
            if isinstance(exc, KeyboardInterrupt) and not failing:
                raise
            window = {name: array.copy() for name, array in held.items()}
            reason = ("reading them was interrupted" if isinstance(exc, KeyboardInterrupt)
                      else str(exc))
            message = (f"the flushed steps cannot be read back ({reason}); the solution holds "
                       f"the last {rows} steps (from step {self.base})")
            if not failing:
                raise SimulationError(f"simulate: {message}", solution=self._build(
                    self.base, window), step=self.done,
                    time=self.t_start + self.done * self.h) from exc
            warn_user(f"simulate: {message}")
            return self.base, window
        out = {name: np.concatenate([disk[name], held[name][1:] if name in ("q", "p")
                                     else held[name]]) for name in held}
        self._note_earlier_events(disk)
        return 0, out

    def _note_earlier_events(self, disk: dict) -> None:
        """A resumed run's refinements and restarts before its resume point, from the
        stream it read back (its own lists hold those after it)."""
        if self.resumed_at is not None:
            self.earlier_events = {name: [tuple(int(v) for v in row) for row in disk[name]
                                          if row[0] < self.resumed_at]
                                   for name in ("refined_steps", "restarts")}

    def _partial(self) -> tuple[Solution, str]:
        """The steps done, for a failing run's error, and the words that say which they
        are (all of them, unless the stream they were flushed to cannot be read back)."""
        partial = self.solution(failing=True)
        first = partial.stats["first_step"]
        if first == 0:
            return partial, f"error.solution holds the {self.done} accepted steps"
        return partial, (f"error.solution holds the last {self.done - first} of the "
                         f"{self.done} accepted steps, from t = "
                         f"{self.t_start + first * self.h:.6g} (see the warning about the "
                         f"stream)")

    def solution(self, failing: bool = False) -> Solution:
        """The steps done as a Solution (see :meth:`_held` for ``failing``)."""
        return self._build(*self._held(failing))

    def _build(self, first: int, held: dict) -> Solution:
        count = self.done
        solution = Solution(
            model=self.model, t=node_times(self.t_start, self.h, first, count,
                                           self.end if count == self.steps else None),
            q=held["q"], p=held["p"], scheme_velocities=held["scheme_velocities"],
            multipliers=held["multipliers"], velocity_multipliers=held["velocity_multipliers"],
            enforced_residuals=held["enforced_residuals"], step_work=held["step_work"],
            stats={"solver": self.solver.name, "h": self.h, "steps": count,
                   "first_step": first,
                   "newton_iterations": held["newton_iterations"],
                   "wall_time": time.perf_counter() - self.started,
                   "completed": count == self.steps,
                   "refined_steps": self.earlier_events["refined_steps"] + list(self.refined),
                   "restarts": self.earlier_events["restarts"] + list(self.restarts),
                   "guess_retries": getattr(self.solver, "guess_retries", 0),
                   **run_rules(self.solver),
                   **({} if self.resumed_at is None else {"resumed_at": self.resumed_at})},
            solver_properties=self.solver.properties)
        self.solver.annotate(solution)
        return solution

    def execute(self, writer: StreamWriter | None, flush_every: int,
                progress: bool | None) -> Solution:
        bar = progress_bar(self.steps, self.solver.name, progress, self.done)
        batch = getattr(self.solver, "batch_capable", False)
        try:
            k = self.done
            while k < self.steps:
                if batch and self.substeps == 1:
                    # compiled backend: a block of steps per call (ending at the next flush
                    # of a stream); a step that fails in the kernel is redone below by
                    # step(), which raises or refines as usual
                    count = min(_BATCH_STEPS, self.steps - k)
                    if writer is not None:
                        count = min(count, flush_every - self.done % flush_every)
                        self._keep_solver_state()
                    done = self._run_block(k - self.base, count)
                    k += done
                    self.done = k
                    if writer is not None and done:
                        self._append(writer, k - done, k)
                        if self.done % flush_every == 0 and self.done < self.steps:
                            self._flush(writer)
                    if bar is not None:
                        bar.update(done)
                    if done == count:
                        continue
                restarts = len(self.restarts)
                if writer is not None:
                    self._keep_solver_state()
                self._store(k, self._advance(k))
                k += 1
                if writer is not None:
                    first = k - 1
                    if len(self.restarts) > restarts:  # steps since the flush were redone
                        first = self.restarts[-1][1]
                        writer.discard(k - 1 - first)
                    self._append(writer, first, k)
                    # the last window stays in memory (flushed below): the solution of a
                    # run too long to read back holds it
                    if self.done % flush_every == 0 and self.done < self.steps:
                        self._flush(writer)
                if bar is not None:
                    bar.update(1)
        # a failing run writes its unflushed steps first: reading the stream back for its
        # solution takes long on long runs, and a second Ctrl-C there must not lose them
        except KeyboardInterrupt:
            unwritten = self._flush_after_failure(writer)
            partial, holds = self._partial()
            raise SimulationInterrupted(
                f"simulation interrupted after {self.done} of {self.steps} steps; "
                f"{holds}{unwritten}", solution=partial) from None
        except MbsError as error:
            unwritten = self._flush_after_failure(writer)
            if unwritten:
                error.args = (f"{error.args[0] if error.args else error}{unwritten}",)
            if getattr(error, "solution", None) is None:
                error.solution = self.solution(failing=True)
            raise
        except Exception as exc:  # user code or I/O: keep what was computed
            unwritten = self._flush_after_failure(writer)
            partial, holds = self._partial()
            raise SimulationError(
                f"{self.solver.name}: the run stopped at step {self.done} (t = "
                f"{self.t_start + self.done * self.h:.6g}) by {type(exc).__name__}: {exc}; "
                f"{holds}{unwritten}", solution=partial, step=self.done,
                time=self.t_start + self.done * self.h,
                hint="see the exception's cause") from exc
        finally:
            if bar is not None:
                bar.close()
        if writer is not None:
            try:
                with interrupts_deferred():
                    writer.flush(self._checkpoint(), self._window_events())
                writer.finish(self.end)
            except KeyboardInterrupt:
                raise SimulationInterrupted(
                    f"simulation interrupted while its stream was packed, after all "
                    f"{self.done} steps were written; error.solution holds them (resume= "
                    f"packs the stream)", solution=self.solution(failing=True)) from None
            except Exception as exc:  # every step is done: hand them over with the error
                raise SimulationError(
                    f"the run completed but its stream could not be written "
                    f"({type(exc).__name__}: {exc}); error.solution holds every step",
                    solution=self.solution(failing=True), step=self.done,
                    time=self.t_start + self.done * self.h) from exc
        solution = self.solution()
        try:
            warn_after_run(solution, self.solver)
        except KeyboardInterrupt:
            raise SimulationInterrupted(
                f"simulation interrupted in its final check after all {self.done} steps; "
                f"error.solution holds them", solution=solution) from None
        except Exception as exc:  # a user potential failing where the scheme never went
            raise SimulationError(
                f"the run completed, but its energy could not be evaluated for the final "
                f"check ({type(exc).__name__}: {exc}); error.solution holds every step",
                solution=solution, step=self.done, time=self.t_start + self.done * self.h,
                hint="check the user potential at the states of the solution") from exc
        return solution

    def _flush(self, writer: StreamWriter) -> None:
        """Flush the window to the stream and start the next one, both or neither (Ctrl-C
        waits): an interrupt between them would write the window twice."""
        with interrupts_deferred():
            writer.flush(self._checkpoint(), self._window_events())
            self.rotate()

    def _window_events(self) -> dict:
        """The refinements and restarts of the steps since the last flush (restarts never
        reach before it), written with them."""
        return {"refined_steps": [r for r in self.refined if r[0] >= self.base],
                "restarts": [r for r in self.restarts if r[0] >= self.base]}

    def _flush_after_failure(self, writer: StreamWriter | None) -> str:
        """Write the steps not yet flushed to the stream (the window stays in memory, see
        :meth:`_held`); returns the words for the error's message when that fails (the
        steps stay in ``error.solution``), else ""."""
        if writer is None:
            return ""
        done, checkpoint = self.solver_state
        try:
            with interrupts_deferred():
                writer.flush(checkpoint if done == self.done else self._checkpoint(),
                             self._window_events())
        except Exception as exc:  # the disk, not the run, failed: report both
            return (f" (the last steps could not be written to the stream: "
                    f"{type(exc).__name__}: {exc})")
        return ""

    def _run_block(self, row: int, count: int) -> int:
        """Steps from row ``row`` of the arrays in the compiled kernel (at most ``count``);
        returns the steps done. A step that ended on a mirrored frame
        (:func:`~mbs.engine.guess.mirrored_frames`, which the kernel does not test) is not
        kept: the block is repeated up to it from the solver's state before, and the step
        is left to :meth:`_advance`."""
        arrays = (self.q, self.p, self.velocities, self.lam, self.gam, self.enforced,
                  self.iterations)
        before = self.solver.checkpoint() if self.has_frames else None
        done = self.solver.run_compiled(*arrays, row, count)
        if before is None:
            return done
        # mirrored_frames' test, vectorised over the block
        columns = self.model.director_columns
        motion = np.abs(self.q[row + 1:row + done + 1, columns]
                        - self.q[row:row + done, columns]).max(axis=1, initial=0.0)
        tested = row + np.flatnonzero((self.iterations[row:row + done] > FAR_ROOT_ITERATIONS)
                                      & (motion > MIRROR_MOTION))
        mirrored = tested[(self.model.frame_determinants(self.q[tested + 1]) < 0.0).any(axis=1)]
        if not mirrored.size:
            return done
        self.solver.restore(before)
        step = int(mirrored[0])
        return self.solver.run_compiled(*arrays, row, step - row) if step > row else 0

    def _keep_solver_state(self) -> None:
        """Keep the solver's checkpoint before the next step (or block of steps): a step
        that an exception or Ctrl-C stops may have changed the solver's state (a composition
        its sub-steps), and the checkpoint flushed with the steps done must be the one an
        uninterrupted run had after them, for a resumed run to repeat it bitwise."""
        self.solver_state = (self.done, self._checkpoint())

    def _append(self, writer: StreamWriter, first: int, last: int) -> None:
        """Buffer the stored steps first .. last - 1 in the stream (a restart redoes steps
        already buffered, never flushed ones: they are discarded and appended anew)."""
        for step in range(first, last):
            row = step - self.base
            writer.append(self.q[row + 1], self.p[row + 1], self.velocities[row],
                          self.lam[row], self.gam[row], self.enforced[row],
                          self.iterations[row], self.work[row])

    def _store(self, k: int, result: StepResult) -> None:
        # one dot product detects NaN/inf cheaply, and a state beyond 1e75, which no model
        # in any units reaches without diverging; below it, the check does not overflow and
        # the energies and momenta (products of two such values) of the steps kept stay finite
        if not result.q.dot(result.q) + result.p.dot(result.p) < DIVERGED_SQUARED_NORM:
            self._raise_diverged(k, result)
        row = k - self.base
        self.q[row + 1], self.p[row + 1] = result.q, result.p
        self.velocities[row], self.lam[row], self.gam[row] = (
            result.velocity, result.multiplier, result.velocity_multiplier)
        self.enforced[row] = result.enforced
        self.work[row] = result.work
        self.iterations[row] = result.iterations
        self.done = k + 1

    def _raise_diverged(self, k: int, result: StepResult) -> None:
        """Stop a run whose step k is not finite or beyond 1e75, naming the step where the
        state first grew a millionfold over the first state held in memory (a scheme past
        its stability limit grows by orders of magnitude per step long before it
        overflows)."""
        finite = np.isfinite(result.q).all() and np.isfinite(result.p).all()
        what = "values beyond 1e75 (the run diverged)" if finite else "non-finite values"
        time = self.t_start + k * self.h
        rows = self.done - self.base + 1
        sizes = np.hypot(np.linalg.norm(self.q[:rows], axis=1),
                         np.linalg.norm(self.p[:rows], axis=1))
        onset = ""
        partial, holds = self._partial()
        grown = np.flatnonzero(sizes > DIVERGENCE_GROWTH * sizes[0]) if sizes[0] > 0 else []
        if len(grown):
            first = self.base + int(grown[0])
            onset = (f"; the state had grown {DIVERGENCE_GROWTH:.0e}-fold from its size at "
                     f"t = {self.t_start + self.base * self.h:.6g} by t = "
                     f"{self.t_start + first * self.h:.6g} (step {first - 1})")
        raise SolverError(
            f"{self.solver.name}: step {k} (t = {time:.6g} -> {time + self.h:.6g}) produced "
            f"{what}{onset}; {holds}", solution=partial, step=k, time=time,
            hint="reduce the step size below the scheme's stability limit")

    def _checkpoint(self) -> dict:
        """The solver's checkpoint, with the sub-steps per step a resumed run must take."""
        state = self.solver.checkpoint()
        if self.substeps > 1:
            state[_SUBSTEPS_KEY] = np.array(self.substeps)
        return state

    def _advance(self, k: int) -> StepResult:
        q, p = self.q[k - self.base], self.p[k - self.base]
        try:
            try:
                return self._substeps(k, q, p, self.substeps)
            except NewtonConvergenceError as failure:
                refined = None
                if self.on_failure == "refine" and self.max_refinements > 0:
                    refined = self._refine(q, p, k) or self._restart(k)
                if refined is not None:
                    self._warn_if_refinement_is_pervasive(k)
                    return refined
                newton_failure = failure
        except ForceFunctionError as failure:  # in the step or in its refinement
            partial, holds = self._partial()
            # the user's exception stays the __cause__ of the error the run raises
            start = self.t_start + k * self.h
            raise ForceFunctionError(f"{failure} (step {k}, t = {start:.6g} -> "
                                     f"{start + self.h:.6g}); {holds}", solution=partial,
                                     step=k, time=start,
                                     hint=failure.hint or "fix the function") from (
                                         failure.__cause__ or failure)
        residual = ("" if "residual" in str(newton_failure)
                    else f" (residual {newton_failure.residual_norm:.3e})")
        tried = (f", also as {2**self.max_refinements} sub-steps"
                 if self.on_failure == "refine" and self.max_refinements > 0 else "")
        if tried and self.restart_stopped_at_base:
            tried += (f" and with the steps from {self.base} redone (steps before it are in "
                      f"the stream, flushed or resumed from, and are not redone: a run in "
                      f"memory may get past this step)")
        hint = newton_failure.hint
        kept = sum(red.count for red in getattr(self.model, "redundancies", ())
                   if not red.removed)
        growth = self.solver.unstable_growth() if self.model.m else None
        unstable = growth is not None and growth ** (k + 1) > UNSTABLE_GROWTH
        singular_at = None if kept or unstable else self._rank_loss_time(k)
        if kept:
            hint = (f"the model keeps {kept} redundant constraint equation"
                    f"{'s' if kept > 1 else ''} (System(redundant='keep')), which make the "
                    f"Newton matrices singular, so smaller steps need not help; compile with "
                    f"the default redundant='remove'")
        elif unstable:
            hint = self.solver.unstable_setting()
        elif singular_at is not None:
            hint = (f"the constraints lose rank near t = {singular_at:.6g}: the mechanism "
                    f"reaches a singular configuration there (a dead point, or a position a "
                    f"drive or load pushes it into but it cannot pass), where smaller steps "
                    f"do not help; check the geometry, drives and loads")
        else:
            hint = (self._force_jump(k) or self._huge_force(k, newton_failure)
                    or self._near_singularity(k) or hint)
        partial, holds = self._partial()
        raise SolverError(
            f"{self.solver.name}: step {k} (t = {self.t_start + k * self.h:.6g} -> "
            f"{self.t_start + (k + 1) * self.h:.6g}) failed{tried}: {newton_failure}"
            f"{residual}; hint: {hint}. {holds}",
            solution=partial, step=k, time=self.t_start + k * self.h,
            residual_norm=newton_failure.residual_norm, hint=hint) from newton_failure

    #: A run warns once when more than half of its last REFINEMENT_WINDOW steps, and at
    #: least a fifth of that many, had to be refined.
    REFINEMENT_WINDOW = 100

    def _warn_if_refinement_is_pervasive(self, k: int) -> None:
        """Warn, once, when refinement has become the rule rather than the exception: the
        step is beyond what the scheme can take on this model (a stiff spring past its
        stability limit), and the run goes on at a multiple of the cost."""
        window = self.REFINEMENT_WINDOW
        depths = [depth for step, depth in self.refined[-window:] if step > k - window]
        steps = min(k + 1, window)
        if self.warned_refinement or len(depths) < window // 5 or 2 * len(depths) <= steps:
            return
        self.warned_refinement = True
        typical = 2 ** int(np.median(depths))
        warn_user(
            f"simulate: {len(depths)} of the last {steps} steps of {self.solver.name} (up to "
            f"step {k}) needed sub-steps, typically {typical} per step: h = {self.h:g} is "
            f"beyond what the scheme takes on this model, the run goes on at a multiple of "
            f"the cost, and the states carry the errors of the steps before; reduce h",
            RuntimeWarning)

    def _rank_loss_time(self, k: int) -> float | None:
        """:func:`mbs.analysis.rank_loss_time` from the last three nodes before step k (None
        for large models, whose dense SVDs would cost more than the run)."""
        model = self.model
        if not model.m or model.n > MAX_BLOCK_COLUMNS:
            return None
        rows = np.arange(max(0, k - self.base - 2), k - self.base + 1)
        times = self.t_start + (self.base + rows) * self.h
        jacobians = []
        for row, t in zip(rows, times):
            jacobian = model.constraint_jacobian(self.q[row], t)
            jacobians.append(jacobian.toarray() if sp.issparse(jacobian) else
                             np.asarray(jacobian))
        return rank_loss_time(times, jacobians, 2.0 * self.h)

    def _force_jump(self, k: int) -> str | None:
        """Why no step size solves step k when an applied force is discontinuous: the force
        jumps on the path from node k along its linear extrapolation (two steps long, so that
        a curved path's crossing is on it too), or between nodes k - 1 and k (a motion that
        chatters across the switching surface), as a hint naming the element
        (:meth:`mbs.forces.applied.AppliedForces.jump_along`)."""
        model = self.model
        if not model.has_applied_forces:
            return None
        row = k - self.base
        state = (self.q[row], model.apply_inverse_mass(self.p[row]))
        paths = [(state, (state[0] + 2.0 * self.h * state[1], state[1]))]
        if row > 0:
            previous = (self.q[row - 1], model.apply_inverse_mass(self.p[row - 1]))
            paths = [(state, tuple(3.0 * a - 2.0 * b for a, b in zip(state, previous))),
                     (previous, state)]
        # at rest the extrapolation stands still: a law of the rates that jumps at rest (a
        # relay's sign(rate)) is crossed along a velocity the constraints allow instead
        at_rest = not np.abs(state[1]).max(initial=0.0) > AT_REST * model.length_scale / self.h
        across = self._velocities_across(row, self.t_start + k * self.h) if at_rest else None
        if across is not None:
            paths.append(((state[0], -across), (state[0], across)))
        found = None
        for start, end in paths:
            try:
                found = model.applied_forces.jump_along(self.t_start + (k + 0.5) * self.h,
                                                        start, end)
            except MbsError:  # the law fails next to the state: the failure says enough
                return None
            if found is not None:
                break
        else:
            return None
        name, jump, size = found
        return (f"the generalized force of {name!r} jumps by {jump:.3g} (its entries reach "
                f"{size:.3g} here) where the state crosses a switching surface of its law: "
                f"Newton's method cannot solve a step across a discontinuity at any step "
                f"size; make the law continuous (e.g. tanh(s / eps) for sign(s))")

    def _velocities_across(self, row: int, t: float) -> np.ndarray | None:
        """A velocity w the constraints allow at node ``row`` in a generic direction (every
        rate the constraints leave free nonzero), of the model's length per second: the
        path from -w to w crosses every switching surface of those rates at once. None for
        large models."""
        model = self.model
        if model.n > MAX_BLOCK_COLUMNS:
            return None
        jacobian = model.constraint_jacobian(self.q[row], t) if model.m else np.zeros((0, model.n))
        basis = null_space(jacobian.toarray() if sp.issparse(jacobian) else jacobian)
        if not basis.size:
            return None
        direction = basis @ np.random.default_rng(0).standard_normal(basis.shape[1])
        return model.length_scale * direction / np.abs(direction).max()

    def _huge_force(self, k: int, failure: NewtonConvergenceError) -> str | None:
        """Why step k's residual overflowed when an applied force is beyond any state a run
        can reach (:data:`DIVERGED_SQUARED_NORM`): a hint naming the element, or None."""
        if math.isfinite(failure.residual_norm) or not self.model.has_applied_forces:
            return None
        row = k - self.base
        t = self.t_start + (k + 0.5) * self.h
        try:
            name, size = self.model.applied_forces.largest(
                t, self.q[row], self.model.apply_inverse_mass(self.p[row]))
        except MbsError:  # the law fails next to the state: the failure says enough
            return None
        if not size * size >= DIVERGED_SQUARED_NORM:
            return None
        return (f"the generalized force of {name!r} is {size:.3g} at t = {t:.6g}: no step "
                f"size keeps a state driven that hard finite; check the law and its units")

    def _near_singularity(self, k: int) -> str | None:
        """Why step k failed when the state is within one step's travel of a potential's
        singular configurations (a body falling into a central gravity's centre): a hint
        naming the element, or None. Each element's distance is compared with how far its
        own point moves in a step (the explicit step ahead, and the step before)."""
        row = k - self.base
        q = self.q[row]
        ahead = q + self.h * self.model.apply_inverse_mass(self.p[row])
        steps = self.model.potential_singular_steps(q, ahead)
        if not steps:
            return None
        distances = [distance for _, distance in self.model.potential_singular_distances(q)]
        travels = [moved for _, _, moved in steps]
        if row > 0:
            before = self.model.potential_singular_steps(self.q[row - 1], q)
            travels = [max(moved, earlier) for moved, (_, _, earlier) in zip(travels, before)]
        near = [(distance, travel, name) for (name, _, _), distance, travel
                in zip(steps, distances, travels) if distance < travel]
        if not near:
            return None
        distance, travel, name = min(near)
        return (f"the state at t = {self.t_start + k * self.h:.6g} is {distance:.3g} from "
                f"where the potential {name!r} is singular (an attracting centre), less "
                f"than one step's travel of its point ({travel:.3g}): a body that reaches "
                f"it cannot be continued; if the motion only passes close, reduce the step "
                f"size there")

    def _substeps(self, k: int, q: np.ndarray, p: np.ndarray, count: int) -> StepResult:
        """Output step k as ``count`` steps of the solver, whose step size is h / count.

        The output step's multipliers are the sub-steps' mean (see
        :meth:`~mbs.solvers.base.StepResult.of_sub_steps`, as for a
        :class:`~mbs.solvers.composition.Composition`)."""
        if count == 1:
            return self._checked(self.solver.step(self.t_start + k * self.h, q, p), q,
                                 self.t_start + (k + 1) * self.h)
        h_sub, results = self.h / count, []
        for i in range(count):
            t = self.t_start + k * self.h + i * h_sub
            results.append(self._checked(self.solver.step(t, q, p), q, t + h_sub))
            q, p = results[-1].q, results[-1].p
        return StepResult.of_sub_steps(results, [1.0 / count] * count)

    def _checked(self, result: StepResult, q0: np.ndarray, t: float) -> StepResult:
        """``result`` of the step from ``q0`` to time t, unless a drive converged on the
        wrong solution of its equation or a frame on its mirror image: then the step failed
        like a Newton iteration that did not converge, and is refined."""
        if self.checks_branches:
            errors = self.model.constraint_branch_errors(result.q, t)
            if errors:
                raise NewtonConvergenceError(
                    "; ".join(errors), 0.0, 0.0, result.iterations,
                    "reduce the step size: the drive turns too far in one step")
        # the schemes of the director solvers test this before accepting a step; a scheme
        # of its own (stages, line integrals) is refined here
        mirrored = (mirrored_frames(self.model, q0, result.q, result.iterations)
                    if self.has_frames else None)
        if mirrored is not None:
            raise NewtonConvergenceError(mirrored, 0.0, 0.0, result.iterations,
                                         "reduce the step size")
        if self.has_singular_potentials:
            # a step that ends closer to a potential's singular configuration than it
            # travels may have jumped across it (a body falling through an attracting
            # centre): refined, and named when no sub-step avoids it (_near_singularity)
            for name, distance, travel in self.model.potential_singular_steps(q0, result.q):
                if distance < travel:
                    raise NewtonConvergenceError(
                        f"the step ended {distance:.3g} from where the potential {name!r} "
                        f"is singular, closer than its point travelled ({travel:.3g})", 0.0,
                        0.0, result.iterations, "reduce the step size")
        return result

    def _refine(self, q, p, k) -> StepResult | None:
        """Retry step k as 2**depth times the current sub-steps, depth = 1 ..
        max_refinements."""
        checkpoint = self.solver.checkpoint()
        h_step = self.h / self.substeps
        result = None
        try:
            for depth in range(1, self.max_refinements + 1):
                self.solver.restore(checkpoint)
                self.solver.set_step_size(h_step / 2**depth)
                try:
                    result = self._substeps(k, q, p, self.substeps * 2**depth)
                except NewtonConvergenceError:
                    continue
                self.refined.append((k, depth))
                break
        finally:
            self.solver.set_step_size(h_step)
            if result is None:
                # the step is not done: the solver goes back to its state before it (what
                # a flush of the failure checkpoints and a resume starts from)
                self.solver.restore(checkpoint)
        return result

    def _restart(self, k: int) -> StepResult | None:
        """Redo steps j .. k, j = k - 1, k - 2, k - 4, ... (not before the first step held
        in memory), with the solver started afresh at step j and twice the sub-steps per
        step, kept for the rest of the run. Returns step k's result, or None when every j
        fails or the sub-steps would exceed 2**max_refinements; the run (its steps and the
        solver's state) is then as before the attempt."""
        substeps, before = 2 * self.substeps, self.substeps
        if substeps > 2**self.max_refinements:
            return None
        checkpoint, refined, back = self.solver.checkpoint(), self.refined, 1
        while True:
            first = max(self.base, k - back)
            kept = self._rows(first, k)
            try:
                self.solver.start(self.model, self.q[first - self.base],
                                  self.p[first - self.base], self.h / substeps)
                self.substeps, self.refined = substeps, [r for r in refined if r[0] < first]
                for step in range(first, k):
                    row = step - self.base
                    self._store(step, self._substeps(step, self.q[row], self.p[row], substeps))
                row = k - self.base
                result = self._substeps(k, self.q[row], self.p[row], substeps)
            except BaseException as exc:
                # Newton failing or a non-finite step (SolverError from _store) ends this
                # attempt; anything else (Ctrl-C, a user function) ends the run
                failed = isinstance(exc, (NewtonConvergenceError, SolverError))
                self._put_rows(first, kept)
                self.done, self.refined, self.substeps = k, refined, before
                if failed and first > self.base:
                    back *= 2
                    continue
                # steps before the base (flushed or resumed from) might have cured it
                self.restart_stopped_at_base = failed and self.base > 0
                row = k - self.base
                self.solver.start(self.model, self.q[row], self.p[row], self.h / before)
                self.solver.restore(checkpoint)
                if failed:
                    return None
                raise
            self.restarts.append((k, first, substeps))
            return result

    def _rows(self, first: int, last: int) -> list:
        """Copies of what steps first .. last - 1 stored (see :meth:`_put_rows`)."""
        steps, states = slice(first - self.base, last - self.base), slice(
            first - self.base + 1, last - self.base + 1)
        return [(array, index, array[index].copy()) for array, index in (
            (self.q, states), (self.p, states), (self.velocities, steps), (self.lam, steps),
            (self.gam, steps), (self.enforced, steps), (self.work, steps),
            (self.iterations, steps))]

    @staticmethod
    def _put_rows(first: int, kept: list) -> None:
        for array, index, values in kept:
            array[index] = values


#: Stream checkpoint key of the sub-steps per output step after a restart.
_SUBSTEPS_KEY = "run_substeps"


#: Most steps one run may have, and most memory its in-memory states may take.
MAX_STEPS = 2**40
MAX_MEMORY_BYTES = 64 * 2**30
#: A streamed run's solution holds every step when they take at most this many bytes, else
#: the last flush window (the stream holds them all).
MAX_READBACK_BYTES = 2 * 2**30

#: A failing run blames an unstable setting of its scheme (:meth:`mbs.solvers.Solver.
#: unstable_growth`) when that amplified a constraint violation by more than this up to the
#: failed step; a smaller growth does not explain the failure, which has another cause.
UNSTABLE_GROWTH = 1e3


#: The ids of the Solver instances in a run, and the lock guarding the set.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


@contextmanager
def _claimed(solver: Solver) -> Iterator[None]:
    """Hold ``solver`` (and the schemes it is composed of) for one run: an instance keeps
    the state of its run, so two runs stepping one instance at once (threads given the same
    instance) would mix their states and return wrong trajectories without an error."""
    parts = [solver, *(value for value in vars(solver).values() if isinstance(value, Solver))]
    with _RUNNING_LOCK:
        if any(id(part) in _RUNNING for part in parts):
            raise ModelError(f"simulate: this {type(solver).__name__} instance is running in "
                             f"another simulate call (another thread); an instance holds the "
                             f"state of its run: give each concurrent run its own instance, "
                             f"or the solver's name and options")
        _RUNNING.update(id(part) for part in parts)
    try:
        yield
    finally:
        with _RUNNING_LOCK:
            _RUNNING.difference_update(id(part) for part in parts)


def _refuse_misspelled_keywords(solver, options: dict) -> None:
    """A keyword that no option of the named solver takes but that is close to one of
    :func:`simulate`'s own (``flush_evry``, ``tend``) is a misspelling of it, not an unknown
    solver option."""
    if not isinstance(solver, str) or solver.lower() not in solvers.REGISTRY:
        return
    accepted = solvers.option_names(solver.lower())
    own = [name for name in inspect.signature(simulate).parameters
           if name not in ("model", "solver", "solver_options")]
    for name in options:
        close = ([] if name in accepted
                 else difflib.get_close_matches(name, own, n=1, cutoff=0.7))
        if close:
            raise ModelError(f"simulate: unknown keyword {name!r}; did you mean {close[0]}=? "
                             f"(solver {solver!r} takes {', '.join(accepted)})")


#: Steps per call of a compiled solver's kernel (Ctrl-C is seen between calls).
_BATCH_STEPS = 256
#: A node whose velocities are below this fraction of the model's length per step is at
#: rest for the jump search of a failed step (:meth:`_Run._force_jump`).
AT_REST = 1e-12


