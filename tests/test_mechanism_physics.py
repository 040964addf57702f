"""Joint mechanisms against closed-form motion (independent of the paper examples)."""

from __future__ import annotations

import numpy as np
import pytest

import mbs


def test_prismatic_slider_on_an_incline_falls_with_g_sin_alpha():
    alpha = np.deg2rad(30.0)
    axis = np.array([np.cos(alpha), 0.0, -np.sin(alpha)])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    slider = system.add(mbs.RigidBody.from_shape("box", lx=0.2, ly=0.1, lz=0.05, mass=2.0,
                                                 name="slider"))
    slider.set_state(rotation=mbs.rotation_about_y(alpha))
    system.add(mbs.joints.Prismatic(system.ground, slider, point=(0, 0, 0), axis=axis))
    model = system.compile()
    assert model.degrees_of_freedom == 1
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0)
    body = solution.body("slider")
    travel = body.position @ axis
    np.testing.assert_allclose(travel, 0.5 * 9.81 * np.sin(alpha) * solution.t**2, atol=1e-12)
    np.testing.assert_allclose(body.rotation, np.broadcast_to(body.rotation[0],
                                                              body.rotation.shape), atol=1e-13)


def test_physical_pendulum_on_a_revolute_joint_has_the_pendulum_period():
    """Rod of length 1 m hinged at its end: T0 = 2 pi sqrt(I_pivot / (m g l_c)), with the
    amplitude correction 1 + theta0^2/16; EM's phase error (omega h)^2/12 ~ 1e-6 at h = 1 ms."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    rod = system.add(mbs.RigidBody.from_shape("cylinder", radius=0.02, length=1.0, mass=1.0,
                                              name="rod"))
    theta0 = 0.01
    rotation = mbs.rotation_about_y(theta0)
    rod.set_state(position=rotation @ np.array([0.0, 0.0, -0.5]), rotation=rotation)
    system.add(mbs.joints.Revolute(system.ground, rod, point=(0, 0, 0), axis=(0, 1, 0)))
    model = system.compile()
    assert model.degrees_of_freedom == 1
    inertia_pivot = (3 * 0.02**2 + 1.0) / 12 + 0.25
    period = 2 * np.pi * np.sqrt(inertia_pivot / (9.81 * 0.5)) * (1 + theta0**2 / 16)
    h = 0.001
    solution = mbs.simulate(model, "em", h=h, t_end=h * round(3 * period / h))
    x = solution.body("rod").position[:, 0]
    down = np.flatnonzero((x[:-1] > 0) & (x[1:] <= 0))
    crossings = solution.t[down] + x[down] / (x[down] - x[down + 1]) * h
    assert abs(np.mean(np.diff(crossings)) - period) / period <= 5e-6


def test_cylindrical_joint_keeps_spin_and_axial_velocity():
    system = mbs.System()
    body = system.add(mbs.RigidBody.from_shape("cylinder", radius=0.1, length=0.5, mass=1.0,
                                               name="c"))
    body.set_state(velocity=(0.0, 0.0, 0.3), angular_velocity=(0.0, 0.0, 5.0))
    system.add(mbs.joints.Cylindrical(system.ground, body, point=(0, 0, 0), axis=(0, 0, 1)))
    model = system.compile()
    assert model.degrees_of_freedom == 2
    solution = mbs.simulate(model, "em", h=0.01, t_end=2.0)
    trajectory = solution.body("c")
    np.testing.assert_allclose(trajectory.position[:, 2], 0.3 * solution.t, atol=1e-12)
    np.testing.assert_allclose(trajectory.angular_velocity, np.tile([0.0, 0.0, 5.0],
                                                                    (solution.t.size, 1)),
                               atol=1e-12)


def test_two_welded_boxes_tumble_like_one_rigid_body():
    """A Rigid joint between two boxes: the pair must move as one body whose inertia follows
    from the parallel-axis theorem (Euler's equations integrated by SciPy as reference)."""
    from scipy.integrate import solve_ivp

    system = mbs.System()
    a = system.add(mbs.RigidBody.from_shape("box", lx=0.4, ly=0.2, lz=0.1, mass=1.0, name="a"))
    b = system.add(mbs.RigidBody.from_shape("box", lx=0.2, ly=0.3, lz=0.2, mass=2.0, name="b"))
    omega = np.array([0.3, 2.0, 0.5])
    offsets = {"a": np.array([-0.2, 0.0, 0.0]), "b": np.array([0.1, 0.0, 0.0])}  # COM at 0
    for body in (a, b):
        r = offsets[body.name]
        body.set_state(position=r, velocity=np.cross(omega, r), angular_velocity=omega)
    system.add(mbs.joints.Rigid(a, b, point=(0.0, 0.0, 0.0)))
    model = system.compile()
    assert model.degrees_of_freedom == 6
    inertia = sum(body.inertia + body.mass * (offsets[body.name] @ offsets[body.name] * np.eye(3)
                                              - np.outer(offsets[body.name],
                                                         offsets[body.name]))
                  for body in (a, b))

    def euler(_, w):
        return np.linalg.solve(inertia, np.cross(inertia @ w, w))

    solution = mbs.simulate(model, "em", h=0.0025, t_end=2.0)
    reference = solve_ivp(euler, (0.0, 2.0), omega, t_eval=solution.t, rtol=1e-12, atol=1e-12,
                          method="DOP853")
    for name in ("a", "b"):
        measured = solution.body(name).angular_velocity_body
        error = np.max(np.abs(measured - reference.y.T))
        assert error <= 2e-5 * np.linalg.norm(omega), error  # measured 3.5e-6 (O(h^2))
    energy = solution.energy()
    assert np.max(np.abs(energy - energy[0])) <= 1e-12 * energy[0]
    angular = solution.angular_momentum()
    assert np.max(np.abs(angular - angular[0])) <= 1e-12 * np.linalg.norm(angular[0])


def test_mass_on_a_hookean_spring_oscillates_with_sqrt_k_over_m():
    system = mbs.System()
    bob = system.add(mbs.PointMass(mass=2.0, name="bob"))
    bob.set_state(position=(1.2, 0.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=50.0, rest_length=1.0))
    model = system.compile()
    h = 0.0005
    solution = mbs.simulate(model, "em", h=h, t_end=2.0)
    omega = np.sqrt(50.0 / 2.0)
    exact = 1.0 + 0.2 * np.cos(omega * solution.t)
    # second-order phase error: amplitude * omega t * (omega h)^2 / 12, with a factor 1.5 margin
    tolerance = 1.5 * 0.2 * omega * 2.0 * (omega * h) ** 2 / 12
    assert np.max(np.abs(solution.q[:, 0] - exact)) <= tolerance
    energy = solution.energy()
    assert np.max(np.abs(energy - energy[0])) <= 1e-12 * energy[0]


def test_circular_kepler_orbit_period_and_invariants():
    mu, radius = 1.0, 2.0
    system = mbs.System()
    planet = system.add(mbs.PointMass(mass=0.1, name="planet"))
    speed = np.sqrt(mu / radius)
    planet.set_state(position=(radius, 0.0, 0.0), velocity=(0.0, speed, 0.0))
    system.add(mbs.forces.CentralGravity(mu))
    model = system.compile()
    period = 2 * np.pi * np.sqrt(radius**3 / mu)
    h = period / 2000
    solution = mbs.simulate(model, "em", h=h, t_end=period)
    position = solution.body("planet").position
    assert np.max(np.abs(np.linalg.norm(position, axis=1) - radius)) <= 1e-4 * radius
    assert np.linalg.norm(position[-1] - position[0]) <= 1e-4 * radius
    energy, angular = solution.energy(), solution.angular_momentum()
    assert np.max(np.abs(energy - energy[0])) <= 1e-12 * abs(energy[0])
    assert np.max(np.abs(angular - angular[0])) <= 1e-12 * np.linalg.norm(angular[0])


@pytest.mark.parametrize(("solver", "options", "order"), [
    ("em", {}, 2), ("rattle", {}, 2), ("lobatto", {"stages": 3}, 4), ("em", {"order": 4}, 4)])
def test_an_eccentric_kepler_orbit_closes_after_its_period_at_the_scheme_order(solver, options,
                                                                                order):
    """e = 0.6, a = 1, mu = 1, started at perihelion: the exact orbit is back there after
    T = 2 pi. The closing error at T/200, T/400, T/800 falls with the scheme's order (fitted
    slope within 0.15: the errors are in the asymptotic range, 1e-3 .. 1e-8); the angular
    momentum, exact for every scheme here (a central force, constraints-free), and EM's
    energy stay at round-off (1e-12 relative: eps sqrt(steps) times the terms' size with a
    margin of 100)."""
    eccentricity, mu = 0.6, 1.0
    perihelion = 1.0 - eccentricity
    system = mbs.System()
    planet = system.add(mbs.PointMass(1.0, name="planet"))
    planet.set_state(position=(perihelion, 0.0, 0.0),
                     velocity=(0.0, np.sqrt(mu * (1.0 + eccentricity) / perihelion), 0.0))
    system.add(mbs.forces.CentralGravity(mu, name="sun"))
    model = system.compile()
    period = 2.0 * np.pi
    errors = []
    for steps in (200, 400, 800):
        solution = mbs.simulate(model, solver, h=period / steps, t_end=period, **options)
        errors.append(np.linalg.norm(solution.body("planet").position[-1]
                                     - (perihelion, 0.0, 0.0)))
        angular = solution.angular_momentum()
        assert np.abs(angular - angular[0]).max() <= 1e-12 * np.linalg.norm(angular[0])
        if solver == "em":
            energy = solution.energy()
            assert np.abs(energy - energy[0]).max() <= 1e-12 * abs(energy[0])
    slope = np.polyfit(np.log([200, 400, 800]), np.log(errors), 1)[0]
    assert abs(-slope - order) <= 0.15, (errors, slope)


def test_a_forced_damped_oscillator_settles_on_the_harmonic_response():
    """m x'' + c x' + k x = F0 sin(w t) (a mass on a Hookean spring and a damper along x,
    shaken by a load): after the transient has decayed (zeta w_n t = 20 at t = 10), x is
    X sin(w t - phi) with X = F0 / sqrt((k - m w^2)^2 + (c w)^2), tan phi = c w / (k - m w^2).
    EM's amplitude and phase errors are O(h^2): at h = 2e-3 and 1e-3 their ratio is 4 (within
    0.5), and at 1e-3 both are below 1e-4 (the transient left is e^-20 ~ 2e-9)."""
    mass, stiffness, damping, force, omega = 1.0, 100.0, 4.0, 2.0, 8.0
    system = mbs.System()
    body = system.add(mbs.PointMass(mass, name="mass"))
    anchor = (-1.0, 0.0, 0.0)
    system.add(mbs.forces.Spring(system.ground, body, stiffness=stiffness, rest_length=1.0,
                                 point_a=anchor, name="spring"))
    system.add(mbs.forces.Damper(system.ground, body, damping=damping, point_a=anchor,
                                 name="damper"))
    system.add(mbs.forces.Load(body, force=lambda t: (force * np.sin(omega * t), 0.0, 0.0),
                               name="shaker"))
    model = system.compile()
    amplitude = force / np.hypot(stiffness - mass * omega**2, damping * omega)
    lag = np.arctan2(damping * omega, stiffness - mass * omega**2)
    errors = []
    for h in (2e-3, 1e-3):
        solution = mbs.simulate(model, "em", h=h, t_end=12.0)
        settled = solution.t >= 10.0
        t, x = solution.t[settled], solution.body("mass").position[settled, 0]
        basis = np.column_stack([np.sin(omega * t), np.cos(omega * t)])
        (sine, cosine), *_ = np.linalg.lstsq(basis, x, rcond=None)
        errors.append((np.hypot(sine, cosine) / amplitude - 1.0,
                       np.arctan2(-cosine, sine) - lag))
    ratios = np.array(errors[0]) / np.array(errors[1])
    assert np.all(np.abs(ratios - 4.0) <= 0.5), errors
    assert np.all(np.abs(errors[1]) <= 1e-4), errors


def test_a_body_spun_near_its_intermediate_axis_flips_with_the_elliptic_period():
    """Torque-free body, moments 1 < 2 < 2.5, spun at (0.01, 1, 0) rad/s: the spin about the
    intermediate axis reverses periodically (the tennis-racket flip), omega_2 changing sign
    twice per period T = 4 K(m) / lambda (Landau and Lifshitz, Mechanics, section 37). EM's
    period is O(h^2) off: from the sign changes at h = 0.01 and 0.005, the errors fall by 4
    (within 0.5) and their Richardson extrapolation matches T to 1e-8 (its next error term is
    O((omega h)^4) = 1e-8 at h = 0.01)."""
    from scipy.special import ellipk

    moments = np.array([1.0, 2.0, 2.5])
    spin = np.array([0.01, 1.0, 0.0])
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, tuple(moments), name="body"))
    body.set_state(angular_velocity=spin)
    model = system.compile()
    i1, i2, i3 = moments
    momentum2, energy2 = np.sum((moments * spin) ** 2), np.sum(moments * spin**2)  # L^2, 2E
    assert momentum2 < energy2 * i2  # the branch of the formulas below
    rate = np.sqrt((i2 - i1) * (energy2 * i3 - momentum2) / (i1 * i2 * i3))
    parameter = ((i3 - i2) * (momentum2 - energy2 * i1)
                 / ((i2 - i1) * (energy2 * i3 - momentum2)))
    period = 4.0 * ellipk(parameter) / rate
    measured = []
    for h in (0.01, 0.005):
        solution = mbs.simulate(model, "em", h=h, t_end=114.0)  # 2.2 periods
        omega2, t = solution.body("body").angular_velocity_body[:, 1], solution.t
        k = np.flatnonzero(np.sign(omega2[:-1]) != np.sign(omega2[1:]))
        crossings = t[k] - omega2[k] * (t[k + 1] - t[k]) / (omega2[k + 1] - omega2[k])
        measured.append(crossings[2] - crossings[0])
    errors = np.array(measured) - period
    assert abs(errors[0] / errors[1] - 4.0) <= 0.5, errors
    assert abs((4.0 * measured[1] - measured[0]) / 3.0 - period) <= 1e-8 * period


@pytest.mark.parametrize("options", [{}, {"order": 4}])
def test_em_keeps_energy_with_a_constraint_that_is_not_quadratic(options):
    """A bead on the corrugated sheet z = 0.3 sin 2x under gravity: the user constraint's
    discrete Jacobian is Gonzalez's, and EM's velocity-multiplier terms take the mean end
    Jacobian and a discrete gradient of gamma . G(q) v, so the energy stays at round-off
    (400 steps of eps-sized errors on E ~ 6: 1e-13 of max T) at every step size, where the
    midpoint forms alone drift by O(h^4) (3e-7 at h = 0.02). Momentum along y, conserved by
    the model, is not kept by the discrete gradient, and the summary says so."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bead = system.add(mbs.PointMass(mass=1.0, name="bead"))
    bead.set_state(velocity=(2.0, 0.5, 1.2))  # tangent to the sheet at the origin
    system.add(mbs.joints.UserConstraint(
        [bead], lambda q: [q[2] - 0.3 * np.sin(2.0 * q[0])],
        lambda q: [[-0.6 * np.cos(2.0 * q[0]), 0.0, 1.0]],
        lambda q, lam: lam[0] * np.diag([1.2 * np.sin(2.0 * q[0]), 0.0, 0.0]), name="sheet"))
    model = system.compile()
    for h in (0.02, 0.005):
        solution = mbs.simulate(model, "em", h=h, t_end=2.0, **options)
        energy = solution.energy()
        assert np.abs(energy - energy[0]).max() <= 1e-13 * solution.kinetic_energy().max()
    assert ": exactly only for quadratic constraints" in solution.conservation_summary()
