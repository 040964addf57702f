"""Work-precision benchmark: CPU seconds against error for every mbs scheme and Exudyn.

    python -m benchmarks.work_precision                       # full run, several minutes
    python -m benchmarks.work_precision --quick               # 0.25 s CPU per run
    python -m benchmarks.work_precision --json out.json --plot docs/work-precision.png

Problems (both over [0, T], T = 1 s, fixed steps h = h0 / 2^k, k = 0, 1, ...):

* heavy top (``cases.heavy_top()``, h0 = 1/64): error = |phi(T) - phi_exact(T)| / l, the
  centre-of-mass error against the exact steady precession relative to the lever length
  (``cases.com_error``), the measure of the accuracy section of ``benchmarks/runner.py``;
* double pendulum (``cases.double_pendulum()``: two slender cylinders on revolute joints,
  released at rest from 120 and 150 degrees; h0 = 1/16): error = max-norm of the difference
  of both links' centres of mass at T from a reference computed once per run by mbs' Lobatto
  IIIA-IIIB with 4 stages (order 6). The reference step is halved from 2^-10 until two
  successive reference runs differ by less than 1e-13 (max-norm); the finer run is used.

Each mbs run is ``mbs.simulate(model, name, h=h, t_end=T, **options)`` on a model compiled
beforehand; its CPU time is ``time.process_time`` around that call alone
(``timing.mbs_timed_run``). Exudyn's runs are those of ``peers`` (model build and
``Assemble`` excluded, ``SolveDynamic`` timed). Every curve starts with one untimed warm-up run
at h0 (numba compiles or loads the kernel of the compiled backend there). Runs cheaper than
``REPEAT_BELOW_S`` are repeated twice more and the least CPU time of the three is kept: on the
shared 2-core host, interference from other processes only adds time (measured: the same
12 ms run took up to 34 ms), and the repeats make the cheap end of each curve smooth enough
to interpolate.

The step is halved until the error is below ``ERROR_GOAL``, or it stagnates (two halvings
without a gain of 1.5, below ``STAGNATION_BELOW``), or the next run would exceed the CPU
budget per run (predicted from the last run at twice its CPU time), or after
``MAX_HALVINGS``. A run whose Newton iteration fails (``mbs.SolverError``, or an exception in
Exudyn's solver) is recorded as a failure, not as a point, and the halving goes on. mbs runs use
``simulate``'s default ``on_failure="refine"``: a step that Newton cannot solve is redone as
2, 4, ... sub-steps; such a run is a point, with the number of redone steps in
``refined_steps``.

Each mbs point also records the largest relative energy change over the run
(``energy_drift``) and, on the heavy top, that of the vertical angular momentum about the
fixed point (``momentum_drift``); the summary table gives the largest of each over a curve.

The CPU time a scheme needs for an error e is interpolated log-log between the two successive
points (in the order of decreasing h) that bracket e; it is not given when the first point is
already below e or no point reaches e (no extrapolation).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import mbs
from benchmarks import cases, peers, timing

T_END = 1.0
HEAVY_TOP_H0 = 1.0 / 2**6
DOUBLE_PENDULUM_H0 = 1.0 / 2**4
#: A curve stops once its error is below this.
ERROR_GOAL = 1e-11
#: Errors at which the CPU time of each curve is interpolated (the headline numbers).
HEADLINE_ERRORS = (1e-6, 1e-10)
BUDGET_S, QUICK_BUDGET_S = 3.0, 0.25
MAX_HALVINGS = 16
#: Two halvings without a gain of 1.5 stop a curve once its error is below this.
STAGNATION_BELOW = 1e-3
#: Runs cheaper than this [s CPU] are repeated twice more; the least CPU time is kept.
REPEAT_BELOW_S = 0.5
REFERENCE_H0 = 1.0 / 2**10
REFERENCE_AGREEMENT = 1e-13
REFERENCE_MAX_HALVINGS = 4
#: Target of the runner: best high-order mbs CPU / Exudyn's best CPU at CoM error 1e-6.
TARGET_RATIO_1E6 = 0.05
#: Target of the runner: CPU seconds to reach heavy-top CoM error 1e-10.
TARGET_CPU_1E10_S = 1.0


@dataclass(frozen=True)
class Scheme:
    """An mbs scheme: ``mbs.simulate(model, solver, **options)``, of declared ``order``."""

    label: str
    solver: str
    options: dict = field(default_factory=dict)
    order: int = 2


MBS_SCHEMES = (
    Scheme("em", "em"),
    Scheme("em compiled", "em", {"backend": "compiled"}),
    Scheme("ggl-vi-a", "ggl-vi-a"),
    Scheme("rattle", "rattle"),
    Scheme("hbvm", "hbvm"),
    Scheme("lobatto s=2", "lobatto", {"stages": 2}),
    Scheme("lobatto s=3", "lobatto", {"stages": 3}, order=4),
    Scheme("lobatto s=4", "lobatto", {"stages": 4}, order=6),
    Scheme("lobatto s=3 compiled", "lobatto", {"stages": 3, "backend": "compiled"}, order=4),
    Scheme("lobatto s=4 compiled", "lobatto", {"stages": 4, "backend": "compiled"}, order=6),
    Scheme("lobatto s=5 compiled", "lobatto", {"stages": 5, "backend": "compiled"}, order=8),
    Scheme("em order 4", "em", {"order": 4}, order=4),
    Scheme("em order 6", "em", {"order": 6}, order=6),
    Scheme("em order 6 compiled", "em", {"order": 6, "backend": "compiled"}, order=6),
    Scheme("rattle order 4", "rattle", {"order": 4}, order=4),
    Scheme("rattle order 6", "rattle", {"order": 6}, order=6),
    Scheme("ggl-vi-a order 4", "ggl-vi-a", {"order": 4}, order=4),
    Scheme("ggl-vi-a order 6", "ggl-vi-a", {"order": 6}, order=6),
)
#: The reduced set of ``python -m benchmarks --quick`` (heavy top only).
SMOKE_SCHEMES = tuple(s for s in MBS_SCHEMES if s.label in ("em", "lobatto s=4 compiled"))
SMOKE_EXUDYN_CONFIGS = ("gen-alpha",)


@dataclass
class Problem:
    """A model with its error measure and the matching Exudyn run.

    ``mbs_measure(solution)`` and ``exudyn_run(config, h)`` return dicts with ``"error"``
    (and ``"cpu_s"``, ``"steps"`` for Exudyn; see ``peers``).
    """

    name: str
    label: str
    error_text: str
    error_short: str
    h0: float
    model: mbs.Model
    mbs_measure: Callable[[mbs.Solution], dict]
    exudyn_run: Callable[[str, float], dict]
    guides: tuple[float, ...] = ()
    reference: dict | None = None


# -- problems ---------------------------------------------------------------------------------
def run_facts(sol: mbs.Solution, momentum_axis: int | None = None) -> dict:
    """Largest relative change of the energy over the run, and of the angular momentum
    component ``momentum_axis`` about the origin when given; the number of steps that
    ``mbs.simulate`` redid as sub-steps after a Newton failure (``refined_steps``)."""
    energy = sol.energy()
    drifts = {"energy_drift": float(np.max(np.abs(energy - energy[0])) / abs(energy[0])),
              "refined_steps": len(sol.stats["refined_steps"])}
    if momentum_axis is not None:
        momentum = sol.angular_momentum()[:, momentum_axis]
        drifts["momentum_drift"] = float(np.max(np.abs(momentum - momentum[0]))
                                         / abs(momentum[0]))
    return drifts


def heavy_top_problem() -> Problem:
    """Heavy top, CoM error at T = 1 s against the exact steady precession."""
    def measure(sol: mbs.Solution) -> dict:
        return {**timing.heavy_top_com_measure(sol), **run_facts(sol, momentum_axis=2)}

    return Problem(
        name="heavy_top", label="heavy top", h0=HEAVY_TOP_H0,
        error_text="|phi(1) - phi_exact(1)| / l (centre of mass, exact steady precession)",
        error_short="CoM error |phi(1) - phi_exact(1)| / l",
        model=cases.heavy_top().compile(), mbs_measure=measure,
        exudyn_run=lambda config, h: peers.exudyn_heavy_top_com(config, h, T_END),
        guides=HEADLINE_ERRORS)


def link_positions(sol: mbs.Solution, names: Sequence[str]) -> np.ndarray:
    """Centres of mass of the bodies ``names`` at the last time of ``sol``, shape (k, 3)."""
    return np.array([sol.body(name).position[-1] for name in names])


def double_pendulum_reference(model: mbs.Model, names: Sequence[str],
                              h: float = REFERENCE_H0) -> dict:
    """Lobatto IIIA-IIIB (4 stages) positions at T, h halved until two runs agree.

    Returns the finer run's ``positions`` with its step ``h``, the coarser step and the
    max-norm ``difference`` of the two, and the CPU seconds spent.
    """
    started = time.process_time()

    def positions(step: float) -> np.ndarray:
        sol = mbs.simulate(model, "lobatto", stages=4, h=step, t_end=T_END)
        return link_positions(sol, names)

    coarse = positions(h)
    for _ in range(REFERENCE_MAX_HALVINGS):
        fine = positions(h / 2)
        difference = float(np.max(np.abs(fine - coarse)))
        if difference < REFERENCE_AGREEMENT:
            return {"solver": "lobatto", "stages": 4, "h": h / 2, "checked_against_h": h,
                    "difference": difference, "positions": fine,
                    "cpu_s": time.process_time() - started}
        h, coarse = h / 2, fine
    raise RuntimeError(f"double-pendulum reference: runs at h = {2 * h:.3g} and {h:.3g} still "
                       f"differ by {difference:.2e} >= {REFERENCE_AGREEMENT:g}")


def double_pendulum_problem() -> Problem:
    """Double pendulum, max-norm CoM error of both links at T = 1 s against the reference."""
    system = cases.double_pendulum()
    names = [body.name for body in system.bodies]
    model = system.compile()
    timing.log("  work-precision: double-pendulum reference (lobatto, 4 stages)")
    reference = double_pendulum_reference(model, names)

    def error(positions: np.ndarray) -> float:
        return float(np.max(np.abs(positions - reference["positions"])))

    def measure(sol: mbs.Solution) -> dict:
        return {"error": error(link_positions(sol, names)), **run_facts(sol)}

    def exudyn_run(config: str, h: float) -> dict:
        result = peers.exudyn_double_pendulum_positions(config, h, T_END)
        if "positions" in result:
            result["error"] = error(result.pop("positions"))
        return result

    return Problem(
        name="double_pendulum", label="double pendulum", h0=DOUBLE_PENDULUM_H0,
        error_text="max-norm of both links' centre-of-mass errors at t = 1 s [m], against "
                   "mbs lobatto (4 stages)",
        error_short="max CoM error of both links at t = 1 s [m]", model=model,
        mbs_measure=measure,
        exudyn_run=exudyn_run, reference=reference)


PROBLEMS: dict[str, Callable[[], Problem]] = {"heavy_top": heavy_top_problem,
                                              "double_pendulum": double_pendulum_problem}


# -- sweeps -----------------------------------------------------------------------------------
def timed(run: Callable[[float], dict], h: float) -> dict:
    """``run(h)`` with ``h`` recorded; a cheap successful run is repeated twice more and the
    least CPU time kept (all three in ``cpu_all_s``)."""
    result = run(h)
    result["h"] = h
    if result.get("error") is not None and result["cpu_s"] < REPEAT_BELOW_S:
        cpu_all = [result["cpu_s"], *(run(h)["cpu_s"] for _ in range(2))]
        result.update(cpu_s=min(cpu_all), cpu_all_s=cpu_all)
    return result


def stagnates(points: list[dict]) -> bool:
    """Two halvings in a row without a gain of 1.5, at errors below STAGNATION_BELOW."""
    if len(points) < 3 or points[-1]["error"] >= STAGNATION_BELOW:
        return False
    errors = [p["error"] for p in points[-3:]]
    return errors[1] > errors[0] / 1.5 and errors[2] > errors[1] / 1.5


def sweep(run: Callable[[float], dict], h0: float, budget: float) -> dict:
    """Halve h from h0 (see the module docstring); every point and failure is kept."""
    points, failures, last = [], [], None
    h, stop = h0, f"{MAX_HALVINGS} halvings"
    for _ in range(MAX_HALVINGS + 1):
        if last is not None and 2 * last["cpu_s"] > budget:
            stop = (f"next run (h = {h:.3g}) would take about {2 * last['cpu_s']:.2g} s CPU, "
                    f"over the {budget:g} s budget")
            break
        last = timed(run, h)
        if last.get("error") is None:
            failures.append(last)
            if "crash" in last:
                stop = f"crashed: {last['crash']}"
                break
        else:
            points.append(last)
            if last["error"] < ERROR_GOAL:
                stop = f"error below {ERROR_GOAL:g}"
                break
            if stagnates(points):
                stop = f"error stagnates at about {last['error']:.2g}"
                break
        h /= 2
    return {"points": points, "failures": failures, "stop": stop}


def cpu_to_reach(points: list[dict], error: float) -> float | None:
    """CPU seconds to reach ``error``, log-log interpolated between the first point (in the
    order of decreasing h) at or below ``error`` and the point before it; None when no point
    reaches it or the first point already does (no extrapolation)."""
    for index, point in enumerate(points):
        if point["error"] <= error:
            if index == 0:
                return None
            above = points[index - 1]
            fraction = (math.log(above["error"] / error)
                        / math.log(above["error"] / point["error"]))
            return math.exp(math.log(above["cpu_s"])
                            + fraction * math.log(point["cpu_s"] / above["cpu_s"]))
    return None


def observed_order(points: list[dict], low: float = 1e-12, high: float = 1e-3) -> float | None:
    """Least-squares slope of log(error) against log(h) over the points with low < error <
    high (the asymptotic range above round-off); None with fewer than two such points."""
    inside = [p for p in points if low < p["error"] < high]
    if len(inside) < 2:
        return None
    slope, _ = np.polyfit(np.log([p["h"] for p in inside]),
                          np.log([p["error"] for p in inside]), 1)
    return float(slope)


def summarize(curve: dict) -> dict:
    """Add the interpolated CPU times, the observed order and the smallest error."""
    points = curve.get("points", [])
    curve["cpu_at"] = {f"{e:g}": cpu_to_reach(points, e) for e in HEADLINE_ERRORS}
    curve["observed_order"] = observed_order(points)
    curve["best_error"] = min((p["error"] for p in points), default=None)
    for key in ("energy_drift", "momentum_drift"):
        curve[f"max_{key}"] = max((p[key] for p in points if key in p), default=None)
    return curve


def mbs_curve(problem: Problem, scheme: Scheme, budget: float) -> dict:
    """The sweep of one mbs scheme on ``problem``."""
    timing.log(f"  work-precision {problem.name}: mbs {scheme.label}")
    run = timing.mbs_timed_run(problem.model, scheme.solver, T_END, problem.mbs_measure,
                               **scheme.options)
    run(problem.h0)  # warm-up (numba kernel of the compiled backend)
    curve = {"code": "mbs", "scheme": scheme.label, "solver": scheme.solver,
             "options": dict(scheme.options), "order": scheme.order}
    return summarize({**curve, **sweep(run, problem.h0, budget)})


def exudyn_curve(problem: Problem, config: str, budget: float, use: bool,
                 reason: str) -> dict:
    """The sweep of one Exudyn configuration on ``problem`` (or an n/a curve)."""
    curve = {"code": "exudyn", "scheme": f"exudyn {config}", "solver": config, "options": {},
             "order": 2, "note": peers.EXUDYN_CONFIGS[config][3]}
    if not use:
        return {**curve, "na": reason, "points": [], "failures": []}
    timing.log(f"  work-precision {problem.name}: exudyn {config}")

    def run(h: float) -> dict:
        with peers.silence():
            return problem.exudyn_run(config, h)

    run(problem.h0)  # warm-up
    return summarize({**curve, **sweep(run, problem.h0, budget)})


# -- headline ---------------------------------------------------------------------------------
KINDS = {"mbs order 2": lambda c: c["code"] == "mbs" and c["order"] == 2,
         "mbs order >= 4": lambda c: c["code"] == "mbs" and c["order"] >= 4,
         "exudyn": lambda c: c["code"] == "exudyn"}


def best_of(curves: list[dict], error: float, accept: Callable[[dict], bool]) -> dict | None:
    """The accepted curve needing the least CPU for ``error``: {"scheme", "cpu_s"}."""
    found = [(c["cpu_at"][f"{error:g}"], c["scheme"]) for c in curves
             if accept(c) and c.get("cpu_at", {}).get(f"{error:g}") is not None]
    if not found:
        return None
    cpu, scheme = min(found)
    return {"scheme": scheme, "cpu_s": cpu}


def headline(curves: list[dict]) -> dict:
    """Best CPU per kind (mbs order 2, mbs order >= 4, Exudyn) and overall mbs at each
    headline error, and the ratio best high-order mbs / best Exudyn at each."""
    result = {}
    for error in HEADLINE_ERRORS:
        best = {kind: best_of(curves, error, accept) for kind, accept in KINDS.items()}
        best["mbs"] = best_of(curves, error, lambda c: c["code"] == "mbs")
        high, peer = best["mbs order >= 4"], best["exudyn"]
        best["high_order_over_exudyn"] = (high["cpu_s"] / peer["cpu_s"] if high and peer
                                          else None)
        result[f"{error:g}"] = best
    return result


def target_checks(result: dict) -> list[dict]:
    """The runner's two work-precision targets, from the heavy-top headline."""
    top = result["problems"].get("heavy_top")
    if top is None:
        return []
    at_6, at_10 = top["headline"]["1e-06"], top["headline"]["1e-10"]
    ratio, best_10 = at_6["high_order_over_exudyn"], at_10["mbs"]
    high, peer = at_6["mbs order >= 4"], at_6["exudyn"]
    ratio_detail = (f"mbs {high['scheme']} {timing.fmt_time(high['cpu_s'])} vs "
                    f"{peer['scheme']} {timing.fmt_time(peer['cpu_s'])}" if high and peer
                    else "not measured: no bracketing points for "
                         + ("Exudyn" if high else "mbs order >= 4"))
    return [
        {"target": f"5. best high-order mbs / Exudyn's best, CPU to heavy-top CoM error 1e-6 "
                   f"<= {TARGET_RATIO_1E6:g}", "unit": "ratio", "measured": ratio,
         "limit": TARGET_RATIO_1E6, "pass": None if ratio is None else ratio <= TARGET_RATIO_1E6,
         "detail": ratio_detail},
        {"target": f"5. heavy-top CoM error 1e-10 at t = 1 reached in <= "
                   f"{TARGET_CPU_1E10_S:g} s CPU", "unit": "s",
         "measured": None if best_10 is None else best_10["cpu_s"], "limit": TARGET_CPU_1E10_S,
         "pass": None if best_10 is None else best_10["cpu_s"] <= TARGET_CPU_1E10_S,
         "detail": f"mbs {best_10['scheme']}" if best_10 else "no mbs scheme reached it"},
    ]


# -- driver -----------------------------------------------------------------------------------
def measure(problem_names: Sequence[str] = tuple(PROBLEMS),
            schemes: Sequence[Scheme] = MBS_SCHEMES,
            exudyn_configs: Sequence[str] = peers.EXUDYN_COM_CONFIGS,
            budget: float = BUDGET_S, use_exudyn: bool | None = None) -> dict:
    """Run the sweeps of every scheme and Exudyn configuration on every problem.

    Parameters
    ----------
    problem_names
        Keys of :data:`PROBLEMS`.
    schemes
        mbs schemes to sweep.
    exudyn_configs
        Keys of ``peers.EXUDYN_CONFIGS``.
    budget
        CPU seconds one run may take (the sweep stops before a run predicted to exceed it).
    use_exudyn
        Run Exudyn (default: when it can be imported).

    Returns
    -------
    dict
        ``{"problems": {name: {..., "curves": [...], "headline": {...}}}, "targets": [...],
        "budget_s", "cpu_s", "wall_s", "exudyn"}``; every curve holds its points (h, steps,
        cpu_s, error, newton_per_step, invariant drifts), failures and stop reason.
    """
    exudyn_ok, exudyn_info = peers.exudyn_status()
    use = exudyn_ok if use_exudyn is None else (use_exudyn and exudyn_ok)
    reason = exudyn_info if not exudyn_ok else "Exudyn disabled"
    started, cpu_started = time.perf_counter(), time.process_time()
    problems = {}
    for name in problem_names:
        problem = PROBLEMS[name]()
        curves = [mbs_curve(problem, scheme, budget) for scheme in schemes]
        curves += [exudyn_curve(problem, config, budget, use, reason)
                   for config in exudyn_configs]
        problems[name] = {"label": problem.label, "error": problem.error_text,
                          "error_short": problem.error_short,
                          "t_end": T_END, "h0": problem.h0, "guides": list(problem.guides),
                          "reference": jsonable_reference(problem.reference), "curves": curves,
                          "headline": headline(curves)}
    result = {"problems": problems, "budget_s": budget, "error_goal": ERROR_GOAL,
              "exudyn": exudyn_info if use else f"n/a ({reason})"}
    result["targets"] = target_checks(result)
    result.update(wall_s=time.perf_counter() - started,
                  cpu_s=time.process_time() - cpu_started)
    return result


def jsonable_reference(reference: dict | None) -> dict | None:
    """The reference record with its positions as nested lists."""
    if reference is None:
        return None
    return {**reference, "positions": np.asarray(reference["positions"]).tolist()}


# -- report -----------------------------------------------------------------------------------
def fmt_cpu(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3g} s"


def points_table(problem: dict) -> list[str]:
    """Every run of every curve of a problem (points and failures)."""
    lines = [f"{'scheme':<26} {'h':>10} {'steps':>8} {'CPU s':>10} {'error':>10} "
             f"{'Newton/step':>11} {'energy drift':>12} {'refined':>7}"]
    lines.append("-" * len(lines[0]))
    for curve in problem["curves"]:
        if "na" in curve:
            lines.append(f"{curve['scheme']:<26} n/a ({curve['na']})")
            continue
        runs = sorted(curve["points"] + curve["failures"], key=lambda r: -r["h"])
        for run in runs:
            head = f"{curve['scheme']:<26} {run['h']:>10.4g} {run['steps']:>8} "
            if run.get("error") is None:
                lines.append(head + f"{run['cpu_s']:>10.4f} failed: "
                             f"{run.get('failure') or run.get('crash')}")
                continue
            newton = run.get("newton_per_step")
            drift = run.get("energy_drift")
            refined = run.get("refined_steps")
            lines.append(head + f"{run['cpu_s']:>10.4f} {run['error']:>10.3e} "
                         f"{'-' if newton is None else f'{newton:.2f}':>11} "
                         f"{'-' if drift is None else f'{drift:.1e}':>12} "
                         f"{'-' if refined is None else refined:>7}")
    return lines


def summary_table(problem: dict) -> list[str]:
    """One line per curve: orders, CPU at the headline errors, best error, why it stopped."""
    errors = [f"{e:g}" for e in HEADLINE_ERRORS]
    lines = [f"{'scheme':<26} {'order':>5} {'observed':>8} "
             + " ".join(f"{'CPU to ' + e:>13}" for e in errors)
             + f" {'best error':>10} {'drift E / L':>17}  stop"]
    lines.append("-" * (len(lines[0]) + 30))
    for curve in problem["curves"]:
        if "na" in curve:
            lines.append(f"{curve['scheme']:<26} n/a ({curve['na']})")
            continue
        order = curve["observed_order"]
        best = curve["best_error"]
        lines.append(f"{curve['scheme']:<26} {curve['order']:>5} "
                     f"{'-' if order is None else f'{order:.2f}':>8} "
                     + " ".join(f"{fmt_cpu(curve['cpu_at'][e]):>13}" for e in errors)
                     + f" {'-' if best is None else f'{best:.2e}':>10} {drifts(curve):>17}"
                     + f"  {curve['stop']}")
    return lines


def drifts(curve: dict) -> str:
    """'energy / momentum' largest relative drifts over a curve's runs ('-' where unknown)."""
    values = [curve.get("max_energy_drift"), curve.get("max_momentum_drift")]
    return " / ".join("-" if v is None else f"{v:.0e}" for v in values)


def headline_lines(name: str, problem: dict) -> list[str]:
    lines = []
    for error, best in problem["headline"].items():
        parts = [f"{kind}: " + (f"{entry['scheme']} {fmt_cpu(entry['cpu_s'])}" if entry
                                else "not reached")
                 for kind, entry in best.items() if kind in KINDS]
        ratio = best["high_order_over_exudyn"]
        ratio_text = "-" if ratio is None else f"{ratio:.3g}"
        lines.append(f"{problem['label']}, error {error}: " + "; ".join(parts)
                     + f"; best high-order mbs / best Exudyn = {ratio_text}")
    return lines


def target_lines(checks: list[dict]) -> list[str]:
    lines = []
    for check in checks:
        status = {True: "PASS", False: "FAIL", None: "n/a "}[check["pass"]]
        value = check["measured"]
        text = "-" if value is None else (f"{value:.3g}" if check["unit"] == "ratio"
                                          else timing.fmt_time(value))
        lines.append(f"{status}  {check['target']:<80} measured {text:>10}  "
                     f"limit {check['limit']:g}  {check['detail']}")
    return lines


def report(result: dict, with_points: bool = True, with_targets: bool = True) -> list[str]:
    """The printed tables: per problem the points (optional), the summary and headline, and
    the runner's targets (optional)."""
    out = [f"Work-precision (CPU = time.process_time of the integration; h halved from h0 "
           f"until error < {ERROR_GOAL:g}, stagnation or the {result['budget_s']:g} s CPU "
           f"budget per run; Exudyn {result['exudyn']})"]
    for name, problem in result["problems"].items():
        out.append("")
        out.append(f"{problem['label']}: error = {problem['error']}; T = {problem['t_end']:g} "
                   f"s, h0 = {problem['h0']:.4g}")
        reference = problem.get("reference")
        if reference:
            out.append(f"reference: lobatto (4 stages) at h = {reference['h']:.3g}; differs "
                       f"from h = {reference['checked_against_h']:.3g} by "
                       f"{reference['difference']:.1e} (max-norm)")
        if with_points:
            out.extend(points_table(problem))
            out.append("")
        out.extend(summary_table(problem))
        out.extend(headline_lines(name, problem))
    if with_targets and result["targets"]:
        out.append("")
        out.extend(target_lines(result["targets"]))
    out.append(f"work-precision total: wall {result['wall_s']:.0f} s, CPU {result['cpu_s']:.0f} s")
    return out


# -- plot -------------------------------------------------------------------------------------
#: Line colours by scheme family (mbs) and one grey scale for Exudyn.
COLOURS = {"em": "#1f77b4", "em compiled": "#17becf", "em order 4": "#3b4cc0",
           "em order 6": "#08306b", "ggl-vi-a": "#9467bd", "rattle": "#2ca02c",
           "rattle order 4": "#006d2c", "rattle order 6": "#74c476", "hbvm": "#8c564b",
           "lobatto s=2": "#ff7f0e", "lobatto s=3": "#d62728", "lobatto s=4": "#e377c2",
           "lobatto s=3 compiled": "#ff9896", "lobatto s=4 compiled": "#f7b6d2",
           "lobatto s=5 compiled": "#7b4173",
           "em order 6 compiled": "#6baed6", "ggl-vi-a order 4": "#6a51a3",
           "ggl-vi-a order 6": "#bcbddc"}
MARKERS = "osD^v<>phX*Pd"


def plot(result: dict, path: str | Path) -> Path:
    """One panel per problem: CPU seconds (x, log) against error (y, log), a line with
    markers per scheme, Exudyn dashed; guide lines where the problem has them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = list(result["problems"].values())
    fig, axes = plt.subplots(1, len(problems), figsize=(6.5 * len(problems), 6.0),
                             squeeze=False)
    handles = {}
    for axis, problem in zip(axes[0], problems):
        for index, curve in enumerate(problem["curves"]):
            line = plot_curve(axis, curve, index)
            if line is not None:
                handles.setdefault(curve["scheme"], line)
        for level in problem["guides"]:
            axis.axhline(level, color="0.4", linestyle=":", linewidth=1.0)
            axis.annotate(f"{level:g}", (1.0, level), xycoords=("axes fraction", "data"),
                          ha="right", va="bottom", fontsize=8, color="0.3")
        axis.set(xscale="log", yscale="log", xlabel="CPU seconds (time.process_time)",
                 ylabel=problem["error_short"])
        axis.set_title(f"{problem['label']}, t = 0 .. {problem['t_end']:g} s", fontsize=11)
        axis.grid(True, which="major", alpha=0.3)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=6, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_curve(axis, curve: dict, index: int):
    """Draw one curve's points; None when it has none."""
    points = curve.get("points") or []
    if not points:
        return None
    exudyn = curve["code"] == "exudyn"
    colour = (str(0.15 + 0.18 * (index % 4)) if exudyn
              else COLOURS.get(curve["scheme"], f"C{index % 10}"))
    (line,) = axis.plot([p["cpu_s"] for p in points], [p["error"] for p in points],
                        linestyle="--" if exudyn else "-", marker=MARKERS[index % len(MARKERS)],
                        markersize=4, linewidth=1.2, color=colour, label=curve["scheme"])
    return line


# -- main -------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.work_precision",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_BUDGET_S:g} s CPU budget per run instead of "
                             f"{BUDGET_S:g} s")
    parser.add_argument("--budget", type=float, help="CPU seconds one run may take")
    parser.add_argument("--problems", default=",".join(PROBLEMS),
                        help=f"comma-separated subset of {', '.join(PROBLEMS)}")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                        help="run Exudyn (default: when it can be imported)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="write the plot (PNG) here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.problems.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        raise SystemExit(f"unknown problem(s) {unknown}; choose from {', '.join(PROBLEMS)}")
    budget = args.budget or (QUICK_BUDGET_S if args.quick else BUDGET_S)
    machine = timing.machine_info()
    result = measure(names, budget=budget, use_exudyn=args.peers)
    machine.update(exudyn=result["exudyn"], loadavg_end=os.getloadavg())
    print("\n".join([machine_line(machine), *report(result)]), flush=True)
    if args.plot:
        print(f"plot written to {plot(result, args.plot)}")
    if args.json:
        write_json(result, machine, args.json, sys.argv[1:] if argv is None else list(argv))
    return 0


def machine_line(machine: dict) -> str:
    """The machine facts of ``timing.machine_info`` on one line."""
    return (f"machine: {machine['cpu_model']}, {machine['cores']} cores; Python "
            f"{machine['python']}, numpy {machine['numpy']}, scipy {machine['scipy']}; mbs "
            f"{machine['mbs']} (sources sha256 {machine['mbs_source_sha256']}); Exudyn "
            f"{machine['exudyn']}; load average (1, 5, 15 min) "
            f"{load_text(machine['loadavg_start'])} at start, "
            f"{load_text(machine['loadavg_end'])} at end")


def load_text(load: Sequence[float] | None) -> str:
    return "?" if load is None else "/".join(f"{value:.2f}" for value in load)


def write_json(result: dict, machine: dict, path: str | Path, arguments: list[str]) -> None:
    document = {"command": ["python", "-m", "benchmarks.work_precision", *arguments],
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "machine": machine, **result}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(timing.jsonable(document), indent=1))
    print(f"JSON written to {path}")


if __name__ == "__main__":
    raise SystemExit(main())
