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

A diagnostic section repeats EM at h = 0.675 with a workaround that lives in this script only
(``FallbackEM``): whenever the library's Newton iteration fails, the EM equations (84) are
solved by Levenberg-Marquardt instead. It separates the stability of the scheme from the
convergence of Newton's method at very large steps.

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
import scipy.optimize

import mbs
from mbs.solvers import GGLVI, EnergyMomentum, Rattle
from mbs.solvers.base import StepResult
from mbs.solvers.newton import NewtonConvergenceError

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
        return Rattle(initial_guess=guess)
    raise ValueError(scheme)


# -- diagnostic workaround (script only) ----------------------------------------------------
def em_residual(model: mbs.Model, q0, p0, h, x) -> np.ndarray:
    """The EM equations (84) of seed 003 with (84c) eliminated, x = (q1, p1, lambda, gamma),
    written here from the paper independently of the library's solver."""
    n, m = model.n, model.m
    q1, p1, lam, gam = x[:n], x[n:2 * n], x[2 * n:2 * n + m], x[2 * n + m:]
    q_mid, p_mid = 0.5 * (q0 + q1), 0.5 * (p0 + p1)
    g_mid = model.discrete_jacobian_matrix(q0, q1)
    mass = model.mass_operator()
    return np.concatenate([
        mass @ (q1 - q0) / h - p_mid - g_mid.T @ gam,
        (p1 - p0) / h + model.potential_discrete_gradient(q0, q1) + g_mid.T @ lam
        + model.hessian_product_matrix(q_mid, gam) @ model.apply_inverse_mass(p_mid),
        model.constraints(q1),
        model.velocity_constraints(q1, p1)])


def fd_newton(residual, x: np.ndarray, max_iterations: int = 15) -> np.ndarray | None:
    """Newton's method with a central-difference Jacobian; None when it does not converge."""
    for _ in range(max_iterations):
        jac = np.column_stack([(residual(x + e) - residual(x - e)) / 2e-7
                               for e in 1e-7 * np.eye(x.size)])
        try:
            delta = np.linalg.solve(jac, -residual(x))
        except np.linalg.LinAlgError:
            return None
        x = x + delta
        if not np.all(np.isfinite(x)):
            return None
        if np.max(np.abs(delta)) <= 1e-11 * max(1.0, float(np.max(np.abs(x)))):
            return x
    return None


class FallbackEM(EnergyMomentum):
    """The library's EM; when its Newton iteration fails, the same equations (84) are solved
    (i) by continuation in the step size, h' = s h with s increased from 0 to 1, following
    the root branch that starts at the trivial solution for h' -> 0, and if that stalls
    (ii) by Levenberg-Marquardt (scipy.optimize.least_squares) from the simple guess, the
    advanced guess and a linear extrapolation of the last step, polished by Newton.
    Diagnostic only: it tells whether a failure is the scheme's (no root of its equations)
    or the nonlinear solver's."""

    def start(self, model, q0, p0, h):
        super().start(model, q0, p0, h)
        self.fallback_steps = {"continuation": 0, "levenberg-marquardt": 0}
        self._previous = None

    def step(self, q0, p0):
        try:
            result = super().step(q0, p0)
        except NewtonConvergenceError:
            result = self._fallback(q0, p0)
        self._previous = (q0, p0)
        return result

    def _fallback(self, q0, p0) -> StepResult:
        model, n, m = self.model, self.model.n, self.model.m
        x = self._continuation(q0, p0)
        if x is not None:
            self.fallback_steps["continuation"] += 1
        else:
            x = self._levenberg_marquardt(q0, p0)
            self.fallback_steps["levenberg-marquardt"] += 1
        q1, p1 = x[:n], x[n:2 * n]
        self._lam = x[2 * n:2 * n + m]
        enforced = (float(np.max(np.abs(model.constraints(q1)))),
                    float(np.max(np.abs(model.velocity_constraints(q1, p1)))))
        return StepResult(q1, p1, model.apply_inverse_mass(0.5 * (p0 + p1)), self._lam.copy(),
                          x[2 * n + m:], self.newton.max_iterations, enforced)

    def _continuation(self, q0, p0) -> np.ndarray | None:
        model, h = self.model, self.h
        x = np.concatenate([q0, p0, self._lam, np.zeros(model.m)])
        s, ds = 0.0, 0.05
        while s < 1.0:
            s_new = min(1.0, s + ds)
            y = fd_newton(lambda z, hs=h * s_new: em_residual(model, q0, p0, hs, z), x)
            if y is None:
                ds /= 2
                if ds < 1e-4:
                    return None
                continue
            x, s, ds = y, s_new, min(2 * ds, 0.25)
        return x

    def _levenberg_marquardt(self, q0, p0) -> np.ndarray:
        model, h, m = self.model, self.h, self.model.m

        def residual(x):
            return em_residual(model, q0, p0, h, x)

        starts = [np.concatenate([q0, p0]),
                  np.concatenate([q0 + h * model.apply_inverse_mass(p0), p0])]
        if self._previous is not None:
            starts.append(np.concatenate([2 * q0 - self._previous[0],
                                          2 * p0 - self._previous[1]]))
        for start in starts:
            x = np.concatenate([start, self._lam, np.zeros(m)])
            x = scipy.optimize.least_squares(residual, x, method="lm", xtol=1e-15, ftol=1e-15,
                                             gtol=1e-15).x
            x = fd_newton(residual, x)
            if x is not None and float(np.max(np.abs(residual(x)))) <= 1e-9:
                return x
        raise NewtonConvergenceError("Newton, continuation in h and Levenberg-Marquardt all "
                                     "failed", np.inf, np.inf, 0, "no root found")


# -- runs -----------------------------------------------------------------------------------
def run(model, solver, h: float, t_end: float) -> dict:
    """Integrate to the first grid point at or after t_end; failures are caught."""
    t_end = h * np.ceil(t_end / h - 1e-9)
    started, cpu_started = time.perf_counter(), time.process_time()
    failure = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            sol = mbs.simulate(model, solver, h=h, t_end=t_end)
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
    print("EM at h = 0.675 to T = 1000; when Newton fails, the EM equations are solved by "
          "continuation in h or Levenberg-Marquardt\n(script-only diagnostic, not library "
          "behaviour)")
    for guess in GUESSES:
        solver = FallbackEM(initial_guess=guess)
        result = run(model, solver, 0.675, 1000.0)
        print(describe(f"EM + fallback ({guess})", result))
        sol = result["solution"]
        res = sol.constraint_residuals()
        linear, angular = sol.linear_momentum(), sol.angular_momentum()
        used = ", ".join(f"{k} {v}" for k, v in solver.fallback_steps.items())
        print(f"{'':<28} fallback steps: {used} of {result['steps']} (each counted as "
              f"{solver.newton.max_iterations} iterations); max |g| = "
              f"{np.max(res['position']):.2e}, max |G M^-1 p| = {np.max(res['velocity']):.2e}, "
              f"max |L-L0| = {np.max(np.abs(linear - linear[0])):.2e}, max |J-J0| = "
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
