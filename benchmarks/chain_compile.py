"""Compile time and evaluation cost of a chain of N rigid bodies with spherical joints.

Usage: python -m benchmarks.chain_compile [N ...]   (default 10 100 1000)
Issue 2 targets: N = 1000 compiles in < 5 s; constraints + sparse Jacobian < 10 ms.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import mbs


def build_chain(n_links: int, link_length: float = 0.5) -> mbs.System:
    """Horizontal chain of slender boxes hanging from the ground by spherical joints."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(n_links):
        link = system.add(mbs.RigidBody.from_shape(
            "box", lx=link_length, ly=0.05, lz=0.05, density=1000.0, name=f"link{k}"))
        link.set_state(position=((k + 0.5) * link_length, 0.0, 0.0))
        system.add(mbs.joints.Spherical(previous, link, point=(k * link_length, 0.0, 0.0)))
        previous = link
    return system


def best_of(function, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main(sizes: list[int]) -> None:
    print(f"{'N':>6} {'n':>7} {'m':>7} {'build [s]':>10} {'compile [s]':>12} "
          f"{'g + G [ms]':>11} {'dof':>6}")
    for size in sizes:
        start = time.perf_counter()
        system = build_chain(size)
        built = time.perf_counter()
        model = system.compile()
        compiled = time.perf_counter()
        q = model.initial_state()[0] + 1e-3 * np.random.default_rng(0).standard_normal(model.n)

        def evaluate(model=model, q=q):
            return model.constraints(q), model.constraint_jacobian(q)

        evaluation = best_of(evaluate)
        print(f"{size:>6} {model.n:>7} {model.m:>7} {built - start:>10.3f} "
              f"{compiled - built:>12.3f} {1e3 * evaluation:>11.3f} "
              f"{model.degrees_of_freedom:>6}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
