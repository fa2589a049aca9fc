"""Run nbgrader on an assignment of a course directory and read back the scores.

Used by the end-to-end test and by ``python -m attncourse.course.grading`` (every
chapter, for the instructor's record); instructors grade with nbgrader's own commands.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from attncourse.course.nbgrader_source import paste_solutions, write_course
from attncourse.course.prepare import prepare
from attncourse.runtime import runs_dir


@contextlib.contextmanager
def scripts_on_path():
    """nbgrader runs ``alembic`` from PATH: put this Python's scripts folder first, for a while."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old])
    try:
        yield
    finally:
        os.environ["PATH"] = old


def nbgrader(course: Path, *args: str) -> None:
    """Run ``nbgrader ARGS`` in ``course``; raise ``RuntimeError`` with its output if it fails."""
    with scripts_on_path():
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course,
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def autograde(course: Path, assignment: str,
              submissions: dict[str, NotebookNode]) -> dict[str, dict[str, tuple[float | None, float]]]:
    """Submit each student's notebook, autograde, return ``{student: {grade_id: (score, max)}}``.

    ``score`` is ``None`` for a manually graded cell not graded yet. The assignment
    must have been released (``nbgrader generate_assignment``).
    """
    from nbgrader.api import Gradebook

    for student, nb in submissions.items():
        target = course / "submitted" / student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
    nbgrader(course, "autograde", assignment, "--create", "--force")
    scores: dict[str, dict[str, tuple[float | None, float]]] = {}
    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in submissions:
            notebook = gb.find_submission_notebook(assignment, assignment, student)
            scores[student] = {grade.name: (grade.score if grade.auto_score is not None
                                            or grade.manual_score is not None else None,
                                            grade.max_score) for grade in notebook.grades}
    return scores


def submit_solutions(course: Path, assignment: str, student: str = "solved") -> Path:
    """``student`` submits the released ``assignment`` with the reference answers pasted in; the
    path of ``course/submitted/<student>/<assignment>/<assignment>.ipynb``.

    Raises
    ------
    FileNotFoundError
        If the assignment was not released.
    """
    released = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    target = course / "submitted" / student / assignment / f"{assignment}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(paste_solutions(released, source), target)
    return target


def grading_problems(course: Path, assignment: str, student: str) -> list[str]:
    """What went wrong grading ``student``'s ``assignment``: cells stopped by their time
    limit, and automatic checks that did not score full marks; empty if all went well (an
    assignment without any automatic check is a problem too)."""
    from nbgrader.api import Gradebook

    graded = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb",
                           as_version=4)
    problems = [f"stopped by its time limit: {cell.source.split(chr(10))[0]}"
                for cell in graded.cells if cell.cell_type == "code"
                for out in cell.get("outputs", []) if out.get("ename") == "CellTimeoutError"]
    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(assignment, assignment, student)
        checks = [(g.name, g.score, g.max_score) for g in notebook.grades
                  if g.name.endswith("-check")]
    if not checks:
        problems.append("no automatic check")
    problems += [f"{name} scored {score} of {most}" for name, score, most in checks
                 if score != most]
    return problems


def grade_chapter(chapter: Path, course: Path,
                  trim=None) -> dict[str, dict[str, tuple[float | None, float]]]:
    """Release ``chapter`` and autograde two submissions, ``"blank"`` (as released) and
    ``"solved"`` (reference answers pasted in); ``trim`` maps the source notebook to a shorter one.
    """
    write_course([chapter], course)
    assignment = chapter.stem
    source_path = course / "source" / assignment / f"{assignment}.ipynb"
    if trim is not None:
        nbformat.write(trim(nbformat.read(source_path, as_version=4)), source_path)
    nbgrader(course, "generate_assignment", assignment, "--force")
    released = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    source = nbformat.read(source_path, as_version=4)
    return autograde(course, assignment, {"blank": released, "solved": paste_solutions(released, source)})


def main(argv: list[str] | None = None) -> int:
    """Grade every chapter given (blank and solved submissions, after preparing it) and print a table."""
    parser = argparse.ArgumentParser(prog="python -m attncourse.course.grading")
    parser.add_argument("chapters", nargs="+", type=Path, help="notebooks/*.md files")
    args = parser.parse_args(argv)
    print("| chapter | blank (auto) | solved (auto) | written (manual) | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for chapter in args.chapters:
        course = Path(tempfile.mkdtemp(prefix="attncourse-nbgrader-"))
        with contextlib.redirect_stdout(sys.stderr):  # grading never trains: prepare first
            prepare([chapter], runs_dir())
        start = time.perf_counter()
        try:
            scores = grade_chapter(chapter, course)
        finally:
            shutil.rmtree(course, ignore_errors=True)
        auto = {k: v for k, v in scores["solved"].items() if k.endswith("-check")}
        written = len(scores["solved"]) - len(auto)
        blank = sum(scores["blank"][k][0] or 0 for k in auto)
        solved = sum(v[0] or 0 for v in auto.values())
        total = sum(v[1] for v in auto.values())
        print(f"| {chapter.stem} | {blank:g}/{total:g} | {solved:g}/{total:g} | {written} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
