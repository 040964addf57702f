"""Running a :class:`~mbs.liegroup.model.LieGroupModel`: the scheme :func:`mbs.simulate` drives
for ``system.compile(formulation="lie-group")`` models.

The schemes are those of G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned
Lie group methods" (preprint, 2014): ``solver="vrkmk"`` (eq. (16), tableaux of Table 1) and
``solver="vcg"`` (eq. (18), the compositions of Table 2). :class:`LieGroupSolver` presents
such a method as a :class:`~mbs.solvers.base.Solver` on the director coordinates and momenta
of the same system, so that the one driver of :func:`mbs.simulate` runs it (refinement,
restarts, streaming and resume included) and returns the standard :class:`mbs.Solution` of
:attr:`LieGroupModel.director_model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mbs.engine.defects import extrapolation_coefficients
from mbs.engine.newton import NewtonConvergenceError
from mbs.errors import ModelError, SolverError
from mbs.liegroup.integrator import SolverSettings
from mbs.liegroup.model import LieGroupModel, LieGroupState
from mbs.liegroup.vcg import COMPOSITIONS, VCG
from mbs.liegroup.vrkmk import TABLEAUX, VRKMK
from mbs.model import Model
from mbs.solution import Solution
from mbs.solvers import REGISTRY
from mbs.solvers.base import SchemeProperties, Solver, StepResult, instance_or_key
from mbs.validation import check_option_types

#: Solver names of the Lie-group formulation.
LIE_GROUP_SOLVERS = ("vrkmk", "vcg")
#: Options of each solver name (besides the stage-equation solver's tol, max_iterations,
#: iteration).
METHOD_OPTIONS = {"vrkmk": ("tableau", "truncation"), "vcg": ("composition", "form")}
SETTINGS_OPTIONS = ("tol", "max_iterations", "iteration")




def is_lie_group_solver(solver) -> bool:
    """Whether ``solver`` names or is a Lie-group scheme (VRKMK, VCG)."""
    if isinstance(solver, VRKMK | VCG):
        return True
    return isinstance(solver, str) and solver.lower() in LIE_GROUP_SOLVERS


def make_method(solver: str | VRKMK | VCG = "vrkmk", **options) -> VRKMK | VCG:
    """A VRKMK or VCG method from a name and options, or an instance (returned unchanged).

    Parameters
    ----------
    solver : {"vrkmk", "vcg"} or VRKMK or VCG
    tableau : {"gauss-1", "gauss-2", "gauss-3", "kutta"}
        VRKMK tableau (paper, Table 1), default "gauss-2" (order 4).
    truncation : int, optional
        VRKMK's dexp^{-1} truncation r; default max(order - 2, 0), the smallest value keeping
        the tableau's order (Thm. 5.3).
    composition : {"midpoint", "triple-jump", "yoshida-6"}
        VCG composition (Table 2), default "triple-jump" (order 4).
    form : {"composition", "tableau"}
        VCG: one midpoint solve per sub-step (default) or one solve of the composed tableau.
    tol, max_iterations, iteration
        Stage-equation solver (:class:`mbs.liegroup.SolverSettings`; ``iteration`` is its
        ``method``, "newton" or "fixed-point").
    """
    key = instance_or_key(solver, VRKMK | VCG, options,
                          "a Lie-group model needs solver 'vrkmk' or 'vcg' (or a "
                          "mbs.liegroup.VRKMK / VCG instance)")
    if isinstance(key, VRKMK | VCG):
        return key
    if key in REGISTRY:
        raise ModelError(f"solver {solver!r} integrates the director formulation; this model "
                         f"was compiled with formulation='lie-group', whose solvers are "
                         f"'vrkmk' and 'vcg'. Use one of them, or compile with "
                         f"system.compile() (formulation='director') for {solver!r}")
    if key not in LIE_GROUP_SOLVERS:
        raise ModelError(f"unknown solver {solver!r} for a Lie-group model; choose 'vrkmk' "
                         f"or 'vcg'")
    allowed = METHOD_OPTIONS[key] + SETTINGS_OPTIONS
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ModelError(f"solver {solver!r}: unknown options {unknown}; it accepts "
                         f"{', '.join(allowed)}")
    settings = {name: options.pop(name) for name in SETTINGS_OPTIONS if name in options}
    if "iteration" in settings:
        if settings["iteration"] not in ("newton", "fixed-point"):  # named as the user wrote
            raise ModelError(f"solver {solver!r}: iteration must be 'newton' or "
                             f"'fixed-point', got {settings['iteration']!r}")
        settings["method"] = settings.pop("iteration")
    check_option_types(SolverSettings, settings, f"solver {solver!r}")
    try:
        solver_settings = SolverSettings(**settings)
        if key == "vrkmk":
            tableau = options.get("tableau", "gauss-2")
            if isinstance(tableau, str) and tableau not in TABLEAUX:
                raise ValueError(f"unknown tableau {tableau!r}; choose from {sorted(TABLEAUX)}")
            return VRKMK(tableau, options.get("truncation"), solver_settings)
        composition = options.get("composition", "triple-jump")
        if composition not in COMPOSITIONS:
            raise ValueError(f"unknown composition {composition!r}; choose from "
                             f"{sorted(COMPOSITIONS)}")
        return VCG(composition, options.get("form", "composition"), solver_settings)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"solver {solver!r}: {exc}") from exc


def scheme_properties(method: VRKMK | VCG) -> SchemeProperties:
    """What the scheme promises, in the fields of the director solvers' table."""
    reference = ("Bogfjellmo, Marthinsen (2014), eq. (16)" if isinstance(method, VRKMK)
                 else "Bogfjellmo, Marthinsen (2014), eq. (18), Table 2")
    return SchemeProperties(
        name=method.name, order_q=str(method.order), order_p=str(method.order),
        symplectic=True, energy="bounded, no drift (symplectic)",
        momentum="exact for symmetries of the potential (discrete Noether)",
        constraints_at_step_end="none: states on SO(3) x R^3 (reported: max |R^T R - I|)",
        multiplier_times="none (no multipliers)", reference=reference,
        nodes_meet_constraints=False)


def lie_group_solver(model, solver: str | VRKMK | VCG = "vrkmk", initial_state=None,
                     **options) -> tuple[Model, LieGroupSolver, Any]:
    """What :func:`mbs.simulate` runs for a Lie-group model: (the director model, the
    :class:`LieGroupSolver` of ``solver`` and ``options``, ``initial_state`` as director
    arrays or None).

    Parameters
    ----------
    model : LieGroupModel
    solver : {"vrkmk", "vcg"} or VRKMK or VCG
        With options ``tableau``, ``truncation`` (VRKMK), ``composition``, ``form`` (VCG),
        ``tol``, ``max_iterations``, ``iteration`` (see :func:`make_method`).
    initial_state : (q0, p0) or LieGroupState, optional
        Director coordinates and momenta, or a Lie-group state; None for the state set on
        the bodies.

    Raises
    ------
    ModelError
        A director model with a Lie-group solver, a director solver, unknown options.
    """
    if not isinstance(model, LieGroupModel):
        name = solver if isinstance(solver, str) else type(solver).__name__
        raise ModelError(f"solver {name!r} integrates the Lie-group formulation: compile the "
                         f"system with system.compile(formulation='lie-group'), or use a "
                         f"director solver (em, ggl-vi-*, rattle, lobatto, hbvm) on this "
                         f"director model")
    method = make_method(solver, **options)
    if isinstance(initial_state, LieGroupState):
        initial_state = model.to_director(*model.pack(initial_state))
    return model.director_model, LieGroupSolver(method=method, lie_model=model), initial_state


@dataclass
class LieGroupSolver(Solver):
    """A VRKMK or VCG method as a :class:`~mbs.solvers.base.Solver` on director states.

    Each step converts the director state it is given to the Lie-group state (rotation,
    position, momentum), unless it is the state the previous step returned, whose exact
    Lie-group state is kept (a run's own steps are the method's steps on SO(3) x R^3, with no
    round trip through director coordinates). The result is converted to director
    coordinates and momenta. The scheme has no velocity unknowns and no multipliers (NaN in
    the Solution); its enforced residual is max |R^T R - I|.

    Parameters
    ----------
    method : VRKMK or VCG
    lie_model : LieGroupModel
    """

    method: Any = None
    lie_model: LieGroupModel | None = None
    _cache: tuple | None = field(default=None, init=False, repr=False)
    drive_effort = "none"  # no multipliers: no reactions or drive efforts from them

    def __post_init__(self):
        super().__post_init__()
        self.properties = scheme_properties(self.method)

    @property
    def batch_capable(self) -> bool:
        return False

    def start(self, model: Model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        self.model, self.h, self.guess_retries = model, h, 0
        self._history: list = []
        self._cache = None
        n, m = model.n, model.m
        self._no_velocity, self._no_multiplier = np.full(n, np.nan), np.full(m, np.nan)

    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        lie = self.lie_model
        cache = self._cache
        if cache is not None and np.array_equal(cache[0], q) and np.array_equal(cache[1], p):
            group_q, group_mu = cache[2], cache[3]
        else:
            group_q, group_mu = lie.from_director(q, p)
        try:
            result = self.method.step(lie, group_q, group_mu, self.h,
                                      _extrapolate(self._history))
        except SolverError as failure:
            raise NewtonConvergenceError(str(failure), failure.residual_norm or np.inf,
                                         np.inf, 0, "reduce the step size") from failure
        self._history = [result.guess, *self._history[:2]]
        q1, p1 = lie.to_director(result.q, result.mu)
        self._cache = (q1, p1, result.q, result.mu)
        defect = float(lie.orthogonality_defect(result.q))
        return StepResult(q1.copy(), p1.copy(), self._no_velocity, self._no_multiplier,
                          self._no_multiplier, result.iterations, (defect, 0.0))

    def set_step_size(self, h: float) -> None:
        if h != self.h:
            self._history = []  # the stage unknowns scale with h
        self.h = h

    def checkpoint(self) -> dict:
        state = {"history_count": np.array(len(self._history))}
        for i, guess in enumerate(self._history):
            parts = guess if isinstance(guess, list) else [guess]
            state[f"history_{i}_parts"] = np.array(len(parts) if isinstance(guess, list)
                                                   else -1)
            for j, part in enumerate(parts):
                state[f"history_{i}_{j}"] = np.asarray(part).copy()
        if self._cache is not None:
            for key, value in zip(("director_q", "director_p", "group_q", "group_mu"),
                                  self._cache):
                state[key] = value.copy()
        return state

    def restore(self, state: dict) -> None:
        history = []
        for i in range(int(state.get("history_count", 0))):
            parts = int(state[f"history_{i}_parts"])
            if parts < 0:
                history.append(np.asarray(state[f"history_{i}_0"], dtype=float).copy())
            else:
                history.append([np.asarray(state[f"history_{i}_{j}"], dtype=float).copy()
                                for j in range(parts)])
        self._history = history
        self._cache = (tuple(np.asarray(state[key], dtype=float).copy() for key in
                             ("director_q", "director_p", "group_q", "group_mu"))
                       if "group_q" in state else None)

    def annotate(self, solution: Solution) -> None:
        """``stats["formulation"] = "lie-group"`` and the Lie-group states of the run as
        ``solution.lie_group_state`` (:class:`LieGroupState` with a leading time axis)."""
        solution.stats["formulation"] = "lie-group"
        solution.lie_group_state = self.lie_model.unpack(
            *self.lie_model.from_director(solution.q, solution.p))


def _extrapolate(history: list):
    """Newton's starting point for the next step from the converged stage unknowns of the last
    steps (newest first): the quadratic through the last three, else the last one.

    The unknowns are smooth functions of the state, so the quadratic's error is O(h^3) against
    O(h) for the last step's values, which saves Newton iterations even at fast spins.
    Compositions (VCG) keep a list of unknowns per sub-step, extrapolated one by one.
    """
    if not history:
        return None
    if len(history) < 3:
        return history[0]

    def quadratic(*values):
        return sum(c * value for c, value in zip(QUADRATIC, values))

    if isinstance(history[0], list):
        return [quadratic(*values) for values in zip(*history)]
    return quadratic(*history)


#: Weights of the quadratic through three equally spaced values, newest first: (3, -3, 1).
QUADRATIC = extrapolation_coefficients(3)


__all__ = ["LIE_GROUP_SOLVERS", "LieGroupSolver", "is_lie_group_solver", "lie_group_solver",
           "make_method", "scheme_properties"]
