"""Slider-crank mechanism: a crank drives a piston through a connecting rod.

Crank O-A hinged to the ground about y, connecting rod A-P, slider (piston) at P guided along
the x axis by a prismatic joint; motion in the x-z plane, gravity -z. As for the four-bar, four
revolute-type joints would over-constrain the planar loop, so the rod is attached by a
spherical joint at A and a universal joint at P (rod cross axis in the plane, slider cross
axis along y): 5 + 3 + 4 + 5 = 17 equations, 1 degree of freedom, no redundancy.

The crank starts at 45 degrees turning at 10 rad/s; rod and piston velocities follow from the
velocity analysis of the loop.

    python examples/slider_crank.py --animate slider.mp4
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

Y = np.array([0.0, 1.0, 0.0])
CRANK, ROD = 0.15, 0.5
WIDTH = 0.025
CRANK_ANGLE = np.radians(45.0)
CRANK_RATE = 10.0  # rad/s about +y

RECOMMENDED = dict(solver="em", h=0.002, t_end=2.0)
VIZ = dict(view="front", directors=False)


def cross_y(vector: np.ndarray) -> np.ndarray:
    return np.array([vector[2], 0.0, -vector[0]])


def bar(name: str, start, end, mass: float) -> mbs.RigidBody:
    start, end = np.asarray(start, float), np.asarray(end, float)
    d1 = (end - start) / np.linalg.norm(end - start)
    body = mbs.RigidBody.from_shape("box", mass=mass, lx=float(np.linalg.norm(end - start)),
                                    ly=WIDTH, lz=WIDTH, name=name)
    body.set_state(position=0.5 * (start + end), rotation=np.column_stack([d1, Y,
                                                                          np.cross(d1, Y)]))
    return body


def build(crank_angle: float = CRANK_ANGLE, crank_rate: float = CRANK_RATE) -> mbs.System:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    o = np.zeros(3)
    a = CRANK * np.array([np.cos(crank_angle), 0.0, np.sin(crank_angle)])
    p = np.array([a[0] + np.sqrt(ROD**2 - a[2] ** 2), 0.0, 0.0])
    crank = system.add(bar("crank", o, a, mass=0.5))
    rod = system.add(bar("rod", a, p, mass=0.8))
    slider = system.add(mbs.RigidBody.from_shape("box", mass=1.5, lx=0.12, ly=0.08, lz=0.06,
                                                 name="slider"))
    slider.set_state(position=p)
    # velocity analysis: v_A + w_rod y x (P - A) = (v_slider, 0, 0)
    v_a = crank_rate * cross_y(a - o)
    matrix = np.column_stack([cross_y(p - a), [-1.0, 0.0, 0.0]])[[0, 2]]
    w_rod, v_slider = np.linalg.solve(matrix, -v_a[[0, 2]])
    crank.set_state(velocity=crank_rate * cross_y(crank.position - o),
                    angular_velocity=crank_rate * Y)
    rod.set_state(velocity=v_a + w_rod * cross_y(rod.position - a), angular_velocity=w_rod * Y)
    slider.set_state(velocity=(v_slider, 0.0, 0.0))
    rod_line = (p - a) / np.linalg.norm(p - a)
    system.add(mbs.joints.Revolute(system.ground, crank, point=o, axis=Y, name="crank_pivot"))
    system.add(mbs.joints.Spherical(crank, rod, point=a, name="crank_pin"))
    system.add(mbs.joints.Universal(rod, slider, point=p, axis_a=np.cross(Y, rod_line),
                                    axis_b=Y, name="wrist_pin"))
    system.add(mbs.joints.Prismatic(system.ground, slider, point=p, axis=(1.0, 0.0, 0.0),
                                    name="guide"))
    return system


def report(solution: mbs.Solution) -> str:
    x = solution.body("slider").position[:, 0]
    return f"piston travel: x from {x.min():.4f} to {x.max():.4f} m (stroke 2 r = {2 * CRANK} m)"


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
