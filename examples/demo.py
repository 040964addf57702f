"""Main demo: a heavy spinning top integrated with the energy-momentum scheme.

Prints the model summary and the conservation summary; writes an animation when the
visualisation extra (PyVista) is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heavy_top  # noqa: E402

import mbs  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--solver", default="em",
                        help="a name of mbs.solvers.REGISTRY: em, ggl-vi-s, ggl-vi-a, "
                             "ggl-vi-b, rattle, lobatto, hbvm, vi-conversion")
    parser.add_argument("--h", type=float, default=0.002, help="step size [s]")
    parser.add_argument("--t-end", type=float, default=2.0, help="end time [s]")
    parser.add_argument("--animation", default="output/top.gif",
                        help="animation file (.gif or .mp4); '' to skip")
    args = parser.parse_args(argv)

    system = heavy_top.build()
    model = system.compile()
    system.summary(model)
    print()
    solution = mbs.simulate(model, args.solver, h=args.h, t_end=args.t_end, progress=True)
    print(solution.conservation_summary())
    if args.animation:
        write_animation(solution, args.animation)


def write_animation(solution: mbs.Solution, path: str) -> None:
    try:
        from mbs import viz
    except ImportError as exc:  # the viz extra is optional
        print(f"animation skipped ({exc}); install with pip install -e '.[viz]'")
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        viz.animate(solution, path)
    except Exception as exc:  # noqa: BLE001 - the summary above is the main result
        print(f"animation failed ({type(exc).__name__}: {exc}); off-screen rendering needs "
              f"EGL or OSMesa: apt-get install -y libegl1 libgl1 libgl1-mesa-dri libosmesa6")
        return
    print(f"animation written to {path}")


if __name__ == "__main__":
    main()
