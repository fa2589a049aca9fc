"""Where a command's output files may go, and the lock that keeps one run per folder.

An output a user names (``evaluate --json``, ``--predictions``) is refused before any work
if it is an input of the command or an existing file of the run directory (but the
command's own output there), or not a regular file (a link, FIFO, socket or block device;
a character device such as ``/dev/null`` is written through, ``-`` is stdout); an existing
file the command did not write is replaced only with ``--overwrite``. :func:`run_lock`
holds a ``flock`` on a run directory while a run writes into it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attncourse.train.checkpoint import atomic_write_text

#: Output names that mean standard output.
STDOUT_NAMES = ("-", "/dev/stdout")


def is_stdout(path: Path | str) -> bool:
    """True if ``path`` names standard output (``-`` or ``/dev/stdout``)."""
    return str(path) in STDOUT_NAMES


def os_reason(err: OSError) -> str:
    """One line for an OSError: the path it concerns and the reason, without ``[Errno n]``."""
    reason = err.strerror or " ".join(str(err).split()) or type(err).__name__
    if err.errno == errno.ENAMETOOLONG:
        reason += " (a name has at most 255 bytes, a path at most 4,096)"
    elif err.errno == errno.ENOTDIR:  # "Not a directory" names no culprit: a parent is a file
        reason = "a name on its path is a file, not a folder"
    name = err.filename
    if name is None:
        return " ".join(str(err).split()) or reason
    shown = str(name)
    shown = shown if len(shown) <= 120 else shown[:60] + "..." + shown[-40:]
    return f"{shown!r}: {reason}"


def _lstat(path: Path) -> os.stat_result | None:
    """``os.lstat(path)``, or None if nothing is there; OSError (permission, overlong name) propagates."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def output_problem(path: Path, option: str, *, inputs: Iterable[Path] = (), run_dir: Path | None = None,
                   run_outputs: Iterable[str] = (), ours: Callable[[Path], bool] | None = None,
                   overwrite: bool = False) -> str | None:
    """Why ``path`` (named by ``option``) must not receive an output, or None.

    ``inputs`` are the command's inputs; ``run_dir`` its run directory, whose existing files are
    refused but ``run_outputs``; ``ours(path)`` tells a file this command wrote (replaced
    freely); ``overwrite`` lets other regular files be replaced.

    Raises
    ------
    OSError
        If the path cannot even be looked at (permission, a name too long).
    """
    if is_stdout(path):
        return None
    shown = str(path) if len(str(path)) <= 120 else str(path)[:60] + "..." + str(path)[-40:]
    info = _lstat(path)
    if info is not None and stat.S_ISLNK(info.st_mode):
        return (f"{option} {shown!r} is a symbolic link; give the file itself (a link is never written "
                "through, and replacing it would lose it)")
    for source in inputs:
        if _same_file(path, source):
            return f"{option} {shown!r} is {str(source)!r}, an input of this command; give another file"
    if run_dir is not None and info is not None and _same_file(path.parent, run_dir) \
            and path.name not in set(run_outputs):
        return f"{option} {shown!r} is a file of the run {str(run_dir)!r}; give another file"
    if info is None:
        return None
    if stat.S_ISDIR(info.st_mode):
        return f"{option} {shown!r} is a directory; give a file name"
    if stat.S_ISCHR(info.st_mode):
        return None if os.access(path, os.W_OK) else f"{option} {shown!r}: not writable (permission denied)"
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) \
            else "a block device" if stat.S_ISBLK(info.st_mode) else "not a regular file"
        return f"{option} {shown!r} is {kind}; give a regular file, or '-' for the standard output"
    if overwrite or (ours is not None and ours(path)):
        return None
    return (f"{option} {shown!r} exists and was not written by this command; pass --overwrite to replace "
            "it, or give another file")


def replaces_foreign(path: Path, ours: Callable[[Path], bool] | None) -> bool:
    """True if writing ``path`` replaces an existing regular file this command did not write."""
    if is_stdout(path):
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and not (ours is not None and ours(path))


def write_output(text: str, path: Path) -> None:
    """Write ``text`` to ``path``: standard output for ``-``, through a character device, else atomically."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    info = _lstat(path)
    if info is not None and stat.S_ISCHR(info.st_mode):
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:  # /dev/full, say: name the device, not a file descriptor
            raise OSError(err.errno, f"cannot write {str(path)!r}: {err.strerror or err}") from None
        return
    atomic_write_text(text, path)


def json_written_by(keys: Iterable[str]) -> Callable[[Path], bool]:
    """A test for :func:`output_problem`'s ``ours``: the file is a JSON object holding all of ``keys``."""
    wanted = set(keys)

    def ours(path: Path) -> bool:
        try:
            if os.path.getsize(path) > 50_000_000:
                return False
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(obj, dict) and wanted <= obj.keys()

    return ours


class RunLocked(OSError):
    """Another process holds the lock of a run directory."""


@contextmanager
def run_lock(directory: Path, option: str = "--out") -> Iterator[None]:
    """Hold an exclusive, non-blocking ``flock`` on ``directory`` (which must exist) while the
    block runs; no lock file, released by the kernel however the process ends.

    Raises
    ------
    RunLocked
        If another process holds it.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as before
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLocked(f"{option} {str(directory)!r} is in use by another attncourse run that is "
                                "writing into it; wait for it to finish, or choose another folder") from None
            raise
        yield
    finally:
        os.close(fd)


@contextmanager
def locked_run_dir(out: Path, option: str = "--out") -> Iterator[None]:
    """Create ``out`` (with its parents) if needed and hold :func:`run_lock` on it while the block runs.

    If the block fails (an error, Ctrl-C) and ``out`` is still empty, the
    folders this call created are removed again: a refused or interrupted
    command leaves no empty run folder behind.
    """
    created = []
    for folder in (out, *out.parents):
        if folder.exists():
            break
        created.append(folder)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out, option):
            yield
    except BaseException:
        for folder in created:  # deepest first; stops at the first that is not empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise
