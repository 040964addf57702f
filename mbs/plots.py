"""Matplotlib plots of solutions: energy, momentum, constraints, and convergence studies.

Every function returns a :class:`matplotlib.figure.Figure` (created without pyplot, so no GUI
backend or global figure registry is involved; notebooks display it, ``path=`` saves it as
PNG, PDF or SVG by suffix). Functions taking a solution also accept a list of solutions
(e.g. one per solver) and overlay them.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mbs.errors import MbsError, ModelError, ModelTypeError, warn_user
from mbs.liegroup.model import LieGroupModel, LieGroupState
from mbs.liegroup.simulation import LIE_GROUP_SOLVERS, is_lie_group_solver, lie_group_solver
from mbs.model import Model
from mbs.safe_files import check_writable
from mbs.solution import reference_point
from mbs.solvers import REGISTRY
from mbs.streaming import model_differences, model_digest, model_digest_parts

#: Exact zeros are drawn at this value on logarithmic axes.
LOG_FLOOR = 1e-18


def _figure(rows: int = 1, height: float = 3.2, width: float = 7.0):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("mbs.plots needs matplotlib: pip install 'mbs[viz]'") from exc
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, list(axes)


def _figure_path(path) -> Path | None:
    """``path`` as a Path of a figure type matplotlib writes here (None stays None)."""
    if path is None:
        return None
    path = Path(path)
    if path.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ModelError(f"cannot save a figure as {str(path)!r}: use .png, .pdf or .svg")
    check_writable(path, "the figure")
    return path


def _save(fig, path) -> None:
    path = _figure_path(path)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)


def _as_list(solutions) -> list:
    if isinstance(solutions, (list, tuple)):
        if not solutions:
            raise ModelError("no solutions to plot")
        return list(solutions)
    return [solutions]


def _label(solution, labels, i) -> str:
    if labels is not None:
        if isinstance(labels, str) or i >= len(labels):
            raise ModelError(f"labels: give one label per solution, in a list (got "
                             f"{labels!r} for solution {i + 1})")
        return labels[i]
    stats = getattr(solution, "stats", {}) or {}
    return f"{stats.get('solver', '?')}, h = {stats.get('h', '?')}"


def energy_scale(solution) -> float:
    """max(|E0|, max T, max |W|): the scale of the plotted relative energy errors (W the
    work of loads, dampers, motors and drives). ``conservation_summary`` divides by |E0|
    alone unless it is below half the largest kinetic energy, so its relative error can be
    the larger of the two."""
    energy = solution.energy()
    return max(abs(float(energy[0])), float(np.max(np.abs(solution.kinetic_energy()))),
               float(np.max(np.abs(solution.work))), 1e-300)


def plot_energy(solutions, path=None, *, components: bool = False, labels=None,
                title: str | None = None):
    """Relative energy error (E(t) - E0 - W(t)) / max(|E0|, max T, max |W|) over time, W the
    work of loads, dampers, motors and drives (zero for conservative models).

    ``components=True`` adds a panel with the kinetic, potential and total energy (and the
    work, when forces do work) of every solution.
    """
    solutions = _as_list(solutions)
    fig, axes = _figure(2 if components else 1)
    ax = axes[0]
    for i, sol in enumerate(solutions):
        ax.plot(sol.t, sol.energy_balance() / energy_scale(sol), label=_label(sol, labels, i))
    ax.set_ylabel(r"$(E - E_0 - W)\,/\,\max(|E_0|, \max T, \max |W|)$")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3), useMathText=True)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title or "energy error")
    if components:
        for i, sol in enumerate(solutions):
            prefix = f"{_label(sol, labels, i)}: " if len(solutions) > 1 else ""
            total = {"color": "k"} if len(solutions) == 1 else {}
            kinetic, potential = sol.kinetic_energy(), sol.potential_energy()
            axes[1].plot(sol.t, kinetic, label=f"{prefix}kinetic T")
            axes[1].plot(sol.t, potential, label=f"{prefix}potential V")
            line = axes[1].plot(sol.t, kinetic + potential, label=f"{prefix}total E",
                                **total)[0]
            if getattr(sol.model, "non_conservative", False):
                axes[1].plot(sol.t, kinetic[0] + potential[0] + sol.work, "--",
                             color=line.get_color(), label=f"{prefix}E0 + work W")
        axes[1].set_ylabel("energy [J]")
        axes[1].legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("t [s]")
    _save(fig, path)
    return fig


def _vector_text(vector: np.ndarray) -> str:
    return "(" + ", ".join(f"{v:.3g}" for v in vector + 0.0) + ")"


def _directions_text(directions: np.ndarray) -> str:
    if len(directions) == 3:
        return "all components"
    if len(directions) == 1:
        axis = np.where(np.abs(directions[0]) < 1e-12, 0.0, directions[0])
        axis *= np.sign(axis[np.argmax(np.abs(axis))])  # a basis vector's sign is arbitrary
        return "along " + _vector_text(axis)
    return f"{len(directions)} directions"


def _momentum_panel(ax, t, values: np.ndarray, directions: np.ndarray | None, label: str,
                    symbol: str, name: str) -> str:
    """The error of the conserved part of ``values`` (its projection on ``directions``)
    relative to max |values|, or the components when the model conserves none or when that
    is not known (``directions`` None). Returns the verdict written in the title."""
    if directions is None or not len(directions):
        for c, axis in enumerate("xyz"):
            ax.plot(t, values[:, c], label=f"{label}: {symbol}{axis}")
        verdict = ("not conserved by this model" if directions is not None
                   else "not checked: loaded without its model")
        ax.set_ylabel(f"${symbol}$ components")
    else:
        scale = max(float(np.max(np.linalg.norm(values, axis=1))), 1e-300)
        drift = np.linalg.norm((values - values[0]) @ directions.T, axis=1)
        ax.plot(t, drift / scale, label=label)
        verdict = f"conserved: {_directions_text(directions)}"
        ax.set_ylabel(f"$|P({symbol} - {symbol}_0)| / \\max|{symbol}|$")
    ax.set_title(f"{name} ({verdict})", fontsize="medium")
    return verdict


def plot_momentum(solutions, path=None, *, about=None, labels=None,
                  title: str | None = None):
    """Errors of the conserved components of the angular and the linear momentum over time.

    Each panel shows |P (J - J0)| / max |J|, P the projection on the directions the model
    conserves (:meth:`mbs.Solution.conserved_directions`: the vertical component under
    uniform gravity, all three for a free system, ...); a momentum the model does not
    conserve at all is drawn as its components. The angular momentum is taken about
    ``about``, by default about the point the conservation summary uses
    (:meth:`mbs.Solution.momentum_reference_point`, e.g. the pivot of a top), where the most
    components are conserved.
    """
    solutions = _as_list(solutions)
    fig, axes = _figure(2)
    verdicts: list[set[str]] = [set(), set()]
    for i, sol in enumerate(solutions):
        label = _label(sol, labels, i)
        point = (sol.momentum_reference_point() if about is None
                 else reference_point(about, "plot_momentum"))
        linear_directions, angular_directions = sol.conserved_directions(point)
        names = ("angular momentum about " + _vector_text(point), "linear momentum")
        verdicts[0].add(_momentum_panel(axes[0], sol.t, sol.angular_momentum(point),
                                        angular_directions, label, "J", names[0]))
        verdicts[1].add(_momentum_panel(axes[1], sol.t, sol.linear_momentum(),
                                        linear_directions, label, "L", names[1]))
    for ax, seen, name in zip(axes, verdicts, names):
        if len(seen) > 1:  # a scheme's run found a direction broken that another's did not
            ax.set_title(f"{name} (conserved directions differ between the runs: see each "
                         f"run's conservation_summary())", fontsize="medium")
    for ax in axes:
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3), useMathText=True)
        ax.legend(loc="best", fontsize="small")
    drawn_whole = any(not verdict.startswith("conserved") for seen in verdicts
                      for verdict in seen)
    fig.suptitle(title or ("momentum: errors of the conserved components, the others as they "
                           "are" if drawn_whole else "momentum error"))
    axes[-1].set_xlabel("t [s]")
    _save(fig, path)
    return fig


def plot_constraints(solutions, path=None, *, labels=None, title: str | None = None):
    """Constraint residuals on a log scale, one panel per solution.

    Drawn: max |g(q_n)| and max |G(q_n) M^-1 p_n| at the nodes, and (dashed) the residuals
    the scheme itself enforces in each step, labelled with the scheme's
    ``solver_properties.constraints_at_step_end``. Exact zeros are drawn at LOG_FLOOR.
    """
    solutions = _as_list(solutions)
    fig, axes = _figure(len(solutions), height=3.0)
    for i, (sol, ax) in enumerate(zip(solutions, axes)):
        res = sol.constraint_residuals()
        props = getattr(sol, "solver_properties", None)
        enforced = getattr(props, "constraints_at_step_end", "unknown")
        ax.semilogy(sol.t, np.maximum(res["position"], LOG_FLOOR),
                    label=r"$\max|g(q_n)|$ at the nodes")
        ax.semilogy(sol.t, np.maximum(res["velocity"], LOG_FLOOR),
                    label=r"$\max|G(q_n) M^{-1} p_n|$ at the nodes")
        steps_t = sol.t[1:]
        # a scheme that enforces none (Lie-group methods) reports another residual instead
        enforces = not str(enforced).startswith("none")
        if len(res["enforced_position"]):
            ax.semilogy(steps_t, np.maximum(res["enforced_position"], LOG_FLOOR), "--",
                        label="position residual the scheme enforces" if enforces
                        else "residual the scheme reports")
            if enforces or np.any(res["enforced_velocity"]):
                ax.semilogy(steps_t, np.maximum(res["enforced_velocity"], LOG_FLOOR), ":",
                            label="velocity residual the scheme enforces")
        ax.set_ylabel("residual (max norm)")
        ax.set_title(textwrap.fill(f"{_label(sol, labels, i)} - enforced at step ends: "
                                   f"{enforced}", 90), fontsize="medium")
        ax.legend(loc="best", fontsize="x-small")
    if title:
        fig.suptitle(title)
    axes[-1].set_xlabel("t [s]")
    _save(fig, path)
    return fig


# -- convergence study -------------------------------------------------------------------------
@dataclass
class ConvergenceStudy:
    """Errors at ``t_end`` of each solver at each step size, against a reference.

    errors_q[solver], errors_p[solver] : (len(steps),) relative max-norm errors
    |q_N - q_ref| / |q_ref| and |p_N - p_ref| / |p_ref| (NaN where a run failed);
    slopes_q[solver], slopes_p[solver] : least-squares slopes of log error vs log h.
    """

    solvers: list[str]
    steps: np.ndarray
    t_end: float
    reference: str
    errors_q: dict[str, np.ndarray] = field(default_factory=dict)
    errors_p: dict[str, np.ndarray] = field(default_factory=dict)
    slopes_q: dict[str, float] = field(default_factory=dict)
    slopes_p: dict[str, float] = field(default_factory=dict)
    failures: dict[tuple[str, float], str] = field(default_factory=dict)
    figure: object = None

    @property
    def table(self) -> str:
        """The error / observed-order table as text."""
        width = max(10, *(len(solver) for solver in self.solvers))
        lines = [f"convergence at t = {self.t_end:g} against {self.reference} (max-norm "
                 f"errors relative to max |q_ref| and max |p_ref|)",
                 f"{'solver':<{width}} {'h':>12} {'rel. err q':>11} {'rate q':>7} "
                 f"{'rel. err p':>11} {'rate p':>7}"]
        for solver in self.solvers:
            eq, ep = self.errors_q[solver], self.errors_p[solver]
            for k, h in enumerate(self.steps):
                rates = []
                for e in (eq, ep):
                    pair = e[max(k - 1, 0):k + 1]
                    if k == 0 or not np.all(np.isfinite(pair) & (pair > 0)):
                        rates.append("")
                    else:
                        rate = np.log(e[k - 1] / e[k]) / np.log(self.steps[k - 1] / h)
                        rates.append(f"{rate:.2f}")
                lines.append(f"{solver:<{width}} {h:>12.4g} {eq[k]:>11.3e} {rates[0]:>7} "
                             f"{ep[k]:>11.3e} {rates[1]:>7}")
            lines.append(f"{solver:<{width}} {'fitted slope':>12} {'':>11} "
                         f"{self.slopes_q[solver]:>7.2f} {'':>11} {self.slopes_p[solver]:>7.2f}")
        for (solver, h), message in self.failures.items():
            lines.append(f"failed: {solver} h = {h:g}: {message}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table


def _model_of(build_or_model) -> Model | LieGroupModel:
    from mbs.system import System

    value = build_or_model() if callable(build_or_model) and not isinstance(
        build_or_model, (Model, LieGroupModel, System)) else build_or_model
    if isinstance(value, System):
        value = value.compile()
    if not isinstance(value, (Model, LieGroupModel)):
        raise ModelError(f"convergence_study needs a Model, a LieGroupModel, a System, or a "
                         f"function returning one; got {type(value).__name__}")
    return value


def fitted_slope(steps: np.ndarray, errors: np.ndarray) -> float:
    """Least-squares slope of log(error) against log(h) over the finite positive errors."""
    mask = np.isfinite(errors) & (errors > 0.0)
    if mask.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(steps[mask]), np.log(errors[mask]), 1)[0])


#: Keywords of :func:`mbs.simulate` that :func:`convergence_study` also gives the reference run:
#: they define the initial-value problem (start, initial state) or how a run handles failures
#: and progress, so the reference must solve the same problem. Solver options and stream
#: paths belong to the studied runs only.
_SHARED_RUN_OPTIONS = ("t_start", "initial_state", "project", "on_failure", "max_refinements",
                       "progress")


def _studied_solver(entry) -> tuple[str, tuple[object, dict]]:
    """(label, (solver, its own options)) of an entry of ``convergence_study(solvers=...)``:
    a name, a (name, options) pair or a Solver instance."""
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], dict):
        name, options = entry
        if not isinstance(name, str):
            raise ModelTypeError(f"convergence_study: a solver with options is a (name, dict) "
                                 f"pair, got {entry!r:.80}")
        described = ", ".join(f"{key}={value!r}" for key, value in options.items())
        return (f"{name} ({described})" if described else name), (name, dict(options))
    if isinstance(entry, str):
        return entry, (entry, {})
    name = getattr(entry, "name", None)
    if not isinstance(name, str):
        raise ModelTypeError(f"convergence_study: solvers holds names, (name, options) pairs "
                             f"or Solver instances, got {entry!r:.80}")
    return name, (entry, {})


def _solver_options(simulate_options: dict) -> dict:
    """The solver options among ``simulate_options``: the keywords that are not parameters of
    :func:`mbs.simulate` itself, which it passes on to the solver."""
    from mbs.simulate import simulate

    run_parameters = inspect.signature(simulate).parameters
    return {key: value for key, value in simulate_options.items()
            if key not in run_parameters}


def _check_studied_solver(model: Model | LieGroupModel, scheme, options: dict) -> None:
    """Refuse a studied solver that :func:`mbs.simulate` would refuse for ``model``, before
    any run (a run's ModelError would otherwise be recorded as a failure of that run only).

    Lie-group schemes and models are checked by the function simulate dispatches them to,
    with the solver options the runs get; director solvers by name only (simulate checks
    their options in each run, and a run refused for them is recorded as failed).
    """
    if isinstance(model, LieGroupModel) or is_lie_group_solver(scheme):
        lie_group_solver(model, scheme, **options)
    elif isinstance(scheme, str) and scheme.lower() not in REGISTRY:
        raise ModelError(f"convergence_study: unknown solver {scheme!r}; choose from "
                         f"{sorted(REGISTRY) + list(LIE_GROUP_SOLVERS)}")


#: Allowed difference between the start (time and state) of a given reference solution and
#: that of the studied runs, in units of the round-off of the largest entry (eps times it). A
#: reference made from the same model and initial state by the same code starts from equal
#: arrays, but one made from another build of the model, or read from a file written on
#: another machine, may differ by the round-off of computing the state from the bodies'
#: states (a few operations per entry, a projection's Newton updates): a few units. Any change
#: of the problem itself (another speed, position or start time) is orders of magnitude
#: larger, and 64 units (1.4e-14 relative) stay below every error a study resolves.
START_ROUNDOFF_UNITS = 64


def _start_tolerance(*values: np.ndarray | float) -> float:
    """:data:`START_ROUNDOFF_UNITS` units of round-off of the largest entry of ``values``."""
    size = max(float(np.max(np.abs(value), initial=0.0)) for value in values)
    return START_ROUNDOFF_UNITS * np.finfo(float).eps * size


def _check_reference_solution(reference, model: Model, t_start: float, t_end: float) -> None:
    """Refuse a reference solution of another model or time span than the study's.

    ``model`` is the director model whose states the studied runs return. Its initial state
    is checked by :func:`_check_reference_start` against the first completed run.
    """
    if abs(reference.t[-1] - t_end) > 1e-9 * max(1.0, t_end):
        raise ModelError(f"reference solution ends at t = {reference.t[-1]:g}, not at "
                         f"t_end = {t_end:g}")
    t_first = float(reference.t[0])
    if abs(t_first - t_start) > _start_tolerance(t_start, t_end):
        raise ModelError(f"convergence_study: the reference solution starts at t = "
                         f"{t_first!r}, the study at t_start = {t_start!r}: it solves another "
                         f"initial-value problem. Make the reference with simulate(..., "
                         f"t_start={t_start!r}) from the study's initial state, or pass "
                         f"t_start={t_first!r} to convergence_study")
    reference_model = reference.model
    if reference_model is model:
        return
    fix = ("make the reference with the studied model (for a Lie-group model: its "
           "director_model, or the Lie-group model itself), or give the study the reference's "
           "model")
    if isinstance(reference_model, Model):
        if model_digest(reference_model) != model_digest(model):
            differing = model_differences(model, model_digest_parts(reference_model))
            raise ModelError(f"convergence_study: the reference solution is of another model: "
                             f"its {differing} differ from the studied model's; {fix}")
        return
    # a solution loaded without its model keeps the model's sizes and elements only
    names, reference_names = ([body.name for body in model.bodies],
                              [body.name for body in reference_model.bodies])
    if (reference_model.n, reference_model.m, reference_names) != (model.n, model.m, names):
        raise ModelError(f"convergence_study: the reference solution is of another model "
                         f"(n = {reference_model.n}, m = {reference_model.m}, bodies "
                         f"{reference_names}; the studied model has n = {model.n}, m = "
                         f"{model.m}, bodies {names}); {fix}")


def _check_reference_start(reference, q0: np.ndarray, p0: np.ndarray) -> None:
    """Refuse a reference solution that does not start from the studied runs' initial state
    (q0, p0), up to round-off."""
    q_difference = float(np.max(np.abs(reference.q[0] - q0), initial=0.0))
    p_difference = float(np.max(np.abs(reference.p[0] - p0), initial=0.0))
    if q_difference > _start_tolerance(q0, reference.q[0]) or p_difference > _start_tolerance(
            p0, reference.p[0]):
        raise ModelError(f"convergence_study: the reference solution starts from another state "
                         f"than the studied runs (max |q0 - q0_ref| = {q_difference:.3e}, max "
                         f"|p0 - p0_ref| = {p_difference:.3e}): it solves another "
                         f"initial-value problem. Make the reference from the study's initial "
                         f"state (the same initial_state= and project=, or neither), or leave "
                         f"reference=None for a reference run made by the study")


def convergence_study(build_or_model, solvers: Sequence[str] = ("em",),
                      steps: Sequence[float] = (0.004, 0.002, 0.001), t_end: float = 1.0, *,
                      reference=None, reference_solver: str = "em",
                      reference_factor: int = 8, reference_options: dict | None = None,
                      path=None, print_table: bool = True,
                      **simulate_options) -> ConvergenceStudy:
    """Run ``model`` at several step sizes with several solvers; errors at ``t_end``.

    Parameters
    ----------
    build_or_model : Model, LieGroupModel, System, or callable returning one
        E.g. an example's build. A :class:`~mbs.liegroup.model.LieGroupModel` (from
        ``system.compile(formulation="lie-group")``) is studied with the Lie-group schemes
        "vrkmk" and "vcg", as :func:`mbs.simulate` runs it; its runs return, and its errors
        are measured on, the states of its ``director_model``.
    solvers : sequence of str, (str, dict) or Solver
        Names from :data:`mbs.solvers.REGISTRY` (or, for a Lie-group model, "vrkmk" and
        "vcg", with the options of :func:`mbs.liegroup.simulation.make_method`), a name with
        options of its own, e.g. ``("lobatto", {"stages": 3})`` next to ``"em"`` or
        ``("vrkmk", {"tableau": "gauss-3"})``, or solver instances (also
        :class:`~mbs.liegroup.VRKMK` and :class:`~mbs.liegroup.VCG`); labelled by the name
        and options in the table and the figure.
    steps : sequence of float
        Step sizes h; each must divide t_end - t_start.
    t_end : float
        End time of every run; the errors are those of the final state.
    reference : None, Solution, or callable
        None: a fine run of ``reference_solver`` with h = min(steps) / reference_factor.
        A Solution: its final node. It must solve the study's initial-value problem: be of
        the studied model (of its director model for a Lie-group model), start at
        ``t_start`` from the studied runs' initial state (both up to round-off) and end at
        ``t_end``. A callable: the exact solution, ``reference(t_end)`` returning q or
        (q, p) at t_end (p may be omitted: no p errors).
    reference_solver : str
        Solver of the reference run (``reference=None``), default "em". A director solver
        runs on the director model of a Lie-group model; "vrkmk" or "vcg" on the Lie-group
        model.
    reference_factor : int
        The reference run's step is min(steps) / reference_factor (default 8).
    reference_options : dict, optional
        Solver options of the reference run, e.g. ``{"order": 6}`` or, with
        ``reference_solver="lobatto"``, ``{"stages": 5}``. The reference must be more
        accurate than the finest studied run: raise its order when studying schemes of order
        4 or more. Only with ``reference=None``.
    path : str or Path, optional
        Save the log-log figure (errors of q solid, p dashed, fitted slopes in the legend).
    print_table : bool
        Print :attr:`ConvergenceStudy.table`.
    **simulate_options
        Keywords of :func:`mbs.simulate` for the studied runs, e.g. ``stages=4`` or
        ``order=4``. Solver options apply to the studied solvers given by name only (the
        reference run takes ``reference_options``, an instance its own); ``t_start``,
        ``initial_state``, ``project``, ``on_failure``, ``max_refinements`` and ``progress``
        apply to every run, the reference too, since they define the problem all solve.

    Returns
    -------
    ConvergenceStudy
        With ``figure`` and ``table``; a studied run that fails is recorded in ``failures``
        and its errors are NaN.

    Raises
    ------
    ModelError
        Fewer than two step sizes, a step not dividing ``t_end - t_start``, a studied solver
        or solver options :func:`mbs.simulate` refuses for the model (a director solver for
        a Lie-group model or the reverse, an unknown name or Lie-group option), a bad
        ``reference`` (a Solution of another model, start time, initial state or end time),
        or ``reference_options`` that are not a dict or come with a given ``reference``.
    SolverError
        When the reference run fails.

    Warns
    -----
    UserWarning
        With ``reference=None``, when a studied solver's smallest error is less than 3 times
        the reference's own error, estimated by a second reference run at twice its step
        (half the reference's cost): the observed orders then measure the reference.
    """
    from mbs.simulate import simulate
    from mbs.solution import Solution

    _figure_path(path)  # a figure type that cannot be written fails before the runs
    model = _model_of(build_or_model)
    runs = {}
    for label, run in map(_studied_solver, solvers):
        if label in runs:
            raise ModelError(f"convergence_study: two solvers labelled {label!r}; give them "
                             f"as (name, options) pairs that tell them apart, or study them "
                             f"separately")
        runs[label] = run
    if not runs:
        raise ModelError("convergence_study: give at least one solver")
    solvers = list(runs)
    solver_options = _solver_options(simulate_options)
    for scheme, own_options in runs.values():
        # an instance carries its options: the runs give it none
        _check_studied_solver(model, scheme, {**solver_options, **own_options}
                              if isinstance(scheme, str) else own_options)
    # the runs return states of the director model, also for a Lie-group model
    director_model = model.director_model if isinstance(model, LieGroupModel) else model
    steps = np.array(sorted((float(h) for h in steps), reverse=True))
    if steps.size < 2 or np.any(steps <= 0):
        raise ModelError(f"convergence_study: give at least two positive step sizes, got "
                         f"{steps.tolist()}")
    t_start = float(simulate_options.get("t_start", 0.0))
    for h in steps:
        count = (t_end - t_start) / h
        if abs(count - round(count)) > 1e-9 * max(1.0, count):
            raise ModelError(f"convergence_study: h = {h:g} does not divide t_end - t_start = "
                             f"{t_end - t_start:g}")
    if reference_options is not None:
        if not isinstance(reference_options, dict):
            raise ModelError(f"convergence_study: reference_options must be a dict of solver "
                             f"options, got {type(reference_options).__name__}")
        if reference is not None:
            raise ModelError("convergence_study: reference_options configure the reference "
                             "run, which is made only with reference=None")
    if reference is None:
        h_ref = steps.min() / reference_factor
        shared = {key: value for key, value in simulate_options.items()
                  if key in _SHARED_RUN_OPTIONS}
        reference_run = {**shared, **(reference_options or {})}
        # a director reference solver runs on the director model of a Lie-group model, from
        # the same initial state in director coordinates
        reference_model = (model if is_lie_group_solver(reference_solver) else director_model)
        if reference_model is not model and isinstance(reference_run.get("initial_state"),
                                                       LieGroupState):
            reference_run["initial_state"] = model.to_director(
                *model.pack(reference_run["initial_state"]))
        ref_solution = simulate(reference_model, reference_solver, h=h_ref, t_end=t_end,
                                **reference_run)
        q_ref, p_ref = ref_solution.q[-1], ref_solution.p[-1]
        # the same scheme at twice the step bounds the reference's own error (by (2^p - 1)
        # times it), so studied errors that come close to it measure the reference instead
        try:
            coarse = simulate(reference_model, reference_solver, h=2.0 * h_ref, t_end=t_end,
                              **reference_run)
            reference_error = float(np.max(np.abs(coarse.q[-1] - q_ref)))
        except MbsError:  # only the check is lost, not the study
            reference_error = None
        described = (f"{_described_solver(reference_solver, reference_options)} with "
                     f"h = {h_ref:g}")
    elif isinstance(reference, Solution):
        reference_error = None
        _check_reference_solution(reference, director_model, t_start, float(t_end))
        q_ref, p_ref = reference.q[-1], reference.p[-1]
        described = f"the given {reference.stats.get('solver', '')} reference solution"
    elif isinstance(reference, Callable):
        value = reference(t_end)
        q_ref, p_ref = (value if isinstance(value, tuple) else (value, None))
        reference_error = None
        described = "the exact solution"
    else:
        raise ModelError("reference must be None, a Solution or a callable exact solution")
    q_ref = np.asarray(q_ref, dtype=float)
    p_ref = None if p_ref is None else np.asarray(p_ref, dtype=float)

    study = ConvergenceStudy(solvers, steps, float(t_end), described)
    q_scale = max(float(np.max(np.abs(q_ref))), 1e-300)
    p_scale = None if p_ref is None else max(float(np.max(np.abs(p_ref))), 1e-300)
    # a given reference's initial state is checked against the first completed run's, the
    # state every studied run starts from
    start_unchecked = isinstance(reference, Solution)
    for solver in solvers:
        scheme, own_options = runs[solver]
        # an instance carries its options: it takes the run's keywords only
        options = (simulate_options if isinstance(scheme, str) else
                   {key: value for key, value in simulate_options.items()
                    if key in _SHARED_RUN_OPTIONS})
        eq, ep = np.full(steps.size, np.nan), np.full(steps.size, np.nan)
        for k, h in enumerate(steps):
            try:
                run = simulate(model, scheme, h=float(h), t_end=t_end,
                               **{**options, **own_options})
            except MbsError as exc:
                study.failures[(solver, float(h))] = str(exc).splitlines()[0][:120]
                continue
            if start_unchecked:
                _check_reference_start(reference, run.q[0], run.p[0])
                start_unchecked = False
            eq[k] = float(np.max(np.abs(run.q[-1] - q_ref))) / q_scale
            if p_ref is not None:
                ep[k] = float(np.max(np.abs(run.p[-1] - p_ref))) / p_scale
        study.errors_q[solver], study.errors_p[solver] = eq, ep
        study.slopes_q[solver] = fitted_slope(steps, eq)
        study.slopes_p[solver] = fitted_slope(steps, ep)
    if reference_error is not None:
        _warn_if_reference_limits(study, reference_error / q_scale)

    fig, (ax,) = _figure(1, height=4.2, width=6.4)
    for i, solver in enumerate(solvers):
        color = f"C{i}"
        ax.loglog(steps, study.errors_q[solver], "o-", color=color,
                  label=f"{solver} q (slope {study.slopes_q[solver]:.2f})")
        if p_ref is not None:
            ax.loglog(steps, study.errors_p[solver], "s--", color=color, mfc="none",
                      label=f"{solver} p (slope {study.slopes_p[solver]:.2f})")
    ax.set_xlabel("step size h")
    ax.set_ylabel(r"relative error at $t_{end}$ (max norm)")
    ax.set_title(f"convergence at t = {t_end:g} (reference: {described})", fontsize="medium")
    ax.grid(True, which="both", color="0.9")
    ax.legend(loc="best", fontsize="small")
    study.figure = fig
    _save(fig, path)
    if print_table:
        print(study.table)
    return study


def _described_solver(name: str, options: dict | None) -> str:
    """``name`` with its options, e.g. "em (order=6)", for the reference's label."""
    if not options:
        return name
    return f"{name} ({', '.join(f'{key}={value!r}' for key, value in options.items())})"


def _warn_if_reference_limits(study: ConvergenceStudy, reference_error: float) -> None:
    """Warn when a studied solver's smallest error is within a small factor of the
    reference's own (relative) error, where the fitted orders measure the reference."""

    limited = [solver for solver in study.solvers
               if np.any(np.isfinite(study.errors_q[solver]))
               and np.nanmin(study.errors_q[solver]) < 3.0 * reference_error]
    if limited:
        warn_user(f"convergence_study: the errors of {', '.join(limited)} reach the "
                  f"reference's own error (about {reference_error:.1e}), so their "
                  f"observed orders are unreliable; use a more accurate reference, e.g. "
                  f"reference_options={{'order': 6}}, reference_solver='lobatto' with "
                  f"reference_options={{'stages': 5}}, or a larger reference_factor")
