"""Per-step cost of models with joint-angle efforts, compiled angle geometry against NumPy.

    python -m benchmarks.angle_efforts

Joint torques, joint dampers and ``JointEfforts`` on revolute and universal joints act
through the angle's geometry (s, J, ds/dq, dJ/dq), evaluated at every Newton iterate. With
numba installed :mod:`mbs.forces.angle_kernels` evaluates it compiled; with
``mbs.forces.applied.USE_ANGLE_KERNELS`` off, the batched NumPy form does. Best of 5 runs
(CPU time / steps, the two forms alternated run by run) after a warm-up, EM, and the ratio
NumPy / compiled.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mbs
import mbs.forces.applied

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import motor_slider_crank  # noqa: E402
import reaction_wheel  # noqa: E402


def flywheel() -> mbs.System:
    """A wheel on a hinge to the ground with a motor torque of its rate and a damper."""
    system = mbs.System()
    wheel = system.add(mbs.RigidBody(5.0, np.diag([0.06, 0.06, 0.1]), name="wheel"))
    wheel.set_state(angular_velocity=(0.0, 0.0, 3.0))
    axle = system.add(mbs.joints.Revolute(system.ground, wheel, point=(0, 0, 0),
                                          axis=(0, 0, 1), name="axle"))
    system.add(mbs.forces.JointTorque(axle, lambda t, angle, rate: 2.0 - 0.1 * rate))
    system.add(mbs.forces.JointDamper(axle, 0.02))
    return system


def pd_arm(links: int = 3) -> mbs.System:
    """A planar arm of ``links`` hinged links under gravity, held by one PD law on all
    joint angles (``JointEfforts``)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous, hinges = system.ground, []
    for k in range(links):
        link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.5, ly=0.05, lz=0.05,
                                                   name=f"link{k}"))
        link.set_state(position=(0.25 + 0.5 * k, 0.0, 0.0))
        hinges.append(system.add(mbs.joints.Revolute(previous, link, point=(0.5 * k, 0, 0),
                                                     axis=(0, 1, 0), name=f"hinge{k}")))
        previous = link
    target = np.linspace(0.2, 0.6, links)
    system.add(mbs.forces.JointEfforts(
        hinges, lambda t, angles, rates: -40.0 * (angles - target) - 4.0 * rates))
    return system


#: name -> (build, h, steps)
MODELS = {
    "flywheel (motor law, damper)": (flywheel, 1e-3, 300),
    "PD arm, 3 links (JointEfforts)": (pd_arm, 2e-3, 200),
    "motor slider-crank (torque, damper)": (motor_slider_crank.build, 2e-3, 200),
    "reaction wheel (PD law on states)": (reaction_wheel.build, 0.08, 50),
}


def main(rounds: int = 5) -> None:
    warnings.simplefilter("ignore")
    forms = (False, True)
    print(f"{'model':<38} {'n':>4} {'numpy':>11} {'compiled':>11} {'ratio':>6}")
    for label, (build, h, steps) in MODELS.items():
        model = build().compile()
        best = dict.fromkeys(forms, np.inf)
        for round_ in range(rounds + 1):
            for compiled in forms:
                mbs.forces.applied.USE_ANGLE_KERNELS = compiled
                started = time.process_time()
                mbs.simulate(model, "em", h=h, t_end=steps * h)
                if round_:  # the first round warms up (and compiles the kernels)
                    best[compiled] = min(best[compiled], time.process_time() - started)
        numpy_step, compiled_step = (best[form] / steps * 1e6 for form in forms)
        print(f"{label:<38} {model.n:>4} {numpy_step:8.0f} us {compiled_step:8.0f} us "
              f"{numpy_step / compiled_step:6.2f}")
    mbs.forces.applied.USE_ANGLE_KERNELS = True


if __name__ == "__main__":
    main()
