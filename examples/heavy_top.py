"""Heavy top in steady precession (seed 003, section 6.2)."""

from __future__ import annotations

import numpy as np

import mbs

MASS = 0.7069
INERTIA = 5.3014e-4  # I1 = I2 = I3 about the centre of mass, as printed in the paper
LENGTH = 0.075  # tip to centre of mass
NUTATION = np.pi / 3
PRECESSION_RATE = 10.0
GRAVITY = 9.81


def spin_rate() -> float:
    """Spin rate for steady precession, seed 003 eq. (112)."""
    i1 = i3 = INERTIA
    return (MASS * GRAVITY * LENGTH / (i3 * PRECESSION_RATE)
            + (i1 + MASS * LENGTH**2 - i3) / i3 * PRECESSION_RATE * np.cos(NUTATION))


def build() -> mbs.System:
    """The top as a director rigid body with its tip fixed at the origin."""
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    top = system.add(mbs.RigidBody(mass=MASS, inertia=(INERTIA,) * 3, name="top"))
    rotation = mbs.rotation_about_x(NUTATION)
    omega = PRECESSION_RATE * np.array([0.0, 0.0, 1.0]) + spin_rate() * rotation[:, 2]
    position = rotation @ np.array([0.0, 0.0, LENGTH])
    top.set_state(position=position, rotation=rotation, velocity=np.cross(omega, position),
                  angular_velocity=omega)
    system.add(mbs.joints.Spherical(system.ground, top, point=(0.0, 0.0, 0.0), name="tip"))
    return system


if __name__ == "__main__":
    system = build()
    model = system.compile()
    system.summary(model)
