"""Seconds ``prepare`` takes per chapter, and nbgrader's ``autograde`` per submission.

The instructors' guide says how long grading one submission takes. This
does what the guide tells an instructor to do, timed: write the course folder with the
chapters given (whole, training included), ``nbgrader generate_assignment``, then for each
chapter in the order given submit the reference answers for student ``first`` and run
``nbgrader autograde <chapter> --student first --create --force``, then the same for
student ``later``. Since grading never trains (the course's config sets
``ATTNCOURSE_NO_TRAINING`` for autograde), each chapter is first prepared, timed
(``python -m attncourse prepare``'s :func:`~attncourse.course.prepare.prepare`, into
``ATTNCOURSE_RUNS``, a new folder shared by the chapters of this run in their order); both
submissions then load the trained models. (The guide's table was measured with ``--runs``
from ``make test``'s book build, below.) Every cell must finish within its limit
and every automatic check must score (:func:`attncourse.course.grading.grading_problems`), or
the run exits 1.

Run it from the repository root; it prints one Markdown table row per chapter as it goes,
with the load average (``/proc/loadavg``, 1 minute) before each autograde::

    OMP_NUM_THREADS=1 .venv/bin/python tools/autograde_seconds.py notebooks/06_transformer.md

``--keep DIR`` keeps the course folder (and its runs) in ``DIR`` instead of a temporary one.
``--runs DIR`` starts the course's runs folder as a copy of ``DIR``, a trained-model cache such
as the one ``make test``'s book build leaves in ``_build/runs``: ``prepare`` then trains nothing
(it runs each chapter once, loading them), so its column is
not what a first ``prepare`` costs, while the seconds per submission are the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncourse.course.grading import (  # noqa: E402
    grading_problems,
    nbgrader,
    submit_solutions,
)
from attncourse.course.nbgrader_source import (  # noqa: E402
    write_course,
)
from attncourse.course.prepare import prepare  # noqa: E402
from attncourse.runtime import runs_dir  # noqa: E402

STUDENTS = ("first", "later")


def load() -> str:
    """The machine's 1-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0]


def time_chapters(chapters: list[Path], course: Path) -> int:
    """Grade each chapter's two submissions, print a row each; 1 if any went wrong.

    The kernels nbgrader starts must import this checkout's ``attncourse`` (``PYTHONPATH``)
    and cache the trained models in a new folder (``ATTNCOURSE_RUNS``): :func:`main` sets both.
    """
    write_course(chapters, course)
    nbgrader(course, "generate_assignment", "*", "--force")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, "
          f"{os.cpu_count()} CPUs, course in {course}")
    print("| chapter | prepare (s) | load | first (s) | load | later (s) | load | problems |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = 0
    for chapter in chapters:
        name, cells, problems = chapter.stem, [], []
        before = load()
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # its progress lines stay out of the table
            prepare([chapter], runs_dir())
        cells += [f"{time.perf_counter() - start:.1f}", before]
        for student in STUDENTS:
            submit_solutions(course, name, student)
            before = load()
            start = time.perf_counter()
            nbgrader(course, "autograde", name, "--student", student, "--create", "--force")
            cells += [f"{time.perf_counter() - start:.1f}", before]
            problems += [f"{student}: {p}" for p in grading_problems(course, name, student)]
        failed |= bool(problems)
        print(f"| {name} | {' | '.join(cells)} | {'; '.join(problems) or 'none'} |", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/autograde_seconds.py")
    parser.add_argument("chapters", nargs="+", type=Path, help="notebooks/*.md files, in order")
    parser.add_argument("--keep", type=Path, help="an empty or new folder for the course")
    parser.add_argument("--runs", type=Path, help="a trained-model cache to start from (copied)")
    args = parser.parse_args(argv)
    course = (args.keep or Path(tempfile.mkdtemp(prefix="attncourse-autograde-"))) / "course"
    os.environ["ATTNCOURSE_RUNS"] = str(course / "runs")
    if args.runs is not None:
        shutil.copytree(args.runs, course / "runs", ignore=shutil.ignore_patterns("prepared.json"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return time_chapters([path.resolve() for path in args.chapters], course)


if __name__ == "__main__":
    sys.exit(main())
