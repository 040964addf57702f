"""HDF5 export: every array and observable as the Solution computes it, checksummed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import mbs

h5py = pytest.importorskip("h5py")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import heavy_top  # noqa: E402


@pytest.fixture(scope="module")
def solution():
    return mbs.simulate(heavy_top.build().compile(), "em", h=0.002, t_end=0.2)


def test_the_file_holds_the_solution_bit_for_bit(solution, tmp_path):
    path = mbs.io.save_hdf5(solution, tmp_path / "top")
    assert path.suffix == ".h5"
    with h5py.File(path, "r") as data:
        assert data.attrs["format"] == "mbs-solution-hdf5"
        assert data.attrs["solver"] == "em" and data.attrs["h"] == 0.002
        assert json.loads(data.attrs["bodies"]) == ["top"]
        for name in ("t", "q", "p", "multipliers", "velocity_multipliers"):
            np.testing.assert_array_equal(data[name][()], getattr(solution, name))
        observables = data["observables"]
        np.testing.assert_array_equal(observables["energy"][()], solution.energy())
        np.testing.assert_array_equal(observables["angular_momentum"][()],
                                      solution.angular_momentum())
        residuals = solution.constraint_residuals()
        np.testing.assert_array_equal(observables["constraint_position"][()],
                                      residuals["position"])
        body = solution.body("top")
        np.testing.assert_array_equal(data["bodies/top/rotation"][()], body.rotation)
        np.testing.assert_array_equal(data["bodies/top/position"][()], body.position)
        np.testing.assert_array_equal(data["bodies/top/angular_velocity_body"][()],
                                      body.angular_velocity_body)
        np.testing.assert_array_equal(data["bodies/top/quaternion"][()], body.quaternions())
        assert data["q"].fletcher32 and data["q"].compression == "gzip"


def test_a_damaged_chunk_fails_to_read(solution, tmp_path):
    """The Fletcher-32 checksum: flipped bytes inside a chunk of q raise instead of reading
    back as other numbers."""
    path = mbs.io.save_hdf5(solution, tmp_path / "top.h5")
    with h5py.File(path, "r") as data:
        offset = data["q"].id.get_chunk_info(0).byte_offset
    raw = bytearray(path.read_bytes())
    for k in range(offset + 40, offset + 48):
        raw[k] ^= 0xFF
    path.write_bytes(bytes(raw))
    with h5py.File(path, "r") as data, pytest.raises(OSError):
        data["q"][()]


def test_without_h5py_the_error_says_what_to_install(solution, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(mbs.ModelError, match="pip install"):
        mbs.io.save_hdf5(solution, tmp_path / "top.h5")


def test_the_command_line_saves_hdf5_by_suffix(tmp_path, capsys):
    from mbs.cli import main

    path = tmp_path / "top.h5"
    assert main(["run", "heavy-top", "--t-end", "0.02", "--quiet", "--progress", "off",
                 "--save", str(path)]) == 0
    with h5py.File(path, "r") as data:
        assert data["q"].shape == (11, 12) and data.attrs["solver"] == "em"


def test_file_names_say_which_format_is_meant(solution, tmp_path):
    with pytest.raises(mbs.ModelError, match="save_hdf5 writes HDF5 files .*'run.npz'"):
        mbs.io.save_hdf5(solution, tmp_path / "run.npz")
    path = mbs.io.save_hdf5(solution, tmp_path / "run.h5")
    with pytest.raises(mbs.ModelError, match="load_solution reads the .npz files"):
        mbs.load_solution(path)
    assert mbs.save_solution(solution, tmp_path / "RUN.NPZ").name == "RUN.NPZ"
    (tmp_path / "folder").mkdir()
    with pytest.raises(mbs.ModelError, match="is a directory"):
        mbs.save_solution(solution, tmp_path / "folder")


def test_a_partial_run_is_marked_as_such(tmp_path):
    """A run stopped by a failing load: the file says it did not complete, and how far."""
    system = mbs.System()
    ball = system.add(mbs.PointMass(1.0, name="ball"))

    def push(t):
        if t > 0.05:
            raise RuntimeError("sensor offline")
        return (1.0, 0.0, 0.0)

    system.add(mbs.forces.Load(ball, force=push, name="push"))
    with pytest.raises(mbs.SimulationError) as failure:
        mbs.simulate(system.compile(), "em", h=0.01, t_end=0.2)
    partial = mbs.io.save_hdf5(failure.value.solution, tmp_path / "partial.h5")
    with h5py.File(partial, "r") as data:
        assert not data.attrs["completed"] and data.attrs["steps"] == data["q"].shape[0] - 1
