"""Reaction wheel: a satellite slews to a commanded yaw by spinning its wheel.

A box-shaped satellite in free space (no gravity) carries a reaction wheel on a revolute
joint along the satellite's z axis (d3) through its centre of mass. The wheel's motor applies
the torque tau to the wheel and -tau to the satellite; its control law reads the satellite's
attitude from the joint's bodies: ``mbs.forces.JointTorque(joint, law)`` with
``law(t, angle, rate, bodies)``, where ``bodies[0]`` is the satellite's
:class:`mbs.forces.BodyState` (the satellite is body_a of the joint) and ``bodies[1]`` the
wheel's. A PD law on the yaw error,

    torque on the satellite  -tau = KP (YAW_COMMAND - yaw) - KD yaw_rate,

makes the satellite's yaw a damped oscillator I_z yaw'' = -KP (yaw - YAW_COMMAND) - KD yaw'
with natural frequency sqrt(KP / I_z) = OMEGA_N and damping ratio ZETA (I_z the satellite
body's own moment of inertia about z; the wheel's axial momentum is driven by tau alone), so
the pointing error decays like (1 + OMEGA_N t) exp(-OMEGA_N t) for ZETA = 1
(:func:`predicted_error`).

No external torque acts: the total angular momentum, satellite plus wheel, stays at its
initial value (the wheel's bias momentum) to round-off with "em" -- the motor only moves
momentum between the bodies: the wheel's speed relative to the satellite changes by
(I_z + I_w) / I_w times the satellite's yaw rate. The 60 degree slew takes the wheel from its
bias speed of 8 rad/s down to 3.06 rad/s and back; after 24 s (12 / OMEGA_N) the satellite
points within 0.005 degrees of the command, as the closed loop predicts.

Step size: the wheel turns (I_z + I_w) / I_w times faster than the satellite slews, and
Newton's method needs a few iterations only while the wheel turns well below a radian per
step (h x wheel speed < ~0.5; at several radians per step it takes 10 or more). The wheel
here is oversized (I_w ~ I_z / 25; real wheels are ~1/1000 of the satellite) and its bias
speed low, so that h = 0.08 s (OMEGA_N h = 0.04, accurate to ~1e-3 in the slew) keeps
h x wheel speed <= 0.64. For a realistic wheel choose h from its top speed. A torque law
that reads ``bodies`` has its Jacobian by finite differences (48 law evaluations per Newton
matrix here), which makes each step cost tens of milliseconds.

    python examples/reaction_wheel.py --animate slew.mp4
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

Z = np.array([0.0, 0.0, 1.0])
SATELLITE_MASS, SATELLITE_SIZE = 20.0, (0.4, 0.3, 0.3)  # kg; box lx, ly, lz in m
WHEEL_MASS, WHEEL_RADIUS, WHEEL_WIDTH = 2.0, 0.13, 0.04
WHEEL_BIAS = 8.0  # rad/s, the wheel's initial speed relative to the satellite
YAW_START, YAW_COMMAND = np.radians(10.0), np.radians(70.0)
OMEGA_N, ZETA = 0.5, 1.0  # closed-loop natural frequency (rad/s) and damping ratio

RECOMMENDED = dict(solver="em", h=0.08, t_end=24.0)
VIZ = dict(view="top", directors=["satellite"], ground_plane=False,
           visuals={"satellite": {"opacity": 0.35}})


def satellite_inertia_z() -> float:
    lx, ly, _ = SATELLITE_SIZE
    return SATELLITE_MASS * (lx**2 + ly**2) / 12.0


KP = satellite_inertia_z() * OMEGA_N**2  # N m / rad
KD = 2.0 * ZETA * OMEGA_N * satellite_inertia_z()  # N m s / rad


def yaw_of(rotation: np.ndarray) -> float:
    """Yaw of a frame: the angle of its d1 in the x-y plane from the x axis. Works for the
    not quite orthonormal directors at which the schemes evaluate forces (only the
    direction of d1 matters)."""
    return float(np.arctan2(rotation[1, 0], rotation[0, 0]))


def wrap(angle: float) -> float:
    """The angle in (-pi, pi]."""
    return float(np.pi - (np.pi - angle) % (2.0 * np.pi))


def wheel_torque(t: float, angle: float, rate: float, bodies) -> float:
    """The motor torque on the wheel (about +z) from the satellite's attitude: the PD law."""
    satellite = bodies[0]
    error = wrap(yaw_of(satellite.rotation) - YAW_COMMAND)
    return KP * error + KD * satellite.angular_velocity[2]


def build(yaw: float = YAW_START, wheel_rate: float = WHEEL_BIAS) -> mbs.System:
    """The satellite at rest at ``yaw`` with its wheel turning at ``wheel_rate`` (relative)."""
    system = mbs.System(gravity=None)
    lx, ly, lz = SATELLITE_SIZE
    satellite = system.add(mbs.RigidBody.from_shape("box", mass=SATELLITE_MASS, lx=lx, ly=ly,
                                                    lz=lz, name="satellite"))
    wheel = system.add(mbs.RigidBody.from_shape("cylinder", mass=WHEEL_MASS,
                                                radius=WHEEL_RADIUS, length=WHEEL_WIDTH,
                                                name="wheel"))  # axis d3
    rotation = mbs.rotation_about_z(yaw)
    satellite.set_state(position=np.zeros(3), rotation=rotation)
    wheel.set_state(position=np.zeros(3), rotation=rotation, angular_velocity=wheel_rate * Z)
    joint = system.add(mbs.joints.Revolute(satellite, wheel, point=np.zeros(3), axis=Z,
                                           name="wheel_bearing"))
    system.add(mbs.forces.JointTorque(joint, wheel_torque, name="wheel_motor"))
    return system


# -- analysis -----------------------------------------------------------------------------------
def predicted_error(t: np.ndarray) -> np.ndarray:
    """Yaw error of the closed loop I_z e'' + KD e' + KP e = 0 from rest (critical damping
    for ZETA = 1, else the general damped oscillator)."""
    e0, t = YAW_START - YAW_COMMAND, np.asarray(t, float)
    if ZETA == 1.0:
        return e0 * (1.0 + OMEGA_N * t) * np.exp(-OMEGA_N * t)
    roots = np.roots([1.0, 2.0 * ZETA * OMEGA_N, OMEGA_N**2])
    a = np.linalg.solve(np.array([[1.0, 1.0], roots]), [e0, 0.0])
    return np.real(a[0] * np.exp(roots[0] * t) + a[1] * np.exp(roots[1] * t))


def yaw_error(solution: mbs.Solution) -> np.ndarray:
    """Satellite yaw minus the command, wrapped to (-pi, pi], at the nodes."""
    rotation = solution.body("satellite").rotation
    return np.array([wrap(yaw_of(r) - YAW_COMMAND) for r in rotation])


def momentum_drift(solution: mbs.Solution) -> float:
    """max |H(t) - H(0)| / |H(0)| of the total angular momentum about the centre of mass."""
    momentum = solution.angular_momentum()
    return float(np.max(np.linalg.norm(momentum - momentum[0], axis=1))
                 / np.linalg.norm(momentum[0]))


def report(solution: mbs.Solution) -> str:
    error = yaw_error(solution)
    wheel = solution.joint("wheel_bearing").rate
    momentum = solution.angular_momentum()
    energy = solution.energy()
    scale = max(float(np.max(np.abs(energy))), float(np.max(np.abs(solution.work))))
    per_step = float(np.max(np.abs(np.diff(solution.energy_balance())))) / scale
    return "\n".join([
        f"pointing error at t = {solution.t[-1]:g} s: {np.degrees(error[-1]):.3e} deg "
        f"(closed loop predicts {np.degrees(predicted_error(solution.t[-1])):.3e} deg; "
        f"slew of {np.degrees(YAW_COMMAND - YAW_START):g} deg)",
        f"wheel speed relative to the satellite: start {wheel[0]:.4f}, end {wheel[-1]:.4f}, "
        f"extremes {wheel.min():.4f} .. {wheel.max():.4f} rad/s",
        f"total angular momentum H0 = {np.array2string(momentum[0], precision=6)} N m s, "
        f"max |H - H0| / |H0| = {momentum_drift(solution):.2e}",
        f"energy balance: motor work {solution.work[-1]:.6g} J, largest change of "
        f"E - E0 - W in a step {per_step:.1e} of the energy scale {scale:.3g} J",
    ])


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
