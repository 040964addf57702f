"""Fault injection, property-based: whatever fails during a run or in its files, mbs either
succeeds or raises an mbs error, keeps every step done before the failure and, when
streaming, leaves them on disk for the public reader.

Faults are injected through the public API only: loads and a user potential whose functions
raise, return NaN, inf, a wrong shape or text, or raise KeyboardInterrupt at a chosen time or
state; step sizes too large for Newton's method; a stream directory that stops accepting
chunks in the middle of the run; and, after runs, damaged and crafted stream directories,
packed streams and solution files opened with the public readers.

Generated cases (derandomized; each test counts the cases it ran and checks the count):

    runs with an injected failure                  RUN_EXAMPLES       = 450
    corrupted stream directories                   DIRECTORY_EXAMPLES = 330
    corrupted packed streams                       PACKED_EXAMPLES    = 100
    corrupted or crafted solution files            SOLUTION_EXAMPLES  = 250
    total                                                               1130

The tests at the end pin single scenarios: a fault inside a refined step, the stream
directory removed mid-run, a crafted checkpoint, a potential failing only in the final energy
check.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mbs
from mbs.forces import Load, SquaredDistance, UserPotential
from mbs.streaming import load_stream, read_last_state, read_stream

RUN_EXAMPLES = 450
DIRECTORY_EXAMPLES = 330
PACKED_EXAMPLES = 100
SOLUTION_EXAMPLES = 250
#: Cases each test ran, filled by the generated examples themselves.
CASES: Counter = Counter()


def hypothesis_settings(examples: int):
    """Reproducible examples (the same on every run), no time limit per example."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# -- the injector -----------------------------------------------------------------------------
class Fault:
    """What the models' user functions do: nothing until armed, then the armed ``kind`` once
    the time (loads) reaches ``at`` or the squared distance (potential) drops below ``below``.
    ``triggered`` keeps the first time at which a load fault fired."""

    KINDS = ("raise", "nan", "inf", "shape", "text", "interrupt", "block")

    def __init__(self):
        self.disarm()

    def disarm(self) -> None:
        self.kind: str | None = None
        self.at = self.below = np.inf
        self.triggered: float | None = None
        self.stream: Path | None = None

    def force(self, t: float):
        if self.kind is None or t < self.at:
            return np.zeros(3)
        if self.triggered is None:
            self.triggered = t
        if self.kind == "block":  # the stream stops accepting chunks; the run goes on
            self._block()
            return np.zeros(3)
        return self._misbehave(3)

    def energy(self, squared_distance: float) -> float:
        if self.kind is not None and squared_distance < self.below:
            self._misbehave(1)  # raises for "raise" and "interrupt"
            return np.nan
        return 0.5 * 10.0 * (np.sqrt(squared_distance) - 1.0) ** 2

    def _misbehave(self, size: int):
        if self.kind == "raise":
            raise ArithmeticError("injected failure")
        if self.kind == "interrupt":
            raise KeyboardInterrupt
        return {"nan": np.full(size, np.nan), "inf": np.full(size, -np.inf),
                "shape": np.zeros(size + 1), "text": "thrust"}[self.kind]

    def _block(self) -> None:
        """Directories where the next chunks would go: their writes then fail."""
        directory = self.stream
        if directory is None or not directory.is_dir():
            return
        for index in range(1, 40):
            chunk = directory / f"chunk_{index:06d}.npz"
            if not chunk.exists():
                chunk.mkdir()
        self.stream = None


FAULT = Fault()


# -- models (compiled once) -------------------------------------------------------------------
def spring_model() -> mbs.Model:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(0.5, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, bob, 40.0, point_a=(0, 0, 0), rest_length=0.8,
                                 name="spring"))
    system.add(Load(bob, force=FAULT.force, name="push"))
    return system.compile()


def pendulum_model() -> mbs.Model:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    system.add(Load(bob, force=lambda t, state: FAULT.force(t), name="push"))
    return system.compile()


def top_model() -> mbs.Model:
    import heavy_top

    system = heavy_top.build()
    system.add(Load(system["top"], torque=FAULT.force, name="twist"))
    return system.compile()


def well_model() -> mbs.Model:
    """A bead circling in the user potential 'well' of its squared distance r^2 from the
    origin; r^2 falls from 2.25 over the first steps."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.5, 0.0, 0.0), velocity=(0.0, 2.0, 0.0))
    system.add(UserPotential([SquaredDistance(system.ground, bob, point_a=(0, 0, 0))],
                             lambda pi: FAULT.energy(pi[0]), name="well"))
    return system.compile()


BUILDERS = {"spring": spring_model, "pendulum": pendulum_model, "top": top_model,
            "well": well_model}
SOLVERS = ("em", "rattle", "ggl-vi-a", "ggl-vi-s", "ggl-vi-b", "lobatto", "hbvm")
#: The heavy top's steps cost 50-120 ms with the other schemes (measured; loads make every
#: Newton iteration assemble their derivatives), too many for a fast suite.
TOP_SOLVERS = ("em", "rattle", "ggl-vi-a")
#: (on_failure, max_refinements) pairs: the count is irrelevant without refinement.
FAILURE_POLICIES = (("raise", 0), ("refine", 1), ("refine", 2))


def step_cap(name: str, solver: str) -> int:
    """Steps of the references; generated runs take at most as many (fewer for the schemes
    whose steps cost 10-25 ms on the small models and for the rigid top)."""
    return 5 if name == "top" or solver in ("lobatto", "hbvm") else 10


@cache
def model(name: str) -> mbs.Model:
    return BUILDERS[name]()


def quietly(function, *args, **kwargs):
    """Call ``function`` with the stiffness, step and energy warnings of bad step sizes off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def outcome(function, *args, **kwargs) -> tuple[mbs.Solution | None, BaseException | None]:
    """(solution, None) or (None, error) of a call that must not raise a foreign exception;
    KeyboardInterrupt is caught too, since a SimulationInterrupted is one."""
    try:
        return quietly(function, *args, **kwargs), None
    except mbs.MbsError as error:
        return None, error
    except BaseException as error:  # noqa: BLE001 - reported as the failure it is
        pytest.fail(f"foreign exception {type(error).__name__}: {error}")


@cache
def reference(name: str, solver: str, h: float, on_failure: str, refinements: int
              ) -> mbs.Solution:
    """The fault-free run of ``step_cap`` steps, or the steps before its own solver failure
    (too large a step): every run with the same settings repeats it bitwise up to its
    failure."""
    FAULT.disarm()
    solution, error = outcome(mbs.simulate, model(name), solver, h=h,
                              t_end=step_cap(name, solver) * h, on_failure=on_failure,
                              max_refinements=refinements)
    if error is not None:
        assert isinstance(error, mbs.SolverError), error
        return error.solution
    return solution


def assert_same_steps(solution: mbs.Solution, expected: mbs.Solution, rows: int) -> None:
    np.testing.assert_array_equal(solution.t[:rows], expected.t[:rows])
    np.testing.assert_array_equal(solution.q[:rows], expected.q[:rows])
    np.testing.assert_array_equal(solution.p[:rows], expected.p[:rows])


# -- runs with an injected failure --------------------------------------------------------------
@dataclass(frozen=True)
class RunCase:
    model: str
    solver: str
    h: float
    steps: int
    on_failure: str
    refinements: int
    kind: str | None
    when: float  # fraction of the run at which the fault fires (loads), or of r^2's fall
    output: str | None  # None, "directory" or "packed"
    flush_every: int
    resume: bool


@st.composite
def run_cases(draw) -> RunCase:
    name = draw(st.sampled_from(sorted(BUILDERS)))
    solver = draw(st.sampled_from(TOP_SOLVERS if name == "top" else SOLVERS))
    if name == "well":
        kind = draw(st.sampled_from(["raise", "nan", "interrupt", None]))
    else:
        kind = draw(st.sampled_from(Fault.KINDS + (None,)))
    steps_sizes = [0.005, 0.02] if name == "top" else [0.005, 0.02, 0.1, 0.4]
    h = draw(st.sampled_from(steps_sizes))
    output = draw(st.sampled_from([None, "directory", "packed"]))
    if kind == "block" and output is None:
        output = "directory"
    on_failure, refinements = draw(st.sampled_from(FAILURE_POLICIES))
    return RunCase(model=name, solver=solver, h=h,
                   steps=draw(st.integers(1, step_cap(name, solver))),
                   on_failure=on_failure, refinements=refinements, kind=kind,
                   when=draw(st.floats(0.0, 1.2)), output=output,
                   flush_every=draw(st.integers(1, 6)), resume=draw(st.booleans()))


def arm(case: RunCase, stream: Path | None) -> None:
    FAULT.disarm()
    FAULT.kind, FAULT.stream = case.kind, stream
    if case.model == "well":
        # r^2 falls from 2.25 to 1.5 over the first 0.75 s of the fault-free motion
        FAULT.below = 2.25 - 0.75 * case.when * min(1.0, case.steps * case.h / 0.75)
    else:
        FAULT.at = case.when * case.steps * case.h


def check_run(case: RunCase, directory: Path) -> None:
    expected = reference(case.model, case.solver, case.h, case.on_failure, case.refinements)
    path = None if case.output is None else directory / (
        "run.npz" if case.output == "packed" else "run")
    arm(case, None if path is None else mbs.streaming.stream_directory(path))
    options = dict(h=case.h, t_end=case.steps * case.h, on_failure=case.on_failure,
                   max_refinements=case.refinements)
    if path is not None:
        options.update(output=str(path), flush_every=case.flush_every)
    solution, error = outcome(mbs.simulate, model(case.model), case.solver, **options)
    triggered, blocked = FAULT.triggered, case.kind == "block" and FAULT.triggered is not None
    FAULT.disarm()
    if error is not None:
        solution = error.solution
        assert isinstance(solution, mbs.Solution), f"{type(error).__name__} without solution"
    done = solution.t.size - 1
    if isinstance(error, mbs.SolverError) and error.step is not None:
        assert error.step == done
    assert solution.stats["completed"] == (done == case.steps)
    assert done <= case.steps and done <= expected.t.size - 1
    assert_same_steps(solution, expected, done + 1)
    if error is None:
        assert done == case.steps
    elif not blocked and triggered is not None:
        # a fault fires inside the step it stops, never in one already accepted
        tolerance = 1e-12 * case.steps * case.h
        assert done * case.h - tolerance <= triggered <= (done + 1) * case.h + tolerance
    if path is None:
        return
    if error is None and case.output == "packed":
        assert path.is_file() and not mbs.streaming.stream_directory(path).exists()
    disk, disk_error = outcome(load_stream, path, model(case.model))
    assert disk_error is None, disk_error
    if blocked:  # the chunks written before the directory refused more
        assert disk.t.size <= solution.t.size
        assert_same_steps(disk, solution, disk.t.size)
        return
    assert disk.t.size == solution.t.size  # a failure flushes every step it keeps
    assert_same_steps(disk, solution, disk.t.size)
    if error is None or not case.resume:
        return
    # the stream a failure leaves resumes to the fault-free run (also after a fault inside
    # the sub-steps of a refined step)
    resumed, resume_error = outcome(mbs.simulate, model(case.model), case.solver,
                                    resume=str(path), **{k: v for k, v in options.items()
                                                         if k != "output"})
    if resume_error is not None:
        assert isinstance(resume_error, mbs.SolverError), resume_error
        resumed = resume_error.solution
    assert resumed.t.size == min(expected.t.size, case.steps + 1)
    assert_same_steps(resumed, expected, resumed.t.size)


def test_every_injected_failure_keeps_the_steps_done_in_memory_and_on_disk(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")

    @hypothesis_settings(RUN_EXAMPLES)
    @given(case=run_cases())
    def run_with_a_fault(case: RunCase) -> None:
        CASES["runs"] += 1
        check_run(case, Path(tempfile.mkdtemp(dir=root)))

    before = CASES["runs"]
    run_with_a_fault()
    assert CASES["runs"] - before >= RUN_EXAMPLES


# -- corrupted streams --------------------------------------------------------------------------
STREAM_H, STREAM_STEPS, STREAM_FLUSH = 0.01, 9, 3
#: Steps a resumed stream runs to (one more chunk).
RESUMED_STEPS = STREAM_STEPS + STREAM_FLUSH


@cache
def pristine(root: str) -> dict:
    """A stream directory and a packed stream of the pendulum (9 steps in chunks of 3), the
    arrays they hold and the uninterrupted run to RESUMED_STEPS."""
    FAULT.disarm()
    pendulum = model("pendulum")
    directory, packed = Path(root) / "directory", Path(root) / "packed.npz"
    for path in (directory, packed):
        mbs.simulate(pendulum, "em", h=STREAM_H, t_end=STREAM_STEPS * STREAM_H,
                     output=str(path), flush_every=STREAM_FLUSH)
    full = mbs.simulate(pendulum, "em", h=STREAM_H, t_end=RESUMED_STEPS * STREAM_H)
    return {"directory": directory, "packed": packed, "data": read_stream(directory),
            "full": full, "files": sorted(p.name for p in directory.iterdir())}


@cache
def zip_bomb() -> bytes:
    """An .npz whose member 'q.npy' inflates 64 MiB of zeros from ~64 kB."""
    buffer = io.BytesIO()
    with (zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive,
          archive.open("q.npy", "w", force_zip64=True) as member):
        block = b"\0" * 2**20
        for _ in range(64):
            member.write(block)
    return buffer.getvalue()


def damage(path: Path, kind: str, fraction: float, bit: int) -> None:
    """Byte-level damage: cut the file at ``fraction`` of its length, flip ``bit`` of the
    byte there, or replace the file by a zip bomb."""
    content = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(content[:int(fraction * len(content))])
    elif kind == "flip" and content:
        flipped = bytearray(content)
        flipped[min(int(fraction * len(content)), len(content) - 1)] ^= 1 << bit
        path.write_bytes(bytes(flipped))
    elif kind == "bomb":
        path.write_bytes(zip_bomb())


JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from([2**64, -(2**63), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
    st.sampled_from(["../outside.npz", "/etc/passwd", "chunk_000001.npz",
                     "checkpoint_000001.npz", "checkpoint_999999.npz", "mbs-stream", "em",
                     "chunk_000002.npz/../../x"]),
    st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.text(max_size=3),
                                                              st.integers(), max_size=2))


@st.composite
def corruptions(draw, files: list[str]) -> list[tuple]:
    """1-3 operations on the files of a stream directory (a stream given a crafted solver
    state with a consistent checksum is test_a_crafted_checkpoint_gives_an_mbs_error)."""
    operations = []
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from(
            ["truncate", "flip", "delete", "empty", "duplicate", "swap", "manifest", "record",
             "extra-record", "bomb", "directory", "deep-json", "binary"]))
        operations.append((operation, draw(st.sampled_from(files)), draw(st.sampled_from(files)),
                           draw(st.floats(0.0, 1.0)), draw(st.integers(0, 7)),
                           draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1,
                                        max_size=12)
                                | st.sampled_from(["n", "m", "h", "t_start", "solver",
                                                   "version", "format", "steps_done",
                                                   "chunk_count", "checkpoint",
                                                   "checkpoint_sha256", "chunks",
                                                   "completed", "file", "steps",
                                                   "sha256"])),
                           draw(JSON_VALUES)))
    return operations


def corrupt(directory: Path, operation: tuple) -> None:
    kind, name, other, fraction, bit, key, value = operation
    target = directory / name
    if kind == "manifest":
        target, name = directory / "manifest.json", "manifest.json"
    if kind in ("record", "extra-record"):
        target = directory / "chunks.jsonl"
    if not target.is_file():
        return
    content = target.read_bytes()
    if kind in ("truncate", "flip", "bomb"):
        damage(target, kind, fraction, bit)
    elif kind == "delete":
        target.unlink()
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "duplicate" and (directory / other).is_file() and other != name:
        shutil.copyfile(directory / other, target)
    elif kind == "swap" and (directory / other).is_file() and other != name:
        target.write_bytes((directory / other).read_bytes())
        (directory / other).write_bytes(content)
    elif kind == "manifest":
        try:
            manifest = json.loads(content)
        except (ValueError, RecursionError):  # damaged by an earlier operation
            manifest = {}
        if not isinstance(manifest, dict):
            manifest = {}
        manifest[key] = value
        target.write_text(json.dumps(manifest))
    elif kind in ("record", "extra-record"):
        lines = content.decode(errors="replace").splitlines()
        if not lines:
            return
        index = int(fraction * (len(lines) - 1))
        try:
            record = json.loads(lines[index])
        except (ValueError, RecursionError):  # damaged by an earlier operation
            record = {}
        if not isinstance(record, dict):
            record = {}
        record[key] = value
        if kind == "record":
            lines[index] = json.dumps(record)
        else:
            lines.insert(index, json.dumps(record))
        target.write_text("".join(line + "\n" for line in lines))
    elif kind == "directory":
        target.unlink()
        target.mkdir()
    elif kind == "deep-json":
        target.write_text("[" * 5000 + "]" * 5000)
    elif kind == "binary":
        target.write_bytes(bytes(range(256)) * 4)


def check_readers(path: Path, facts: dict) -> None:
    """Every public reader either fails with an mbs error or returns the original run's
    coordinates and momenta (checksummed): a damaged stream never reads back as different
    numbers. A manifest is not checksummed, so an edited but valid ``h`` or ``t_start``
    changes the times a reader reports; a resume then refuses the stream (other h)."""
    pendulum = model("pendulum")
    original, full = facts["data"], facts["full"]
    data, error = outcome(read_stream, path)
    if error is None:
        rows = data["q"].shape[0]
        np.testing.assert_array_equal(data["q"], original["q"][:rows])
        np.testing.assert_array_equal(data["p"], original["p"][:rows])
    solution, error = outcome(load_stream, path, pendulum)
    if error is None:
        rows = solution.t.size
        np.testing.assert_array_equal(solution.q, original["q"][:rows])
        np.testing.assert_array_equal(solution.p, original["p"][:rows])
    last, error = outcome(read_last_state, path)
    if error is None:
        done, q, p, _ = last
        np.testing.assert_array_equal(q, original["q"][done])
        np.testing.assert_array_equal(p, original["p"][done])
    FAULT.disarm()
    resumed, error = outcome(mbs.simulate, pendulum, "em", h=STREAM_H,
                             t_end=RESUMED_STEPS * STREAM_H, resume=str(path),
                             flush_every=STREAM_FLUSH)
    if error is not None and isinstance(error, mbs.SolverError):
        resumed = error.solution  # failed while running: the steps it kept
    if resumed is not None:  # from its first step (the steps in memory when the read-back
        first = resumed.stats["first_step"]  # of a damaged stream fails)
        rows = slice(first, first + resumed.t.size)
        np.testing.assert_array_equal(resumed.t, full.t[rows])
        np.testing.assert_array_equal(resumed.q, full.q[rows])
        np.testing.assert_array_equal(resumed.p, full.p[rows])


def test_corrupted_stream_directories_give_mbs_errors_or_the_original_steps(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    facts = pristine(str(root))

    @hypothesis_settings(DIRECTORY_EXAMPLES)
    @given(operations=corruptions(facts["files"]))
    def corrupted_directory(operations: list[tuple]) -> None:
        CASES["directories"] += 1
        path = Path(tempfile.mkdtemp(dir=root)) / "run"
        shutil.copytree(facts["directory"], path)
        for operation in operations:
            corrupt(path, operation)
        check_readers(path, facts)

    before = CASES["directories"]
    corrupted_directory()
    assert CASES["directories"] - before >= DIRECTORY_EXAMPLES


@st.composite
def packed_corruptions(draw) -> tuple:
    kind = draw(st.sampled_from(["truncate", "flip", "manifest", "member", "bomb",
                                 "drop-member"]))
    return (kind, draw(st.floats(0.0, 1.0)), draw(st.integers(0, 7)),
            draw(st.sampled_from(["n", "m", "h", "solver", "version", "format", "steps_done",
                                  "checkpoint", "t_start", "completed"])),
            draw(JSON_VALUES), draw(st.sampled_from(["q", "p", "multipliers", "step_work",
                                                     "newton_iterations", "manifest",
                                                     "checkpoint.lam"])))


def corrupt_packed(path: Path, operation: tuple) -> None:
    kind, fraction, bit, key, value, member = operation
    if kind in ("truncate", "flip", "bomb"):
        damage(path, kind, fraction, bit)
        return
    try:  # an earlier operation may have damaged the archive beyond reading
        with zipfile.ZipFile(path) as archive:
            arrays = {name[:-len(".npy")]: np.load(io.BytesIO(archive.read(name)))
                      for name in archive.namelist()}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError):
        return
    if kind == "manifest":
        try:
            manifest = json.loads(str(arrays["manifest"]))
        except (KeyError, ValueError, RecursionError):  # removed or damaged earlier
            return
        if not isinstance(manifest, dict):
            return
        manifest[key] = value
        arrays["manifest"] = np.array(json.dumps(manifest))
    elif kind == "member" and member in arrays:
        arrays[member] = np.resize(arrays[member], max(arrays[member].size - 1, 1))
    elif kind == "drop-member":
        arrays.pop(member, None)
    np.savez(path, **arrays)


def test_corrupted_packed_streams_give_mbs_errors_or_the_original_steps(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    facts = pristine(str(root))

    @hypothesis_settings(PACKED_EXAMPLES)
    @given(operations=st.lists(packed_corruptions(), min_size=1, max_size=2))
    def corrupted_packed(operations: list[tuple]) -> None:
        CASES["packed"] += 1
        path = Path(tempfile.mkdtemp(dir=root)) / "run.npz"
        shutil.copyfile(facts["packed"], path)
        for operation in operations:
            corrupt_packed(path, operation)
        check_readers(path, facts)

    before = CASES["packed"]
    corrupted_packed()
    assert CASES["packed"] - before >= PACKED_EXAMPLES


# -- corrupted solution files -------------------------------------------------------------------
@cache
def saved_solution(root: str) -> tuple[Path, dict, dict]:
    """A saved heavy-top run (a rigid body: directors, inertia, a joint) and its contents."""
    FAULT.disarm()
    solution = mbs.simulate(model("top"), "em", h=0.005, t_end=0.02)
    path = mbs.save_solution(solution, Path(root) / "top.npz")
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return path, arrays, json.loads(str(arrays["header"]))


def header_paths(value, prefix=()) -> list[tuple]:
    """Every key path of a JSON document."""
    paths = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            paths += header_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += header_paths(item, prefix + (index,))
    return paths


CRAFTED_VALUES = st.one_of(JSON_VALUES, st.sampled_from([
    {"__ndarray__": [1.0, 2.0], "dtype": "<f8"}, {"__ndarray__": "x", "dtype": "zz"},
    {"__ndarray__": [[1], [2, 3]], "dtype": "<f8"}, {"__ndarray__": [1], "dtype": "|O"},
    {"__slice__": [0, 12]}, {"__slice__": [5]}, {"__slice__": [0, 3]}, {"__tuple__": 3},
    {"__tuple__": ["ground", "top"]}, {"__repr__": "x"}]))
ARRAY_VALUES = st.sampled_from(["scalar", "text", "shorter", "nan", "matrix", "integers",
                                "complex"])


def crafted_array(kind: str, array: np.ndarray) -> np.ndarray:
    makers = {"scalar": lambda: np.float64(1.0),
              "text": lambda: np.array(["x"] * max(array.size, 1)),
              "shorter": lambda: array.reshape(-1)[:-1],
              "nan": lambda: np.full(array.shape, np.nan),
              "matrix": lambda: np.zeros((2, 2)),
              "integers": lambda: np.arange(array.size).reshape(array.shape),
              "complex": lambda: array.astype(complex)}
    return makers[kind]()


@st.composite
def solution_edits(draw, paths: list[tuple], members: list[str]) -> list[tuple]:
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["header", "header", "delete-key", "array", "drop-array",
                                     "flip", "truncate", "bomb"]))
        edits.append((kind, draw(st.sampled_from(paths)), draw(CRAFTED_VALUES),
                      draw(st.sampled_from(members)), draw(ARRAY_VALUES),
                      draw(st.floats(0.0, 1.0)), draw(st.integers(0, 7))))
    return edits


def edit_solution(path: Path, arrays: dict, header: dict, edits: list[tuple]) -> None:
    arrays, header = dict(arrays), json.loads(json.dumps(header))
    raw = []
    for kind, key_path, value, member, array_kind, fraction, bit in edits:
        if kind in ("header", "delete-key"):
            parent = header
            try:  # an earlier edit may have replaced a parent of this path
                for part in key_path[:-1]:
                    parent = parent[part]
                if kind == "header":
                    parent[key_path[-1]] = value
                elif isinstance(parent, dict):
                    del parent[key_path[-1]]
            except (KeyError, IndexError, TypeError):
                continue
        elif kind == "array" and member in arrays:
            arrays[member] = crafted_array(array_kind, arrays[member])
        elif kind == "drop-array":
            arrays.pop(member, None)
        else:
            raw.append((kind, fraction, bit))
    arrays["header"] = np.array(json.dumps(header))
    np.savez(path, **arrays)
    for kind, fraction, bit in raw:
        damage(path, kind, fraction, bit)


def use_solution(solution: mbs.Solution) -> None:
    """What a user does with a loaded solution: observables, bodies, the summary."""
    solution.energy()
    solution.angular_momentum()
    solution.linear_momentum()
    solution.constraint_residuals()
    for body in solution.model.bodies:
        solution.body(body.name)
    solution.conservation_summary()


def test_corrupted_solution_files_give_mbs_errors_or_working_solutions(tmp_path_factory):
    root = tmp_path_factory.mktemp("solutions")
    _, arrays, header = saved_solution(str(root))
    paths = [path for path in header_paths(header) if path[0] != "format"]
    members = sorted(name for name in arrays if name != "header")  # edited as JSON

    @hypothesis_settings(SOLUTION_EXAMPLES)
    @given(edits=solution_edits(paths, members), with_model=st.booleans())
    def crafted_solution(edits: list[tuple], with_model: bool) -> None:
        CASES["solutions"] += 1
        path = Path(tempfile.mkdtemp(dir=root)) / "top.npz"
        edit_solution(path, arrays, header, edits)
        loaded, error = outcome(mbs.load_solution, path, model("top") if with_model else None)
        if error is None:
            _, error = outcome(use_solution, loaded)

    before = CASES["solutions"]
    crafted_solution()
    assert CASES["solutions"] - before >= SOLUTION_EXAMPLES


def test_every_bit_flip_of_a_solution_file_gives_an_mbs_error_or_a_working_solution(
        tmp_path):
    """One flipped bit at each of 400 evenly spaced bytes (compressed members included,
    whose damage surfaces in zlib, and array headers, in numpy's parser of them)."""
    path, _, _ = saved_solution(str(tmp_path))
    raw = path.read_bytes()
    damaged = tmp_path / "damaged.npz"
    errors = 0
    for position in np.linspace(0, len(raw) - 1, 400).astype(int):
        flipped = bytearray(raw)
        flipped[position] ^= 0x10
        damaged.write_bytes(bytes(flipped))
        loaded, error = outcome(mbs.load_solution, damaged)
        if error is None:
            _, error = outcome(use_solution, loaded)
        errors += error is not None
    assert errors > 0  # the flips reached the data


# -- failures around the steps: refinement, read-back, checkpoints, the final check ---------
def test_a_stream_directory_removed_mid_run_still_hands_over_the_steps(tmp_path):
    path = tmp_path / "run"
    moved = tmp_path / "moved"

    def push(t: float):
        if t > 0.045 and path.exists():
            path.rename(moved)
        return np.zeros(3)

    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    system.add(Load(bob, force=push, name="push"))
    with pytest.raises(mbs.SimulationError) as error, \
            pytest.warns(UserWarning, match="cannot be read back"):
        mbs.simulate(system.compile(), "em", h=0.01, t_end=0.1, output=str(path),
                     flush_every=2)
    # the flushed steps went with the directory; the solution holds those still in memory,
    # up to the failure, and says where it starts
    solution = error.value.solution
    first = solution.stats["first_step"]
    assert first > 0 and solution.t[-1] == pytest.approx(0.01 * error.value.step)
    assert solution.t.size == error.value.step - first + 1
    assert read_stream(moved)["q"].shape[0] == 5  # the chunks flushed before the move


def test_a_failure_inside_a_refined_step_leaves_a_stream_that_resumes_exactly(tmp_path):
    FAULT.disarm()
    top, h, steps = model("top"), 0.02, 4
    full = quietly(mbs.simulate, top, "rattle", h=h, t_end=steps * h, max_refinements=2)
    if not any(step == 3 for step, _ in full.stats["refined_steps"]):
        pytest.fail("the scenario needs step 3 to be refined")
    FAULT.kind, FAULT.at = "raise", 3.5 * h
    path = tmp_path / "run"
    with pytest.raises(mbs.ForceFunctionError):
        quietly(mbs.simulate, top, "rattle", h=h, t_end=steps * h, max_refinements=2,
                output=str(path), flush_every=6)
    FAULT.disarm()
    resumed = quietly(mbs.simulate, top, "rattle", h=h, t_end=steps * h, max_refinements=2,
                      resume=str(path), flush_every=6)
    np.testing.assert_array_equal(resumed.q, full.q)


def test_a_load_failing_inside_a_refined_step_names_the_step():
    FAULT.disarm()
    top, h = model("top"), 0.02
    full = quietly(mbs.simulate, top, "rattle", h=h, t_end=h, max_refinements=2)
    if not full.stats["refined_steps"]:
        pytest.fail("the scenario needs step 0 to be refined")
    FAULT.kind, FAULT.at = "raise", h  # fires at the step's end, in its sub-steps
    try:
        with pytest.raises(mbs.ForceFunctionError) as error:
            quietly(mbs.simulate, top, "rattle", h=h, t_end=h, max_refinements=2)
    finally:
        FAULT.disarm()
    assert error.value.solution.t.size == 1
    assert error.value.step == 0


def test_a_crafted_checkpoint_gives_an_mbs_error(tmp_path):
    FAULT.disarm()
    path = tmp_path / "run"
    pendulum = model("pendulum")
    mbs.simulate(pendulum, "em", h=0.01, t_end=0.06, output=str(path), flush_every=3)
    manifest = json.loads((path / "manifest.json").read_text())
    np.savez(path / manifest["checkpoint"], gam=np.zeros(1))  # no 'lam'
    manifest["checkpoint_sha256"] = mbs.safe_files.sha256(path / manifest["checkpoint"])
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(mbs.ModelError, match="checkpoint"):
        mbs.simulate(pendulum, "em", h=0.01, t_end=0.1, resume=str(path))


def test_a_potential_failing_only_in_the_energy_check_keeps_the_solution():
    FAULT.disarm()
    well, h, steps = model("well"), 0.05, 4
    evaluated: list[float] = []
    original = FAULT.energy

    def recording(squared_distance: float) -> float:
        evaluated.append(float(squared_distance))
        return original(squared_distance)

    FAULT.energy = recording
    try:
        run = quietly(mbs.simulate, well, "ggl-vi-a", h=h, t_end=steps * h)
        last = float(run.q[-1] @ run.q[-1])
        during = min(evaluated[:-(steps + 1)])  # before the energy check's own calls
        if not last < during:
            pytest.fail("the scenario needs a last node beyond every state the steps evaluated")
        FAULT.kind, FAULT.below = "raise", 0.5 * (last + during)
        try:
            solution = quietly(mbs.simulate, well, "ggl-vi-a", h=h, t_end=steps * h)
        except mbs.MbsError as error:
            solution = getattr(error, "solution", None)
    finally:
        FAULT.energy = original
        FAULT.disarm()
    assert solution is not None and solution.t.size == steps + 1
