"""The checks' hints escalate from a nudge to the idea, never to the code (issue 36).

No hint of the checks (the ``*_HINT``, ``*_RULE`` and ``*NUDGE*`` texts of
``attncourse.checks``) may hold a piece of an exercise's solution as code: every call,
operation, index or comparison of the chapters' solution functions, written 12 characters
or longer (spaces and backquotes ignored), is looked for in every hint.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import attncourse.checks as checks
from attncourse.course.exercises import chapter_exercises

ROOT = Path(__file__).resolve().parents[1]
#: Shapes, not code: a hint may say what shape a result has.
SHAPES = {"num_heads*d_v"}


def _squeeze(text: str) -> str:
    return re.sub(r"[\s`]", "", text)


def hints() -> dict[str, str]:
    out = {}
    for info in pkgutil.iter_modules(checks.__path__):
        module = importlib.import_module(f"attncourse.checks.{info.name}")
        out |= {f"{info.name}.{name}": value for name, value in vars(module).items()
                if isinstance(value, str) and re.search(r"HINT|RULE|NUDGE", name)}
    return out


def solution_pieces() -> dict[str, set[str]]:
    pieces = {}
    for chapter in sorted((ROOT / "notebooks").glob("*.md")):
        for ex in chapter_exercises(chapter):
            if ex.kind != "coding":
                continue
            tree = ast.parse(ex.solution_code[0])
            fn = next(node for node in tree.body if getattr(node, "name", None) == ex.function)
            pieces[ex.label] = {_squeeze(ast.unparse(node)) for node in ast.walk(fn)
                                if isinstance(node, (ast.Call, ast.BinOp, ast.Subscript, ast.Compare, ast.BoolOp))
                                and len(_squeeze(ast.unparse(node))) >= 12} - SHAPES
    return pieces


def test_there_are_hints_and_solutions_to_compare():
    assert len(hints()) > 100 and len(solution_pieces()) >= 30


def test_no_hint_gives_a_solutions_code():
    found = [f"{name}: {piece}" for name, text in hints().items()
             for label, pieces in solution_pieces().items() for piece in pieces
             if piece in _squeeze(text)]
    assert not found, "\n".join(found)
