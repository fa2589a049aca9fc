"""Files written whole or not at all: a temporary beside the target, fsync, rename."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any


def _file_mode() -> int:
    """The mode ``open(path, "w")`` would give: 0666 minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (POSIX); skipped where a folder cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_prefix(path: Path) -> str:
    """Temporaries beside ``path`` are ``.<name>.<random>.tmp``."""
    return f".{path.name}."


#: What :func:`tempfile.mkstemp` puts between our prefix and ".tmp": eight of its random characters.
#: Only such names are ours; a user's ``.checkpoint.pt.mine.tmp`` is never listed nor removed.
TEMPORARY_SUFFIX = re.compile(r"[a-z0-9_]{8}\.tmp")


def _write_error(path: Path, err: OSError) -> OSError:
    """The error of a failed write, naming ``path`` instead of the temporary."""
    new = OSError(f"cannot write {str(path)!r}: {err.strerror or err}")
    new.errno = err.errno
    return new


def atomic_write(path: Path, write: Any, by_name: bool = False) -> Path:
    """Write ``path`` via a temporary beside it: ``write(file)`` (``by_name``: ``write(name)``),
    fsync, rename; ``OSError`` names ``path``, and no temporary is left, Ctrl-C included."""
    tmp_name = None
    try:  # mkstemp inside the try: a Ctrl-C right after it still removes the file
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=".tmp")
        if hasattr(os, "fchmod"):  # mkstemp makes the file private (0600); give it the usual mode
            os.fchmod(fd, _file_mode())
        if by_name:
            os.close(fd)
            write(tmp_name)
            fd = os.open(tmp_name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException as err:  # Ctrl-C included: never leave a temporary file behind
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
        if isinstance(err, OSError):
            raise _write_error(path, err) from None
        if interrupted(err):  # torch.save's zip writer wraps a Ctrl-C in a RuntimeError
            raise KeyboardInterrupt from None
        raise
    _fsync_directory(path.parent)
    return path


def interrupted(err: BaseException) -> bool:
    """True if ``err`` is, or was caused by, a KeyboardInterrupt."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt) or "KeyboardInterrupt" in str(err):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False
