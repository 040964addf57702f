"""Every bad input of issue 2 raises its documented mbs error, naming the element."""

from __future__ import annotations

import numpy as np
import pytest

import mbs


def rigid(name="link", **kwargs):
    return mbs.RigidBody(mass=1.0, inertia=(1.0, 1.2, 1.4), name=name, **kwargs)


@pytest.mark.parametrize("mass", [0.0, -1.0, np.nan, np.inf])
def test_non_positive_or_non_finite_mass(mass):
    with pytest.raises(mbs.ModelError, match="'heavy'.*mass"):
        mbs.RigidBody(mass=mass, inertia=(1.0, 1.0, 1.0), name="heavy")
    with pytest.raises(mbs.ModelError, match="'bob'.*mass"):
        mbs.PointMass(mass=mass, name="bob")


def test_mass_of_wrong_type():
    with pytest.raises(mbs.ModelTypeError, match="'bob'"):
        mbs.PointMass(mass="one", name="bob")


def test_inertia_not_symmetric():
    inertia = [[1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    with pytest.raises(mbs.ModelError, match="'wheel'.*not symmetric"):
        mbs.RigidBody(mass=1.0, inertia=inertia, name="wheel")


def test_inertia_not_positive_definite():
    with pytest.raises(mbs.ModelError, match="'wheel'.*positive"):
        mbs.RigidBody(mass=1.0, inertia=(-1.0, 2.0, 2.0), name="wheel")
    tensor = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # eigenvalue -1
    with pytest.raises(mbs.ModelError, match="'wheel'.*positive"):
        mbs.RigidBody(mass=1.0, inertia=tensor, name="wheel")


def test_inertia_violating_triangle_inequality():
    with pytest.raises(mbs.ModelError, match="'wheel'.*triangle inequality"):
        mbs.RigidBody(mass=1.0, inertia=(1.0, 1.0, 3.0), name="wheel")


def test_zero_euler_inertia_of_ideal_rod():
    """(I, I, 0): no extent across the rod axis d3, E1 = E2 = 0."""
    with pytest.raises(mbs.ModelError, match="'rod'.*zero Euler inertia along body axis "
                                             "d[12].*thickness"):
        mbs.RigidBody(mass=1.0, inertia=(0.5, 0.5, 0.0), name="rod")


def test_zero_euler_inertia_of_lamina():
    """(I1, I2, I1 + I2): a plate without thickness along d3, E3 = 0."""
    with pytest.raises(mbs.ModelError, match="'plate'.*zero Euler inertia along body axis "
                                             "d3.*thickness"):
        mbs.RigidBody(mass=1.0, inertia=(0.3, 0.7, 1.0), name="plate")


def test_joint_referencing_body_not_in_system():
    system = mbs.System()
    inside = system.add(rigid("inside"))
    outside = rigid("outside")
    joint = mbs.joints.Spherical(inside, outside, point=(0, 0, 0), name="ball")
    with pytest.raises(mbs.ModelError, match="'ball'.*'outside'.*not in this system"):
        system.add(joint)


def test_force_referencing_body_not_in_system():
    system = mbs.System()
    inside = system.add(rigid("inside"))
    outside = mbs.PointMass(1.0, name="outside").set_state(position=(1, 0, 0))
    with pytest.raises(mbs.ModelError, match="'spring'.*'outside'.*not in this system"):
        system.add(mbs.forces.Spring(inside, outside, stiffness=1.0, name="spring"))
    with pytest.raises(mbs.ModelError, match="'sun'.*'outside'"):
        system.add(mbs.forces.CentralGravity(1.0, bodies=[outside], name="sun"))


def test_body_of_another_systems_ground():
    system, other = mbs.System(), mbs.System()
    body = system.add(rigid("b"))
    with pytest.raises(mbs.ModelError, match="'pin'.*'ground'.*not in this system"):
        system.add(mbs.joints.Spherical(other.ground, body, point=(0, 0, 0), name="pin"))


def test_joint_given_something_that_is_not_a_body():
    with pytest.raises(mbs.ModelTypeError, match="'hinge'"):
        mbs.joints.Revolute("ground", rigid(), point=(0, 0, 0), axis=(0, 0, 1), name="hinge")


def test_same_body_twice():
    body = rigid("b")
    with pytest.raises(mbs.ModelError, match="'hinge'.*'b' to itself"):
        mbs.joints.Revolute(body, body, point=(0, 0, 0), axis=(0, 0, 1), name="hinge")
    with pytest.raises(mbs.ModelError, match="'spring'.*'b' to itself"):
        mbs.forces.Spring(body, body, stiffness=1.0, name="spring")


@pytest.mark.parametrize("kind", ["Revolute", "Cylindrical", "Prismatic", "Universal"])
def test_zero_axis_vector(kind):
    system = mbs.System()
    body = system.add(rigid())
    with pytest.raises(mbs.ModelError, match="'bad_axis'.*zero vector"):
        if kind == "Universal":
            mbs.joints.Universal(system.ground, body, point=(0, 0, 0), axis_a=(0, 0, 0),
                                 axis_b=(1, 0, 0), name="bad_axis")
        else:
            getattr(mbs.joints, kind)(system.ground, body, point=(0, 0, 0), axis=(0, 0, 0),
                                      name="bad_axis")


def test_duplicate_names():
    system = mbs.System()
    system.add(rigid("twin"))
    with pytest.raises(mbs.ModelError, match="duplicate name 'twin'"):
        system.add(mbs.PointMass(1.0, name="twin"))
    with pytest.raises(mbs.ModelError, match="duplicate name 'ground'"):
        system.add(rigid("ground"))


def test_an_element_refused_by_add_keeps_its_default_name_when_added_again():
    """The error names the element by the default name it was given ('joint1'); after the
    fix the same element is added under that name, and the next one takes 'joint2'."""
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0))
    b = mbs.PointMass(1.0)
    joint = mbs.joints.Spherical(a, b, point=(0, 0, 0))
    with pytest.raises(mbs.ModelError, match="Spherical 'joint1' references body"):
        system.add(joint)
    system.add(b)
    system.add(joint)
    assert joint.name == "joint1"
    assert system.add(mbs.joints.Spherical(system.ground, a, point=(0, 0, 0))).name == "joint2"


def test_negative_rest_length():
    a, b = rigid("a"), mbs.PointMass(1.0, name="b")
    with pytest.raises(mbs.ModelError, match="'spring'.*rest_length.*negative"):
        mbs.forces.Spring(a, b, stiffness=1.0, rest_length=-0.5, name="spring")
    with pytest.raises(mbs.ModelError, match="'quartic'.*length.*negative"):
        mbs.forces.QuarticSpring(a, b, stiffness=1.0, length=-0.5, name="quartic")
    with pytest.raises(mbs.ModelError, match="'rope'.*length.*positive"):
        mbs.joints.Distance(a, b, length=-1.0, name="rope")


def test_non_orthonormal_initial_rotation():
    body = rigid("spinner")
    with pytest.raises(mbs.ModelError, match="'spinner'.*not orthonormal.*1e-10"):
        body.set_state(rotation=mbs.rotation_about_z(0.3) * 1.001)
    with pytest.raises(mbs.ModelError, match="'spinner'.*reflection"):
        body.set_state(rotation=np.diag([1.0, -1.0, 1.0]))


def test_point_mass_cannot_carry_an_axis():
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    with pytest.raises(mbs.ModelError, match="'hinge'.*'bob'.*point mass"):
        mbs.joints.Revolute(system.ground, bob, point=(0, 0, 0), axis=(0, 0, 1), name="hinge")


def test_point_mass_attached_away_from_the_particle():
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob")).set_state(position=(1, 0, 0))
    system.add(mbs.joints.Spherical(system.ground, bob, point=(0, 0, 0), name="ball"))
    with pytest.raises(mbs.ModelError, match="'bob'.*attachment point"):
        system.compile()


def test_universal_axes_not_perpendicular():
    system = mbs.System()
    body = system.add(rigid())
    with pytest.raises(mbs.ModelError, match="'cardan'.*perpendicular"):
        mbs.joints.Universal(system.ground, body, point=(0, 0, 0), axis_a=(1, 0, 0),
                             axis_b=(1, 1, 0), name="cardan")


def test_distance_of_zero_length():
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    system.add(mbs.joints.Distance(system.ground, bob, name="rope"))  # both at the origin
    with pytest.raises(mbs.ModelError, match="'rope'.*coincide"):
        system.compile()


def test_empty_system():
    with pytest.raises(mbs.ModelError, match="no bodies"):
        mbs.System().compile()


def test_element_added_twice():
    system = mbs.System()
    body = system.add(rigid("b"))
    with pytest.raises(mbs.ModelError, match="'b'.*already part of this system"):
        system.add(body)


def test_inconsistent_initial_state():
    """Error with both residuals without projection; projection warns and fixes it."""
    system = mbs.System()
    body = system.add(rigid("link"))
    body.set_state(position=(1.0, 0.0, 0.0), angular_velocity=(0.0, 0.0, 2.0),
                   velocity=(0.0, 0.0, 0.5))
    # the centre of mass circles the z axis at radius 1; a rope of length 1.6 to (2, 1, 0)
    # is feasible (distances 1.24 ... 3.24) but violated at the initial pose (sqrt 2)
    system.add(mbs.joints.Distance(system.ground, body, length=1.6, point_a=(2.0, 1.0, 0.0),
                                   name="rope"))
    system.add(mbs.joints.Revolute(system.ground, body, point=(0.0, 0.0, 0.0),
                                   axis=(0, 0, 1), name="hinge"))
    with pytest.warns(UserWarning, match="inconsistent"):
        model = system.compile()
    with pytest.raises(mbs.InconsistentInitialStateError,
                       match=r"\|g\(q0\)\| = \d\.\d{3}e[+-]\d+.*\|G M\^-1 p0\| = "
                             r"\d\.\d{3}e[+-]\d+") as info:
        model.initial_state()
    assert info.value.position_residual > 0.1 and info.value.velocity_residual > 0.1
    with pytest.warns(UserWarning, match="projected"):
        q, p = model.initial_state(project=True)
    assert np.max(np.abs(model.constraints(q))) <= 1e-10
    assert np.max(np.abs(model.velocity_constraints(q, p))) <= 1e-10
    assert np.linalg.norm(q[:3]) == pytest.approx(1.0, rel=1e-10)
    assert np.linalg.norm(q[:3] - (2.0, 1.0, 0.0)) == pytest.approx(1.6, rel=1e-10)


def test_infeasible_initial_state_cannot_be_projected():
    """A rope shorter than the distance the hinge allows: projection fails with an error
    instead of returning a state that still violates the constraints."""
    system = mbs.System()
    body = system.add(rigid("link")).set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, body, length=1.5, name="rope"))
    system.add(mbs.joints.Revolute(system.ground, body, point=(0.0, 0.0, 0.0),
                                   axis=(0, 0, 1), name="hinge"))
    with pytest.warns(UserWarning, match="inconsistent"):
        model = system.compile()
    with pytest.raises(mbs.InconsistentInitialStateError, match="projecting .* failed"):
        model.initial_state(project=True)


def test_a_missing_element_name_suggests_the_close_ones():
    system = mbs.System()
    system.add(mbs.PointMass(1.0, name="bob"))
    with pytest.raises(KeyError, match="no element named 'bobb'; did you mean 'bob'"):
        system["bobb"]


def test_newton_options_and_run_counts_are_checked_when_given():
    """A float iteration count failed inside the first step; numpy integers (from a sweep
    over an array) were refused as counts while True was taken as 1."""
    for options, message in ((dict(max_iterations=2.5), "max_iterations must be an integer"),
                             (dict(max_iterations=True), "max_iterations must be an integer"),
                             (dict(tolerance=float("nan")), "tolerance must be a finite"),
                             (dict(tolerance=2.0), r"tolerance must be in \(0, 1\)"),
                             (dict(simplified="yes"), "simplified must be None, True or False")):
        with pytest.raises(mbs.ModelError, match=f"NewtonOptions: {message}"):
            mbs.solvers.NewtonOptions(**options)
    assert mbs.solvers.NewtonOptions(max_iterations=np.int64(5)).max_iterations == 5
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    system.add(mbs.PointMass(1.0, name="ball"))
    model = system.compile()
    counted = mbs.simulate(model, h=0.1, t_end=0.2, max_refinements=np.int64(3))
    assert counted.stats["completed"]
    with pytest.raises(mbs.ModelError, match="max_refinements must be an integer"):
        mbs.simulate(model, h=0.1, t_end=0.2, max_refinements=True)
    with pytest.raises(mbs.ModelTypeError, match="project must be True or False"):
        model.initial_state(project="yes")


def test_model_functions_name_a_state_of_the_wrong_size():
    """Model observables given a state of another model (or a truncated one) say so, instead
    of failing inside numpy or scipy."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    system.add(rigid())
    model = system.compile()
    q, p = model.initial_state()
    for call, name in ((lambda: model.energy(q[:-1], p), "Model.energy: q must have 12"),
                       (lambda: model.kinetic_energy(p[:-1]), "Model.kinetic_energy: p"),
                       (lambda: model.potential(q[:-2]), "Model.potential: q must be one"),
                       (lambda: model.constraints(q[None, :]),
                        r"shape \(12,\), got shape \(1, 12\)"),
                       (lambda: model.linear_momentum(p[:-1]), "Model.linear_momentum"),
                       (lambda: model.angular_momentum(q, p, about=(1.0, 2.0)),
                        "Model.angular_momentum: about must have 3 components"),
                       (lambda: model.is_consistent(q, p[:5]), "Model.is_consistent")):
        with pytest.raises(mbs.ModelError, match=name):
            call()
    assert model.energy(np.stack([q, q]), np.stack([p, p])).shape == (2,)


def test_helpers_and_accessors_name_their_bad_arguments():
    """Inputs that failed inside numpy or scipy, passed silently or blamed another name."""
    with pytest.raises(mbs.ModelError, match="rotation_from_axis_angle: axis must be numbers"):
        mbs.rotation_from_axis_angle("xyz", 1.0)
    with pytest.raises(mbs.ModelError, match="rotation_from_quaternion: quaternion must be"):
        mbs.rotation_from_quaternion("abcd")
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(rigid())
    system.add(mbs.joints.Spherical(system.ground, link, point=(0.0, 0.0, 1.0)))
    bead = system.add(mbs.PointMass(1.0, name="bead"))
    bead.set_state(position=(1.0, 0.0, 0.0))
    # one body is taken as the list of it
    system.add(mbs.joints.UserConstraint(bead, lambda q: [0.5 * (q @ q - 1.0)],
                                         lambda q: [q], name="sphere"))
    model = system.compile()
    solution = mbs.simulate(model, h=0.01, t_end=0.05)
    with pytest.raises(mbs.ModelError, match="euler_angles: sequence must be three axes"):
        solution.body("link").euler_angles("ZYY")
    with pytest.raises(mbs.ModelError, match="nodes_at: times must be finite"):
        solution.nodes_at([np.nan])
    with pytest.raises(mbs.ModelError, match=r"initial_state must be a pair .* got a dict"):
        mbs.simulate(model, h=0.01, t_end=0.05, initial_state={"q": model.q0, "p": model.p0})
    other = mbs.System()
    other.add(mbs.PointMass(1.0, name="stone"))
    with pytest.raises(mbs.ModelError, match="the model was not compiled from this system"):
        system.summary(other.compile(), print_it=False)
    named = mbs.System()
    named.add(mbs.PointMass(1.0, name="gravity"))
    with pytest.raises(mbs.ModelError, match="the name 'gravity', .* belongs to another"):
        named.gravity = (0.0, 0.0, -9.81)
    assert named.gravity is None


def test_a_lie_group_iteration_option_is_named_as_given():
    import heavy_top

    lie = heavy_top.build().compile(formulation="lie-group")
    with pytest.raises(mbs.ModelError, match="iteration must be 'newton' or 'fixed-point', "
                                             "got 'newtn'"):
        mbs.simulate(lie, "vrkmk", h=0.01, t_end=0.02, iteration="newtn")
    with pytest.raises(mbs.ModelError, match=r"tol must lie in \(0, 1\), got 1.5"):
        mbs.simulate(lie, "vrkmk", h=0.01, t_end=0.02, tol=1.5)


def test_a_projection_with_joint_rates_is_reported_and_short_runs_are_timed_relative():
    """initial_state(project=True, joint_rates=...) moved the positions without a word, as
    the projection without joint rates does not; a 1 us run with h = 3e-10 (a third of a
    step short) ends early with a warning, as a 1 s run with h = 3e-4 does."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(rigid())
    link.set_state(position=(0.5, 0.0, 0.0))
    system.add(mbs.joints.Revolute(system.ground, link, point=(0.0, 0.0, 0.0),
                                   axis=(0.0, 1.0, 0.0), name="hinge"))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, -0.5))
    system.add(mbs.joints.Distance(link, bob, length=0.55, point_a=(1.0, 0.0, 0.0)))
    model = system.compile()
    with pytest.warns(UserWarning, match="initial positions projected .* joint rates"):
        model.initial_state(project=True, joint_rates={"hinge": 2.0})
    ball = mbs.System()
    ball.add(mbs.PointMass(1.0, name="ball"))
    with pytest.warns(UserWarning, match="does not divide the interval"):
        mbs.simulate(ball.compile(), h=3e-10, t_end=1e-6)


def test_a_state_that_is_not_finite_is_not_blamed_on_the_user_functions():
    """NaN coordinates reach a user potential's invariants and a user constraint's local
    coordinates as NaN; the error names the state as the cause (a step that blew up), with
    the hint to reduce the step, not the user's function ("it must return finite
    values")."""
    system = mbs.System()
    a = system.add(mbs.PointMass(1.0, name="a"))
    b = system.add(mbs.PointMass(1.0, name="b"))
    b.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.UserPotential([mbs.forces.SquaredDistance(a, b)],
                                        energy=lambda pi: pi[0] ** 2, name="user_spring"))
    system.add(mbs.joints.UserConstraint([a], lambda q: [q[2]], lambda q: [[0.0, 0.0, 1.0]],
                                         name="plane"))
    model = system.compile()
    state = model.q0.copy()
    state[0] = np.nan
    for evaluate, name in ((model.potential, "user_spring"), (model.constraints, "plane")):
        with pytest.raises(mbs.ForceFunctionError, match=rf"{name}'.* not finite .*not the "
                                                         rf"(energy )?function") as caught:
            evaluate(state)
        assert caught.value.hint == "reduce the step size: the state blew up"
