"""Mathematical pendulum in 3D (seed 003, section 6.1)."""

from __future__ import annotations

import mbs


def build(mass: float = 1.0, length: float = 1.0) -> mbs.System:
    """A particle on a massless rod of ``length`` pivoting about the origin, under gravity."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(mass=mass, name="bob"))
    bob.set_state(position=(length, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=length, name="rod"))
    return system


if __name__ == "__main__":
    model = build().compile()
    for solver in ("em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle"):
        solution = mbs.simulate(model, solver, h=0.05, t_end=10.0)
        print(solution.conservation_summary(), end="\n\n")
