"""Torsion springs on revolute and cylindrical joints: the potential on closed joints against
1/2 k (theta - theta0)^2, the torsional oscillator against its closed form, conservation with
the energy-momentum scheme, damping, saving and errors. Derivatives and the discrete gradient
are checked with the other potentials in tests/test_forces.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mechanisms import random_rotation

import mbs
from mbs.forces import TorsionSpring


def axis_rotation(axis, angle: float) -> np.ndarray:
    """Rodrigues' formula."""
    axis = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]],
                  [-axis[1], axis[0], 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * k @ k


def directors(rotation: np.ndarray) -> np.ndarray:
    return rotation.T.ravel()  # d_i = R e_i, stacked


@pytest.mark.parametrize("rest_angle", [0.0, 0.4, -2.5, np.pi])
def test_potential_is_hookean_in_the_joint_angle(rng, rest_angle):
    """Both bodies turned by a random rotation, body b further by theta about the turned
    axis: V = 1/2 k wrap(theta - theta0)^2, wrapped into (-pi, pi]."""
    axis = np.array([1.0, -2.0, 0.5])
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, np.diag([2.0, 2.5, 3.0]), name="a"))
    a.set_state(rotation=random_rotation(rng))
    b = system.add(mbs.RigidBody(2.0, np.diag([2.0, 2.0, 1.0]), name="b"))
    b.set_state(position=(0.3, 0.1, -0.2), rotation=random_rotation(rng))
    hinge = system.add(mbs.joints.Revolute(a, b, point=(0.1, 0.0, 0.0), axis=axis))
    system.add(TorsionSpring(hinge, stiffness=3.0, rest_angle=rest_angle))
    model = system.compile()
    q = model.initial_state()[0].copy()
    for theta in np.linspace(-3.0, 3.0, 13):
        turn = random_rotation(rng)
        q[3:12] = directors(turn @ a.rotation)
        q[15:24] = directors(turn @ axis_rotation(axis, theta) @ b.rotation)
        alpha = (theta - rest_angle + np.pi) % (2 * np.pi) - np.pi
        assert model.potential(q) == pytest.approx(1.5 * alpha**2, rel=1e-12, abs=1e-14)


def torsional_oscillator(rest_angle=0.3, damping=None, joint="Revolute"):
    """A disc on a ground joint about z, turning at 1.5 rad/s at its initial pose; no
    gravity. Polar moment J = 0.5, k = 8: omega = 4 rad/s."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody(2.0, np.diag([0.3, 0.3, 0.5]), name="disc"))
    disc.set_state(position=(0.0, 0.0, 0.2), angular_velocity=(0.0, 0.0, 1.5))
    hinge = system.add(getattr(mbs.joints, joint)(system.ground, disc, point=(0.0, 0.0, 0.0),
                                                  axis=(0.0, 0.0, 1.0)))
    system.add(TorsionSpring(hinge, stiffness=8.0, rest_angle=rest_angle, damping=damping,
                             name="coil"))
    return system


def disc_angle(solution) -> np.ndarray:
    rotation = solution.body("disc").rotation
    return np.unwrap(np.arctan2(rotation[:, 1, 0], rotation[:, 0, 0]))


def oscillator_angle(t, rest_angle=0.3, rate=1.5, omega=4.0):
    """theta(0) = 0, theta'(0) = rate about the rest angle theta0."""
    return rest_angle - rest_angle * np.cos(omega * t) + rate / omega * np.sin(omega * t)


@pytest.mark.parametrize("scheme, options, order", [
    ("em", {}, 2), ("rattle", {}, 2), ("ggl-vi-a", {}, 2), ("hbvm", {}, 4),
    ("lobatto", {"stages": 3}, 4)])
def test_torsional_oscillator_converges_at_the_scheme_order(scheme, options, order):
    model = torsional_oscillator().compile()
    errors = []
    steps = (0.02, 0.01, 0.005)
    for h in steps:
        solution = mbs.simulate(model, scheme, h=h, t_end=2.0, **options)
        errors.append(np.abs(disc_angle(solution) - oscillator_angle(solution.t)).max())
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    # the leading error term dominates from h = 0.02 on (omega h <= 0.08)
    assert slope == pytest.approx(order, abs=0.1), errors


def test_energy_momentum_scheme_conserves_energy_to_round_off():
    """Over a wide swing (rest angle 2.5 rad from the start: the spring winds through
    +-2.9 rad about it) and a long run."""
    model = torsional_oscillator(rest_angle=2.5).compile()
    solution = mbs.simulate(model, "em", h=0.01, t_end=20.0)
    energy = solution.energy()
    # 2000 steps of a round-off ~1e-16 relative each, accumulating at most linearly
    assert np.abs(energy - energy[0]).max() <= 1e-12 * energy[0]
    assert np.abs(disc_angle(solution) - 2.5).max() < np.pi


def test_free_pair_keeps_energy_and_angular_momentum():
    """Two bodies on a hinge with a torsion spring, spinning freely in space: the spring's
    invariants are unchanged by common rotations, so EM conserves angular momentum too."""
    system = mbs.System()
    hub = system.add(mbs.RigidBody(3.0, np.diag([1.0, 1.2, 0.8]), name="hub"))
    hub.set_state(angular_velocity=(0.4, -0.2, 1.0))
    arm = system.add(mbs.RigidBody(1.0, np.diag([0.05, 0.4, 0.4]), name="arm"))
    arm.set_state(position=(0.8, 0.0, 0.0), velocity=np.cross((0.4, -0.2, 1.0), (0.8, 0, 0)),
                  angular_velocity=(0.4, -0.2, 1.0))
    hinge = system.add(mbs.joints.Revolute(hub, arm, point=(0.3, 0.0, 0.0),
                                           axis=(0.0, 1.0, 1.0)))
    system.add(TorsionSpring(hinge, stiffness=5.0, rest_angle=0.6))
    solution = mbs.simulate(system.compile(), "em", h=5e-3, t_end=10.0)
    energy, momentum = solution.energy(), solution.angular_momentum()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * energy[0]
    assert np.abs(momentum - momentum[0]).max() <= 1e-12 * np.linalg.norm(momentum[0])
    # the spring did act: the hinge angle moved by a good part of its rest angle
    relative = np.einsum("kji,kjl->kil", solution.body("hub").rotation,
                         solution.body("arm").rotation)
    assert np.abs(relative - np.eye(3)).max() > 0.2


@pytest.mark.parametrize("joint", ["Revolute", "Cylindrical"])
def test_damped_oscillator_decays_and_balances_its_energy(joint):
    """theta'' + (c/J) theta' + (k/J) (theta - theta0) = 0 with c = 0.4, J = 0.5, k = 8."""
    model = torsional_oscillator(damping=0.4, joint=joint).compile()
    solution = mbs.simulate(model, "lobatto", h=0.01, t_end=2.0, stages=3)
    decay, omega0 = 0.4, 4.0  # c / (2 J), sqrt(k / J)
    omega = np.sqrt(omega0**2 - decay**2)
    t = solution.t
    # theta(0) = 0, theta'(0) = 1.5
    exact = 0.3 + np.exp(-decay * t) * (-0.3 * np.cos(omega * t)
                                         + (1.5 - 0.3 * decay) / omega * np.sin(omega * t))
    # order 4 at omega h = 0.04: an error of about (omega h)^4 / 100 ~ 3e-8 of the amplitude
    assert np.abs(disc_angle(solution) - exact).max() < 1e-7
    assert np.abs(solution.energy_balance()).max() < 1e-7 * solution.energy()[0]


def test_first_order_schemes_give_joint_rates_of_their_order_under_gravity_and_spring():
    """A 1.5 kg, 0.8 m link hinged at one end turns under gravity and a torsion spring
    (k = 2 N m), from 0.3 rad/s: the joint rate read from the nodes' momenta M^-1 p against
    a solve_ivp reference of I phi'' = m g L/2 cos(phi) - k phi. The spring's force on the
    link's directors has a part normal to the constraints that acts on the small director
    inertias; scheme (82) (ggl-vi-b) would leave h times it in p^{n+1}, off by 17 rad/s at
    h = 5 ms. The first-order schemes' position error (about 1e-2 rad, times rates of
    5 rad/s) bounds their rate error by 0.1 rad/s; the velocity constraints hold at the
    nodes to round-off for ggl-vi-b."""
    from scipy.integrate import solve_ivp
    mass, length, width, gravity, stiffness = 1.5, 0.8, 0.05, 9.81, 2.0
    pivot_inertia = mass * (length**2 + width**2) / 12 + mass * (length / 2) ** 2
    system = mbs.System(gravity=(0.0, 0.0, -gravity))
    link = system.add(mbs.RigidBody.from_shape("box", mass=mass, lx=length, ly=width,
                                               lz=width, name="link"))
    spin, centre = np.array([0.0, 0.3, 0.0]), np.array([length / 2, 0.0, 0.0])
    link.set_state(position=centre, velocity=np.cross(spin, centre), angular_velocity=spin)
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0),
                                           axis=(0, 1, 0), name="hinge"))
    system.add(TorsionSpring(hinge, stiffness=stiffness))
    model = system.compile()
    reference = solve_ivp(lambda t, y: [y[1], (mass * gravity * length / 2 * np.cos(y[0])
                                              - stiffness * y[0]) / pivot_inertia],
                          (0.0, 1.0), [0.0, 0.3], method="DOP853", rtol=1e-12, atol=1e-12,
                          dense_output=True)
    for scheme in ("ggl-vi-b", "ggl-vi-s"):
        solution = mbs.simulate(model, scheme, h=0.005, t_end=1.0)
        rate = solution.joint("hinge").rate
        assert np.abs(rate - reference.sol(solution.t)[1]).max() <= 0.1
        if scheme == "ggl-vi-b":
            assert np.abs(solution.constraint_residuals()["velocity"]).max() <= 1e-13


def test_saved_system_reproduces_the_run(tmp_path):
    system = torsional_oscillator(rest_angle=-0.7, damping=0.1)
    mbs.save_system(system, tmp_path / "oscillator.json")
    loaded = mbs.load_system(tmp_path / "oscillator.json")
    spring = loaded["coil"]
    assert (spring.stiffness, spring.rest_angle, spring.damping) == (8.0, -0.7, 0.1)
    runs = [mbs.simulate(s.compile(), "em", h=0.01, t_end=0.5) for s in (system, loaded)]
    np.testing.assert_array_equal(runs[0].q, runs[1].q)


def test_bad_torsion_springs_are_rejected():
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, np.eye(3), name="body"))
    slider = system.add(mbs.joints.Prismatic(system.ground, body, point=(0, 0, 0),
                                             axis=(1, 0, 0), name="slider"))
    with pytest.raises(mbs.ModelError,
                       match="acts on Cylindrical or Revolute joints, got Prismatic 'slider'"):
        TorsionSpring(slider, stiffness=1.0)
    hinge = mbs.joints.Revolute(system.ground, body, point=(0, 0, 0), axis=(0, 0, 1))
    with pytest.raises(mbs.ModelError, match=r"rest_angle 4 .*\[-pi, pi\]"):
        TorsionSpring(hinge, stiffness=1.0, rest_angle=4.0)
    with pytest.raises(mbs.ModelError, match="stiffness"):
        TorsionSpring(hinge, stiffness=-1.0)
    with pytest.raises(mbs.ModelTypeError, match="must be a joint"):
        TorsionSpring(body, stiffness=1.0)
    with pytest.raises(mbs.ModelError, match="'coil'.*not in a system; add the joint first"):
        system.add(TorsionSpring(hinge, stiffness=1.0, name="coil"))


def test_a_spring_wound_beyond_half_a_turn_is_named_after_the_run():
    """A weak spring on a disc spinning at 20 rad/s: the angle passes pi near t = 0.157."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody(2.0, np.diag([0.3, 0.3, 0.5]), name="disc"))
    disc.set_state(angular_velocity=(0.0, 0.0, 20.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0, 0, 0),
                                           axis=(0, 0, 1)))
    system.add(TorsionSpring(hinge, stiffness=1.0, name="coil"))
    with pytest.warns(RuntimeWarning, match="torsion spring 'coil' turned more than half a "
                                            "turn from its rest angle at t = 0.16"):
        mbs.simulate(system.compile(), "em", h=0.01, t_end=0.5)


def test_a_swing_within_half_a_turn_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mbs.simulate(torsional_oscillator(rest_angle=2.5).compile(), "em", h=0.01, t_end=3.0)


def test_em_energy_does_not_drift_with_a_torsion_spring():
    """The torsion spring's discrete gradient is differentiated at the midpoint, so Newton
    converges linearly; an iterate accepted once its increment is small keeps an error of
    one sign, and the energy drifted linearly (9e-13 after 3000 steps at h omega = 0.9).
    Iterated to round-off, the energy error is a random walk of round-off steps: bound by
    15 sqrt(N) eps (the measured spread per step is about 1.5 eps)."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody.from_shape("cylinder", mass=2.0, radius=0.5, length=0.1,
                                               name="disc"))
    disc.set_state(angular_velocity=(0.0, 0.0, 1.5))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0.0, 0.0, 0.0),
                                           axis=(0.0, 0.0, 1.0)))
    system.add(mbs.forces.TorsionSpring(hinge, stiffness=8.0, rest_angle=0.3))
    h, steps = 0.9 / np.sqrt(8.0 / 0.25), 3000
    energy = mbs.simulate(system.compile(), "em", h=h, t_end=steps * h).energy()
    assert abs(energy[-1] - energy[0]) <= 15.0 * np.sqrt(steps) * np.finfo(float).eps * energy[0]


@pytest.mark.parametrize("damping", [None, 0.4])
def test_the_torque_and_work_of_a_torsion_spring(damping):
    """Solution.force of the spring: its torque -k (theta - theta0) at the step midpoint
    angle (plus -c theta' of its damper), against the closed-form oscillator (second
    order: the midpoint of the step); its work is minus the change of its energy plus the
    damper's work, which for em is the change of the total energy."""
    model = torsional_oscillator(damping=damping).compile()
    errors = []
    for h in (0.01, 0.005):
        solution = mbs.simulate(model, "em", h=h, t_end=2.0)
        coil = solution.force("coil")
        t = coil.t
        if damping is None:
            exact = -8.0 * (oscillator_angle(t) - 0.3)
        else:  # J theta'' + c theta' + k (theta - theta0) = 0, J = 0.5, k = 8, c = 0.4
            decay = 0.4
            omega = np.sqrt(16.0 - decay**2)
            a, b = -0.3, (1.5 - 0.3 * decay) / omega
            envelope = np.exp(-decay * t)
            angle = 0.3 + envelope * (a * np.cos(omega * t) + b * np.sin(omega * t))
            rate = envelope * ((b * omega - decay * a) * np.cos(omega * t)
                               - (a * omega + decay * b) * np.sin(omega * t))
            exact = -8.0 * (angle - 0.3) - 0.4 * rate
        errors.append(np.abs(coil.effort - exact).max())
        stored = solution.potential_energy("coil")
        energy = solution.energy()
        np.testing.assert_allclose(coil.work, -(stored - stored[0]) + energy - energy[0],
                                   rtol=0, atol=1e-12 * energy[0])
        assert coil.power.shape == coil.effort.shape
    assert np.log2(errors[0] / errors[1]) == pytest.approx(2.0, abs=0.2), errors
