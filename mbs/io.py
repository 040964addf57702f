"""Solutions to and from files: NPZ round trip, CSV of observables, VTK time series, HDF5
(:func:`save_hdf5`, for other tools).

NPZ format (:func:`save_solution` / :func:`load_solution`)
------------------------------------------------------------------
One ``numpy.savez_compressed`` archive, readable with ``allow_pickle=False``:

* the solution arrays ``t, q, p, scheme_velocities, multipliers, velocity_multipliers,
  enforced_residuals`` bit for bit;
* array-valued stats as ``stats.<name>`` (e.g. ``stats.newton_iterations``), the other stats
  and the solver properties in a JSON header (``header``);
* the model metadata needed to work with the result without the code that built it: body
  records (name, kind, coordinate slice, mass, inertia, Euler tensor, shape), joint and force
  records (type, bodies, rows, geometry), gravity, sizes, the reference configuration
  ``reference_q`` in which joint/force geometry is given, point/director blocks, the constant
  mass matrix and its inverse (CSR arrays);
* observables that need the force and constraint code: the potential energy and the
  constraint residuals at every node (computed once, when saving).

No pickle: the potential and constraint functions are not stored (they are code). A loaded
solution therefore carries a :class:`StoredModel`, which evaluates the kinetic energy,
momenta, velocities and body trajectories from the stored matrices exactly as
:class:`~mbs.model.Model` does, and returns the stored potential energy and residuals for the
stored trajectory. ``energy()``, ``body()``, ``conservation_summary()``, the plots and the
animation all work. For anything else (new states, continuing the run) rebuild the model from
its script and pass it: ``load_solution(path, model=build().compile())`` returns an ordinary
:class:`~mbs.solution.Solution` on that model after checking that it matches.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, fields, is_dataclass
from io import StringIO
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from mbs.elements import Element
from mbs.errors import (
    MbsError,
    ModelError,
    ModelTypeError,
    SolutionFileNotFoundError,
    UnknownNameError,
)
from mbs.hdf5 import save_hdf5 as save_hdf5  # re-exported: mbs.io.save_hdf5
from mbs.liegroup.model import LieGroupModel
from mbs.model import BodyInfo, ElementInfo, Model
from mbs.safe_files import load_json, open_archive
from mbs.solution import (
    DriveTrajectory,
    Solution,
    element_name,
    reference_point,
    vertical_axis,
)
from mbs.streaming import (
    load_stream,
    model_differences,
    model_digest,
    model_digest_parts,
    model_matches,
    stream_directory,
)

FORMAT = "mbs-solution"
VERSION = 1
_ARRAYS = ("t", "q", "p", "scheme_velocities", "multipliers", "velocity_multipliers",
           "enforced_residuals")
#: Arrays stored only when present (files written without them load as None).
_OPTIONAL_ARRAYS = ("step_work",)


# -- JSON helpers (numpy arrays and tuples tagged, floats exact through repr) ------------------
def _encode(value):
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, slice):
        return {"__slice__": [value.start, value.stop]}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"__repr__": repr(value)}


def _decode(value):
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.array(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
        if "__tuple__" in value:
            return tuple(_decode(v) for v in value["__tuple__"])
        if "__slice__" in value:
            return slice(*value["__slice__"])
        if "__repr__" in value:
            return value["__repr__"]
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


# -- the stored model ----------------------------------------------------------------------
class StoredModel:
    """Model metadata and constant matrices of a saved solution (see the module docstring).

    Has the attributes and observables of :class:`~mbs.model.Model` that need no force or
    constraint code: ``n, m, bodies, joints, forces, gravity, mass_matrix,
    inverse_mass_matrix, point_blocks, director_blocks, degrees_of_freedom, reference_q``,
    ``non_conservative``, ``coordinates(), body(), kinetic_energy(), linear_momentum(),
    angular_momentum()``.
    ``potential_energy(q)`` works for the stored trajectory only.
    """

    # Borrow the Model's own implementations: identical arithmetic, identical results.
    coordinates = Model.coordinates
    body = Model.body
    apply_inverse_mass = Model.apply_inverse_mass
    kinetic_energy = Model.kinetic_energy
    linear_momentum = Model.linear_momentum
    angular_momentum = Model.angular_momentum
    checked_state = Model.checked_state

    def __init__(self, *, n: int, m: int, bodies: list[BodyInfo], joints: list[ElementInfo],
                 forces: list[ElementInfo], gravity, mass_matrix, inverse_mass_matrix,
                 point_blocks, director_blocks, degrees_of_freedom: int, reference_q,
                 constraint_rows: dict, stored_q: np.ndarray, potential: np.ndarray,
                 non_conservative: bool = False):
        self.n, self.m = n, m
        self.non_conservative = self.has_applied_forces = non_conservative
        self.joint_coordinates: dict = {}
        self.drives: dict = {}
        self.is_rheonomic = False
        self.bodies, self.joints, self.forces = bodies, joints, forces
        self.gravity = gravity
        self.mass_matrix, self.inverse_mass_matrix = mass_matrix, inverse_mass_matrix
        self.point_blocks, self.director_blocks = point_blocks, director_blocks
        self.degrees_of_freedom = degrees_of_freedom
        self.reference_q = reference_q
        self.constraint_rows = constraint_rows
        self._body_by_name = {b.name: b for b in bodies}
        self._stored_q = stored_q
        self._potential = potential

    def joint_coordinate(self, name: str, *args, **kwargs):
        raise ModelError(f"joint coordinates ({name!r}) need the compiled model: pass it to "
                         f"load_solution(path, model=...)")

    joint_coordinate_path = joint_coordinate

    @property
    def q0(self) -> np.ndarray:
        """The pose in which joint and force geometry is given (as Model.q0)."""
        return self.reference_q

    def potential_energy(self, q: np.ndarray):
        """Stored V(q_n) when ``q`` is (part of) the stored trajectory."""
        q = np.asarray(q, dtype=float)
        if q.shape == self._stored_q.shape and np.array_equal(q, self._stored_q):
            return self._potential.copy()
        if q.ndim == 1:
            rows = np.flatnonzero(np.all(self._stored_q == q, axis=1))
            if rows.size:
                return float(self._potential[rows[0]])
        raise ModelError("a loaded solution knows the potential energy of its own nodes only; "
                         "rebuild the model and load with load_solution(path, model=...) to "
                         "evaluate other states")

    def energy(self, q, p):
        return self.kinetic_energy(p) + self.potential_energy(q)

    def __repr__(self) -> str:
        return (f"StoredModel(n={self.n}, m={self.m}, bodies={len(self.bodies)}, "
                f"joints={len(self.joints)})")


class LoadedSolution(Solution):
    """A :class:`~mbs.solution.Solution` read from an NPZ file (``source`` is its path)."""

    source: str = ""
    _residuals: dict | None = None
    _conserved_directions: tuple = (None, None)
    #: (momentum_reference_point, angular directions conserved about it) as saved
    _reference: tuple = (np.zeros(3), None)
    _drives: dict | None = None

    def drive(self, name: str | Element) -> DriveTrajectory:
        """As stored when saving (the drive's coordinate needs the joint code)."""
        name = element_name(name)
        if not self._drives or name not in self._drives:
            return super().drive(name)
        return self._drives[name]

    def force(self, name: str):
        """Not stored: a force's effort and work need its law. Load the file with its model,
        ``mbs.load_solution(path, model)``, to get a full Solution with :meth:`force`."""
        raise ModelError(f"force({element_name(name)!r}): the effort and work of a load, damper or "
                         f"actuator need its law, which a solution file does not store; load "
                         f"the file with its compiled model, mbs.load_solution(path, "
                         f"model=build().compile())")

    def constraint_residuals(self) -> dict[str, np.ndarray]:
        if self._residuals is None:
            return super().constraint_residuals()
        return {k: v.copy() for k, v in self._residuals.items()}

    def conserved_directions(self, about=(0.0, 0.0, 0.0)
                             ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """As stored when saving (the check needs the force and constraint code): the linear
        momentum's directions, and the angular momentum's about the origin and about
        :meth:`momentum_reference_point` (None about another point); (None, None) for files
        written without."""
        about = reference_point(about, "Solution.conserved_directions")
        linear = self._conserved_directions[0]
        if np.array_equal(about, self._reference[0]) and self._reference[1] is not None:
            return linear, self._reference[1]
        if np.any(about != 0.0):
            return linear, None
        return self._conserved_directions

    def _summary_point(self) -> tuple[np.ndarray, tuple | None]:
        """The reference point stored when saving (the origin in files written without)."""
        point = self._reference[0]
        return point, self.conserved_directions(point)


# -- save ---------------------------------------------------------------------------------
def _csr_arrays(prefix: str, matrix) -> dict[str, np.ndarray]:
    matrix = sp.csr_matrix(matrix)
    return {f"{prefix}.data": matrix.data, f"{prefix}.indices": matrix.indices,
            f"{prefix}.indptr": matrix.indptr, f"{prefix}.shape": np.array(matrix.shape)}


def _csr(archive, prefix: str) -> sp.csr_matrix:
    return sp.csr_matrix((archive[f"{prefix}.data"], archive[f"{prefix}.indices"],
                          archive[f"{prefix}.indptr"]), shape=tuple(archive[f"{prefix}.shape"]))


def _info_record(info) -> dict:
    return {f.name: _encode(getattr(info, f.name)) for f in fields(info)}


def save_solution(solution: Solution, path) -> Path:
    """Write ``solution`` to ``path`` (.npz appended if missing); see the module docstring."""
    if not isinstance(solution, Solution):
        raise ModelTypeError(f"save_solution: expected a Solution (from mbs.simulate), got "
                             f"{type(solution).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"save_solution: {path} is a directory; give a file name")
    if path.suffix.lower() in (".h5", ".hdf5"):
        raise ModelError(f"save_solution writes .npz archives (load_solution reads them); for "
                         f"HDF5 use mbs.io.save_hdf5(solution, {str(path)!r})")
    if path.suffix.lower() != ".npz":
        path = path.with_name(path.name + ".npz")
    model = solution.model
    arrays = {name: np.asarray(getattr(solution, name)) for name in _ARRAYS}
    arrays.update({name: np.asarray(getattr(solution, name)) for name in _OPTIONAL_ARRAYS
                   if getattr(solution, name) is not None})
    stats_json = {}
    for key, value in (solution.stats or {}).items():
        if isinstance(value, np.ndarray):
            arrays[f"stats.{key}"] = value
        else:
            stats_json[key] = _encode(value)
    residuals = solution.constraint_residuals()
    for key, value in residuals.items():
        arrays[f"residuals.{key}"] = np.asarray(value)
    for key, value in zip(("linear", "angular"), solution.conserved_directions()):
        if value is not None:
            arrays[f"conserved_directions.{key}"] = np.asarray(value, dtype=float)
    point = solution.momentum_reference_point()
    angular = solution.conserved_directions(point)[1] if np.any(point != 0.0) else None
    if angular is not None:
        # the pivot (or anchor) of the conservation summary, with what is conserved about it
        arrays["momentum_reference_point"] = np.asarray(point, dtype=float)
        arrays["conserved_directions.angular_about_reference"] = np.asarray(angular,
                                                                            dtype=float)
    drives = getattr(model, "drives", {})
    for name in drives:
        trajectory = solution.drive(name)
        for part in _DRIVE_ARRAYS:
            arrays[f"drives.{name}.{part}"] = np.asarray(getattr(trajectory, part), dtype=float)
    arrays["potential_energy"] = np.asarray(solution.potential_energy(), dtype=float)
    arrays["reference_q"] = np.asarray(solution.model.q0, dtype=float)
    arrays["point_blocks"] = np.asarray(model.point_blocks)
    arrays["director_blocks"] = np.asarray(model.director_blocks)
    arrays.update(_csr_arrays("mass_matrix", model.mass_matrix))
    arrays.update(_csr_arrays("inverse_mass_matrix", model.inverse_mass_matrix))
    props = solution.solver_properties
    header = {
        "format": FORMAT, "version": VERSION, "stats": stats_json,
        "solver_properties": _encode(asdict(props)) if is_dataclass(props) else None,
        "model": {
            "n": int(model.n), "m": int(model.m),
            "degrees_of_freedom": int(getattr(model, "degrees_of_freedom", -1)),
            "non_conservative": bool(getattr(model, "non_conservative", False)),
            "gravity": _encode(None if model.gravity is None else np.asarray(model.gravity)),
            "bodies": [_info_record(b) for b in model.bodies],
            "joints": [_info_record(j) for j in model.joints],
            "forces": [_info_record(f) for f in model.forces],
            "constraint_rows": _encode(dict(getattr(model, "constraint_rows", {}))),
            "drives": {name: list(value) for name, value in drives.items()},
            "digest": model_digest(model) if isinstance(model, Model) else None,
            "digest_parts": model_digest_parts(model) if isinstance(model, Model) else None,
        },
    }
    arrays["header"] = np.array(json.dumps(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return path


# -- load ---------------------------------------------------------------------------------
def _check_model(model, header_model: dict, path) -> None:
    names = [b["name"] for b in header_model["bodies"]]
    problems = []
    if model.n != header_model["n"]:
        problems.append(f"n = {model.n} vs {header_model['n']} in the file")
    if model.m != header_model["m"]:
        problems.append(f"m = {model.m} vs {header_model['m']} in the file")
    if [b.name for b in model.bodies] != names:
        problems.append(f"bodies {[b.name for b in model.bodies]} vs {names}")
    else:
        for info, record in zip(model.bodies, header_model["bodies"]):
            stored = _decode(record["coordinates"])
            if (info.coordinates.start, info.coordinates.stop) != (stored.start, stored.stop):
                problems.append(f"coordinates of {info.name!r} differ")
    stored_digest = header_model.get("digest")
    if not problems and stored_digest is not None and not model_matches(
            model, stored_digest, header_model.get("digest_parts")):
        problems.append(f"its {model_differences(model, header_model.get('digest_parts'))} "
                        f"differ")
    if problems:
        raise ModelError(f"{path}: the given model does not match the saved one: "
                         + "; ".join(problems))


def _is_stream(path: Path) -> bool:
    """Whether ``path`` is an output stream: a directory with a manifest, a run in progress
    (``<name>.npz.partial``), or a packed stream (an .npz with a manifest)."""
    if (path.is_dir() and (path / "manifest.json").is_file()) or (
            not path.exists() and stream_directory(path).is_dir()):
        return True
    if path.suffix.lower() != ".npz" or not path.is_file():
        return False
    try:
        with open_archive(path) as archive:
            return "manifest" in archive.files and "header" not in archive.files
    except MbsError:
        return False


def load_solution(path, model: Model | None = None) -> Solution:
    """Read a solution written by :func:`save_solution`.

    Parameters
    ----------
    path : str or Path
        A file of :func:`save_solution`, or a stream of ``simulate(output=...)`` (directory,
        packed .npz, or a run in progress): a stream is read by
        :func:`mbs.streaming.load_stream` and needs ``model``.
    model : Model or LieGroupModel, optional
        The compiled model of the run (e.g. ``build().compile()`` from the same script). If
        given it is checked against the stored metadata and attached, giving a full
        :class:`~mbs.solution.Solution` (for a Lie-group model: on its director model, with
        ``lie_group_state`` as the run returned it); otherwise a :class:`LoadedSolution` on a
        :class:`StoredModel`.

    Raises
    ------
    SolutionFileNotFoundError
        No file at ``path`` (also a ``FileNotFoundError``).
    ModelError
        The file is not a solution written by mbs, is damaged, or was crafted: every array
        and header field is checked before the solution is built, so that its observables
        work on what is returned.
    """
    if isinstance(model, LieGroupModel):
        # stored as the director states it ran on; its group states follow from them
        solution = load_solution(path, model.director_model)
        solution.lie_group_state = model.unpack(*model.from_director(solution.q, solution.p))
        return solution
    path = Path(path)
    if _is_stream(path):
        if model is None:
            raise ModelError(f"{path} is a stream written by simulate(output=...); read it "
                             f"with load_solution(path, model), model the compiled model of "
                             f"the run")
        return load_stream(path, model)
    if path.suffix.lower() in (".h5", ".hdf5"):
        raise ModelError(f"{path}: HDF5 files (save_hdf5) are for other tools to read; "
                         f"load_solution reads the .npz files of save_solution and streams")
    if path.is_dir():
        raise ModelError(f"{path} is a directory but not a stream of simulate(output=...) "
                         f"(it has no manifest); give the .npz file of save_solution or the "
                         f"stream's directory")
    if not path.is_file():
        raise SolutionFileNotFoundError(2, f"no such solution file: {path}; check the path "
                                           f"(save_solution writes <name>.npz)", str(path))
    with open_archive(path) as archive:
        if "header" not in archive.files:
            raise ModelError(f"{path} is not an mbs solution file (no header)")
        header = load_json(str(archive["header"]), path)
        if not isinstance(header, dict):
            raise ModelError(f"{path} is not an mbs solution file (bad header)")
        if header.get("format") != FORMAT:
            raise ModelError(f"{path} is not an mbs solution file")
        version = header.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ModelError(f"{path}: header field 'version' must be an integer, got "
                             f"{version!r}")
        if version > VERSION:
            raise ModelError(f"{path} was written by a newer mbs (format version "
                             f"{version}); upgrade mbs to read it")
        try:
            return _read_solution(archive, header, model, path)
        except MbsError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                OverflowError) as exc:
            raise ModelError(f"{path}: malformed mbs solution file ({type(exc).__name__}: "
                             f"{exc})") from None


def _read_solution(archive, header: dict, model: Model | None, path: Path) -> Solution:
    """The solution in an opened archive whose header names the format (load_solution)."""
    stored = _mapping(header.get("model"), "model", path)
    n, m = (_count(stored.get(key), f"model.{key}", path) for key in ("n", "m"))
    if n % 3:
        raise ModelError(f"{path}: model.n = {n} is not a multiple of 3 (coordinates come in "
                         f"3-blocks)")
    data = {name: _numbers(archive, name, path) for name in _ARRAYS}
    data.update({name: _numbers(archive, name, path) for name in _OPTIONAL_ARRAYS
                 if name in archive.files})
    rows = data["t"].shape[0] if data["t"].ndim == 1 else 0
    if rows < 1:
        raise ModelError(f"{path}: t has shape {data['t'].shape}; expected (steps + 1,)")
    steps = rows - 1
    expected = {"t": (rows,), "q": (rows, n), "p": (rows, n), "scheme_velocities": (steps, n),
                "multipliers": (steps, m), "velocity_multipliers": (steps, m),
                "enforced_residuals": (steps, 2), "step_work": (steps,)}
    for name, array in data.items():
        _shape(array, expected[name], name, path)
    for name in ("t", "q", "p"):  # step quantities may be NaN where a scheme has none
        data[name] = _finite(data[name], name, path)
    stats = {k: _decode(v) for k, v in _mapping(header.get("stats"), "stats", path).items()}
    for key in archive.files:
        if key.startswith("stats."):
            stats[key[len("stats."):]] = _numbers(archive, key, path)
    _check_stats(stats, steps, path)
    props = header.get("solver_properties")
    if props is not None:
        from mbs.solvers.base import SchemeProperties

        props = SchemeProperties(**_mapping(_decode(props), "solver_properties", path))
    if model is not None:
        _check_model(model, stored, path)
        return Solution(model=model, stats=stats, solver_properties=props, **data)
    residuals = {key[len("residuals."):]: _numbers(archive, key, path)
                 for key in archive.files if key.startswith("residuals.")}
    for key, length in (("position", rows), ("velocity", rows),
                        ("enforced_position", steps), ("enforced_velocity", steps)):
        if key not in residuals:  # the stored model has no constraint code to recompute them
            raise ModelError(f"{path}: the array 'residuals.{key}' is missing")
        _shape(residuals[key], (length,), f"residuals.{key}", path)
    bodies = [BodyInfo(**_mapping(_decode(b), "model.bodies[]", path))
              for b in _sequence(stored.get("bodies"), "model.bodies", path)]
    _check_bodies(bodies, n, path)
    joints, forces = ([_element_info(e, f"model.{group}", path)
                       for e in _sequence(stored.get(group), f"model.{group}", path)]
                      for group in ("joints", "forces"))
    gravity = _decode(stored.get("gravity"))
    if gravity is not None:
        gravity = np.asarray(gravity)
        _shape(gravity, (3,), "model.gravity", path)
        gravity = _finite(gravity, "model.gravity", path)
    constraint_rows = _mapping(_decode(stored.get("constraint_rows", {})),
                               "model.constraint_rows", path)
    potential = _numbers(archive, "potential_energy", path)
    _shape(potential, (rows,), "potential_energy", path)
    reference_q = _numbers(archive, "reference_q", path)
    _shape(reference_q, (n,), "reference_q", path)
    blocks = {name: _indices(_numbers(archive, name, path), n // 3, name, path)
              for name in ("point_blocks", "director_blocks")}
    matrices = {}
    for name in ("mass_matrix", "inverse_mass_matrix"):
        matrices[name] = _csr(archive, name)
        _shape(matrices[name], (n, n), name, path)
        matrices[name].data = _finite(matrices[name].data, name, path)
    degrees = stored.get("degrees_of_freedom", -1)
    if isinstance(degrees, bool) or not isinstance(degrees, int):
        raise ModelError(f"{path}: model.degrees_of_freedom must be an integer, got "
                         f"{degrees!r}")
    stored_model = StoredModel(
        n=n, m=m, bodies=bodies, joints=joints, forces=forces, gravity=gravity,
        **matrices, **blocks, degrees_of_freedom=degrees,
        non_conservative=bool(stored.get("non_conservative", False)),
        reference_q=reference_q, constraint_rows=constraint_rows, stored_q=data["q"],
        potential=potential)
    stored_drives = _mapping(stored.get("drives", {}), "model.drives", path)
    trajectories = {}
    for name, value in stored_drives.items():
        joint, coordinate = _sequence(value, f"model.drives.{name}", path)
        parts = {part: _numbers(archive, f"drives.{name}.{part}", path)
                 for part in _DRIVE_ARRAYS}
        for part, array in parts.items():
            _shape(array, (steps if part == "effort" else rows,), f"drives.{name}.{part}",
                   path)
        trajectories[name] = DriveTrajectory(name, str(coordinate), **parts, t=data["t"])
        stored_model.drives[name] = (str(joint), str(coordinate))
    solution = LoadedSolution(model=stored_model, stats=stats, solver_properties=props, **data)
    solution._drives = trajectories
    solution.source = str(path)
    solution._residuals = residuals
    solution._conserved_directions = tuple(
        _conserved_directions(archive, key, vertical_axis(gravity), path)
        for key in ("linear", "angular"))
    if "momentum_reference_point" in archive.files:
        point = _finite(_numbers(archive, "momentum_reference_point", path),
                        "momentum_reference_point", path)
        _shape(point, (3,), "momentum_reference_point", path)
        solution._reference = (point, _conserved_directions(
            archive, "angular_about_reference", None, path))
    return solution


#: The arrays of a :class:`~mbs.solution.DriveTrajectory`, stored per drive.
_DRIVE_ARRAYS = ("position", "rate", "effort", "work")


def _conserved_directions(archive, key: str, vertical: np.ndarray | None, path
                          ) -> np.ndarray | None:
    """The stored bases of conserved momentum directions; files that hold per-axis verdicts
    instead (``conserved_momenta``: x, y, z, or the vertical for the angular momentum under
    gravity) give the axes found conserved; None in files written without either."""
    name = f"conserved_directions.{key}"
    if name in archive.files:
        directions = _finite(_numbers(archive, name, path), name, path)
        rows = directions.shape[0] if directions.ndim == 2 else -1
        _shape(directions, (min(max(rows, 0), 3), 3), name, path)
        return directions
    name = f"conserved_momenta.{key}"
    if name not in archive.files:
        return None
    verdicts = _numbers(archive, name, path).astype(bool)
    axes = np.eye(3) if key == "linear" or vertical is None else vertical[None, :]
    _shape(verdicts, (axes.shape[0],), name, path)
    return axes[verdicts]


def _mapping(value, what: str, path) -> dict:
    if not isinstance(value, dict):
        raise ModelError(f"{path}: header field {what!r} must be an object, got "
                         f"{type(value).__name__}")
    return value


def _sequence(value, what: str, path) -> list:
    if not isinstance(value, list):
        raise ModelError(f"{path}: header field {what!r} must be a list, got "
                         f"{type(value).__name__}")
    return value


def _count(value, what: str, path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**48:
        raise ModelError(f"{path}: header field {what!r} must be a non-negative integer, got "
                         f"{value!r}")
    return value


def _numbers(archive, name: str, path) -> np.ndarray:
    """A member that must be an array of real numbers (integers and booleans allowed)."""
    if name not in archive.files:
        raise ModelError(f"{path}: the array {name!r} is missing")
    array = archive[name]
    if array.dtype.kind not in "biuf":
        raise ModelError(f"{path}: the array {name!r} holds {array.dtype} values, not real "
                         f"numbers")
    return array


def _shape(array, shape: tuple, what: str, path) -> None:
    if np.shape(array) != shape:
        raise ModelError(f"{path}: {what} has shape {np.shape(array)}, the file's own sizes "
                         f"imply {shape}; the file is damaged")


def _finite(array: np.ndarray, what: str, path) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    if not np.all(np.isfinite(array)):
        raise ModelError(f"{path}: {what} holds non-finite values; the file is damaged")
    return array


def _indices(array: np.ndarray, size: int, what: str, path) -> np.ndarray:
    """A 1-D array of indices into ``size`` 3-blocks."""
    if (array.ndim != 1 or array.dtype.kind not in "iu"
            or (array.size and not (array.min() >= 0 and array.max() < size))):
        raise ModelError(f"{path}: {what} must list 3-block indices below {size}")
    return array


def _check_stats(stats: dict, steps: int, path) -> None:
    """The stats the observables and the summary read: of the type they expect."""
    kinds = {"wall_time": (int, float), "h": (int, float), "steps": int, "first_step": int,
             "solver": str, "drive_effort": str, "completed": bool,
             "drive_work_in_steps": bool, "refined_steps": (list, tuple),
             "restarts": (list, tuple), "resumed_at": int, "sub_steps": int}
    for key, kind in kinds.items():
        if key in stats and (not isinstance(stats[key], kind)
                             or (kind is not bool and isinstance(stats[key], bool))):
            raise ModelError(f"{path}: stats field {key!r} has the wrong type "
                             f"({type(stats[key]).__name__})")
    if "newton_iterations" in stats:
        _shape(stats["newton_iterations"], (steps,), "stats.newton_iterations", path)


def _check_bodies(bodies: list, n: int, path) -> None:
    names = set()
    for body in bodies:
        size = {"rigid": 12, "point": 3}.get(body.kind)
        where = f"{path}: body {body.name!r}"
        if not isinstance(body.name, str) or body.name in names:
            raise ModelError(f"{path}: body names must be distinct strings, got "
                             f"{body.name!r}")
        names.add(body.name)
        if size is None:
            raise ModelError(f"{where}: kind must be 'rigid' or 'point', got {body.kind!r}")
        span = body.coordinates
        bounds = (span.start, span.stop) if isinstance(span, slice) else (None, None)
        integers = all(isinstance(i, int) and not isinstance(i, bool) for i in bounds)
        if (not integers or span.step is not None or bounds[1] - bounds[0] != size
                or not 0 <= bounds[0] <= n - size):
            raise ModelError(f"{where}: coordinates must be {size} indices within the "
                             f"{n} coordinates, got {span!r}")


def _element_info(record, what: str, path) -> ElementInfo:
    record = _mapping(_decode(record), what, path)
    info = ElementInfo(**record)
    bodies = info.bodies
    if (not isinstance(info.name, str) or not isinstance(info.type, str)
            or not isinstance(bodies, (list, tuple))
            or not all(isinstance(b, str) for b in bodies)
            or not isinstance(info.data, dict)):
        raise ModelError(f"{path}: an entry of {what} has fields of the wrong type")
    return ElementInfo(name=info.name, type=info.type, bodies=tuple(bodies),
                       rows=np.asarray(info.rows), data=info.data)


# -- CSV ------------------------------------------------------------------------------------
OBSERVABLES = ("energy", "kinetic_energy", "potential_energy", "angular_momentum",
               "linear_momentum", "constraints")
#: Per-body CSV columns, written "KIND:BODY".
BODY_COLUMNS = ("position", "velocity", "angular_velocity", "angular_velocity_body",
                "quaternion", "directors")
#: The CSV column of a body point, written "point:BODY@X,Y,Z" (world coordinates at the
#: initial pose, as for :meth:`~mbs.solution.Solution.point`).
POINT_COLUMN = "point"
#: The column written after "t" whenever a per-step value (an effort) is: the midpoint time
#: of the step whose value a row holds.
STEP_TIME_COLUMN = "t_midpoint"


def observable_columns(solution: Solution, columns=None, every: int = 1
                       ) -> tuple[list[str], np.ndarray]:
    """Column names and the (rows, columns) table used by :func:`save_csv`.

    Parameters
    ----------
    solution : Solution
    columns : str or list of str, optional
        Each entry one of (a single entry may be given as a string):

        * "energy", "kinetic_energy", "potential_energy", "angular_momentum" (3 columns),
          "linear_momentum" (3), "constraints" (|g| and |G v| max norms);
        * "position:BODY" (3), "velocity:BODY" (3), "angular_velocity:BODY" (3),
          "angular_velocity_body:BODY" (3, body frame), "quaternion:BODY" (4, w x y z, see
          :meth:`~mbs.solution.BodyTrajectory.quaternions`), "directors:BODY" (9), headed
          "BODY.position_x", ...;
        * "point:BODY@X,Y,Z": position and velocity (3 + 3) of the point of BODY that was
          at the world point (X, Y, Z) at the initial pose
          (:meth:`~mbs.solution.Solution.point`), headed "BODY@X,Y,Z.position_x", ...,
          "BODY@X,Y,Z.velocity_z" with the text as given;
        * "joint:JOINT": the joint's coordinate and its rate
          (:meth:`~mbs.solution.Solution.joint`), headed "JOINT.angle" and
          "JOINT.angle_rate" (revolute, cylindrical) or "JOINT.displacement" and
          "JOINT.displacement_rate" (prismatic); "joint:JOINT:displacement" selects the slide
          of a cylindrical joint;
        * "drive:DRIVE": "DRIVE.effort" (per step), "DRIVE.power" (per step) and
          "DRIVE.work" (:meth:`~mbs.solution.Solution.drive`);
        * "force:NAME": "NAME.effort" (per step; joint actuators, dampers and torsion
          springs, not loads, which have no scalar effort), "NAME.power" (per step) and
          "NAME.work" (:meth:`~mbs.solution.Solution.force`);
        * "reaction:JOINT": the force and torque the joint exerts on its second body (its
          first when the second is the ground) in each step, in the world frame, the torque
          about the body's centre of mass (:meth:`~mbs.solution.Solution.reaction` with its
          defaults), headed "JOINT.force_x", ..., "JOINT.torque_z" (per step).

        Default: energies, momenta, constraints and every body's position.
    every : int
        The rows are every ``every``-th node and the last one (the end state is always
        written).

    Returns
    -------
    names : list of str
        "t", then "t_midpoint" when a per-step column is present, then the columns in the
        order asked.
    table : ndarray, shape (rows, len(names))

    Notes
    -----
    Every row is a node t_n, and every column a value at that node except the efforts,
    powers and reactions (per step): an effort is constant over a step (the mean force of
    step n -> n+1, see :class:`~mbs.solution.DriveTrajectory`), defined on the N steps and
    not on the N + 1 nodes. Row n holds the values of the step that begins at node n, whose
    midpoint time (t_n + t_{n+1}) / 2 is the column "t_midpoint", written whenever such a
    value is; the last row begins no step and holds NaN there. With ``every`` > 1 a row
    holds the values of the one step that begins at it, not a mean over the steps up to the
    next row. Works are cumulative, 0 at the start, and node values like the other columns.
    """
    if isinstance(every, bool) or not isinstance(every, int | np.integer) or every < 1:
        raise ModelError(f"every must be a positive integer, got {every!r}")
    if columns is None:
        columns = list(OBSERVABLES) + [f"position:{b.name}" for b in solution.model.bodies]
    elif isinstance(columns, str):
        columns = [columns]
    for column in columns:
        if not isinstance(column, str):
            raise ModelTypeError(f"CSV columns are names (strings), got {column!r}; "
                                 f"{_COLUMN_FORMS}")
    last = len(solution.t) - 1
    rows = np.arange(0, last + 1, every)
    if rows[-1] != last:
        rows = np.append(rows, last)
    t = np.asarray(solution.t)
    names, values = ["t"], [t[rows]]
    per_step = False
    residuals = None
    for column in columns:
        kind, _, body = column.partition(":")
        if kind in ("energy", "kinetic_energy", "potential_energy"):
            names.append(kind)
            values.append(np.asarray(getattr(solution, kind)())[rows])
        elif kind in ("angular_momentum", "linear_momentum"):
            data = np.asarray(getattr(solution, kind)())[rows]
            names += [f"{kind}_{c}" for c in "xyz"]
            values += list(data.T)
        elif kind == "constraints":
            residuals = residuals or solution.constraint_residuals()
            names += ["constraint_position", "constraint_velocity"]
            values += [np.asarray(residuals["position"])[rows],
                       np.asarray(residuals["velocity"])[rows]]
        elif kind in BODY_COLUMNS and body:
            trajectory = _in_column(column, solution.body, body)
            if kind == "quaternion":
                if trajectory.rotation is None:
                    raise ModelError(f"CSV column {column!r}: {body!r} is a point mass")
                data = trajectory.quaternions()[rows]
                names += [f"{body}.quaternion_{c}" for c in "wxyz"]
            elif kind == "directors":
                if trajectory.rotation is None:
                    raise ModelError(f"CSV column {column!r}: {body!r} is a point mass")
                data = np.swapaxes(trajectory.rotation, 1, 2).reshape(-1, 9)[rows]
                names += [f"{body}.d{i}_{c}" for i in (1, 2, 3) for c in "xyz"]
            else:
                data = getattr(trajectory, kind)
                if data is None:
                    raise ModelError(f"CSV column {column!r}: {body!r} is a point mass")
                data = data[rows]
                names += [f"{body}.{kind}_{c}" for c in "xyz"]
            values += list(np.asarray(data).T)
        elif kind == POINT_COLUMN and body:
            position, velocity = _point_column(solution, column, body)
            names += [f"{body}.{part}_{c}" for part in ("position", "velocity") for c in "xyz"]
            values += list(position[rows].T) + list(velocity[rows].T)
        elif kind == "joint" and body:
            trajectory = _joint_column(solution, column, body)
            names += [f"{trajectory.name}.{trajectory.coordinate}",
                      f"{trajectory.name}.{trajectory.coordinate}_rate"]
            values += [trajectory.position[rows], trajectory.rate[rows]]
        elif kind in ("drive", "force") and body:
            if kind == "force" and body in getattr(solution.model, "drives", {}):
                raise UnknownNameError(f"CSV column {column!r}: {body!r} is a drive; its "
                                       f"effort and work are the column 'drive:{body}'")
            trajectory = _in_column(column, getattr(solution, kind), body)
            if trajectory.effort is not None:
                names.append(f"{body}.effort")
                values.append(_per_step(trajectory.effort, rows))
                per_step = True
            names += [f"{body}.power", f"{body}.work"]
            values += [_per_step(trajectory.power, rows), np.asarray(trajectory.work)[rows]]
            per_step = True
        elif kind == "reaction" and body:
            trajectory = _in_column(column, solution.reaction, body)
            names += [f"{body}.{part}_{c}" for part in ("force", "torque") for c in "xyz"]
            values += [_per_step(component, rows) for component in
                       np.hstack([trajectory.force, trajectory.torque]).T]
            per_step = True
        else:
            raise ModelError(f"unknown CSV column {column!r}; {_COLUMN_FORMS}")
    if per_step:
        names.insert(1, STEP_TIME_COLUMN)
        values.insert(1, _per_step(0.5 * (t[1:] + t[:-1]), rows))
    return names, np.column_stack(values)


_COLUMN_FORMS = (f"the columns are {', '.join(OBSERVABLES)}; KIND:BODY with KIND one of "
                 f"{', '.join(BODY_COLUMNS)}; {POINT_COLUMN}:BODY@X,Y,Z; joint:JOINT "
                 f"(joint:JOINT:displacement for a cylindrical joint's slide); drive:DRIVE; "
                 f"force:NAME; reaction:JOINT")


def _in_column(column: str, accessor, *args):
    """``accessor(*args)``, its errors (an unknown name's lists the names there are)
    prefixed with the column that asked."""
    try:
        return accessor(*args)
    except UnknownNameError as exc:
        raise UnknownNameError(f"CSV column {column!r}: {exc}") from exc
    except ModelError as exc:
        raise ModelError(f"CSV column {column!r}: {exc}") from exc


def _joint_column(solution: Solution, column: str, spec: str):
    """The :class:`~mbs.solution.JointTrajectory` of "joint:JOINT" or
    "joint:JOINT:COORDINATE"; a joint whose own name holds the colon is matched whole
    first."""
    coordinates = getattr(solution.model, "joint_coordinates", {})
    name, coordinate = spec, None
    if spec not in coordinates:
        head, colon, tail = spec.rpartition(":")
        if colon and head in coordinates:
            name, coordinate = head, tail
    return _in_column(column, solution.joint, name, coordinate)


def _point_column(solution: Solution, column: str, spec: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Position and velocity, (N+1, 3) each, of "point:BODY@X,Y,Z"; the last "@" separates
    the body's name from the point, so a name may hold one."""
    body, at, text = spec.rpartition("@")
    parts = text.split(",")
    try:
        point = [float(part) for part in parts] if at and body else []
    except ValueError:
        point = []
    if len(point) != 3:
        raise ModelError(f"CSV column {column!r}: give a body point as "
                         f"{POINT_COLUMN}:BODY@X,Y,Z, the point's world coordinates at the "
                         f"initial pose, e.g. '{POINT_COLUMN}:{body or spec}@0.5,0,0'")
    return _in_column(column, solution.point, body, point)


def _per_step(values, rows: np.ndarray) -> np.ndarray:
    """Per-step values (N,) on node rows: the value of step n -> n+1 on row n, NaN on the last
    node, which begins no step."""
    return np.append(np.asarray(values, dtype=float), np.nan)[rows]


def save_csv(solution: Solution, path, columns=None, every: int = 1) -> Path:
    """Write selected observables as CSV (header row, one row per node, ``every``-th node).

    Numbers are written with 17 significant digits, which read back as the same binary64
    values; NaN (an effort on the last row) as ``nan``. See :func:`observable_columns` for
    the column names and for the rows of per-step values (efforts).
    """
    names, table = observable_columns(solution, columns, every)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = StringIO()  # quoted where a body name holds a comma or a quote
    csv.writer(header, lineterminator="").writerow(names)
    np.savetxt(path, table, delimiter=",", header=header.getvalue(), comments="",
               fmt="%.17g")
    return path


# -- VTK time series --------------------------------------------------------------------------
def save_vtk(solution: Solution, path, *, frames: int | None = None, fps: float = 30.0,
             speed: float = 1.0, **scene_options) -> Path:
    """ParaView time series: ``path`` (.pvd) plus one .vtp per frame in ``<stem>_frames/``.

    Each frame is one PolyData with the body geometry (as drawn by :mod:`mbs.viz`: shapes,
    joint glyphs, springs as lines) at that time, and cell arrays ``body_id`` (index into
    the field-data array ``body_names``, -1 for joints/springs/ground) and ``part``. Frames
    are chosen as for animations (``fps``/``speed``, or exactly ``frames``). Needs PyVista.
    """
    from mbs.viz.frames import select_frames
    from mbs.viz.kinematics import GROUND
    from mbs.viz.visuals import SceneOptions, describe

    pv = __import__("mbs.viz.backend", fromlist=["import_pyvista"]).import_pyvista()
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".pvd")
    elif path.suffix.lower() != ".pvd":
        raise ModelError(f"save_vtk writes a ParaView time series: give a .pvd file name, "
                         f"got {path.name!r}")
    folder = path.with_name(path.stem + "_frames")
    folder.mkdir(parents=True, exist_ok=True)
    indices, _ = select_frames(solution.t, fps=fps, speed=speed, frames=frames)
    options = SceneOptions(**{"directors": False, **scene_options})
    description = describe(solution, indices, options)
    poses = description.poses
    names = list(poses.names)
    entries = []
    for k in range(poses.frames):
        parts = []
        for part, item in enumerate(description.items):
            mesh = item.mesh.copy(deep=True)
            local = np.asarray(mesh.points, dtype=float)
            mesh.points = poses.transform(k, item.body, local)
            parts.append(_tag(mesh, item.body if item.kind == "body" else GROUND, part))
        for part, dyn in enumerate(description.dynamic, start=len(description.items)):
            mesh = dyn.mesh.copy(deep=True)
            mesh.points = dyn.points_at(k)
            parts.append(_tag(mesh, GROUND, part))
        frame = pv.merge(parts) if len(parts) > 1 else parts[0]
        if not isinstance(frame, pv.PolyData):
            frame = frame.extract_geometry()
        frame.field_data["body_names"] = np.array(names if names else [""])
        frame.field_data["time"] = np.array([poses.times[k]])
        name = f"{path.stem}_{k:05d}.vtp"
        frame.save(folder / name)
        entries.append((float(poses.times[k]), f"{folder.name}/{name}"))
    lines = ['<?xml version="1.0"?>',
             '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">',
             "  <Collection>"]
    lines += [f'    <DataSet timestep="{t!r}" group="" part="0" file="{file}"/>'
              for t, file in entries]
    lines += ["  </Collection>", "</VTKFile>", ""]
    path.write_text("\n".join(lines))
    return path


def _tag(mesh, body: int, part: int):
    mesh.clear_data()
    mesh.cell_data["body_id"] = np.full(mesh.n_cells, body, dtype=np.int32)
    mesh.cell_data["part"] = np.full(mesh.n_cells, part, dtype=np.int32)
    return mesh
