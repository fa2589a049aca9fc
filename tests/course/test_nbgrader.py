"""The instructor's guide's grading cycle, run command by command as the page shows it.

``book/instructors.md`` gives the cycle as bash blocks whose first line says who runs
them (``# instructor: ...``, ``# student: ...``). This test runs those blocks, as written,
on chapter 4 cut to its exercises (to stay quick) with two students: ``alice`` pastes the
reference answers, ``bob`` submits the notebook as released. Only the exchange folder is
moved into the test's temporary folder. Every chapter in full, blank and solved:
``python -m attncourse.course.grading notebooks/*.md``.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from attncourse.course.grading import grading_problems, scripts_on_path
from attncourse.course.nbgrader_source import paste_solutions
from attncourse.course.plain import LEFTOVERS

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "book" / "instructors.md"
CHAPTER = "04_self_attention"
EXCHANGE = "/srv/nbgrader/exchange"


def guide_blocks() -> dict[str, str]:
    """The guide's bash blocks that start with ``# instructor: ...`` or ``# student: ...``."""
    blocks = re.findall(r"```bash\n(# (?:instructor|student): [^\n]+)\n(.*?)```",
                        GUIDE.read_text(encoding="utf-8"), re.S)
    return {title[2:]: body for title, body in blocks}


def exercises_only(nb):
    """The chapter's imports, then everything from its first exercise on."""
    start = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and c.source.startswith("### Exercise"))
    cells = []
    for cell in nb.cells[:start]:
        if cell.cell_type == "code" and not cell.source.startswith("%"):
            lines = cell.source.split("\n")
            imports = [line for node in ast.parse(cell.source).body
                       if isinstance(node, (ast.Import, ast.ImportFrom))
                       for line in lines[node.lineno - 1:node.end_lineno]]
            if imports:
                cells.append(nbformat.v4.new_code_cell("\n".join(imports)))
    nb.cells = cells + nb.cells[start:]
    return nb


def run_block(body: str, cwd: Path, env: dict) -> str:
    start = time.perf_counter()
    done = subprocess.run(["bash", "-e", "-c", body], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{body}\n{done.stdout}\n{done.stderr}"
    print(f"{time.perf_counter() - start:6.1f} s  {body.splitlines()[0]}")
    return done.stdout + done.stderr


def test_the_guides_grading_cycle_runs_as_written(tmp_path):
    blocks = guide_blocks()
    assert list(blocks) == ["instructor: release", "student: fetch and submit",
                            "instructor: collect, grade, feed back, export", "student: feedback"]
    exchange = tmp_path / "exchange"
    blocks = {k: v.replace(EXCHANGE, str(exchange)) for k, v in blocks.items()}
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "ATTNCOURSE_RUNS": str(tmp_path / "runs"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "attncourse", "student-edition", "class",
                           "--chapter", CHAPTER], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    course = tmp_path / "class" / "nbgrader"
    source_path = course / "source" / CHAPTER / f"{CHAPTER}.ipynb"
    nbformat.write(exercises_only(nbformat.read(source_path, as_version=4)), source_path)

    run_block(blocks["instructor: release"], tmp_path, env)
    released = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    text = "\n".join(cell.source for cell in released.cells)
    assert "BEGIN SOLUTION" not in text and "np.tril" not in text
    assert text.count("raise NotImplementedError()") == 3 and text.count("YOUR ANSWER HERE") == 2
    assert not LEFTOVERS.search(text), LEFTOVERS.search(text)
    # A student's Run All goes through the unanswered notebook: every check "not passed yet".
    from nbclient import NotebookClient

    ran = nbformat.from_dict(released)
    NotebookClient(ran, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = "\n".join(str(out.get("data", {}).get("text/plain", "")) + out.get("text", "")
                      for cell in ran.cells if cell.cell_type == "code" for out in cell.outputs)
    assert shown.count("not passed yet") == 3, shown
    assert not [out for cell in ran.cells if cell.cell_type == "code" for out in cell.outputs
                if out.output_type == "error"]

    # The student's block up to `nbgrader submit`, the work, then the rest of the block.
    lines = blocks["student: fetch and submit"].strip().split("\n")
    cut = next(i for i, line in enumerate(lines) if line.startswith("nbgrader submit"))
    setup = [line for line in lines[:cut] if not line.startswith("nbgrader")]
    fetch, submit = "\n".join(lines[:cut]), "\n".join(setup + lines[cut:])
    source = nbformat.read(source_path, as_version=4)
    for student in ("alice", "bob"):
        home = tmp_path / "home" / student
        home.mkdir(parents=True)
        # nbgrader names a submission after the OS account; the test has one, so each
        # student's folder says who they are. Each has a home of their own, as two accounts
        # do: nbgrader's cache of submissions lives there, and fetch_feedback hands back all
        # that the cache holds (the guide does not support students sharing an account).
        (home / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.student_id = {student!r}\n")
        student_env = {**env, "HOME": str(home)}
        run_block(fetch, home, student_env)
        if student == "alice":  # answers every coding exercise with the reference
            path = home / CHAPTER / f"{CHAPTER}.ipynb"
            nbformat.write(paste_solutions(nbformat.read(path, as_version=4), source), path)
        run_block(submit, home, student_env)

    start = time.perf_counter()
    log = run_block(blocks["instructor: collect, grade, feed back, export"], tmp_path, env)
    seconds = time.perf_counter() - start
    assert "cannot be converted to a float" not in log, log  # test cells display, not return
    with open(course / "grades.csv", newline="") as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(grades) >= {"alice", "bob"}, (grades, log)
    assert float(grades["alice"]["raw_score"]) == 3.0, grades["alice"]  # 3 checks; written: by hand
    assert float(grades["bob"]["raw_score"]) == 0.0, grades["bob"]
    # tools/autograde_seconds.py's verdict on a submission: nothing for the reference
    # answers, each unanswered check for the blank one.
    # The grade of record, computed outside the students' kernels, agrees.
    records = {r["student"]: r for r in json.loads((course / f"record_{CHAPTER}.json").read_text())}
    assert (records["alice"]["score"], records["bob"]["score"]) == (3, 0), records
    from nbgrader.api import Gradebook

    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, points in (("alice", 1), ("bob", 0)):
            notebook = gb.find_submission_notebook(CHAPTER, CHAPTER, student)
            checks = [g.manual_score for g in notebook.grades if g.name.endswith("-check")]
            assert checks == [points] * 3, (student, checks)  # --gradebook set them
    assert grading_problems(course, CHAPTER, "alice") == []
    problems = grading_problems(course, CHAPTER, "bob")
    assert len(problems) == 3 and all("-check scored 0" in p for p in problems), problems
    for student in ("alice", "bob"):
        home = tmp_path / "home" / student
        run_block(blocks["student: feedback"], home, {**env, "HOME": str(home)})
        pages = list((home / CHAPTER / "feedback").rglob(f"{CHAPTER}.html"))
        assert len(pages) == 1, pages
        page = pages[0].read_text(encoding="utf-8")
        assert "{exercise}" not in page and ":label:" not in page
    # The time a submission costs (printed with `pytest -s`; the guide's figure comes from it).
    print(f"\ngrading cycle: {seconds:.1f} s for 2 submissions (collect to export)")
