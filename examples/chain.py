"""Chain of N rigid links on ball joints, hanging from a fixed point.

Slender cylinders (d3 along each link) joined end to end by spherical joints, the first to the
ground at the origin, start horizontal along x while the whole chain turns rigidly about the
vertical at 1.5 rad/s (a consistent initial velocity), then fall and whip around in 3-D under
gravity. Energy and the vertical angular momentum are conserved by the energy-momentum scheme.

    python examples/chain.py --animate chain.mp4
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

LINKS = 6
LENGTH = 0.3
RADIUS = 0.012
MASS = 0.2
TURN_RATE = 1.5

RECOMMENDED = dict(solver="em", h=0.002, t_end=3.0)
VIZ = dict(view="iso", directors=False,
           trails={f"link{LINKS}": (LINKS * LENGTH, 0.0, 0.0)})  # the free end


def build(links: int = LINKS, turn_rate: float = TURN_RATE) -> mbs.System:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    omega = np.array([0.0, 0.0, turn_rate])
    rotation = mbs.rotation_about_y(np.pi / 2)  # d3 along +x
    previous = system.ground
    for k in range(links):
        link = system.add(mbs.RigidBody.from_shape("cylinder", mass=MASS, radius=RADIUS,
                                                   length=LENGTH, name=f"link{k + 1}"))
        center = np.array([(k + 0.5) * LENGTH, 0.0, 0.0])
        link.set_state(position=center, rotation=rotation, velocity=np.cross(omega, center),
                       angular_velocity=omega)
        system.add(mbs.joints.Spherical(previous, link, point=(k * LENGTH, 0.0, 0.0),
                                        name=f"ball{k + 1}"))
        previous = link
    return system


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
