"""The package's layering, as attncourse/__init__.py draws it: no import runs back up.

``attncourse/chapters/chNN_<name>/`` (one chapter's own code) sits below the library parts: a
chapter's folder imports the library, never another chapter's folder, and no library part
imports a chapter's folder (only ``course`` reads the chapters, through
``attncourse.chapters.modules``). What one chapter alone uses lives in its folder: a module of
the parts chapters share (checks, recipes, viz, widgets) that exactly one notebook reaches is
misplaced.
"""

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

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
    library = set(levels) - {"chapters", "course"}
    assert all(levels[part] <= levels["chapters"] for part in library)
    assert levels["course"] > levels["chapters"]


# ----------------------------------------------------------------------------- one chapter's code in its folder

#: The library parts whose modules a single chapter might be the only user of.
SHARED_PARTS = ("checks", "recipes", "viz", "widgets")
ROOT = PACKAGE.parent


def _dotted(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lazy_names(init: Path, root: Path = ROOT) -> dict[str, str]:
    """name -> defining submodule, from a package's ``lazy_exports(__name__, {...})`` table."""
    package, names = _dotted(init, root), {}
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_exports":
            for key, value in zip(node.args[1].keys, node.args[1].values):
                names.update({n.value: f"{package}.{key.value}" for n in value.elts})
    return names


def _code_cells(text: str) -> list[str]:
    """The code of a MyST page's ``{code-cell}`` blocks, without options and magics."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)
    cells = [re.sub(r"\A---\n.*?\n---\n", "", cell, flags=re.S) for cell in cells]
    return ["\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
            for cell in cells]


def _used_modules(sources: list[str], modules: set[str], lazy: dict[str, dict[str, str]]) -> set[str]:
    """The package's modules ``sources`` (one page's cells, in order) use: imported, through a
    package's re-export, or as ``package.name`` after ``from attncourse import package``."""
    def resolve(module: str, name: str) -> str:
        dotted = f"{module}.{name}"
        return dotted if dotted in modules else lazy.get(module, {}).get(name, module)

    used, aliases = set(), {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attncourse"):
                for alias in node.names:
                    used.add(target := resolve(node.module, alias.name))
                    if target in lazy:
                        aliases[alias.asname or alias.name] = target
            elif isinstance(node, ast.Import):
                used.update(a.name for a in node.names if a.name.startswith("attncourse"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                used.add(resolve(aliases[node.value.id], node.attr))
    return used & modules


def _chapter_only(package: Path, pages: dict[str, list[str]]) -> list[str]:
    """Modules of :data:`SHARED_PARTS` that one notebook alone reaches (directly or through
    modules of those parts only it reaches), and nothing else in the package or the pages does."""
    files = {_dotted(p, package.parent): p for p in package.rglob("*.py")}
    lazy = {_dotted(p, package.parent): _lazy_names(p, package.parent) for p in package.rglob("__init__.py")}
    shared = {m for m, p in files.items() if p.name != "__init__.py" and m.split(".")[1:2] in
              [[part] for part in SHARED_PARTS]}
    users: dict[str, set[str]] = {m: set() for m in shared}
    for module, path in files.items():
        for used in _used_modules([path.read_text(encoding="utf-8")], set(files), lazy) & shared - {module}:
            users[used].add(module if module in shared else "library")
    for name, cells in pages.items():
        for used in _used_modules(cells, set(files), lazy) & shared:
            users[used].add(name)
    tags = {m: {u for u in users[m] if u not in shared} for m in shared}
    changed = True
    while changed:  # a module used by another shared module serves whoever that one serves
        changed = False
        for m in shared:
            for user in users[m] & shared:
                if not tags[user] <= tags[m]:
                    tags[m] |= tags[user]
                    changed = True
    return sorted(f"{m} is used by {next(iter(t))} alone" for m, t in tags.items()
                  if len(t) == 1 and next(iter(t)).startswith("notebooks/"))


def _pages(root: Path) -> dict[str, list[str]]:
    pages = {f"notebooks/{p.name}": _code_cells(p.read_text(encoding="utf-8"))
             for p in sorted((root / "notebooks").glob("*.md"))}
    pages.update({f"book/{p.name}": _code_cells(p.read_text(encoding="utf-8"))
                  for p in sorted((root / "book").glob("*.md"))})
    pages.update({f"benchmarks/{p.name}": [p.read_text(encoding="utf-8")]
                  for p in sorted((root / "benchmarks").glob("*.py"))})
    return pages


def test_what_one_chapter_alone_uses_is_in_its_folder():
    # A module of a shared part that exactly one notebook reaches belongs in that chapter's
    # folder: a library part stays what several chapters (or the library itself) use.
    wrong = _chapter_only(PACKAGE, _pages(ROOT))
    assert not wrong, "move into the chapter's folder (attncourse/chapters/chNN_<name>/): " + "; ".join(wrong)


def test_the_chapter_only_check_sees_a_misplaced_module(tmp_path):
    # The check must be able to fail: viz/solo.py used by one notebook only (directly or
    # through viz's re-export), viz/both.py by two, viz/deep.py through solo.py only.
    package = tmp_path / "attncourse"
    for name, code in {
        "__init__.py": "",
        "viz/__init__.py": 'from attncourse.lazy import lazy_exports\n'
                           '__getattr__, __dir__ = lazy_exports(__name__, {"solo": ("plot_solo",)})\n',
        "viz/solo.py": "from attncourse.viz.deep import helper\n",
        "viz/deep.py": "def helper(): pass\n",
        "viz/both.py": "def plot_both(): pass\n",
        "viz/library.py": "def used(): pass\n",
        "nn/model.py": "from attncourse.viz.library import used\n",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(code)
    pages = {"notebooks/01_a.md": ["from attncourse import viz\nviz.plot_solo()\n",
                                   "from attncourse.viz.both import plot_both\n"],
             "notebooks/02_b.md": ["from attncourse.viz.both import plot_both\n",
                                   "from attncourse.viz.library import used\n"]}
    assert _chapter_only(package, pages) == ["attncourse.viz.deep is used by notebooks/01_a.md alone",
                                             "attncourse.viz.solo is used by notebooks/01_a.md alone"]


def test_a_rubric_label_in_two_chapters_is_refused(monkeypatch):
    import attncourse.chapters as chapters
    from attncourse.course import rubrics

    assert set(rubrics.RUBRICS) == {label for m in chapters.modules("rubrics") for label in m.RUBRICS}
    twice = [SimpleNamespace(RUBRICS={"ex-a": 1}), SimpleNamespace(RUBRICS={"ex-a": 2, "ex-b": 3})]
    monkeypatch.setattr(chapters, "modules", lambda role: twice)
    with pytest.raises(ValueError, match="rubrics given by two chapters: ex-a"):
        rubrics._chapters_rubrics()
    assert chapters.check.__module__ == "attncourse.chapters"
    monkeypatch.undo()
    assert chapters.check("check_copying_score").__module__.endswith("ch09_what_heads_learn.checks")
    with pytest.raises(AttributeError, match="no check named 'check_nothing'"):
        chapters.check("check_nothing")
