"""The formgrader shows each written answer's rubric; the student never sees it.

The nbgrader source puts the reference answer and rubric of every written exercise in a
read-only cell after the answer, inside nbgrader's mark-scheme region. This test runs
nbgrader on chapter 4 (cut to its exercises, to stay quick) and looks at every stage:
the release and its metadata hold no rubric, the autograded notebook (what the
formgrader renders) holds each one under the answer, and the feedback holds none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attncourse.course.nbgrader_source import (
    MARK_SCHEME,
    RUBRIC_PLACEHOLDER,
    paste_solutions,
    write_course,
)
from attncourse.course.rubrics import RUBRICS

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "04_self_attention"


def nbgrader(course: Path, *args: str) -> None:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    assert "Exception while loading config" not in done.stderr, done.stderr  # nbgrader goes on without it


def exercises_only(nb):
    """The chapter's cells from its first exercise on (the written answers need nothing else)."""
    start = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and c.source.startswith("### Exercise"))
    nb.cells = [c for c in nb.cells[start:] if c.cell_type == "markdown"]
    return nb


def written_labels(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"].removesuffix("-answer") for c in nb.cells
            if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("solution")]


def test_the_formgrader_shows_each_rubric_and_the_student_never_sees_one(tmp_path):
    course = tmp_path / "course"
    write_course([ROOT / "notebooks" / f"{CHAPTER}.md"], course)
    path = course / "source" / CHAPTER / f"{CHAPTER}.ipynb"
    source = exercises_only(nbformat.read(path, as_version=4))
    nbformat.write(source, path)
    labels = written_labels(source)
    assert len(labels) >= 2 and set(labels) <= set(RUBRICS)
    # In the source, each answer is followed by its rubric cell: read-only, no points.
    for i, cell in enumerate(source.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-answer"):
            label = cell.metadata["nbgrader"]["grade_id"].removesuffix("-answer")
            rubric = source.cells[i + 1]
            assert rubric.metadata["nbgrader"]["grade_id"] == f"{label}-rubric"
            assert rubric.metadata["nbgrader"]["locked"] and not rubric.metadata["nbgrader"]["grade"]
            assert RUBRICS[label].full in rubric.source and cell.source.strip() in rubric.source
            assert RUBRICS[label].full not in json.dumps(cell)  # not in the answer, nor its metadata

    nbgrader(course, "generate_assignment", CHAPTER, "--force")
    release = (course / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text(encoding="utf-8")
    for label in labels:
        for level in (RUBRICS[label].full, RUBRICS[label].partial, RUBRICS[label].none):
            assert json.dumps(level)[1:-1] not in release, (label, level)  # source and metadata
    assert MARK_SCHEME[0] not in release and release.count(RUBRIC_PLACEHOLDER) == len(labels)

    released = nbformat.reads(release, as_version=4)
    submission = course / "submitted" / "alice" / CHAPTER / f"{CHAPTER}.ipynb"
    submission.parent.mkdir(parents=True)
    nbformat.write(paste_solutions(released, nbformat.read(path, as_version=4)), submission)
    nbgrader(course, "autograde", CHAPTER, "--create", "--force")
    graded = nbformat.read(course / "autograded" / "alice" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    for label in labels:
        cells = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{label}-rubric"]
        assert len(cells) == 1 and RUBRICS[label].full in cells[0].source, label

    nbgrader(course, "generate_feedback", CHAPTER, "--force")
    (page,) = (course / "feedback" / "alice" / CHAPTER).rglob(f"{CHAPTER}.html")
    html = page.read_text(encoding="utf-8")
    assert "Rubric" not in html and "Reference answer" not in html
    assert not [label for label in labels if RUBRICS[label].none[:40] in html]
