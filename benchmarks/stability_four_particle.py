"""Stability and cost study of the four-particle system (seed 003, section 6.3, Table 2).

The paper reports: for h <= 0.04 all schemes stay stable until at least T = 1000; VI-S and VI-B
blow up in energy at h = 0.05; VI-A blows up at about t = 55 with h = 0.25; EM stays stable even
at h = 0.675. Table 2 compares mean Newton iterations per step (and cost relative to VI-S) with
the "simple" (values at t^n) and the "advanced" (q^n + h v^n) initial guess.

This script reruns those cases with the library's solvers, catches :class:`mbs.SolverError`
and reports, per run: whether it reached T, where and why it stopped, the largest relative
energy error, the first times the relative energy error exceeds 1e-2, 1e-1 and 1, and the mean
Newton iterations per step. RATTLE is included as a baseline; its Newton iteration runs on the
multipliers only and starts from the previous multipliers, so the initial-guess option has no
effect on it.

A last section repeats EM at h = 0.675 with ``simulate(..., on_failure="refine")``: a step whose
Newton iteration fails (plain Newton does at t = 52.65 / 97.2) is retried as sub-steps. It
separates the stability of the scheme from the convergence of Newton's method at large steps.

Run: ``python benchmarks/stability_four_particle.py`` (a few minutes; ``--quick`` skips the
T = 1000 runs at h = 0.04 and 0.05).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mbs
from mbs.solvers import GGLVI, EnergyMomentum, Rattle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from four_particle import build  # noqa: E402

THRESHOLDS = (1e-2, 1e-1, 1.0, 10.0)
GUESSES = ("simple", "advanced")


def make(scheme: str, guess: str):
    """A solver instance by the paper's scheme name."""
    if scheme == "VI-S":
        return GGLVI(variant="S", initial_guess=guess)
    if scheme == "VI-A":
        return GGLVI(variant="A", initial_guess=guess)
    if scheme == "VI-B":
        return GGLVI(variant="B", initial_guess=guess)
    if scheme == "EM":
        return EnergyMomentum(initial_guess=guess)
    if scheme == "RATTLE":
        return Rattle()
    raise ValueError(scheme)


# -- runs -----------------------------------------------------------------------------------
def run(model, solver, h: float, t_end: float, **options) -> dict:
    """Integrate to the first grid point at or after t_end; failures are caught."""
    t_end = h * np.ceil(t_end / h - 1e-9)
    started, cpu_started = time.perf_counter(), time.process_time()
    failure = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            sol = mbs.simulate(model, solver, h=h, t_end=t_end, **options)
        except mbs.SolverError as error:
            sol = error.solution
            cause = error.__cause__
            reason = str(cause).split(" (last")[0] if cause is not None else str(error)
            failure = f"step {error.step} (t = {error.time:.6g} -> {error.time + h:.6g}): {reason}"
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    energy = sol.energy()
    rel = np.abs(energy - energy[0]) / abs(energy[0])
    first = {}
    for level in THRESHOLDS:
        hits = np.nonzero(rel > level)[0]
        first[level] = float(sol.t[hits[0]]) if hits.size else None
    iterations = sol.stats["newton_iterations"]
    return {"t_reached": float(sol.t[-1]), "failure": failure, "max_rel_energy": float(rel.max()),
            "first": first, "iterations": float(np.mean(iterations)) if iterations.size else None,
            "wall": wall, "cpu": cpu, "steps": sol.t.size - 1, "solution": sol}


def describe(label: str, result: dict) -> str:
    first = "  ".join(f">{level:g}: " + ("never" if t is None else f"t={t:.4g}")
                      for level, t in result["first"].items())
    iterations = ("n/a" if result["iterations"] is None else f"{result['iterations']:.2f}")
    status = ("completed" if result["failure"] is None
              else f"FAILED at {result['failure']}")
    return (f"{label:<28} reached t = {result['t_reached']:<8.6g} steps = {result['steps']:<6d} "
            f"max |E-E0|/E0 = {result['max_rel_energy']:.3e}  mean Newton it. = {iterations}"
            f"  CPU {result['cpu']:.1f} s\n{'':<28} first |E-E0|/E0 {first}\n"
            f"{'':<28} {status}")


def table2(model) -> None:
    print("=" * 100)
    print("Table 2 comparison: h = 0.01, T = 10, mean Newton iterations per step and CPU time "
          "relative to VI-S (simple guess)")
    print(f"{'scheme':<8} {'simple: iter':>13} {'t/t(VI-S)':>10} {'advanced: iter':>15} "
          f"{'t/t(VI-S)':>10}   max |E-E0|/E0 (advanced)")
    rows, base = {}, None
    for scheme in ("VI-S", "VI-A", "VI-B", "EM", "RATTLE"):
        rows[scheme] = {g: run(model, make(scheme, g), 0.01, 10.0) for g in GUESSES}
        if base is None:
            base = rows[scheme]["simple"]["cpu"]
    for scheme, by_guess in rows.items():
        s, a = by_guess["simple"], by_guess["advanced"]
        note = "  (guess not used)" if scheme == "RATTLE" else ""
        fail = "" if s["failure"] is None and a["failure"] is None else "  FAILED"
        print(f"{scheme:<8} {s['iterations']:>13.2f} {s['cpu'] / base:>10.2f} "
              f"{a['iterations']:>15.2f} {a['cpu'] / base:>10.2f}   "
              f"{a['max_rel_energy']:.3e}{note}{fail}")


def stability(model, cases) -> None:
    for h, t_end, schemes, guesses in cases:
        print("=" * 100)
        print(f"h = {h}, T = {t_end}")
        for scheme in schemes:
            for guess in guesses:
                print(describe(f"{scheme} ({guess})", run(model, make(scheme, guess), h, t_end)))


def em_diagnostics(model) -> None:
    print("=" * 100)
    print("EM at h = 0.675 to T = 1000 with simulate(..., on_failure='refine'): a step whose "
          "Newton iteration fails is retried as 2, 4, ... sub-steps on the same output grid")
    for guess in GUESSES:
        result = run(model, make("EM", guess), 0.675, 1000.0, on_failure="refine")
        print(describe(f"EM + refine ({guess})", result))
        sol = result["solution"]
        res = sol.constraint_residuals()
        linear, angular = sol.linear_momentum(), sol.angular_momentum()
        print(f"{'':<28} refined steps: {len(sol.stats['refined_steps'])} of {result['steps']}; "
              f"max |g| = {np.max(res['position']):.2e}, max |G M^-1 p| = "
              f"{np.max(res['velocity']):.2e}, max |L-L0| = "
              f"{np.max(np.abs(linear - linear[0])):.2e}, max |J-J0| = "
              f"{np.max(np.abs(angular - angular[0])):.2e}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="skip the T = 1000 runs at h = 0.04 and h = 0.05")
    args = parser.parse_args(argv)
    model = build().compile()
    started, cpu_started = time.perf_counter(), time.process_time()
    table2(model)
    all_schemes = ("VI-S", "VI-A", "VI-B", "EM", "RATTLE")
    cases = [
        (0.05, 1000.0, ("VI-S", "VI-B"), GUESSES),          # paper: energy blow-up
        (0.25, 1000.0, ("VI-A",), GUESSES),                 # paper: blow-up at about t = 55
        (0.675, 1000.0, ("EM",), GUESSES),                  # paper: stable
    ]
    if not args.quick:
        cases = [
            (0.04, 1000.0, all_schemes, ("advanced",)),     # paper: all stable to T = 1000
            (0.05, 1000.0, ("VI-A", "EM", "RATTLE"), ("advanced",)),
        ] + cases + [(0.25, 1000.0, ("EM",), GUESSES)]
    stability(model, cases)
    em_diagnostics(model)
    print("=" * 100)
    print(f"total wall time {time.perf_counter() - started:.0f} s, CPU time "
          f"{time.process_time() - cpu_started:.0f} s")


if __name__ == "__main__":
    main()
