"""Per-step cost of the compiled backend on the small models of the benchmark cases.

    python -m benchmarks.compiled_models

Best of 5 runs (``mbs.simulate`` wall time / steps) after a warm-up, for EM and VI-A with
``backend="compiled"``, and the Newton iterations and LU factorisations per step. The runner
(``python -m benchmarks``) has compiled rows for the heavy top only; this covers the double
pendulum, the four-bar and chains of 3 and 10 bodies too.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import mbs
from benchmarks import cases
from benchmarks.chain_compile import build_chain
from mbs.solvers import make_solver

#: name -> (build, h, steps)
MODELS = {
    "heavy top": (cases.CASES["heavy_top"].build, 1e-3, 1000),
    "double pendulum": (cases.CASES["double_pendulum"].build, 2e-3, 500),
    "four-bar": (cases.CASES["four_bar"].build, 2e-3, 500),
    "chain N=3": (lambda: build_chain(3), 1e-3, 500),
    "chain N=10": (lambda: build_chain(10), 1e-3, 100),
}


def main() -> None:
    warnings.simplefilter("ignore")  # compiled-backend fallbacks are reported by the runner
    print(f"{'model':<16} {'scheme':<9} {'per step':>11} {'Newton':>7} {'LU':>6}")
    for label, (build, h, steps) in MODELS.items():
        model = build().compile()
        for scheme in ("em", "ggl-vi-a"):
            mbs.simulate(model, make_solver(scheme, backend="compiled"), h=h, t_end=5 * h)
            best = np.inf
            for _ in range(5):
                solver = make_solver(scheme, backend="compiled")
                started = time.perf_counter()
                solution = mbs.simulate(model, solver, h=h, t_end=steps * h)
                best = min(best, time.perf_counter() - started)
            print(f"{label:<16} {scheme:<9} {best / steps * 1e6:8.1f} us "
                  f"{np.mean(solution.stats['newton_iterations']):7.2f} "
                  f"{solver.newton_factorizations / steps:6.2f}")


if __name__ == "__main__":
    main()
