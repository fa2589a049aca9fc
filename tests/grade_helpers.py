"""Submissions for the grade of record's tests: a chapter's reference answers, or other
answers pasted into its answer cells, and one ``python -m attncourse grade`` run."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat

from attncourse.course.exercises import chapter_exercises, read_chapter
from attncourse.course.nbgrader_source import BEGIN, END, source_notebook

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))


def chapter(stem: str) -> Path:
    """The MyST source of chapter ``stem``."""
    return ROOT / "notebooks" / f"{stem}.md"


@functools.cache
def solved(path: Path) -> nbformat.NotebookNode:
    """The chapter's nbgrader source with its reference answers, as a student would submit them."""
    nb = source_notebook(read_chapter(path), path.stem)
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n") if line.strip() not in (BEGIN, END))
    return nb


@functools.cache
def coding(path: Path) -> dict[str, object]:
    """The chapter's coding exercises by label."""
    return {ex.label: ex for ex in chapter_exercises(path) if ex.kind == "coding"}


def with_answers(path: Path, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The solved notebook of chapter ``path`` with ``answers`` ({label: source}) in their answer cells."""
    nb = nbformat.from_dict(solved(path))
    for cell in nb.cells:
        label = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").removesuffix("-answer")
        if label in answers:
            cell.source = answers[label]
    return nb


def submit(root: Path, student: str, stem: str, nb: nbformat.NotebookNode) -> Path:
    """Write ``nb`` where ``nbgrader collect`` puts it: ``root/student/stem/stem.ipynb``."""
    path = root / student / stem / f"{stem}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def grade(root: Path, out: Path, *args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``python -m attncourse grade root --json out ARGS``; the process and
    ``{student: {chapter: record}}`` (empty if it wrote none)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "attncourse", "grade", str(root), "--json", str(out), *args],
                          env=env, capture_output=True, text=True, timeout=timeout)
    graded: dict[str, dict[str, dict]] = {}
    if out.exists():
        for record in json.loads(out.read_text()):
            graded.setdefault(record["student"], {})[record["chapter"]] = record
    return done, graded
