"""Run-time reliability: refinement of failed steps, Ctrl-C, streaming to disk and resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pendulum_3d
import pytest

import mbs
from mbs.solvers import EnergyMomentum, NewtonOptions
from mbs.streaming import load_stream, read_stream


@pytest.fixture(scope="module")
def pendulum():
    return pendulum_3d.build().compile()


def test_too_large_step_fails_then_refine_completes_and_conserves(pendulum):
    # h = 0.2 with at most 5 Newton iterations: step 1 does not converge.
    h, t_end, steps = 0.2, 20.0, 100
    solver = EnergyMomentum(newton=NewtonOptions(max_iterations=5))
    with pytest.raises(mbs.SolverError) as info:
        mbs.simulate(pendulum, solver, h=h, t_end=t_end, on_failure="raise")
    partial = info.value.solution
    assert 0 < info.value.step < steps and partial.t.size == info.value.step + 1
    assert info.value.time == pytest.approx(h * info.value.step)
    assert np.all(np.isfinite(partial.q))
    assert info.value.residual_norm > 0 and "step size" in info.value.hint

    solver = EnergyMomentum(newton=NewtonOptions(max_iterations=5))
    sol = mbs.simulate(pendulum, solver, h=h, t_end=t_end)  # on_failure="refine" default
    assert sol.stats["completed"] and sol.t.size == steps + 1
    assert sol.stats["refined_steps"], "no step needed refinement"
    np.testing.assert_allclose(sol.t, h * np.arange(steps + 1))
    energy = sol.energy()
    # Relative to the size of the energy terms (kinetic energy reaches ~10 while E = 0.5,
    # so |E(0)| would magnify round-off by 20).
    scale = np.max(np.abs(pendulum.kinetic_energy(sol.p)))
    assert np.max(np.abs(energy - energy[0])) / scale <= 1e-12
    j3 = sol.angular_momentum()[:, 2]
    assert np.max(np.abs(j3 - j3[0])) <= 1e-12
    assert np.max(sol.constraint_residuals()["position"]) <= 1e-12


def test_keyboard_interrupt_keeps_partial_solution(pendulum, monkeypatch):
    calls = {"count": 0}
    original = EnergyMomentum.step

    def interrupted_step(self, t, q, p):
        calls["count"] += 1
        if calls["count"] == 7:
            raise KeyboardInterrupt
        return original(self, t, q, p)

    monkeypatch.setattr(EnergyMomentum, "step", interrupted_step)
    with pytest.raises(KeyboardInterrupt) as info:
        mbs.simulate(pendulum, "em", h=0.05, t_end=1.0)
    assert isinstance(info.value, mbs.SimulationInterrupted)
    assert info.value.solution.t.size == 7 and not info.value.solution.stats["completed"]


@pytest.mark.parametrize("name", ["run_dir", "run.npz"])
def test_stream_round_trip_and_resume_bitwise(pendulum, tmp_path, name):
    reference = mbs.simulate(pendulum, "em", h=0.05, t_end=3.0)
    path = tmp_path / name
    streamed = mbs.simulate(pendulum, "em", h=0.05, t_end=3.0, output=str(path),
                            flush_every=7)
    np.testing.assert_array_equal(streamed.q, reference.q)
    loaded = load_stream(path, pendulum)
    np.testing.assert_array_equal(loaded.q, reference.q)
    np.testing.assert_array_equal(loaded.p, reference.p)
    np.testing.assert_array_equal(loaded.multipliers, reference.multipliers)
    assert loaded.stats["completed"]

    # a run cut short after 2 s, resumed to 3 s, equals the uninterrupted run bitwise
    short = tmp_path / ("short_" + name)
    mbs.simulate(pendulum, "em", h=0.05, t_end=2.0, output=str(short), flush_every=7)
    resumed = mbs.simulate(pendulum, "em", h=0.05, t_end=3.0, resume=str(short))
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


def test_resume_rejects_a_different_solver_or_step(pendulum, tmp_path):
    path = tmp_path / "run"
    mbs.simulate(pendulum, "em", h=0.05, t_end=0.5, output=str(path))
    with pytest.raises(mbs.ModelError, match="h"):
        mbs.simulate(pendulum, "em", h=0.01, t_end=1.0, resume=str(path))
    with pytest.raises(mbs.ModelError, match="solver"):
        mbs.simulate(pendulum, "rattle", h=0.05, t_end=1.0, resume=str(path))
    with pytest.raises(mbs.ModelError, match="not empty"):
        mbs.simulate(pendulum, "em", h=0.05, t_end=0.5, output=str(path))


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {examples!r})
    import mbs, pendulum_3d
    model = pendulum_3d.build().compile()
    mbs.simulate(model, "em", h=0.01, t_end=1000.0, output={output!r}, flush_every=25)
""")


def test_kill_test_sigkill_mid_run_then_resume(pendulum, tmp_path):
    examples = str(Path(pendulum_3d.__file__).resolve().parent)
    output = str(tmp_path / "killed")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(examples=examples, output=output))
    process = subprocess.Popen([sys.executable, str(script)])
    deadline = time.time() + 60
    manifest = tmp_path / "killed" / "manifest.json"
    while time.time() < deadline:
        if manifest.exists() and read_stream(output)["manifest"]["steps_done"] >= 100:
            break
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    data = read_stream(output)
    done = data["manifest"]["steps_done"]
    assert done >= 100 and done % 25 == 0
    assert data["q"].shape == (done + 1, pendulum.n)
    assert not data["manifest"].get("completed", False)

    t_end = 0.01 * (done + 40)
    resumed = mbs.simulate(pendulum, "em", h=0.01, t_end=t_end, resume=output)
    reference = mbs.simulate(pendulum, "em", h=0.01, t_end=t_end)
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


@pytest.mark.parametrize("solver", ["ggl-vi-a", "ggl-vi-s", "rattle", "hbvm"])
def test_resume_is_bitwise_for_every_solver(pendulum, tmp_path, solver):
    reference = mbs.simulate(pendulum, solver, h=0.05, t_end=2.0)
    path = tmp_path / "part"
    mbs.simulate(pendulum, solver, h=0.05, t_end=1.0, output=str(path), flush_every=5)
    resumed = mbs.simulate(pendulum, solver, h=0.05, t_end=2.0, resume=str(path))
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


HEAVY_TOP_SCHEMES = [("em", {}), ("ggl-vi-a", {}), ("ggl-vi-s", {}), ("ggl-vi-b", {}),
                     ("rattle", {}), ("hbvm", {}), ("lobatto", {"stages": 3}),
                     ("em", {"order": 4}), ("vi-conversion", {}),
                     ("em", {"backend": "compiled"})]


@pytest.mark.parametrize("solver, options", HEAVY_TOP_SCHEMES,
                         ids=[f"{s}-{'-'.join(map(str, o.values())) or 'default'}"
                              for s, o in HEAVY_TOP_SCHEMES])
def test_heavy_top_resume_at_a_random_step_is_bitwise(solver, options, tmp_path):
    """Every scheme on the heavy top: a run stopped at a random step (drawn per scheme) and
    resumed from its stream repeats the uninterrupted run bitwise."""
    import heavy_top

    model = heavy_top.build().compile()
    h, steps = 2e-3, 30
    stop = int(np.random.default_rng(len(solver) + len(options)).integers(2, steps - 2))
    reference = mbs.simulate(model, solver, h=h, t_end=steps * h, **options)
    stream = str(tmp_path / "run")
    mbs.simulate(model, solver, h=h, t_end=stop * h, output=stream, flush_every=3, **options)
    resumed = mbs.simulate(model, solver, h=h, t_end=steps * h, resume=stream, **options)
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


@pytest.mark.parametrize("options, fail_after", [({}, 150), ({}, 151), ({}, 152), ({}, 153),
                                                 ({"order": 4}, 150)],
                         ids=["em-150", "em-151", "em-152", "em-153", "em-order-4-150"])
def test_a_run_stopped_by_a_load_inside_a_step_resumes_bitwise(options, fail_after, tmp_path):
    """A load that raises in the middle of a step (at each of the load's evaluations within
    an EM step; in a composition, after some of its sub-steps) stops the run; the stream
    holds the steps before it with the solver state an uninterrupted run had after them, so
    the resumed run repeats that run bitwise."""
    calls = {"count": 0, "fail_after": None}

    def push(t):
        calls["count"] += 1
        if calls["fail_after"] is not None and calls["count"] > calls["fail_after"]:
            raise RuntimeError("the load's data source went away")
        return (0.0, 0.0, 0.5 * np.sin(3.0 * t))

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bar = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.5, ly=0.05, lz=0.05,
                                              name="bar"))
    bar.set_state(position=(0.25, 0.0, 0.0), angular_velocity=(0.0, 0.0, 1.0),
                  velocity=(0.0, 0.25, 0.0))
    system.add(mbs.joints.Spherical(system.ground, bar, point=(0.0, 0.0, 0.0)))
    system.add(mbs.forces.Load(bar, force=push, name="push"))
    model = system.compile()
    reference = mbs.simulate(model, "em", h=0.01, t_end=0.6, **options)
    stream = str(tmp_path / "run")
    calls["count"], calls["fail_after"] = 0, fail_after
    with pytest.raises(mbs.SimulationError) as error:
        mbs.simulate(model, "em", h=0.01, t_end=0.6, output=stream, flush_every=7, **options)
    done = error.value.solution.t.size - 1
    assert 0 < done < 60 and read_stream(stream)["q"].shape[0] == done + 1
    calls["fail_after"] = None
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.6, resume=stream, **options)
    np.testing.assert_array_equal(resumed.q, reference.q)
    np.testing.assert_array_equal(resumed.p, reference.p)


FLUSHES_SUBNORMALS = sys.platform.startswith("linux") and os.uname().machine == "x86_64"


@pytest.mark.skipif(not FLUSHES_SUBNORMALS, reason="subnormals are flushed on Linux x86-64")
@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_components_decaying_to_zero_do_not_become_subnormal(backend):
    """The planar four-bar started from initial_state(project=True, joint_rates=...) carries
    ~1e-17 of round-off out of its plane, which em shrinks geometrically: without flushing,
    ~30000 entries of q, p and the multipliers are subnormal after 1500 steps, and each step
    costs 3 to 7 times as much. The run holds none, and the process's own arithmetic keeps
    its subnormals afterwards."""
    from mbs.gallery import load_example

    example, *_ = load_example("four-bar")
    model = example.build().compile()
    start = model.initial_state(project=True, joint_rates={"pivot_O": 6.0})
    solution = mbs.simulate(model, "em", h=0.002, t_end=3.0, initial_state=start,
                            backend=backend)
    tiny = np.finfo(float).tiny
    for values in (solution.q, solution.p, solution.multipliers):
        assert not np.any((values != 0.0) & (np.abs(values) < tiny))
    assert np.array([tiny])[0] / 4.0 > 0.0
