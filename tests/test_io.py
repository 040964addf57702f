"""NPZ round trip, CSV of observables and the ParaView VTK time series."""

from __future__ import annotations

import numpy as np
import pytest

import mbs
from mbs import io


@pytest.fixture(scope="module")
def top():
    import heavy_top

    model = heavy_top.build().compile()
    return model, mbs.simulate(model, "em", h=0.01, t_end=0.1)


def test_npz_round_trip_is_exact(tmp_path, top):
    model, solution = top
    path = mbs.save_solution(solution, tmp_path / "run.npz")
    loaded = mbs.load_solution(path)
    for name in ("t", "q", "p", "scheme_velocities", "multipliers", "velocity_multipliers",
                 "enforced_residuals"):
        assert np.array_equal(getattr(loaded, name), getattr(solution, name)), name
    assert np.array_equal(loaded.energy(), solution.energy())
    assert np.array_equal(loaded.angular_momentum(), solution.angular_momentum())
    assert np.array_equal(loaded.linear_momentum(), solution.linear_momentum())
    assert np.array_equal(loaded.stats["newton_iterations"], solution.stats["newton_iterations"])
    assert loaded.stats["solver"] == "em" and loaded.stats["h"] == 0.01
    assert loaded.solver_properties == solution.solver_properties
    for key, value in solution.constraint_residuals().items():
        assert np.array_equal(loaded.constraint_residuals()[key], value)
    original, again = solution.body("top"), loaded.body("top")
    assert np.array_equal(original.rotation, again.rotation)
    assert np.array_equal(original.angular_velocity, again.angular_velocity)
    assert [b.name for b in loaded.model.bodies] == ["top"]
    assert loaded.model.coordinates("top") == slice(0, 12)
    assert loaded.model.joints[0].type == "Spherical"
    assert loaded.conservation_summary() == solution.conservation_summary()


def test_load_with_the_model_and_errors(tmp_path, top):
    model, solution = top
    path = io.save_solution(solution, tmp_path / "run")  # suffix added
    assert path.suffix == ".npz"
    full = io.load_solution(path, model=model)
    assert type(full) is mbs.Solution and full.model is model
    assert np.array_equal(full.energy(), solution.energy())
    import pendulum_3d

    with pytest.raises(mbs.ModelError, match="does not match"):
        io.load_solution(path, model=pendulum_3d.build().compile())
    loaded = io.load_solution(path)
    with pytest.raises(mbs.ModelError, match="own nodes"):
        loaded.model.potential_energy(solution.q[0] + 1.0)
    with pytest.raises(FileNotFoundError):
        io.load_solution(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(mbs.ModelError, match="not an mbs solution"):
        io.load_solution(tmp_path / "other.npz")


def test_csv_of_observables(tmp_path, top):
    _, solution = top
    path = io.save_csv(solution, tmp_path / "run.csv",
                       columns=["energy", "angular_momentum", "position:top", "directors:top"],
                       every=2)
    header = path.read_text().splitlines()[0].split(",")
    assert header[:5] == ["t", "energy", "angular_momentum_x", "angular_momentum_y",
                          "angular_momentum_z"]
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    assert table.shape == (6, 1 + 1 + 3 + 3 + 9)
    assert np.array_equal(table[:, 0], solution.t[::2])
    assert np.array_equal(table[:, 1], solution.energy()[::2])  # %.17g is exact
    with pytest.raises(mbs.ModelError, match="unknown CSV column"):
        io.save_csv(solution, tmp_path / "bad.csv", columns=["nonsense"])
    path = io.save_csv(solution, tmp_path / "rotation.csv",
                       columns=["angular_velocity_body:top", "quaternion:top"])
    header = path.read_text().splitlines()[0].split(",")
    assert header[1:] == ["top.angular_velocity_body_x", "top.angular_velocity_body_y",
                          "top.angular_velocity_body_z", "top.quaternion_w",
                          "top.quaternion_x", "top.quaternion_y", "top.quaternion_z"]
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    trajectory = solution.body("top")
    assert np.array_equal(table[:, 1:4], trajectory.angular_velocity_body)
    assert np.array_equal(table[:, 4:], trajectory.quaternions())


def test_csv_ends_with_the_last_node_and_takes_one_column_by_name(tmp_path, top):
    _, solution = top
    path = io.save_csv(solution, tmp_path / "run.csv", columns="energy", every=3)
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    assert np.array_equal(table[:, 0], solution.t[[0, 3, 6, 9, 10]])
    assert np.array_equal(table[:, 1], solution.energy()[[0, 3, 6, 9, 10]])


def test_a_model_with_other_parameters_is_refused(tmp_path, top):
    """Same bodies and sizes, another mass or gravity: the stored model digest differs."""
    import heavy_top

    _, solution = top
    path = mbs.save_solution(solution, tmp_path / "run.npz")
    heavier, weaker = heavy_top.build(), heavy_top.build()
    heavier["top"].mass *= 10.0
    weaker.gravity = np.array([0.0, 0.0, -1.0])
    # the gravity potential m g . x changes with either
    for system, parts in ((heavier, "masses, potentials"), (weaker, "gravity, potentials")):
        with pytest.raises(mbs.ModelError, match=f"does not match the saved one: its {parts} "
                                                 f"differ"):
            mbs.load_solution(path, model=system.compile())


def test_vtk_time_series_opens_in_pyvista(tmp_path, top):
    pv = pytest.importorskip("pyvista")
    _, solution = top
    path = io.save_vtk(mbs.load_solution(mbs.save_solution(solution, tmp_path / "r.npz")),
                       tmp_path / "vtk" / "top.pvd", frames=3)
    assert path.suffix == ".pvd" and len(list((tmp_path / "vtk" / "top_frames").glob("*.vtp"))) == 3
    dataset = pv.read(path)
    assert dataset.n_points > 0 if not isinstance(dataset, pv.MultiBlock) else \
        dataset[0].n_points > 0
    reader = pv.get_reader(path)
    assert np.allclose(reader.time_values, [0.0, 0.05, 0.1])
    reader.set_active_time_value(reader.time_values[-1])
    last = reader.read()[0]
    assert "body_id" in last.cell_data and 0 in np.unique(last.cell_data["body_id"])
    first = pv.read(tmp_path / "vtk" / "top_frames" / "top_00000.vtp")
    assert not np.allclose(first.bounds, last.bounds)  # the top moved


def test_conserved_directions_are_stored_and_older_verdicts_read(tmp_path):
    """A free body under gravity along (0.6, 0, -0.8) conserves its linear momentum in the
    plane normal to g: the directions survive saving, and a file holding per-axis verdicts
    (conserved_momenta.*) instead reads as the axes found conserved."""
    system = mbs.System(gravity=(5.886, 0.0, -7.848))
    body = system.add(mbs.RigidBody(1.0, (1.0, 2.0, 2.5), name="free"))
    body.set_state(velocity=(1.0, 2.0, 3.0), angular_velocity=(0.5, 0.0, 1.0))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.1)
    path = mbs.save_solution(solution, tmp_path / "skewed.npz")
    loaded = mbs.load_solution(path)
    for stored, computed in zip(loaded.conserved_directions(), solution.conserved_directions()):
        assert np.array_equal(stored, computed)
    assert loaded.conservation_summary() == solution.conservation_summary()
    assert "linear momentum along y, (0.8, 0, 0.6)" in loaded.conservation_summary()

    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files
                  if not name.startswith("conserved_directions.")}
    arrays["conserved_momenta.linear"] = np.array([False, True, False])
    arrays["conserved_momenta.angular"] = np.array([True])  # about the vertical
    np.savez(tmp_path / "verdicts.npz", **arrays)
    linear, angular = mbs.load_solution(tmp_path / "verdicts.npz").conserved_directions()
    assert np.array_equal(linear, [[0.0, 1.0, 0.0]])
    np.testing.assert_allclose(angular, [[-0.6, 0.0, 0.8]], atol=1e-15)


def test_a_top_pivoted_off_the_origin_summarises_the_same_after_loading(tmp_path):
    """The summary takes the angular momentum about the pivot, where its vertical component
    is conserved (about the origin it is not): a file read without the model keeps that
    point and what is conserved about it."""
    pivot = np.array([1.0, 2.0, 0.5])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    top = system.add(mbs.RigidBody(mass=0.7, inertia=(5e-4, 5e-4, 8e-4), name="top"))
    tilt = mbs.rotation_about_x(np.pi / 3)
    omega = 100.0 * tilt[:, 2]
    arm = tilt @ np.array([0.0, 0.0, 0.075])
    top.set_state(position=pivot + arm, rotation=tilt, velocity=np.cross(omega, arm),
                  angular_velocity=omega)
    system.add(mbs.joints.Spherical(system.ground, top, point=pivot))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=0.1)
    loaded = mbs.load_solution(mbs.save_solution(solution, tmp_path / "pivoted.npz"))
    assert np.array_equal(loaded.momentum_reference_point(), pivot)
    assert loaded.conservation_summary() == solution.conservation_summary()
    assert f"about {np.array2string(pivot)}" in loaded.conservation_summary()


def test_a_loaded_solution_claims_nothing_about_points_its_file_holds_no_check_for(tmp_path):
    """A body tethered by a spring to (1, 2, 3) conserves its angular momentum about a
    point P only along P - anchor, and no linear momentum. Loaded without the model, the
    linear verdict (the same for every point) is kept, and about another point than the
    saved ones neither the summary nor the plot calls the angular momentum conserved."""
    import matplotlib

    matplotlib.use("Agg")
    from mbs import plots

    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(0.15, 0.2, 0.25), name="b"))
    body.set_state(position=(1.5, 2.0, 3.0), velocity=(0.0, 1.0, 0.3),
                   angular_velocity=(1.0, 2.0, 3.0))
    system.add(mbs.forces.Spring(system.ground, body, stiffness=10.0, rest_length=0.2,
                                 point_a=(1.0, 2.0, 3.0)))
    solution = mbs.simulate(system.compile(), "em", h=0.005, t_end=0.5)
    loaded = mbs.load_solution(mbs.save_solution(solution, tmp_path / "tether.npz"))
    point = (7.0, 7.0, 7.0)
    linear, angular = loaded.conserved_directions(point)
    assert linear.shape == (0, 3) and angular is None
    summary = loaded.conservation_summary(about=point).splitlines()
    assert "(not checked: a solution loaded without its model" in summary[2]
    assert "(not conserved: forces from the ground)" in summary[3]
    figure = plots.plot_momentum(loaded, about=point)
    assert "not checked" in figure.axes[0].get_title()
    assert "not conserved" in figure.axes[1].get_title()
    in_memory = solution.conservation_summary(about=point).splitlines()[2]
    assert "along (0.6838, 0.5698, 0.4558)" in in_memory and "(conserved;" in in_memory


def test_a_solution_loaded_without_its_model_names_the_fix_for_joint_coordinates(tmp_path):
    """Joint angles need the model's joint geometry, which the file does not hold; two
    solutions compare by identity (their fields are arrays)."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    link = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.4, ly=0.05, lz=0.05,
                                               name="link"))
    link.set_state(position=(0.2, 0.0, 0.0))
    system.add(mbs.joints.Revolute(system.ground, link, point=(0, 0, 0), axis=(0, 1, 0),
                                   name="hinge"))
    model = system.compile()
    solution = mbs.simulate(model, "em", h=0.01, t_end=0.05)
    path = mbs.save_solution(solution, tmp_path / "run.npz")
    with pytest.raises(mbs.ModelError, match=r"load_solution\(path, model=...\)"):
        mbs.load_solution(path).joint("hinge")
    np.testing.assert_array_equal(mbs.load_solution(path, model=model).joint("hinge").position,
                                  solution.joint("hinge").position)
    assert solution == solution and solution != mbs.load_solution(path, model=model)


def test_model_and_solution_files_name_the_reader_each_needs(tmp_path):
    """save_system creates missing folders as save_solution does; a solution archive given
    to load_system, and a folder that is no stream given to load_solution, say what to read
    them with."""
    system = mbs.System()
    system.add(mbs.PointMass(1.0, name="p"))
    path = tmp_path / "models" / "nested" / "model.json"
    mbs.save_system(system, path)
    assert mbs.load_system(path).summary(print_it=False) == system.summary(print_it=False)
    solution = mbs.simulate(system.compile(), "em", h=0.1, t_end=0.2)
    archive = mbs.save_solution(solution, tmp_path / "runs" / "run.npz")
    with pytest.raises(mbs.ModelError, match="holds a solution .* mbs.load_solution"):
        mbs.load_system(archive)
    with pytest.raises(mbs.ModelError, match="is a directory but not a stream"):
        mbs.load_solution(tmp_path / "runs")


def test_accessors_take_elements_as_well_as_their_names():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(0.3, 0.0, -0.4))
    rod = system.add(mbs.joints.Distance(system.ground, bob, length=0.5, name="rod"))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.05)
    assert np.array_equal(solution.body(bob).position, solution.body("bob").position)
    assert np.array_equal(solution.point(bob, (0.3, 0.0, -0.4))[0],
                          solution.point("bob", (0.3, 0.0, -0.4))[0])
    assert np.array_equal(solution.reaction(rod, body=bob).force,
                          solution.reaction("rod", body="bob").force)


def test_a_loaded_solution_says_which_momenta_it_knows_are_conserved_about_a_point(tmp_path):
    """About a point the file holds no check for, the linear verdict stays (it holds for
    every point) and the angular one is unknown (None)."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(0.15, 0.2, 0.25), name="b"))
    body.set_state(velocity=(0.0, 1.0, 0.3), angular_velocity=(1.0, 2.0, 3.0))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.1)
    loaded = mbs.load_solution(mbs.save_solution(solution, tmp_path / "free.npz"))
    linear, angular = loaded.conserved_momenta((7.0, 7.0, 7.0))
    assert linear.tolist() == [True, True, True] and angular is None


def test_body_names_with_commas_and_slashes_in_files(tmp_path):
    """A comma in a body name is quoted in the CSV header (it shifted every later column); a
    slash, a group separator in HDF5, is refused before the file is created; save_vtk
    writes .pvd files only."""
    import csv

    system = mbs.System()
    for name in ("wheel, left", "arm/left"):
        system.add(mbs.PointMass(1.0, name=name))
    solution = mbs.simulate(system.compile(), "em", h=0.1, t_end=0.2)
    path = io.save_csv(solution, tmp_path / "run.csv",
                       columns=["position:wheel, left", "position:arm/left"])
    with open(path, newline="") as handle:
        header, *rows = list(csv.reader(handle))
    assert len(header) == len(rows[0]) == 7 and "wheel, left" in header[1]
    pytest.importorskip("h5py")
    with pytest.raises(mbs.ModelError, match="rename 'arm/left'"):
        io.save_hdf5(solution, tmp_path / "run.h5")
    assert not (tmp_path / "run.h5").exists()
    with pytest.raises(mbs.ModelError, match="give a .pvd file name, got 'run.vtk'"):
        io.save_vtk(solution, tmp_path / "run.vtk")
