"""The package's layering, as attncourse/__init__.py draws it: no import runs back up.

``attncourse/chapters/chNN_<name>/`` (one chapter's own code) sits below the library parts: a
chapter's folder imports the library, never another chapter's folder, and no library part
imports a chapter's folder (only ``course`` reads the chapters, through
``attncourse.chapters.modules``).
"""

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


def _modules(path: Path) -> set[str]:
    """The attncourse modules a file imports, as dotted names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("attncourse.")}


def _folder(module: str) -> str | None:
    """The chapter folder a dotted name lies in (attncourse.chapters.ch04_x.checks -> ch04_x)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "chapters" and parts[2].startswith("ch") else None


def _chapter_breaches(files: list[Path], package: Path) -> list[str]:
    """Imports of a chapter's folder from outside it: a library part's or another chapter's."""
    wrong = []
    for path in files:
        rel = path.relative_to(package)
        mine = rel.parts[1] if rel.parts[0] == "chapters" and len(rel.parts) > 2 else None
        for module in sorted(_modules(path)):
            folder = _folder(module)
            if folder and folder != mine:
                who = f"chapter folder {mine}" if mine else "library part " + rel.parts[0]
                wrong.append(f"{rel}: {who} imports {module}")
            elif module.startswith("attncourse.chapters") and rel.parts[0] not in ("chapters", "course"):
                wrong.append(f"{rel}: library part {rel.parts[0]} imports {module}")
    return wrong


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


def test_no_chapter_folder_is_imported_from_outside_it():
    # A chapter's folder is its notebook's: library parts and the other chapters never import it.
    wrong = _chapter_breaches(sorted(PACKAGE.rglob("*.py")), PACKAGE)
    assert not wrong, "\n".join(wrong)


def test_the_chapter_check_sees_a_wrong_import(tmp_path):
    # The check must be able to fail: a library module importing a chapter's recipe, one
    # chapter importing another's figures, and checks importing the chapters' package.
    package = tmp_path / "attncourse"
    for name, code in {
        "recipes/lm.py": "from attncourse.chapters.ch09_what_heads_learn.recipe import x\n",
        "chapters/ch04_self_attention/explorer.py":
            "from attncourse.chapters.ch03_attention_family.figures import plot_cost\n"
            "from attncourse.chapters.ch04_self_attention.figures import plot_step\n"
            "from attncourse.widgets.base import Explorer\n",
        "checks/core.py": "import attncourse.chapters\n",
        "course/rubrics.py": "import attncourse.chapters as chapters\n",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(code)
    wrong = _chapter_breaches(sorted(package.rglob("*.py")), package)
    assert len(wrong) == 3, wrong
    assert any("library part recipes imports attncourse.chapters.ch09" in w for w in wrong)
    assert any("chapter folder ch04_self_attention imports attncourse.chapters.ch03" in w for w in wrong)
    assert any("library part checks imports attncourse.chapters" in w for w in wrong)


def test_chapters_sit_below_the_library_parts():
    levels = _map()
    if "chapters" in levels:  # once tools/move_chapters.py has made the folders
        library = set(levels) - {"chapters", "course"}
        assert all(levels[part] <= levels["chapters"] for part in library)
        assert levels["course"] > levels["chapters"]
