"""A chapter's cells must keep working when a learner runs them again, in any order.

A code cell that ends with ``del name`` at its top level breaks every other cell of the
chapter that reads ``name``: a learner who goes back to an earlier cell after the
exercises gets a ``NameError`` (issue 64.2). The exercises hide the package's references
another way: they ask for the learner's own ``my_...`` names, and a check refuses an answer
that hands its work to the package (:mod:`attncourse.checks.hand_offs`), so no chapter
needs to delete a name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attncourse.course.exercises import read_chapter

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))


def _trees(chapter: Path) -> list[ast.Module]:
    """The syntax tree of each code cell (IPython's ``%`` and ``!`` lines left out)."""
    trees = []
    for cell in read_chapter(chapter).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.split("\n")
                           if not line.lstrip().startswith(("%", "!")))
        trees.append(ast.parse(source))
    return trees


def _deleted(tree: ast.Module) -> set[str]:
    """Names a cell deletes at its top level (``del a, b`` and ``del (a, b)``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Delete):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _read(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def deleted_but_read(chapter: Path) -> list[str]:
    """``"name (deleted in cell i, read in cell j)"`` for every such pair of code cells."""
    trees = _trees(chapter)
    found = []
    for i, tree in enumerate(trees):
        for name in sorted(_deleted(tree)):
            readers = [j for j, other in enumerate(trees) if j != i and name in _read(other)]
            if readers:
                found.append(f"{name} (deleted in code cell {i}, read in code cells {readers})")
    return found


def test_the_rule_finds_what_it_should(tmp_path):
    chapter = tmp_path / "chapter.md"
    header = CHAPTERS[0].read_text(encoding="utf-8").split("\n---\n", 1)[0] + "\n---\n\n"
    chapter.write_text(header +
                       "```{code-cell} ipython3\nfrom math import sqrt, pi\nx = sqrt(2)\n```\n\n"
                       "```{code-cell} ipython3\nprint(pi)\n```\n\n"
                       "```{code-cell} ipython3\nscratch = 1\ndel (sqrt, pi)\ndel scratch\n```\n",
                       encoding="utf-8")
    assert deleted_but_read(chapter) == ["pi (deleted in code cell 2, read in code cells [1])",
                                         "sqrt (deleted in code cell 2, read in code cells [0])"]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.stem)
def test_no_cell_deletes_a_name_another_cell_reads(chapter):
    found = deleted_but_read(chapter)
    assert not found, f"{chapter.name}: " + "; ".join(found)
