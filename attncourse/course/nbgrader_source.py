"""nbgrader *source* notebooks of the chapters, and a course directory to grade them in.

A coding exercise becomes an answer cell (the stub's ``def``, the reference body between
``### BEGIN SOLUTION`` and ``### END SOLUTION``) and a read-only graded test cell running
its check (:data:`CHECK_POINTS`; :func:`attncourse.checks.graded` fails only under
nbgrader). A written exercise becomes a manually graded answer cell
(:data:`WRITTEN_POINTS`) and a read-only rubric cell (:func:`rubric_cell`) whose
mark-scheme region only the formgrader shows (:data:`CONFIG`). The rest is the student
edition.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from attncourse.course.editions import _bare, _whole_cells, cell_from_part
from attncourse.course.exercises import Exercise, read_chapter, split_notebook
from attncourse.course.rubrics import RUBRICS
from attncourse.runtime import NO_TRAINING_ENV

CHECK_POINTS = 1
WRITTEN_POINTS = 1
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: Seconds an answer or test cell may run: the checks run small hidden cases in well under a
#: second, so this only ends an endless loop early. An exercise whose check runs the
#: learner's own training declares its own limit (its ``:timeout:`` option, see
#: :func:`exercise_limit`).
EXERCISE_LIMIT = 60


def exercise_limit(ex: Exercise) -> int:
    """Seconds the answer and test cells of ``ex`` may run: its ``:timeout:``, else :data:`EXERCISE_LIMIT`."""
    return ex.timeout if ex.timeout is not None else EXERCISE_LIMIT


#: A chapter's other cells may run this many times the chapter's measured execution time
#: (book/chapter_timings.json, first run with training, 2 CPU cores; an upper bound on
#: its slowest cell), and at least :data:`MINIMUM_LIMIT` seconds.
LIMIT_FACTOR = 2
MINIMUM_LIMIT = 120
#: Limit of a chapter that has no measured time.
UNMEASURED_LIMIT = 1800
TIMINGS = Path(__file__).resolve().parents[2] / "book" / "chapter_timings.json"
#: nbgrader_config.py of the course directory the command writes.
CONFIG = '''"""nbgrader configuration of the attncourse assignments (written by attncourse)."""
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "attncourse"
# Per-cell time limits (seconds). attncourse writes each code cell's limit into its metadata
# ("attncourse": {{"timeout": ...}}): {exercise} s for answer and test cells, so an endless
# loop costs a minute, and {factor} x the chapter's measured run time for the chapter's own cells
# (training included). A cell without one gets c.Execute.timeout.
c.Execute.timeout = {default}

# Each written answer is followed by a read-only rubric cell whose "### BEGIN MARK SCHEME"
# region the release drops and autograde restores, so the formgrader shows it to the
# grader. nbgrader expects such regions in "task" cells (graded on their own); these cells
# are read-only and carry no points, so the check is off. The feedback drops the region too.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearMarkScheme, GetGrades  # noqa: E402

c.ClearMarkScheme.enforce_metadata = False
c.GenerateFeedback.preprocessors = [GetGrades, ClearMarkScheme, CSSHTMLHeaderPreprocessor]


def cell_limit(cell):
    """The time limit of one cell: its own, else the default."""
    return cell.get("metadata", {{}}).get("attncourse", {{}}).get("timeout", {default})


c.Execute.timeout_func = cell_limit

# Grading never trains: `python -m attncourse prepare CHAPTER` trained and cached the
# chapter's models beforehand (same $ATTNCOURSE_RUNS); under autograde a cached model that is
# missing or unfinished fails its cell at once instead of training in every submission.
# The kernels autograde starts inherit this process's environment.
import os  # noqa: E402
import sys  # noqa: E402

if sys.argv[1:2] == ["autograde"]:
    os.environ["{no_training}"] = "1"
'''


#: nbgrader's delimiters of a mark scheme (a rubric): dropped from the release, restored by
#: ``autograde`` for the formgrader.
MARK_SCHEME = ("### BEGIN MARK SCHEME", "### END MARK SCHEME")
#: What the student sees of a rubric cell: the region is gone, this line stays.
RUBRIC_PLACEHOLDER = "*(The grader's rubric for the answer above; empty in your copy.)*"


def rubric_cell(label: str, reference: str, rubric: str) -> NotebookNode:
    """The read-only cell after a written answer: its reference answer and rubric between
    :data:`MARK_SCHEME`'s delimiters, which the release drops and ``autograde`` restores, so
    only the formgrader shows them (nothing of them in the metadata, which the release keeps).
    """
    begin, end = MARK_SCHEME
    cell = nbformat.v4.new_markdown_cell("\n".join([
        RUBRIC_PLACEHOLDER, begin, "", "**Reference answer**", "", reference.strip(), "", rubric, "", end]))
    cell.metadata["nbgrader"] = _meta(f"{label}-rubric", solution=False, grade=False)
    return cell


def chapter_limit(chapter: str, timings: Path = TIMINGS) -> int:
    """Seconds a cell of ``chapter`` may run under nbgrader (see :data:`LIMIT_FACTOR`)."""
    seconds = json.loads(timings.read_text(encoding="utf-8"))["seconds"] if timings.exists() else {}
    if chapter not in seconds:
        return UNMEASURED_LIMIT
    return max(MINIMUM_LIMIT, math.ceil(LIMIT_FACTOR * seconds[chapter] / 60) * 60)


def _meta(grade_id: str, *, solution: bool, grade: bool, points: int = 0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _function(source: str, name: str) -> tuple[list[str], ast.FunctionDef]:
    lines = source.split("\n")
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return lines, node
    raise ValueError(f"no function {name!r} in the cell:\n{source}")


def _first_line(fn: ast.FunctionDef) -> int:
    """The function's first line, its decorators included (a Triton kernel's ``@jit``)."""
    return min([fn.lineno] + [decorator.lineno for decorator in fn.decorator_list])


def answer_source(ex: Exercise, stub: str) -> str:
    """The answer cell of a coding exercise: the stub without its check call, the reference
    body (and the helpers defined before it) between the solution delimiters.

    Raises
    ------
    ValueError
        If the stub or the solution cell does not define ``ex.function``.
    """
    stub_lines, stub_fn = _function(stub, ex.function)
    header = stub_lines[_first_line(stub_fn) - 1:stub_fn.body[0].lineno - 1]
    # The stub's other statements stay, except the check call, which the test cell makes.
    before, after = [], []
    for node in ast.parse(stub).body:
        if getattr(node, "name", None) == ex.function or ex.check in ast.get_source_segment(stub, node):
            continue
        (before if node.lineno < stub_fn.lineno else after).extend(
            stub_lines[node.lineno - 1:node.end_lineno])
    source = ex.solution_code[0]
    sol_lines, sol_fn = _function(source, ex.function)
    body = sol_lines[sol_fn.body[0].lineno - 1:sol_fn.end_lineno]
    indent = body[0][:len(body[0]) - len(body[0].lstrip())]
    helpers = [node for node in ast.parse(source).body
               if node.lineno < sol_fn.lineno and isinstance(
                   node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))]
    if helpers:
        extra = [line for node in helpers for line in sol_lines[node.lineno - 1:node.end_lineno]]
        whole = sol_lines[_first_line(sol_fn) - 1:sol_fn.end_lineno]
        return "\n".join([*before, BEGIN, *extra, "", *whole, END, *after])
    return "\n".join([*before, *header, indent + BEGIN, *body, indent + END, *after])


def check_source(ex: Exercise) -> str:
    """The graded test cell of a coding exercise (see :func:`attncourse.checks.graded`)."""
    return ("# Graded: shows the check's result; fails under nbgrader unless it passes.\n"
            "from attncourse.checks import graded\n\n"
            f"graded({ex.check}({ex.function}))")


def source_notebook(nb: NotebookNode, chapter: str = "") -> NotebookNode:
    """The nbgrader source notebook of a chapter.

    Raises
    ------
    ValueError
        As :func:`attncourse.course.exercises.split_notebook`, or for a stub without a
        function or a check call.
    """
    parts, exercises = split_notebook(nb, chapter)
    by_stub = {ex.stub_cell: ex for ex in exercises if ex.kind == "coding"}
    for ex in by_stub.values():
        if not (ex.function and ex.check and ex.solution_code):
            raise ValueError(f"{chapter}: the coding exercise {ex.label} needs a stub defining a "
                             "function, a check_* call and a solution cell")
    whole = _whole_cells(nb, parts)
    limit = chapter_limit(chapter)
    cells = []
    for part in parts:
        ex = by_stub.get(part.cell) if part.cell_type == "code" and not part.solution else None
        if ex is not None:
            answer = nbformat.v4.new_code_cell(answer_source(ex, part.source))
            answer.metadata["nbgrader"] = _meta(f"{ex.label}-answer", solution=True, grade=False)
            test = nbformat.v4.new_code_cell(check_source(ex))
            test.metadata["nbgrader"] = _meta(f"{ex.label}-check", solution=False, grade=True,
                                              points=CHECK_POINTS)
            for cell in (answer, test):
                cell.metadata["attncourse"] = {"timeout": exercise_limit(ex)}
            cells += [answer, test]
        elif part.solution and part.role == "block":
            # nbgrader's release replaces the whole answer cell with "YOUR ANSWER HERE"; the
            # rubric goes into the read-only cell after it, where the formgrader shows it.
            answer = nbformat.v4.new_markdown_cell(part.source)
            answer.metadata["nbgrader"] = _meta(f"{part.label}-answer", solution=True, grade=True,
                                                points=WRITTEN_POINTS)
            cells.append(answer)
            if part.label in RUBRICS:
                cells.append(rubric_cell(part.label, part.source, RUBRICS[part.label].markdown()))
        elif part.role == "self-check":
            continue    # a graded copy does not hand out the answers
        elif not part.solution:
            cell = cell_from_part(nb, part, part.cell in whole)
            if cell.cell_type == "code":
                cell.metadata["attncourse"] = {"timeout": limit}
            cells.append(cell)
    return assignment_links(_bare(nb, cells))


#: Said once, under the licence notice, in a release that links to other chapters.
LINKS_NOTE = ("Links to other chapters open your own copy of that chapter, which nbgrader "
              "fetches into a folder beside this one (`../<chapter>/<chapter>.ipynb`). A "
              "chapter you have not fetched yet opens nothing: fetch it first "
              "(`nbgrader fetch_assignment <chapter>`), or read it in the course's book.")
_CHAPTER_LINK = re.compile(r"\]\(([A-Za-z0-9_]+)\.ipynb\)")


def assignment_links(nb: NotebookNode) -> NotebookNode:
    """Point ``nb``'s links to other chapters at their nbgrader assignment folders.

    Each chapter is its own assignment: a student's fetched copy of chapter X is
    ``X/X.ipynb``, a sibling of this chapter's folder. A note after the first cell (the
    licence notice) says so, and what to do when that chapter is not fetched yet.
    """
    found = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            new = _CHAPTER_LINK.sub(lambda m: f"](../{m.group(1)}/{m.group(1)}.ipynb)", cell.source)
            found |= new != cell.source
            cell.source = new
    if found:
        nb.cells.insert(1, nbformat.v4.new_markdown_cell(LINKS_NOTE))
    return nb


def paste_solutions(released: NotebookNode, source: NotebookNode) -> NotebookNode:
    """A submission: the released notebook with the source's answer cells put back."""
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in source.cells
               if cell.metadata.get("nbgrader", {}).get("solution")}
    out = nbformat.from_dict(released)
    for cell in out.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers and cell.metadata["nbgrader"].get("solution"):
            cell.source = "\n".join(line for line in answers[grade_id].split("\n")
                                    if line.strip() not in (BEGIN, END))
    return out


def write_course(chapters: list[Path], root: Path) -> list[Path]:
    """An nbgrader course directory: ``nbgrader_config.py`` and ``source/<chapter>/<chapter>.ipynb``."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "nbgrader_config.py"
    default = max(chapter_limit(path.stem) for path in chapters) if chapters else UNMEASURED_LIMIT
    config.write_text(CONFIG.format(default=default, exercise=EXERCISE_LIMIT, factor=LIMIT_FACTOR,
                                    no_training=NO_TRAINING_ENV), encoding="utf-8")
    written = [config]
    for path in chapters:
        target = root / "source" / path.stem / f"{path.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(read_chapter(path), path.stem), target)
        written.append(target)
    return written
