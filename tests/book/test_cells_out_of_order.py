"""A learner runs cells out of order: after the exercises, back to an earlier cell.

Issue 64: chapter 13's exercises cell deleted names that the chapter's earlier cells read, so
going back to them failed with ``NameError``; a learner's stub named like the package's
function would likewise replace it under the earlier cells. This test reads every chapter's
code cells (their syntax trees): no cell of the exercises section (stubs, solutions, checks)
may delete or bind a name that a cell before the section reads without binding it first,
since running an exercise cell and then that earlier cell would give the earlier cell
another value, or none; and no cell anywhere deletes a name another cell reads. The
exercises hide the package's references another way: they ask for ``my_...`` names, and a
check refuses an answer that hands its work to the package
(:mod:`attncourse.checks.hand_offs`). (The claims sweep's ``rerun`` variant executes every chapter twice
in order; this is the order a learner who goes back takes.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("*.md"))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _top_level_names(tree: ast.AST):
    """The cell's own ``Name`` nodes, outside function, class and comprehension scopes."""
    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Name):
                yield child
            if isinstance(child, _SCOPES):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    for deco in child.decorator_list:
                        yield from (n for n in ast.walk(deco) if isinstance(n, ast.Name))
                continue   # its reads happen when called, with its own names
            yield from visit(child)
    yield from visit(tree)


def cell_names(source: str) -> tuple[set[str], set[str], set[str]]:
    """(names the cell binds, names it deletes, names it reads before binding them)."""
    tree = ast.parse(source)
    bound, deleted = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node in tree.body:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and node in tree.body:
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    first: dict[str, ast.Name] = {}
    # a name's first use decides: an assignment's value is read before its targets bind
    order = sorted(_top_level_names(tree), key=lambda n: (n.lineno, n.col_offset))
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.value:
            for n in _top_level_names(stmt.value):
                first.setdefault(n.id, n)
        for n in (m for m in order if stmt.lineno <= m.lineno <= stmt.end_lineno):
            first.setdefault(n.id, n)
            if isinstance(n.ctx, ast.Store):
                bound.add(n.id)
            elif isinstance(n.ctx, ast.Del):
                deleted.add(n.id)
    reads = {name for name, n in first.items() if isinstance(n.ctx, ast.Load)}
    return bound, deleted, reads


def _code(cell) -> str:
    return "\n".join(line for line in cell.source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def clashes(path: Path) -> list[str]:
    """Names an exercise cell deletes or rebinds that an earlier cell of ``path`` reads, and
    names any cell deletes that another cell reads (in whatever order they run)."""
    read_before: dict[str, int] = {}
    found, in_exercises, cells = [], False, []
    for index, cell in enumerate(jupytext.read(path).cells):
        if cell.cell_type == "markdown":
            in_exercises |= any(line.startswith("## Exercises")
                                for line in cell.source.splitlines())
            continue
        bound, deleted, reads = cell_names(_code(cell))
        cells.append((index, deleted, reads))
        if not in_exercises:
            for name in reads:
                read_before.setdefault(name, index)
            continue
        for name in sorted((bound | deleted) & read_before.keys()):
            how = "deletes" if name in deleted else "rebinds"
            found.append(f"cell {index} {how} {name!r}, which cell {read_before[name]} reads")
    for index, deleted, _ in cells:
        for name in sorted(deleted):
            readers = [j for j, _, reads in cells if j != index and name in reads]
            line = f"cell {index} deletes {name!r}, which cell {readers[0] if readers else 0} reads"
            if readers and line not in found:
                found.append(line)
    return found


def test_a_del_anywhere_is_seen(tmp_path):
    chapter = tmp_path / "chapter.md"
    header = CHAPTERS[0].read_text(encoding="utf-8").split("\n---\n", 1)[0] + "\n---\n\n"
    chapter.write_text(header + "```{code-cell} ipython3\nfrom math import pi\nx = 2\n```\n\n"
                       "```{code-cell} ipython3\nprint(pi)\n```\n\n"
                       "```{code-cell} ipython3\nscratch = 1\ndel (pi, scratch)\n```\n",
                       encoding="utf-8")
    assert clashes(chapter) == ["cell 2 deletes 'pi', which cell 1 reads"]


def test_the_analysis_sees_a_deleted_or_rebound_name():
    assert cell_names("del a, b\n") == (set(), {"a", "b"}, set())
    assert cell_names("x = f(y)\nz = x\n") == ({"x", "z"}, set(), {"f", "y"})
    assert cell_names("for i in range(3):\n    s = i\nprint(s)\n")[2] == {"range", "print"}
    assert cell_names("def g(a):\n    return a + b\n") == ({"g"}, set(), set())
    assert cell_names("x = x + 1\n")[2] == {"x"}


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_exercise_cells_leave_the_earlier_cells_runnable(path):
    assert clashes(path) == [], path.stem
