"""Output streams of simulate(output=...): what they refuse and who reads them.

A stream is continued only by the scheme, scheme options and model that wrote it; an existing
result file is never overwritten; load_solution and load_stream read the streams of every
scheme, composed ones included."""

from __future__ import annotations

import heavy_top
import numpy as np
import pytest
from mechanisms import rod_pendulum

import mbs
from mbs.backends import compiled
from mbs.errors import ModelError
from mbs.streaming import load_stream


def pendulum(gravity: float = -9.81, start: float = 1.0) -> mbs.Model:
    return rod_pendulum(start, gravity).compile()


@pytest.mark.parametrize("options", [{"solver": "em", "order": 4},
                                     {"solver": "rattle", "order": 6}])
def test_streams_of_composed_schemes_read_back(tmp_path, options):
    model = pendulum()
    run = mbs.simulate(model, h=0.01, t_end=0.1, output=str(tmp_path / "run"), **options)
    for read in (load_stream(tmp_path / "run", model),
                 mbs.load_solution(tmp_path / "run", model)):
        np.testing.assert_array_equal(read.q, run.q)
        assert read.solver_properties == run.solver_properties


def test_load_solution_reads_packed_streams_and_says_what_a_stream_needs(tmp_path):
    model = pendulum()
    run = mbs.simulate(model, "em", h=0.01, t_end=0.1, output=str(tmp_path / "run.npz"))
    np.testing.assert_array_equal(mbs.load_solution(tmp_path / "run.npz", model).p, run.p)
    with pytest.raises(ModelError, match=r"stream written by simulate\(output=...\).*model"):
        mbs.load_solution(tmp_path / "run.npz")


def test_an_existing_result_file_is_not_overwritten(tmp_path):
    model = pendulum()
    saved = mbs.simulate(model, "em", h=0.01, t_end=0.1)
    path = mbs.save_solution(saved, tmp_path / "precious.npz")
    before = path.read_bytes()
    with pytest.raises(ModelError, match="exists; remove it"):
        mbs.simulate(model, "em", h=0.02, t_end=0.1, output=str(path))
    assert path.read_bytes() == before


def test_resume_refuses_other_scheme_options(tmp_path):
    model = pendulum()
    mbs.simulate(model, "lobatto", stages=3, h=0.01, t_end=0.1, output=str(tmp_path / "run"))
    with pytest.raises(ModelError, match="other values of stages"):
        mbs.simulate(model, "lobatto", stages=4, h=0.01, t_end=0.2,
                     resume=str(tmp_path / "run"))


def test_resume_refuses_another_model_and_accepts_the_same_one_rebuilt(tmp_path):
    path = str(tmp_path / "run")
    mbs.simulate(pendulum(), "em", h=0.01, t_end=0.1, output=path)
    with pytest.raises(ModelError, match="model differs"):
        mbs.simulate(pendulum(gravity=-1.62), "em", h=0.01, t_end=0.2, resume=path)
    # the same mechanism built with another initial state: the stream's state is continued
    resumed = mbs.simulate(pendulum(start=-1.0), "em", h=0.01, t_end=0.2, resume=path)
    whole = mbs.simulate(pendulum(), "em", h=0.01, t_end=0.2)
    np.testing.assert_array_equal(resumed.q, whole.q)


def damped_pushed_disc(damping: float = 0.3, torque: float = 1.0) -> mbs.Model:
    system = mbs.System()
    disc = system.add(mbs.RigidBody.from_shape("cylinder", mass=3.0, radius=0.4, length=0.1,
                                               name="disc"))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="hinge"))
    system.add(mbs.forces.JointDamper(hinge, damping))
    system.add(mbs.forces.JointTorque(hinge, torque))
    return system.compile()


@pytest.mark.parametrize("other", [{"damping": 5.0}, {"torque": 20.0}])
def test_another_damper_or_load_is_refused_naming_the_applied_forces(tmp_path, other):
    """Loads, dampers and actuators do work on the run: a stream continued, or a file read,
    with other ones would give another motion or other work under the run's name."""
    stream, saved = str(tmp_path / "run"), tmp_path / "run.npz"
    run = mbs.simulate(damped_pushed_disc(), "em", h=0.01, t_end=0.1, output=stream)
    mbs.save_solution(run, saved)
    changed = damped_pushed_disc(**other)
    with pytest.raises(ModelError, match=r"model differs .*\(applied forces\)"):
        mbs.simulate(changed, "em", h=0.01, t_end=0.2, resume=stream)
    for path in (stream, saved):
        with pytest.raises(ModelError, match="applied forces"):
            mbs.load_solution(path, changed)
    resumed = mbs.simulate(damped_pushed_disc(), "em", h=0.01, t_end=0.2, resume=stream)
    whole = mbs.simulate(damped_pushed_disc(), "em", h=0.01, t_end=0.2)
    np.testing.assert_array_equal(resumed.q, whole.q)


def driven_disc() -> mbs.Model:
    """A disc turned by a drive against a joint damper: its energy changes only by work."""
    system = mbs.System()
    disc = system.add(mbs.RigidBody.from_shape("cylinder", mass=3.0, radius=0.4, length=0.1,
                                               name="disc"))
    disc.set_state(angular_velocity=(0.0, 0.0, 1.0))
    hinge = system.add(mbs.joints.Revolute(system.ground, disc, point=(0, 0, 0),
                                           axis=(0, 0, 1), name="hinge"))
    system.add(mbs.forces.JointDamper(hinge, 0.3))
    system.add(mbs.joints.Drive(hinge, lambda t: t + 0.5 * t**2, lambda t: 1.0 + t,
                                name="motor"))
    return system.compile()


@pytest.mark.parametrize("scheme", ["em", "rattle", "hbvm"])
def test_files_keep_the_work_and_reactions_of_drives(tmp_path, scheme):
    """A saved run read without its model, and a stream read with it, have the run's work,
    energy balance and drive reaction (each scheme derives them differently from its
    multipliers, so how is part of the file)."""
    model = driven_disc()
    run = mbs.simulate(model, scheme, h=0.01, t_end=0.2, output=str(tmp_path / "stream"))
    saved = mbs.load_solution(mbs.save_solution(run, tmp_path / "run.npz"))
    streamed = mbs.load_solution(tmp_path / "stream", model)
    for loaded in (saved, streamed):
        np.testing.assert_array_equal(loaded.work, run.work)
        np.testing.assert_array_equal(loaded.energy_balance(), run.energy_balance())
        np.testing.assert_array_equal(loaded.drive("motor").effort, run.drive("motor").effort)


@pytest.mark.skipif(not compiled.available(), reason="numba not installed")
@pytest.mark.parametrize("scheme", ["em", "ggl-vi-a"])
def test_compiled_blocks_stream_and_resume_as_the_run_in_memory(tmp_path, scheme):
    """The compiled backend advances blocks of steps also when streaming (each ending at a
    flush, here every 37 steps): the stream, its resumed continuation and the stream read
    back repeat the in-memory run bitwise, multipliers and iteration counts included."""
    model = heavy_top.build().compile()
    options = {"h": 0.002, "backend": "compiled"}
    whole = mbs.simulate(model, scheme, t_end=1.0, **options)
    streamed = mbs.simulate(model, scheme, t_end=1.0, output=str(tmp_path / "all"),
                            flush_every=37, **options)
    mbs.simulate(model, scheme, t_end=0.5, output=str(tmp_path / "half"), flush_every=37,
                 **options)
    resumed = mbs.simulate(model, scheme, t_end=1.0, resume=str(tmp_path / "half"),
                           flush_every=37, **options)
    read = mbs.load_solution(tmp_path / "half", model)
    for run in (streamed, resumed, read):
        for name in ("q", "p", "multipliers", "velocity_multipliers", "enforced_residuals"):
            np.testing.assert_array_equal(getattr(run, name), getattr(whole, name))
        np.testing.assert_array_equal(run.stats["newton_iterations"],
                                      whole.stats["newton_iterations"])



def test_a_load_given_as_a_callable_object_with_its_own_state_resumes(tmp_path):
    """A callable object counts as a function, like a plain one: its attributes (here a
    call counter, which the run changes) are the user's state, not model parameters."""

    class Thrust:
        def __init__(self):
            self.evaluations = 0

        def __call__(self, t):
            self.evaluations += 1
            return (0.0, 0.0, 0.5 * np.sin(3.0 * t))

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(0.01, 0.02, 0.02), name="body"))
    body.set_state(position=(0.25, 0.0, 0.0))
    system.add(mbs.joints.Spherical(system.ground, body, point=(0.0, 0.0, 0.0)))
    thrust = Thrust()
    system.add(mbs.forces.Load(body, force=thrust, name="thrust"))
    model = system.compile()
    path = str(tmp_path / "run")
    mbs.simulate(model, "em", h=0.01, t_end=0.1, output=path)
    assert thrust.evaluations > 0
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.2, resume=path)
    whole = mbs.simulate(model, "em", h=0.01, t_end=0.2)
    np.testing.assert_array_equal(resumed.q, whole.q)
