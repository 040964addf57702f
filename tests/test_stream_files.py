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


def test_a_sound_stream_reads_back(stream):
    data = read_stream(stream)
    assert data["q"].shape == (31, 3)
    assert len(manifest_of(stream)["chunks"]) == 3


def test_chunk_paths_cannot_leave_the_directory(stream, tmp_path):
    np.savez(tmp_path / "outside.npz", q=np.zeros((10, 3)))
    manifest = manifest_of(stream)
    manifest["chunks"][0]["file"] = "../outside.npz"
    write_manifest(stream, manifest)
    with pytest.raises(ModelError, match="chunk 1 must be 'chunk_000001.npz'"):
        read_stream(stream)


def test_duplicated_and_reordered_chunks_are_refused(stream):
    manifest = manifest_of(stream)
    manifest["chunks"][1] = dict(manifest["chunks"][0])
    write_manifest(stream, manifest)
    with pytest.raises(ModelError, match="chunk 2 must be 'chunk_000002.npz'"):
        read_stream(stream)


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
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("q.npy", "w", force_zip64=True) as member:
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
    manifest = manifest_of(stream)
    del manifest["chunks"][0]["sha256"]  # a stream written without checksums
    write_manifest(stream, manifest)
    with pytest.raises(ModelError, match="p has shape"):
        load_stream(stream, pendulum())


def test_not_an_archive(tmp_path):
    path = tmp_path / "solution.npz"
    path.write_text("plain text")
    with pytest.raises(ModelError, match="not a readable .npz archive"):
        mbs.load_solution(path)
