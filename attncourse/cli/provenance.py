"""Which code a run came from: the git commit of the checkout attncourse is imported from.

Its own module below ``commands`` and ``gpu_report``, which both record it, so that
neither imports the other for it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attncourse


def git_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout attncourse is imported from, or None (no git, not a checkout).

    A copy without its ``.git`` (a GPU machine receives the working tree alone) gives the
    commit it was copied from in ``ATTNCOURSE_GIT_COMMIT`` (40 hex digits; anything else is ignored).
    """
    given = os.environ.get("ATTNCOURSE_GIT_COMMIT", "").strip().lower()
    if len(given) == 40 and all(c in "0123456789abcdef" for c in given):
        return given
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(attncourse.__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and len(commit) == 40 else None
