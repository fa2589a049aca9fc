"""The graded answers of a submitted notebook, cut out by their syntax tree.

The grade of record (:mod:`attncourse.course.record`) never runs a submitted notebook: for
each coding exercise it takes, from the exercise's answer cell, the graded function's
definition and what that function needs by name, and nothing else:

- the cell's own imports, helper functions and constant assignments that the function
  (or a helper it needs) reads;
- an earlier exercise's answer that it calls (``my_softmax`` inside ``my_attention``),
  cut out the same way from that exercise's cell;
- for the names still missing, the chapter's own import of that name (read from the
  course's chapter, not from the submission), else an import of the submission's other
  cells.

Statements that do something (``os.environ.pop(...)``, ``check_softmax = ...``,
``attncourse.checks.graded = ...``), whatever cell they sit in, are never taken. What is
taken is analysed before it runs (:mod:`attncourse.course.refusals`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from attncourse.course.exercises import Exercise, chapter_exercises, read_chapter

#: Top-level statements that may be taken from an answer cell: they bind names.
_BINDING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


@dataclass
class Answer:
    """One coding exercise's answer, as the grade of record runs it.

    Attributes
    ----------
    exercise : Exercise
        The chapter's exercise (its label, check and function name).
    source : str
        The extracted module: imports, then helpers, then the graded function. Empty
        when ``problem`` is set.
    problem : str or None
        Why there is nothing to run: no answer cell, no such function, a syntax error.
    """

    exercise: Exercise
    source: str = ""
    problem: str | None = None


def _code(cell: NotebookNode) -> str:
    """A code cell's Python: IPython's ``%magic`` and ``!shell`` lines blanked (line numbers kept)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.split("\n"))


def _bound(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _read(node: ast.AST) -> set[str]:
    """Names a statement reads (a superset: its own local names too, which bind nothing outside)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@functools.cache
def chapter_imports(chapter: Path) -> tuple[str, ...]:
    """The import statements of a chapter's code cells, as sources (the course's, not a submission's)."""
    found = []
    for cell in read_chapter(chapter).cells:
        if cell.cell_type != "code":
            continue
        source = _code(cell)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        found += [ast.get_source_segment(source, node) for node in tree.body
                  if isinstance(node, (ast.Import, ast.ImportFrom))]
    return tuple(found)


def _answer_cell(nb: NotebookNode, ex: Exercise) -> NotebookNode | None:
    """The exercise's answer cell: nbgrader's ``<label>-answer``, else the last cell defining the function."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"{ex.label}-answer":
            return cell
    defining = []
    for cell in code:
        try:
            tree = ast.parse(_code(cell))
        except SyntaxError:
            continue
        if any(isinstance(n, ast.FunctionDef) and n.name == ex.function for n in tree.body):
            defining.append(cell)
    return defining[-1] if defining else None


def _cut(tree: ast.Module, function: str) -> tuple[list[ast.stmt], set[str]]:
    """The statements of a cell ``function`` needs (in the cell's order) and the names still missing."""
    body = tree.body
    graded = [i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name == function]
    if not graded:
        raise LookupError(function)
    keep = {graded[-1]}
    wanted = _read(body[graded[-1]])
    changed = True
    while changed:  # helpers read other helpers: follow them to a fixed point
        changed = False
        for i, node in enumerate(body[:graded[-1]]):
            if i not in keep and isinstance(node, _BINDING) and _bound(node) & wanted:
                keep.add(i)
                wanted |= _read(node)
                changed = True
    taken = [body[i] for i in sorted(keep)]
    bound = set().union(*(_bound(node) for node in taken))
    return taken, wanted - bound


def _segment(source: str, node: ast.stmt) -> str:
    """A top-level statement's lines, a function's decorators (a Triton kernel's ``@jit``) included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(source.split("\n")[first - 1:node.end_lineno])


def _imports_binding(sources: list[str], names: set[str]) -> list[str]:
    """Import statements among ``sources`` that bind one of ``names`` (the last for each), cut to
    those names: ``from m import a, b`` read for ``b`` gives ``from m import b``."""
    chosen: dict[str, ast.stmt] = {}
    for source in sources:
        node = ast.parse(source).body[0]
        for alias in node.names:
            name = (alias.asname or alias.name).split(".")[0]
            if name in names:
                chosen[name] = type(node)(names=[alias], module=getattr(node, "module", None),
                                          level=getattr(node, "level", 0)) \
                    if isinstance(node, ast.ImportFrom) else ast.Import(names=[alias])
    return list(dict.fromkeys(ast.unparse(node) for node in chosen.values()))


@functools.cache
def coding_exercises(chapter: Path) -> tuple[Exercise, ...]:
    """The chapter's coding exercises, one per label (read once: a grading run reads many submissions)."""
    coding: dict[str, Exercise] = {}
    for ex in chapter_exercises(chapter):
        if ex.kind == "coding" and ex.function and ex.check:
            coding.setdefault(ex.label, ex)
    return tuple(coding.values())


def extract(nb: NotebookNode, chapter: Path) -> list[Answer]:
    """Every coding exercise's answer in ``nb``, a submission of the chapter ``chapter`` (``notebooks/*.md``)."""
    coding = {ex.label: ex for ex in coding_exercises(chapter)}
    by_function = {ex.function: ex for ex in coding.values()}
    other_imports = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            try:
                tree = ast.parse(_code(cell))
            except SyntaxError:
                continue
            other_imports += [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return [_answer(nb, ex, by_function, chapter_imports(chapter), other_imports) for ex in coding.values()]


def _answer(nb: NotebookNode, ex: Exercise, by_function: dict[str, Exercise],
            trusted: tuple[str, ...], other_imports: list[str]) -> Answer:
    """One exercise's :class:`Answer` (see :func:`extract`)."""
    parts: list[str] = []
    missing: set[str] = set()
    done: set[str] = set()
    todo = [ex]
    while todo:  # this answer, then the earlier answers it calls
        current = todo.pop()
        done.add(current.function)
        cell = _answer_cell(nb, current)
        if cell is None:
            return Answer(ex, problem=f"no answer cell defines `{current.function}`")
        source = _code(cell)
        try:
            taken, needs = _cut(ast.parse(source), current.function)
        except SyntaxError as err:
            return Answer(ex, problem=f"the answer cell of `{current.function}` is not valid Python "
                                      f"(line {err.lineno}: {err.msg})")
        except LookupError:
            return Answer(ex, problem=f"no answer cell defines `{current.function}`")
        parts = [_segment(source, node) for node in taken] + parts
        missing |= needs
        for name in sorted(needs):
            if name in by_function and name not in done:
                todo.append(by_function[name])
    defined = {name for part in parts for node in ast.parse(part).body for name in _bound(node)}
    missing -= defined
    imports = _imports_binding(list(trusted), missing)
    still = missing - {name for s in imports for name in _bound(ast.parse(s).body[0])}
    imports += _imports_binding(other_imports, still)
    return Answer(ex, source="\n".join(imports + [""] + parts) + "\n")


__all__ = ["Answer", "chapter_imports", "coding_exercises", "extract"]
