"""Solutions as HDF5 files, for tools outside Python-and-mbs (ParaView, xarray, MATLAB, h5py).

:func:`save_hdf5` writes one self-contained file: the solution's arrays, the observables
that need the model's code (energies, momenta, work, constraint residuals) and every body's
trajectory, each dataset chunked, compressed (gzip) and checksummed (Fletcher-32: a damaged
chunk fails to read instead of reading as other numbers)::

    /t, /q, /p                           (N+1,), (N+1, n), (N+1, n)
    /scheme_velocities, /multipliers, /velocity_multipliers, /enforced_residuals   (N, ...)
    /observables/energy, kinetic_energy, potential_energy, work            (N+1,)
    /observables/linear_momentum, angular_momentum                          (N+1, 3)
    /observables/constraint_position, constraint_velocity                   (N+1,)
    /bodies/NAME/position, velocity                                         (N+1, 3)
    /bodies/NAME/rotation (N+1, 3, 3; columns the directors), angular_velocity,
                 angular_velocity_body (N+1, 3), quaternion (N+1, 4; w x y z)  (rigid bodies)

with the solver, step size, steps, whether the run completed, model sizes and body names as
attributes of the root, and each body's constants as attributes of ``/bodies/NAME``:

* ``kind``: "rigid" or "point";
* ``mass``;
* ``coordinates``: (start, stop), the body's columns of ``q`` and ``p`` (12 for a rigid
  body: the centre of mass, then the directors d1, d2, d3; 3 for a point mass);
* ``inertia`` (3, 3): the inertia tensor J about the centre of mass in the body frame, and
  ``euler_tensor`` (3, 3): E = tr(J) I / 2 - J, the directors' mass matrix (rigid bodies).

From these the kinetic energy follows outside mbs, per body and summed over the bodies.
Exact for every scheme, from the momenta: T = |p_c|^2 / (2 m) + sum_ij (E^-1)_ij p_i . p_j / 2,
with p_c the body's first 3 columns of ``p`` (the centre of mass) and p_i those of director
d_i (none for a point mass): this is ``observables/kinetic_energy`` to round-off. From the
body velocities, T = m |velocity|^2 / 2 + w . J w / 2 with w = ``angular_velocity_body``:
the same to round-off where the scheme keeps the velocity constraints at the nodes, and
within O(h^2) where it does not (ggl-vi-s, ggl-vi-a, hbvm: the column "constraints exact at
step ends" of :func:`mbs.solvers.solver_table`; ``observables/constraint_velocity`` measures
how far). The NPZ
format of :func:`mbs.io.save_solution` stays the exact round trip (it reloads as a
:class:`~mbs.solution.Solution`); streams of long runs stay NPZ chunks with a checksummed,
append-only log (:mod:`mbs.streaming`), which needs no library beyond numpy. Needs h5py
(``pip install "mbs[hdf5]"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mbs.errors import ModelError
from mbs.model import BodyInfo
from mbs.solution import Solution

FORMAT = "mbs-solution-hdf5"
VERSION = 1
#: Rows per chunk along the time axis: ~1 MB chunks for a few hundred coordinates.
CHUNK_ROWS = 1024


def _h5py():
    try:
        import h5py
    except ImportError as exc:
        raise ModelError('save_hdf5 needs h5py: pip install "mbs[hdf5]" (or pip install '
                         'h5py)') from exc
    return h5py


def _dataset(group, name: str, values) -> None:
    array = np.ascontiguousarray(values, dtype=float)
    if array.ndim == 0 or array.size == 0:
        group.create_dataset(name, data=array)
        return
    chunks = (min(CHUNK_ROWS, array.shape[0]), *array.shape[1:])
    group.create_dataset(name, data=array, chunks=chunks, compression="gzip",
                         compression_opts=4, shuffle=True, fletcher32=True)


def _body_constants(group, body: BodyInfo) -> None:
    """Write what a tool outside mbs needs, with the body's datasets and ``q``/``p``, to
    compute its kinetic energy (see the module docstring) as attributes of ``group``."""
    group.attrs["kind"] = str(body.kind)
    group.attrs["mass"] = float(body.mass)
    group.attrs["coordinates"] = np.array([body.coordinates.start, body.coordinates.stop],
                                          dtype=np.int64)
    if body.kind == "rigid":
        group.attrs["inertia"] = np.asarray(body.inertia, dtype=float)
        group.attrs["euler_tensor"] = np.asarray(body.euler_tensor, dtype=float)


def save_hdf5(solution: Solution, path) -> Path:
    """Write ``solution`` to the HDF5 file ``path`` (.h5 appended if it has no suffix);
    see the module docstring for the layout. Returns the path."""
    h5py = _h5py()
    if not isinstance(solution, Solution):
        raise ModelError(f"save_hdf5 expects an mbs.Solution, got {type(solution).__name__}")
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".h5")
    elif path.suffix.lower() not in (".h5", ".hdf5"):
        raise ModelError(f"save_hdf5 writes HDF5 files (.h5 or .hdf5), got {path.name!r}; "
                         f"save_solution writes .npz")
    model = solution.model
    slashed = [body.name for body in model.bodies if "/" in body.name]
    if slashed:  # checked before the file is created: no half-written file
        raise ModelError(f"save_hdf5: body names are HDF5 group names, where '/' separates "
                         f"groups; rename {slashed[0]!r} (or save_solution to .npz)")
    path.parent.mkdir(parents=True, exist_ok=True)
    residuals = solution.constraint_residuals()
    with h5py.File(path, "w") as out:
        out.attrs["format"], out.attrs["version"] = FORMAT, VERSION
        out.attrs["solver"] = str(solution.stats.get("solver", ""))
        out.attrs["h"] = float(solution.stats.get("h", np.nan))
        out.attrs["first_step"] = int(solution.stats.get("first_step", 0))
        # a run that failed or was interrupted is told apart from a complete one
        out.attrs["steps"] = int(solution.stats.get("steps", solution.t.size - 1))
        out.attrs["completed"] = bool(solution.stats.get("completed", True))
        out.attrs["n"], out.attrs["m"] = int(model.n), int(model.m)
        out.attrs["bodies"] = json.dumps([body.name for body in model.bodies])
        for name in ("t", "q", "p", "scheme_velocities", "multipliers",
                     "velocity_multipliers", "enforced_residuals"):
            values = getattr(solution, name)
            if values is not None:
                _dataset(out, name, values)
        observables = out.create_group("observables")
        for name in ("energy", "kinetic_energy", "potential_energy", "linear_momentum",
                     "angular_momentum"):
            _dataset(observables, name, getattr(solution, name)())
        _dataset(observables, "work", solution.work)
        _dataset(observables, "constraint_position", residuals["position"])
        _dataset(observables, "constraint_velocity", residuals["velocity"])
        bodies = out.create_group("bodies")
        for body in model.bodies:
            trajectory = solution.body(body.name)
            group = bodies.create_group(body.name)
            _body_constants(group, body)
            for name in ("position", "velocity", "rotation", "angular_velocity",
                         "angular_velocity_body"):
                values = getattr(trajectory, name)
                if values is not None:
                    _dataset(group, name, values)
            if trajectory.rotation is not None:
                _dataset(group, "quaternion", trajectory.quaternions())
    return path


__all__ = ["save_hdf5"]
