"""Ensemble of heavy tops: one vectorised EM run against a single run of the same length.

Usage: python -m benchmarks.ensemble [K] [steps] [h in us]   (default 1000 members, 100 steps,
h = 2000 us; medians of 5 alternated runs of each)
Issue 7 target: total time <= 20x a single run of the same length.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import mbs
from benchmarks.cases import heavy_top


def states(model: mbs.Model, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The initial state rotated about the vertical, momenta scaled by 1 +- 10 %."""
    q0, p0 = model.initial_state()
    rng = np.random.default_rng(1)
    qs, ps = [], []
    for _ in range(count):
        rotation = mbs.rotation_about_z(rng.uniform(0.0, 2.0 * np.pi))
        qs.append((q0.reshape(4, 3) @ rotation.T).ravel())
        ps.append(((1 + 0.1 * rng.standard_normal()) * p0.reshape(4, 3) @ rotation.T).ravel())
    return np.array(qs), np.array(ps)


def measure(count: int = 1000, steps: int = 100, h_us: int = 2000, repeats: int = 5) -> dict:
    """Wall times of one vectorised EM run of ``count`` tops and of a single run (numpy
    path), same length, medians of ``repeats`` alternated runs; the ratio is the issue-7
    target (<= 20)."""
    model = heavy_top().compile()
    q0, p0 = states(model, count)
    h = 1e-6 * h_us
    mbs.simulate(model, "em", h=h, t_end=h * 5)  # warm-up
    mbs.simulate_ensemble(model, (q0[:2], p0[:2]), h=h, t_end=h * 2)  # loads compiled kernels
    singles, totals = [], []
    for _ in range(repeats):  # alternated, so that machine drift hits both alike
        start = time.perf_counter()
        mbs.simulate(model, "em", h=h, t_end=h * steps, initial_state=(q0[0], p0[0]))
        singles.append(time.perf_counter() - start)
        start = time.perf_counter()
        ensemble = mbs.simulate_ensemble(model, (q0, p0), h=h, t_end=h * steps)
        totals.append(time.perf_counter() - start)
    single, total = float(np.median(singles)), float(np.median(totals))
    energy = ensemble.energy()
    return {"count": count, "steps": steps, "h": h, "ensemble_s": total, "single_s": single,
            "ensemble_all_s": totals, "single_all_s": singles,
            "ratio": total / single, "per_member_step_s": total / (count * steps),
            "single_per_step_s": single / steps,
            "energy_drift": float(np.max(np.abs(energy - energy[:, :1])
                                         / np.abs(energy[:, :1]))),
            "newton_iterations": float(np.mean(ensemble.stats["newton_iterations"])),
            "factorizations_per_member_step": ensemble.stats["factorizations"] / (count * steps),
            "backend": ensemble.stats["backend"]}


def main(count: int = 1000, steps: int = 100, h_us: int = 2000) -> None:
    r = measure(count, steps, h_us)
    print(f"{count} heavy tops x {steps} EM steps (medians of {len(r['single_all_s'])} alternated "
          f"runs): ensemble {r['ensemble_s']:.2f} s, single run "
          f"{r['single_s']:.3f} s, ratio {r['ratio']:.1f} (target <= 20); per member and step "
          f"{1e6 * r['per_member_step_s']:.1f} us (single run "
          f"{1e6 * r['single_per_step_s']:.0f} us); max energy drift {r['energy_drift']:.1e}; "
          f"Newton it. {r['newton_iterations']:.2f} (slowest member), "
          f"{r['factorizations_per_member_step']:.2f} factorisations per member and step, "
          f"backend {r['backend']}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
