"""Benchmark runner: per-step cost, scaling, accuracy-vs-cost and peers (issue 7).

    python -m benchmarks                  # full suite (several minutes), peers if importable
    python -m benchmarks --quick          # smoke test, < 60 s
    python -m benchmarks --cases heavy_top,chains --no-peers --json out.json

What is measured (mbs rows; the peers' rows are measured the same way where they can be):

* per-step time: wall time (time.perf_counter) of ``mbs.simulate`` over ``steps`` fixed steps
  from the case's initial state, divided by ``steps``; the median over ``repeats`` runs made
  after one untimed warm-up run, the solvers of a case alternated run by run. It includes
  everything ``simulate`` does (solver set-up, Newton iterations, storing the trajectory).
  Whether VI-A is at least as fast as EM (target 1) is decided by the best (minimum) per-step
  time of each over the rounds: the two differ by a few per cent, and the shared host's
  interference, which only adds time, comes in bursts of single runs larger than that. The
  medians and the median of the per-round ratios VI-A / EM are printed alongside;
* Newton iterations per step: mean of ``Solution.stats["newton_iterations"]``;
* compile time: ``System.compile()`` (wall), measured once per case;
* peak memory: tracemalloc peak (Python objects and numpy buffers, not the C/Fortran workspace
  of SuperLU/LAPACK) of a separate, untimed compile ("c") and of a separate, untimed 2-step
  ``simulate`` of the compiled model ("r");
* chain scaling: the log-log slope of the per-step time from N = 100 to N = 1000, from the
  best run of each row (the slope of the medians is printed alongside);
* accuracy vs cost (heavy top, CPU time.process_time of the integration only, model build
  excluded): starting from h0, h is halved until (a) max_t |E(t) - E(0)| / |E(0)| < 1e-8 over
  T = 20 s, or (b) |phi(1) - phi_exact(1)| / l < 1e-6 (centre of mass against the exact steady
  precession, relative to the lever length l); the search stops early when the next run would
  exceed the CPU budget, when the error stagnates (over runs whose steps simulate() did not
  refine), or when the observed order predicts far more than the budget; then the row is
  "n/a" with an extrapolated estimate. The run that meets the
  criterion is repeated twice more when it is cheap (< 5 s) and the median CPU time reported.
  The energy rows also give the centre-of-mass error at T = 20 s, since a scheme that conserves
  energy exactly meets criterion (a) at any h where Newton converges;
* work-precision ("work-precision", :mod:`benchmarks.work_precision`): CPU seconds against
  error for every mbs scheme and order and Exudyn on the heavy top and the double pendulum;
  its heavy-top CPU times at CoM errors 1e-6 and 1e-10 give targets 5. With ``--quick`` only
  the heavy top with EM, Lobatto (4 stages) and Exudyn gen-alpha, at 0.25 s CPU per run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

import mbs
from benchmarks import cases, peers, work_precision
from benchmarks import ensemble as ensemble_benchmark
from benchmarks.timing import (
    COM_T,
    fmt_time,
    heavy_top_com_measure,
    jsonable,
    log,
    machine_info,
    mbs_timed_run,
    solver_for,
)
from mbs.backends import compiled

RESULTS = Path(__file__).resolve().parent / "results"
ENERGY_T, ENERGY_TOL, ENERGY_H0 = 20.0, 1e-8, 20.0 / 2**8
COM_TOL, COM_H0 = 1e-6, 1.0 / 2**6
ACCURACY_SOLVERS = ("em", "em:compiled", "ggl-vi-a", "rattle", "hbvm")
MAX_HALVINGS = 12
#: A successful accuracy run cheaper than this is repeated twice more (median CPU reported).
REPEAT_BELOW_S = 5.0
TARGETS = {"heavy_top_em_step_s": 150e-6, "heavy_top_em_compiled_step_s": 40e-6,
           "chain_exponent": 1.15, "chain1000_em_step_s": 40e-3}


def fmt_ratio(mbs_value: float | None, peer_value: float | None) -> str:
    """'mbs/peer = r (mbs r x slower|faster)'."""
    if not mbs_value or not peer_value:
        return "-"
    ratio = mbs_value / peer_value
    word = f"mbs {ratio:.1f}x slower" if ratio >= 1 else f"mbs {1 / ratio:.1f}x faster"
    return f"{ratio:.3g} ({word})"


# -- mbs per-step rows ------------------------------------------------------------------------
def traced_peak(function) -> float:
    """tracemalloc peak [MiB] of ``function()``."""
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def mbs_case(case: cases.Case, solvers, steps: int, repeats: int) -> list[dict]:
    """Per-step rows of the mbs solvers on one case.

    Each solver gets an untimed warm-up and memory run first; the timed runs then go round
    the solvers ``repeats`` times, one run of each per round, so that a slow phase of the
    machine hits every solver of the case alike (ratios between rows, e.g. VI-A / EM, are
    not decided by when a row happened to run)."""
    started = time.perf_counter()
    system = case.build()
    build_time = time.perf_counter() - started
    started = time.perf_counter()
    model = system.compile()
    compile_time = time.perf_counter() - started
    compile_peak = traced_peak(lambda: case.build().compile())
    rows, timed = [], {}
    for solver in solvers:
        log(f"  mbs {case.name} {solver}: warm-up")
        row = {"case": case.name, "label": case.label, "code": "mbs", "solver": solver,
               "n": model.n, "m": model.m, "dense": bool(model.dense), "h": case.h,
               "steps": steps, "repeats": repeats, "build_s": build_time,
               "compile_s": compile_time, "compile_peak_mib": compile_peak,
               "n_links": case.n_links}
        rows.append(row)
        try:
            first_kernel = compiled.compile_seconds() is None
            started = time.perf_counter()
            mbs.simulate(model, solver_for(solver), h=case.h, t_end=case.warm_steps * case.h)
            if solver.endswith(":compiled"):
                # first use in this process: numba compiles, or loads its on-disk cache
                row["kernel_compile_s"] = (compiled.compile_seconds() if first_kernel
                                           else None)
                row["warm_up_s"] = time.perf_counter() - started
            row["run_peak_mib"] = traced_peak(
                lambda s=solver: mbs.simulate(model, solver_for(s), h=case.h,
                                              t_end=2 * case.h))
            timed[solver] = ([], [])
        except Exception as exc:  # a failing solver gives an n/a row, never a failed run
            row["na"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    log(f"  mbs {case.name}: {repeats} rounds of {steps} steps per solver")
    for _ in range(repeats):
        for row in rows:
            solver = row["solver"]
            if solver not in timed:
                continue
            try:
                started = time.perf_counter()
                sol = mbs.simulate(model, solver_for(solver), h=case.h,
                                   t_end=steps * case.h)
                timed[solver][0].append((time.perf_counter() - started) / steps)
                timed[solver][1].append(float(np.mean(sol.stats["newton_iterations"])))
            except Exception as exc:
                row["na"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                del timed[solver]
    for row in rows:
        if row["solver"] in timed:
            times, iterations = timed[row["solver"]]
            row.update(per_step_s=statistics.median(times), per_step_all_s=times,
                       newton_per_step=statistics.median(iterations))
    return rows


# -- accuracy vs cost -------------------------------------------------------------------------
def halving_search(run, h0: float, t_end: float, tol: float, budget: float) -> dict:
    """Halve h from h0 until ``run(h)["error"] < tol`` (see the module docstring)."""
    history, h = [], h0
    reason = f"not reached after {MAX_HALVINGS} halvings"
    for _ in range(MAX_HALVINGS + 1):
        good = [r for r in history if r.get("error") is not None]
        if good:
            per_step = good[-1]["cpu_s"] / good[-1]["steps"]
            predicted = per_step * t_end / h
            if predicted > budget:
                reason = (f"next run (h = {h:.3g}) would need about {predicted:.0f} s CPU, "
                          f"over the {budget:g} s budget")
                break
            estimate = extrapolate(good, tol, t_end)
            previous = extrapolate(good[:-1], tol, t_end)
            settled = (estimate is not None and previous is not None
                       and abs(estimate["order"] - previous["order"]) < 0.25 * estimate["order"])
            if settled and estimate["cpu_s"] > 4 * budget:
                reason = (f"observed order {estimate['order']:.1f} predicts about "
                          f"{estimate['cpu_s']:.3g} s CPU, far over the {budget:g} s budget")
                break
            # runs whose steps simulate() refined (Newton failed at that h) took smaller
            # sub-steps: their errors are not those of their h
            unrefined = [r for r in good if not r.get("refined_steps")]
            if len(unrefined) >= 3 and all(
                    unrefined[-i]["error"] > unrefined[-i - 1]["error"] / 1.5 for i in (1, 2)):
                reason = (f"error stagnates at about {good[-1]['error']:.2g} (two halvings "
                          f"without improvement: Newton tolerance or round-off limited)")
                break
        result = run(h)
        result["h"] = h
        history.append(result)
        if "crash" in result:
            reason = f"crashed: {result['crash']}"
            break
        if result.get("error") is not None and result["error"] < tol:
            cpu_all = [result["cpu_s"]]
            if result["cpu_s"] < REPEAT_BELOW_S:  # cheap: median of three runs
                cpu_all += [run(h)["cpu_s"] for _ in range(2)]
            return {"reached": True, "h": h, "steps": result["steps"],
                    "cpu_s": statistics.median(cpu_all), "cpu_all_s": cpu_all,
                    "error": result["error"],
                    "com_error_end": result.get("com_error_end", result["error"]),
                    "newton_per_step": result.get("newton_per_step"), "history": history}
        h /= 2
    good = [r for r in history if r.get("error") is not None]
    return {"reached": False, "reason": reason, "history": history,
            "estimate": extrapolate(good, tol, t_end),
            "best_error": min((r["error"] for r in good), default=None)}


def extrapolate(good: list[dict], tol: float, t_end: float) -> dict | None:
    """h and CPU time to reach ``tol`` from the last two successful runs' observed order."""
    if len(good) < 2:
        return None
    a, b = good[-2], good[-1]
    if not (a["error"] > 0 and b["error"] > 0 and a["h"] > b["h"]):
        return None
    order = math.log(a["error"] / b["error"]) / math.log(a["h"] / b["h"])
    if order < 0.5:
        return None
    h_needed = b["h"] * (tol / b["error"]) ** (1.0 / order)
    return {"order": order, "h": h_needed, "steps": t_end / h_needed,
            "cpu_s": b["cpu_s"] * b["h"] / h_needed}


def mbs_energy_run(model, solver: str):
    def measure(sol) -> dict:
        energy = sol.energy()
        return {"error": float(np.max(np.abs(energy - energy[0])) / abs(energy[0])),
                "com_error_end": cases.com_error(sol.body("top").position[-1], ENERGY_T)}
    return mbs_timed_run(model, solver, ENERGY_T, measure)


def mbs_com_run(model: mbs.Model, solver: str, **options) -> Callable[[float], dict]:
    return mbs_timed_run(model, solver, COM_T, heavy_top_com_measure, **options)


def accuracy(solvers, exudyn_energy, exudyn_com, budget: float, use_exudyn: bool,
             exudyn_reason: str) -> list[dict]:
    model = cases.heavy_top().compile()
    rows = []
    criteria = (("energy", ENERGY_H0, ENERGY_T, ENERGY_TOL, mbs_energy_run,
                 peers.exudyn_heavy_top_energy, exudyn_energy),
                ("com", COM_H0, COM_T, COM_TOL, mbs_com_run, peers.exudyn_heavy_top_com,
                 exudyn_com))
    for criterion, h0, t_end, tol, mbs_run, exudyn_run, configs in criteria:
        for solver in solvers:
            log(f"  accuracy {criterion}: mbs {solver}")
            result = halving_search(mbs_run(model, solver), h0, t_end, tol, budget)
            rows.append({"criterion": criterion, "code": "mbs", "solver": solver,
                         "t_end": t_end, "tol": tol, "h0": h0, **result})
        for config in configs:
            row = {"criterion": criterion, "code": "exudyn", "solver": config, "t_end": t_end,
                   "tol": tol, "h0": h0}
            if not use_exudyn:
                row.update(reached=False, na=exudyn_reason)
            else:
                log(f"  accuracy {criterion}: exudyn {config}")
                with peers.silence():
                    result = halving_search(lambda h, c=config, f=exudyn_run, t=t_end:
                                            f(c, h, t), h0, t_end, tol, budget)
                row.update(result, note=peers.EXUDYN_CONFIGS[config][3])
            rows.append(row)
    return rows


# -- peers per-step rows ----------------------------------------------------------------------
def exudyn_rows(case: cases.Case, configs, steps: int, repeats: int, use: bool,
                reason: str) -> list[dict]:
    rows = []
    for config in configs:
        row = {"case": case.name, "label": case.label, "code": "exudyn", "solver": config,
               "h": case.h, "steps": steps, "repeats": repeats, "n_links": case.n_links}
        if not use:
            row["na"] = reason
        else:
            log(f"  exudyn {case.name} {config}: {repeats} x {steps} steps")
            with peers.silence():
                row.update(peers.exudyn_per_step(case.name, config, case.h, steps, repeats,
                                                 n_links=case.n_links))
        rows.append(row)
    return rows


def pydykit_rows(steps: int, repeats: int, use: bool, reason: str) -> tuple[list[dict], dict]:
    if not use:
        return [{"case": "four_particle", "label": "four-particle", "code": "pydykit",
                 "solver": "-", "na": reason}], {}
    log(f"  pydykit four-particle examples: {repeats} x {steps} steps")
    result = peers.pydykit_four_particle(steps=steps, repeats=repeats)
    if "na" in result:
        return [{"case": "four_particle", "label": "four-particle", "code": "pydykit",
                 "solver": "-", "na": result["na"]}], result
    rows = []
    for item in result["rows"]:
        row = {"case": "four_particle", "label": "four-particle", "code": "pydykit",
               "solver": item.get("integrator", item["example"]), "example": item["example"],
               "version": result.get("version")}
        row.update({k: v for k, v in item.items() if k not in ("example", "solver",
                                                                "integrator")})
        row["newton_solver"] = item.get("solver")
        if "peak_mem_mib" in item:
            row["run_peak_mib"] = item["peak_mem_mib"]
        rows.append(row)
    return rows, {k: v for k, v in result.items() if k != "rows"}


# -- report -----------------------------------------------------------------------------------
def per_step_table(rows: list[dict]) -> list[str]:
    lines = [f"{'case':<24} {'code':<8} {'solver / config':<26} {'n':>6} {'m':>6} {'h':>8} "
             f"{'steps':>7} {'per step':>11} {'Newton/step':>11} {'compile':>10} "
             f"{'mem c/r MiB':>13}"]
    lines.append("-" * len(lines[0]))
    for row in rows:
        step = f"{row['h']:.3g}" if row.get("h") is not None else "-"
        head = (f"{row['label']:<24} {row['code']:<8} {row['solver']:<26} "
                f"{row.get('n', '-')!s:>6} {row.get('m', '-')!s:>6} {step:>8} ")
        if "na" in row:
            lines.append(head + f"n/a ({row['na']})")
            continue
        compile_peak = row.get("compile_peak_mib")
        run_peak = row.get("run_peak_mib")
        memory = (f"{compile_peak:.1f}/" if compile_peak is not None else "-/") + (
            f"{run_peak:.2f}" if run_peak is not None else "-")
        newton = row.get("newton_per_step")
        lines.append(head + f"{row['steps']:>7} {fmt_time(row['per_step_s']):>11} "
                     f"{(f'{newton:.2f}' if newton is not None else '-'):>11} "
                     f"{fmt_time(row.get('compile_s')):>10} {memory:>13}")
        if row.get("kernel_compile_s") is not None:
            lines.append(f"{'':<24} {'':<8} (numba kernel compiled or loaded from its on-disk "
                         f"cache in {row['kernel_compile_s']:.2f} s, first use in the process)")
    return lines


def find(rows, case, code, solver):
    for row in rows:
        if (row["case"], row["code"], row["solver"]) == (case, code, solver) and "na" not in row:
            return row
    return None


def side_by_side(rows: list[dict]) -> tuple[list[str], list[dict]]:
    """Each mbs row against the fastest configuration of each peer on the same case."""
    lines, ratios = [], []
    for ours in rows:
        if ours["code"] != "mbs" or "na" in ours:
            continue
        for code in ("exudyn", "pydykit"):
            theirs_all = [r for r in rows if r["case"] == ours["case"] and r["code"] == code]
            timed = [r for r in theirs_all if "na" not in r]
            label = ours["label"]
            if not timed:
                if theirs_all and ours["solver"] == "em":
                    lines.append(f"{label:<24} mbs {ours['solver']:<9} vs {code}: "
                                 f"n/a ({theirs_all[0]['na']})")
                continue
            for theirs in (sorted(timed, key=lambda r: r["per_step_s"])[:1]
                           if code == "exudyn" else timed):
                ratio = ours["per_step_s"] / theirs["per_step_s"]
                ratios.append({"case": ours["case"], "mbs_solver": ours["solver"],
                               "peer": code, "peer_config": theirs["solver"],
                               "mbs_per_step_s": ours["per_step_s"],
                               "peer_per_step_s": theirs["per_step_s"],
                               "mbs_over_peer": ratio})
                lines.append(f"{label:<24} mbs {ours['solver']:<9} "
                             f"{fmt_time(ours['per_step_s']):>10} vs {code:<7} "
                             f"{theirs['solver']:<26} {fmt_time(theirs['per_step_s']):>10}   "
                             f"mbs/peer = {fmt_ratio(ours['per_step_s'], theirs['per_step_s'])}")
    return lines, ratios


def scaling(rows: list[dict]) -> tuple[list[str], list[dict]]:
    """Log-log slope of the per-step time from N = 100 to N = 1000, from the best run of each
    row (the target; bursts of interference on the shared host hit single runs, and the two
    chains are measured at different times) and from the medians (printed alongside)."""
    lines, fits = [], []
    keys = sorted({(r["code"], r["solver"]) for r in rows
                   if r["case"].startswith("chain") and "na" not in r})
    for code, solver in keys:
        chain_rows = {r["n_links"]: r for r in rows if r["case"].startswith("chain")
                      and (r["code"], r["solver"]) == (code, solver) and "na" not in r}
        by_n = {n: r["per_step_s"] for n, r in chain_rows.items()}
        best = {n: min(r.get("per_step_all_s") or [r["per_step_s"]])
                for n, r in chain_rows.items()}
        times = "  ".join(f"N={n}: {fmt_time(t)}" for n, t in sorted(by_n.items()))
        if 100 in by_n and 1000 in by_n:
            exponent = math.log(best[1000] / best[100]) / math.log(10.0)
            of_medians = math.log(by_n[1000] / by_n[100]) / math.log(10.0)
            fits.append({"code": code, "solver": solver, "n_from": 100, "n_to": 1000,
                         "exponent": exponent, "exponent_of_medians": of_medians,
                         "per_step_s": by_n, "best_per_step_s": best})
            lines.append(f"{code:<8} {solver:<22} exponent (N=100->1000) = {exponent:.3f} "
                         f"(of medians {of_medians:.3f})   {times}")
        else:
            lines.append(f"{code:<8} {solver:<22} exponent n/a (needs N=100 and N=1000)   "
                         f"{times}")
    return lines, fits


def accuracy_table(rows: list[dict]) -> tuple[list[str], list[dict]]:
    lines = [f"{'criterion':<34} {'code':<8} {'solver / config':<22} {'h':>10} {'steps':>8} "
             f"{'CPU':>9} {'error':>9} {'Newton/step':>11} {'CoM err at T':>12}"]
    lines.append("-" * len(lines[0]))
    names = {"energy": f"energy err < {ENERGY_TOL:g} over {ENERGY_T:g} s",
             "com": f"CoM err < {COM_TOL:g} at t = {COM_T:g} s"}
    ratios = []
    for row in rows:
        head = f"{names[row['criterion']]:<34} {row['code']:<8} {row['solver']:<22} "
        if row.get("reached"):
            newton = row.get("newton_per_step")
            lines.append(head + f"{row['h']:>10.4g} {row['steps']:>8} "
                         f"{row['cpu_s']:>8.3f}s {row['error']:>9.2e} "
                         f"{(f'{newton:.2f}' if newton is not None else '-'):>11} "
                         f"{row['com_error_end']:>12.2e}")
            continue
        if "na" in row:
            lines.append(head + f"n/a ({row['na']})")
            continue
        estimate = row.get("estimate")
        extra = (f"; est. h = {estimate['h']:.2g}, CPU = {estimate['cpu_s']:.3g} s "
                 f"(order {estimate['order']:.1f})" if estimate else "")
        best = row.get("best_error")
        best_text = f"; best error {best:.2e}" if best is not None else ""
        lines.append(head + f"n/a ({row['reason']}{best_text}{extra})")
    for criterion in ("energy", "com"):
        peer_best = min((r for r in rows if r["criterion"] == criterion
                         and r["code"] == "exudyn" and r.get("reached")),
                        key=lambda r: r["cpu_s"], default=None)
        lines.append("")
        if peer_best is None:
            lines.append(f"{names[criterion]}: no Exudyn configuration reached it in this run; "
                         f"no ratio")
            continue
        lines.append(f"{names[criterion]}: best Exudyn = {peer_best['solver']} "
                     f"({peer_best['cpu_s']:.3f} s CPU)")
        for row in rows:
            if row["criterion"] != criterion or row["code"] != "mbs":
                continue
            if row.get("reached"):
                cpu, kind = row["cpu_s"], "measured"
            elif row.get("estimate"):
                cpu, kind = row["estimate"]["cpu_s"], "estimated"
            else:
                lines.append(f"    mbs {row['solver']:<9} n/a")
                continue
            ratio = cpu / peer_best["cpu_s"]
            ratios.append({"criterion": criterion, "mbs_solver": row["solver"], "kind": kind,
                           "mbs_cpu_s": cpu, "peer": "exudyn",
                           "peer_config": peer_best["solver"],
                           "peer_cpu_s": peer_best["cpu_s"], "mbs_over_peer": ratio})
            lines.append(f"    mbs {row['solver']:<9} {cpu:>9.4g} s ({kind})  mbs/Exudyn = "
                         f"{fmt_ratio(cpu, peer_best['cpu_s'])}")
    return lines, ratios


def paired_ratio(row: dict, reference: dict) -> tuple[float, tuple[float, float]]:
    """Median and quartiles over the rounds of row / reference per-step time, the two runs
    of each round made back to back (see :func:`mbs_case`)."""
    ratios = sorted(a / b for a, b in zip(row["per_step_all_s"], reference["per_step_all_s"]))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), (quartiles[0], quartiles[2])


def targets(rows, fits, accuracy_rows, ensemble_row=None,
            work_precision_checks=()) -> tuple[list[str], list[dict]]:
    checks = []

    def check(name, measured, target, passed, detail=""):
        checks.append({"target": name, "measured": measured, "limit": target,
                       "pass": passed, "detail": detail})

    for suffix, label, limit in (("", "numpy path", "heavy_top_em_step_s"),
                                 (":compiled", "compiled backend",
                                  "heavy_top_em_compiled_step_s")):
        em = find(rows, "heavy_top", "mbs", "em" + suffix)
        via = find(rows, "heavy_top", "mbs", "ggl-vi-a" + suffix)
        if em:
            check(f"1. heavy top EM per step <= {fmt_time(TARGETS[limit]).strip()} ({label})",
                  em["per_step_s"], TARGETS[limit], em["per_step_s"] <= TARGETS[limit])
        if em and via and "per_step_s" in em and "per_step_s" in via:
            # Decided on the best of the rounds: the host's interference only adds time and
            # comes in bursts of single runs, larger than the few per cent between the two
            # schemes, so a burst in either run of a round (or in a few rounds of one row)
            # decides a paired ratio or a median; both are printed alongside.
            best_via, best_em = min(via["per_step_all_s"]), min(em["per_step_all_s"])
            ratio, spread = paired_ratio(via, em)
            check(f"1. heavy top VI-A at least as fast as EM ({label})", best_via, best_em,
                  best_via <= best_em,
                  f"best of {len(via['per_step_all_s'])} rounds; medians "
                  f"{fmt_time(via['per_step_s']).strip()} vs "
                  f"{fmt_time(em['per_step_s']).strip()}; paired VI-A/EM median {ratio:.3f} "
                  f"(quartiles {spread[0]:.3f}-{spread[1]:.3f})")
    energy_mbs = [r for r in accuracy_rows if r["criterion"] == "energy" and r["code"] == "mbs"
                  and r.get("reached")]
    energy_peer = [r for r in accuracy_rows if r["criterion"] == "energy"
                   and r["code"] == "exudyn" and r.get("reached")]
    if energy_mbs and energy_peer:
        ours = min(energy_mbs, key=lambda r: r["cpu_s"])
        theirs = min(energy_peer, key=lambda r: r["cpu_s"])
        check("2. energy < 1e-8 over 20 s: less CPU than Exudyn's best", ours["cpu_s"],
              theirs["cpu_s"], ours["cpu_s"] < theirs["cpu_s"],
              f"mbs {ours['solver']} at h = {ours['h']:.3g} (CoM err at 20 s "
              f"{ours['com_error_end']:.1e}) vs Exudyn {theirs['solver']} at h = "
              f"{theirs['h']:.3g} ({theirs['com_error_end']:.1e})")
    for fit in fits:
        if fit["code"] == "mbs":
            check(f"3. chain per-step exponent <= 1.15 ({fit['solver']})", fit["exponent"],
                  TARGETS["chain_exponent"], fit["exponent"] <= TARGETS["chain_exponent"],
                  f"best runs; of medians {fit['exponent_of_medians']:.3f}")
    em1000 = find(rows, "chain1000", "mbs", "em")
    if em1000:
        check("3. chain N=1000 EM per step <= 40 ms", em1000["per_step_s"],
              TARGETS["chain1000_em_step_s"],
              em1000["per_step_s"] <= TARGETS["chain1000_em_step_s"])
    if ensemble_row is not None:
        check(f"4. ensemble of {ensemble_row['count']} heavy tops / single run <= 20x",
              ensemble_row["ratio"], 20.0, ensemble_row["ratio"] <= 20.0,
              f"{1e6 * ensemble_row['per_member_step_s']:.1f} us per member-step vs "
              f"{1e6 * ensemble_row['single_per_step_s']:.0f} us single "
              f"({ensemble_row['backend']}, h = {ensemble_row['h']:.3g})")
    checks.extend(work_precision_checks)  # "5.": from benchmarks.work_precision
    lines = []
    for c in checks:
        unit = c.get("unit") or ("ratio" if c["target"].startswith(
            ("3. chain per-step exponent", "4.")) else "s")
        measured = ("-" if c["measured"] is None else fmt_time(c["measured"]) if unit == "s"
                    else f"{c['measured']:.3f}")
        limit = fmt_time(c["limit"]) if unit == "s" else f"{c['limit']:.2f}"
        status = {True: "PASS", False: "FAIL", None: "n/a "}[c["pass"]]
        lines.append(f"{status}  {c['target']:<58} measured "
                     f"{measured:>10}  limit {limit:>10}  {c['detail']}")
    return lines, checks


def run_work_precision(quick: bool, use_exudyn: bool) -> dict:
    """The work-precision section (``benchmarks.work_precision``): every scheme on both
    problems, or with ``quick`` the heavy top with EM, Lobatto (4 stages) and one Exudyn
    configuration at a small budget."""
    wp = work_precision
    if quick:
        return wp.measure(("heavy_top",), wp.SMOKE_SCHEMES, wp.SMOKE_EXUDYN_CONFIGS,
                          budget=wp.QUICK_BUDGET_S, use_exudyn=use_exudyn)
    return wp.measure(use_exudyn=use_exudyn)


def plot_work_precision(result: dict, json_path: Path) -> None:
    """Write the work-precision plot beside the JSON (skipped without matplotlib)."""
    wp = work_precision
    try:
        log(f"  work-precision plot: {wp.plot(result, json_path.with_name('work-precision.png'))}")
    except ImportError as exc:
        log(f"  work-precision plot skipped: {exc}")


# -- main -------------------------------------------------------------------------------------
ALIASES = {"chains": ("chain10", "chain100", "chain1000")}
#: Cases that are not per-step rows of :data:`cases.CASES`.
SECTIONS = ("accuracy", "ensemble", "work-precision")
ALL = (*cases.CASES, *SECTIONS)


def parse_cases(text: str | None, quick: bool) -> list[str]:
    if text is None:
        return [*cases.QUICK, *SECTIONS] if quick else list(ALL)
    chosen = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        for item in ALIASES.get(name, (name,)):
            if item not in ALL:
                raise SystemExit(f"unknown case {item!r}; choose from "
                                 f"{', '.join([*ALL, *ALIASES])}")
            if item not in chosen:
                chosen.append(item)
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="mbs benchmark suite: per-step cost, chain scaling, accuracy vs cost and "
                    "peers (Exudyn, pydykit).")
    parser.add_argument("--quick", action="store_true",
                        help="small subset for a smoke test (< 60 s)")
    parser.add_argument("--cases", help=f"comma-separated subset of {', '.join(ALL)} "
                                        f"(alias: chains)")
    parser.add_argument("--json", default=str(RESULTS / "latest.json"),
                        help="where to write the results (default benchmarks/results/latest.json)")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                        help="run the peers (default: on when Exudyn or a pydykit interpreter "
                             "is found)")
    parser.add_argument("--budget", type=float, default=None,
                        help="CPU seconds one accuracy run may take (default 60, --quick 5)")
    args = parser.parse_args(argv)
    chosen = parse_cases(args.cases, args.quick)
    budget = args.budget if args.budget is not None else (5.0 if args.quick else 60.0)

    exudyn_ok, exudyn_info = peers.exudyn_status()
    pydykit_ok, pydykit_info = peers.pydykit_status()
    use_peers = (exudyn_ok or pydykit_ok) if args.peers is None else args.peers
    if use_peers or args.peers is None:  # on, or off because neither peer was found
        exudyn_reason, pydykit_reason = exudyn_info, pydykit_info
    else:
        exudyn_reason = pydykit_reason = "peers disabled (--no-peers)"
    use_exudyn, use_pydykit = use_peers and exudyn_ok, use_peers and pydykit_ok

    started, cpu_started = time.perf_counter(), time.process_time()
    machine = machine_info()
    machine["exudyn"] = exudyn_info if exudyn_ok else None
    log(f"benchmarks: cases {', '.join(chosen)}; peers: exudyn "
        f"{'on' if use_exudyn else 'off'}, pydykit {'on' if use_pydykit else 'off'}")

    rows: list[dict] = []
    pydykit_meta: dict = {}
    for name in chosen:
        if name in SECTIONS:
            continue
        case = cases.CASES[name]
        solvers, steps, repeats = case.solvers, case.steps, case.repeats
        if args.quick and name in cases.QUICK:
            solvers, steps, repeats = cases.QUICK[name]
        rows.extend(mbs_case(case, solvers, steps, repeats))
        # the peer integrates as many steps as mbs: the per-step times of runs of different
        # lengths would carry different shares of each code's fixed cost per run
        if name == "heavy_top":
            rows.extend(exudyn_rows(case, peers.EXUDYN_STEP_CONFIGS[:1] if args.quick
                                    else peers.EXUDYN_STEP_CONFIGS,
                                    steps, 3 if args.quick else 5, use_exudyn, exudyn_reason))
        elif name.startswith("chain"):
            rows.extend(exudyn_rows(case, peers.EXUDYN_CHAIN_CONFIGS[:1] if args.quick
                                    else peers.EXUDYN_CHAIN_CONFIGS,
                                    steps, 2 if args.quick else 3, use_exudyn, exudyn_reason))
        elif name == "four_particle":
            found, pydykit_meta = pydykit_rows(3 if args.quick else 9, 1 if args.quick else 3,
                                               use_pydykit, pydykit_reason)
            rows.extend(found)
        else:
            rows.append({"case": name, "label": case.label, "code": "peers", "solver": "-",
                         "na": "not modelled in a peer by this runner (Exudyn rows: heavy "
                               "top and chains; pydykit: four-particle)"})

    accuracy_rows: list[dict] = []
    if "accuracy" in chosen:
        if args.quick:
            accuracy_rows = accuracy(("em",), ("trap-idx2 tight-mod",), (), budget,
                                     use_exudyn, exudyn_reason)
        else:
            accuracy_rows = accuracy(ACCURACY_SOLVERS, peers.EXUDYN_ENERGY_CONFIGS,
                                     peers.EXUDYN_COM_CONFIGS, budget, use_exudyn,
                                     exudyn_reason)

    ensemble_row = None
    if "ensemble" in chosen:
        count, steps = (50, 20) if args.quick else (1000, 100)
        log(f"  ensemble: {count} heavy tops x {steps} steps (and one single run)")
        ensemble_row = ensemble_benchmark.measure(count, steps)

    work_precision_result = None
    if "work-precision" in chosen:
        work_precision_result = run_work_precision(args.quick, use_exudyn)
        if not args.quick:
            plot_work_precision(work_precision_result, Path(args.json))

    try:
        machine["loadavg_end"] = os.getloadavg()
    except OSError:
        machine["loadavg_end"] = None
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started

    out = []
    out.append("=" * 118)
    out.append(f"mbs benchmarks ({datetime.datetime.now().isoformat(timespec='seconds')})  "
               f"command: python -m benchmarks {' '.join(sys.argv[1:] if argv is None else argv)}")
    out.append(f"mbs {machine['mbs']} (source sha256 {machine['mbs_source_sha256']})")
    out.append(f"machine: {machine['cpu_model']}, {machine['cores']} cores; Python "
               f"{machine['python']}, numpy {machine['numpy']}, scipy {machine['scipy']}; BLAS "
               + ", ".join(f"{b['internal_api']} {b['version']} ({b['num_threads']} threads, "
                           f"{Path(b['filepath'] or '?').name})"
                           for b in machine["blas"] if isinstance(b, dict))
               + f"; load average at start {machine['loadavg_start']}")
    exudyn_text = exudyn_info if use_exudyn else f"n/a ({exudyn_reason})"
    pydykit_text = (f"{pydykit_meta.get('version', '?')} via {pydykit_info}" if use_pydykit
                    else f"n/a ({pydykit_reason})")
    out.append(f"peers: exudyn {exudyn_text}; pydykit {pydykit_text}")
    out.append("=" * 118)
    out.append("Per-step cost (median of repeats after a warm-up run, solvers of a case "
               "alternated; wall time / steps; mem: tracemalloc peak of compile / of a 2-step "
               "run)")
    out.extend(per_step_table(rows))
    side_lines, step_ratios = side_by_side(rows)
    if side_lines:
        out.append("")
        out.append("Side by side, per step, against the fastest Exudyn configuration of the "
                   "case and each pydykit example (mbs/peer > 1: mbs slower)")
        out.extend(side_lines)
    scale_lines, fits = scaling(rows)
    if scale_lines:
        out.append("")
        out.append("Chain scaling: log-log slope of the per-step time from N = 100 to N = 1000")
        out.extend(scale_lines)
    accuracy_ratios = []
    if accuracy_rows:
        out.append("")
        out.append(f"Accuracy vs cost, heavy top (CPU time of the integration, time.process_time;"
                   f" h halved from h0 = {ENERGY_H0:.4g} (energy) / {COM_H0:.4g} (CoM); "
                   f"budget {budget:g} s CPU per run; CoM error = |phi - phi_exact| / l)")
        acc_lines, accuracy_ratios = accuracy_table(accuracy_rows)
        out.extend(acc_lines)
    if ensemble_row is not None:
        out.append("")
        out.append(f"Ensemble: {ensemble_row['count']} heavy tops x {ensemble_row['steps']} EM "
                   f"steps (h = {ensemble_row['h']:.3g}): {ensemble_row['ensemble_s']:.2f} s, "
                   f"{1e6 * ensemble_row['per_member_step_s']:.1f} us per member-step "
                   f"({ensemble_row['backend']} kernels, "
                   f"{ensemble_row['factorizations_per_member_step']:.2f} LU per member-step); "
                   f"single run {1e6 * ensemble_row['single_per_step_s']:.0f} us per step; "
                   f"ratio {ensemble_row['ratio']:.1f}; energy drift "
                   f"{ensemble_row['energy_drift']:.1e}")
    if work_precision_result is not None:
        from benchmarks import work_precision

        out.append("")
        out.extend(work_precision.report(work_precision_result, with_points=False,
                                                with_targets=False))
    target_lines, checks = targets(rows, fits, accuracy_rows, ensemble_row,
                                   (work_precision_result or {}).get("targets", ()))
    out.append("")
    out.append("Issue 7 targets (this run)")
    out.extend(target_lines)
    out.append("")
    out.append(f"total: wall {wall:.0f} s, CPU {cpu:.0f} s; load average at end "
               f"{machine['loadavg_end']}")
    print("\n".join(out), flush=True)

    report = {"command": ["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None
                                                          else argv)],
              "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": machine, "quick": args.quick, "cases": chosen,
              "peers": {"exudyn": exudyn_info if use_exudyn else f"n/a ({exudyn_reason})",
                        "pydykit": ({**pydykit_meta, "interpreter": pydykit_info}
                                    if use_pydykit else f"n/a ({pydykit_reason})")},
              "methods": {"per_step": "median over repeats of perf_counter wall time of one "
                                      "run / steps, after one warm-up run; the solvers of a "
                                      "case alternated run by run",
                          "memory": "tracemalloc peak in MiB (Python + numpy allocations; not "
                                    "C/Fortran workspaces or Exudyn's C++ heap)",
                          "accuracy": "time.process_time of the integration; h halved from h0",
                          "com_error": "|phi(T) - phi_exact(T)| / l"},
              "per_step": rows, "side_by_side": step_ratios, "scaling": fits,
              "accuracy": accuracy_rows, "accuracy_ratios": accuracy_ratios,
              "ensemble": ensemble_row, "work_precision": work_precision_result,
              "targets": checks, "wall_s": wall, "cpu_s": cpu, "table": out}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(report), indent=1))
    print(f"JSON written to {path}")
    return 0
