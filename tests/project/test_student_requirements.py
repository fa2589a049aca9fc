"""requirements-student.txt: the notebooks' needs, pinned as in requirements.txt, nothing of the instructor's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pins(path: Path) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(encoding="utf-8"), re.M)
    return {name.lower(): version for name, version in found}


def test_student_requirements_are_pinned_as_the_course_and_leave_out_the_instructors_tools():
    course, student = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-student.txt")
    assert student and all(course.get(name) == version for name, version in student.items()), student
    for tool in ("jupyter-book", "nbgrader", "selenium", "pytest", "nbval", "myst-nb"):
        assert tool not in student
    # What the package and the chapters import (the course's own dependencies) is there.
    for needed in ("torch", "numpy", "matplotlib", "ipywidgets", "tqdm", "scikit-learn", "jupyterlab"):
        assert needed in student


def test_student_requirements_carry_triton_with_the_courses_platform_marker():
    # Chapter 8's kernel exercise needs it; pip skips it where triton has no wheels.
    def line(path):
        return next(row for row in path.read_text(encoding="utf-8").splitlines() if row.startswith("triton=="))

    assert line(ROOT / "requirements-student.txt") == line(ROOT / "requirements.txt")


def test_class_folders_with_solutions_are_ignored_by_git():
    assert "class/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
