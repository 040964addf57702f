"""Which momenta a model conserves (mbs.symmetry) and how the conservation summary states it.

Independent truth: the generators are the derivatives of finite translations and rotations
(central differences), and a momentum the check calls conserved is conserved by the
energy-momentum scheme to round-off while one it calls broken drifts measurably.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import mbs
from mbs.symmetry import conserved_axes, generators, generic_states, invariance_defects

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name: str) -> mbs.Model:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name).build().compile()


def _rotated(model: mbs.Model, q: np.ndarray, axis: np.ndarray, angle: float,
             about: np.ndarray) -> np.ndarray:
    """The configuration turned by ``angle`` about ``axis`` through ``about`` (Rodrigues)."""
    k = axis / np.linalg.norm(axis)
    cross = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    rotation = np.eye(3) + np.sin(angle) * cross + (1.0 - np.cos(angle)) * cross @ cross
    blocks = q.reshape(-1, 3).copy()
    points = model.point_blocks
    blocks[points] = (blocks[points] - about) @ rotation.T + about
    directors = np.setdiff1d(np.arange(blocks.shape[0]), points)
    blocks[directors] = blocks[directors] @ rotation.T
    return blocks.ravel()


def test_generators_are_the_derivatives_of_finite_motions():
    model = _example("double_pendulum")
    q = model.q0
    about = np.array([0.3, -0.2, 0.5])
    axes = np.array([[0.0, 0.0, 1.0], [0.6, 0.8, 0.0]])
    step = 1e-5  # central differences: error O(step^2 |q|) ~ 1e-10
    rotation = generators(model, q, "rotation", about, axes)
    translation = generators(model, q, "translation", axes=axes)
    for row, axis in enumerate(axes):
        numeric = (_rotated(model, q, axis, step, about)
                   - _rotated(model, q, axis, -step, about)) / (2 * step)
        np.testing.assert_allclose(rotation[row], numeric, atol=1e-9)
        moved = q.reshape(-1, 3).copy()
        moved[model.point_blocks] += step * axis
        np.testing.assert_allclose(translation[row], (moved.ravel() - q) / step, atol=1e-9)


def _satellite(center=(0.0, 0.0, 0.0)) -> mbs.Model:
    system = mbs.System()
    body = system.add(mbs.RigidBody(2.0, (2.0, 2.5, 3.0), name="sat"))
    position = np.array(center) + np.array([7.0, 0.0, 0.0])
    body.set_state(position=position, velocity=(0.0, 1.1, 0.4),
                   angular_velocity=(0.1, 0.2, 0.3))
    system.add(mbs.forces.CentralGravity(mu=10.0, center=center))
    return system.compile()


def test_central_gravity_conserves_angular_momentum_about_its_centre_only():
    center = np.array([1.0, 2.0, -0.5])
    model = _satellite(center)
    solution = mbs.simulate(model, "em", h=0.01, t_end=2.0)
    states = generic_states(model, [(solution.t[k], solution.q[k], solution.p[k])
                                    for k in (0, 100, 200)])
    assert conserved_axes(model, states, "rotation", about=center).all()
    assert not conserved_axes(model, states, "rotation").any()
    assert not conserved_axes(model, states, "translation").all()
    about_center = solution.angular_momentum(center)
    drift = np.abs(about_center - about_center[0]).max() / np.abs(about_center).max()
    assert drift <= 1e-12  # EM conserves the momentum of a symmetric potential
    about_origin = solution.angular_momentum()
    assert np.abs(about_origin - about_origin[0]).max() / np.abs(about_origin).max() > 1e-3
    text = solution.conservation_summary(about=center)
    assert "angular momentum" in text.splitlines()[2]
    assert text.splitlines()[2].endswith("(conserved by this model)")
    # about the origin the torque is x x F = c x F (F is along x - c): only the component
    # along c is a first integral
    along_center = about_origin @ center / np.linalg.norm(center)
    assert np.abs(along_center - along_center[0]).max() <= 1e-12 * np.abs(about_origin).max()
    _, about_origin_kept = solution.conserved_directions()
    np.testing.assert_allclose(np.abs(about_origin_kept), [np.abs(center)
                                                           / np.linalg.norm(center)],
                               atol=1e-9)
    assert solution.conservation_summary().splitlines()[2].startswith(
        "angular momentum about [ 1.   2.  -0.5]  J0 = ")  # the centre is tried by default
    line = solution.conservation_summary(about=(0.0, 0.0, 0.0)).splitlines()[2]
    assert line.startswith("angular momentum along (0.4364, 0.8729, -0.2182)  J0 = [")
    printed = float(line.split("J0 = [")[1].split("]")[0])
    assert printed == pytest.approx(along_center[0], rel=1e-7)
    assert line.endswith("(conserved; not perpendicular to it: central gravity about another "
                         "centre)")
    assert "central gravity" in text.splitlines()[3]


def test_a_free_body_under_gravity_keeps_its_horizontal_momentum():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(1.0, (1.0, 2.0, 2.5), name="free"))
    body.set_state(velocity=(1.0, 2.0, 3.0), angular_velocity=(0.5, 0.0, 1.0))
    text = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.5).conservation_summary()
    linear = next(line for line in text.splitlines() if line.startswith("linear"))
    assert linear.startswith("linear momentum along x, y   max |L - L0| / max |L| = ")
    assert linear.endswith("(conserved; not along z: gravity)")


def _two_bodies_on_a_ball_joint(gravity) -> mbs.Model:
    system = mbs.System(gravity=gravity)
    first = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.3, ly=0.2, lz=0.1,
                                                name="a"))
    second = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.3, ly=0.2, lz=0.1,
                                                 name="b"))
    first.set_state(velocity=(1.0, 0.5, 2.0), angular_velocity=(1.0, 2.0, 3.0))
    # v_b = v_a + omega x (b - a): the pair starts turning as one body
    second.set_state(position=(0.4, 0.0, 0.0), velocity=(1.0, 1.7, 1.2),
                     angular_velocity=(1.0, 2.0, 3.0))
    system.add(mbs.joints.Spherical(first, second, point=(0.2, 0.0, 0.0), name="ball"))
    return system.compile()


def test_skewed_gravity_keeps_the_momentum_normal_to_it():
    """Uniform gravity g along (0.6, 0, -0.8) on a free pair: the linear momentum in the
    plane normal to g and the angular momentum about the vertical are first integrals (the
    external force is M g, its torque (x - c) x M g is normal to g); EM keeps both to
    round-off (100 steps, Newton tolerance 1e-12 each)."""
    gravity = 9.81 * np.array([0.6, 0.0, -0.8])
    solution = mbs.simulate(_two_bodies_on_a_ball_joint(gravity), "em", h=1e-3, t_end=0.1)
    linear, angular = solution.conserved_directions()
    assert linear.shape == (2, 3)
    np.testing.assert_allclose(linear @ gravity, 0.0, atol=1e-9)
    np.testing.assert_allclose(np.abs(angular), [[0.6, 0.0, 0.8]], atol=1e-9)
    kept_linear, kept_angular = solution.conserved_momenta()
    assert kept_linear.tolist() == [False, True, False]
    assert not kept_angular.any()  # about the vertical only, which is no world axis
    momentum = solution.linear_momentum()
    horizontal = momentum @ linear.T
    assert np.abs(horizontal - horizontal[0]).max() <= 1e-10 * np.abs(momentum).max()
    assert np.abs(momentum[-1] - momentum[0]).max() > 0.1  # gravity acts along g
    assert solution.conservation_summary().splitlines()[2].startswith(
        "vertical angular momentum  J0 = ")
    line = solution.conservation_summary().splitlines()[3]
    assert line.startswith("linear momentum along y, (0.8, 0, 0.6)   max |L - L0|")
    assert line.endswith("(conserved; not along (-0.6, 0, 0.8): gravity)")
    assert float(line.split("= ")[1].split()[0]) <= 1e-10


def test_a_rotor_on_a_skewed_hinge_keeps_the_momentum_about_its_axis():
    """A body on a revolute joint to the ground along (1, 1, 0)/sqrt 2 through the origin,
    no gravity: the angular momentum about the hinge axis is a first integral, the other
    components are not (the hinge carries moments normal to its axis)."""
    axis = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)
    system = mbs.System()
    rotor = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.4, ly=0.2, lz=0.1,
                                                name="rotor"))
    position = np.array([0.1, -0.1, 0.05])
    rotor.set_state(position=position, velocity=np.cross(5.0 * axis, position),
                    angular_velocity=5.0 * axis)
    system.add(mbs.joints.Revolute(system.ground, rotor, point=(0.0, 0.0, 0.0), axis=axis,
                                   name="hinge"))
    solution = mbs.simulate(system.compile(), "em", h=1e-3, t_end=0.2)
    _, angular = solution.conserved_directions()
    np.testing.assert_allclose(np.abs(angular), [np.abs(axis)], atol=1e-9)
    assert not solution.conserved_momenta()[1].any()
    line = solution.conservation_summary().splitlines()[2]
    assert line.startswith("angular momentum along (0.7071, 0.7071, 0)  J0 = ")
    assert line.endswith("(conserved; not perpendicular to it: joints to the ground)")
    about_axis = solution.angular_momentum() @ axis
    assert np.abs(about_axis - about_axis[0]).max() <= 1e-10 * np.abs(about_axis).max()


def test_a_spring_to_the_ground_keeps_the_momentum_about_its_anchor():
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.3))
    anchor = np.array([0.0, 0.5, 0.0])
    system.add(mbs.forces.Spring(system.ground, bob, stiffness=10.0, rest_length=0.5,
                                 point_a=anchor))
    model = system.compile()
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0)
    states = [(solution.t[k], solution.q[k], solution.p[k]) for k in (0, 50, 100)]
    assert invariance_defects(model, states, "rotation", about=anchor).max() <= 1e-12
    assert invariance_defects(model, states, "rotation").max() > 1e-3
    assert solution.conservation_summary(about=anchor).splitlines()[2].endswith(
        "(conserved by this model)")
    assert solution.conservation_summary().splitlines()[2].startswith(
        "angular momentum about [0.  0.5 0. ]")  # the anchor is tried by default
    assert "forces from the ground" in solution.conservation_summary(
        about=(0.0, 0.0, 0.0)).splitlines()[2]


@pytest.mark.parametrize("name", ["heavy_top", "dzhanibekov", "four_particle", "chain",
                                  "double_pendulum", "satellite_libration",
                                  "tethered_satellites", "flyball_governor"])
def test_what_the_summary_calls_conserved_is_conserved(name):
    """EM conserves every momentum map of a symmetric model to round-off: each component the
    invariance check calls conserved drifts by at most the Newton tolerance times the steps
    (1e-12 x 100)."""
    model = _example(name)
    h = {"tethered_satellites": 0.1, "satellite_libration": 0.02}.get(name, 0.002)
    solution = mbs.simulate(model, "em", h=h, t_end=100 * h)
    states = generic_states(model, [(solution.t[k], solution.q[k], solution.p[k])
                                    for k in (0, 50, 100)])
    for kind, values in (("translation", solution.linear_momentum()),
                         ("rotation", solution.angular_momentum())):
        kept = conserved_axes(model, states, kind)
        drift = np.abs(values - values[0]).max(axis=0)
        size = max(np.abs(values).max(), 1e-300)
        assert (drift[kept] <= 1e-10 * size).all(), (kind, kept, drift / size)


def test_a_planar_motion_is_no_symmetry_of_the_model():
    """A pendulum swinging in the x-z plane never pulls along y, so the products vanish on
    its own states; its projected neighbours leave the plane and show that the rod breaks
    the translation along y."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    model = system.compile()
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0)
    states = [(solution.t[k], solution.q[k], solution.p[k]) for k in (0, 50, 100)]
    along_y = np.array([[0.0, 1.0, 0.0]])
    assert invariance_defects(model, states, "translation", axes=along_y)[0] == 0.0
    assert not conserved_axes(model, generic_states(model, states), "translation",
                              axes=along_y)[0]


def test_an_unconstrained_pair_keeps_both_momenta():
    """Two particles joined by a spring (no constraints): every momentum component is
    conserved, and EM conserves it to round-off."""
    system = mbs.System()
    first = system.add(mbs.PointMass(1.0, name="a"))
    second = system.add(mbs.PointMass(2.0, name="b"))
    first.set_state(position=(0.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.2))
    second.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, -0.5, 0.0))
    system.add(mbs.forces.Spring(first, second, stiffness=5.0, rest_length=0.8))
    model = system.compile()
    assert model.m == 0
    solution = mbs.simulate(model, "em", h=0.01, t_end=1.0)
    kept = solution.conserved_momenta()
    assert kept[0].all() and kept[1].all()
    lines = solution.conservation_summary().splitlines()
    assert lines[2].endswith("(conserved by this model)")
    assert lines[3].endswith("(conserved by this model)")


def test_a_load_acting_between_the_checked_instants_breaks_the_momentum():
    """A force along f = (0.6, 0, -0.8) acting only for 0.30 < t < 0.40 of a 1.5 s run on a
    free body: its linear momentum along f changes by the impulse 5 f (kg m/s), so only the
    components normal to f, and the angular momentum along f (torque x x F is normal to F),
    are first integrals."""
    force = np.array([0.6, 0.0, -0.8])
    system = mbs.System()
    body = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.3, ly=0.2, lz=0.1,
                                               name="b"))
    body.set_state(position=(0.2, 0.1, 0.0), velocity=(0.1, 0.2, 0.3),
                   angular_velocity=(1.0, 2.0, 3.0))
    system.add(mbs.forces.Load(body, force=lambda t: (50.0 if 0.30 < t < 0.40 else 0.0)
                               * force))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=1.5)
    momentum = solution.linear_momentum()
    assert (momentum[-1] - momentum[0]) @ force == pytest.approx(5.0, rel=0.05)
    linear, angular = solution.conserved_directions()
    assert linear.shape == (2, 3)
    np.testing.assert_allclose(linear @ force, 0.0, atol=1e-9)
    np.testing.assert_allclose(np.abs(angular), [np.abs(force)], atol=1e-9)
    lines = solution.conservation_summary().splitlines()
    assert lines[2].endswith("(conserved; not perpendicular to it: loads)")
    assert lines[3].endswith("(conserved; not along (-0.6, 0, 0.8): loads)")


@pytest.mark.parametrize("t_end", [0.5, 1.5])
def test_the_printed_components_are_along_the_named_directions(t_end):
    """J0 printed for one conserved direction is J . e for the e named in the line, with
    the sign of the named vector, whatever the run length (the basis of the null space
    comes with an arbitrary sign)."""
    axis = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)
    system = mbs.System()
    rotor = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.4, ly=0.2, lz=0.1,
                                                name="rotor"))
    position = np.array([0.1, -0.1, 0.05])
    rotor.set_state(position=position, velocity=np.cross(-5.0 * axis, position),
                    angular_velocity=-5.0 * axis)
    system.add(mbs.joints.Revolute(system.ground, rotor, point=(0.0, 0.0, 0.0), axis=axis))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=t_end)
    line = solution.conservation_summary().splitlines()[2]
    assert line.startswith("angular momentum along (0.7071, 0.7071, 0)  J0 = [")
    printed = float(line.split("J0 = [")[1].split("]")[0])
    assert printed == pytest.approx(solution.angular_momentum()[0] @ axis, rel=1e-7)
    assert printed < 0.0


def test_a_wheel_balanced_on_a_horizontal_axle_keeps_its_spin_under_gravity():
    """A box on a revolute about x through its centre of mass c, gravity -z: gravity has no
    moment about the axle, so J_x about c is a first integral (gravity does not restrict
    the conserved axes to the vertical); L = 0 throughout is constant without a symmetry."""
    center = np.array([0.0, 0.5, 0.2])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    wheel = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.1, ly=0.4, lz=0.3,
                                                name="wheel"))
    wheel.set_state(position=center, rotation=mbs.rotation_about_x(0.3),
                    angular_velocity=(5.0, 0.0, 0.0))
    system.add(mbs.joints.Revolute(system.ground, wheel, point=center, axis=(1.0, 0.0, 0.0)))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=1.0)
    assert solution.conserved_momenta(about=center)[1].tolist() == [True, False, False]
    lines = solution.conservation_summary().splitlines()
    assert lines[2].startswith("angular momentum about [0.  0.5 0.2] along x  J0 = [")
    assert lines[2].endswith("(conserved; not along y, z: joints to the ground)")
    spin = solution.angular_momentum(center)[:, 0]
    assert np.abs(spin - spin[0]).max() <= 1e-12 * abs(spin[0])
    assert lines[3].startswith("linear momentum   L = 0 throughout")
    assert lines[3].endswith("(constant in this run, though no symmetry of the model keeps "
                             "it: joints to the ground, gravity)")


def test_the_anchor_of_a_distance_joint_is_tried_as_the_reference_point():
    """A spherical pendulum on a Distance joint to the ground at a = (1, 0.5, 2) under
    gravity -z: its angular momentum about the vertical through a is a first integral; the
    summary finds a without being told."""
    anchor = np.array([1.0, 0.5, 2.0])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=anchor + np.array([0.6, 0.0, -0.8]), velocity=(0.0, 1.2, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, point_a=anchor))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=1.0)
    line = solution.conservation_summary().splitlines()[2]
    assert line.startswith("vertical angular momentum about [1.  0.5 2. ]  J0 = [0.72]")
    assert line.endswith("(conserved by this model)")


def test_a_load_acting_between_the_checked_states_does_not_leave_momentum_claimed():
    """A wall at x = 2 as a load -k max(0, x - 2) on one of two bodies joined by a spring:
    the pair drifts into it and bounces back, in contact for a few of 1000 steps that the
    invariance check's sampled states miss. EM keeps a conserved momentum to round-off,
    so its change of L_x from +0.675 to -0.66 shows the model did not conserve it: the
    summary and :meth:`conserved_directions` say so instead of "conserved by this model",
    while L_y, L_z and J_x, J_y (the wall pushes along x in the plane z = 0) stay
    conserved."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(mass=1.0, inertia=(0.02, 0.03, 0.04), name="a"))
    b = system.add(mbs.PointMass(mass=0.5, name="b"))
    a.set_state(velocity=(0.45, 0.0, 0.0), angular_velocity=(0, 0, 1))
    b.set_state(position=(0.2, 0.0, 0.0), velocity=(0.45, 0.1, 0.0))
    system.add(mbs.forces.Spring(a, b, stiffness=1.0))
    system.add(mbs.forces.Load(b, force=lambda t, state: (
        -2e4 * max(0.0, state.position[0] - 2.0), 0.0, 0.0), name="wall"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=10.0)
    assert solution.linear_momentum()[-1, 0] < 0.0 < solution.linear_momentum()[0, 0]
    summary = solution.conservation_summary()
    angular, linear = [line for line in summary.splitlines() if "momentum" in line]
    assert angular.startswith("angular momentum along x, y")
    assert angular.endswith("(conserved; not along z: loads)")
    assert linear.startswith("linear momentum along y, z")
    assert linear.endswith("(conserved; not along x: loads)")
    linear_kept, angular_kept = solution.conserved_momenta()
    assert linear_kept.tolist() == [False, True, True]
    assert angular_kept.tolist() == [True, True, False]
    # hbvm keeps momenta only to its order: its run keeps the checked states' verdict, and
    # a plot of both runs says that the verdicts differ
    pytest.importorskip("matplotlib")
    from mbs import plots

    other = mbs.simulate(solution.model, "hbvm", h=0.01, t_end=10.0)
    assert [kept.tolist() for kept in other.conserved_momenta()] == [[True] * 3] * 2
    figure = plots.plot_momentum([solution, other])
    assert all("differ between the runs" in axes.get_title() for axes in figure.axes[:2])


def test_the_axis_of_a_user_constraint_of_revolution_is_found():
    """A bead on the surface z = 0.3 ((x - 1)^2 + (y - 2)^2)^2 (a user constraint), under
    gravity: its angular momentum about the vertical axis through (1, 2, 0) is conserved,
    though no joint or force names that point. The summary finds the axis from the model's
    symmetries; Lobatto keeps the momentum to round-off."""
    centre = np.array([1.0, 2.0, 0.0])

    def surface(q):
        r2 = (q[0] - centre[0]) ** 2 + (q[1] - centre[1]) ** 2
        return [q[2] - 0.3 * r2 ** 2]

    def slope(q):
        dx, dy = q[0] - centre[0], q[1] - centre[1]
        r2 = dx * dx + dy * dy
        return [[-1.2 * r2 * dx, -1.2 * r2 * dy, 1.0]]

    system = mbs.System(gravity=(0, 0, -9.81))
    bead = system.add(mbs.PointMass(mass=1.0, name="bead"))
    bead.set_state(position=centre + (0.8, 0.0, 0.3 * 0.8 ** 4), velocity=(0.0, 1.2, 0.0))
    system.add(mbs.joints.UserConstraint([bead], surface, slope, name="bowl"))
    solution = mbs.simulate(system.compile(), "lobatto", h=0.005, t_end=3.0)
    np.testing.assert_allclose(solution.momentum_reference_point(), centre, rtol=0, atol=1e-12)
    line = next(line for line in solution.conservation_summary().splitlines()
                if "angular momentum" in line)
    assert line.startswith("vertical angular momentum about [1. 2. 0.]")
    assert "(conserved by this model)" in line
    assert float(line.split("max |J - J0| / max |J| = ")[1].split()[0]) < 1e-12


def test_gravity_is_named_where_it_breaks_an_angular_momentum():
    """A link on a hinge along y under gravity along -z: gravity's torque about the hinge
    breaks the angular momentum along y, and the summary names it besides the joint."""
    system = mbs.System(gravity=(0, 0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=1.0, ly=0.05, lz=0.05,
                                               name="link"))
    link.set_state(position=(1.0, 0.0, 1.0))
    system.add(mbs.joints.Revolute(system.ground, link, point=(0.5, 0, 1), axis=(0, 1, 0)))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    line = next(line for line in solution.conservation_summary().splitlines()
                if "angular momentum" in line)
    assert "(not conserved: joints to the ground, gravity)" in line



def test_a_momentum_near_zero_kept_to_the_solve_tolerance_stays_conserved():
    """Two free bodies tumbling almost against each other on a spring (J = 4e-7 of terms
    ~ 0.5), VCG with fixed-point iteration: J changes by 2e-6 of itself through the solve
    tolerance, far below its terms' round-off limit for a jump in one step (1e-6 of them),
    and stays "conserved by this model"."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(mass=1.0, inertia=(0.02, 0.03, 0.04), name="a"))
    b = system.add(mbs.RigidBody(mass=1.0, inertia=(0.02, 0.03, 0.04), name="b"))
    a.set_state(angular_velocity=(0.3, 0.5, 1.0))
    b.set_state(position=(1, 0, 0), angular_velocity=(-0.3, -0.5, -1.0 * (1 - 1e-5)))
    system.add(mbs.forces.Spring(a, b, stiffness=10.0, rest_length=0.8))
    model = system.compile(formulation="lie-group")
    solution = mbs.simulate(model, "vcg", h=0.01, t_end=5.0, iteration="fixed-point")
    line = next(line for line in solution.conservation_summary().splitlines()
                if "angular momentum" in line)
    assert line.endswith("(conserved by this model)")
