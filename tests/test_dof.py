"""Degrees of freedom, redundant constraints, kinematic loops, floating bodies, the graph and
the summary of classic mechanisms (truths derived by hand in tests/mechanisms.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mechanisms import (
    bennett_linkage,
    double_pendulum,
    planar_four_bar,
    random_rotation,
    slider_crank,
    spatial_four_bar,
    spherical_chain,
)

import mbs


def independent_dof(model: mbs.Model) -> int:
    """n - rank G(q0) from one dense SVD of the whole Jacobian."""
    q0 = model.initial_state()[0]
    return model.n - np.linalg.matrix_rank(model.constraint_jacobian(q0).toarray(), tol=1e-9)


# mechanism -> (dof, total redundant equations, joints of the loop)
CASES = {
    "double_pendulum": (double_pendulum, 2, 0, ()),
    "planar_four_bar": (planar_four_bar, 1, 3, ("pivot_O", "pin_A", "pin_B", "pivot_C")),
    "four_bar_one_redundant": (lambda: planar_four_bar("spherical"), 1, 1,
                               ("pivot_O", "pin_A", "ball_B", "pivot_C")),
    "slider_crank": (slider_crank, 1, 3, ("crank_pivot", "crank_pin", "wrist_pin", "guide")),
    "spatial_rsur": (spatial_four_bar, 1, 0, ()),
    "spatial_rssr": (lambda: spatial_four_bar("spherical"), 2, 0, ()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_degrees_of_freedom_and_redundancy(name):
    build, dof, redundant, loop_joints = CASES[name]
    system = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = system.compile()
    assert model.degrees_of_freedom == dof
    assert independent_dof(model) == dof
    assert sum(r.count for r in model.redundancies) == redundant
    # Grübler's count misses exactly the redundant equations
    n_free = sum(6 if isinstance(b, mbs.RigidBody) else 3 for b in system.bodies)
    equations = sum(j.n_equations for j in system.joints)
    assert model.m == 6 * sum(isinstance(b, mbs.RigidBody) for b in system.bodies) + (
        equations - redundant)  # redundant equations are removed at compile time
    assert model.degrees_of_freedom == n_free - equations + redundant
    if redundant:
        (red,) = model.redundancies
        assert set(red.joints) <= set(loop_joints)
        assert len(red.joints) >= 2
        assert all(isinstance(j, str) for j in red.joints)


def test_four_bar_redundancy_names_the_loop_joints():
    model = planar_four_bar("spherical").compile()
    (red,) = model.redundancies
    assert red.count == 1
    # the out-of-plane equations of all four joints take part in the dependency
    assert set(red.joints) == {"pivot_O", "pin_A", "ball_B", "pivot_C"}


def test_spatial_four_bar_moves_with_one_and_two_parameters():
    """Tangent space check independent of the rank analysis: the null space of G(q0) has
    dimension 1 (RSUR) or 2 (RSSR), and for the RSSR it contains the coupler spin about the
    line through its ball centres."""
    system = spatial_four_bar("spherical")
    model = system.compile()
    q0 = model.initial_state()[0]
    jac = model.constraint_jacobian(q0).toarray()
    a, b = np.array([0.0, 1.0, 0.0]), np.array([2.0, 0.8, 1.1])
    line = (b - a) / np.linalg.norm(b - a)
    spin = np.zeros(model.n)
    s = model.coordinates("coupler").start
    spin[s:s + 3] = np.cross(line, q0[s:s + 3] - a)
    for i in range(1, 4):
        spin[s + 3 * i:s + 3 * i + 3] = np.cross(line, q0[s + 3 * i:s + 3 * i + 3])
    assert np.max(np.abs(jac @ spin)) < 1e-13


def test_summary_reports_redundancy_loops_and_floating_bodies(capsys):
    system = planar_four_bar("spherical")
    free = system.add(mbs.PointMass(1.0, name="drifter"))
    free.set_state(position=(5.0, 5.0, 5.0))
    model = system.compile()
    text = system.summary(model)
    assert capsys.readouterr().out.strip() == text.strip()
    assert "degrees of freedom = 4" in text  # 1 + the free particle's 3
    assert "redundant: 1 equation(s)" in text
    for joint in ("pivot_O", "pin_A", "ball_B", "pivot_C"):
        assert joint in text
    assert "kinematic loops: 1" in text
    loop_line = next(line for line in text.splitlines() if "loop:" in line)
    for body in ("ground", "crank", "coupler", "rocker"):
        assert body in loop_line
    assert "floating bodies (not jointed to ground): drifter" in text
    quiet = system.summary(model, print_it=False)
    assert capsys.readouterr().out == "" and quiet == text


def test_summary_without_redundancy():
    text = double_pendulum().summary(print_it=False)
    assert "redundant constraints: none" in text
    assert "kinematic loops: 0" in text
    assert "floating bodies (not jointed to ground): none" in text
    assert "degrees of freedom = 2" in text
    assert text.startswith("System with 2 bodies, 2 joints, 1 force\n")


def test_kinematic_loops_and_floating_bodies():
    system = mbs.System()
    bodies = []
    for k in range(5):
        body = mbs.RigidBody(1.0, (1.0, 1.0, 1.5), name=f"b{k}")
        body.set_state(position=(k, 0.0, 0.0),
                       rotation=random_rotation(np.random.default_rng(k)))
        bodies.append(system.add(body))
    j = mbs.joints
    system.add(j.Spherical(system.ground, bodies[0], point=(0.0, 0.0, 1.0)))
    system.add(j.Spherical(bodies[0], bodies[1], point=(0.5, 0.0, 0.0)))
    system.add(j.Distance(bodies[1], system.ground, point_b=(1.0, 2.0, 0.0)))  # a loop
    system.add(j.Spherical(bodies[2], bodies[3], point=(2.5, 0.0, 0.0)))  # floating pair
    system.add(j.Distance(bodies[2], bodies[3], point_a=(2.0, 0.3, 0.0)))  # parallel joint
    system.add(mbs.forces.Spring(bodies[4], bodies[0], stiffness=1.0))  # not a joint
    loops = system.kinematic_loops()
    assert sorted(sorted(loop) for loop in loops) == [["b0", "b1", "ground"], ["b2", "b3"]]
    assert system.floating_bodies() == ["b2", "b3", "b4"]
    assert system.unconnected_bodies() == []
    graph = system.graph
    assert set(graph.nodes) == {"ground", "b0", "b1", "b2", "b3", "b4"}
    assert graph.number_of_edges("b2", "b3") == 2
    kinds = {key: data["kind"] for _, _, key, data in graph.edges(keys=True, data=True)}
    assert sorted(kinds.values()).count("force") == 1
    model = system.compile()
    # 30 free - (3 + 3 + 1 + 3 + 1) equations; all independent at this pose
    assert model.degrees_of_freedom == 30 - 11 == independent_dof(model)


def test_field_forces_are_ground_edges():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    a = system.add(mbs.PointMass(1.0, name="a")).set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.CentralGravity(1.0, bodies=[a], name="sun"))
    graph = system.graph
    keys = {key for _, _, key in graph.edges(keys=True)}
    assert keys == {"gravity", "sun"}
    assert all(set(edge[:2]) == {"ground", "a"} for edge in graph.edges)
    assert system.unconnected_bodies() == []


def test_long_chain_dof_and_no_redundancy():
    model = spherical_chain(30).compile()
    assert model.degrees_of_freedom == 90 == independent_dof(model)
    assert model.redundancies == []


def test_singular_configuration_is_reported_as_redundant():
    """Two bodies joined by a ball at the midpoint of their centres, plus a distance between
    the centres: at the stretched (collinear) pose the distance cannot change to first order,
    so its equation is dependent there (rank drop measured at the initial state)."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.5), name="a"))
    b = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.5), name="b"))
    a.set_state(position=(0.0, 0.0, 0.0))
    b.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Spherical(a, b, point=(0.5, 0.0, 0.0), name="ball"))
    system.add(mbs.joints.Distance(a, b, name="stretch"))
    model = system.compile()
    assert model.degrees_of_freedom == 12 - 3 == independent_dof(model)
    (red,) = model.redundancies
    assert red.count == 1 and "stretch" in red.joints


def _fixed_x_constraint(bodies, n_local):
    def value(q):
        return np.array([q[0] - 1.0])

    def jacobian(q):
        out = np.zeros((1, n_local))
        out[0, 0] = 1.0
        return out

    return mbs.joints.UserConstraint(bodies, value, jacobian, name="user")


@pytest.mark.parametrize("second_body", [False, True], ids=["one_body", "two_bodies"])
def test_user_constraint_redundant_with_joints_elsewhere(second_body):
    """A user constraint need not be invariant under rigid motions, so it can be dependent on
    joints of another block of the joint graph: here it fixes phi_x of a body whose centre of
    mass a ball joint to the ground already holds."""
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="a")).set_state(position=(1, 0, 0))
    system.add(mbs.joints.Spherical(system.ground, a, point=(1, 0, 0), name="fix"))
    bodies = [a]
    if second_body:
        b = system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="b"))
        b.set_state(position=(2, 0, 0))
        system.add(mbs.joints.Spherical(a, b, point=(1.5, 0, 0), name="ball"))
        bodies.append(b)
    system.add(_fixed_x_constraint(bodies, 12 * len(bodies)))
    model = system.compile()
    assert model.degrees_of_freedom == independent_dof(model) == 3 + 3 * second_body
    (red,) = model.redundancies
    assert red.count == 1 and {"fix", "user"} <= set(red.joints)


def test_user_potential_edges_list_each_body_once():
    system = mbs.System()
    a = system.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="a"))
    p = system.add(mbs.PointMass(1.0, name="p")).set_state(position=(1, 0, 0))
    system.add(mbs.forces.UserPotential(
        [mbs.forces.SquaredDistance(a, p), mbs.forces.PointComponent(a, (0, 0, 1))],
        energy=lambda pi: pi[0] + pi[1], name="u"))
    edges = list(system.graph.edges(keys=True))
    assert edges == [("a", "p", "u")]  # no self-loop a - a
    assert system.compile().forces[0].bodies == ("a", "p")


def test_redundant_four_bar_simulates_and_removed_equations_keep_holding():
    """Consistent redundancy (planar four-bar from 3-D revolute joints): compile drops the
    dependent equations, EM runs with regular Newton matrices, and the dropped equations,
    evaluated on the full model, still hold along the motion."""
    system = planar_four_bar()
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        model = system.compile()
    (red,) = model.redundancies
    assert red.consistent and len(red.removed) == 3
    sol = mbs.simulate(model, "em", h=0.01, t_end=1.0, project=True)
    energy = sol.energy()
    assert np.max(np.abs(energy - energy[0])) <= 1e-12 * max(1.0, abs(energy[0]))
    system.redundant = "keep"
    full = system.compile()
    residual = max(np.max(np.abs(full.constraints(q))) for q in sol.q)
    assert residual <= 1e-10


@pytest.mark.parametrize("solver, options", [("lobatto", {"stages": 3}),
                                             ("em", {"order": 4})])
def test_high_order_schemes_on_the_redundant_four_bar(solver, options):
    """The high-order schemes see the model with its redundant equations removed, like the
    others: the dropped equations still hold along the motion; composed EM keeps energy."""
    system = planar_four_bar()
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        model = system.compile()
    sol = mbs.simulate(model, solver, h=0.01, t_end=1.0, project=True, **options)
    system.redundant = "keep"
    full = system.compile()
    assert max(np.max(np.abs(full.constraints(q))) for q in sol.q) <= 1e-10
    if solver == "em":
        energy = sol.energy()
        assert np.max(np.abs(energy - energy[0])) <= 1e-12 * max(1.0, abs(energy[0]))


def test_removed_equations_are_named_by_what_they_keep():
    """The four-bar's hinges are all along z, so the equations that can be dropped are the
    out-of-plane ones: the z rows of the common points and the parallel-axes rows. The
    warning, the summary and ``Redundancy.removed_labels`` name them so."""
    system = planar_four_bar()
    with pytest.warns(UserWarning, match="redundant constraints removed") as caught:
        model = system.compile()
    (red,) = model.redundancies
    assert len(red.removed_labels) == len(red.removed) == 3
    for (joint, k), label in zip(red.removed, red.removed_labels):
        assert label.startswith(f"{joint}[{k}] (")
        assert "parallel axes" in label or "common point, z" in label
        assert label in str(caught[0].message)
        assert label in system.summary(model, print_it=False)


@pytest.mark.parametrize("joint", ["Revolute", "Cylindrical", "Prismatic", "Rigid",
                                   "Universal", "Spherical", "Distance"])
def test_every_equation_of_a_joint_has_a_name(joint):
    """One name per equation the joint adds to the model (a rigid body alone has the 6
    orthonormality equations)."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, (2.0, 3.0, 4.0), name="body"))
    body.set_state(position=(1.0, 0.0, 0.0))
    arguments = {"Universal": {"point": (0, 0, 0), "axis_a": (1, 0, 0), "axis_b": (0, 1, 0)},
                 "Spherical": {"point": (0, 0, 0)}, "Distance": {},
                 "Rigid": {}}.get(joint, {"point": (0, 0, 0), "axis": (0, 0, 1)})
    element = system.add(getattr(mbs.joints, joint)(system.ground, body, **arguments))
    model = system.compile()
    assert len(element.equation_names) == model.m - 6 == element.n_equations


def test_kept_redundant_equations_are_reported_as_kept():
    """System(redundant="keep"): compile warns that the Newton matrices are singular, the
    redundancy lists no removed equation, and the summary says the equations are kept."""
    system = planar_four_bar()
    system.redundant = "keep"
    with pytest.warns(UserWarning, match="redundant constraints kept") as caught:
        model = system.compile()
    assert "singular" in str(caught[0].message)
    (red,) = model.redundancies
    assert red.count == 3 and red.removed == ()
    assert "(consistent, kept)" in system.summary(model, print_it=False)
    assert model.degrees_of_freedom == 1


def test_an_inconsistent_state_names_a_violated_equation_that_was_removed_as_redundant():
    """Two rods from the origin to one point mass, of lengths 1.0 and 1.1: compile() keeps
    one equation and removes the other as redundant; whichever the state violates is named."""
    for position, violated in ((1.0, "rod2"), (1.1, "rod1")):
        system = mbs.System(gravity=(0.0, 0.0, -9.81))
        mass = system.add(mbs.PointMass(mass=1.0, name="b"))
        mass.set_state(position=(position, 0.0, 0.0))
        system.add(mbs.joints.Distance(system.ground, mass, length=1.0, name="rod1"))
        system.add(mbs.joints.Distance(system.ground, mass, length=1.1, name="rod2"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # redundant and inconsistent: warned about
            model = system.compile()
        with pytest.raises(mbs.InconsistentInitialStateError,
                           match=f"largest in '{violated}' \\(position\\)"):
            mbs.simulate(model, "em", h=0.01, t_end=0.1)


def test_bennett_linkage_keeps_equations_that_stay_regular_along_its_motion():
    """Bennett's linkage has 3 redundant equations at every pose. The equations kept must
    stay regular along the whole motion, not only at the initial pose: along a turn and a
    half of the crank the full set's 35th singular value stays above 0.3 of its largest,
    and the kept set's smallest must not fall to a false singular point (a choice made at
    the initial pose alone reaches 1e-4 there). RATTLE, which follows whatever the kept
    equations allow, then stays on the linkage: the dropped equations hold to round-off
    and the energy error stays O(h^2) (instead of jumping by 40 % at the false singular
    point)."""
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        model = bennett_linkage().compile()
    assert model.degrees_of_freedom == 1
    (red,) = model.redundancies
    assert red.count == 3
    path = mbs.simulate(model, "em", h=2e-3, t_end=3.0)
    assert np.ptp(path.joint("hinge1").position) > 4.0  # more than two thirds of a turn
    conditioning = [np.linalg.svd(model.constraint_jacobian(q).toarray(), compute_uv=False)
                    for q in path.q[::10]]
    assert min(s[-1] / s[0] for s in conditioning) > 1e-2
    rattle = mbs.simulate(model, "rattle", h=2e-3, t_end=3.0)
    assert np.max(model.removed_constraint_norms(rattle.q)) < 1e-12
    energy = rattle.energy()
    assert np.max(np.abs(energy - energy[0])) < 1e-3 * np.max(rattle.kinetic_energy())


def test_a_driven_bennett_linkage_turns_a_full_turn():
    """A drive turning Bennett's linkage prescribes poses along the joints' own motion, so
    the equations kept must stay regular there too: the crank turns through 7 rad and the
    kept set's smallest singular value stays above 1e-2 of its largest (a choice made at the
    initial pose falls to 1.3e-4 at a crank angle of 0, where em and rattle failed with a
    false singular-configuration hint), while the dropped equations hold to round-off."""
    system = bennett_linkage()
    system.add(mbs.joints.Drive(system["hinge1"], lambda t: -2.0 * t, name="motor"))
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        model = system.compile()
    assert model.degrees_of_freedom == 0
    start = model.initial_state(project=True, joint_rates={"hinge1": -2.0})
    for scheme in ("em", "rattle"):
        path = mbs.simulate(model, scheme, h=2e-3, t_end=3.5, initial_state=start)
        assert np.ptp(path.joint("hinge1").position) == pytest.approx(7.0, abs=1e-9)
        conditioning = [np.linalg.svd(model.constraint_jacobian(q, t).toarray(),
                                      compute_uv=False)
                        for q, t in zip(path.q[::10], path.t[::10])]
        assert min(s[-1] / s[0] for s in conditioning) > 1e-2
        assert np.max(model.removed_constraint_norms(path.q)) < 1e-12


def test_a_failure_with_kept_redundant_equations_names_them():
    """With System(redundant="keep") Bennett's linkage keeps 3 dependent equations and its
    Newton matrices are singular: a run that fails says so and names the default
    redundant="remove", instead of asking for smaller steps (which fail earlier)."""
    system = bennett_linkage()
    system.redundant = "keep"
    with pytest.warns(UserWarning, match="redundant constraints kept"):
        model = system.compile()
    state = model.initial_state(joint_rates={"hinge1": 7.0})
    with pytest.raises(mbs.SolverError) as failure:
        mbs.simulate(model, "em", h=2e-3, t_end=0.5, initial_state=state)
    assert failure.value.hint == (
        "the model keeps 3 redundant constraint equations (System(redundant='keep')), which "
        "make the Newton matrices singular, so smaller steps need not help; compile with the "
        "default redundant='remove'")


def test_drives_that_over_constrain_a_loop_are_refused():
    """Two drives on the one degree of freedom of a four-bar, or a drive on a beam that two
    hinges already hold: compile refuses them, naming the drives and the joints, instead of
    dropping a joint's own equation to make room for them (which changed the mechanism)."""
    system = planar_four_bar()
    system.add(mbs.joints.Drive(system["pivot_O"], lambda t: 0.1 * t, name="motor_O"))
    system.add(mbs.joints.Drive(system["pivot_C"], lambda t: 0.2 * t, name="motor_C"))
    with pytest.raises(mbs.ModelError, match=r"motor_O, motor_C prescribe a motion that the "
                                             r"joints pivot_O, pin_A, pin_B, pivot_C already "
                                             r"fix at the initial pose: either the loop is "
                                             r"driven more often than it can move"):
        system.compile()
    beam = mbs.System()
    body = beam.add(mbs.RigidBody(1.0, (1.0, 1.2, 1.4), name="beam"))
    beam.add(mbs.joints.Revolute(beam.ground, body, point=(0, 0, 0), axis=(0, 0, 1),
                                 name="h1"))
    beam.add(mbs.joints.Revolute(beam.ground, body, point=(0, 0, 0), axis=(1, 0, 0),
                                 name="h2"))
    beam.add(mbs.joints.Drive(beam["h1"], lambda t: t, name="motor"))
    with pytest.raises(mbs.ModelError, match=r"motor prescribes a motion that the joints "
                                             r"h1, h2 already fix"):
        beam.compile()


@pytest.mark.parametrize("kind, dof, redundant", [("Prismatic", 1, 5), ("Cylindrical", 2, 4)])
def test_a_body_on_two_parallel_sliding_joints_compiles(kind, dof, redundant):
    """A carriage on two parallel rails (prismatic) or a shaft in two coaxial bearings
    (cylindrical): the redundant equations are found along motions that turn no director
    (a pure slide), and the body keeps the joints' degrees of freedom."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(1.0, (1.0, 1.0, 1.0), name="carriage"))
    joint = getattr(mbs.joints, kind)
    offset = (0, 1, 0) if kind == "Prismatic" else (1, 0, 0)
    system.add(joint(system.ground, body, point=(0, 0, 0), axis=(1, 0, 0), name="rail1"))
    system.add(joint(system.ground, body, point=offset, axis=(1, 0, 0), name="rail2"))
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        model = system.compile()
    assert model.degrees_of_freedom == independent_dof(model) == dof
    (red,) = model.redundancies
    assert red.count == redundant


def test_summary_counts_drives_apart_and_each_joints_removed_equations():
    """A planar four-bar of revolutes (3 out-of-plane equations redundant, 5 per revolute)
    with a drive on its crank: the header counts the drive apart from the joints, its row is
    a drive's, and each joint's row gives its kept equations and those removed, which add up
    to its 5."""
    system = planar_four_bar()
    system.add(mbs.joints.Drive(system["pivot_O"], lambda t: t, name="motor"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = system.compile()
    text = system.summary(model, print_it=False)
    assert text.splitlines()[0].startswith("System with 3 bodies, 4 joints, 1 drive, ")
    assert any(line.split()[:2] == ["drive", "motor"] for line in text.splitlines())
    removed = {}
    for joint, _ in model.redundancies[0].removed:
        removed[joint] = removed.get(joint, 0) + 1
    for joint in ("pivot_O", "pin_A", "pin_B", "pivot_C"):
        line = next(line for line in text.splitlines() if line.split()[:2] == ["joint", joint])
        kept = model.constraint_rows[joint].size
        assert kept + removed.get(joint, 0) == 5
        assert f"({kept} equation" in line
        assert ("more removed as redundant" in line) == (joint in removed)
        if joint in removed:
            assert f"{removed[joint]} more removed as redundant" in line


def open_leg() -> tuple[mbs.System, mbs.joints.Revolute]:
    """Ground - thigh - shank on two hinges under gravity: an open chain."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    thigh = system.add(mbs.RigidBody(8.0, (0.15, 0.15, 0.03), name="thigh"))
    thigh.set_state(position=(0.0, 0.0, -0.2))
    shank = system.add(mbs.RigidBody(3.5, (0.05, 0.05, 0.006), name="shank"))
    shank.set_state(position=(0.0, 0.0, -0.65))
    system.add(mbs.joints.Revolute(system.ground, thigh, point=(0, 0, 0), axis=(0, 1, 0),
                                   name="hip"))
    knee = system.add(mbs.joints.Revolute(thigh, shank, point=(0, 0, -0.45), axis=(0, 1, 0),
                                          name="knee"))
    return system, knee


def test_a_drive_closes_no_loop():
    """A drive acts on its joint's two bodies, which the joint already connects."""
    system, knee = open_leg()
    system.add(mbs.joints.Drive(knee, lambda t: 0.3 * (1.0 - np.cos(t)), name="knee_drive"))
    assert system.kinematic_loops() == []
    assert "kinematic loops: 0" in system.summary(print_it=False)
    kinds = {key: data["kind"] for _, _, key, data in system.graph.edges(keys=True, data=True)}
    assert kinds["knee_drive"] == "drive" and kinds["knee"] == "joint"


def test_a_body_left_out_of_a_mechanism_is_named_at_compile():
    """A forgotten knee joint: the shank is touched by gravity only (an edge of the graph,
    so it is not unconnected) and would fall away unnoticed."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    thigh = system.add(mbs.RigidBody(8.0, (0.15, 0.15, 0.03), name="thigh"))
    system.add(mbs.RigidBody(3.5, (0.05, 0.05, 0.006), name="shank"))
    system.add(mbs.joints.Revolute(system.ground, thigh, point=(0, 0, 0), axis=(0, 1, 0)))
    with pytest.warns(UserWarning, match="body 'shank' is linked to nothing: no joint"):
        system.compile()
    # linked bodies, and bodies of a system without joints (free flight), are not named
    linked, _ = open_leg()
    free = mbs.System(gravity=(0.0, 0.0, -9.81))
    free.add(mbs.RigidBody(1.0, (2.0, 2.5, 3.0), name="projectile"))
    for quiet in (linked, free):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            quiet.compile()
