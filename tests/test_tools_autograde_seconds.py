"""tools/autograde_seconds.py, which measured the guide's seconds per submission.

Apart from ``test_course_autograde.py`` so that the unit stage's workers (``--dist
loadfile``) can run the two files' nbgrader runs side by side.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from attncourse.course.grading import grading_problems

pytest.importorskip("nbgrader")

from test_course_autograde import ROOT, nbgrader  # noqa: E402  (after the skip)


def test_autograde_seconds_times_a_first_and_a_later_submission(tmp_path, monkeypatch, capsys):
    # tools/autograde_seconds.py, which measured the guide's seconds per submission, on the
    # chapter that trains nothing (about 40 s); then a blank submission: its problems are
    # the checks it did not pass, so a chapter that graded badly is reported.
    spec = importlib.util.spec_from_file_location("autograde_seconds",
                                                  ROOT / "tools" / "autograde_seconds.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    course = tmp_path / "course"
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    chapter = ROOT / "notebooks" / "04_self_attention.md"
    assert tool.time_chapters([chapter], course) == 0
    row = capsys.readouterr().out.strip().split("\n")[-1].split(" | ")
    assert row[0] == f"| {chapter.stem}" and row[-1] == "none |", row
    assert all(float(cell) > 0 for cell in row[1:5]), row
    name = chapter.stem
    blank = course / "submitted" / "blank" / name / f"{name}.ipynb"
    blank.parent.mkdir(parents=True)
    blank.write_bytes((course / "release" / name / f"{name}.ipynb").read_bytes())
    nbgrader(course, "autograde", name, "--student", "blank", "--create", "--force")
    problems = grading_problems(course, name, "blank")
    assert problems and all("-check scored 0" in p for p in problems), problems
