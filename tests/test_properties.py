"""Property tests on random chains and trees of rigid bodies and point masses (hypothesis)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mechanisms import JOINT_EQUATIONS, random_tree

import mbs

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
JOINT_TYPES = [name for name in JOINT_EQUATIONS if name != "None"]


@st.composite
def trees(draw, chain: bool = False, allow_free: bool = False):
    """(kinds, parents, joints, seed) of a random tree (or chain) rooted at the ground."""
    size = draw(st.integers(1, 6))
    kinds = draw(st.lists(st.sampled_from(["rigid", "rigid", "point"]), min_size=size,
                          max_size=size))
    if chain:
        parents = list(range(-1, size - 1))
    else:
        parents = [draw(st.integers(-1, k - 1)) for k in range(size)]
    choices = JOINT_TYPES + (["None"] if allow_free else [])
    joints = draw(st.lists(st.sampled_from(choices), min_size=size, max_size=size))
    seed = draw(st.integers(0, 2**31 - 1))
    return kinds, parents, joints, seed


def compile_quietly(system: mbs.System) -> mbs.Model:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # inconsistent on purpose
        return system.compile()


def check_projected_state(model: mbs.Model) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        q, p = model.initial_state(project=True)
    if model.m == 0:
        return
    assert np.max(np.abs(model.constraints(q))) <= 1e-10
    velocity = model.apply_inverse_mass(p)
    assert np.max(np.abs(model.constraint_jacobian(q) @ velocity)) <= 1e-10 * max(
        1.0, np.max(np.abs(velocity)))
    # the projected state is accepted as it is
    assert model.is_consistent(q, p)


@SETTINGS
@given(trees())
def test_random_trees_compile_project_and_match_grubler(tree):
    kinds, parents, joints, seed = tree
    system, grubler = random_tree(kinds, parents, joints, seed, distance_stretch=0.1)
    model = compile_quietly(system)
    assert model.n == sum(12 if k == "rigid" else 3 for k in kinds)
    assert model.degrees_of_freedom == grubler
    assert model.redundancies == []
    assert system.kinematic_loops() == []
    check_projected_state(model)


@SETTINGS
@given(trees(chain=True))
def test_random_chains_compile_project_and_match_grubler(tree):
    kinds, parents, joints, seed = tree
    system, grubler = random_tree(kinds, parents, joints, seed, distance_stretch=-0.05)
    model = compile_quietly(system)
    assert model.degrees_of_freedom == grubler
    check_projected_state(model)


@SETTINGS
@given(trees(allow_free=True), st.floats(0.01, 0.2))
def test_projection_of_perturbed_coordinates(tree, size):
    """Random perturbations of every coordinate (directors included) are projected back onto
    g = 0 and G M^-1 p = 0 by Model.project; forests with free bodies included."""
    kinds, parents, joints, seed = tree
    system, grubler = random_tree(kinds, parents, joints, seed, velocity_scale=0.0)
    model = system.compile()
    assert model.degrees_of_freedom == grubler
    assert sorted(system.floating_bodies()) == sorted(
        _floating(parents, joints, [b.name for b in system.bodies]))
    rng = np.random.default_rng(seed)
    q0, p0 = model.initial_state()  # consistent: joints are defined at the initial pose
    q, p = model.project(q0 + size * rng.standard_normal(model.n),
                         p0 + rng.standard_normal(model.n))
    if model.m:
        assert np.max(np.abs(model.constraints(q))) <= 1e-10
        velocity = model.apply_inverse_mass(p)
        assert np.max(np.abs(model.constraint_jacobian(q) @ velocity)) <= 1e-10 * max(
            1.0, np.max(np.abs(velocity)))


def _floating(parents, joints, names):
    """Bodies whose path to the ground crosses a free ("None") link."""
    grounded = []
    for k, parent in enumerate(parents):
        ok = joints[k] != "None" and (parent < 0 or grounded[parent])
        grounded.append(ok)
    return [name for name, ok in zip(names, grounded) if not ok]


@SETTINGS
@given(trees(), st.integers(0, 5), st.integers(0, 5))
def test_random_loops_rank_analysis_matches_global_rank(tree, first, second):
    """Closing a loop with an extra distance joint: the block-wise rank analysis gives the
    same degrees of freedom as one SVD of the whole Jacobian."""
    kinds, parents, joints, seed = tree
    system, _ = random_tree(kinds, parents, joints, seed, velocity_scale=0.0)
    bodies = [system.ground] + system.bodies
    a, b = bodies[first % len(bodies)], bodies[(second + 1) % len(bodies)]
    if a is b:
        b = bodies[(second + 2) % len(bodies)]
    if a is b:
        return
    point_a = None if isinstance(a, mbs.PointMass) else a.reference_point() + (0.1, 0.2, 0.3)
    point_b = None if isinstance(b, mbs.PointMass) else b.reference_point() - (0.2, 0.1, 0.0)
    pa = a.reference_point() if point_a is None else point_a
    pb = b.reference_point() if point_b is None else point_b
    if np.linalg.norm(pb - pa) < 1e-3:
        return
    system.add(mbs.joints.Distance(a, b, point_a=point_a, point_b=point_b, name="closure"))
    system.redundant = "keep"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = system.compile()
        q0, _ = model.initial_state()
        rank = np.linalg.matrix_rank(model.constraint_jacobian(q0).toarray(), tol=1e-9)
        assert model.degrees_of_freedom == model.n - rank
        redundant = sum(r.count for r in model.redundancies)
        assert model.m - rank == redundant
        # the default removes exactly the redundant equations and keeps full row rank
        system.redundant = "remove"
        reduced = system.compile()
    reduced_rank = np.linalg.matrix_rank(reduced.constraint_jacobian(q0).toarray(), tol=1e-9)
    assert reduced.m == reduced_rank == rank
    assert reduced.degrees_of_freedom == model.degrees_of_freedom
