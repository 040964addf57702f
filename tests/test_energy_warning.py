"""The end-of-run energy check: silent on accurate runs that start with little energy, loud on
runs beyond a scheme's stability limit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs

GRAVITY = 9.81


def falling_mass(speed: float) -> mbs.Model:
    """A free point mass released at the zero of the gravity potential, moving up at
    ``speed``: almost no energy at the start, its kinetic energy grows with the fall."""
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    mass = system.add(mbs.PointMass(1.5, name="mass"))
    mass.set_state(position=(0.0, 0.0, 0.0), velocity=(0.0, 0.0, speed))
    return system.compile()


def energy_messages(caught) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, RuntimeWarning) and "changed the energy" in str(w.message)]


def test_a_fall_from_the_zero_of_the_potential_is_not_reported_as_energy_loss():
    """GGL-VI S is symplectic Euler here (kick with the force at q^n, then drift): in a
    uniform field q^n = q^0 + v^0 t + g (t^2 + t h)/2 and v^n = v^0 + g t exactly, so the
    energy changes by -m |g|^2 t h / 2, a fraction h / t of the kinetic energy gained. The
    run starts with 0.03 J and ends with 290 J of kinetic energy; its first-order energy
    error is no sign of instability."""
    h, t_end, speed = 0.01, 2.0, 0.2
    model = falling_mass(speed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = mbs.simulate(model, "ggl-vi-s", h=h, t_end=t_end)
    energy = solution.energy()
    expected = -1.5 * GRAVITY**2 * solution.t * h / 2.0
    # round-off of energies up to ~300 J over 200 steps
    np.testing.assert_allclose(energy - energy[0], expected, rtol=0.0, atol=1e-10)
    assert energy_messages(caught) == []


def test_a_run_beyond_the_stability_limit_still_warns():
    """RATTLE's kick-drift-kick on a spring is stable for h omega < 2 only; at h omega = 2.2
    the oscillation grows by a factor of about 2 per step and the energy explodes."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.1, 0.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=100.0, rest_length=1.0,
                                 name="spring"))
    model = system.compile()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = mbs.simulate(model, "rattle", h=0.22, t_end=2.2)
    messages = energy_messages(caught)
    assert messages and "beyond the scheme's stability or accuracy limit" in messages[-1]
    # the size of the blow-up is stated, not only its share of the (grown) kinetic energy
    energy = solution.energy()
    growth = np.max(np.abs(energy)) / abs(energy[0])
    assert growth > 1e3 and f"up to {growth:.3g} times its initial size" in messages[-1]
    # the change as a share of the energy the motion exchanges, in per cent
    change = np.max(np.abs(energy - energy[0]))
    scale = float(messages[-1].split(" % of the ")[1].split()[0])
    share = float(messages[-1].split(" % of the ")[0].rsplit("(", 1)[1])
    assert share == pytest.approx(100.0 * change / scale, rel=1e-2) and share > 100.0


def test_a_motor_driving_a_damped_disc_is_not_reported_at_an_accurate_step():
    """I theta'' = 2 sin 3t - 0.4 theta' (I = 0.8): the motor passes energy in and out every
    cycle and the damper takes some. GGL-VI S is first order; its energy balance errs by
    O(h) of that flow, not of the small net work, and the run is accurate: the angle's
    error stays below the first-order bound h/2 max|theta''| t_end = 0.125 rad (observed
    ~4e-3) against an independent reference integration."""
    from scipy.integrate import solve_ivp

    system = mbs.System()
    disc = system.add(mbs.RigidBody(mass=1.0, inertia=(0.5, 0.5, 0.8), name="disc"))
    axle = system.add(mbs.joints.Revolute(system.ground, disc, point=(0.0, 0.0, 0.0),
                                          axis=(0.0, 0.0, 1.0), name="axle"))
    system.add(mbs.forces.JointTorque(axle, lambda t: 2.0 * np.sin(3.0 * t), name="motor"))
    system.add(mbs.forces.JointDamper(axle, 0.4, name="friction"))
    h, t_end = 0.02, 5.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = mbs.simulate(system.compile(), "ggl-vi-s", h=h, t_end=t_end)
    reference = solve_ivp(lambda t, y: [y[1], (2.0 * np.sin(3.0 * t) - 0.4 * y[1]) / 0.8],
                          (0.0, t_end), [0.0, 0.0], rtol=1e-12, atol=1e-14,
                          dense_output=True)
    error = np.abs(solution.joint("axle").position - reference.sol(solution.t)[0]).max()
    assert error <= h / 2 * (2.0 / 0.8) * t_end
    assert energy_messages(caught) == []


def test_a_body_resting_on_a_rail_is_not_reported():
    """A slider on a horizontal prismatic joint in gravity stays at rest; its height varies
    by round-off only (HBVM enforces the constraints to round-off of their energy), which
    changes its potential energy by |m g| eps |q|: nothing to report."""
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    slider = system.add(mbs.RigidBody.from_shape("box", mass=2.5, lx=0.2, ly=0.1, lz=0.1,
                                                 name="slider"))
    slider.set_state(position=(0.3, 0.0, 0.0))
    system.add(mbs.joints.Prismatic(system.ground, slider, point=(0.3, 0.0, 0.0),
                                    axis=(1.0, 0.0, 0.0), name="rail"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solution = mbs.simulate(system.compile(), "hbvm", h=0.01, t_end=5.0)
    assert np.abs(solution.q - solution.q[0]).max() <= 1e-15
    assert energy_messages(caught) == []
