"""Functions a reader can hold: no function of the package over 80 lines of code.

Lines of code are a function's lines without its docstring: the numpydoc
docstrings of the entry points (``fit``, ``train_epochs``) run to 55 lines of
parameters, errors and sources, which are documentation, not logic.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attncourse

PACKAGE = Path(attncourse.__file__).parent
ENGINE = PACKAGE / "train"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def code_lines(source: str) -> dict[str, int]:
    """Each function's lines (``name@line``), its docstring left out."""
    sizes = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                lines -= doc.end_lineno - doc.lineno + 1
            sizes[f"{node.name}@{node.lineno}"] = lines
    return sizes


def test_the_measure_counts_code_and_not_the_docstring():
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    sizes = code_lines(f'def long():\n    """Doc.\n\n    More.\n    """\n{body}\n\ndef short():\n    return 1\n')
    assert sizes == {"long@1": 82, "short@88": 2}  # the def line and 81 statements; the docstring's 4 lines not


def test_no_function_of_the_package_is_over_80_lines_of_code():
    long = {f"{path.relative_to(PACKAGE)}:{name}": lines for path in sorted(PACKAGE.rglob("*.py"))
            for name, lines in code_lines(path.read_text(encoding="utf-8")).items() if lines > MAX_FUNCTION_LINES}
    assert not long, f"split these functions (lines of code): {long}"


def test_fit_module_under_600_lines():
    assert len((ENGINE / "fit.py").read_text(encoding="utf-8").splitlines()) < MAX_MODULE_LINES
