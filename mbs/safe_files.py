"""Reading files mbs wrote -- or files crafted to look like them -- without surprises.

Every problem (not a zip archive, truncated data, a member that would decompress to far more
than it could hold, nesting too deep for the JSON parser, a missing entry, a checksum that
does not match) raises :class:`~mbs.errors.ModelError` naming the file; no foreign exception
and no unbounded allocation. Arrays are loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import tokenize
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mbs.errors import MbsError, ModelError

#: A member of an archive may decompress to at most this many times its stored size once it
#: is larger than :data:`SMALL_MEMBER` (numeric data compresses by far less; a zip bomb by
#: thousands).
MAX_EXPANSION = 100
SMALL_MEMBER = 16 * 2**20
#: Deepest nesting accepted in a JSON document (mbs writes at most ~10 levels).
MAX_JSON_DEPTH = 64
#: What zipfile and numpy raise on damaged archives: a flipped bit in a header can name an
#: unsupported compression method or an encrypted member (NotImplementedError and
#: RuntimeError), a truncated member ends early (EOFError), a damaged deflate stream fails in
#: zlib, and a damaged array header fails numpy's parse of it (tokenize, SyntaxError).
_ARCHIVE_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError,
                   zlib.error, tokenize.TokenError, SyntaxError)


def load_json(text: str, source) -> object:
    """``json.loads`` with every failure (syntax, nesting beyond :data:`MAX_JSON_DEPTH`)
    reported as a ModelError naming ``source``."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:  # the parser recurses per level: bound the depth first
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
            continue
        if character == '"':
            in_string, escaped = True, False
        elif character in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif character in "]}":
            depth -= 1
    if deepest > MAX_JSON_DEPTH:
        raise ModelError(f"{source}: JSON nested {deepest} levels deep (more than "
                         f"{MAX_JSON_DEPTH}); not a file written by mbs")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise ModelError(f"{source}: not valid JSON ({exc})") from None


def read_text(path: Path, limit: int = SMALL_MEMBER, what: str = "a stream manifest") -> str:
    """The text of a small file (``what``: a manifest, a model file), refusing one larger
    than ``limit`` bytes."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ModelError(f"{path}: {size} bytes, more than the {limit} {what} can have; "
                             f"not a file written by mbs")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: cannot be read ({exc})") from None


@contextmanager
def open_archive(path: Path, limit: int | None = None):
    """``np.load`` of an .npz file after checking its members: a ModelError names the file
    when it is no zip archive, is truncated, or has a member that decompresses to more than
    :data:`MAX_EXPANSION` times its stored size or to more than ``limit`` bytes in total."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except _ARCHIVE_ERRORS as exc:
        raise ModelError(f"{path}: not a readable .npz archive ({exc})") from None
    total = 0
    for member in members:
        total += member.file_size
        if (member.file_size > SMALL_MEMBER
                and member.file_size > MAX_EXPANSION * max(member.compress_size, 1)):
            raise ModelError(f"{path}: member {member.filename!r} would expand from "
                             f"{member.compress_size} to {member.file_size} bytes; refused")
    if limit is not None and total > limit:
        raise ModelError(f"{path}: its arrays take {total} bytes, more than the {limit} its "
                         f"manifest allows")
    try:
        archive = np.load(path, allow_pickle=False)
    except _ARCHIVE_ERRORS as exc:
        raise ModelError(f"{path}: not a readable .npz archive ({exc})") from None
    try:
        yield archive
    except MbsError:  # a check of the caller's, already naming the file
        raise
    except (KeyError, *_ARCHIVE_ERRORS) as exc:
        raise ModelError(f"{path}: damaged or incomplete ({type(exc).__name__}: {exc})"
                         ) from None
    finally:
        archive.close()


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes; a ModelError names the file when it cannot be read
    (deleted, replaced by a directory)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read ({exc}); the file is missing or damaged"
                         ) from None
    return digest.hexdigest()


def read_lines(path: Path, count: int, limit: int = 4096) -> list[str]:
    """The first ``count`` lines of a text file, each at most ``limit`` characters; a
    ModelError names the file when it cannot be read or is not UTF-8 text."""
    lines = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if len(lines) == count:
                    break
                if len(line) > limit:
                    raise ModelError(f"{path}: line {len(lines) + 1} is too long")
                lines.append(line)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: cannot be read as text ({exc})") from None
    return lines


def check_writable(path: Path, what: str) -> None:
    """A ModelError now, before the work that produces ``what`` is done, when ``path`` cannot
    be written (a directory, a read-only or missing location); leaves no file behind."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"cannot write {what} to {str(path)!r}: it is a directory; give a "
                         f"file name")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise ModelError(f"cannot write {what} to {str(path)!r} ({exc.strerror or exc}); "
                         f"choose a writable location") from None
    if not existed:
        path.unlink()

