"""nbgrader autogrades a submission of every chapter, and no cell waits on a widget.

Autograding once froze after cells that display an explorer until the cell's limit
(300 s, 120 s) ran out (the cause and the fix: ``tests/widgets/test_headless.py``). Here
every chapter becomes an nbgrader assignment as the course's command writes it, cut to
stay quick (the training is left out): its imports, the cells that display an explorer and
need nothing else, and its exercises. Every cell gets a limit of :data:`LIMIT` seconds, far
below the guide's (60 s for an exercise cell, 120 s and more for the chapter's own), and
one student submits the reference answers: every check must score, and no cell may be
stopped by its limit. The seconds per chapter are printed (``pytest -s``).
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attncourse.course.exercises import chapter_exercises
from attncourse.course.grading import grading_problems, submit_solutions
from attncourse.course.nbgrader_source import write_course

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
#: Seconds any cell may run: enough for a check (a few seconds, the Triton interpreter's
#: included), far too little for a cell left waiting on a front end.
LIMIT = 30
EXPLORERS = ("Explorer(", "Stepper(")
#: Exercises with a :timeout: of their own: their checks run the learner's training.
TRAINING = {ex.label for path in CHAPTERS for ex in chapter_exercises(path) if ex.timeout is not None}


def _names(source: str) -> tuple[set[str], set[str]]:
    """Names a cell binds (imports, assignments, definitions) and names it reads."""
    tree = ast.parse(source)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return bound, read


def quick(nb):
    """The chapter's imports, its explorers that need nothing else, then its exercises."""
    # the first exercise's heading (chapter 7b's come in the middle of a markdown cell)
    start = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and re.search(r"(?m)^### Exercise", c.source))
    imports, explorers, known = [], [], set(dir(builtins))
    for cell in nb.cells[:start]:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        tree = ast.parse(cell.source)
        lines = cell.source.split("\n")
        found = [line for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                 for line in lines[node.lineno - 1:node.end_lineno]]
        if found:
            imports.append(nbformat.v4.new_code_cell("\n".join(found)))
            known |= _names("\n".join(found))[0]
        if any(marker in cell.source for marker in EXPLORERS):
            explorers.append(cell)
    runnable = []
    for cell in explorers:
        bound, read = _names(cell.source)
        if read <= known | bound:
            runnable.append(cell)
    nb.cells = imports + runnable + nb.cells[start:]
    # An exercise whose check trains a model (chapter 7b's loop, 300 steps: its :timeout:) is left out:
    # it waits on no widget, which is what this test is about; the grade of record's test
    # grades it, and tools/autograde_seconds.py times it under nbgrader (the guide's table).
    nb.cells = [cell for cell in nb.cells if _label(cell) not in TRAINING]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata["attncourse"] = {"timeout": LIMIT}
    return nb


def _label(cell) -> str:
    """The exercise label of an nbgrader answer or check cell ('' for other cells)."""
    return cell.metadata.get("nbgrader", {}).get("grade_id", "").rsplit("-", 1)[0]


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def build_course(root: Path) -> Path:
    """A course directory whose sources are the chapters cut by :func:`quick`."""
    course = root / "course"
    write_course(CHAPTERS, course)
    for chapter in CHAPTERS:
        source_path = course / "source" / chapter.stem / f"{chapter.stem}.ipynb"
        nbformat.write(quick(nbformat.read(source_path, as_version=4)), source_path)
    return course


def assert_graded_in_time(course: Path, name: str) -> None:
    """Every check of ``name`` scored full marks, and no cell was stopped by its limit."""
    problems = grading_problems(course, name, "solved")
    assert not problems, (name, problems)


def test_every_chapter_autogrades_without_waiting(tmp_path, monkeypatch):
    # All chapters in one assignment, so that one nbgrader run and one kernel grade them
    # (one assignment per chapter costs about 25 s each on a loaded 2-core machine).
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    course = build_course(tmp_path)
    name = "every_chapter"
    cells, checks = [], 0
    for chapter in CHAPTERS:
        nb = nbformat.read(course / "source" / chapter.stem / f"{chapter.stem}.ipynb", as_version=4)
        cells += nb.cells
        checks += sum(c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-check") for c in nb.cells)
    combined = nbformat.v4.new_notebook(cells=[nbformat.from_dict({**c, "id": f"c{i}"})
                                               for i, c in enumerate(cells)], metadata=nb.metadata)
    explorers = sum(any(m in c.source for m in EXPLORERS) for c in cells if c.cell_type == "code")
    assert explorers >= 3 and checks >= 30  # the explorers of chapters 4, 5 and 8
    (course / "source" / name).mkdir()
    nbformat.write(combined, course / "source" / name / f"{name}.ipynb")
    nbgrader(course, "generate_assignment", name, "--force")
    submit_solutions(course, name)
    start = time.perf_counter()
    nbgrader(course, "autograde", name, "--create", "--force")
    print(f"\nevery chapter's exercises and explorers: {time.perf_counter() - start:.1f} s")
    assert_graded_in_time(course, name)


@pytest.mark.skipif(not os.environ.get("ATTNCOURSE_AUTOGRADE_EACH"),
                    reason="one assignment per chapter (5-6 min): set ATTNCOURSE_AUTOGRADE_EACH=1")
def test_each_chapter_autogrades_without_waiting(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    course = build_course(tmp_path)
    nbgrader(course, "generate_assignment", "*", "--force")
    seconds = {}
    for chapter in CHAPTERS:
        submit_solutions(course, chapter.stem)
        start = time.perf_counter()
        nbgrader(course, "autograde", chapter.stem, "--create", "--force")
        seconds[chapter.stem] = time.perf_counter() - start
        assert_graded_in_time(course, chapter.stem)
    print("\n" + "\n".join(f"{name}: {s:.1f} s" for name, s in seconds.items()))


def test_the_guide_gives_seconds_per_submission_for_every_chapter():
    # Typed in from tools/autograde_seconds.py: a new chapter must be measured too. A row:
    # chapter, first and later submission (s), the load averages before them.
    guide = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\w+) \| (\d+ \| \d+ \| \d\.\d-\d\.\d) \|$", guide, re.MULTILINE))
    assert set(rows) == {chapter.stem for chapter in CHAPTERS}, sorted(rows)


UNPREPARED = """import torch
from attncourse.train.loop import train_epochs


def build(device):
    model = torch.nn.Linear(1, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


train_epochs("unprepared/linear", {}, build, lambda epoch: {}, lambda model: {}, 1, progress=False,
             device="cpu")"""


def test_under_autograde_a_cell_past_its_limit_or_needing_training_costs_only_its_exercise(tmp_path,
                                                                                              monkeypatch):
    # Grading never trains (the course's config sets ATTNCOURSE_NO_TRAINING for
    # autograde), and a cell stopped by its limit costs its exercise, never the submission.
    runs = tmp_path / "runs"
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(runs))
    monkeypatch.delenv("ATTNCOURSE_NO_TRAINING", raising=False)
    chapter = ROOT / "notebooks" / "04_self_attention.md"
    course = tmp_path / "course"
    write_course([chapter], course)
    name = chapter.stem
    path = course / "source" / name / f"{name}.ipynb"
    nb = quick(nbformat.read(path, as_version=4))
    unprepared = nbformat.v4.new_code_cell(UNPREPARED)
    unprepared.metadata["attncourse"] = {"timeout": LIMIT}
    nb.cells.insert(1, unprepared)
    for cell in nb.cells:
        if _label(cell) == "ex-sa-causal":  # an endless answer: its check runs into the limit
            cell.metadata["attncourse"] = {"timeout": 5}
            if cell.metadata["nbgrader"]["solution"]:
                cell.source = "def my_causal_mask(seq_len):\n    ### BEGIN SOLUTION\n    while True:\n" \
                              "        pass\n    ### END SOLUTION"
    nbformat.write(nb, path)
    nbgrader(course, "generate_assignment", name, "--force")
    submit_solutions(course, name)
    start = time.perf_counter()
    nbgrader(course, "autograde", name, "--create", "--force")
    seconds = time.perf_counter() - start
    problems = grading_problems(course, name, "solved")
    assert problems == ["stopped by its time limit: # Graded: shows the check's result; fails under nbgrader "
                        "unless it passes.", "ex-sa-causal-check scored 0.0 of 1.0"], problems
    graded = nbformat.read(course / "autograded" / "solved" / name / f"{name}.ipynb", as_version=4)
    errors = [out.ename for cell in graded.cells if cell.source.startswith("import torch\nfrom attncourse.train")
              for out in cell.outputs if out.output_type == "error"]
    assert errors == ["UnpreparedRun"], errors
    assert not list(runs.rglob("*.pt")), "autograde trained"
    print(f"\nautograde with one endless answer and one unprepared run: {seconds:.1f} s")
