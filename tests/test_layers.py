"""The package's layering, as attncourse/__init__.py draws it: no import runs back up."""

import ast
import re
from pathlib import Path

import attncourse

PACKAGE = Path(attncourse.__file__).parent


def _map() -> dict[str, int]:
    """Part -> level, read from the map in the package's docstring."""
    levels, level = {}, 0
    for line in attncourse.__doc__.splitlines():
        found = re.match(r"^    (?:(\d)  )?\s*([a-z]+)  ", line)
        if found:
            level = int(found.group(1)) if found.group(1) else level
            levels[found.group(2)] = level
    return levels


def _imports(path: Path) -> set[str]:
    """The attncourse parts a module imports (attncourse.X.y -> X)."""
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "attncourse" else [f"attncourse.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        parts.update(n.split(".")[1] for n in names if n.startswith("attncourse."))
    return parts


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def test_the_map_names_every_part():
    parts = {_part(p) for p in PACKAGE.rglob("*.py")} - {"__init__", "__main__"}
    assert set(_map()) == parts


def test_no_import_runs_back_up():
    levels = _map()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _part(path)
        if me not in levels:
            continue
        for other in _imports(path) - {me, "__version__"}:
            if levels[other] >= levels[me]:
                wrong.append(f"{path.relative_to(PACKAGE)} (level {levels[me]}) imports {other} "
                             f"(level {levels[other]})")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_wrong_import(tmp_path):
    # The check must be able to fail: a data module importing train is caught.
    bad = tmp_path / "bad.py"
    bad.write_text("from attncourse.train.fit import fit\nimport attncourse.cli.main\n")
    assert _imports(bad) == {"train", "cli"}
    assert _map()["data"] < _map()["train"]
