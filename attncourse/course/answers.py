"""The graded answers of a submitted notebook, cut out by their syntax tree.

For each coding exercise: from its answer cell (nbgrader's ``<label>-answer``, else the
last cell defining the graded name), every top-level statement binding a name the graded
definition needs, directly or not; names still missing, from the other answer cells; then
the chapter's own imports of those names (constants written in as values). Statements that
only do something (``print(...)``, a check's call) are left out. A cell that does not
parse, or breaks the parser (``RecursionError``), is that exercise's "missing" reason.
This is no security boundary: the answer's process is (:mod:`attncourse.course.sandbox`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import symtable
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from attncourse.course.exercises import Exercise, chapter_exercises, read_chapter

#: Top-level statements that may be taken from an answer cell: they bind names.
_BINDING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
            ast.Assign, ast.AnnAssign)
#: Longest cell read, characters: a larger one is refused before it is parsed.
MAX_CELL = 200_000
#: What the parser may raise on a hostile cell besides ``SyntaxError``.
_PARSE_ERRORS = (SyntaxError, RecursionError, MemoryError, ValueError, TypeError, OverflowError)
#: Modules of the course an answer may import (besides an exercise's ``allow``): Triton's
#: names as the chapters import them.
PRELOADABLE = ("attncourse.kernels.triton_setup",)


@dataclass
class Answer:
    """One coding exercise's answer, as the grade of record runs it: ``source`` the extracted
    module (imports, then the taken statements), or ``problem`` why there is none;
    ``course_imports`` the course modules it imports (those allowed are preloaded).
    """

    exercise: Exercise
    source: str = ""
    problem: str | None = None
    course_imports: tuple[str, ...] = field(default=())


def _code(cell: NotebookNode) -> str:
    """A code cell's Python: IPython's ``%magic`` and ``!shell`` lines blanked (line numbers kept)."""
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(str(s) for s in source)
    if not isinstance(source, str):
        raise ValueError("a cell whose source is not text")
    if len(source) > MAX_CELL:
        raise ValueError(f"a cell of more than {MAX_CELL:,} characters")
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def parse(source: str) -> ast.Module:
    """``ast.parse``; any failure of the parser is a ``SyntaxError`` (with a line when known)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        raise
    except _PARSE_ERRORS as err:
        raise SyntaxError(f"the parser gave up ({type(err).__name__})") from None


def _bound(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _names(source: str) -> set[str]:
    """The module-level names a top-level statement's ``source`` refers to: at the top level,
    in its decorators and defaults, and inside its functions and classes (read, written or
    declared ``global``), but not the names local to them (:mod:`symtable`'s scopes)."""
    try:
        table = symtable.symtable(source, "<answer>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError):  # every name it mentions, then
        return {n.id for n in ast.walk(parse(source)) if isinstance(n, ast.Name)}
    found = {s.get_name() for s in table.get_symbols() if s.is_referenced() or s.is_assigned()}
    todo = list(table.get_children())
    while todo:
        scope = todo.pop()
        todo += scope.get_children()
        found |= {s.get_name() for s in scope.get_symbols()
                  if s.is_global() or s.is_declared_global()
                  or (scope.get_type() == "class" and s.is_referenced() and not s.is_assigned())}
    return found


def _segment(source: str, node: ast.stmt) -> str:
    """A top-level statement's lines, a function's decorators (a Triton kernel's ``@jit``) included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(source.split("\n")[first - 1:node.end_lineno])


@dataclass
class _Cell:
    """A parsed answer cell: its source and top-level statements."""

    source: str
    body: list[ast.stmt]

    def binding(self, name: str) -> list[int]:
        return [i for i, node in enumerate(self.body) if isinstance(node, _BINDING) and name in _bound(node)]


def _cut(cell: _Cell, wanted: set[str], keep: set[int]) -> set[str]:
    """Add to ``keep`` the statements of ``cell`` that bind a name in ``wanted``, following what
    they mention to a fixed point; return ``wanted`` grown by those names."""
    wanted = set(wanted)
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(cell.body):
            if i not in keep and isinstance(node, _BINDING) and _bound(node) & wanted:
                keep.add(i)
                wanted |= _names(_segment(cell.source, node))
                changed = True
    return wanted


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


def _constant(value: object) -> bool:
    """A value written into an answer as its literal: numbers, strings, and tuples of them."""
    if type(value) in (int, float, str, bool) or value is None:
        return True
    return type(value) is tuple and all(_constant(v) for v in value)


def _imports_binding(sources: list[str], names: set[str]) -> list[str]:
    """Statements binding ``names`` from the import statements ``sources`` (the last for each),
    cut to those names: ``from m import a, b`` read for ``b`` gives ``from m import b``; a
    course constant is written as an assignment of its value instead."""
    chosen: dict[str, str] = {}
    for source in sources:
        try:
            node = ast.parse(source).body[0]
        except (*_PARSE_ERRORS, IndexError):
            continue
        for alias in node.names:
            name = (alias.asname or alias.name).split(".")[0]
            if name not in names:
                continue
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if module.startswith("attncourse") and not node.level:
                    try:
                        value = getattr(importlib.import_module(module), alias.name)
                    except (ImportError, AttributeError):
                        value = ...
                    if _constant(value):
                        chosen[name] = f"{name} = {value!r}"
                        continue
                chosen[name] = ast.unparse(ast.ImportFrom(module=node.module, names=[alias], level=node.level))
            else:
                chosen[name] = ast.unparse(ast.Import(names=[alias]))
    return list(dict.fromkeys(chosen.values()))


@functools.cache
def coding_exercises(chapter: Path) -> tuple[Exercise, ...]:
    """The chapter's coding exercises, one per label (read once: a grading run reads many submissions)."""
    coding: dict[str, Exercise] = {}
    for ex in chapter_exercises(chapter):
        if ex.kind == "coding" and ex.function and ex.check:
            coding.setdefault(ex.label, ex)
    return tuple(coding.values())


def _grade_id(cell: NotebookNode) -> str:
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return grade_id if isinstance(grade_id, str) else ""


def extract(nb: NotebookNode, chapter: Path) -> list[Answer]:
    """Every coding exercise's answer in ``nb``, a submission of the chapter ``chapter`` (``notebooks/*.md``).

    Raises
    ------
    ValueError
        If ``nb`` is not a notebook (its cells are not a list of cells).
    """
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ValueError("its cells are not a list of cells")
    code = [c for c in cells if c.get("cell_type") == "code"]
    coding = coding_exercises(chapter)
    functions = {ex.function for ex in coding}
    parsed: dict[int, _Cell | str] = {}  # a cell's parse, or why it has none
    for i, cell in enumerate(code):
        try:
            source = _code(cell)
            parsed[i] = _Cell(source, parse(source).body)
        except (SyntaxError, ValueError) as err:
            line = f"line {err.lineno}: " if isinstance(err, SyntaxError) and err.lineno else ""
            parsed[i] = f"not valid Python ({line}{getattr(err, 'msg', None) or err})"
    answers_cells = [i for i, cell in enumerate(code) if _grade_id(cell).endswith("-answer")
                     or (isinstance(parsed[i], _Cell) and any(parsed[i].binding(f) for f in functions))]
    other_imports = [ast.unparse(n) for c in parsed.values() if isinstance(c, _Cell)
                     for n in c.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return [_answer(ex, code, parsed, answers_cells, chapter_imports(chapter), other_imports) for ex in coding]


def _answer(ex: Exercise, code: list, parsed: dict, answer_cells: list[int], trusted: tuple[str, ...],
            other_imports: list[str]) -> Answer:
    """One exercise's :class:`Answer` (see the module's docstring)."""
    own = next((i for i, cell in enumerate(code) if _grade_id(cell) == f"{ex.label}-answer"), None)
    if own is None:
        defining = [i for i in answer_cells if isinstance(parsed[i], _Cell) and parsed[i].binding(ex.function)]
        own = defining[-1] if defining else None
    if own is None:
        return Answer(ex, problem=f"no answer cell defines `{ex.function}`")
    cell = parsed[own]
    if isinstance(cell, str):
        return Answer(ex, problem=f"the answer cell of `{ex.function}` is {cell}")
    if not cell.binding(ex.function):
        return Answer(ex, problem=f"no answer cell defines `{ex.function}`")
    keep: dict[int, set[int]] = {own: set()}
    wanted = _cut(cell, {ex.function}, keep[own])
    # Names still missing: from the other answer cells, the latest first.
    for i in sorted((i for i in answer_cells if i != own), reverse=True):
        other = parsed[i]
        if not isinstance(other, _Cell):
            continue
        defined = {n for j, ks in keep.items() for k in ks for n in _bound(parsed[j].body[k])}
        missing = wanted - defined
        if any(other.binding(name) for name in missing):
            keep[i] = set()
            wanted |= _cut(other, {n for n in missing if other.binding(n)}, keep[i])
    parts = [_segment(parsed[i].source, parsed[i].body[k]) for i in sorted(keep) for k in sorted(keep[i])]
    defined = {n for i, ks in keep.items() for k in ks for n in _bound(parsed[i].body[k])}
    missing = wanted - defined
    imports = _imports_binding(list(trusted), missing)
    still = missing - {name for s in imports for name in _bound(ast.parse(s).body[0])}
    imports += _imports_binding(other_imports, still)
    source = "\n".join(imports + [""] + parts) + "\n"
    course = tuple(dict.fromkeys(
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for s in imports + parts for n in ast.walk(parse(s)) if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names if ((n.module or "") if isinstance(n, ast.ImportFrom) else a.name).startswith("attncourse")))
    return Answer(ex, source=source, course_imports=course)


__all__ = ["MAX_CELL", "PRELOADABLE", "Answer", "chapter_imports", "coding_exercises", "extract", "parse"]
