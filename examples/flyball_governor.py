"""Watt flyball governor: a motor spins the spindle up, the balls fly out, the sleeve rises.

A vertical spindle turns in a bearing on the ground (revolute about z). Two arms are hinged
to the spindle top, one on each side, and carry the balls; a link from the middle of each arm
pushes a sleeve that slides on the spindle (prismatic joint: it turns with the spindle). The
sleeve's slide is damped (``damping=`` of the prismatic joint, a dashpot). Gravity -z.

Drive and load: a motor whose torque falls linearly with speed, tau = TAU_MAX (1 - w / W_MAX)
(``mbs.forces.JointTorque`` on the bearing, f(t, angle, rate)), against a driven machine that
takes a torque proportional to speed (``mbs.forces.JointDamper`` on the bearing). In an engine
the sleeve would move the throttle (torque = tau0 - k * lift); an actuator function sees only
its own joint's angle and rate (or the states of that joint's two bodies: here the ground and
the spindle), not the sleeve, so this example closes the loop through the speed, which sets
the lift in steady running. In steady spin the sleeve is at rest relative to the spindle, so
its dashpot does no work and the torques balance exactly: TAU(w) = C_LOAD w gives the speed
(:func:`steady_speed`), and the relative equilibrium of the arms in the spinning frame gives
the lift (:func:`steady_lift`, the minimum of V - w^2 J_z / 2).

Joints without redundancy: each loop spindle - arm - link - sleeve is planar and closed like
the slider-crank of ``slider_crank.py`` (spherical joint at the arm, universal joint at the
sleeve with cross axes in the plane and normal to it): bearing 5 + hinges 2 x 5 + links
2 x (3 + 4) + sleeve guide 5 = 34 equations on 6 x 6 coordinates of freedom: 2 degrees of
freedom (spin and lift), ``model.redundancies`` is empty and nothing is removed.

Started at rest with the arms hanging at ARM_ANGLE, it spins up, the balls swing out, and the
governor settles to a steady spin of 8 rad/s with the arms at 52.6 degrees and the sleeve
lifted by 99.9 mm, approached with a time constant of about 0.56 s
(:func:`settling_time_constant`: the balls' rise stores angular momentum, so the approach is
three times slower than its moment of inertia about z alone would make it). Each arm is one
body: the ball's mass and inertia, drawn as a ball with rods to its joints.

    python examples/flyball_governor.py --animate governor.mp4
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.optimize import brentq

import mbs

Y, Z = np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])
GRAVITY = 9.81
SPINDLE_HEIGHT, SPINDLE_RADIUS, SPINDLE_MASS = 0.5, 0.012, 1.0
HINGE_OFFSET = 0.025  # arm hinges at (+-HINGE_OFFSET, 0, SPINDLE_HEIGHT)
ARM_LENGTH, LINK_POINT = 0.3, 0.15  # hinge to ball centre; hinge to the link's pin on the arm
BALL_MASS, BALL_RADIUS = 1.0, 0.04
LINK_LENGTH, LINK_MASS, LINK_WIDTH = 0.15, 0.1, 0.012
SLEEVE_MASS, SLEEVE_RADIUS, SLEEVE_LENGTH = 0.5, HINGE_OFFSET, 0.06  # links pinned at its rim
SLEEVE_DAMPING = 8.0  # N s/m
TAU_MAX, W_MAX = 6.0, 10.0  # motor: stall torque N m, no-load speed rad/s
C_LOAD = 0.15  # driven machine, N m s: steady speed TAU_MAX / (TAU_MAX / W_MAX + C_LOAD)
ARM_ANGLE = np.radians(20.0)  # initial angle of the arms from the downward vertical

RECOMMENDED = dict(solver="em", h=0.01, t_end=6.0)
VIZ = dict(view="iso", directors=False, trails=["ball_right"])


def motor_torque(t: float, angle: float, rate: float) -> float:
    """Speed-dependent motor torque about +z."""
    return TAU_MAX * (1.0 - rate / W_MAX)


def pose(alpha: float) -> dict:
    """Joint points and body poses {name: (position, rotation)} with the arms at ``alpha``
    from the downward vertical (spindle angle 0)."""
    out = {"spindle": (0.5 * SPINDLE_HEIGHT * Z, np.eye(3))}
    points = {}
    sleeve_z = None
    for side, sign in (("right", 1.0), ("left", -1.0)):
        hinge = np.array([sign * HINGE_OFFSET, 0.0, SPINDLE_HEIGHT])
        along = np.array([sign * np.sin(alpha), 0.0, -np.cos(alpha)])  # hinge -> ball
        ball, pin = hinge + ARM_LENGTH * along, hinge + LINK_POINT * along
        reach = pin[0] - sign * SLEEVE_RADIUS  # horizontal span of the link
        rim = np.array([sign * SLEEVE_RADIUS, 0.0,
                        pin[2] - np.sqrt(LINK_LENGTH**2 - reach**2)])
        sleeve_z = rim[2]
        out[f"ball_{side}"] = (ball, _frame(along))
        link_line = (rim - pin) / LINK_LENGTH
        out[f"link_{side}"] = (0.5 * (pin + rim), _frame(link_line))
        points[side] = (hinge, pin, rim, link_line)
    out["sleeve"] = (sleeve_z * Z, np.eye(3))
    return {"bodies": out, "points": points, "sleeve_z": sleeve_z}


def _frame(d1: np.ndarray) -> np.ndarray:
    """Directors d1 (in the x-z plane), d2 = y, d3 = d1 x y."""
    return np.column_stack([d1, Y, np.cross(d1, Y)])


def _bodies() -> dict[str, mbs.RigidBody]:
    spindle = mbs.RigidBody.from_shape("cylinder", mass=SPINDLE_MASS, radius=SPINDLE_RADIUS,
                                       length=SPINDLE_HEIGHT, name="spindle")
    sleeve = mbs.RigidBody.from_shape("cylinder", mass=SLEEVE_MASS, radius=SLEEVE_RADIUS,
                                      length=SLEEVE_LENGTH, name="sleeve")
    bodies = {"spindle": spindle, "sleeve": sleeve}
    for side in ("right", "left"):
        # a ball on a light rod: mass and inertia of the ball, drawn as the ball with rods
        # to the arm's joints
        bodies[f"ball_{side}"] = mbs.RigidBody(BALL_MASS, (0.4 * BALL_MASS * BALL_RADIUS**2,) * 3,
                                               name=f"ball_{side}")
        bodies[f"link_{side}"] = mbs.RigidBody.from_shape(
            "box", mass=LINK_MASS, lx=LINK_LENGTH, ly=LINK_WIDTH, lz=LINK_WIDTH,
            name=f"link_{side}")
    return bodies


def build(alpha: float = ARM_ANGLE, spin: float = 0.0) -> mbs.System:
    """The governor with the arms at ``alpha`` and the whole turning rigidly at ``spin``
    rad/s about z (a consistent state: every point moves with spin x r)."""
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    geometry = pose(alpha)
    bodies = _bodies()
    omega = spin * Z
    for name, body in bodies.items():
        position, rotation = geometry["bodies"][name]
        system.add(body).set_state(position=position, rotation=rotation,
                                   velocity=np.cross(omega, position), angular_velocity=omega)
    spindle, sleeve = bodies["spindle"], bodies["sleeve"]
    bearing = system.add(mbs.joints.Revolute(system.ground, spindle, point=(0.0, 0.0, 0.0),
                                             axis=Z, name="bearing"))
    for side, (hinge, pin, rim, link_line) in geometry["points"].items():
        ball, link = bodies[f"ball_{side}"], bodies[f"link_{side}"]
        system.add(mbs.joints.Revolute(spindle, ball, point=hinge, axis=Y,
                                       name=f"hinge_{side}"))
        system.add(mbs.joints.Spherical(ball, link, point=pin, name=f"pin_{side}"))
        system.add(mbs.joints.Universal(link, sleeve, point=rim, axis_a=np.cross(Y, link_line),
                                        axis_b=Y, name=f"rim_{side}"))
    system.add(mbs.joints.Prismatic(spindle, sleeve, point=geometry["sleeve_z"] * Z, axis=Z,
                                    damping=SLEEVE_DAMPING, name="sleeve_guide"))
    system.add(mbs.forces.JointTorque(bearing, motor_torque, name="motor"))
    system.add(mbs.forces.JointDamper(bearing, C_LOAD, name="machine"))
    return system


# -- steady state -------------------------------------------------------------------------------
def steady_speed() -> float:
    """Spin at which the motor's torque equals the machine's: TAU(w) = C_LOAD w."""
    return TAU_MAX / (TAU_MAX / W_MAX + C_LOAD)


def _pose_sums(alpha: float) -> tuple[float, float]:
    """(V, J_z) at arm angle ``alpha``: potential energy of gravity and moment of inertia of
    all bodies about the spin axis."""
    geometry, potential, inertia_z = pose(alpha), 0.0, 0.0
    for name, body in _bodies().items():
        position, rotation = geometry["bodies"][name]
        inertia = rotation @ body.inertia @ rotation.T
        inertia_z += inertia[2, 2] + body.mass * (position[0] ** 2 + position[1] ** 2)
        potential += body.mass * GRAVITY * position[2]
    return potential, inertia_z


def effective_potential(alpha: float, spin: float) -> float:
    """V - spin^2 J_z / 2 at arm angle ``alpha``: its stationary points are the relative
    equilibria of the governor turning steadily at ``spin``."""
    potential, inertia_z = _pose_sums(alpha)
    return potential - 0.5 * spin**2 * inertia_z


def steady_angle(spin: float | None = None) -> float:
    """Arm angle of the relative equilibrium at ``spin`` (default :func:`steady_speed`)."""
    spin = steady_speed() if spin is None else spin
    step = 1e-6

    def slope(alpha):
        return (effective_potential(alpha + step, spin)
                - effective_potential(alpha - step, spin)) / (2.0 * step)

    return float(brentq(slope, np.radians(1.0), np.radians(85.0), xtol=1e-12))


def steady_lift(spin: float | None = None) -> float:
    """Sleeve rise above its initial height in steady spin."""
    return pose(steady_angle(spin))["sleeve_z"] - pose(ARM_ANGLE)["sleeve_z"]


def settling_time_constant() -> float:
    """Time constant of the final approach to the steady state, quasi-static estimate: near
    w* the balls follow the speed (their swing is faster than the approach), so the spin's
    angular momentum is H(w) = J_z(alpha*(w)) w and dH/dw dw/dt = TAU(w) - C_LOAD w, whose
    slope at w* is -(TAU_MAX / W_MAX + C_LOAD)."""
    spin, step = steady_speed(), 1e-4

    def momentum(w):
        return _pose_sums(steady_angle(w))[1] * w

    effective_inertia = (momentum(spin + step) - momentum(spin - step)) / (2.0 * step)
    return effective_inertia / (TAU_MAX / W_MAX + C_LOAD)


def report(solution: mbs.Solution) -> str:
    spin = solution.joint("bearing").rate
    lift = solution.joint("sleeve_guide").position
    energy = solution.energy()
    scale = max(float(np.max(np.abs(energy))), float(np.max(solution.kinetic_energy())),
                float(np.max(np.abs(solution.work))))
    per_step = float(np.max(np.abs(np.diff(solution.energy_balance())))) / scale
    return "\n".join([
        f"spindle speed at the end {spin[-1]:.5f} rad/s (steady state {steady_speed():.5f}, "
        f"approached with time constant ~{settling_time_constant():.3f} s)",
        f"sleeve lift at the end {lift[-1] * 1e3:.4f} mm (steady state "
        f"{steady_lift() * 1e3:.4f} mm, arms at {np.degrees(steady_angle()):.3f} deg)",
        f"energy balance E - E0 - W: largest change in a step {per_step:.1e} of the energy "
        f"scale {scale:.3g} J",
    ])


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
