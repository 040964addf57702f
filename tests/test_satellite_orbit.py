"""A spacecraft in Earth orbit, in SI units: the gravity-gradient torque is 1e-15 of the
point-mass potential, and the energy-momentum scheme still conserves energy and angular
momentum to round-off and resolves the attitude at second order."""

from __future__ import annotations

import numpy as np
import pytest

import mbs

MU = 3.986e14  # m^3/s^2
PERIGEE = 7.0e6  # m
ECCENTRICITY = 0.2
PERIOD = 2.0 * np.pi * np.sqrt((PERIGEE / (1.0 - ECCENTRICITY)) ** 3 / MU)


@pytest.fixture(scope="module")
def spacecraft() -> mbs.Model:
    """100 kg, principal moments 10, 12, 14 kg m^2, tilted and slowly tumbling, released at
    perigee of an orbit of eccentricity 0.2 (period 8140 s)."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=100.0, inertia=(10.0, 12.0, 14.0), name="craft"))
    speed = np.sqrt(MU * (1.0 + ECCENTRICITY) / PERIGEE)
    body.set_state(position=(PERIGEE, 0.0, 0.0), velocity=(0.0, speed, 0.0),
                   rotation=mbs.rotation_about_x(0.3), angular_velocity=(0.0, 5e-4, 1e-3))
    system.add(mbs.forces.CentralGravity(MU, name="earth"))
    return system.compile()


def test_one_orbit_in_500_steps_conserves_energy_and_angular_momentum(spacecraft):
    """16 s steps, each solved without refinement. Energy and angular momentum about the
    centre are conserved by EM; the bound is a random walk of a few eps per step over 500
    steps (~1e-14) with a margin of 10."""
    solution = mbs.simulate(spacecraft, "em", h=PERIOD / 500, t_end=PERIOD)
    assert solution.stats["refined_steps"] == [] and solution.stats["restarts"] == []
    energy, momentum = solution.energy(), solution.angular_momentum()
    assert np.abs(energy - energy[0]).max() <= 1e-13 * abs(energy[0])
    assert np.abs(momentum - momentum[0]).max() <= 1e-13 * np.abs(momentum).max()


def test_the_attitude_converges_at_second_order(spacecraft):
    """The gravity-gradient torque changes the spin by about 60% over the orbit; the final
    attitude of runs at h, h/2, h/4 differs by amounts falling 4-fold (EM is of order 2).
    A torque drowned in the round-off of the point-mass term would break that ratio."""
    attitudes = [mbs.simulate(spacecraft, "em", h=PERIOD / steps, t_end=PERIOD)
                 .body("craft").rotation[-1] for steps in (250, 500, 1000)]
    coarse = np.abs(attitudes[0] - attitudes[1]).max()
    fine = np.abs(attitudes[1] - attitudes[2]).max()
    assert coarse == pytest.approx(4.0 * fine, rel=0.05)


def test_many_satellites_on_one_orbit_are_not_taken_for_a_fall_into_the_centre():
    """The step check against a potential's singular configuration compares each element's
    own distance and travel: 100 satellites at 50 steps per orbit (each moving 0.13 of its
    distance per step) need no sub-steps, as one alone does not."""
    system = mbs.System()
    for k in range(100):
        angle = 2.0 * np.pi * k / 100
        body = system.add(mbs.PointMass(1e-3, name=f"sat{k}"))
        body.set_state(position=(np.cos(angle), np.sin(angle), 0.0),
                       velocity=(-np.sin(angle), np.cos(angle), 0.0))
    system.add(mbs.forces.CentralGravity(mu=1.0, name="planet"))
    solution = mbs.simulate(system.compile(), "em", h=2.0 * np.pi / 50, t_end=np.pi)
    assert solution.stats["refined_steps"] == []
