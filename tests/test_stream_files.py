"""Damaged, truncated and crafted result files get an mbs error naming the file, before any
file outside the result directory is opened and before any large allocation."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import mbs
from mbs.errors import ModelError
from mbs.streaming import load_stream, read_stream


def pendulum() -> mbs.Model:
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    return system.compile()


@pytest.fixture
def stream(tmp_path):
    """A stream directory of 30 steps in 3 chunks."""
    path = tmp_path / "run"
    mbs.simulate(pendulum(), "em", h=0.01, t_end=0.3, output=str(path), flush_every=10)
    return path


def manifest_of(path):
    return json.loads((path / "manifest.json").read_text())


def write_manifest(path, manifest):
    (path / "manifest.json").write_text(json.dumps(manifest))


def records_of(path):
    return [json.loads(line) for line in (path / "chunks.jsonl").read_text().splitlines()]


def write_records(path, records):
    (path / "chunks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_sound_stream_reads_back(stream):
    data = read_stream(stream)
    assert data["q"].shape == (31, 3)
    assert manifest_of(stream)["chunk_count"] == len(records_of(stream)) == 3


def test_chunk_paths_cannot_leave_the_directory(stream, tmp_path):
    np.savez(tmp_path / "outside.npz", q=np.zeros((10, 3)))
    records = records_of(stream)
    records[0]["file"] = "../outside.npz"
    write_records(stream, records)
    with pytest.raises(ModelError, match="chunk 1 must be 'chunk_000001.npz'"):
        read_stream(stream)


def test_duplicated_and_reordered_chunks_are_refused(stream):
    records = records_of(stream)
    records[1] = dict(records[0])
    write_records(stream, records)
    with pytest.raises(ModelError, match="chunk 2 must be 'chunk_000002.npz'"):
        read_stream(stream)


def test_a_chunk_line_of_a_crashed_flush_is_ignored_and_dropped_on_resume(stream):
    """A crash between appending to the chunk log and replacing the manifest leaves a line
    the manifest does not count: readers ignore it, a resumed run overwrites it."""
    records = records_of(stream)
    write_records(stream, records + [dict(records[-1], file="chunk_000004.npz")])
    assert read_stream(stream)["q"].shape == (31, 3)
    model = pendulum()
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.5, resume=str(stream), flush_every=10)
    full = mbs.simulate(model, "em", h=0.01, t_end=0.5)
    np.testing.assert_array_equal(resumed.q, full.q)
    assert len(records_of(stream)) == manifest_of(stream)["chunk_count"] == 5


def test_step_counts_must_add_up(stream):
    manifest = manifest_of(stream)
    manifest["steps_done"] = 31
    write_manifest(stream, manifest)
    with pytest.raises(ModelError, match="hold 30 steps, the manifest says 31"):
        read_stream(stream)


def test_truncated_chunk(stream):
    chunk = stream / "chunk_000002.npz"
    chunk.write_bytes(chunk.read_bytes()[:200])
    with pytest.raises(ModelError, match="chunk_000002.npz"):
        read_stream(stream)


def test_replaced_chunk_fails_its_checksum(stream):
    chunk = stream / "chunk_000003.npz"
    with np.load(chunk) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["q"] = arrays["q"] + 1.0
    np.savez(chunk, **arrays)
    with pytest.raises(ModelError, match="do not match the checksum"):
        read_stream(stream)


def test_zip_bomb_is_refused_before_decompressing(tmp_path):
    path = tmp_path / "bomb.npz"
    block = b"\0" * 2**20
    with (zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive,
          archive.open("q.npy", "w", force_zip64=True) as member):
        for _ in range(64):  # 64 MiB of zeros, ~64 kB stored
            member.write(block)
    assert path.stat().st_size < 2**20
    with pytest.raises(ModelError, match="would expand"):
        read_stream(path)
    with pytest.raises(ModelError, match="would expand"):
        mbs.load_solution(path)


def test_deeply_nested_or_malformed_json(stream, tmp_path):
    (stream / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ModelError, match="nested"):
        read_stream(stream)
    (stream / "manifest.json").write_text('{"format": ')
    with pytest.raises(ModelError, match="not valid JSON"):
        read_stream(stream)
    model_file = tmp_path / "model.json"
    model_file.write_text('{"a": ' * 10000 + "1" + "}" * 10000)
    with pytest.raises(ModelError, match="nested"):
        mbs.load_system(model_file)


def test_wrong_field_types_in_a_manifest(stream):
    manifest = manifest_of(stream)
    manifest["n"] = "three"
    write_manifest(stream, manifest)
    with pytest.raises(ModelError, match="'n' must be a non-negative integer"):
        read_stream(stream)


def test_arrays_of_the_wrong_shape(stream):
    chunk = stream / "chunk_000001.npz"
    with np.load(chunk) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["p"] = arrays["p"][:, :2]
    np.savez(chunk, **arrays)
    records = records_of(stream)
    del records[0]["sha256"]  # a stream written without checksums
    write_records(stream, records)
    with pytest.raises(ModelError, match="p has shape"):
        load_stream(stream, pendulum())


def test_not_an_archive(tmp_path):
    path = tmp_path / "solution.npz"
    path.write_text("plain text")
    with pytest.raises(ModelError, match="not a readable .npz archive"):
        mbs.load_solution(path)


def test_streams_of_the_first_layout_still_read_and_resume(stream):
    """Version 1 kept the chunk list in the manifest (rewritten at every flush)."""
    manifest = manifest_of(stream)
    manifest.update(version=1, chunks=records_of(stream))
    del manifest["chunk_count"]
    write_manifest(stream, manifest)
    (stream / "chunks.jsonl").unlink()
    assert read_stream(stream)["q"].shape == (31, 3)
    model = pendulum()
    resumed = mbs.simulate(model, "em", h=0.01, t_end=0.4, resume=str(stream), flush_every=10)
    np.testing.assert_array_equal(resumed.q, mbs.simulate(model, "em", h=0.01, t_end=0.4).q)
    assert manifest_of(stream)["version"] == 2 and len(records_of(stream)) == 4


MEMORY_SCRIPT = """
import sys, numpy as np, mbs
from mbs.forces import Load

def resident_mb():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 / 2**20

peak = [0.0]

def force(t):  # records the memory while the run streams; stops it after 3000 steps
    peak[0] = max(peak[0], resident_mb())
    if t > 3000 * 1e-3:
        raise RuntimeError("enough")
    return (0.0, 0.0, 0.0)

system = mbs.System(gravity=(0.0, 0.0, -9.81))
bob = system.add(mbs.PointMass(1.0, name="bob"))
bob.set_state(position=(1.0, 0.0, 0.0))
system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
system.add(Load(bob, force=force))
try:
    mbs.simulate(system.compile(), "em", h=1e-3, t_end=1e7, output=sys.argv[1],
                 flush_every=500)
except mbs.SolverError as error:  # a ForceFunctionError
    print(error.step, error.solution.t.size, peak[0])
"""


def test_a_ten_billion_step_stream_runs_in_bounded_memory(tmp_path):
    """1e10 steps would take ~0.8 TB in memory; streamed, the run holds one flush window."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path / "long")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    step, size, peak = result.stdout.split()
    assert int(step) >= 3000 and int(size) == int(step) + 1  # the steps read back
    assert float(peak) < 200.0


@pytest.mark.parametrize("solver, options", [("em", {}), ("ggl-vi-a", {}), ("ggl-vi-b", {}),
                                             ("lobatto", {"stages": 3}), ("rattle", {}),
                                             ("hbvm", {"iteration": "newton"})])
def test_streamed_and_resumed_runs_repeat_the_in_memory_run_on_the_sparse_path(
        solver, options, tmp_path):
    """n = 120 > 48: simplified Newton keeps its factorisation across steps. Flushing does not
    change a bit, and a resumed run refactorises the checkpoint's matrix with the run's own
    pivot order (kept in the checkpoint), so it repeats the run bitwise."""
    from tests.mechanisms import spherical_chain

    model = spherical_chain(10).compile()
    assert model.n == 120
    full = mbs.simulate(model, solver, h=2e-3, t_end=0.1, **options)
    streamed = mbs.simulate(model, solver, h=2e-3, t_end=0.1, output=str(tmp_path / "s"),
                            flush_every=7, **options)
    mbs.simulate(model, solver, h=2e-3, t_end=0.05, output=str(tmp_path / "r"),
                 flush_every=7, **options)
    resumed = mbs.simulate(model, solver, h=2e-3, t_end=0.1, resume=str(tmp_path / "r"),
                           flush_every=7, **options)
    np.testing.assert_array_equal(streamed.q, full.q)
    np.testing.assert_array_equal(streamed.p, full.p)
    np.testing.assert_array_equal(resumed.q, full.q)
    np.testing.assert_array_equal(resumed.p, full.p)


def test_a_resumed_run_says_where_its_wall_time_starts(stream, tmp_path):
    """The wall time of a resumed run covers the steps it did, after the 30 on disk: the
    stats and the summary say so, and a saved solution keeps it."""
    resumed = mbs.simulate(pendulum(), "em", h=0.01, t_end=0.5, resume=str(stream))
    assert resumed.stats["resumed_at"] == 30 and resumed.t.size == 51
    assert "s (resumed at step 30)  mean Newton" in resumed.conservation_summary()
    loaded = mbs.load_solution(mbs.save_solution(resumed, tmp_path / "resumed.npz"))
    assert loaded.stats["resumed_at"] == 30
    assert "resumed_at" not in mbs.simulate(pendulum(), "em", h=0.01, t_end=0.1).stats
