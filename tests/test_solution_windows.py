"""Parts of a run (Solution.window), states between its nodes (Solution.at), and what the
summary and repr say about runs that stopped early.

Tolerances: a window's node and step quantities are the run's rows, so they are compared
bitwise; its works restart at 0 and differ from the run's shifted works by the round-off
of a cumulative sum (1e-12 of works of order 10). The interpolation orders are slopes of
log-log fits over three step sizes, accepted within 0.4 of the documented order."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from functools import partial

import numpy as np
import pytest
from mechanisms import rod_pendulum, slider_crank, thrust_ending_at

import mbs
from mbs.errors import ModelError, ModelTypeError
from mbs.joints import Drive


def crank_angle(t):
    return 5.0 * t + 0.3 * np.sin(3.0 * t)


def crank_rate(t):
    return 5.0 + 0.9 * np.cos(3.0 * t)


def driven_damped_slider_crank(solver: str) -> mbs.Solution:
    """A slider-crank turned by a drive through more than a turn (its angle wraps before
    the windows start) against gravity, a damped crank pin and a load on the slider."""
    system = slider_crank()
    system.add(Drive(system["crank_pivot"], crank_angle, crank_rate, name="motor"))
    system.add(mbs.forces.JointDamper(system["crank_pin"], 0.3, name="pin_damper"))
    system.add(mbs.forces.Load(system["slider"], force=lambda t: (np.sin(t), 0.0, 0.0),
                               name="push"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the planar loop's redundant equations
        model = system.compile()
        state = model.initial_state(project=True,
                                    joint_rates={"crank_pivot": crank_rate(0.0)})
        return mbs.simulate(model, solver, h=0.01, t_end=1.5, initial_state=state)


@pytest.fixture(scope="module", params=["em", "ggl-vi-a", "rattle"])
def driven_run(request) -> mbs.Solution:
    """em (drive work in its steps), ggl-vi-a (efforts centred over neighbouring steps),
    rattle (efforts from two multiplier sets)."""
    return driven_damped_slider_crank(request.param)


def assert_window_repeats_the_run(window: mbs.Solution, full: mbs.Solution, first: int,
                                  last: int) -> None:
    """The stored arrays bitwise; what the model computes from them to round-off: its
    vectorised arithmetic on a window's few states rounds differently from that on the
    whole trajectory (numpy's sums and products over a batch depend on its size and on
    the alignment of its arrays in memory)."""
    nodes, steps = slice(first, last + 1), slice(first, last)
    equal = partial(np.testing.assert_allclose, rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(window.t, full.t[nodes])
    assert window.t.size == last - first + 1 and window.multipliers.shape[0] == last - first
    for name in ("q", "p"):
        np.testing.assert_array_equal(getattr(window, name), getattr(full, name)[nodes])
    for name in ("scheme_velocities", "multipliers", "velocity_multipliers",
                 "enforced_residuals", "step_work"):
        np.testing.assert_array_equal(getattr(window, name), getattr(full, name)[steps])
    np.testing.assert_array_equal(window.stats["newton_iterations"],
                                  full.stats["newton_iterations"][steps])
    for quantity in ("energy", "kinetic_energy", "linear_momentum", "angular_momentum"):
        equal(getattr(window, quantity)(), getattr(full, quantity)()[nodes])
    residuals, full_residuals = window.constraint_residuals(), full.constraint_residuals()
    for key in ("position", "velocity"):
        equal(residuals[key], full_residuals[key][nodes])
    for key in ("enforced_position", "enforced_velocity"):
        equal(residuals[key], full_residuals[key][steps])
    for body in ("crank", "rod", "slider"):
        mine, theirs = window.body(body), full.body(body)
        for name in ("position", "velocity", "rotation", "angular_velocity",
                     "angular_velocity_body"):
            equal(getattr(mine, name), getattr(theirs, name)[nodes])
    for joint in ("crank_pivot", "crank_pin", "wrist_pin"):
        mine, theirs = window.joint(joint), full.joint(joint)
        equal(mine.position, theirs.position[nodes])
        equal(mine.rate, theirs.rate[nodes])
        reaction, full_reaction = window.reaction(joint), full.reaction(joint)
        equal(reaction.t, full_reaction.t[steps])
        equal(reaction.force, full_reaction.force[steps])
        equal(reaction.torque, full_reaction.torque[steps])
    drive, full_drive = window.drive("motor"), full.drive("motor")
    equal(drive.position, full_drive.position[nodes])
    equal(drive.effort, full_drive.effort[steps])
    shifted = full_drive.work[nodes] - full_drive.work[first]
    np.testing.assert_allclose(drive.work, shifted, rtol=0, atol=1e-12)
    for name in ("pin_damper", "push"):
        force, full_force = window.force(name), full.force(name)
        equal(force.t, full_force.t[steps])
        if full_force.effort is not None:
            equal(force.effort, full_force.effort[steps])
        np.testing.assert_allclose(force.work, full_force.work[nodes] - full_force.work[first],
                                   rtol=0, atol=1e-12)
    assert window.work[0] == 0.0
    np.testing.assert_allclose(window.work, full.work[nodes] - full.work[first], rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(window.energy_balance(),
                               full.energy_balance()[nodes] - full.energy_balance()[first],
                               rtol=0, atol=1e-12)


def test_a_window_repeats_the_run_at_its_nodes_and_steps(driven_run):
    full = driven_run
    first, last = full.nodes_at([0.7, 1.2])[0]
    assert abs(full.joint("crank_pivot").position[first]) > np.pi  # a turn before it
    window = full.window(0.7, 1.2)
    assert window.model is full.model and window.solver_properties is full.solver_properties
    assert_window_repeats_the_run(window, full, first, last)
    summary = window.conservation_summary().splitlines()
    assert summary[0].startswith(f"solver {full.stats['solver']}  h = 0.01  steps = "
                                 f"{last - first}  t = [0.7, 1.2]")
    assert f"E0 = {full.energy()[first]:.12g}," in summary[1]
    assert f"W = {window.work[-1]:.6g};" in summary[1]


@pytest.mark.parametrize("t0, t1", [(None, 0.3), (1.2, None), (None, 0.01), (1.49, 1.5),
                                    (0.0, 0.03), (1.46, None), (0.5, 0.5)])
def test_windows_at_the_ends_of_the_run_and_of_few_steps_repeat_it(driven_run, t0, t1):
    """The end steps' efforts are extrapolated from their neighbours (ggl-vi-a): a window
    reads the run's neighbours, so its end steps match the run's, also where it holds
    fewer steps than the extrapolation reads; a window of one node has no steps."""
    full = driven_run
    first = 0 if t0 is None else int(full.nodes_at(t0)[0])
    last = full.t.size - 1 if t1 is None else int(full.nodes_at(t1)[0])
    assert_window_repeats_the_run(full.window(t0, t1), full, first, last)


def test_a_window_of_a_window_is_the_window_of_the_run(driven_run):
    full = driven_run
    inner = full.window(0.3, 1.4).window(0.35, 0.42)
    first, last = full.nodes_at([0.35, 0.42])[0]
    assert_window_repeats_the_run(inner, full, first, last)
    assert inner.stats["first_step"] == first


def test_a_window_saved_copied_or_pickled_is_the_same_window(driven_run, tmp_path):
    """What a window reads of the run beyond its nodes (the crank's turns before it, the
    multipliers a centred average reads) travels with it (the model's drive law is a
    lambda, so a deep copy stands for pickling)."""
    full = driven_run
    first, last = full.nodes_at([1.0, 1.5])[0]
    window = full.window(1.0, 1.5)
    path = tmp_path / "window.npz"
    mbs.save_solution(window, path)
    copies = [mbs.load_solution(path, model=full.model), dataclasses.replace(window),
              copy.deepcopy(window)]
    for duplicate in copies:
        assert_window_repeats_the_run(duplicate, full, first, last)


def test_window_bounds_are_node_times_to_round_off():
    full = driven_damped_slider_crank("em")
    window = full.window(3 * 0.1, 7 * 0.1)  # 0.30000000000000004, 0.7000000000000001
    np.testing.assert_array_equal(window.t[[0, -1]], full.t[[30, 70]])
    window = full.window(0.300001, 0.699999)  # not within 1e-9 of the nodes
    np.testing.assert_array_equal(window.t[[0, -1]], full.t[[31, 69]])


@pytest.mark.parametrize("t0, t1, error, message", [
    (0.5, 0.4, ModelError, r"t0 = 0\.5 is after t1 = 0\.4; give t0 <= t1"),
    (np.nan, 1.0, ModelError, r"t0 \(a time, or None for the run's start\) must be finite"),
    (0.0, np.inf, ModelError, r"t1 \(a time, or None for the run's end\) must be finite"),
    (0.503, 0.507, ModelError,
     r"no node of the run lies in \[0\.503, 0\.507\].*at least one node"),
    (2.0, 3.0, ModelError, r"no node.*nodes span \[0, 1\.5\]"),
    ("start", None, ModelTypeError, r"t0 \(a time, .*\) must be a real number"),
])
def test_a_window_without_nodes_or_with_bad_bounds_is_refused(t0, t1, error, message):
    full = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_end=1.5)
    with pytest.raises(error, match=message):
        full.window(t0, t1)


def test_a_window_keeps_the_refined_steps_and_restarts_that_reach_into_it():
    """Step indices in stats count from stats["first_step"] at the first node, so that the
    steps a window marks as sub-stepped are the run's."""
    rate, h = 3.0, 0.1
    axis = np.array([0.0, 1.0, 0.0])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.6, ly=0.03, lz=0.03,
                                               name="link"))
    centre = np.array([0.3, 0.0, 0.0])
    link.set_state(position=centre, velocity=np.cross(rate * axis, centre),
                   angular_velocity=rate * axis)
    hinge = system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0), axis=axis))
    system.add(Drive(hinge, lambda t: rate * t, rate=lambda t: rate, name="motor"))
    with pytest.warns(RuntimeWarning, match="needed sub-steps"):
        full = mbs.simulate(system.compile(), "em", h=h, t_end=2.0,
                            newton=mbs.solvers.NewtonOptions(max_iterations=3))
    assert len(full.stats["refined_steps"]) > 10
    first = 8
    window = full.window(full.t[first], full.t[-1])
    assert window.stats["first_step"] == first
    assert window.stats["refined_steps"] == [event for event in full.stats["refined_steps"]
                                             if event[0] >= first]
    # restarts redo every later step as sub-steps: one before a window reaches into it
    full.stats["restarts"] = [(first - 3, first - 5, 2), (full.t.size - 2, full.t.size - 3, 4)]
    early = full.window(0.0, full.t[first - 5])  # its last step is first - 6
    assert early.stats["restarts"] == []
    late = full.window(full.t[first], None)
    assert late.stats["restarts"] == full.stats["restarts"]
    middle = full.window(full.t[first], full.t[first + 2])
    assert middle.stats["restarts"] == full.stats["restarts"][:1]
    assert middle.stats["refined_steps"] == [event for event in full.stats["refined_steps"]
                                             if first <= event[0] < first + 2]
    assert (middle.stats["solver"], middle.stats["h"], middle.stats["steps"]) == (
        "em", h, full.stats["steps"])


def test_a_window_of_a_loaded_solution_needs_its_model(tmp_path):
    solution = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_end=0.2)
    path = tmp_path / "run.npz"
    mbs.save_solution(solution, path)
    with pytest.raises(ModelError, match=r"load the file with mbs\.load_solution\(path, "
                                         r"model="):
        mbs.load_solution(path).window(0.0, 0.1)
    window = mbs.load_solution(path, model=solution.model).window(0.05, 0.1)
    np.testing.assert_array_equal(window.q, solution.q[5:11])


# -- interpolation ---------------------------------------------------------------------------
STEPS = (0.02, 0.01, 0.005)


@pytest.fixture(scope="module")
def pendulum_runs() -> tuple[list[mbs.Solution], mbs.Solution]:
    """Runs of lobatto (order 8: its error at these steps is far below the interpolation's)
    at STEPS and a reference at the smallest step / 8, whose nodes hold every quarter step
    of the others."""
    model = rod_pendulum(start=0.8).compile()
    runs = [mbs.simulate(model, "lobatto", h=h, t_end=1.0, stages=5) for h in STEPS]
    return runs, mbs.simulate(model, "lobatto", h=STEPS[-1] / 8, t_end=1.0, stages=5)


def fitted_order(errors) -> float:
    return float(np.polyfit(np.log(STEPS), np.log(errors), 1)[0])


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_interpolated_states_converge_at_fourth_order(pendulum_runs, fraction):
    runs, reference = pendulum_runs
    q_errors, p_errors, position_errors, velocity_errors = [], [], [], []
    for run, h in zip(runs, STEPS):
        times = run.t[:-1] + fraction * h
        index, on_node = reference.nodes_at(times)
        assert on_node.all()
        q, p = run.at(times)
        assert q.shape == p.shape == (times.size, run.model.n)
        q_errors.append(np.abs(q - reference.q[index]).max())
        p_errors.append(np.abs(p - reference.p[index]).max())
        position_errors.append(max(np.abs(run.model.constraints(state, time)).max()
                                   for state, time in zip(q, times)))
        velocity_errors.append(max(np.abs(run.model.velocity_constraints(a, b, time)).max()
                                   for a, b, time in zip(q, p, times)))
    assert fitted_order(q_errors) == pytest.approx(4.0, abs=0.4)
    assert fitted_order(p_errors) == pytest.approx(4.0, abs=0.4)
    assert fitted_order(position_errors) == pytest.approx(4.0, abs=0.4)
    assert fitted_order(velocity_errors) == pytest.approx(4.0, abs=0.4)


def test_interpolation_returns_the_nodes_bitwise_and_refuses_times_outside(pendulum_runs):
    run = pendulum_runs[0][0]
    q, p = run.at(run.t)
    np.testing.assert_array_equal(q, run.q)
    np.testing.assert_array_equal(p, run.p)
    q, p = run.at(0.3)  # 15 * 0.02 = 0.3 up to round-off
    assert q.shape == (run.model.n,)
    np.testing.assert_array_equal(q, run.q[15])
    q, p = run.at([[0.01, run.t[-1]], [0.0, 0.51]])
    assert q.shape == p.shape == (2, 2, run.model.n)
    np.testing.assert_array_equal(p[0, 1], run.p[-1])
    for outside in (-0.001, 1.0 + 1e-6, [0.5, 1.2]):
        with pytest.raises(ModelError, match=r"outside the run's \[0, 1\]; interpolation "
                                             r"does not extrapolate"):
            run.at(outside)
    with pytest.raises(ModelError, match="finite"):
        run.at(np.nan)
    for bad in ("x", 0.1 + 0j):
        with pytest.raises((ModelError, ModelTypeError), match="Solution.at: times must be"):
            run.at(bad)


# -- runs that stopped early -----------------------------------------------------------------
def stopped_run() -> mbs.Solution:
    """A pendulum whose load raises at t = 0.3 of a run planned to t = 1."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))

    system.add(mbs.forces.Load(bob, force=thrust_ending_at(0.3), name="thruster"))
    with pytest.raises(mbs.ForceFunctionError) as error:
        mbs.simulate(system.compile(), "em", h=0.01, t_end=1.0)
    return error.value.solution


def test_the_summary_and_repr_of_a_run_that_stopped_early_say_where():
    partial = stopped_run()
    assert partial.stats["completed"] is False
    assert partial.window(0.2, 0.2).conservation_summary().splitlines()[1].startswith(
        "a single node, node 20 of the run (E0 = ")
    first_line = partial.conservation_summary().splitlines()[0]
    assert first_line.startswith("stopped early: the run ended at t = 0.3 (step 30)  "
                                 "solver em  h = 0.01  steps = 30")
    assert "stopped early at t=0.3 (step 30)" in repr(partial)
    # a window ending before the stop still names where the run stopped
    assert "stopped early: the run ended at t = 0.3 (step 30)" in (
        partial.window(0.0, 0.1).conservation_summary())
    complete = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_end=0.1)
    assert "stopped" not in complete.conservation_summary() + repr(complete)


def test_the_time_range_of_a_run_late_in_time_tells_its_ends_apart():
    solution = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_start=1e6,
                            t_end=1e6 + 0.5)
    assert "t = [1000000, 1000000.5]" in solution.conservation_summary().splitlines()[0]
    assert "t=[1000000, 1000000.5]" in repr(solution)
    short = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_end=0.5)
    assert "t = [0, 0.5]" in short.conservation_summary().splitlines()[0]


# -- loaded solutions ------------------------------------------------------------------------
def test_a_reaction_of_a_solution_loaded_without_its_model_names_the_reason(tmp_path):
    solution = mbs.simulate(rod_pendulum().compile(), "em", h=0.01, t_end=0.1)
    path = tmp_path / "run.npz"
    mbs.save_solution(solution, path)
    with pytest.raises(ModelError) as error:
        mbs.load_solution(path).reaction("rod")
    message = str(error.value)
    assert "loaded from a file without its model" in message
    assert "mbs.load_solution(path, model=" in message
    assert "Lie-group" not in message
    reaction = mbs.load_solution(path, model=solution.model).reaction("rod")
    np.testing.assert_array_equal(reaction.force, solution.reaction("rod").force)
