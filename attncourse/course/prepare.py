"""``python -m attncourse prepare [CHAPTER...]``: train every cached model the chapters need, once.

Each chapter's notebook (solutions included) runs top to bottom, so that every model it
trains through the trained-model cache or :mod:`attncourse.train.store` is in
``$ATTNCOURSE_RUNS`` (``--runs``), finished; the notebook is the one statement of what it
trains. Grading then only loads (``ATTNCOURSE_NO_TRAINING=1`` under nbgrader: a missing
run fails its cell at once). A chapter is listed in ``prepared.json`` only once its
notebook ran to the end; checkpoints are written by rename, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from attncourse.cli.options import EXIT_USAGE
from attncourse.course.exercises import NOTEBOOKS, chapter_path
from attncourse.runtime import NO_TRAINING_ENV, runs_dir
from attncourse.train.store import FIT_CACHE_ENV

COMMAND = "prepare"
#: The list of prepared chapters, in the runs folder.
PREPARED = "prepared.json"


def build_parser() -> argparse.ArgumentParser:
    """The ``prepare`` command's parser."""
    parser = argparse.ArgumentParser(
        prog=f"attncourse {COMMAND}",
        description="Run each chapter once so that every model it trains is in the trained-model "
                    "cache; grading (nbgrader autograde) then loads them and never trains.")
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER",
                        help="chapters to prepare, e.g. 06_transformer (default: every chapter)")
    parser.add_argument("--runs", type=Path, metavar="DIR",
                        help="the trained-model cache to fill (default: $ATTNCOURSE_RUNS, else the "
                             "course's _build/runs); grade with the same $ATTNCOURSE_RUNS")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, metavar="DIR",
                        help="folder of the chapters' MyST sources (default: the course's notebooks/)")
    return parser


def source_digest(chapter: Path) -> str:
    """SHA-256 of a chapter's MyST source: a prepared chapter whose source changed is prepared again."""
    return hashlib.sha256(chapter.read_bytes()).hexdigest()


def read_prepared(runs: Path) -> dict[str, dict]:
    """``{chapter: {"sha256", "seconds", "at"}}`` of the chapters prepared into ``runs``."""
    path = runs / PREPARED
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        raise ValueError(f"{str(path)!r} is not the JSON that prepare writes; delete it") from None
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise ValueError(f"{str(path)!r} is not the JSON that prepare writes (an object of chapters, "
                         "each an object); delete it")
    return found


def _write_prepared(runs: Path, prepared: dict[str, dict]) -> None:
    """Write ``prepared.json`` atomically (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=runs, prefix=f".{PREPARED}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(prepared, handle, indent=1, sort_keys=True)
        os.replace(tmp, runs / PREPARED)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def run_chapter(chapter: Path) -> float:
    """Execute a chapter's notebook in a fresh kernel, training allowed; its seconds.

    Raises
    ------
    RuntimeError
        If a cell fails: the chapter, the cell's number and its error, in one line.
    """
    import nbclient
    import nbformat
    import yaml
    from nbclient.exceptions import CellExecutionError

    from attncourse.course.exercises import read_chapter

    try:
        nb = read_chapter(chapter)
    except (yaml.YAMLError, UnicodeDecodeError, nbformat.ValidationError, ValueError) as err:
        lines = str(getattr(err, "problem", None) or err).strip().splitlines() or [""]
        reason = " ".join(lines[0].split())[:200]
        raise ValueError(f"{chapter}: its source cannot be read as a chapter ({type(err).__name__}: "
                         f"{reason})") from None
    start = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=None, kernel_name="python3",
                                     resources={"metadata": {"path": str(chapter.parent)}})
    try:
        client.execute()
    except CellExecutionError as err:
        # The error's name and its whole message (a message may span lines), not the traceback.
        what = " / ".join(line.strip() for line in str(err.evalue or "").splitlines() if line.strip())
        raise RuntimeError(f"{chapter.stem}: a cell failed: {err.ename}: {what}"[:1000]) from None
    except nbformat.ValidationError as err:  # a kernelspec without its display_name, say
        reason = " ".join(str(err).split("\n")[0].split())[:200]
        raise ValueError(f"{chapter}: its notebook metadata is not valid ({reason})") from None
    return time.perf_counter() - start


def prepare(chapters: list[Path], runs: Path) -> dict[str, dict]:
    """Prepare each chapter into ``runs`` (see the module's docstring); what ``prepared.json`` holds after.

    A chapter already prepared from the same source is skipped: its runs load.
    """
    if runs.exists() and not runs.is_dir():
        raise ValueError(f"the trained-model folder {str(runs)!r} ($ATTNCOURSE_RUNS, or --runs) is a file, "
                         "not a folder")
    runs.mkdir(parents=True, exist_ok=True)
    prepared = read_prepared(runs)
    for chapter in chapters:
        digest = source_digest(chapter)
        if prepared.get(chapter.stem, {}).get("sha256") == digest:
            print(f"{chapter.stem}: prepared already ({runs})", flush=True)
            continue
        print(f"{chapter.stem}: running the chapter to train its cached models ...", flush=True)
        seconds = run_chapter(chapter)
        prepared = read_prepared(runs)  # another prepare may have written meanwhile
        prepared[chapter.stem] = {"sha256": digest, "seconds": round(seconds, 1),
                                  "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        _write_prepared(runs, prepared)
        print(f"{chapter.stem}: prepared in {seconds:.0f} s", flush=True)
    return prepared


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prepare``; return the exit status (0; 1 if a chapter failed; 2 with a one-line usage error)."""
    try:
        args = build_parser().parse_args(None if argv is None else list(argv))
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    try:
        names = args.chapters or sorted(p.stem for p in args.notebooks.glob("*.md"))
        chapters = [chapter_path(name, args.notebooks) for name in names]
        if args.runs is not None:
            os.environ["ATTNCOURSE_RUNS"] = str(args.runs.resolve())
        os.environ.pop(NO_TRAINING_ENV, None)
        os.environ[FIT_CACHE_ENV] = "1"  # in-memory fits (chapters 5, 6) kept for grading too
        named = os.environ.get("ATTNCOURSE_RUNS")
        if named and os.path.lexists(named) and not os.path.isdir(named):
            raise ValueError(f"the trained-model folder {named!r} ($ATTNCOURSE_RUNS, or --runs) is a file, "
                             "not a folder")
        prepare(chapters, runs_dir())
    except (ValueError, OSError) as err:
        print(f"attncourse: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as err:
        print(f"attncourse: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    return 0


__all__ = ["PREPARED", "build_parser", "main", "prepare", "read_prepared", "run_chapter", "source_digest"]
