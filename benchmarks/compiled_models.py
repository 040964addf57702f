"""Per-step cost of the compiled backend on the small models of the benchmark cases.

    python -m benchmarks.compiled_models

Best of 7 runs (``mbs.simulate`` wall time / steps, the schemes alternated run by run) after a
warm-up, for EM, VI-A and RATTLE with ``backend="compiled"``, and the Newton iterations and LU
factorisations per step. The runner (``python -m benchmarks``) has compiled rows for the heavy
top only; this covers the double pendulum, the four-bar and chains of 3 and 10 bodies too.
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


def main(rounds: int = 7) -> None:
    warnings.simplefilter("ignore")  # compiled-backend fallbacks are reported by the runner
    print(f"{'model':<16} {'scheme':<9} {'per step':>11} {'Newton':>7} {'LU':>6}")
    schemes = ("em", "ggl-vi-a", "rattle")
    for label, (build, h, steps) in MODELS.items():
        model = build().compile()
        for scheme in schemes:
            mbs.simulate(model, make_solver(scheme, backend="compiled"), h=h, t_end=5 * h)
        best, last = dict.fromkeys(schemes, np.inf), {}
        # the schemes alternate run by run, so that a slow phase of the shared host does not
        # fall on one of them only
        for _ in range(rounds):
            for scheme in schemes:
                solver = make_solver(scheme, backend="compiled")
                started = time.perf_counter()
                solution = mbs.simulate(model, solver, h=h, t_end=steps * h)
                best[scheme] = min(best[scheme], time.perf_counter() - started)
                last[scheme] = (solution, solver)
        for scheme in schemes:
            solution, solver = last[scheme]
            print(f"{label:<16} {scheme:<9} {best[scheme] / steps * 1e6:8.1f} us "
                  f"{np.mean(solution.stats['newton_iterations']):7.2f} "
                  f"{solver.newton_factorizations / steps:6.2f}")


if __name__ == "__main__":
    main()
