"""nbgrader end to end on one chapter: release, then autograde a blank and a solved submission.

To stay quick the chapter is cut to its exercises (and the chapter's imports); every
chapter in full: ``python -m attncourse.course.grading notebooks/*.md`` (the instructor's
guide gives the result).
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

from attncourse.course.grading import grade_chapter

CHAPTER = Path(__file__).resolve().parents[1] / "notebooks" / "04_self_attention.md"


def exercises_only(nb):
    """The chapter's imports, then everything from its first exercise on."""
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "{exercise}" in c.source)
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


def test_nbgrader_gives_full_marks_to_the_solutions_and_zero_to_the_stubs(tmp_path):
    scores = grade_chapter(CHAPTER, tmp_path / "course", trim=exercises_only)
    solved, blank = scores["solved"], scores["blank"]
    checks = [name for name in solved if name.endswith("-check")]
    written = [name for name in solved if not name.endswith("-check")]
    assert len(checks) == 3 and len(written) == 2
    assert all(solved[name] == (1.0, 1.0) for name in checks), solved
    assert all(blank[name] == (0.0, 1.0) for name in checks), blank
    # Written answers wait for a person (None), unless left as released (nbgrader gives 0).
    assert all(solved[name] == (None, 1.0) for name in written), solved
    assert all(blank[name] == (0.0, 1.0) for name in written), blank
    released = nbformat.read(tmp_path / "course" / "release" / CHAPTER.stem / f"{CHAPTER.stem}.ipynb",
                             as_version=4)
    text = "\n".join(cell.source for cell in released.cells)
    assert "BEGIN SOLUTION" not in text and "np.tril" not in text
    assert text.count("raise NotImplementedError()") == 3 and text.count("YOUR ANSWER HERE") == 2
