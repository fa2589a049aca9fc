"""A run directory's own files: which files a run wrote, so that nothing else is ever replaced.

A ``train`` or ``train-lm`` run writes its ``config.json`` first, and that file
lists (under ``"files"``) every file the run writes into ``--out``. ``--overwrite``
deletes those files, and only those, and only under the names the command owns
(:data:`OWNED_FILES`: a forged or edited list deletes nothing else); a file of the same name that no run
recorded (the user's own ``test.tsv``, say) is never deleted nor replaced; the
command stops instead, before writing anything, and names it. Runs written
before the list existed are recognised by their ``config.json`` (an
``attncourse_version`` entry for ``train``, a ``corpus`` digest for
``train-lm``); their files are the fixed names such runs wrote.

JSON files are written strictly: NaN and infinities become ``null``, so that any
JSON reader can read them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from attncourse.train.checkpoint import atomic_write_text

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
    """The dict ``out/config.json`` holds, or None (missing, unreadable, not a dict)."""
    try:
        obj = json.loads((out / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
    """Names of the files in ``out`` that a run wrote (its config.json's list), present or not.

    Only names the command owns (:data:`OWNED_FILES`) count: a list naming any
    other file (the user's ``notes.txt``) is not believed for that file.
    """
    config = read_config(out)
    command = run_command(config)
    if command is None:
        return set()
    listed = config.get("files") if config is not None else None
    if isinstance(listed, list):
        names = {n for n in listed if isinstance(n, str)}
    else:
        names = set(LEGACY_FILES[command])
    return (names & set(OWNED_FILES[command])) | {CONFIG_NAME}


def foreign_files(out: Path, writes: Collection[str]) -> list[str]:
    """The files among ``writes`` that exist in ``out`` but no run recorded: a run must not replace them."""
    if not out.is_dir():
        return []
    own = recorded_files(out)
    return sorted(n for n in writes if (out / n).exists() and n not in own)


def remove_recorded(out: Path) -> list[str]:
    """Delete the files ``out``'s config.json lists (config.json last); return their names."""
    names = sorted(recorded_files(out) - {CONFIG_NAME}) + [CONFIG_NAME]
    removed = []
    for name in names:
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(name)
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
    names = {p.name for p in out.iterdir() if p not in set(leftovers)}
    return names <= own and not names & set(PROGRESS_FILES)
