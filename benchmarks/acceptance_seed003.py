"""Measured numbers for the seed-003 acceptance checks (3D pendulum, heavy top).

Usage: python -m benchmarks.acceptance_seed003
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import mbs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import heavy_top as ht  # noqa: E402
import pendulum_3d  # noqa: E402

SCHEMES = ("em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle")


def pendulum() -> None:
    model = pendulum_3d.build().compile()
    print("3D pendulum, h = 0.05, T = 10")
    print(f"{'scheme':<10} {'max|dE|/E0':>11} {'max|dJ3|':>10} {'max|g| end':>11} "
          f"{'max|g^v| end':>13} {'enforced g':>11} {'enforced g^v':>13}")
    for scheme in SCHEMES:
        sol = mbs.simulate(model, scheme, h=0.05, t_end=10.0)
        energy, j3 = sol.energy(), sol.angular_momentum()[:, 2]
        res = sol.constraint_residuals()
        print(f"{scheme:<10} {np.max(np.abs(energy - energy[0])) / abs(energy[0]):>11.2e} "
              f"{np.max(np.abs(j3 - j3[0])):>10.2e} {np.max(res['position']):>11.2e} "
              f"{np.max(res['velocity']):>13.2e} {np.max(res['enforced_position']):>11.2e} "
              f"{np.max(res['enforced_velocity']):>13.2e}")


def exact_state(model, t: float):
    rotation = (mbs.rotation_about_z(ht.PRECESSION_RATE * t)
                @ mbs.rotation_about_x(ht.NUTATION) @ mbs.rotation_about_z(ht.spin_rate() * t))
    q = np.concatenate([ht.LENGTH * rotation[:, 2], rotation.T.ravel()])
    omega = ht.PRECESSION_RATE * np.array([0.0, 0.0, 1.0]) + ht.spin_rate() * rotation[:, 2]
    return q, model.mass_matrix @ np.cross(omega, q.reshape(4, 3)).ravel()


def heavy_top() -> None:
    model = ht.build().compile()
    steps, t_end = [2.5e-4, 1.25e-4, 6.25e-5, 3.125e-5], 0.01
    q_exact, p_exact = exact_state(model, t_end)
    print(f"\nheavy top vs exact steady precession at t = {t_end}, h = {steps}")
    print(f"{'scheme':<10} {'slope q':>8} {'slope p':>8}   errors q (relative)")
    for scheme in (*SCHEMES, "hbvm"):
        eq, ep = [], []
        for h in steps:
            sol = mbs.simulate(model, scheme, h=h, t_end=t_end)
            eq.append(np.max(np.abs(sol.q[-1] - q_exact)) / np.max(np.abs(q_exact)))
            ep.append(np.max(np.abs(sol.p[-1] - p_exact)) / np.max(np.abs(p_exact)))
        sq = np.polyfit(np.log(steps), np.log(eq), 1)[0]
        sp = np.polyfit(np.log(steps), np.log(ep), 1)[0]
        print(f"{scheme:<10} {sq:>8.3f} {sp:>8.3f}   " + " ".join(f"{e:.2e}" for e in eq))
    print("\nheavy top, h = 0.002, T = 2")
    for scheme in (*SCHEMES, "hbvm"):
        sol = mbs.simulate(model, scheme, h=0.002, t_end=2.0)
        energy, j3 = sol.energy(), sol.angular_momentum()[:, 2]
        res = sol.constraint_residuals()
        print(f"{scheme:<10} max|dE|/E0 = {np.max(np.abs(energy - energy[0])) / energy[0]:.2e}"
              f"  max|dJ3|/|J3| = {np.max(np.abs(j3 - j3[0])) / abs(j3[0]):.2e}"
              f"  max|g| = {np.max(res['position']):.2e}"
              f"  max|G M^-1 p| = {np.max(res['velocity']):.2e}"
              f"  {1e6 * sol.stats['wall_time'] / 1000:.0f} us/step"
              f"  Newton it. {np.mean(sol.stats['newton_iterations']):.2f}")


if __name__ == "__main__":
    pendulum()
    heavy_top()
