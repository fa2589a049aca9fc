"""The guide's grading cycle for chapters 6, 10 and 12 in full, on a machine a parallel job keeps busy.

A grader is rarely idle: a chapter 10 submission once got no grade at all when its training
cell ran past its limit on a loaded machine ("error processing assignment"). Grading no
longer trains (``prepare`` does, once), and a cell past its limit costs its exercise only;
this test holds the cycle to that. It runs the instructor's guide's command blocks
(``book/instructors.md``) as written, with the chapter's name in place of chapter 4's and the
exchange moved into a temporary folder, for each of chapters 6, 10 and 12, whole, training
cells included: release and ``prepare``, two students fetching and submitting (``ada`` the
reference answers, ``bo`` the notebook as released), then collect, ``autograde`` two at a
time (the guide's ``xargs -P 2``), the grade of record, feedback and export, while busy loops
(one per core) load the machine: they run from ``collect`` to ``export``, where a submission
could lose its grade; ``prepare`` runs before them, while the students work, as the guide says.
Every submission must have its grade in nbgrader's gradebook, the reference answers every
automatic point and the blank notebook none, in ``autograde`` and in the grade of record.

It runs in ``make test``'s stage ``classroom``, after the book build, which trained every
chapter's models into ``$ATTNCOURSE_RUNS``; the stage passes that folder as
``ATTNCOURSE_TRAINED_RUNS`` and the test copies it, so ``prepare`` trains nothing and runs each
chapter once (without it, ``prepare`` trains from scratch, about 15 minutes more). ``pytest tests``
leaves it out (the marker ``under_load``, deselected in ``pyproject.toml``); run it with
``pytest -m under_load tests/course/test_under_load.py``. It took 5.5 to 7.1 minutes in four
runs on 2 cores other jobs shared (29 November 2026): about 1.6 to prepare the three
chapters, 2.7 to 4.7 to grade them under load (42 to 115 s a chapter; in the run that timed
each line, autograde of the two submissions took 62 s for chapter 6, 22 s for chapter 10 and
55 s for chapter 12, the grade of record 6 to 9 s, collect, feedback and export about 15 s),
and half a minute to write the editions, release, fetch and submit. Most of it is the
chapters' own cells, which every submission runs; those runs were measured while chapter 6's
copying model and chapter 12's passkey models still trained in memory in every submission
(some 40 s each), which ``prepare`` now trains once. The test prints each line's seconds.

Its check of "every submission graded" is itself tested, in seconds, with the unit tests: a
submission whose kernel dies is found ungraded (the second test below).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attncourse.course.grading import grading_problems, scripts_on_path
from attncourse.course.nbgrader_source import _meta, paste_solutions, write_course

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "book" / "instructors.md"
GUIDE_CHAPTER = "04_self_attention"
EXCHANGE = "/srv/nbgrader/exchange"
CHAPTERS = ("06_transformer", "10_serving_attention", "12_long_context")
#: ada submits the reference answers, bo the notebook as it was released.
STUDENTS = ("ada", "bo")


def guide_blocks(chapter: str, exchange: Path) -> dict[str, str]:
    """The guide's ``# instructor: ...`` and ``# student: ...`` bash blocks, for ``chapter``."""
    blocks = re.findall(r"```bash\n# ((?:instructor|student): [^\n]+)\n(.*?)```",
                        GUIDE.read_text(encoding="utf-8"), re.S)
    return {title: body.replace(GUIDE_CHAPTER, chapter).replace(EXCHANGE, str(exchange))
            for title, body in blocks}


def run_block(body: str, cwd: Path, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    done = subprocess.run(["bash", "-e", "-c", body], cwd=cwd, env=env, capture_output=True, text=True)
    assert not check or done.returncode == 0, f"{body}\n{done.stdout}\n{done.stderr}"
    print(f"{time.perf_counter() - start:6.1f} s  {body.strip().splitlines()[-1][:100]}", flush=True)
    return done


def line_seconds(body: str, cwd: Path, env: dict) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a block as :func:`run_block` does (not stopping on a failure), noting the time each
    of its lines starts; the block's result and each line's seconds."""
    lines = [line for line in body.strip().split("\n") if line.strip()]
    marked = "\n".join(f"echo \"@line {i} $EPOCHREALTIME\" >&2\n{line}" for i, line in enumerate(lines))
    done = run_block(marked, cwd, env, check=False)
    starts = [(float(at), lines[int(i)]) for i, at in re.findall(r"^@line (\d+) (\d+\.\d+)$", done.stderr, re.M)]
    ends = [at for at, _ in starts[1:]] + [time.time()]
    return done, [f"{end - at:6.1f} s  {line[:100]}" for (at, line), end in zip(starts, ends)]


def burn(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin until they are killed: the parallel job loading the machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def cpu_seconds(process: subprocess.Popen) -> float:
    """CPU seconds a running process has used (``/proc/PID/stat``: user and system time)."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ungraded(course: Path, chapter: str, students: list[str]) -> list[str]:
    """The submissions of ``chapter`` without a grade: no autograded notebook (nbgrader removes
    it on "error processing assignment"), no submission in the gradebook, or a check that
    autograde did not score."""
    from nbgrader.api import Gradebook, MissingEntry

    missing = [f"{student}: no autograded notebook" for student in students
               if not (course / "autograded" / student / chapter / f"{chapter}.ipynb").is_file()]
    if not (course / "gradebook.db").is_file():
        return missing + ["no gradebook"]
    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            try:
                notebook = gb.find_submission_notebook(chapter, chapter, student)
            except MissingEntry:
                missing.append(f"{student}: not in the gradebook")
                continue
            checks = [g for g in notebook.grades if g.name.endswith("-check")]
            if not checks or any(g.auto_score is None for g in checks):
                missing.append(f"{student}: a check without an automatic score")
    return missing


def auto_points(course: Path, chapter: str, student: str) -> tuple[float, float]:
    """``(points, most)`` that ``autograde`` gave ``student``'s checks (before the grade of record)."""
    from nbgrader.api import Gradebook

    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        checks = [g for g in gb.find_submission_notebook(chapter, chapter, student).grades
                  if g.name.endswith("-check")]
        return sum(g.auto_score for g in checks), sum(g.max_score for g in checks)


def submit(chapter: str, blocks: dict[str, str], home: Path, env: dict, answered: bool, source: Path) -> None:
    """A student's block up to ``nbgrader submit``, the work (the reference answers or none), the rest."""
    lines = blocks["student: fetch and submit"].strip().split("\n")
    cut = next(i for i, line in enumerate(lines) if line.startswith("nbgrader submit"))
    setup = [line for line in lines[:cut] if not line.startswith("nbgrader")]
    run_block("\n".join(lines[:cut]), home, env)
    if answered:
        path = home / chapter / f"{chapter}.ipynb"
        nbformat.write(paste_solutions(nbformat.read(path, as_version=4),
                                       nbformat.read(source, as_version=4)), path)
    run_block("\n".join(setup + lines[cut:]), home, env)


@pytest.fixture
def course_env(tmp_path):
    """The environment of every command, with a runs folder copied from the book build's."""
    runs = tmp_path / "runs"
    trained = os.environ.get("ATTNCOURSE_TRAINED_RUNS")
    if trained and Path(trained).is_dir():
        shutil.copytree(trained, runs, ignore=shutil.ignore_patterns("prepared.json"))
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "ATTNCOURSE_RUNS": str(runs), "PYTHONPATH": str(ROOT)}


def grade_under_load(chapter: str, course: Path, blocks: dict[str, str], env: dict) -> None:
    """The guide's collect-to-export block for ``chapter`` with one busy loop per core running."""
    students = list(STUDENTS)
    burners = burn(os.cpu_count() or 2)
    start = time.perf_counter()
    try:
        done, lines = line_seconds(blocks["instructor: collect, grade, feed back, export"],
                                   course.parent.parent, env)
        seconds = time.perf_counter() - start
        share = [cpu_seconds(p) / seconds for p in burners]
        assert all(p.poll() is None for p in burners), "a busy loop stopped"
    finally:
        for process in burners:
            process.kill()
            process.wait()
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"{chapter}: graded {len(students)} submissions in {seconds:.0f} s, load {load}, "
          f"each busy loop on {min(share):.0%}-{max(share):.0%} of a core", flush=True)
    print("\n".join(lines), flush=True)
    log = done.stdout + done.stderr
    assert ungraded(course, chapter, students) == [], log
    assert "error processing assignment" not in log, log
    assert done.returncode == 0, log
    assert min(share) > 0.1, share  # the machine was loaded all along
    assert grading_problems(course, chapter, "ada") == []  # every check, no cell past its limit
    points, most = auto_points(course, chapter, "ada")
    assert points == most > 0, (points, most)
    assert auto_points(course, chapter, "bo") == (0, most)
    records = {r["student"]: r for r in json.loads((course / f"record_{chapter}.json").read_text())}
    assert records["ada"]["score"] == most and records["bo"]["score"] == 0, records


@pytest.mark.under_load
def test_the_guides_cycle_grades_every_submission_on_a_loaded_machine(tmp_path, course_env):
    env = course_env
    done = subprocess.run([sys.executable, "-m", "attncourse", "student-edition", "class",
                           *[arg for chapter in CHAPTERS for arg in ("--chapter", chapter)]],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    course = tmp_path / "class" / "nbgrader"
    for chapter in CHAPTERS:
        blocks = guide_blocks(chapter, tmp_path / "exchange")
        assert list(blocks) == ["instructor: release", "student: fetch and submit",
                                "instructor: collect, grade, feed back, export", "student: feedback"]
        run_block(blocks["instructor: release"], tmp_path, env)
        for student in STUDENTS:
            home = tmp_path / "home" / student
            home.mkdir(parents=True, exist_ok=True)
            (home / "nbgrader_config.py").write_text(
                f"c = get_config()\nc.CourseDirectory.student_id = {student!r}\n")
            submit(chapter, blocks, home, {**env, "HOME": str(home)}, answered=student == "ada",
                   source=course / "source" / chapter / f"{chapter}.ipynb")
        # Before grading, the check finds every submission ungraded (it can fail).
        run_block(blocks["instructor: collect, grade, feed back, export"].split("\nls submitted")[0],
                  tmp_path, env)
        assert ungraded(course, chapter, list(STUDENTS)) == [f"{s}: no autograded notebook" for s in STUDENTS] + \
            (["no gradebook"] if not (course / "gradebook.db").is_file() else
             [f"{s}: not in the gradebook" for s in STUDENTS])
        grade_under_load(chapter, course, blocks, env)
    # A student who never submitted is reported, from the gradebook too.
    assert ungraded(course, CHAPTERS[-1], ["nobody"]) == ["nobody: no autograded notebook",
                                                          "nobody: not in the gradebook"]


def test_a_submission_left_ungraded_is_found(tmp_path, course_env):
    # The companion of the test above, on a forced failure (unmarked: it runs with the unit
    # tests, in seconds): a submission whose kernel dies gets "error processing assignment"
    # from the guide's autograde line, and the check names it; the other one is graded.
    course = tmp_path / "course"
    write_course([], course)
    answer = nbformat.v4.new_code_cell("def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")
    answer.metadata["nbgrader"] = _meta("ex-one", solution=True, grade=False)
    check = nbformat.v4.new_code_cell("assert one() == 1")
    check.metadata["nbgrader"] = _meta("ex-one-check", solution=False, grade=True, points=1)
    (course / "source" / "tiny").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[answer, check]), course / "source" / "tiny" / "tiny.ipynb")
    run_block("nbgrader generate_assignment tiny --force", course, course_env)
    source = nbformat.read(course / "source" / "tiny" / "tiny.ipynb", as_version=4)
    for student, first in (("good", "x = 1"), ("dead", "import os\nos._exit(1)")):
        nb = paste_solutions(nbformat.read(course / "release" / "tiny" / "tiny.ipynb", as_version=4), source)
        nb.cells.insert(0, nbformat.v4.new_code_cell(first))
        (course / "submitted" / student / "tiny").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "tiny" / "tiny.ipynb")
    line = next(line for line in GUIDE.read_text(encoding="utf-8").splitlines()
                if line.startswith("ls submitted | xargs"))
    done = run_block(line.replace(GUIDE_CHAPTER, "tiny"), course, course_env, check=False)
    assert done.returncode != 0 and "error processing assignment" in done.stdout + done.stderr
    # nbgrader removed its autograded notebook, and the gradebook holds it without a score.
    assert ungraded(course, "tiny", ["good", "dead"]) == ["dead: no autograded notebook",
                                                          "dead: a check without an automatic score"]
