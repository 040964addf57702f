"""Satellite attitude in a circular orbit: gravity-gradient pitch libration.

Units: the orbit radius, the planet's gravitational parameter and the orbital rate are 1, so an
orbit takes 2 pi. A small box-shaped satellite (long axis d3 pointing at the planet, d2 along
the orbit normal) flies a circular orbit, turning once per orbit so that it keeps facing the
planet, with its pitch angle initially offset by 10 degrees. The gravity-gradient torque of
:class:`mbs.forces.CentralGravity` pulls the long axis back to the local vertical: the
satellite librates in pitch with the small-amplitude frequency
omega_p = n sqrt(3 (I1 - I3) / I2)  (I1 about the along-track axis d1, I2 pitch, I3 yaw).

    python examples/satellite_libration.py --animate libration.mp4
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

MU = 1.0
RADIUS = 1.0
SIZE = (0.02, 0.01, 0.04)  # box edges along d1 (along-track), d2 (orbit normal), d3 (radial)
MASS = 1.0
PITCH = np.radians(10.0)

RECOMMENDED = dict(solver="em", h=0.02, t_end=25.0)
VIZ = dict(view="iso")


def build(pitch: float = PITCH) -> mbs.System:
    """Satellite on a circular orbit in the x-y plane, pitched by ``pitch`` about d2 = z."""
    system = mbs.System(gravity=None)
    lx, ly, lz = SIZE
    sat = system.add(mbs.RigidBody.from_shape("box", mass=MASS, lx=lx, ly=ly, lz=lz,
                                              name="satellite"))
    rate = np.sqrt(MU / RADIUS**3)
    # d1 along-track (+y), d2 orbit normal (+z), d3 radial (+x), then pitched about z
    nominal = np.column_stack([(0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 0.0)])
    sat.set_state(position=(RADIUS, 0.0, 0.0), velocity=(0.0, RADIUS * rate, 0.0),
                  rotation=mbs.rotation_about_z(pitch) @ nominal,
                  angular_velocity=(0.0, 0.0, rate))
    system.add(mbs.forces.CentralGravity(MU, center=(0.0, 0.0, 0.0), name="planet"))
    return system


def pitch_angle(solution: mbs.Solution) -> np.ndarray:
    """Angle from the local vertical (radius vector) to d3, about the orbit normal z."""
    trajectory = solution.body("satellite")
    radial = trajectory.position / np.linalg.norm(trajectory.position, axis=1)[:, None]
    d3 = trajectory.rotation[:, :, 2]
    sine = np.cross(radial, d3)[:, 2]
    return np.arctan2(sine, np.einsum("ij,ij->i", radial, d3))


def predicted_period() -> float:
    lx, ly, lz = SIZE
    i1, i2, i3 = ly**2 + lz**2, lx**2 + lz**2, lx**2 + ly**2
    return 2.0 * np.pi / np.sqrt(3.0 * (i1 - i3) / i2) / np.sqrt(MU / RADIUS**3)


def measured_period(solution: mbs.Solution) -> float:
    """Mean spacing of upward zero crossings of the pitch angle (NaN if fewer than two)."""
    angle = pitch_angle(solution)
    up = np.flatnonzero((angle[:-1] < 0.0) & (angle[1:] >= 0.0))
    if up.size < 2:
        return float("nan")
    t = solution.t
    times = t[up] - angle[up] * (t[up + 1] - t[up]) / (angle[up + 1] - angle[up])
    return float(np.mean(np.diff(times)))


def report(solution: mbs.Solution) -> str:
    amplitude = np.degrees(np.max(np.abs(pitch_angle(solution))))
    period = measured_period(solution)
    return (f"pitch libration: amplitude {amplitude:.2f} deg, period {period:.3f} "
            f"(small-amplitude theory {predicted_period():.3f}; orbit period {2 * np.pi:.3f})")


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
