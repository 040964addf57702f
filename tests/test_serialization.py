"""JSON save/load of systems: exact round trip and clear errors for bad files."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import mbs
from mbs.serialization import system_from_dict, system_to_dict

EXAMPLES = ["heavy_top", "pendulum_3d", "four_particle", "tethered_satellites", "dzhanibekov",
            "satellite_libration", "double_pendulum", "four_bar", "slider_crank", "chain"]


def example_systems():
    for name in EXAMPLES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        yield pytest.param(module.build, id=name)


def rich_system() -> mbs.System:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    a = system.add(mbs.RigidBody.from_shape("box", lx=1.0, ly=0.1, lz=0.1, mass=2.0, name="a"))
    a.set_state(position=(0.5, 0.0, 0.0), angular_velocity=(0.0, 0.0, 1.0),
                velocity=(0.0, 0.5, 0.0))
    b = system.add(mbs.RigidBody(1.0, [[0.3, 0.01, 0.0], [0.01, 0.4, 0.0], [0.0, 0.0, 0.5]],
                                 name="b"))
    b.set_state(position=(1.5, 0.0, 0.0), rotation=mbs.rotation_about_z(0.2))
    c = system.add(mbs.PointMass(0.5, name="c"))
    c.set_state(position=(2.0, 1.0, 0.0))
    system.add(mbs.joints.Revolute(system.ground, a, point=(0, 0, 0), axis=(0, 0, 1)))
    system.add(mbs.joints.Universal(a, b, point=(1, 0, 0), axis_a=(0, 0, 1), axis_b=(0, 1, 0)))
    system.add(mbs.joints.Distance(b, c))
    system.add(mbs.forces.Spring(system.ground, c, stiffness=5.0, rest_length=0.5))
    system.add(mbs.forces.QuarticSpring(a, c, stiffness=2.0, length=1.0, point_a=(1, 0, 0)))
    system.add(mbs.forces.CentralGravity(3.0, center=(0, 0, -10), bodies=[b]))
    return system


@pytest.mark.filterwarnings("ignore:initial state:UserWarning")
@pytest.mark.parametrize("build", [*example_systems(), pytest.param(rich_system, id="rich")])
def test_round_trip_reproduces_simulation_bitwise(build, tmp_path):
    system = build()
    path = tmp_path / "model.json"
    mbs.save_system(system, path)
    loaded = mbs.load_system(path)
    original_model = system.compile()
    loaded_model = loaded.compile()
    q0, p0 = original_model.initial_state(project=True)
    q1, p1 = loaded_model.initial_state(project=True)
    np.testing.assert_array_equal(q0, q1)
    np.testing.assert_array_equal(p0, p1)
    a = mbs.simulate(original_model, "em", h=0.01, t_end=0.05, project=True)
    b = mbs.simulate(loaded_model, "em", h=0.01, t_end=0.05, project=True)
    np.testing.assert_array_equal(a.q, b.q)
    np.testing.assert_array_equal(a.p, b.p)
    assert system_to_dict(loaded) == system_to_dict(system)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="other"), "not an mbs model"),
    (lambda d: d.update(version=99), "unknown mbs model version"),
    (lambda d: d["bodies"][0].pop("mass"), "missing field 'mass'"),
    (lambda d: d["bodies"][0].update(type="Blob"), "unknown body type"),
    (lambda d: d["joints"][0].update(body_b="nobody"), "unknown body 'nobody'"),
    (lambda d: d["joints"][0].update(type="Weld"), "unknown element type"),
    (lambda d: d["bodies"][0].update(mass=-1.0), "mass must be positive"),
    (lambda d: d["forces"][0].update(dampng=0.5),
     r"forces\[0\]: unknown field 'dampng' for a \w+; its fields are 'type', 'name'"),
    (lambda d: d["bodies"][0].update(inertia_tensor=1.0), "unknown field 'inertia_tensor'"),
])
def test_malformed_files_raise_clear_errors(mutate, message):
    data = json.loads(json.dumps(system_to_dict(rich_system())))
    mutate(data)
    with pytest.raises(mbs.ModelError, match=message):
        system_from_dict(data)


def test_invalid_json_and_callables(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(mbs.ModelError, match="not valid JSON"):
        mbs.load_system(path)
    system = rich_system()
    system.add(mbs.forces.UserPotential([mbs.forces.SquaredDistance(system["a"], system["c"])],
                                        energy=lambda pi: pi[0]))
    with pytest.raises(mbs.ModelError, match="cannot be saved"):
        mbs.save_system(system, tmp_path / "x.json")


def test_json_round_trip_keeps_every_option_and_repeats_runs_bitwise(tmp_path):
    import warnings

    from tests.mechanisms import double_pendulum

    system = double_pendulum()
    system.redundant = "keep"
    path = tmp_path / "pendulum.json"
    mbs.save_system(system, path)
    loaded = mbs.load_system(path)
    assert loaded.redundant == "keep"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.1)
        second = mbs.simulate(loaded.compile(), "em", h=0.01, t_end=0.1)
    np.testing.assert_array_equal(first.q, second.q)
    np.testing.assert_array_equal(first.p, second.p)


def test_axes_computed_by_the_user_survive_saving_bitwise(tmp_path):
    """Axes unit and perpendicular only to round-off (as computed in floating point): the
    joints normalise and orthogonalise them, and loading must not do it once more."""
    cross_a = np.array([-0.9108316466468279, 0.27933905726632696, 0.3039003168017231])
    cross_b = np.array([0.17813429251780924, -0.39814514397063827, 0.899860332585996])
    hinge = (0.345584192064786, 0.8216181435011584, 0.33043707618338714)
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    arm = system.add(mbs.RigidBody(1.0, (0.02, 0.03, 0.03), name="arm"))
    arm.set_state(position=(0.3, 0.2, -0.1))
    tip = system.add(mbs.RigidBody(0.5, (0.01, 0.02, 0.02), name="tip"))
    tip.set_state(position=(0.6, 0.4, -0.3))
    system.add(mbs.joints.Revolute(system.ground, arm, point=(0.0, 0.0, 0.0), axis=hinge))
    system.add(mbs.joints.Universal(arm, tip, point=(0.5, 0.3, -0.2), axis_a=cross_a,
                                    axis_b=cross_b))
    mbs.save_system(system, tmp_path / "arm.json")
    loaded = mbs.load_system(tmp_path / "arm.json")
    runs = [mbs.simulate(s.compile(), "em", h=0.005, t_end=0.5) for s in (system, loaded)]
    assert np.array_equal(runs[0].q, runs[1].q)
