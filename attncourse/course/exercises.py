"""The exercises of a chapter, and which parts of its notebook are their solutions.

An exercise is a sphinx-exercise ``{exercise}`` directive with a ``:label:``; its solution a
``{solution}`` directive (written) or a ``{solution-start}`` ... ``{solution-end}`` region
of ``solution``-tagged code cells (coding), after the stub and its check's call.
:func:`split_notebook` cuts every cell into :class:`Part` objects and returns the
:class:`Exercise` records.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
from nbformat import NotebookNode

#: The course's chapters (MyST sources), beside the package.
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def chapters_in(notebooks: Path) -> dict[str, Path]:
    """Stem -> path of every chapter (``*.md``) in ``notebooks``; ValueError when there is none."""
    names = {p.stem: p for p in notebooks.glob("*.md")}
    if not names:
        raise ValueError(f"--notebooks {str(notebooks)!r} holds no chapter (*.md)")
    return names


def chapter_path(name: str, notebooks: Path, option: str = "") -> Path:
    """The MyST source of chapter ``name`` in ``notebooks``.

    Raises
    ------
    ValueError
        If there is no such chapter, naming ``option`` and the chapters.
    """
    names = chapters_in(notebooks)
    if name not in names:
        raise ValueError(f"{option + ' ' if option else ''}{name!r} is not a chapter (chapters: "
                         f"{', '.join(sorted(names))})")
    return names[name]


#: Opening line of a sphinx-exercise directive, with ``` or ::: fences of any length.
_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>exercise|solution|solution-start|solution-end)\}"
                   r"\s*(?P<arg>.*)$")
#: A self-check: an ``{admonition}`` whose ``:class:`` includes ``self-check``, the short
#: answer to a question a learner unfolds after answering it (kept in the student edition).
_ADMONITION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{admonition\}\s*(?P<arg>.*)$")
_SELF_CHECK_CLASS = re.compile(r"^:class:.*\bself-check\b")
_LABEL = re.compile(r"^:label:\s*(\S+)\s*$")
_TIMEOUT = re.compile(r"^:timeout:\s*(.*?)\s*$")
#: The stub a coding exercise leaves for the learner.
STUB_MARK = "# your code here"


@dataclass
class Exercise:
    """One exercise of a chapter (notebook stem ``chapter``, ``:label:``, title and statement).

    ``kind`` is ``"coding"`` (with ``check``, ``function``, ``stub_cell`` and
    ``solution_code``) or ``"written"``; ``timeout`` the directive's ``:timeout:`` in seconds,
    how long a training exercise may run when graded (None: the grader's default).
    """

    chapter: str
    label: str
    title: str
    statement: str = ""
    kind: str = "written"
    check: str | None = None
    function: str | None = None
    stub_cell: int | None = None
    solution_code: list[str] = field(default_factory=list)
    solution_text: list[str] = field(default_factory=list)
    timeout: int | None = None


@dataclass
class Part:
    """A piece of one cell: markdown or code, a solution (of ``label``) or not."""

    cell: int
    cell_type: str
    source: str
    solution: bool = False
    label: str | None = None
    #: For solution markdown: ``"block"`` ({solution} body) or ``"region"`` (solution-start
    #: text); for a kept self-check (its body, of the exercise ``label``): ``"self-check"``.
    role: str = ""


def read_chapter(path: str | Path) -> NotebookNode:
    """Read a chapter's MyST source (``notebooks/*.md``) as an nbformat notebook."""
    return jupytext.read(Path(path))


def _fence_end(lines: list[str], start: int, fence: str) -> int:
    """Index of the line closing the directive opened at ``start`` (or the last line)."""
    for j in range(start + 1, len(lines)):
        if lines[j].strip() == fence:
            return j
    return len(lines) - 1


def _directive_body(lines: list[str]) -> tuple[str, str | None]:
    """A directive's body without its ``:option:`` lines, and its label."""
    label = None
    body = []
    in_options = True
    for line in lines:
        match = _LABEL.match(line.strip())
        if in_options and match:
            label = match.group(1)
            continue
        if in_options and line.strip().startswith(":"):
            continue
        in_options = False
        body.append(line)
    return "\n".join(body).strip(), label


def _timeout(lines: list[str], where: str) -> int | None:
    """A directive's ``:timeout:`` option (seconds, a positive integer), or None."""
    for line in lines:
        stripped = line.strip()
        if not stripped.startswith(":"):
            break  # the options end where the body begins
        match = _TIMEOUT.match(stripped)
        if match:
            value = match.group(1)
            if not (value.isascii() and value.isdigit() and int(value) > 0):
                raise ValueError(f"{where}: :timeout: must be a positive whole number of seconds, "
                                 f"got {value!r}")
            return int(value)
    return None


def _stub_names(source: str) -> tuple[str | None, str | None]:
    """The function a stub cell defines and the ``check_*`` it calls."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None, None
    function = next((n.name for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    check = next((n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id.startswith("check_")), None)
    return function, check


def _code_part(index: int, cell: NotebookNode, region: str | None, last: str | None,
               exercises: dict[str, Exercise]) -> Part:
    """A code (or raw) cell as a part: a solution inside a region or tagged ``solution``,
    else kept; a solution's code, or the first stub after an exercise, noted in it."""
    is_solution = region is not None or "solution" in cell.get("metadata", {}).get("tags", [])
    owner = region or last
    if is_solution and owner in exercises and cell.cell_type == "code":
        exercises[owner].solution_code.append(cell.source)
    elif (cell.cell_type == "code" and STUB_MARK in cell.source and last in exercises
          and exercises[last].stub_cell is None):
        ex = exercises[last]
        ex.stub_cell = index
        ex.function, ex.check = _stub_names(cell.source)
    return Part(index, cell.cell_type, cell.source, is_solution, owner if is_solution else None)


def _self_check(lines: list[str], start: int) -> tuple[int, str] | None:
    """``(line of its closing fence, body)`` if a self-check admonition opens at ``start``."""
    opening = _ADMONITION.match(lines[start].strip())
    if opening is None:
        return None
    end = _fence_end(lines, start, opening.group("fence"))
    if not any(_SELF_CHECK_CLASS.match(line.strip()) for line in lines[start + 1:end]):
        return None
    return end, _directive_body(lines[start + 1:end])[0]


def split_notebook(nb: NotebookNode, chapter: str = "") -> tuple[list[Part], list[Exercise]]:
    """Cut a chapter's cells (:func:`read_chapter`) into kept and solution parts, in order, and
    return ``(parts, exercises)``.

    Raises
    ------
    ValueError
        If an exercise has no label, a solution names an unknown exercise, or a
        ``{solution-start}`` region is never closed.
    """
    parts: list[Part] = []
    exercises: dict[str, Exercise] = {}
    region: str | None = None     # label of the open {solution-start} region
    last: str | None = None       # label of the last exercise stated
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            parts.append(_code_part(index, cell, region, last, exercises))
            continue
        lines = cell.source.split("\n")
        kept: list[str] = []
        solution: list[str] = []

        def flush_kept() -> None:
            if "\n".join(kept).strip():
                parts.append(Part(index, "markdown", "\n".join(kept).strip("\n")))
            kept.clear()

        def flush_solution(label: str | None, role: str) -> None:
            text = "\n".join(solution).strip("\n")
            if text.strip():
                parts.append(Part(index, "markdown", text, True, label, role))
                if label in exercises:
                    exercises[label].solution_text.append(text.strip())
            solution.clear()

        i = 0
        while i < len(lines):
            match = _OPEN.match(lines[i].strip())
            check = None if match or region else _self_check(lines, i)
            if check is not None:
                flush_kept()
                parts.append(Part(index, "markdown", check[1], False, last, "self-check"))
                i = check[0] + 1
                continue
            if match is None:
                (solution if region else kept).append(lines[i])
                i += 1
                continue
            name, fence, arg = match.group("name"), match.group("fence"), match.group("arg").strip()
            end = _fence_end(lines, i, fence)
            body = lines[i + 1:end]
            if name == "exercise":
                statement, label = _directive_body(body)
                if label is None:
                    raise ValueError(f"{chapter}: the exercise {arg!r} has no :label:")
                exercises[label] = Exercise(chapter, label, arg, statement,
                                            timeout=_timeout(body, f"{chapter}: {label}"))
                last = label
                kept.extend(lines[i:end + 1])
            elif name == "solution":
                flush_kept()
                solution[:] = [_directive_body(body)[0]]
                flush_solution(arg or last, "block")
                if arg in exercises:
                    exercises[arg].kind = "written"
            elif name == "solution-start":
                flush_kept()
                region = arg or last
                if region not in exercises:
                    raise ValueError(f"{chapter}: {{solution-start}} names no known exercise: {arg!r}")
                exercises[region].kind = "coding"
            else:  # solution-end
                flush_solution(region, "region")
                region = None
            i = end + 1
        if region:
            flush_solution(region, "region")
        flush_kept()
    if region is not None:
        raise ValueError(f"{chapter}: the {{solution-start}} region of {region!r} is never closed")
    return parts, list(exercises.values())


def chapter_exercises(path: str | Path) -> list[Exercise]:
    """The exercises of the chapter at ``path`` (a ``notebooks/*.md`` file)."""
    path = Path(path)
    return split_notebook(read_chapter(path), path.stem)[1]
