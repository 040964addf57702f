"""Per-step cost of models whose step has terms evaluated in Python, compiled against numpy.

    python -m benchmarks.python_terms

Potentials that are not linear in q (springs, central gravity) and applied forces (loads,
dampers, actuators: user functions) are evaluated in Python at every Newton iterate; with
``backend="compiled"`` the tensor form, the Newton matrix and its LU run in the kernel, which
pauses for those terms. Best of 5 runs (wall time / steps, the two backends alternated run by
run) after a warm-up, EM, and the ratio numpy / compiled.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mbs
from mbs.solvers import make_solver

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import motor_slider_crank  # noqa: E402
import reaction_wheel  # noqa: E402
import satellite_libration  # noqa: E402
import tethered_satellites  # noqa: E402

#: name -> (module with build(), h, steps)
MODELS = {
    "satellite (central gravity)": (satellite_libration, 0.02, 400),
    "tethered satellites (central gravity)": (tethered_satellites, 0.1, 400),
    "motor slider-crank (torque, damper)": (motor_slider_crank, 0.002, 200),
    "reaction wheel (PD law on states)": (reaction_wheel, 0.08, 50),
}


def _system(module) -> mbs.System:
    built = module.build()
    return built[0] if isinstance(built, tuple) else built


def main(rounds: int = 5) -> None:
    warnings.simplefilter("ignore")
    backends = ("polynomial", "compiled")
    print(f"{'model':<38} {'n':>4} {'numpy':>11} {'compiled':>11} {'ratio':>6}")
    for label, (module, h, steps) in MODELS.items():
        model = _system(module).compile()
        for backend in backends:
            mbs.simulate(model, make_solver("em", backend=backend), h=h, t_end=3 * h)
        best = dict.fromkeys(backends, np.inf)
        for _ in range(rounds):
            for backend in backends:
                solver = make_solver("em", backend=backend)
                started = time.perf_counter()
                mbs.simulate(model, solver, h=h, t_end=steps * h)
                best[backend] = min(best[backend], time.perf_counter() - started)
        numpy_step, compiled_step = (best[b] / steps * 1e6 for b in backends)
        print(f"{label:<38} {model.n:>4} {numpy_step:8.0f} us {compiled_step:8.0f} us "
              f"{numpy_step / compiled_step:6.2f}")


if __name__ == "__main__":
    main()
