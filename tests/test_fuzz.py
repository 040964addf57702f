"""Fuzzing of the public API: whatever the input, mbs either works or raises an mbs error.

``MBS_FUZZ_EXAMPLES`` sets the number of generated cases per strategy (default 60 for CI; the
acceptance run uses 500: ``MBS_FUZZ_EXAMPLES=500 python -m pytest tests/test_fuzz.py``).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mbs

EXAMPLES = int(os.environ.get("MBS_FUZZ_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-10, max_value=10),
    st.sampled_from([0.0, -0.0, 1e-300, -1.0, 1e300]),
)
junk = st.one_of(st.none(), st.text(max_size=3), st.booleans(), st.just(object()),
                 st.lists(numbers, max_size=5))
vectors = st.one_of(st.lists(numbers, min_size=3, max_size=3), st.lists(numbers, max_size=5),
                    junk, numbers)
matrices = st.one_of(st.lists(st.lists(numbers, min_size=3, max_size=3), min_size=3,
                              max_size=3), vectors)


def accepts_or_raises_mbs_error(function, *args, **kwargs):
    """Run ``function``; any exception must be an mbs error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return function(*args, **kwargs)
    except mbs.MbsError:
        return None


@SETTINGS
@given(mass=st.one_of(numbers, junk), inertia=st.one_of(matrices, vectors),
       position=vectors, rotation=matrices, velocity=vectors, omega=vectors)
def test_rigid_body_constructor_and_state(mass, inertia, position, rotation, velocity, omega):
    body = accepts_or_raises_mbs_error(mbs.RigidBody, mass, inertia, name="b")
    if body is not None:
        assert body.mass > 0 and np.all(np.isfinite(body.euler_tensor))
        accepts_or_raises_mbs_error(body.set_state, position=position, rotation=rotation,
                                    velocity=velocity, angular_velocity=omega)
        assert np.all(np.isfinite(body.initial_coordinates()))


@SETTINGS
@given(shape=st.sampled_from(["box", "cylinder", "tube", "sphere", "spherical_shell", "cone",
                              "torus"]),
       mass=st.one_of(numbers, st.none()), density=st.one_of(numbers, st.none()),
       a=numbers, b=numbers, c=numbers)
def test_shapes(shape, mass, density, a, b, c):
    dims = {"box": {"lx": a, "ly": b, "lz": c}, "cylinder": {"radius": a, "length": b},
            "tube": {"radius": a, "length": b}, "sphere": {"radius": a},
            "spherical_shell": {"radius": a}, "cone": {"radius": a, "height": b},
            "torus": {"radius": a}}[shape]
    body = accepts_or_raises_mbs_error(mbs.RigidBody.from_shape, shape, mass=mass,
                                       density=density, **dims)
    if body is not None:
        assert np.isfinite(body.mass) and body.mass > 0


@SETTINGS
@given(kind=st.sampled_from(["Spherical", "Revolute", "Universal", "Cylindrical", "Prismatic",
                             "Rigid", "Distance"]),
       point=vectors, axis=vectors, axis_b=vectors, length=st.one_of(numbers, st.none()),
       ground_first=st.booleans(), point_mass=st.booleans())
def test_joint_constructors_and_compile(kind, point, axis, axis_b, length, ground_first,
                                        point_mass):
    system = mbs.System(gravity=(0, 0, -9.81))
    body = (mbs.PointMass(1.0, name="body") if point_mass
            else mbs.RigidBody(1.0, (1.0, 1.2, 1.5), name="body"))
    system.add(body)
    body.set_state(position=(0.3, 0.2, -0.5))
    a, b = (system.ground, body) if ground_first else (body, system.ground)
    cls = getattr(mbs.joints, kind)
    args = {"Spherical": dict(point=point), "Revolute": dict(point=point, axis=axis),
            "Universal": dict(point=point, axis_a=axis, axis_b=axis_b),
            "Cylindrical": dict(point=point, axis=axis),
            "Prismatic": dict(point=point, axis=axis), "Rigid": dict(point=point, axis=axis),
            "Distance": dict(length=length, point_a=None, point_b=None)}[kind]
    joint = accepts_or_raises_mbs_error(cls, a, b, **args)
    if joint is None:
        return
    if accepts_or_raises_mbs_error(system.add, joint) is None:
        return
    model = accepts_or_raises_mbs_error(system.compile)
    if model is not None:
        assert np.all(np.isfinite(model.constraints(model.q0)))
        accepts_or_raises_mbs_error(model.initial_state, project=True)


@SETTINGS
@given(h=st.one_of(numbers, junk), t_end=st.one_of(numbers, junk),
       solver=st.one_of(st.sampled_from(["em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle",
                                         "EM", "nope", ""]), junk),
       theta=st.one_of(st.none(), numbers))
def test_simulate_options(h, t_end, solver, theta):
    system = mbs.System(gravity=(0, 0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    model = system.compile()
    options = {} if theta is None else {"theta": theta}
    numeric = isinstance(h, int | float) and isinstance(t_end, int | float) and h and t_end
    if numeric and not (abs(h) >= 1e-3 and abs(t_end) / abs(h) <= 50):
        return  # valid but long runs are not the point here
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            solution = mbs.simulate(model, solver, h=h, t_end=t_end, **options)
    except mbs.MbsError:
        return
    assert np.all(np.isfinite(solution.q)) and np.all(np.isfinite(solution.p))


def make_element(kind, a, b, point, axis, k, data):
    if kind == "Spherical":
        return mbs.joints.Spherical(a, b, point=point, name=f"j{k}")
    if kind == "Revolute":
        return mbs.joints.Revolute(a, b, point=point, axis=axis, name=f"j{k}")
    if kind == "Universal":
        return mbs.joints.Universal(a, b, point=point, axis_a=axis, axis_b=(0, 0, 1),
                                    name=f"j{k}")
    if kind == "Distance":
        return mbs.joints.Distance(a, b, name=f"j{k}")
    if kind == "Spring":
        return mbs.forces.Spring(a, b, stiffness=data.draw(numbers), name=f"f{k}")
    if kind == "QuarticSpring":
        return mbs.forces.QuarticSpring(a, b, stiffness=10.0, length=data.draw(numbers),
                                        name=f"f{k}")
    return mbs.forces.CentralGravity(data.draw(numbers), center=(0, 0, 10), bodies=[b],
                                     name=f"f{k}")


@SETTINGS
@given(data=st.data())
def test_random_mechanisms_valid_and_invalid(data):
    """Random bodies, joints and forces, some deliberately broken."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    system = mbs.System(gravity=data.draw(st.sampled_from([None, (0, 0, -9.81)])))
    pool = [system.ground]
    for k in range(data.draw(st.integers(1, 4))):
        if data.draw(st.booleans()):
            body = mbs.RigidBody(rng.uniform(0.1, 2), rng.uniform(1, 2, 3), name=f"r{k}")
            body.set_state(position=rng.normal(size=3),
                           rotation=mbs.rotation_from_quaternion(rng.normal(size=4)),
                           angular_velocity=rng.normal(size=3))
        else:
            body = mbs.PointMass(rng.uniform(0.1, 2), name=f"p{k}")
            body.set_state(position=rng.normal(size=3), velocity=rng.normal(size=3))
        system.add(body)
        pool.append(body)
    for k in range(data.draw(st.integers(0, 4))):
        a, b = (pool[data.draw(st.integers(0, len(pool) - 1))] for _ in range(2))
        kind = data.draw(st.sampled_from(["Spherical", "Revolute", "Distance", "Spring",
                                          "QuarticSpring", "CentralGravity", "Universal"]))
        point = data.draw(st.one_of(st.just(tuple(rng.normal(size=3))), vectors))
        axis = data.draw(st.one_of(st.just(tuple(rng.normal(size=3))), vectors))
        element = accepts_or_raises_mbs_error(make_element, kind, a, b, point, axis, k, data)
        if element is not None:
            accepts_or_raises_mbs_error(system.add, element)
    model = accepts_or_raises_mbs_error(system.compile)
    if model is None:
        return
    state = accepts_or_raises_mbs_error(model.initial_state, project=True)
    if state is None:
        return
    solution = accepts_or_raises_mbs_error(mbs.simulate, model, "em", h=0.01, t_end=0.03,
                                           initial_state=state)
    if solution is not None:
        assert np.all(np.isfinite(solution.q))
