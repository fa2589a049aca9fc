"""Student edition: cells that run the learner's unanswered functions wait for them.

:func:`wait_for_answers` wraps each cell that needs an exercise's function (names it, or a
variable a cell needing it assigned) in ``if written(...):``
(:func:`attncourse.checks.guard.written`): until the function is written the cell prints
what it waits for, instead of failing on the stub's ``None``.
"""

from __future__ import annotations

import ast
import copy
import textwrap

from nbformat import NotebookNode

#: The stub a coding exercise leaves for the learner (as in :mod:`attncourse.course.exercises`).
STUB_MARK = "# your code here"
GUARD = "from attncourse.checks import written\n\nif written({names}):  # runs your code once it is written\n"


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names a cell reads from earlier cells, and the names it binds.

    A name the cell binds before it first reads it (``fig, ax = plt.subplots()`` then
    ``ax.plot``) is the cell's own, not an earlier cell's.
    """
    events = []   # (line, column, name, binds)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            events.append((node.lineno, node.col_offset, node.id, not isinstance(node.ctx, ast.Load)))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            events.append((node.lineno, node.col_offset, node.name, True))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            events += [(node.lineno, node.col_offset, (alias.asname or alias.name).split(".")[0], True)
                       for alias in node.names]
    read, bound = set(), set()
    for _, _, name, binds in sorted(events, key=lambda event: event[:2]):
        if binds:
            bound.add(name)
        elif name not in bound:
            read.add(name)
    return read, bound


def _stub_functions(tree: ast.Module, source: str) -> set[str]:
    """The functions a stub cell leaves for the learner to write."""
    if STUB_MARK not in source:
        return set()
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def _guarded(source: str, tree: ast.Module, needed: list[str]) -> str:
    """``source`` inside ``if written(needed...):``, its last expression still displayed."""
    last = tree.body[-1] if tree.body else None
    lines = source.rstrip("\n").split("\n")
    if isinstance(last, ast.Expr) and not _returns_nothing(last.value):
        start, end = last.lineno - 1, last.end_lineno
        expression = "\n".join(lines[start:end])
        lines[start:end] = [f"display({expression})"]
    body = textwrap.indent("\n".join(lines), "    ", lambda line: True)
    return GUARD.format(names=", ".join(needed)) + body + "\n"


def _returns_nothing(value: ast.expr) -> bool:
    """A call whose value a notebook does not show (``print(...)``, ``plt.show()``)."""
    if not isinstance(value, ast.Call):
        return False
    name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
    return name in {"print", "show"}


def wait_for_answers(cells: list[NotebookNode]) -> list[NotebookNode]:
    """A student edition's cells, in order, each code cell that runs an unwritten stub's function
    copied and guarded, the others as they were.
    """
    needs: dict[str, set[str]] = {}   # name -> the stub functions its value came from
    out = []
    for cell in cells:
        if cell.cell_type != "code":
            out.append(cell)
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics: not ours to rewrite
            out.append(cell)
            continue
        read, bound = _names(tree)
        stubs = _stub_functions(tree, cell.source)
        if stubs:
            needs.update({name: {name} for name in stubs})
            out.append(cell)
            continue
        needed = set().union(*(needs[name] for name in read if name in needs))
        for name in bound:   # rebound here: from now on it depends on what this cell needs
            needs.pop(name, None)
        if not needed:
            out.append(cell)
            continue
        needs.update({name: needed for name in bound})
        guarded = copy.deepcopy(cell)
        guarded.source = _guarded(cell.source, tree, sorted(needed))
        out.append(guarded)
    return out


__all__ = ["wait_for_answers"]
