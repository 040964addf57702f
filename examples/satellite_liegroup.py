"""A gravity-gradient satellite in both rigid-body formulations: directors and SO(3) x R^3.

One :class:`mbs.System` (the box-shaped satellite of ``satellite_libration.py`` on a circular
orbit, pitched by 10 degrees; central gravity with the gravity-gradient torque) is compiled
twice:

* ``system.compile()``: the director formulation (12 coordinates, 6 constraints), integrated
  with the energy-momentum scheme "em" (order 2, energy and angular momentum to round-off);
* ``system.compile(formulation="lie-group")``: rotation R in SO(3) and centre of mass in R^3
  (6 degrees of freedom, no constraints), integrated with VRKMK on the 2-stage Gauss tableau
  (order 4, symplectic; Bogfjellmo and Marthinsen, 2014).

Both runs return the standard :class:`mbs.Solution`, so the same code measures them: the pitch
libration, the energy and angular-momentum errors, and the distance from a reference run
(director formulation, Lobatto IIIA-IIIB with 4 stages, order 6, at a quarter of the Lie-group
step; VRKMK with the 3-stage Gauss tableau, order 6, at that step agrees with it to 4e-14).
Then the Lie-group run is animated off-screen (``output/satellite_liegroup.mp4``, with the
viewing options ``VIZ`` of ``satellite_libration.py``).

    python examples/satellite_liegroup.py
    python examples/satellite_liegroup.py --t-end 12.6 --animation output/sat.gif
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import satellite_libration  # noqa: E402

import mbs  # noqa: E402

T_END = 12.8  # about two orbits (2 pi each) and 2.7 libration periods; a multiple of every h
H_DIRECTOR = 0.02
H_LIE_GROUP = 0.05
ANIMATION = "output/satellite_liegroup.mp4"


def build() -> mbs.System:
    """The satellite of ``satellite_libration.py``."""
    return satellite_libration.build()


def run(system: mbs.System, t_end: float = T_END, h_director: float = H_DIRECTOR,
        h_lie_group: float = H_LIE_GROUP) -> dict:
    """Solutions and CPU seconds of both formulations and of the reference."""
    director = system.compile()
    lie_group = system.compile(formulation="lie-group")
    runs = {}
    for label, model, solver, options, h in (
            ("director, em", director, "em", {}, h_director),
            ("lie-group, vrkmk gauss-2", lie_group, "vrkmk", {"tableau": "gauss-2"},
             h_lie_group),
            ("reference: director, lobatto s=4", director, "lobatto", {"stages": 4},
             h_lie_group / 4)):
        started = time.process_time()
        solution = mbs.simulate(model, solver, h=h, t_end=t_end, **options)
        runs[label] = (solution, time.process_time() - started)
    return runs


def compare(runs: dict) -> str:
    """One line per run: steps, CPU, drifts, libration and the error against the reference."""
    reference = runs["reference: director, lobatto s=4"][0]
    end_position = reference.body("satellite").position[-1]
    end_pitch = satellite_libration.pitch_angle(reference)[-1]
    lines = [f"{'run':<36} {'steps':>6} {'CPU s':>6} {'max|dE/E|':>9} {'max|dJ/J|':>9} "
             f"{'amplitude':>9} {'period':>7} {'|dx(T)|':>8} {'dpitch(T)':>9}"]
    for label, (solution, cpu) in runs.items():
        energy = solution.energy()
        momentum = solution.angular_momentum()
        pitch = satellite_libration.pitch_angle(solution)
        position = solution.body("satellite").position[-1]
        lines.append(
            f"{label:<36} {solution.t.size - 1:>6} {cpu:>6.2f} "
            f"{np.max(np.abs(energy / energy[0] - 1.0)):>9.1e} "
            f"{np.max(np.linalg.norm(momentum - momentum[0], axis=1)) / np.linalg.norm(momentum[0]):>9.1e} "  # noqa: E501
            f"{np.degrees(np.max(np.abs(pitch))):>8.3f}° "
            f"{satellite_libration.measured_period(solution):>7.3f} "
            f"{np.linalg.norm(position - end_position):>8.1e} "
            f"{abs(pitch[-1] - end_pitch):>9.1e}")
    lines.append(f"small-amplitude libration period {satellite_libration.predicted_period():.3f}"
                 f" (orbit period {2 * np.pi:.3f}); errors against the reference at T = "
                 f"{reference.t[-1]:.3f}")
    return "\n".join(lines)


def animate(solution: mbs.Solution, path: str, frames: int) -> str:
    """Off-screen animation with ``satellite_libration.VIZ``; a message if the viz extra is
    missing or rendering fails."""
    try:
        from mbs import viz
    except ImportError as exc:  # the viz extra is optional
        return f"animation skipped ({exc}); install with pip install -e '.[viz]'"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        report = viz.animate(solution, path, frames=frames, off_screen=True, progress=False,
                             **satellite_libration.VIZ)
    except Exception as exc:  # noqa: BLE001 - the comparison above is the main result
        return (f"animation failed ({type(exc).__name__}: {exc}); off-screen rendering needs "
                f"EGL or OSMesa")
    return f"animation: {report}"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t-end", type=float, default=T_END, help="end time (orbit = 2 pi)")
    parser.add_argument("--h-director", type=float, default=H_DIRECTOR)
    parser.add_argument("--h-lie-group", type=float, default=H_LIE_GROUP)
    parser.add_argument("--animation", default=ANIMATION,
                        help="animation file of the Lie-group run (.mp4/.gif); '' to skip")
    parser.add_argument("--frames", type=int, default=150, help="frames of the animation")
    args = parser.parse_args(argv)
    system = build()
    print(f"formulation='lie-group': {system.compile(formulation='lie-group')}")
    runs = run(system, args.t_end, args.h_director, args.h_lie_group)
    text = compare(runs)
    print(text)
    if args.animation:
        print(animate(runs["lie-group, vrkmk gauss-2"][0], args.animation, args.frames))
    return text


if __name__ == "__main__":
    main()
