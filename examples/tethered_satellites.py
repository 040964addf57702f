"""Three tethered satellites in a closed loop (seed 004, section 5, eqs. (77)-(80)).

Three unit point masses joined pairwise by inextensible tethers of unit length (a rigid
triangle of distance constraints, (77)) orbit a central body of normalised gravity at the origin,
H = sum_i (|p_i|^2 / 2 - 1/|q_i|) (78). Initial data (79)-(80): satellites 1 and 2 at
(0, +-1/2, z0), satellite 3 at (0, 0, z0 - sqrt(3)/2), z0 = 20, all at rest except
p3 = (v0, 0, 0), v0 chosen so that the initial Hamiltonian is zero (the positive root).

Satellites 1 and 2 stay in the planes y = +1/2 and y = -1/2 and satellite 3 in y = 0: the
mirror symmetry y -> -y exchanging satellites 1 and 2 is preserved by the dynamics.

Run ``python examples/tethered_satellites.py`` for the HBVM(6, 2) run of seed 004 Figure 3
(h = 0.1, 10^4 steps) and its conservation summary.
"""

from __future__ import annotations

import numpy as np

import mbs

Z0 = 20.0
TETHER = 1.0
MU = 1.0


def initial_speed(z0: float = Z0) -> float:
    """v0 of (80): the speed of satellite 3 that makes H(q0, p0) = 0."""
    r12 = np.sqrt(0.25 + z0 * z0)
    r3 = z0 - np.sqrt(3.0) / 2.0
    return float(np.sqrt(2.0 * (2.0 / r12 + 1.0 / r3)))


def build(z0: float = Z0) -> mbs.System:
    """The tethered triangle with the initial data (79)-(80) (no uniform gravity)."""
    system = mbs.System()
    positions = [(0.0, 0.5, z0), (0.0, -0.5, z0), (0.0, 0.0, z0 - np.sqrt(3.0) / 2.0)]
    velocities = [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (initial_speed(z0), 0.0, 0.0)]
    sats = []
    for i, (position, velocity) in enumerate(zip(positions, velocities), start=1):
        sat = system.add(mbs.PointMass(mass=1.0, name=f"satellite{i}"))
        sat.set_state(position=position, velocity=velocity)
        sats.append(sat)
    # Order of (77): |q1 - q2|, |q2 - q3|, |q3 - q1|.
    for a, b in ((0, 1), (1, 2), (2, 0)):
        system.add(mbs.joints.Distance(sats[a], sats[b], length=TETHER,
                                       name=f"tether{a + 1}{b + 1}"))
    system.add(mbs.forces.CentralGravity(mu=MU, center=(0.0, 0.0, 0.0), name="earth"))
    return system


if __name__ == "__main__":
    model = build().compile()
    solution = mbs.simulate(model, mbs.solvers.HBVM(k=6, s=2), h=0.1, t_end=1000.0)
    print(solution.conservation_summary())
    y = {name: solution.body(name).position[:, 1]
         for name in ("satellite1", "satellite2", "satellite3")}
    print(f"max |y1 - 1/2| = {np.max(np.abs(y['satellite1'] - 0.5)):.3e}, "
          f"max |y2 + 1/2| = {np.max(np.abs(y['satellite2'] + 0.5)):.3e}, "
          f"max |y3| = {np.max(np.abs(y['satellite3'])):.3e}")
