"""Streams stay exact when runs fail, are interrupted or continue a packed file: every step is
written once, the readers and the writer agree on which copy of a stream is current, and a
resumed run repeats the uninterrupted one bitwise."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

import numpy as np
import pytest

import mbs
from mbs.forces import JointTorque
from mbs.run_context import interrupts_deferred
from mbs.streaming import read_last_state


class Torque:
    """A motor torque 2 sin(3t) whose sensor fails after ``fails_after`` (None: never)."""

    def __init__(self):
        self.fails_after = None

    def __call__(self, t, angle, rate):
        if self.fails_after is not None and t > self.fails_after:
            raise RuntimeError("sensor offline")
        return 2.0 * np.sin(3.0 * t)


def flywheel(torque) -> mbs.Model:
    system = mbs.System()
    wheel = system.add(mbs.RigidBody.from_shape("cylinder", mass=5.0, radius=0.2, length=0.05,
                                                name="wheel"))
    axle = system.add(mbs.joints.Revolute(system.ground, wheel, point=(0, 0, 0), axis=(0, 0, 1),
                                          damping=0.02, name="axle"))
    system.add(JointTorque(axle, torque, name="motor"))
    return system.compile()


def test_a_packed_stream_continued_and_stopped_is_read_and_resumed_from_its_newest_steps(
        tmp_path):
    """A packed stream resumed to t = 3 fails at t = 2.005: its newer steps live in
    <name>.partial beside the packed file of the first run. Every reader takes them, and the
    next resume continues from them: the final file is the uninterrupted run."""
    torque = Torque()
    model = flywheel(torque)
    reference = mbs.simulate(model, "em", h=0.01, t_end=3.0)
    path = str(tmp_path / "run.npz")
    mbs.simulate(model, "em", h=0.01, t_end=1.0, output=path, flush_every=10)
    torque.fails_after = 2.005
    with pytest.raises(mbs.SimulationError, match="sensor offline") as failure:
        mbs.simulate(model, "em", h=0.01, t_end=3.0, resume=path, flush_every=10)
    assert failure.value.solution.stats["first_step"] == 0
    assert failure.value.solution.stats["steps"] == 201
    assert read_last_state(path)[0] == 201
    assert mbs.load_solution(path, model).stats["steps"] == 201
    torque.fails_after = None
    resumed = mbs.simulate(model, "em", h=0.01, t_end=3.0, resume=path, flush_every=10)
    assert np.array_equal(resumed.q, reference.q)
    final = mbs.load_solution(path, model)
    assert final.stats["completed"] and np.array_equal(final.q, reference.q)
    assert not pathlib.Path(path + ".partial").exists()


def test_a_failure_after_a_flush_is_recorded_writes_no_step_twice(tmp_path, monkeypatch):
    """A flush counts its steps in the manifest, then removes the previous checkpoint; an
    interrupt there (or a removal that fails) must not write the same steps again."""
    model = flywheel(Torque())
    reference = mbs.simulate(model, "em", h=0.01, t_end=0.6)
    removals = []
    unlink = pathlib.Path.unlink

    def interrupted_removal(self, missing_ok=False):
        unlink(self, missing_ok=missing_ok)
        if self.name.startswith("checkpoint_"):
            removals.append(self.name)
            if len(removals) == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(pathlib.Path, "unlink", interrupted_removal)
    path = tmp_path / "run"
    with pytest.raises(mbs.SimulationInterrupted, match="holds the 40 accepted steps"):
        mbs.simulate(model, "em", h=0.01, t_end=0.6, output=str(path), flush_every=10)
    monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    assert json.loads((path / "manifest.json").read_text())["steps_done"] == 40
    assert np.array_equal(mbs.load_solution(path, model).q, reference.q[:41])
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.6, resume=str(path))
    assert np.array_equal(resumed.q, reference.q)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to the own process")
def test_ctrl_c_waits_for_a_block_that_must_complete():
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    received = []
    try:  # a process that ignores SIGINT, or handles it itself, keeps doing so
        for handler in (signal.SIG_IGN, lambda number, frame: received.append(number)):
            signal.signal(signal.SIGINT, handler)
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert received == [signal.SIGINT]


def test_a_run_too_long_to_read_back_hands_over_its_last_block(tmp_path, monkeypatch):
    """When the flushed steps are too many to read back, the solution holds the last block
    of steps, also when the run ends on a flush, and the final checks see them."""
    simulate_module = sys.modules["mbs.simulate"]
    monkeypatch.setattr(simulate_module, "MAX_READBACK_BYTES", 1000)
    model = flywheel(Torque())
    with pytest.warns(UserWarning, match="the solution holds the last 10"):
        solution = mbs.simulate(model, "em", h=0.01, t_end=0.4, output=str(tmp_path / "run"),
                                flush_every=10)
    assert solution.stats["first_step"] == 30 and solution.t.size == 11
    assert solution.t[-1] == pytest.approx(0.4)


def test_a_damaged_initial_state_is_refused_before_the_run_continues(tmp_path):
    model = flywheel(Torque())
    path = tmp_path / "run"
    mbs.simulate(model, "em", h=0.01, t_end=0.2, output=str(path), flush_every=10)
    initial = path / "initial.npz"
    data = bytearray(initial.read_bytes())
    data[len(data) // 2] ^= 0x10
    initial.write_bytes(bytes(data))
    with pytest.raises(mbs.ModelError, match="initial.npz: its contents do not match"):
        mbs.simulate(model, "em", h=0.01, t_end=0.4, resume=str(path))
    assert json.loads((path / "manifest.json").read_text())["steps_done"] == 20


def test_an_upper_case_npz_name_is_packed_and_step_counts_are_named(tmp_path):
    model = flywheel(Torque())
    path = tmp_path / "RUN.NPZ"
    mbs.simulate(model, "em", h=0.01, t_end=0.1, output=str(path))
    assert path.is_file() and mbs.load_solution(path, model).t.size == 11
    with pytest.raises(mbs.ModelError, match=r"steps, more than the 1.1e\+12 a run takes"):
        mbs.simulate(model, "em", h=1e-9, t_end=2000.0, output=str(tmp_path / "long"))


def test_a_failure_that_a_restart_before_the_resume_point_would_cure_says_so(tmp_path):
    """The double pendulum with GGL-VI A at h = 0.2: step 29 fails even as sub-steps and is
    passed by redoing steps 27 and 28 with finer sub-steps. Resumed at step 28, the run
    cannot redo step 27 (it is in the stream): the error says that steps before 28 were not
    redone."""
    import double_pendulum

    model = double_pendulum.build().compile()
    path = str(tmp_path / "run")
    mbs.simulate(model, "ggl-vi-a", h=0.2, t_end=5.6, output=path, flush_every=30)
    with pytest.raises(mbs.SolverError, match=r"step 29 .* with the steps from 28 redone "
                                              r"\(steps before it are in the stream"):
        mbs.simulate(model, "ggl-vi-a", h=0.2, t_end=12.0, resume=path, flush_every=30)


def test_refinements_and_restarts_are_kept_with_the_stream(tmp_path):
    """The double pendulum with GGL-VI A at h = 0.2 restarts at steps 22 and 29. A run
    stopped at step 25 and resumed, and the stream read back, report the restarts and
    refinements of the whole run, as the uninterrupted run does."""
    import double_pendulum

    model = double_pendulum.build().compile()
    whole = mbs.simulate(model, "ggl-vi-a", h=0.2, t_end=12.0, output=str(tmp_path / "whole"),
                         flush_every=30)
    assert len(whole.stats["restarts"]) >= 2 and whole.stats["restarts"][0][0] < 25
    path = str(tmp_path / "run.npz")
    mbs.simulate(model, "ggl-vi-a", h=0.2, t_end=5.0, output=path, flush_every=30)
    resumed = mbs.simulate(model, "ggl-vi-a", h=0.2, t_end=12.0, resume=path, flush_every=30)
    assert np.array_equal(resumed.q, whole.q)
    for solution in (resumed, mbs.load_solution(path, model),
                     mbs.load_solution(tmp_path / "whole", model)):
        assert solution.stats["restarts"] == whole.stats["restarts"]
        assert solution.stats["refined_steps"] == whole.stats["refined_steps"]


def test_packing_a_stream_reads_one_chunk_at_a_time(tmp_path, monkeypatch):
    """A run streamed to an .npz packs its chunks into the file chunk by chunk: the packed
    file reads back as the directory stream does, and the packing's memory is that of a
    chunk, not of the stream (20 MiB here, 100-step chunks of 1 MiB; the solution's own
    read-back is switched off, as for a run beyond 2 GiB)."""
    import tracemalloc

    from mbs.streaming import read_stream

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    for i in range(150):
        system.add(mbs.PointMass(1.0, name=f"m{i}")).set_state(position=(i, 0.0, 0.0),
                                                                velocity=(0.0, 1.0, 0.0))
    model = system.compile()
    monkeypatch.setattr(sys.modules["mbs.simulate"], "MAX_READBACK_BYTES", 1)
    options = dict(h=0.01, t_end=20.0, flush_every=100)
    with pytest.warns(UserWarning, match="the solution holds the last"):
        mbs.simulate(model, "em", output=str(tmp_path / "run"), **options)
    tracemalloc.start()
    try:
        with pytest.warns(UserWarning, match="the solution holds the last"):
            mbs.simulate(model, "em", output=str(tmp_path / "run.npz"), **options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    directory, packed = read_stream(tmp_path / "run"), read_stream(tmp_path / "run.npz")
    stream_bytes = sum(array.nbytes for name, array in directory.items() if name != "manifest")
    assert stream_bytes > 20 * 2**20 and peak < stream_bytes / 3
    for name, array in directory.items():
        if name != "manifest":
            assert array.dtype == packed[name].dtype and np.array_equal(array, packed[name])


def test_a_stream_directory_with_an_npz_name_resumes(tmp_path):
    """A directory stream whose name ends in .NPZ (a stream renamed, or written by a program
    that names streams so) is the stream itself, not a packed file's <name>.partial."""
    model = flywheel(Torque())
    reference = mbs.simulate(model, "em", h=0.01, t_end=0.4)
    mbs.simulate(model, "em", h=0.01, t_end=0.2, output=str(tmp_path / "run"))
    (tmp_path / "run").rename(tmp_path / "run.NPZ")
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.4, resume=str(tmp_path / "run.NPZ"))
    assert np.array_equal(resumed.q, reference.q)


def test_a_second_ctrl_c_while_the_stream_is_read_back_keeps_the_window(tmp_path,
                                                                        monkeypatch):
    """Ctrl-C (here from a load's function) writes the steps not yet flushed first; a second
    one while the stream is read back for error.solution leaves the window in memory
    instead of escaping without any solution."""
    class Interrupt:
        def __call__(self, t):
            if t > 0.25:
                raise KeyboardInterrupt
            return (0.0, 0.0, 0.0)

    system = mbs.System()
    ball = system.add(mbs.PointMass(1.0, name="ball"))
    ball.set_state(velocity=(1.0, 0.0, 0.0))
    system.add(mbs.forces.Load(ball, force=Interrupt(), name="push"))
    model = system.compile()

    def interrupted_read(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["mbs.simulate"], "read_stream", interrupted_read)
    path = tmp_path / "run"
    with pytest.warns(UserWarning, match="reading them was interrupted"), \
            pytest.raises(mbs.SimulationInterrupted) as stopped:
        mbs.simulate(model, "em", h=0.01, t_end=1.0, output=str(path), flush_every=10)
    monkeypatch.undo()
    assert stopped.value.solution.stats["first_step"] == 20
    done = stopped.value.solution.stats["steps"]
    assert json.loads((path / "manifest.json").read_text())["steps_done"] == done
