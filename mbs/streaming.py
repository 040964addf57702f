"""Incremental output of long runs, and resuming them.

A stream is a directory holding ``manifest.json``, chunk files ``chunk_000001.npz`` ... and the
chunk log ``chunks.jsonl`` (one line per chunk: file, steps, SHA-256). A chunk holds the arrays
of its steps and the refinements and restarts among them. Each flush writes the new
chunk to a temporary name, renames it into place, appends its line to the log (fsync) and then
replaces the manifest atomically (``os.replace``); the manifest counts the chunks, so a crash or
SIGKILL loses at most the steps since the last flush and never leaves a file that the manifest
refers to half-written, and every flush writes O(1) bytes besides its chunk. The manifest is
written when the stream is created (a run that fails before its first flush leaves a stream of
zero steps) and records the SHA-256 of the initial state and of the checkpoint; a packed
stream records a digest of the solver state it holds. The manifest also
keeps the solver's warm-start state (previous multipliers), so that a resumed run performs the
same floating-point operations as an uninterrupted one and reproduces it bitwise. (One
exception: a run that completed at its t_end read its laws of time at t_end itself in its last
step (see :mod:`mbs.time_span`), where the uninterrupted run reads them at the rounded sum of
its steps, one unit of rounding away; resumed past that end, a model with drives or
time-dependent loads then agrees with the uninterrupted run to round-off only.)

When the output name ends in ``.npz`` the chunks live in ``<name>.partial/`` during the run and
are packed into the single file ``<name>`` when the run completes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import shutil
import types
import zipfile
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np

from mbs.errors import MbsError, ModelError
from mbs.safe_files import load_json, open_archive, read_lines, read_text, sha256
from mbs.solution import Solution
from mbs.solvers import make_solver
from mbs.solvers.base import SchemeProperties
from mbs.time_span import node_times

FORMAT = "mbs-stream"
VERSION = 2
#: Versions read: 1 kept the chunk list in the manifest.
READABLE_VERSIONS = (1, 2)
CHUNK_LOG = "chunks.jsonl"
INITIAL = "initial.npz"
#: Member prefix of the solver state in a packed stream.
CHECKPOINT_PREFIX = "checkpoint."
ARRAYS = ("q", "p", "scheme_velocities", "multipliers", "velocity_multipliers",
          "enforced_residuals", "newton_iterations", "step_work")
#: The run's refinements and restarts, (step, depth) and (failed step, first redone step,
#: sub-steps) rows of integers, stored with the chunk that holds their steps.
EVENTS = {"refined_steps": 2, "restarts": 3}
#: Largest count (coordinates, constraints, steps) a manifest may state: beyond any run that
#: fits on a disk, and small enough that array shapes built from it stay valid.
MAX_COUNT = 2**48


def stream_directory(path: str | os.PathLike) -> Path:
    """Directory that holds the chunks of ``path`` while a run is in progress."""
    path = Path(path)
    if not _packs(path) or (path / "manifest.json").is_file():  # a stream directory itself
        return path
    return path.with_name(path.name + ".partial")


def _packs(path: Path) -> bool:
    """Whether a stream at ``path`` is packed into one file at the end (an .npz name)."""
    return path.suffix.lower() == ".npz"


def is_packed(path: str | os.PathLike) -> bool:
    """Whether the stream at ``path`` is read from its packed .npz file. Not when
    ``<name>.partial/`` holds a stream: that is a run continued from the packed file (or
    stopped while packing), and its steps are the newer ones; a finished run's directory is
    renamed away before it is deleted, so it never lingers as a stream."""
    path = Path(path)
    return (_packs(path) and path.is_file()
            and not (stream_directory(path) / "manifest.json").is_file())


class StreamWriter:
    """Appends blocks of completed steps to a stream directory."""

    def __init__(self, path: str | os.PathLike, metadata: dict, q0: np.ndarray,
                 p0: np.ndarray, resume: bool = False):
        self.path = Path(path)
        self.directory = stream_directory(path)
        try:
            if resume:
                if is_packed(self.path):
                    # a directory left without a manifest is an unpacking that stopped
                    shutil.rmtree(self.directory, ignore_errors=True)
                    self._unpack()
                self.manifest = _read_manifest(self.directory)
                self.manifest["completed"] = False
                self.manifest.pop("end_time", None)  # the resumed run records its own
                self._records = _chunk_records(self.directory, self.manifest)
                _upgrade(self.directory, self.manifest, self._records)
            else:
                self._create(metadata, q0, p0)
        except OSError as exc:
            raise ModelError(f"output stream {self.directory}: cannot be written "
                             f"({type(exc).__name__}: {exc}); choose a writable directory"
                             ) from exc
        self._buffer: dict[str, list] = {name: [] for name in ARRAYS}

    def _create(self, metadata: dict, q0: np.ndarray, p0: np.ndarray) -> None:
        """A new stream holding the initial state and a manifest of zero steps: a run that
        fails before its first flush still leaves a stream that reads back and resumes."""
        if self.directory.exists() and not self.directory.is_dir():
            raise ModelError(f"output {self.directory} is an existing file, not a directory; "
                             f"choose another name (a directory is created) or remove it")
        if self.directory.exists() and any(self.directory.iterdir()):
            raise ModelError(f"output directory {self.directory} is not empty; remove it, "
                             f"choose another name, or pass resume=")
        if self.path != self.directory and self.path.exists():
            raise ModelError(f"output {self.path} exists; remove it, choose another name, or "
                             f"pass resume= to continue the run it holds")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manifest = {"format": FORMAT, "version": VERSION, **metadata,
                         "chunk_count": 0, "steps_done": 0}
        self._records = []
        np.savez(self.directory / INITIAL, q=q0, p=p0)
        self.manifest["initial_sha256"] = sha256(self.directory / INITIAL)
        (self.directory / CHUNK_LOG).write_text("")
        _write_manifest(self.directory, self.manifest)

    def _unpack(self) -> None:
        """Turn a packed .npz back into a stream directory (to resume a finished run)."""
        data = read_stream(self.path)
        manifest = data.pop("manifest")
        state = read_solver_state(self.path, manifest)
        self.directory.mkdir(parents=True)
        if manifest.get("checkpoint"):
            np.savez(self.directory / manifest["checkpoint"], **state)
            manifest["checkpoint_sha256"] = sha256(self.directory / manifest["checkpoint"])
        np.savez(self.directory / INITIAL, q=data["q"][0], p=data["p"][0])
        manifest["initial_sha256"] = sha256(self.directory / INITIAL)
        chunk = {k: data[k] for k in (*ARRAYS, *EVENTS)}
        chunk["q"], chunk["p"] = data["q"][1:], data["p"][1:]
        np.savez(self.directory / "chunk_000001.npz", **chunk)
        record = {"file": "chunk_000001.npz", "steps": int(chunk["q"].shape[0]),
                  "sha256": sha256(self.directory / "chunk_000001.npz")}
        (self.directory / CHUNK_LOG).write_text(json.dumps(record) + "\n")
        manifest.pop("chunks", None)
        manifest.update(version=VERSION, chunk_count=1)
        _write_manifest(self.directory, manifest)

    def append(self, q, p, velocity, multiplier, velocity_multiplier, enforced, iterations,
               work=0.0):
        for name, value in zip(ARRAYS, (q, p, velocity, multiplier, velocity_multiplier,
                                        enforced, iterations, work)):
            self._buffer[name].append(np.array(value))

    def discard(self, count: int) -> None:
        """Drop the last ``count`` buffered (not yet flushed) steps, to append them anew."""
        if not 0 <= count <= len(self._buffer["q"]):
            raise ValueError(f"cannot discard {count} of {len(self._buffer['q'])} buffered "
                             f"steps")
        for values in self._buffer.values():
            del values[len(values) - count:]

    def flush(self, solver_state: dict, events: dict | None = None) -> None:
        """Write the buffered steps and the solver's warm-start state; ``events`` holds the
        refinements and restarts of these steps (see :data:`EVENTS`)."""
        count = len(self._buffer["q"])
        if count == 0:
            return
        index = self.manifest["chunk_count"] + 1
        name = f"chunk_{index:06d}.npz"
        temporary = self.directory / (name + ".tmp")
        rows = {key: np.asarray((events or {}).get(key, ()), dtype=np.int64).reshape(-1, width)
                for key, width in EVENTS.items()}
        with open(temporary, "wb") as handle:
            np.savez(handle, **{k: np.stack(v) for k, v in self._buffer.items()}, **rows)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.directory / name)
        record = {"file": name, "steps": count, "sha256": sha256(self.directory / name)}
        with open(self.directory / CHUNK_LOG, "a") as log:  # the manifest counts it next
            log.write(json.dumps(record) + "\n")
            log.flush()
            os.fsync(log.fileno())
        # the solver's state after this chunk, in its own file (it may hold a Newton matrix):
        # written before the manifest names it, the previous one removed after
        checkpoint = f"checkpoint_{index:06d}.npz"
        temporary = self.directory / (checkpoint + ".tmp")
        with open(temporary, "wb") as handle:
            np.savez(handle, **{k: np.asarray(v) for k, v in solver_state.items()})
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.directory / checkpoint)
        previous = self.manifest.get("checkpoint")
        self.manifest.pop("solver_state", None)
        self.manifest.update(chunk_count=index, checkpoint=checkpoint,
                             checkpoint_sha256=sha256(self.directory / checkpoint))
        self.manifest["steps_done"] += count
        _write_manifest(self.directory, self.manifest)
        self._buffer = {name: [] for name in ARRAYS}  # written: never to be written again
        if previous and previous != checkpoint:
            with contextlib.suppress(OSError):  # a stale checkpoint costs disk space only
                (self.directory / previous).unlink(missing_ok=True)

    def finish(self, end_time: float) -> None:
        """Mark the run complete, its last node at ``end_time``; pack into a single .npz when
        that was asked for."""
        self.manifest["completed"] = True
        self.manifest["end_time"] = end_time
        _write_manifest(self.directory, self.manifest)
        if self.directory != self.path:  # packed at the end (an .npz name)
            state = read_solver_state(self.directory, self.manifest)
            temporary = self.path.with_name(self.path.name + ".tmp")
            # the solver state has no zip-level protection against a member removed or
            # replaced by a valid one: its digest goes into the packed manifest
            packed = dict(self.manifest, state_sha256=state_digest(state))
            self._pack(temporary, packed, state)
            os.replace(temporary, self.path)
            # renamed first, so that a deletion cut short leaves no stream beside the file
            removed = self.directory.with_name(self.directory.name + ".removed")
            if removed.exists():  # left by a deletion cut short before
                shutil.rmtree(removed, ignore_errors=True)
            os.replace(self.directory, removed)
            shutil.rmtree(removed, ignore_errors=True)


    def _pack(self, target: Path, manifest: dict, state: dict) -> None:
        """Write the stream as one .npz file (the members np.savez writes), array by array
        and chunk by chunk: memory stays that of one chunk however long the run."""
        directory, records = self.directory, _chunk_records(self.directory, self.manifest)
        n, m = manifest["n"], manifest["m"]
        for chunk in records:
            file = directory / chunk["file"]
            if "sha256" in chunk and sha256(file) != chunk["sha256"]:
                raise ModelError(f"{file}: its contents do not match the checksum in the "
                                 f"manifest (damaged or replaced)")
        q0, p0 = _initial_state(directory, self.manifest)
        tails = {"q": (n,), "p": (n,), "scheme_velocities": (n,), "multipliers": (m,),
                 "velocity_multipliers": (m,), "enforced_residuals": (2,),
                 "newton_iterations": (), "step_work": (),
                 **{name: (width,) for name, width in EVENTS.items()}}
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            def write(name: str, array: np.ndarray) -> None:
                with archive.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)

            write("manifest", np.asarray(json.dumps(manifest)))
            steps = sum(chunk["steps"] for chunk in records)
            for name, tail in tails.items():
                parts = self._chunk_parts(records, name, tail)
                if name in EVENTS:  # few rows: counted before the header is written
                    parts = list(parts)
                rows = (sum(part.shape[0] for part in parts) if name in EVENTS
                        else steps + (name in ("q", "p")))
                dtype = np.dtype(np.int64 if name in (*EVENTS, "newton_iterations")
                                 else np.float64)
                with archive.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array_header_2_0(member, {
                        "descr": np.lib.format.dtype_to_descr(dtype),
                        "fortran_order": False, "shape": (rows, *tail)})
                    if name in ("q", "p"):
                        member.write(np.asarray(q0 if name == "q" else p0, dtype).tobytes())
                    for part in parts:
                        member.write(np.ascontiguousarray(part, dtype).tobytes())
            for key, value in state.items():
                write(CHECKPOINT_PREFIX + key, value)

    def _chunk_parts(self, records: list, name: str, tail: tuple):
        """The array ``name`` of every chunk, one chunk in memory at a time."""
        n, m = self.manifest["n"], self.manifest["m"]
        for chunk in records:
            file = self.directory / chunk["file"]
            with open_archive(file, _chunk_bytes(chunk["steps"], n, m)) as archive:
                if name in EVENTS:
                    array = _events(archive, chunk["steps"], file)[name]
                elif name in archive.files:
                    array = archive[name]
                else:  # written without work
                    array = np.zeros(chunk["steps"])
            if name not in EVENTS and (array.shape != (chunk["steps"], *tail)
                                       or array.dtype.kind not in "biuf"):
                raise ModelError(f"{file}: {name} has shape {array.shape} ({array.dtype}), "
                                 f"the manifest implies {(chunk['steps'], *tail)}; the stream "
                                 f"is damaged")
            yield array


def read_stream(path: str | os.PathLike) -> dict:
    """Arrays of every flushed step of a stream (directory or packed .npz).

    Returns a dict with ``manifest`` and the arrays ``q``, ``p`` (steps + 1 rows, including the
    initial state) and the per-step arrays (steps rows). The manifest is checked before any
    chunk is opened: chunk files are named ``chunk_000001.npz`` ... in order inside the
    stream's directory, each with its recorded SHA-256 and no more bytes than its steps
    need; a damaged, truncated or crafted stream raises :class:`~mbs.errors.ModelError`.
    """
    path = Path(path)
    if is_packed(path):
        with open_archive(path) as archive:
            if "manifest" not in archive.files:
                raise ModelError(f"{path}: not a packed mbs stream (no manifest)")
            manifest = load_json(str(archive["manifest"]), path)
            steps = _check_manifest(manifest, path)
            out = {"manifest": manifest}
            for name in ("q", "p", *ARRAYS[2:]):
                if name in archive.files:
                    out[name] = archive[name]
                elif name != "step_work":
                    raise ModelError(f"{path}: the array {name!r} is missing")
            out.setdefault("step_work", np.zeros(out["q"].shape[0] - 1))
            _check_shapes(out, manifest, steps + 1, path)
            out.update(_events(archive, steps, path))
            return out
    directory = stream_directory(path) if not path.is_dir() else path
    manifest = _read_manifest(directory)
    records = _chunk_records(directory, manifest)
    n, m = manifest["n"], manifest["m"]
    q0, p0 = _initial_state(directory, manifest)
    tails = {"q": (n,), "p": (n,), "scheme_velocities": (n,), "multipliers": (m,),
             "velocity_multipliers": (m,), "enforced_residuals": (2,),
             "newton_iterations": (), "step_work": ()}
    parts: dict[str, list] = {name: [] for name in (*ARRAYS, *EVENTS)}
    for chunk in records:
        file = directory / chunk["file"]
        if "sha256" in chunk and sha256(file) != chunk["sha256"]:
            raise ModelError(f"{file}: its contents do not match the checksum in the "
                             f"manifest (damaged or replaced)")
        with open_archive(file, _chunk_bytes(chunk["steps"], n, m)) as archive:
            for name in ARRAYS:
                array = (archive[name] if name in archive.files
                         else np.zeros(chunk["steps"]))  # written without work
                if array.shape != (chunk["steps"], *tails[name]):
                    raise ModelError(f"{file}: {name} has shape {array.shape}, the manifest "
                                     f"implies {(chunk['steps'], *tails[name])}; the stream "
                                     f"is damaged")
                parts[name].append(array)
            for name, rows in _events(archive, chunk["steps"], file).items():
                parts[name].append(rows)
    out = {"manifest": manifest}
    for name in ARRAYS:
        out[name] = (np.concatenate(parts[name]) if parts[name]
                     else np.zeros((0, *tails[name])))
    for name, width in EVENTS.items():
        out[name] = np.concatenate(parts[name]) if parts[name] else np.zeros((0, width), int)
    out["q"] = np.vstack([np.reshape(q0, (1, -1)), out["q"].reshape(-1, n)])
    out["p"] = np.vstack([np.reshape(p0, (1, -1)), out["p"].reshape(-1, n)])
    _check_shapes(out, manifest, manifest["steps_done"] + 1, directory)
    return out


def read_last_state(path: str | os.PathLike) -> tuple[int, np.ndarray, np.ndarray, dict]:
    """(steps done, q, p, manifest) of a stream's last flushed state, reading only the
    manifest, the chunk log and the last chunk (or the initial state): what resuming needs,
    whatever the stream's length."""
    path = Path(path)
    if is_packed(path):
        data = read_stream(path)
        return data["q"].shape[0] - 1, data["q"][-1], data["p"][-1], data["manifest"]
    directory = stream_directory(path) if not path.is_dir() else path
    manifest = _read_manifest(directory)
    records = _chunk_records(directory, manifest)
    n, m = manifest["n"], manifest["m"]
    if not records or records[-1]["steps"] == 0:
        q, p = _initial_state(directory, manifest)
    else:
        last = records[-1]
        file = directory / last["file"]
        if "sha256" in last and sha256(file) != last["sha256"]:
            raise ModelError(f"{file}: its contents do not match the checksum in the "
                             f"manifest (damaged or replaced)")
        with open_archive(file, _chunk_bytes(last["steps"], n, m)) as archive:
            q, p = archive["q"][-1], archive["p"][-1]
    if np.shape(q) != (n,) or np.shape(p) != (n,):
        raise ModelError(f"{directory}: the last state has shapes {np.shape(q)}, "
                         f"{np.shape(p)}, the manifest implies ({n},)")
    return manifest["steps_done"], q, p, manifest


def check_chunks(path: str | os.PathLike) -> None:
    """Check the initial state and every chunk of a stream directory against their checksums
    in the manifest, without loading the chunks (a packed stream is checked whole when it is
    read): a stream about to be continued must read back at its end, so a damaged file is
    an error before the run, not after it."""
    path = Path(path)
    if is_packed(path):
        return
    directory = stream_directory(path) if not path.is_dir() else path
    manifest = _read_manifest(directory)
    _initial_state(directory, manifest)
    for chunk in _chunk_records(directory, manifest):
        file = directory / chunk["file"]
        if "sha256" in chunk and sha256(file) != chunk["sha256"]:
            raise ModelError(f"{file}: its contents do not match the checksum in the "
                             f"manifest (damaged or replaced); the stream cannot be continued: "
                             f"start a new run")


def read_solver_state(path: str | os.PathLike, manifest: dict) -> dict:
    """The solver's state after the last flushed step (see :meth:`mbs.solvers.Solver.
    checkpoint`): from the manifest (version 1), the checkpoint file it names, or the
    members of a packed stream."""
    path = Path(path)
    if "solver_state" in manifest:
        state = manifest["solver_state"]
        if not isinstance(state, dict):
            raise ModelError(f"{path}: manifest field 'solver_state' must be an object")
        return _numeric_state(state, path)
    name = manifest.get("checkpoint")
    if name is not None and (not isinstance(name, str)
                             or not re.fullmatch(r"checkpoint_\d{6,}\.npz", name)):
        raise ModelError(f"{path}: manifest field 'checkpoint' must name a checkpoint file "
                         f"of the stream, got {name!r}")
    if is_packed(path):
        with open_archive(path) as archive:
            state = _numeric_state({k[len(CHECKPOINT_PREFIX):]: archive[k]
                                    for k in archive.files if k.startswith(CHECKPOINT_PREFIX)},
                                   path)
        if "state_sha256" in manifest and state_digest(state) != manifest["state_sha256"]:
            raise ModelError(f"{path}: the solver state does not match the checksum in the "
                             f"manifest (damaged or replaced)")
        return state
    if name is None:
        if "checkpoint_sha256" in manifest:
            raise ModelError(f"{path}: the manifest records the checksum of a checkpoint but "
                             f"names none; the stream is damaged")
        return {}
    directory = stream_directory(path) if not path.is_dir() else path
    file = directory / name
    if "checkpoint_sha256" in manifest and sha256(file) != manifest["checkpoint_sha256"]:
        raise ModelError(f"{file}: its contents do not match the checksum in the manifest "
                         f"(damaged or replaced)")
    with open_archive(file) as archive:
        return _numeric_state({k: archive[k] for k in archive.files}, file)


def state_digest(state: dict) -> str:
    """SHA-256 of a solver state: its entries' names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for key in sorted(state):
        array = np.ascontiguousarray(state[key])
        digest.update(json.dumps([key, array.dtype.str, list(array.shape)]).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _numeric_state(state: dict, where) -> dict:
    """The solver state as arrays of numbers (solvers write nothing else): a crafted entry
    (text, nested objects, ragged lists) is refused here rather than failing in the solver."""
    out = {}
    for key, value in state.items():
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):
            array = None
        if array is None or array.dtype.kind not in "biuf":
            raise ModelError(f"{where}: solver state entry {key!r} is not an array of "
                             f"numbers; the stream is damaged or was not written by mbs")
        out[key] = array
    return out


def _initial_state(directory: Path, manifest: dict) -> tuple[np.ndarray, np.ndarray]:
    """q0 and p0 of a stream directory, checked against the manifest's checksum (streams
    written before it was recorded have none) and size."""
    file, n = directory / INITIAL, manifest["n"]
    if "initial_sha256" in manifest and sha256(file) != manifest["initial_sha256"]:
        raise ModelError(f"{file}: its contents do not match the checksum in the manifest "
                         f"(damaged or replaced)")
    with open_archive(file, 2 * n * 8 + 4096) as initial:
        q0, p0 = initial["q"], initial["p"]
    if q0.shape != (n,) or p0.shape != (n,) or q0.dtype.kind != "f" or p0.dtype.kind != "f":
        raise ModelError(f"{file}: the initial state has shapes {q0.shape}, {p0.shape} "
                         f"({q0.dtype}, {p0.dtype}); the manifest implies ({n},) floats")
    return q0, p0


def _as_float(value: int | float) -> float:
    """``float(value)``, infinite for integers beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _chunk_bytes(steps: int, n: int, m: int) -> int:
    """The most bytes a chunk of ``steps`` steps holds (its arrays and their headers)."""
    return (8 * steps * (3 * n + 2 * m + 4 + sum(EVENTS.values()))
            + 4096 * (len(ARRAYS) + len(EVENTS)))


def _events(archive, steps: int, where) -> dict:
    """The refinements and restarts an archive holds (none in streams written without
    them): integer rows, at most one of each kind per step."""
    out = {}
    for name, width in EVENTS.items():
        rows = archive[name] if name in archive.files else np.zeros((0, width), np.int64)
        if (rows.ndim != 2 or rows.shape[1] != width or rows.shape[0] > max(steps, 0)
                or rows.dtype.kind not in "iu"):
            raise ModelError(f"{where}: {name} has shape {rows.shape} ({rows.dtype}), not "
                             f"integer rows of {width}; the stream is damaged")
        out[name] = rows
    return out


def _check_shapes(out: dict, manifest: dict, rows: int, where) -> None:
    n, m = manifest["n"], manifest["m"]
    expected = {"q": (rows, n), "p": (rows, n), "scheme_velocities": (rows - 1, n),
                "multipliers": (rows - 1, m), "velocity_multipliers": (rows - 1, m),
                "enforced_residuals": (rows - 1, 2), "newton_iterations": (rows - 1,),
                "step_work": (rows - 1,)}
    for name, shape in expected.items():
        if np.shape(out[name]) != shape:
            raise ModelError(f"{where}: {name} has shape {np.shape(out[name])}, the manifest "
                             f"implies {shape}; the stream is damaged")
        if np.asarray(out[name]).dtype.kind not in "biuf":
            raise ModelError(f"{where}: {name} holds {np.asarray(out[name]).dtype} values, "
                             f"not numbers; the stream is damaged")


def _read_manifest(directory: Path) -> dict:
    file = directory / "manifest.json"
    if not file.is_file():
        raise ModelError(f"{directory} is not an mbs output stream (no manifest.json); nothing "
                         f"was flushed yet or the path is wrong")
    manifest = load_json(read_text(file), file)
    _check_manifest(manifest, directory)
    return manifest


def _check_manifest(manifest, where) -> int:
    """Validate a manifest's fields; returns the number of steps done."""
    if not isinstance(manifest, dict):
        raise ModelError(f"{where}: the manifest is not a JSON object")
    if (manifest.get("format") != FORMAT
            or manifest.get("version") not in READABLE_VERSIONS):
        raise ModelError(f"{where}: not an mbs stream of a version this mbs reads "
                         f"{READABLE_VERSIONS} (format {manifest.get('format')!r}, version "
                         f"{manifest.get('version')!r})")
    for key in ("n", "m", "steps_done"):
        value = manifest.get(key)
        if (isinstance(value, bool) or not isinstance(value, int)
                or not 0 <= value <= MAX_COUNT):
            raise ModelError(f"{where}: manifest field {key!r} must be a non-negative "
                             f"integer (at most {MAX_COUNT}), got {value!r}")
    return manifest["steps_done"]


def _chunk_records(directory: Path, manifest: dict) -> list:
    """The manifest's chunks (version 1: its list; version 2: the first ``chunk_count``
    lines of the chunk log, a line written before a crash beyond them ignored), checked to
    be ``chunk_000001.npz`` ... in order, with step counts adding up to ``steps_done``."""
    if manifest["version"] == 1:
        chunks = manifest.get("chunks")
        if not isinstance(chunks, list):
            raise ModelError(f"{directory}: manifest field 'chunks' must be a list")
    else:
        count = manifest.get("chunk_count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ModelError(f"{directory}: manifest field 'chunk_count' must be a "
                             f"non-negative integer, got {count!r}")
        log = directory / CHUNK_LOG
        if count and not log.is_file():
            raise ModelError(f"{directory}: the chunk log {CHUNK_LOG} is missing")
        chunks = [load_json(line, log) for line in read_lines(log, count)] if count else []
        if len(chunks) != count:
            raise ModelError(f"{log}: {len(chunks)} chunks listed, the manifest counts "
                             f"{count}")
    total = 0
    for index, chunk in enumerate(chunks, start=1):
        expected = f"chunk_{index:06d}.npz"  # in order, inside the directory, no repeats
        if not isinstance(chunk, dict) or chunk.get("file") != expected:
            raise ModelError(f"{directory}: manifest chunk {index} must be {expected!r}, got "
                             f"{chunk!r}")
        steps = chunk.get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ModelError(f"{directory}: manifest chunk {index} has steps = {steps!r}")
        total += steps
    if total != manifest["steps_done"]:
        raise ModelError(f"{directory}: the chunks hold {total} steps, the manifest says "
                         f"{manifest['steps_done']}")
    return chunks


def _upgrade(directory: Path, manifest: dict, records: list) -> None:
    """Bring a stream being resumed to the current layout: the chunk log holds exactly the
    counted chunks (a line of a crashed flush dropped), version 1's list moves to the log."""
    (directory / CHUNK_LOG).write_text("".join(json.dumps(r) + "\n" for r in records))
    manifest.pop("chunks", None)
    manifest.update(version=VERSION, chunk_count=len(records))


def _write_manifest(directory: Path, manifest: dict) -> None:
    temporary = directory / "manifest.json.tmp"
    temporary.write_text(json.dumps(manifest))
    os.replace(temporary, directory / "manifest.json")


#: Solver fields that choose how the step equations are solved, not which equations: a run
#: may be resumed with other values of them.
ENGINE_OPTIONS = ("newton", "initial_guess", "backend", "predictor_correction")


def solver_options_digest(solver) -> dict:
    """A digest of each field of ``solver`` that defines its scheme (a composed scheme's base
    scheme field by field): a resumed run must continue the scheme that wrote the stream."""
    out = {}
    for item in fields(solver) if is_dataclass(solver) else ():
        if not item.init or item.name in ENGINE_OPTIONS:
            continue
        value = getattr(solver, item.name, None)
        if is_dataclass(value) and hasattr(value, "properties"):  # a base scheme
            out.update({f"{item.name}.{key}": digest
                        for key, digest in solver_options_digest(value).items()})
        else:
            out[item.name] = hashlib.sha256(repr(value).encode()).hexdigest()[:16]
    return out


def model_digest(model) -> str:
    """A digest of the model's parameters (see :func:`model_digest_parts`), so that a stream
    is resumed, and a saved solution loaded, with the model it was written for."""
    return _digests(model)[0]


def model_matches(model, digest: str, parts) -> bool:
    """Whether ``model`` has the stored ``digest``; files written without digests of the
    parts (``parts`` None) predate the applied forces in the digest and are compared without
    them."""
    whole, _, without_forces = _digests(model)
    return digest == (whole if isinstance(parts, dict) else without_forces)


def model_digest_parts(model) -> dict[str, str]:
    """Digests of the parts of a model: "masses" (the mass matrix), "gravity",
    "constraints" (their quadratic table), "potentials" (tables and numeric parameters),
    "applied forces" (loads, dampers and actuators: their coordinates, geometry, constants
    and damping coefficients) and "elements" (the kinds of bodies, joints and forces). No user
    function is called (they may be costly or have effects), so what a function computes is
    not in them; whether a value is a function or a constant is."""
    return _digests(model)[1]


def model_differences(model, stored_parts) -> str:
    """The parts of ``model`` whose digests differ from ``stored_parts`` (as written by
    :func:`model_digest_parts`), for error messages; a generic list when none are stored."""
    if not isinstance(stored_parts, dict):
        return "masses, gravity, forces or joints"
    parts = model_digest_parts(model)
    differing = [name for name in parts if stored_parts.get(name) != parts[name]]
    return ", ".join(differing) or "masses, gravity, forces or joints"


def _digests(model) -> tuple[str, dict[str, str], str]:
    """(digest of the whole model, digests of its parts, digest of the whole without the
    applied forces); the whole is that of the parts' bytes in sequence (the applied forces
    only where the model has some)."""
    whole = hashlib.sha256()
    parts: dict = {}
    current = [None]

    def part(name: str) -> None:
        current[0] = parts[name] = hashlib.sha256()

    def update(data: bytes) -> None:
        whole.update(data)
        current[0].update(data)

    def add(*arrays) -> None:
        for array in arrays:
            update(np.ascontiguousarray(np.asarray(array, dtype=float)).tobytes())

    def add_table(table) -> None:
        if table is not None:
            add(table.quad_row, table.quad_i, table.quad_j, table.quad_coef, table.lin_row,
                table.lin_i, table.lin_coef, table.constant)

    part("masses")
    mass = model.mass_matrix.tocsr()
    add(mass.indptr, mass.indices, mass.data)
    part("gravity")
    add(np.zeros(3) if model.gravity is None else model.gravity)
    part("constraints")
    add_table(model.quadratic_constraint_table)
    part("potentials")
    for group in model.potential_groups:
        update(type(group.term).__name__.encode() + type(group).__name__.encode())
        update(getattr(group.term, "__name__", "").encode())
        add_table(group.table)
        for key in sorted(group.params):
            value = group.params[key]
            if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                update(key.encode())
                add(value)
    part("elements")
    # kinds, not names: unnamed elements are numbered per process
    for info in (*model.bodies, *model.joints, *model.forces):
        update(f"{type(info).__name__}:{getattr(info, 'kind', '')};".encode())
    without_forces = whole.copy().hexdigest()[:32]
    part("applied forces")
    applied = getattr(model, "applied_forces", None)
    for term in applied.terms if applied is not None else ():
        update(type(term).__name__.encode())
        _add_parameters(vars(term), update, add)
    return (whole.hexdigest()[:32], {name: h.hexdigest()[:32] for name, h in parts.items()},
            without_forces)


def _add_parameters(attributes: dict, update: Callable, add: Callable, depth: int = 0) -> None:
    """Feed the numeric parameters among an applied term's ``attributes`` to the digest: its
    arrays, numbers and constant values, one level into the objects holding them (its
    coordinates, its law, a load's value); a user function or callable object counts by its
    presence only."""
    for key in sorted(attributes):
        value = attributes[key]
        if key == "name" or key.startswith("_"):
            continue  # names are numbered per process; caches
        if isinstance(value, (bool, int, float, np.ndarray)) and (
                not isinstance(value, np.ndarray) or value.dtype.kind in "biuf"):
            update(key.encode())
            add(np.asarray(value, dtype=float).ravel())
        elif isinstance(value, (tuple, list)):
            _add_parameters({f"{key}.{k}": item for k, item in enumerate(value)}, update, add,
                            depth)
        elif isinstance(value, dict):
            _add_parameters({f"{key}.{k}": item for k, item in value.items()}, update, add,
                            depth)
        elif isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or (
                callable(value) and not type(value).__module__.startswith("mbs.")):
            # a user's callable object counts as a function: its attributes are its own
            # state (a counter, a cache), which changes as the run calls it
            update(f"{key}:function".encode())
        elif hasattr(value, "__dict__") and depth < 2:
            update(f"{key}:{type(value).__name__}".encode())
            _add_parameters(vars(value), update, add, depth + 1)
        elif value is not None:
            update(f"{key}:{type(value).__name__}".encode())


def load_stream(path: str | os.PathLike, model):
    """A :class:`~mbs.solution.Solution` of every flushed step of the stream at ``path``.

    ``model`` must be the compiled model the stream was written for (checked by size and
    by the digest of its parameters, :func:`model_digest`).
    """
    data = read_stream(path)
    manifest = data["manifest"]
    for key in ("h", "t_start"):
        value = manifest.get(key)
        number = (_as_float(value) if isinstance(value, (int, float))
                  and not isinstance(value, bool) else math.nan)
        if not math.isfinite(number) or (key == "h" and number <= 0):
            raise ModelError(f"{path}: manifest field {key!r} must be a finite "
                             f"{'positive ' if key == 'h' else ''}number, got {value!r}")
    if not isinstance(manifest.get("solver"), str):
        raise ModelError(f"{path}: manifest field 'solver' must be a solver name, got "
                         f"{manifest.get('solver')!r}")
    if manifest["n"] != model.n or manifest["m"] != model.m:
        raise ModelError(f"{path}: stream has n = {manifest['n']}, m = {manifest['m']}, the "
                         f"model n = {model.n}, m = {model.m}")
    if "model_digest" in manifest and not model_matches(model, manifest["model_digest"],
                                                        manifest.get("model_parts")):
        raise ModelError(f"{path}: the model differs from the one the stream was written for "
                         f"({model_differences(model, manifest.get('model_parts'))}); give "
                         f"the model of the run that wrote it")
    steps = data["q"].shape[0] - 1
    completed = bool(manifest.get("completed", False))
    end = manifest.get("end_time") if completed else None
    times = node_times(float(manifest["t_start"]), float(manifest["h"]), 0, steps,
                       None if end is None else float(end))
    return Solution(
        model=model, t=times, q=data["q"], p=data["p"],
        scheme_velocities=data["scheme_velocities"],
        multipliers=data["multipliers"], velocity_multipliers=data["velocity_multipliers"],
        enforced_residuals=data["enforced_residuals"], step_work=data["step_work"],
        stats={"solver": manifest["solver"], "h": manifest["h"], "steps": steps,
               "newton_iterations": data["newton_iterations"],
               "completed": completed,
               **{name: [tuple(int(v) for v in row) for row in data[name]]
                  for name in EVENTS},
               **_run_rules_of(manifest)},
        solver_properties=_solver_properties(manifest))


def run_rules(solver) -> dict:
    """How a Solution reads the arrays of ``solver``'s run: the drives' work and reactions
    (the stats ``drive_work_in_steps`` and ``drive_effort``), and how many steps of a base
    scheme each step takes (``sub_steps``: a composition's Newton iterations per step are
    summed over them)."""
    return {"drive_work_in_steps": bool(getattr(solver, "reports_drive_work", False)),
            "drive_effort": getattr(solver, "drive_effort", "multiplier"),
            "sub_steps": int(getattr(solver, "sub_steps", 1))}


def _run_rules_of(manifest: dict) -> dict:
    """:func:`run_rules` of the run: stored with the stream, or those of the solver it names
    (for streams written without them)."""
    keys = ("drive_work_in_steps", "drive_effort", "sub_steps")
    stored = {key: manifest[key] for key in keys if key in manifest}
    if len(stored) == len(keys):
        return stored
    try:
        solver = make_solver(manifest["solver"])
    except MbsError:
        return stored
    return {**run_rules(solver), **stored}


def _solver_properties(manifest: dict):
    """The properties stored with the stream, or those of the solver it names (None when
    neither is available, e.g. a stream of another mbs version's composed scheme)."""
    stored = manifest.get("solver_properties")
    if isinstance(stored, dict):
        try:
            return SchemeProperties(**stored)
        except TypeError:
            pass
    try:
        return make_solver(manifest["solver"]).properties
    except MbsError:
        return None
