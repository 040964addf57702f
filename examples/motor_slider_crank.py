"""Motor-driven slider-crank: run-up against a dashpot and a gas load to a steady speed.

The slider-crank of ``slider_crank.py`` (crank O-A hinged to the ground about y, rod A-P,
piston P on a prismatic guide along x, spherical joint at A and universal joint at P, so the
planar loop has no redundant equation) with the crank made a flywheel disc centred on O, and
three work-doing elements:

* a motor on the crank pivot with a linear torque-speed curve (a DC motor),
  tau = TAU_STALL (1 - rate / RATE_NO_LOAD)  (``mbs.forces.JointTorque``, f(t, angle, rate));
* a dashpot on the piston, force -C v along the guide (``mbs.forces.Damper`` between the
  ground and the piston, its ground point on the guide line);
* a gas load that opposes the piston's motion with a nearly constant force,
  -F_GAS tanh(v / V_SMOOTH) (``mbs.forces.JointForce`` on the guide); the tanh smooths the
  sign change at the dead centres so that Newton's method sees a differentiable force.

Started at rest, the crank runs up to the speed where the motor's mean power equals the mean
dissipation: about 39.2 rad/s (:func:`predicted_speed` solves that balance at constant crank
speed), approached with a time constant of about 0.5 s (:func:`run_up_time_constant`). The
flywheel keeps the speed swing within a revolution near 7 % (:func:`speed_fluctuation`; the
piston and rod change the reduced inertia with the crank angle), and the constant-speed
balance is accurate to the square of that swing. With "em" the energy balance
E(t) - E(0) = W(t) (W the work of motor, dashpot and gas load) holds at every step to
round-off; :func:`element_work` splits W by element.

The rod helper and the dimensions come from ``slider_crank.py``, which must sit next to this
file (as in the repository's examples/ folder).

    python examples/motor_slider_crank.py --animate motor_slider.mp4
"""

from __future__ import annotations

import sys

import numpy as np
from slider_crank import CRANK, ROD, Y, bar

import mbs

FLYWHEEL_MASS, FLYWHEEL_RADIUS, FLYWHEEL_WIDTH = 10.0, 0.25, 0.03
ROD_MASS, PISTON_MASS = 0.8, 1.5
CRANK_ANGLE = np.radians(45.0)  # initial crank pin angle from the x axis, in the x-z plane
TAU_STALL, RATE_NO_LOAD = 30.0, 50.0  # N m, rad/s: the motor's torque-speed line
DASHPOT = 8.0  # N s/m
F_GAS, V_SMOOTH = 30.0, 0.1  # N, m/s
DASHPOT_ANCHOR = np.array([1.2, 0.0, 0.0])  # ground end of the dashpot, on the guide line

RECOMMENDED = dict(solver="em", h=0.002, t_end=4.0)
VIZ = dict(view="front", directors=False,  # the crank pin at the initial pose
           trails={"flywheel": (CRANK * np.cos(CRANK_ANGLE), 0.0, CRANK * np.sin(CRANK_ANGLE))})


def motor_torque(t: float, angle: float, rate: float) -> float:
    """The motor's torque-speed line (the rate is about +y, the crank's running direction)."""
    return TAU_STALL * (1.0 - rate / RATE_NO_LOAD)


def gas_force(t: float, displacement: float, rate: float) -> float:
    """Force on the piston along +x: a smoothed constant force against its motion."""
    return -F_GAS * np.tanh(rate / V_SMOOTH)


def build(crank_angle: float = CRANK_ANGLE) -> mbs.System:
    """The mechanism at rest with the crank pin at ``crank_angle``."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    o = np.zeros(3)
    a = CRANK * np.array([np.cos(crank_angle), 0.0, np.sin(crank_angle)])
    p = np.array([a[0] + np.sqrt(ROD**2 - a[2] ** 2), 0.0, 0.0])
    flywheel = system.add(mbs.RigidBody.from_shape(
        "cylinder", mass=FLYWHEEL_MASS, radius=FLYWHEEL_RADIUS, length=FLYWHEEL_WIDTH,
        name="flywheel"))  # disc axis d3 along y, d1 towards the crank pin
    d1 = a / CRANK
    flywheel.set_state(position=o, rotation=np.column_stack([d1, np.cross(Y, d1), Y]))
    rod = system.add(bar("rod", a, p, mass=ROD_MASS))
    piston = system.add(mbs.RigidBody.from_shape("box", mass=PISTON_MASS, lx=0.12, ly=0.08,
                                                 lz=0.06, name="piston"))
    piston.set_state(position=p)
    rod_line = (p - a) / np.linalg.norm(p - a)
    pivot = system.add(mbs.joints.Revolute(system.ground, flywheel, point=o, axis=Y,
                                           name="crank_pivot"))
    system.add(mbs.joints.Spherical(flywheel, rod, point=a, name="crank_pin"))
    system.add(mbs.joints.Universal(rod, piston, point=p, axis_a=np.cross(Y, rod_line),
                                    axis_b=Y, name="wrist_pin"))
    guide = system.add(mbs.joints.Prismatic(system.ground, piston, point=p,
                                            axis=(1.0, 0.0, 0.0), name="guide"))
    system.add(mbs.forces.JointTorque(pivot, motor_torque, name="motor"))
    system.add(mbs.forces.Damper(system.ground, piston, DASHPOT, point_a=DASHPOT_ANCHOR,
                                 name="dashpot"))
    system.add(mbs.forces.JointForce(guide, gas_force, name="gas"))
    return system


# -- analysis -----------------------------------------------------------------------------------
def piston_velocity_factor(theta: np.ndarray) -> np.ndarray:
    """dx_P / d(crank rotation about +y) at the crank pin angle theta (from x towards z).

    x_P = r cos(theta) + sqrt(L^2 - r^2 sin^2 theta), and a rotation about +y decreases theta.
    """
    s = CRANK * np.sin(theta)
    return CRANK * np.sin(theta) + s * CRANK * np.cos(theta) / np.sqrt(ROD**2 - s**2)


def _crank_samples(samples: int = 3600) -> tuple[np.ndarray, np.ndarray]:
    """Crank angles over a revolution and dx_P/dtheta there."""
    theta = np.linspace(0.0, 2.0 * np.pi, samples, endpoint=False)
    return theta, piston_velocity_factor(theta)


def predicted_speed() -> float:
    """Crank speed at which the motor's power balances the mean dissipation, for a crank
    turning at constant speed w (gravity does no work over a revolution):
    TAU(w) w = C w^2 <g^2> + F_GAS w <|g|>  with g = dx_P/dtheta averaged over the crank
    angle (the tanh taken as the sign; the smoothing changes the gas work by ~1e-4)."""
    _, g = _crank_samples()
    mean_square, mean_abs = float(np.mean(g**2)), float(np.mean(np.abs(g)))
    # TAU_STALL (1 - w / RATE_NO_LOAD) = C <g^2> w + F_GAS <|g|>
    return (TAU_STALL - F_GAS * mean_abs) / (TAU_STALL / RATE_NO_LOAD + DASHPOT * mean_square)


def reduced_inertia(theta: np.ndarray) -> np.ndarray:
    """Inertia of the mechanism reduced to the crank, J(theta) = 2 T / w^2, with the rod
    split into two point masses at its pins (the classical two-mass approximation): half
    turns with the crank pin, half reciprocates with the piston."""
    g = piston_velocity_factor(theta)
    return (0.5 * FLYWHEEL_MASS * FLYWHEEL_RADIUS**2 + 0.5 * ROD_MASS * CRANK**2
            + (PISTON_MASS + 0.5 * ROD_MASS) * g**2)


def run_up_time_constant() -> float:
    """Time constant of the approach to the steady speed: mean J over the slope of the mean
    net torque, -d/dw (TAU(w) - C <g^2> w - F_GAS <|g|>) = TAU_STALL / RATE_NO_LOAD +
    C <g^2>."""
    theta, g = _crank_samples()
    slope = TAU_STALL / RATE_NO_LOAD + DASHPOT * float(np.mean(g**2))
    return float(np.mean(reduced_inertia(theta))) / slope


def speed_fluctuation() -> float:
    """Estimated peak-to-peak relative swing of the crank speed in steady running: the
    kinetic energy J w^2 / 2 varies little within a revolution (the flywheel dominates), so
    w_max / w_min ~ sqrt(J_max / J_min). The constant-speed balance of
    :func:`predicted_speed` neglects terms of second order in this swing."""
    j = reduced_inertia(_crank_samples()[0])
    return float(np.sqrt(j.max() / j.min())) - 1.0


def crank_turns(solution: mbs.Solution) -> np.ndarray:
    """Crank rotation about +y since the start [rad] (unwrapped joint angle)."""
    return solution.joint("crank_pivot").position


def revolution_means(solution: mbs.Solution) -> np.ndarray:
    """Mean crank speed over each completed revolution (rotation / time of the revolution),
    with the revolutions' ends found by linear interpolation of the crank angle."""
    angle, t = crank_turns(solution), solution.t
    ends = np.arange(1, int(angle[-1] // (2.0 * np.pi)) + 1) * 2.0 * np.pi
    times = np.interp(ends, angle, t)  # the angle increases monotonically once running
    return 2.0 * np.pi / np.diff(np.concatenate([[np.interp(0.0, angle, t)], times]))


def element_work(solution: mbs.Solution) -> dict[str, np.ndarray]:
    """Cumulative work of the motor, the dashpot and the gas load, (N+1,) each, as EM applies
    it (:meth:`mbs.Solution.force`). Their sum is ``solution.work`` (to round-off) for "em";
    for other schemes it is a second-order estimate."""
    return {name: solution.force(name).work for name in ("motor", "dashpot", "gas")}


def report(solution: mbs.Solution) -> str:
    means = revolution_means(solution)
    works = element_work(solution)
    energy = solution.energy()
    scale = max(float(np.max(np.abs(energy))), float(np.max(solution.kinetic_energy())),
                float(np.max(np.abs(solution.work))))
    per_step = float(np.max(np.abs(np.diff(solution.energy_balance())))) / scale
    speed = (f"mean crank speed over the last revolution {means[-1]:.4f} rad/s "
             f"({len(means)} revolutions; predicted at constant speed {predicted_speed():.3f})"
             if means.size else "the crank has not completed a revolution yet")
    return "\n".join([
        speed,
        f"work: motor {works['motor'][-1]:.4f} J, dashpot {works['dashpot'][-1]:.4f} J, gas "
        f"load {works['gas'][-1]:.4f} J; sum {sum(w[-1] for w in works.values()):.6f} J, "
        f"solution.work {solution.work[-1]:.6f} J",
        f"energy E_end - E_0 = {energy[-1] - energy[0]:.6f} J; balance E - E0 - W: max "
        f"{np.max(np.abs(solution.energy_balance())):.2e} J, largest change in a step "
        f"{per_step:.1e} of the energy scale {scale:.3g} J",
    ])


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
