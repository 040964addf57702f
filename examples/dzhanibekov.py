"""Tumbling free body near its intermediate axis (Dzhanibekov / tennis-racket effect).

A box with three different principal moments, no gravity, spins about d2, the axis of the
intermediate moment, with a 1 % perturbation about d1. Rotation about the
intermediate axis is unstable: the body flips by half a turn at regular intervals while energy
and angular momentum stay exactly conserved (the angular momentum vector is fixed in space;
the body turns around it).

    python examples/dzhanibekov.py --animate flip.mp4 --plot energy.png
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

SIZE = (0.12, 0.06, 0.03)  # box edges along d1, d2, d3 [m]: I1 < I2 < I3
MASS = 0.5
SPIN = 2.0 * 2.0 * np.pi  # 2 turns per second about the intermediate axis d2
PERTURBATION = 0.01

RECOMMENDED = dict(solver="em", h=0.005, t_end=4.0)
VIZ = dict(view="iso", trails={"body": (0.0, 0.03, 0.0)})


def build(spin: float = SPIN, perturbation: float = PERTURBATION) -> mbs.System:
    """The spinning box at the origin, angular velocity mostly along d2."""
    system = mbs.System(gravity=None)
    lx, ly, lz = SIZE
    body = system.add(mbs.RigidBody.from_shape("box", mass=MASS, lx=lx, ly=ly, lz=lz,
                                               name="body"))
    omega = spin * np.array([perturbation, 1.0, 0.0])
    body.set_state(position=(0.0, 0.0, 0.0), rotation=np.eye(3), angular_velocity=omega)
    return system


def flip_times(solution: mbs.Solution) -> np.ndarray:
    """Times at which the body-frame spin about d2 changes sign (one per half-turn flip)."""
    omega2 = solution.body("body").angular_velocity_body[:, 1]
    crossings = np.flatnonzero(np.sign(omega2[1:]) != np.sign(omega2[:-1]))
    return solution.t[crossings + 1]


def predicted_growth_rate(spin: float = SPIN) -> float:
    """Linear instability rate sqrt((I2 - I1)(I3 - I2) / (I1 I3)) * omega [1/s]."""
    lx, ly, lz = SIZE
    i1, i2, i3 = (ly**2 + lz**2), (lx**2 + lz**2), (lx**2 + ly**2)
    return spin * np.sqrt((i2 - i1) * (i3 - i2) / (i1 * i3))


def report(solution: mbs.Solution) -> str:
    flips = flip_times(solution)
    listed = ", ".join(f"{t:.2f}" for t in flips) or "none"
    return (f"flips of the spin axis at t = {listed} s ({flips.size} in {solution.t[-1]:g} s); "
            f"linear instability rate {predicted_growth_rate():.2f} 1/s")


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
