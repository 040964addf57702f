"""Planar four-bar linkage (crank-rocker) swinging and turning under gravity.

Ground pivots O and C on the x axis, crank O-A, coupler A-B, rocker C-B, all moving in the x-z
plane (hinge axes along y, gravity -z). Four ideal revolute joints would over-constrain the
closed loop (3 redundant out-of-plane equations, which make the Newton matrix singular), so the
loop is closed with joints that impose only what the planar loop needs:
revolute O, revolute A, spherical B, universal C (rocker cross axis in the plane,
ground cross axis along y): 5 + 5 + 3 + 4 = 17 equations on 18 coordinates of freedom,
1 degree of freedom, no redundancy, and the motion stays planar.

The crank starts at 60 degrees turning at 6 rad/s; the other links' velocities follow from
the loop's velocity analysis so that the initial state is consistent.

    python examples/four_bar.py --animate fourbar.mp4
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

Y = np.array([0.0, 1.0, 0.0])
GROUND_LENGTH, CRANK, COUPLER, ROCKER = 0.8, 0.25, 0.9, 0.6  # Grashof: crank revolves
WIDTH = 0.03
CRANK_ANGLE = np.radians(60.0)
CRANK_RATE = 6.0  # rad/s about +y

RECOMMENDED = dict(solver="em", h=0.002, t_end=3.0)
VIZ = dict(view="front", directors=False, trails=["coupler"])  # its centre of mass


def cross_y(vector: np.ndarray) -> np.ndarray:
    """y x r for the rotation rate about +y."""
    return np.array([vector[2], 0.0, -vector[0]])


def bar(name: str, start, end, mass: float = 1.0, width: float = WIDTH) -> mbs.RigidBody:
    """A slender box from ``start`` to ``end`` in the x-z plane: d1 along it, d2 = y."""
    start, end = np.asarray(start, float), np.asarray(end, float)
    d1 = (end - start) / np.linalg.norm(end - start)
    body = mbs.RigidBody.from_shape("box", mass=mass, lx=float(np.linalg.norm(end - start)),
                                    ly=width, lz=width, name=name)
    body.set_state(position=0.5 * (start + end), rotation=np.column_stack([d1, Y,
                                                                          np.cross(d1, Y)]))
    return body


def loop_points(crank_angle: float = CRANK_ANGLE):
    """O, A, B, C of the loop (B on the upper branch)."""
    o, c = np.zeros(3), np.array([GROUND_LENGTH, 0.0, 0.0])
    a = CRANK * np.array([np.cos(crank_angle), 0.0, np.sin(crank_angle)])
    d = float(np.linalg.norm(c - a))
    along = (COUPLER**2 - ROCKER**2 + d**2) / (2.0 * d)
    height = np.sqrt(COUPLER**2 - along**2)
    u = (c - a) / d
    normal = np.array([-u[2], 0.0, u[0]])  # u rotated by +90 degrees in the x-z plane
    b = a + along * u + height * normal
    if b[2] < 0.0:
        b = a + along * u - height * normal
    return o, a, b, c


def build(crank_angle: float = CRANK_ANGLE, crank_rate: float = CRANK_RATE) -> mbs.System:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    o, a, b, c = loop_points(crank_angle)
    crank = system.add(bar("crank", o, a, mass=0.5))
    coupler = system.add(bar("coupler", a, b, mass=1.0))
    rocker = system.add(bar("rocker", c, b, mass=0.8))
    # velocity analysis: v_A + w2 y x (B - A) = w3 y x (B - C)
    v_a = crank_rate * cross_y(a - o)
    matrix = np.column_stack([cross_y(b - a), -cross_y(b - c)])[[0, 2]]
    w2, w3 = np.linalg.solve(matrix, -v_a[[0, 2]])
    for body, rate, pivot, v_pivot in ((crank, crank_rate, o, np.zeros(3)),
                                       (coupler, w2, a, v_a), (rocker, w3, c, np.zeros(3))):
        body.set_state(velocity=v_pivot + rate * cross_y(body.position - pivot),
                       angular_velocity=rate * Y)
    rocker_line = (b - c) / np.linalg.norm(b - c)
    system.add(mbs.joints.Revolute(system.ground, crank, point=o, axis=Y, name="pivot_O"))
    system.add(mbs.joints.Revolute(crank, coupler, point=a, axis=Y, name="pin_A"))
    system.add(mbs.joints.Spherical(coupler, rocker, point=b, name="ball_B"))
    system.add(mbs.joints.Universal(rocker, system.ground, point=c,
                                    axis_a=np.cross(Y, rocker_line), axis_b=Y,
                                    name="cardan_C"))
    return system


def crank_angle(solution: mbs.Solution) -> np.ndarray:
    """Unwrapped crank angle from the x axis [rad]."""
    d1 = solution.body("crank").rotation[:, :, 0]
    return np.unwrap(np.arctan2(d1[:, 2], d1[:, 0]))


def report(solution: mbs.Solution) -> str:
    turns = abs(crank_angle(solution)[-1] - crank_angle(solution)[0]) / (2.0 * np.pi)
    y_drift = max(float(np.max(np.abs(solution.body(b.name).position[:, 1])))
                  for b in solution.model.bodies)
    return (f"crank turned {turns:.2f} revolutions; largest out-of-plane excursion "
            f"{y_drift:.1e} m")


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
