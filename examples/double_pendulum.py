"""Double pendulum of two rigid links on revolute joints (chaotic for large angles).

Two slender cylinders (d3 along each link) hang from a hinge at the origin and from each other,
both hinges about the world y axis, under gravity -z. Released at rest from 120 and 150
degrees. Energy is conserved exactly by the energy-momentum scheme; the angular momentum about
the hinge axis is not (gravity exerts a torque).

    python examples/double_pendulum.py --animate double.mp4 --plot energy.png
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

LENGTH = 0.5
RADIUS = 0.02
MASS = 1.0
ANGLES = (np.radians(120.0), np.radians(150.0))  # from the downward vertical

RECOMMENDED = dict(solver="em", h=0.002, t_end=5.0)
#: The outer link's free end at the initial pose (world coordinates), traced in animations.
TIP = LENGTH * np.array([np.sin(ANGLES[0]) + np.sin(ANGLES[1]), 0.0,
                         -np.cos(ANGLES[0]) - np.cos(ANGLES[1])])
VIZ = dict(view="front", directors=False, trails={"link2": TIP})


def link_rotation(angle: float) -> np.ndarray:
    """Directors with d3 along a link at ``angle`` from the downward vertical, d2 = y."""
    d3 = np.array([np.sin(angle), 0.0, -np.cos(angle)])
    d2 = np.array([0.0, 1.0, 0.0])
    return np.column_stack([np.cross(d2, d3), d2, d3])


def build(angles=ANGLES) -> mbs.System:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    pivot = np.zeros(3)
    previous = system.ground
    for k, angle in enumerate(angles, 1):
        link = system.add(mbs.RigidBody.from_shape("cylinder", mass=MASS, radius=RADIUS,
                                                   length=LENGTH, name=f"link{k}"))
        rotation = link_rotation(angle)
        link.set_state(position=pivot + 0.5 * LENGTH * rotation[:, 2], rotation=rotation)
        system.add(mbs.joints.Revolute(previous, link, point=pivot, axis=(0.0, 1.0, 0.0),
                                       name=f"hinge{k}"))
        pivot = pivot + LENGTH * rotation[:, 2]
        previous = link
    return system


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
