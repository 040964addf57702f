"""Joint reactions (Solution.reaction) against closed forms: the tension of a pendulum rod
and the bearing torque of a statically balanced, dynamically unbalanced rotor."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mechanisms import planar_four_bar
from scipy.integrate import solve_ivp

import mbs

GRAVITY, LENGTH, MASS, RELEASE = 9.81, 1.0, 2.0, 1.0


def pendulum(scheme: str, h: float, options: dict) -> mbs.Solution:
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    bob = system.add(mbs.PointMass(MASS, name="bob"))
    bob.set_state(position=(LENGTH * np.sin(RELEASE), 0.0, -LENGTH * np.cos(RELEASE)))
    system.add(mbs.joints.Distance(system.ground, bob, length=LENGTH, name="rod"))
    return mbs.simulate(system.compile(), scheme, h=h, t_end=1.0, **options)


def rod_force_error(scheme: str, h: float, options: dict) -> float:
    """Max error of the rod's force on the bob against -T e_r with the tension
    T = m (g cos(theta) + L theta'^2) of a solve_ivp reference at 1e-12."""
    reaction = pendulum(scheme, h, options).reaction("rod")
    reference = solve_ivp(lambda t, y: [y[1], -GRAVITY / LENGTH * np.sin(y[0])], (0.0, 1.0),
                          [RELEASE, 0.0], rtol=1e-12, atol=1e-12, dense_output=True)
    angle, rate = reference.sol(reaction.t)
    tension = MASS * (GRAVITY * np.cos(angle) + LENGTH * rate**2)
    radial = np.stack([np.sin(angle), np.zeros_like(angle), -np.cos(angle)], axis=1)
    assert reaction.body == "bob" and np.all(reaction.torque == 0.0)
    return float(np.abs(reaction.force + tension[:, None] * radial).max())


@pytest.mark.parametrize("scheme, options, order", [
    ("em", {}, 2), ("rattle", {}, 2), ("ggl-vi-a", {}, 2), ("hbvm", {}, 2),
    ("lobatto", {"stages": 3}, 2), ("em", {"order": 4}, 2), ("ggl-vi-b", {}, 1)])
def test_the_rod_tension_of_a_pendulum(scheme, options, order):
    """The reaction converges at the order of the scheme's multipliers (the tension is
    about 30 N; the errors at h = 0.01 are 7e-3 .. 3e-2, 0.55 for ggl-vi-b)."""
    errors = [rod_force_error(scheme, h, options) for h in (0.01, 0.005)]
    assert np.log2(errors[0] / errors[1]) == pytest.approx(order, abs=0.1)
    assert errors[1] <= (0.3 if order == 1 else 1e-2)


@pytest.mark.parametrize("scheme, options", [("em", {}), ("rattle", {}),
                                              ("lobatto", {"stages": 3})])
def test_the_bearing_torque_of_an_unbalanced_rotor(scheme, options):
    """A body whose principal axes are tilted by 0.4 rad against its hinge spins at 4 rad/s
    without gravity, its centre of mass on the axis: the rate stays constant, the bearing
    carries no force and supplies the torque dH/dt = w x (R J R^T w) (about 2.9 N m)."""
    inertia, spin, tilt = np.array([2.0, 2.5, 3.0]), 4.0, mbs.rotation_about_x(0.4)
    system = mbs.System()
    rotor = system.add(mbs.RigidBody(5.0, inertia, name="rotor"))
    rotor.set_state(rotation=tilt, angular_velocity=(0.0, 0.0, spin))
    system.add(mbs.joints.Revolute(system.ground, rotor, point=(0, 0, 0), axis=(0, 0, 1),
                                   name="bearing"))
    model = system.compile()
    omega = np.array([0.0, 0.0, spin])
    errors = []
    for h in (0.01, 0.005):
        reaction = mbs.simulate(model, scheme, h=h, t_end=1.0, **options).reaction("bearing")
        rotations = [mbs.rotation_about_z(spin * t) @ tilt for t in reaction.t]
        expected = [np.cross(omega, r @ np.diag(inertia) @ r.T @ omega) for r in rotations]
        errors.append(np.abs(reaction.torque - expected).max())
        assert np.abs(reaction.force).max() <= 1e-12
    assert np.log2(errors[0] / errors[1]) == pytest.approx(2.0, abs=0.1)


def test_reaction_lookups_are_checked(tmp_path):
    solution = pendulum("em", 0.01, {})
    mbs.save_solution(solution, tmp_path / "run.npz")
    with pytest.raises(mbs.ModelError, match=r"load_solution\(path, model=...\)"):
        mbs.load_solution(tmp_path / "run.npz").reaction("rod")
    with pytest.raises(mbs.UnknownNameError, match="no joint 'bar'; joints: rod"):
        solution.reaction("bar")
    with pytest.raises(mbs.ModelError, match="'ground' has no coordinates; the reaction on "
                                             "it is minus the one on 'bob'"):
        solution.reaction("rod", body="ground")
    with pytest.raises(mbs.ModelError, match="joint 'rod' acts on ground, bob, not on 'rod'"):
        solution.reaction("rod", body="rod")


def test_vi_conversion_refuses_reactions():
    """Its multipliers act at the shifted points of the standard layer; taken as step
    forces they give a rod force off by far more than the step error."""
    solution = pendulum("vi-conversion", 0.01, {})
    with pytest.raises(mbs.ModelError, match="'vi-conversion' keeps no constraint forces of "
                                             "its steps"):
        solution.reaction("rod")


def test_a_lie_group_run_refuses_reactions():
    """The Lie-group methods have no multipliers (NaN in the Solution): a reaction from
    them would be NaN."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    top = system.add(mbs.RigidBody(mass=1.0, inertia=(0.02, 0.02, 0.01), name="top"))
    top.set_state(position=(0.0, 0.0, 0.1), angular_velocity=(0.0, 0.0, 20.0))
    system.add(mbs.joints.Spherical(system.ground, top, point=(0, 0, 0), name="pivot"))
    solution = mbs.simulate(system.compile(formulation="lie-group"), "vrkmk", h=0.01,
                            t_end=0.05)
    with pytest.raises(mbs.ModelError, match=r"no constraint forces of its steps \(its "
                                             r"multipliers: none \(no multipliers\)\)"):
        solution.reaction("pivot")


@pytest.mark.parametrize("scheme", ["em", "rattle"])
def test_a_step_redone_as_sub_steps_reports_its_mean_force(scheme):
    """A link turned at a constant rate w about a horizontal hinge needs the drive torque
    tau(t) = -m g L/2 cos(w t). Newton capped at 3 iterations makes simulate redo steps
    of h = 0.1 as 8 or 16 sub-steps; the effort of such a step is the mean over its
    sub-steps, within |tau(t_mid)| (1 - sin x / x), x = w h / 2, of tau at the step's
    midpoint (the mean of cos over the sub-steps' midpoints lies between cos at the middle
    and its mean over the step), plus the scheme's own error at steps of h / 8 (measured
    by a run at that step), not the last sub-step's force (off by 0.38 N m)."""
    g, mass, length, rate, h = 9.81, 1.0, 0.6, 3.0, 0.1
    axis = np.array([0.0, 1.0, 0.0])
    system = mbs.System(gravity=(0.0, 0.0, -g))
    link = system.add(mbs.RigidBody.from_shape("box", mass=mass, lx=length, ly=0.03,
                                               lz=0.03, name="link"))
    centre = np.array([length / 2, 0.0, 0.0])
    link.set_state(position=centre, velocity=np.cross(rate * axis, centre),
                   angular_velocity=rate * axis)
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0), axis=axis))
    system.add(mbs.joints.Drive(hinge, lambda t: rate * t, rate=lambda t: rate,
                                name="motor"))
    model = system.compile()

    def torque(t):
        return -mass * g * length / 2 * np.cos(rate * t)

    fine = mbs.simulate(model, scheme, h=h / 8, t_end=1.0).drive("motor")
    own_error = np.max(np.abs(fine.effort - torque(fine.effort_times)))
    solution = mbs.simulate(model, scheme, h=h, t_end=1.0,
                            newton=mbs.solvers.NewtonOptions(max_iterations=3))
    refined = [k for k, depth in solution.stats["refined_steps"] if depth >= 3]
    assert refined
    drive = solution.drive("motor")
    torque = torque(drive.effort_times[refined])
    x = rate * h / 2
    bound = np.abs(torque) * (1.0 - np.sin(x) / x) + own_error + 1e-12
    assert np.all(np.abs(drive.effort[refined] - torque) <= bound)


def test_reactions_in_a_loop_with_redundant_equations_are_warned_as_not_unique():
    """A planar four-bar of four revolute joints has three redundant (out-of-plane)
    equations: the reactions of its joints are not unique, and reaction() says so; the
    pendulum's rod is in no loop."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the compile warning naming the removed equations
        model = planar_four_bar().compile()
    solution = mbs.simulate(model, "em", h=0.01, t_end=0.05)
    with pytest.warns(UserWarning, match=r"reaction\('pin_A'\): the loop of .* has 3 "
                                         r"redundant constraint equations"):
        solution.reaction("pin_A")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pendulum("em", 0.01, {}).reaction("rod")


def hinged_box_reaction(h: float, **options):
    """A 0.6 m box hinged at one end (axis y) released at 60 degrees under gravity: its
    reaction with ``options``, and (theta, theta') of a solve_ivp reference of
    I_O theta'' = -m g c sin(theta) at the reaction's times."""
    mass, length, width, release = 2.0, 0.6, 0.05, np.radians(60.0)
    system = mbs.System(gravity=(0.0, 0.0, -GRAVITY))
    box = system.add(mbs.RigidBody.from_shape("box", mass=mass, lx=length, ly=width,
                                              lz=width, name="box"))
    radial = np.array([np.sin(release), 0.0, -np.cos(release)])  # body axis d_1
    box.set_state(position=0.5 * length * radial,
                  rotation=mbs.rotation_about_y(0.5 * np.pi - release))
    system.add(mbs.joints.Revolute(system.ground, box, point=(0.0, 0.0, 0.0),
                                   axis=(0.0, 1.0, 0.0), name="hinge"))
    solution = mbs.simulate(system.compile(), "em", h=h, t_end=1.0)
    reaction = solution.reaction("hinge", **options)
    centre = 0.5 * length
    own = mass * (length**2 + width**2) / 12.0
    pivot = own + mass * centre**2
    reference = solve_ivp(lambda t, y: [y[1], -mass * GRAVITY * centre / pivot * np.sin(y[0])],
                          (0.0, 1.0), [release, 0.0], rtol=1e-12, atol=1e-12,
                          dense_output=True)
    angle, rate = reference.sol(reaction.t)
    # m a = F + m g along e_r (d_1, from the hinge to the centre) and e_t (d_3)
    along = -mass * centre * rate**2 - mass * GRAVITY * np.cos(angle)
    across = mass * GRAVITY * np.sin(angle) * own / pivot
    return reaction, along, across, centre


def test_a_hinges_reaction_in_the_body_frame_and_about_the_joint():
    """In the box's frame the hinge pulls along the box by -m c theta'^2 - m g cos(theta) and
    pushes across it by m g sin(theta) I_c / I_O (Newton's law for the centre of mass with
    the reference's angle); about the hinge the reaction has no torque, about the centre of
    mass it has c times the cross force about the axis. Second order in h, like the
    multipliers; the torque about the hinge is round-off."""
    errors = []
    for h in (0.01, 0.005):
        reaction, along, across, centre = hinged_box_reaction(h, frame="body")
        errors.append(max(np.max(np.abs(reaction.force[:, 0] - along)),
                          np.max(np.abs(reaction.force[:, 2] - across)),
                          np.max(np.abs(reaction.torque[:, 1] - centre * across))))
        assert np.max(np.abs(reaction.force[:, 1])) < 1e-12 * np.max(np.abs(along))
        about_hinge, *_ = hinged_box_reaction(h, about="joint", frame="body")
        assert np.max(np.abs(about_hinge.torque)) < 1e-12 * centre * np.max(np.abs(along))
        np.testing.assert_array_equal(about_hinge.force, reaction.force)
    assert np.log2(errors[0] / errors[1]) == pytest.approx(2.0, abs=0.3)


def test_reaction_options_are_checked():
    reaction, *_ = hinged_box_reaction(0.05, about=(0.0, 0.0, 0.0))  # the hinge point itself
    joint, *_ = hinged_box_reaction(0.05, about="joint")
    np.testing.assert_allclose(reaction.torque, joint.torque, rtol=0, atol=1e-15)
    for options, match in (({"frame": "local"}, "frame must be"),
                           ({"about": "hinge"}, "about must be"),
                           ({"about": (0.0, np.nan, 0.0)}, "3 finite")):
        with pytest.raises(mbs.errors.ModelError, match=match):
            hinged_box_reaction(0.05, **options)
    with pytest.raises(mbs.errors.ModelError, match="point mass and has no body frame"):
        pendulum("em", 0.05, {}).reaction("rod", frame="body")


def gyroscope_bearing_error(h: float, scheme: str, **options) -> float:
    """A rotor (axial inertia C) spinning at w_s in a frame turned about z at the constant
    rate W by a drive: its bearing carries the constant gyroscopic torque C w_s W. The
    largest relative error of the reaction torque over the run."""
    spin, turn, axial = 150.0, 2.0, 1.25e-3
    system = mbs.System()
    frame = system.add(mbs.RigidBody(1.0, (0.02, 0.02, 0.03), name="frame"))
    rotor = system.add(mbs.RigidBody(1.0, (8e-4, axial, 8e-4), name="rotor"))
    frame.set_state(angular_velocity=(0.0, 0.0, turn))
    rotor.set_state(angular_velocity=(0.0, spin, turn))
    table = system.add(mbs.joints.Revolute(system.ground, frame, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="table"))
    system.add(mbs.joints.Revolute(frame, rotor, point=(0, 0, 0), axis=(0, 1, 0),
                                   name="bearing"))
    system.add(mbs.joints.Drive(table, lambda t: turn * t, rate=lambda t: turn))
    solution = mbs.simulate(system.compile(), scheme, h=h, t_end=0.1, **options)
    torque = np.linalg.norm(solution.reaction("bearing").torque, axis=1)
    return float(np.abs(torque / (axial * spin * turn) - 1.0).max())


def test_the_gyroscopic_bearing_torque_error_has_the_documented_constants():
    """Solution.reaction's docstring: (h w)^2 / 8 for em, (h w)^2 / 6 for lobatto, rattle
    far below; second order (the step mean over a fast turn)."""
    h, spin = 1e-3, 150.0
    em = gyroscope_bearing_error(h, "em")
    assert em / (h * spin) ** 2 == pytest.approx(1.0 / 8.0, rel=0.1)
    assert np.log2(gyroscope_bearing_error(2 * h, "em") / em) == pytest.approx(2.0, abs=0.1)
    lobatto = gyroscope_bearing_error(h, "lobatto", stages=3)
    assert lobatto / (h * spin) ** 2 == pytest.approx(1.0 / 6.0, rel=0.1)
    assert gyroscope_bearing_error(h, "rattle") <= 1e-3 * em
