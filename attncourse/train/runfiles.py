"""A run folder's manifest (the SHA-256 of each file the tool wrote) and bounded reads.

A file is the tool's while its digest matches, else the user's (never deleted).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from attncourse.train.atomic import atomic_write

#: The manifest's name; a leading dot keeps it out of the way of a user's listing.
MANIFEST_NAME = ".attncourse-run.json"
#: How the manifest's temporary file starts while it is written (then renamed into place).
MANIFEST_TEMPORARY_PREFIX = ".attncourse-run."
#: Largest JSON run file read (config.json, results.json, vocab.json, history.json,
#: the manifest): real ones are kilobytes, a big vocabulary a few megabytes.
MAX_JSON_BYTES = 64 * 2**20
#: Largest checkpoint read: the course's models are far smaller.
MAX_CHECKPOINT_BYTES = 8 * 2**30


def read_run_bytes(path: Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    Raises ``FileNotFoundError`` if missing, ``ValueError`` if not regular or too large.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:  # checked before fdopen, which refuses a folder in words of its own
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise ValueError(
            f"{path} is not a regular file (a FIFO, a device or a folder): "
            "a run file must be one"
        )
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes: not a run file")
    return data


def validate_run_file(path: Path, limit: int = MAX_CHECKPOINT_BYTES) -> None:
    """Raise ``ValueError`` as :func:`read_run_bytes`, without reading ``path``."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"{path} is not a regular file (a FIFO, a device or a folder): "
            "a run file must be one"
        )
    if info.st_size > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes: not a run file")


def validate_run_digest(path: Path) -> None:
    """Raise ``ValueError`` if the manifest records another digest for ``path``."""
    recorded = (read_manifest(path.parent) or {}).get(path.name)
    if recorded is not None and file_digest(path) != recorded:
        raise ValueError(
            f"{path} changed since it was written (digest mismatch): its SHA-256 is not "
            f"the one {MANIFEST_NAME} recorded; a damaged or edited file"
        )


def file_digest(path: Path) -> str | None:
    """SHA-256 (hex) of regular file ``path``; None if missing or not a regular file."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def read_run_json(path: Path) -> Any:
    """The JSON value of ``path``; ``ValueError`` if not JSON or nested too deeply."""
    try:
        return json.loads(read_run_bytes(path))
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a run file") from None


def read_manifest(directory: Path) -> dict[str, str] | None:
    """``directory``'s manifest (name -> SHA-256); None if absent or unreadable."""
    try:
        obj = read_run_json(directory / MANIFEST_NAME)
    except (OSError, ValueError):
        return None
    files = obj.get("files") if isinstance(obj, dict) else None
    if not isinstance(files, dict):
        return None
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def write_manifest(directory: Path, files: dict[str, str]) -> None:
    """Write ``files`` as ``directory``'s manifest, atomically."""
    text = json.dumps(
        {"format": "attncourse-run", "files": dict(sorted(files.items()))}, indent=2
    )
    atomic_write(directory / MANIFEST_NAME, lambda f: f.write((text + "\n").encode("utf-8")))


def start_manifest(directory: Path) -> None:
    """Create an empty manifest in ``directory`` unless it has one."""
    if read_manifest(directory) is None:
        write_manifest(directory, {})


def note_written(path: Path) -> None:
    """Record ``path``'s digest in its folder's manifest, if it has one."""
    if path.name == MANIFEST_NAME:
        return
    files = read_manifest(path.parent)
    digest = file_digest(path)
    if files is None or digest is None:
        return
    files[path.name] = digest
    write_manifest(path.parent, files)


def owned_names(directory: Path) -> set[str]:
    """Names of the files in ``directory`` whose digest still matches its manifest."""
    files = read_manifest(directory) or {}
    return {
        n for n, d in files.items() if "/" not in n and file_digest(directory / n) == d
    }
