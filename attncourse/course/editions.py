"""Student and instructor editions of a chapter, as nbformat notebooks, without outputs.

The student edition drops every solution (tagged cells, solution regions); stubs and checks
stay, so it runs top to bottom. A written exercise gets an answer cell and its reference
answer folded (``<details>``); a question followed by a self-check gets an answer cell.
The instructor edition is the whole chapter. Markdown is plain (:mod:`attncourse.course.plain`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import jupytext
import nbformat
from nbformat import NotebookNode

from attncourse.course.exercises import Part, read_chapter, split_notebook
from attncourse.course.notice import notice_cell
from attncourse.course.plain import plain_cells
from attncourse.course.rubrics import RUBRICS
from attncourse.course.waiting import wait_for_answers


def figure_caption(cell: NotebookNode) -> str | None:
    """The caption the book prints under a code cell's figure (``mystnb: figure: caption:``)."""
    figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
    caption = figure.get("caption") if isinstance(figure, dict) else None
    return caption.strip() if isinstance(caption, str) and caption.strip() else None


def _with_captions(cells: list[NotebookNode]) -> list[NotebookNode]:
    """``cells`` with each figure's caption in a markdown cell after its code cell.

    The book prints a caption from the cell's metadata, which no Jupyter shows: in the
    handed-out notebooks it becomes text under the figure.
    """
    out = []
    for cell in cells:
        out.append(cell)
        caption = figure_caption(cell) if cell.cell_type == "code" else None
        if caption:
            out.append(nbformat.v4.new_markdown_cell(f"**Figure.** {caption}"))
    return out


def _bare(nb: NotebookNode, cells: list[NotebookNode],
          labels: bool = True) -> NotebookNode:
    """A new notebook with ``cells`` in plain Markdown, each figure's caption under it,
    ``nb``'s kernelspec, no jupytext pairing.

    ``labels`` keeps the exercises' labels in their headings: the instructor matches
    them to rubrics and nbgrader ids, a student has no use for them.
    """
    out = nbformat.v4.new_notebook()
    out.metadata = {k: copy.deepcopy(v) for k, v in nb.metadata.items() if k != "jupytext"}
    # every handed-out copy carries its licence
    out.cells = [notice_cell(), *plain_cells(_with_captions(cells), labels=labels)]
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return out


def cell_from_part(nb: NotebookNode, part: Part, whole: bool) -> NotebookNode:
    """The cell of ``part``: a copy of the original when ``whole``, else a new one."""
    if whole:
        return copy.deepcopy(nb.cells[part.cell])
    if part.cell_type == "markdown":
        return nbformat.v4.new_markdown_cell(part.source)
    return nbformat.v4.new_code_cell(part.source)


def _whole_cells(nb: NotebookNode, parts: list[Part]) -> set[int]:
    """Cells that a part holds unchanged (copied as they are, metadata included)."""
    return {p.cell for p in parts if p.cell_type != "markdown"
            or p.source.strip() == nb.cells[p.cell].source.strip()}


#: The learner's answer cell before a folded self-check or reference answer.
ANSWER_CELL = "**Your answer.** *Double-click this cell and write it here; then unfold the check below.*"


def _folded(summary: str, text: str) -> str:
    """``text`` folded under ``summary``: an HTML ``<details>``, which every Jupyter shows."""
    return f"<details>\n<summary>{summary}</summary>\n\n{text.strip()}\n\n</details>"


def _answer_and_check(part: Part) -> list[NotebookNode]:
    """A question's answer cell and its folded check (a self-check, or a written exercise's
    reference answer)."""
    summary = ("Self-check (unfold after answering)" if part.role == "self-check"
               else "Reference answer (unfold after answering)")
    return [nbformat.v4.new_markdown_cell(ANSWER_CELL),
            nbformat.v4.new_markdown_cell(_folded(summary, part.source))]


def student_notebook(nb: NotebookNode, chapter: str = "") -> NotebookNode:
    """``nb`` without its coding solutions, outputs cleared, with answer cells and waiting cells.

    Raises
    ------
    ValueError
        As :func:`attncourse.course.exercises.split_notebook`.
    """
    parts, _ = split_notebook(nb, chapter)
    whole = _whole_cells(nb, parts)
    cells = []
    for p in parts:
        if p.role == "self-check" or (p.solution and p.role == "block"):
            cells += _answer_and_check(p)
        elif not p.solution:
            cells.append(cell_from_part(nb, p, p.cell in whole))
    return _bare(nb, wait_for_answers(cells), labels=False)


def instructor_notebook(nb: NotebookNode, chapter: str = "") -> NotebookNode:
    """The whole chapter, outputs cleared, as a plain ``.ipynb`` (no jupytext pairing).

    After the cell holding each written exercise's solution comes a cell with its rubric
    (:mod:`attncourse.course.rubrics`).
    """
    parts, _ = split_notebook(nb, chapter)
    after: dict[int, list[str]] = {}  # a markdown cell may hold several written solutions
    for p in parts:
        if p.solution and p.role == "block" and p.label in RUBRICS:
            after.setdefault(p.cell, []).append(p.label)
    cells = []
    for index, cell in enumerate(nb.cells):
        cells.append(copy.deepcopy(cell))
        cells += [nbformat.v4.new_markdown_cell(RUBRICS[label].markdown(label)) for label in after.get(index, [])]
    return _bare(nb, cells)


def write_notebook(nb: NotebookNode, path: Path, markdown: bool = False) -> list[Path]:
    """Write ``nb`` to ``path`` (``.ipynb``) and, with ``markdown``, a MyST ``.md`` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    written = [path]
    if markdown:
        md = path.with_suffix(".md")
        jupytext.write(nb, md, fmt="md:myst")
        written.append(md)
    return written


def chapter_editions(source: Path) -> tuple[NotebookNode, NotebookNode]:
    """The (student, instructor) editions of the chapter at ``source``."""
    nb = read_chapter(source)
    return student_notebook(nb, source.stem), instructor_notebook(nb, source.stem)
