"""A folder a command owns by content: it replaces only what it wrote, and writes through nothing.

:func:`check_owned` refuses, before any work, ``/``, the home folder, a link as the
folder, and below it a symbolic link, a special file or a file with a second hard link.
The command writes into a fresh staging folder beside it; :func:`publish` refuses a staged
file whose path holds a file the command did not write (not in the manifest
``.attncourse-owned.json`` with the same SHA-256), removes the previous run's files,
renames the staged ones into place and writes the manifest last. Other files are left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

#: The manifest of what the command wrote, in the folder it owns.
MANIFEST = ".attncourse-owned.json"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def check_owned(out: Path, option: str = "OUT") -> None:
    """Refuse (``ValueError``, one line) an ``out`` no command may write into; see the module's docstring."""
    shown = str(out)
    real = os.path.realpath(out)
    if real == os.path.realpath("/") or real == os.path.realpath(Path.home()):
        raise ValueError(f"{option} {shown!r} is {'the root folder' if real == '/' else 'your home folder'}; "
                         "give a folder of its own")
    if os.path.islink(out):
        raise ValueError(f"{option} {shown!r} is a symbolic link; give the folder itself")
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"{option} {shown!r} is a file, not a folder")
    for folder, dirs, files in os.walk(out):
        for name in dirs + files:
            path = Path(folder) / name
            info = os.lstat(path)
            where = f"{option} {shown!r} holds {str(path.relative_to(out))!r}"
            if stat.S_ISLNK(info.st_mode):
                raise ValueError(f"{where}, a symbolic link: nothing is written through a link; remove it "
                                 "or choose another folder")
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                raise ValueError(f"{where}, which is not a regular file; remove it or choose another folder")
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                raise ValueError(f"{where}, a file with another hard link; remove it or choose another folder")


def owned(out: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of the files a previous run wrote into ``out`` and that are
    unchanged since (a changed one is the user's now)."""
    try:
        listed = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(listed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in listed.items()):
        return {}
    found = {}
    for rel, digest in listed.items():
        path = out / rel
        if ".." not in Path(rel).parts and not Path(rel).is_absolute() and path.is_file() \
                and not path.is_symlink() and _digest(path) == digest:
            found[rel] = digest
    return found


def publish(staging: Path, out: Path, keep: frozenset[str] = frozenset(), option: str = "OUT") -> list[Path]:
    """Move the tree in ``staging`` into ``out``; the files now there. A path in ``keep`` whose
    file in ``out`` is the user's is skipped (``README.md``) rather than refused.

    Raises
    ------
    ValueError
        Naming the first file of the user's that a staged file would replace.
    """
    check_owned(out, option)
    ours = owned(out)
    staged = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    skipped = set()
    for rel in staged:
        target = out / rel
        if os.path.lexists(target) and rel not in ours:
            if rel in keep:
                skipped.add(rel)
                continue
            raise ValueError(f"{option} {str(out)!r} holds {rel!r}, which this command did not write (or that "
                             "changed since); move it, or choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    for rel in ours:  # the previous run's files: removed, so no new file shares an inode
        (out / rel).unlink()
    written = []
    for rel in staged:
        if rel in skipped:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / rel, target)
        written.append(target)
    manifest = {p.relative_to(out).as_posix(): _digest(p) for p in written}
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)
    shutil.rmtree(staging, ignore_errors=True)
    return written


__all__ = ["MANIFEST", "check_owned", "owned", "publish"]
