"""A run directory's own files: which files a run wrote, so that nothing else is replaced.

A run records every file it writes, with its SHA-256, in ``.attncourse-run.json``
(:mod:`attncourse.train.runfiles`). ``--overwrite`` deletes only the listed files whose
digest still matches, under the names a command owns (:data:`OWNED_FILES`); any other file
is the user's, and the command stops before writing and names it. A folder without a
manifest cannot be overwritten (it can be resumed). JSON is written strictly (NaN -> null).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from attncourse.train.checkpoint import atomic_write_text, temporaries
from attncourse.train.runfiles import (
    MANIFEST_NAME,
    MANIFEST_TEMPORARY_PREFIX,
    owned_names,
    read_manifest,
    read_run_json,
    write_manifest,
)

CONFIG_NAME = "config.json"
#: Files whose presence means that training has started (an epoch finished or a result was written).
#: Not best.pt: an epoch writes it just before its checkpoint.pt, so a run interrupted between the two
#: has no epoch to continue from, and starts again (the interrupt message says so).
PROGRESS_FILES = (
    "checkpoint.pt",
    "history.json",
    "results.json",
    "metrics.json",
)
#: What runs written before config.json listed their files wrote, by command.
LEGACY_FILES = {
    "train": (
        "checkpoint.pt",
        "best.pt",
        "config.json",
        "history.json",
        "results.json",
        "metrics.json",
    ),
    "train-lm": ("checkpoint.pt", "vocab.json", "config.json", "history.json"),
}
#: Every name a command may write into its run directory: the only files ``--overwrite`` may ever
#: delete or replace, whatever a config.json's list says (a list can be edited or forged).
OWNED_FILES = {
    "train": (*LEGACY_FILES["train"], "test.tsv"),
    "train-lm": LEGACY_FILES["train-lm"],
}


def json_safe(obj: Any) -> Any:
    """``obj`` with NaN and infinities replaced by None and paths by strings, so that it is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict, indented JSON, atomically (whole or not at all)."""
    text = json.dumps(json_safe(obj), indent=2, ensure_ascii=False, allow_nan=False)
    atomic_write_text(text + "\n", path)


def read_config(out: Path) -> dict[str, Any] | None:
    """The dict ``out/config.json`` holds, or None (missing, unreadable, not a dict).

    Read only if it is a regular file of at most
    :data:`~attncourse.train.runfiles.MAX_JSON_BYTES` (a FIFO would block).
    """
    try:
        obj = read_run_json(out / CONFIG_NAME)
    except (OSError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def run_command(config: dict[str, Any] | None) -> str | None:
    """Which command wrote a run's config: ``"train"``, ``"train-lm"``, or None (not a run's config)."""
    if config is None:
        return None
    if config.get("command") in LEGACY_FILES:
        return config["command"]
    if "attncourse_version" in config:
        return "train"
    if "corpus" in config and "positional" in config:
        return "train-lm"
    return None


def recorded_files(out: Path) -> set[str]:
    """Names of the files in ``out`` the manifest shows a run wrote (same SHA-256, a name in
    :data:`OWNED_FILES`: a forged manifest cannot reach the user's files); none without one.
    """
    if not out.is_dir():
        return set()
    names = {n for files in OWNED_FILES.values() for n in files}
    return owned_names(out) & names


def foreign_files(out: Path, writes: Collection[str] = ()) -> list[str]:
    """The files in ``out`` that the tool cannot show it wrote (:func:`recorded_files`).

    Every entry counts, whatever its name (``writes`` is kept for callers; a
    user's ``notes.txt`` is as foreign as a user's ``checkpoint.pt``), but the
    manifest and the temporary files an interrupted atomic write left do not.
    """
    if not out.is_dir():
        return []
    own = recorded_files(out) | {MANIFEST_NAME}
    runs = {n for files in OWNED_FILES.values() for n in files} | set(writes)
    leftovers = {p.name for p in temporaries(out, tuple(runs))}
    return sorted(p.name for p in out.iterdir()
                  if p.name not in own and p.name not in leftovers
                  and not p.name.startswith(MANIFEST_TEMPORARY_PREFIX))


def remove_recorded(out: Path) -> list[str]:
    """Delete the files ``out``'s manifest shows the tool wrote (config.json last).

    Returns their names.

    The manifest is emptied too: the new run records its own files.
    """
    own = recorded_files(out)
    names = sorted(own - {CONFIG_NAME}) + ([CONFIG_NAME] if CONFIG_NAME in own else [])
    removed = []
    for name in names:
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(name)
    if read_manifest(out) is not None:
        write_manifest(out, {})
    return removed


def record_file(out: Path, name: str) -> None:
    """Add ``name`` to the files ``out``'s config.json lists (a file the run's later commands wrote there)."""
    config = read_config(out)
    if (
        run_command(config) is None
        or not isinstance(config.get("files"), list)
        or name in config["files"]
    ):
        return
    config["files"] = [*config["files"], name]
    write_json(out / CONFIG_NAME, config)


def unstarted_run(out: Path, leftovers: Collection[Path] = ()) -> bool:
    """True if ``out`` holds only files its run wrote before training started (killed before a checkpoint)."""
    own = recorded_files(out)
    if not own or not out.is_dir():
        return False
    names = {p.name for p in out.iterdir() if p not in set(leftovers)} - {MANIFEST_NAME}
    return names <= own and not names & set(PROGRESS_FILES)
