"""CSV columns of joints, drives, forces and body points; body constants in HDF5 files.

The CSV is written with ``%.17g``: 17 significant digits identify a binary64 number, and
Python's formatting and parsing both round correctly, so every value reads back as the very
number the Solution computed. The CSV comparisons below are therefore exact
(``assert_array_equal``, which also matches NaN with NaN).
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from mechanisms import link

import mbs
from mbs import io

H, T_END = 0.01, 0.3
TIP = np.array([2.0, 0.0, 0.0])
SLIDER_AXIS = np.array([0.0, 0.0, 1.0])


def arm() -> mbs.System:
    """A driven shoulder, an elbow motor (a PD law), a bob on a spherical joint at the tip
    pushed by a constant load, and a spinning slider on a cylindrical joint of its own."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    upper = system.add(link("upper", (0, 0, 0), (1, 0, 0)))
    fore = system.add(link("fore", (1, 0, 0), TIP, mass=0.5))
    bob = system.add(mbs.PointMass(0.3, name="bob"))
    bob.set_state(position=TIP)
    shoulder = system.add(mbs.joints.Revolute(system.ground, upper, point=(0, 0, 0),
                                              axis=(0, 1, 0), name="shoulder"))
    elbow = system.add(mbs.joints.Revolute(upper, fore, point=(1, 0, 0), axis=(0, 1, 0),
                                           name="elbow"))
    system.add(mbs.joints.Spherical(fore, bob, point=TIP, name="wrist"))
    system.add(mbs.joints.Drive(shoulder, position=lambda t: 0.25 * (1.0 - np.cos(2.0 * t)),
                                rate=lambda t: 0.5 * np.sin(2.0 * t), name="shoulder_drive"))
    system.add(mbs.forces.JointTorque(elbow, lambda t, angle, rate: -4.0 * angle - 0.2 * rate,
                                      name="elbow_motor"))
    system.add(mbs.forces.Load(bob, force=(0.0, 0.0, 2.0), name="lift"))
    slider = system.add(mbs.RigidBody.from_shape("cylinder", mass=2.0, radius=0.1,
                                                 length=0.3, name="slider"))
    slider.set_state(position=(0.0, 3.0, 0.0), velocity=0.4 * SLIDER_AXIS,
                     angular_velocity=5.0 * SLIDER_AXIS)
    system.add(mbs.joints.Cylindrical(system.ground, slider, point=(0.0, 3.0, 0.0),
                                      axis=SLIDER_AXIS, name="slide"))
    return system


@pytest.fixture(scope="module")
def model():
    return arm().compile()


@pytest.fixture(scope="module")
def solution(model):
    return mbs.simulate(model, "em", h=H, t_end=T_END)


def read(path) -> tuple[list[str], np.ndarray]:
    """Header (csv-quoted names) and the numbers of a CSV written by save_csv."""
    with open(path, newline="") as handle:
        header = next(csv.reader(handle))
    return header, np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def test_joint_drive_force_and_point_columns_hold_the_accessors_values(solution, tmp_path):
    columns = ["joint:elbow", "joint:slide:displacement", "drive:shoulder_drive",
               "force:elbow_motor", "force:lift", "point:fore@2,0,0.1"]
    header, table = read(io.save_csv(solution, tmp_path / "arm.csv", columns=columns))
    point = "fore@2,0,0.1"
    assert header == (
        ["t", "t_midpoint", "elbow.angle", "elbow.angle_rate", "slide.displacement",
         "slide.displacement_rate", "shoulder_drive.effort", "shoulder_drive.power",
         "shoulder_drive.work", "elbow_motor.effort", "elbow_motor.power", "elbow_motor.work",
         "lift.power", "lift.work"]
        + [f"{point}.{part}_{c}" for part in ("position", "velocity") for c in "xyz"])
    column = dict(zip(header, table.T))
    elbow = solution.joint("elbow")
    slide = solution.joint("slide", "displacement")
    drive = solution.drive("shoulder_drive")
    motor, lift = solution.force("elbow_motor"), solution.force("lift")
    position, velocity = solution.point("fore", (2.0, 0.0, 0.1))
    np.testing.assert_array_equal(column["t"], solution.t)
    np.testing.assert_array_equal(column["elbow.angle"], elbow.position)
    np.testing.assert_array_equal(column["elbow.angle_rate"], elbow.rate)
    np.testing.assert_array_equal(column["slide.displacement"], slide.position)
    np.testing.assert_array_equal(column["slide.displacement_rate"], slide.rate)
    np.testing.assert_array_equal(column["shoulder_drive.work"], drive.work)
    np.testing.assert_array_equal(column["elbow_motor.work"], motor.work)
    np.testing.assert_array_equal(column["lift.work"], lift.work)
    for name, trajectory in (("shoulder_drive", drive), ("elbow_motor", motor),
                             ("lift", lift)):
        np.testing.assert_array_equal(column[f"{name}.power"][:-1], trajectory.power)
    np.testing.assert_array_equal(table[:, 14:17], position)
    np.testing.assert_array_equal(table[:, 17:20], velocity)
    # the slide moves and turns: the columns are not trivially zero
    assert np.ptp(slide.position) > 0.1 and np.ptp(solution.joint("slide").position) > 1.0


def test_efforts_sit_on_the_row_of_their_steps_first_node_with_the_step_midpoint(
        solution, tmp_path):
    """Effort n belongs to step n -> n+1: on row n, timed by t_midpoint; the last node
    begins no step and holds NaN; with every > 1 a row keeps the step that begins at it."""
    drive, motor = solution.drive("shoulder_drive"), solution.force("elbow_motor")
    steps = solution.t.size - 1
    for every in (1, 7):
        header, table = read(io.save_csv(solution, tmp_path / "efforts.csv", every=every,
                                         columns=["drive:shoulder_drive", "force:elbow_motor"]))
        assert header == ["t", "t_midpoint", "shoulder_drive.effort", "shoulder_drive.power",
                          "shoulder_drive.work", "elbow_motor.effort", "elbow_motor.power",
                          "elbow_motor.work"]
        rows = np.append(np.arange(0, steps, every), steps)
        np.testing.assert_array_equal(table[:, 0], solution.t[rows])
        begun = rows[:-1]
        np.testing.assert_array_equal(table[:-1, 1], drive.effort_times[begun])
        np.testing.assert_array_equal(table[:-1, 1], motor.t[begun])
        np.testing.assert_array_equal(table[:-1, 2], drive.effort[begun])
        np.testing.assert_array_equal(table[:-1, 3], drive.power[begun])
        np.testing.assert_array_equal(table[:-1, 5], motor.effort[begun])
        np.testing.assert_array_equal(table[:, 4], drive.work[rows])
        assert (np.all(np.isnan(table[-1, [1, 2, 3, 5, 6]]))
                and not np.any(np.isnan(table[:-1])))
    # node values alone: no t_midpoint column
    header, _ = read(io.save_csv(solution, tmp_path / "nodes.csv", columns=["joint:elbow"]))
    assert header == ["t", "elbow.angle", "elbow.angle_rate"]


def test_reaction_columns_hold_the_reaction_on_the_row_of_its_step(solution, tmp_path):
    """The wrist's force and torque on the bob, per step like the efforts: the columns hold
    what Solution.reaction gives, and the torque on a point mass is zero."""
    header, table = read(io.save_csv(solution, tmp_path / "reactions.csv",
                                     columns=["reaction:elbow", "reaction:wrist"]))
    parts = [f"{part}_{c}" for part in ("force", "torque") for c in "xyz"]
    assert header == (["t", "t_midpoint"] + [f"elbow.{p}" for p in parts]
                      + [f"wrist.{p}" for p in parts])
    for name, columns in (("elbow", table[:-1, 2:8]), ("wrist", table[:-1, 8:14])):
        reaction = solution.reaction(name)
        np.testing.assert_array_equal(columns, np.hstack([reaction.force, reaction.torque]))
    assert np.abs(table[:-1, 8:11]).max() > 1.0 and not np.any(table[:-1, 11:14])
    with pytest.raises(mbs.UnknownNameError, match="reaction:knee"):
        io.save_csv(solution, tmp_path / "bad.csv", columns=["reaction:knee"])


def test_a_cylindrical_joint_gives_its_angle_by_default_as_solution_joint_does(solution,
                                                                             tmp_path):
    header, table = read(io.save_csv(solution, tmp_path / "slide.csv",
                                     columns=["joint:slide", "joint:slide:angle"]))
    assert header == ["t", "slide.angle", "slide.angle_rate", "slide.angle",
                      "slide.angle_rate"]
    slide = solution.joint("slide")
    np.testing.assert_array_equal(table[:, 1], slide.position)
    np.testing.assert_array_equal(table[:, 2], slide.rate)
    np.testing.assert_array_equal(table[:, 1:3], table[:, 3:5])


def test_a_point_of_a_point_mass_is_the_point_mass(solution, tmp_path):
    header, table = read(io.save_csv(solution, tmp_path / "bob.csv",
                                     columns="point:bob@2,0,0"))
    assert header[1] == "bob@2,0,0.position_x"
    np.testing.assert_array_equal(table[:, 1:4], solution.body("bob").position)
    np.testing.assert_array_equal(table[:, 4:7], solution.body("bob").velocity)


@pytest.mark.parametrize("column, message", [
    ("joint_angle:elbow", r"unknown CSV column 'joint_angle:elbow'; the columns are energy, "
                          r".*position, velocity, .*point:BODY@X,Y,Z; joint:JOINT .*"
                          r"drive:DRIVE; force:NAME"),
    ("joint:", "unknown CSV column 'joint:'; the columns are energy, "),
    ("joint:knee", r"CSV column 'joint:knee': no joint 'knee'; joints with an axis "
                   r"coordinate: shoulder, elbow, slide"),
    ("joint:wrist", r"CSV column 'joint:wrist': joint 'wrist' has no axis coordinate"),
    ("joint:elbow:displacement", r"'joint:elbow:displacement': joint 'elbow' has no "
                                 r"'displacement' coordinate; it has angle"),
    ("drive:elbow_motor", r"CSV column 'drive:elbow_motor': no drive 'elbow_motor'; "
                          r"drives: shoulder_drive"),
    ("force:shoulder_drive", r"'shoulder_drive' is a drive; its effort and work are the "
                             r"column 'drive:shoulder_drive'"),
    ("force:push", r"CSV column 'force:push': no load, damper, actuator or torsion spring "
                   r"'push'; this model's: elbow_motor, lift"),
    ("point:fore", r"CSV column 'point:fore': give a body point as point:BODY@X,Y,Z"),
    ("point:fore@1,2", r"give a body point as point:BODY@X,Y,Z"),
    ("point:fore@1,2,x", r"give a body point as point:BODY@X,Y,Z"),
    ("point:fore@1,2,nan", r"CSV column 'point:fore@1,2,nan': Solution.point: at must be 3 "
                           r"finite"),
    ("point:hand@1,2,3", r"CSV column 'point:hand@1,2,3': no body named 'hand'; bodies: "
                         r"\['upper', 'fore', 'bob', 'slider'\]"),
    ("position:hand", r"CSV column 'position:hand': no body named 'hand'"),
])
def test_bad_columns_are_refused_naming_the_valid_ones(solution, tmp_path, column, message):
    with pytest.raises(mbs.ModelError, match=message):
        io.save_csv(solution, tmp_path / "bad.csv", columns=["energy", column])
    assert not (tmp_path / "bad.csv").exists()


def test_unknown_names_are_key_errors_and_columns_must_be_strings(solution, tmp_path):
    with pytest.raises(KeyError):
        io.save_csv(solution, tmp_path / "bad.csv", columns=["drive:knee"])
    with pytest.raises(mbs.ModelTypeError, match=r"CSV columns are names \(strings\), got "
                                                 r"\('joint', 'elbow'\)"):
        io.save_csv(solution, tmp_path / "bad.csv", columns=[("joint", "elbow")])


# -- HDF5 -------------------------------------------------------------------------------------
def test_hdf5_bodies_carry_kind_mass_inertia_and_coordinates(model, solution, tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(io.save_hdf5(solution, tmp_path / "arm.h5"), "r") as data:
        for body in model.bodies:
            attrs = data[f"bodies/{body.name}"].attrs
            assert attrs["kind"] == body.kind
            assert attrs["mass"] == body.mass
            assert tuple(attrs["coordinates"]) == (body.coordinates.start,
                                                   body.coordinates.stop)
            if body.kind == "rigid":
                np.testing.assert_array_equal(attrs["inertia"], body.inertia)
                np.testing.assert_array_equal(attrs["euler_tensor"], body.euler_tensor)
            else:
                assert "inertia" not in attrs and "euler_tensor" not in attrs
    assert {body.kind for body in model.bodies} == {"rigid", "point"}


def _kinetic_energy_from_file(data) -> tuple[np.ndarray, np.ndarray]:
    """T from the file alone, two ways (see mbs.hdf5): from the momenta with the mass and
    Euler tensor, and from the body velocities with the mass and inertia."""
    p = data["p"][()]
    from_momenta = np.zeros(p.shape[0])
    from_velocities = np.zeros(p.shape[0])
    for name in json.loads(data.attrs["bodies"]):
        group = data[f"bodies/{name}"]
        mass = group.attrs["mass"]
        start, stop = group.attrs["coordinates"]
        momenta = p[:, start:stop]
        velocity = group["velocity"][()]
        from_momenta += 0.5 * np.einsum("ni,ni->n", momenta[:, :3], momenta[:, :3]) / mass
        from_velocities += 0.5 * mass * np.einsum("ni,ni->n", velocity, velocity)
        if group.attrs["kind"] == "rigid":
            directors = momenta[:, 3:].reshape(-1, 3, 3)  # [node, director i, component]
            inverse = np.linalg.inv(group.attrs["euler_tensor"])
            from_momenta += 0.5 * np.einsum("ij,nic,njc->n", inverse, directors, directors)
            omega = group["angular_velocity_body"][()]
            from_velocities += 0.5 * np.einsum("ni,ij,nj->n", omega, group.attrs["inertia"],
                                               omega)
    return from_momenta, from_velocities


@pytest.mark.parametrize("solver", ["em", "ggl-vi-s"])
def test_the_kinetic_energy_recomputed_from_the_file_is_the_solutions(model, solver,
                                                                      tmp_path):
    """From the momenta: to round-off for every scheme. From the velocities: to round-off
    where the scheme keeps the velocity constraints at the nodes (em), within O(h^2)
    otherwise (ggl-vi-s)."""
    h5py = pytest.importorskip("h5py")
    run = mbs.simulate(model, solver, h=H, t_end=T_END)
    with h5py.File(io.save_hdf5(run, tmp_path / "arm.h5"), "r") as data:
        from_momenta, from_velocities = _kinetic_energy_from_file(data)
    kinetic = run.kinetic_energy()
    roundoff = 64 * np.finfo(float).eps * np.max(kinetic)
    np.testing.assert_allclose(from_momenta, kinetic, rtol=0, atol=roundoff)
    if solver == "em":
        np.testing.assert_allclose(from_velocities, kinetic, rtol=0, atol=roundoff)
        return
    gaps = [np.max(np.abs(from_velocities - kinetic))]
    finer = mbs.simulate(model, solver, h=H / 2, t_end=T_END)
    with h5py.File(io.save_hdf5(finer, tmp_path / "finer.h5"), "r") as data:
        gaps.append(np.max(np.abs(_kinetic_energy_from_file(data)[1]
                                  - finer.kinetic_energy())))
    assert gaps[1] > roundoff
    assert np.log2(gaps[0] / gaps[1]) > 1.5  # O(h^2) or better (3 over this short run)

