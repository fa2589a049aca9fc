"""Move each chapter's own code into ``attncourse/chapters/chNN_<name>/`` and rewrite imports.

Issue 34, item 4: what only one chapter uses (its checks, its recipe, its explorer, its own
figures, its rubrics) lives in one folder per notebook, ``attncourse/chapters/ch`` + the
notebook's stem (``notebooks/04_self_attention.md`` -> ``ch04_self_attention/``); what
several chapters share stays in the library layers.

Run it with the project's environment (it calls the ``ruff`` beside its Python), from any
folder, on a checkout whose changes are committed (so that ``git diff`` shows what it did)::

    .venv/bin/python tools/move_chapters.py            # move, rewrite, say what it did
    .venv/bin/python tools/move_chapters.py --check    # change nothing; exit 1 if anything is left
    .venv/bin/python tools/move_chapters.py --dry-run  # say what a run would do; change nothing

A run that finds a problem changes nothing and exits 2 with one line naming each problem.

What a run does, in order (every step does nothing when its work is already done, so a
second run changes nothing and ``--check`` then exits 0):

1. **Decides from the import graph.** For every module of ``checks/``, ``recipes/``,
   ``viz/`` and ``widgets/`` it finds who uses it: the notebooks' code cells (through the
   packages' re-exports, ``from attncourse import viz`` then ``viz.plot_x`` included), the
   book's pages, the benchmarks and the package's other modules (tests do not count).
   A module that exactly one notebook reaches, directly or through other modules only that
   notebook reaches, is *chapter-only*. The table :data:`MOVES` says where each one goes.
   The run stops, before changing anything, with one line per problem, if a chapter-only
   module is missing from the table, if the table moves a module that the graph says is
   shared, or if any other check below fails. Modules of :data:`MOVES` that do not exist
   (yet), or that no notebook uses yet, are left alone (the latter with a note): the table
   already names files other branches were creating.
2. ``git mv``'s each chapter-only module to its folder (history follows) and writes the
   folders' ``__init__.py`` and ``attncourse/chapters/__init__.py`` (:func:`modules`
   finds a role's modules in every folder), the latter copied from branch :data:`LANDED`.
3. Splits ``RUBRICS`` of ``attncourse/course/rubrics.py`` into ``chNN_<name>/rubrics.py``,
   by the notebook whose ``:label:`` each exercise is; the :class:`Rubric` class moves to
   ``attncourse/chapters/rubric.py`` and ``course/rubrics.py`` collects the chapters'
   dictionaries (a label in two chapters is an error). Entries added later to a dictionary
   in ``course/rubrics.py`` are moved by the next run.
4. Rewrites every reference in the repository's text files (``attncourse/``, ``tests/``,
   ``notebooks/``, ``book/``, ``benchmarks/``, the Makefile, ``pyproject.toml``, README,
   ...): ``from attncourse.checks import check_x`` (a package's re-export of a moved
   module) becomes ``from attncourse.chapters.chNN_<name>.checks import check_x``, split
   from the names that stay; ``viz.plot_x`` / ``widgets.X`` of a moved module become the
   bare name, imported beside the ``from attncourse import viz`` line; dotted names
   (``attncourse.checks.heads``) and paths (``attncourse/checks/heads.py``) in code,
   strings and prose follow the move (imports written inside strings too). The packages'
   ``__init__.py`` drop the moved modules' re-exports: a library part may not import a
   chapter. Rewritten imports in Python files are re-sorted with ``ruff check --select I
   --fix``, in Markdown wrapped within 88 characters; a rewritten line past ruff's 120 is
   wrapped.
5. Applies :data:`EDITS`: the few places that name the old layout in code rather than by
   import (the check guard's "inside the checks" test; four tests that look a check up by
   name in ``attncourse.checks``, now through :func:`attncourse.chapters.check`; the layer
   map in ``attncourse/__init__.py``; the README's table). An edit whose text is in neither
   its old nor its new form stops the run: do that one by hand. :data:`DOC_EDITS` (the
   docstrings and README rows that list what moved) only get a note then.

After a run: ``git status`` shows the renames and edits; run ``ruff check .``, ``pytest
tests/test_layers.py tests/test_move_chapters.py`` and the tests of the moved modules, and
execute one chapter notebook. ``--check`` takes seconds; ``tests/test_move_chapters.py``
runs it, so a module one chapter alone uses cannot be left in a library part unnoticed.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "attncourse"

#: chapter folder -> {today's module under attncourse/: its file name in the folder}.
#: Files that do not exist are skipped (chapter 11's explorer and chapter 12's files were
#: being written on other branches when this table was made).
MOVES: dict[str, dict[str, str]] = {
    "ch02_bahdanau_attention": {"widgets/bahdanau.py": "explorer.py"},
    "ch03_attention_family": {
        "checks/attention_family.py": "checks.py",
        "viz/luong.py": "figures.py",
        "widgets/local_window.py": "window_explorer.py",
        "widgets/temperature.py": "temperature_explorer.py",
    },
    "ch03b_attention_over_images": {
        "checks/image_attention.py": "checks.py",
        "recipes/captioning.py": "recipe.py",
    },
    "ch04_self_attention": {
        "viz/self_attention.py": "figures.py",
        "widgets/stepper.py": "explorer.py",
    },
    "ch04b_self_attention_in_cnns": {
        "checks/conv_attention.py": "checks.py",
        "recipes/relation.py": "recipe.py",
        "viz/conv_attention.py": "figures.py",
    },
    "ch05_multihead_positional": {
        "checks/transformer.py": "checks.py",
        "widgets/positional.py": "explorer.py",
    },
    "ch06_transformer": {"checks/training.py": "checks.py"},
    "ch07_decoder_only": {
        "checks/decoder_only.py": "checks.py",
        "widgets/decoder_only.py": "explorer.py",
    },
    "ch08_attention_at_scale": {
        "checks/attention_at_scale.py": "checks.py",
        "checks/flash_kernel.py": "kernel_checks.py",
        "recipes/recall.py": "recipe.py",
        "viz/scale.py": "figures.py",
        "widgets/flash.py": "explorer.py",
    },
    "ch09_what_heads_learn": {
        "checks/heads.py": "checks.py",
        "recipes/induction.py": "recipe.py",
        "widgets/induction.py": "explorer.py",
    },
    "ch10_serving_attention": {
        "checks/serving.py": "checks.py",
        "viz/serving.py": "figures.py",
        "widgets/paged_cache.py": "explorer.py",
    },
    "ch11_real_model": {
        "checks/real_model.py": "checks.py",
        "widgets/real_model.py": "explorer.py",
    },
    "ch12_long_context": {
        "checks/long_context.py": "checks.py",
        "recipes/long_context.py": "recipe.py",
        "widgets/long_context.py": "explorer.py",
    },
}

#: Library modules several chapters (or a library part, a book page, a benchmark) use, as
#: the graph found them when the table was made; they stay. Only documentation: the graph
#: decides at each run, and a module missing here is no problem.
SHARED = (
    "checks/core.py checks/guard.py checks/hand_offs.py checks/graded.py "
    "checks/seq2seq.py (chapters 1, 2) checks/self_attention.py (4, 6) "
    "recipes/experiment.py recipes/lm.py (7, 9, 10, cli) recipes/gpu_results.py (6, book) "
    "viz/heatmap.py viz/curves.py viz/images.py (3b, 4b) viz/seq2seq.py viz/transformer.py "
    "widgets/base.py widgets/static.py widgets/explorer.py (5, 6)"
)

#: The parts whose modules may be one chapter's.
CANDIDATE_PARTS = ("checks", "recipes", "viz", "widgets")
#: Text files the references are rewritten in (by suffix or name).
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".json", ".ini", ".rst"}
TEXT_NAMES = {"Makefile", "run"}
WIDTH = 88
#: ruff's E501 limit (pyproject.toml): rewritten lines longer than this are wrapped.
LIMIT = 120
RUBRICS_PY = PKG / "course" / "rubrics.py"

#: The branch whose files give the layout's own modules when a checkout lacks them: a run
#: copies ``attncourse/chapters/__init__.py``, the head of ``attncourse/chapters/rubric.py``
#: and course's collection of the chapters' rubrics from there rather than keeping a second
#: copy of their text here.
LANDED = "main"


def _landed(path: str) -> str:
    """The text of ``path`` (from the repository's root) on the branch :data:`LANDED`."""
    return _git("show", f"{LANDED}:{path}")


def _rubric_head() -> str:
    """``attncourse/chapters/rubric.py`` as landed, up to its :class:`Rubric` class."""
    text = _landed("attncourse/chapters/rubric.py")
    return text[:text.index("@dataclass")]


def _collect() -> str:
    """Course's collection of the chapters' rubrics as landed: ``_chapters_rubrics`` and ``RUBRICS``."""
    text = _landed("attncourse/course/rubrics.py")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    start = next(node.lineno for node in tree.body
                 if isinstance(node, ast.FunctionDef) and node.name == "_chapters_rubrics")
    end = next(node.end_lineno for node in tree.body
               if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "RUBRICS")
    return "".join(lines[start - 1:end])


#: (file, old text, new text[, done]): edits of code that names the old layout other than by
#: an import. Applied (every occurrence) when the old text is there; done when ``done`` (the
#: new text if not given) is; else the run stops.
EDITS: list[tuple[str, ...]] = [
    ("attncourse/checks/guard.py",
     '            elif rules.package and not module.startswith("attncourse.checks"):\n',
     '            elif rules.package and not (module.startswith("attncourse.checks")\n'
     '                                        or _chapter_checks(module)):\n'),
    ("attncourse/checks/guard.py",
     "\n\n@contextlib.contextmanager\ndef watching(",
     '\n\ndef _chapter_checks(module: str) -> bool:\n'
     '    """Whether ``module`` is a chapter\'s checks (``attncourse.chapters.ch*.*checks``)."""\n'
     '    parts = module.split(".")\n'
     '    return (len(parts) == 4 and parts[:2] == ["attncourse", "chapters"]\n'
     '            and parts[3].endswith("checks"))\n'
     '\n\n@contextlib.contextmanager\ndef watching('),
    ("attncourse/checks/guard.py",
     "Refuse every function of the ``attncourse`` package outside ``attncourse.checks``\n",
     "Refuse every function of the ``attncourse`` package outside the checks\n"
     "        (``attncourse.checks`` and the chapters' ``checks`` modules)\n"),
    ("tests/test_course_editions.py",
     "            assert ex.check and hasattr(attncourse.checks, ex.check), "
     'f"{ex.label}: no check"\n',
     "            homes = [attncourse.checks, *attncourse.chapters.modules(\"checks\", "
     "path.stem)]\n"
     "            assert ex.check and any(hasattr(m, ex.check) for m in homes), "
     'f"{ex.label}: no check"\n'),
    ("tests/test_course_editions.py",
     "import attncourse.checks\n",
     "import attncourse.chapters\nimport attncourse.checks\n",
     "import attncourse.chapters\n"),
    ("tests/test_checks_hints.py",
     "    for info in pkgutil.iter_modules(checks.__path__):\n"
     '        module = importlib.import_module(f"attncourse.checks.{info.name}")\n'
     '        out |= {f"{info.name}.{name}": value',
     "    modules = [importlib.import_module(f\"attncourse.checks.{info.name}\")\n"
     "               for info in pkgutil.iter_modules(checks.__path__)]\n"
     "    for module in modules + chapters.modules(\"checks\"):\n"
     '        out |= {f"{module.__name__}.{name}": value'),
    ("tests/test_checks_hints.py",
     "import attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\nimport attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\n"),
    ("tests/test_checks_hand_offs.py",
     "    return getattr(checks, ex.check)\n",
     "    return chapters.check(ex.check)\n"),
    ("tests/test_checks_hand_offs.py",
     "import attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\nimport attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\n"),
    ("tests/test_checks_references.py",
     "getattr(checks, check)(",
     "chapters.check(check)("),
    ("tests/test_checks_references.py",
     "import attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\nimport attncourse.checks as checks\n",
     "import attncourse.chapters as chapters\n"),
    ("attncourse/__init__.py",
     "    6  cli         the command line, ``python -m attncourse``\n",
     "    6  cli         the command line, ``python -m attncourse``\n"
     "       chapters    each chapter's own checks, recipe, explorer, figures and rubrics\n"),
    ("attncourse/__init__.py",
     "    7  course      student editions, nbgrader, the instructor's guide\n",
     "    7  course      student editions, nbgrader, the instructor's guide (reads the\n"
     "                   chapters' rubrics)\n"),
    ("attncourse/course/__init__.py",
     "and imports nothing from the rest of the package\nexcept the command line's helpers.",
     "and imports nothing from the rest of the package\nexcept the command line's helpers "
     "and the chapters' rubrics (:mod:`attncourse.chapters`)."),
    ("README.md",
     "| `attncourse/checks/` | instant feedback on the exercises |\n",
     "| `attncourse/checks/` | instant feedback on the exercises |\n"
     "| `attncourse/chapters/chNN_<name>/` | what one chapter alone uses: its checks, recipe, "
     "explorer, figures and rubrics (`python tools/move_chapters.py --check` keeps it so) |\n"),
]


#: Edits of documentation that lists what moved: like :data:`EDITS`, but one whose text is
#: found in neither form (someone rewrote that text since) is only noted, not a stop.
DOC_EDITS: list[tuple[str, ...]] = [
    ("attncourse/recipes/__init__.py",
     """- :mod:`~attncourse.recipes.captioning`: image captioning with soft and hard
  attention (chapter 3b);
- :mod:`~attncourse.recipes.relation`: relational reasoning with and without
  self-attention in a CNN (chapter 4b);
- :mod:`~attncourse.recipes.lm`: chapter 7's character-level GPT (the
  ``train-lm`` command);
- :mod:`~attncourse.recipes.recall`: associative recall, softmax against linear
  attention (chapter 8).
""",
     """- :mod:`~attncourse.recipes.lm`: chapter 7's character-level GPT (the
  ``train-lm`` command), trained again in chapters 9 and 10;
- :mod:`~attncourse.recipes.gpu_results`: the GPU report's results, for chapter 6 and
  the benchmarks' page.

What one chapter alone trains is its folder's ``recipe`` (``attncourse/chapters/``).
"""),
    ("attncourse/viz/__init__.py",
     """- :func:`plot_step` and :data:`STEP_FIGURES`: one figure per step of
  self-attention, drawn from a :class:`attncourse.functional.SelfAttentionTrace`.
""", ""),
    ("attncourse/viz/__init__.py",
     """- :func:`plot_local_window`, :func:`plot_alignment_windows`, :func:`plot_cost`,
  :func:`plot_temperature`, :func:`plot_tempered_weights`: Luong's global and local
  attention, and the temperature between soft and hard attention.
""", ""),
    ("attncourse/viz/__init__.py",
     """- :func:`plot_online_softmax`, :func:`plot_tiles`, :func:`plot_loglog`,
  :func:`plot_roofline`: FlashAttention's online softmax and tiles, costs against n.
- :func:`plot_pixel_attention`, :func:`plot_pixel_attention_row`: where one position of a
  CNN feature map looks, with self-attention inside the CNN.
""",
     """
The figures one chapter alone draws are its folder's ``figures`` (``attncourse/chapters/``).
""", "The figures one chapter alone draws"),
    ("attncourse/__init__.py",
     "       recipes     what each chapter trains (Experiment, captioning, the LM, ...)\n",
     "       recipes     what several chapters train (Experiment, the LM)\n"),
    ("README.md",
     "| `attncourse/recipes/` | what each chapter trains: `Experiment` (chapters 1-3, 6), "
     "captioning (3b), relations (4b), the language model (7), recall (8), induction heads (9) |\n",
     "| `attncourse/recipes/` | what several chapters train: `Experiment` (chapters 1-3, 6), "
     "the language model (7, 9, 10) |\n"),
]


class Stop(Exception):
    """A problem found before anything changed: the run stops with its lines."""


# --- the import graph ----------------------------------------------------------------------

def _dotted(rel: str) -> str:
    """``checks/heads.py`` -> ``attncourse.checks.heads``."""
    return "attncourse." + rel.removesuffix(".py").replace("/", ".")


def _module_files() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _reexports(files: dict[str, Path]) -> dict[tuple[str, str], str]:
    """(package, name) -> the module of the package that defines it, from ``__init__.py``."""
    out = {}
    for module, path in files.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(module + "."):
                for alias in node.names:
                    out[(module, alias.asname or alias.name)] = node.module
    return out


def _code_cells(text: str) -> list[str]:
    """The code of a MyST notebook's ``{code-cell}`` blocks, magics and options left out."""
    cells = []
    for cell in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M):
        cell = re.sub(r"\A---\n.*?\n---\n", "", cell, flags=re.S)
        cells.append("\n".join(line for line in cell.splitlines()
                               if not line.lstrip().startswith(("%", "!", ":"))))
    return cells


class Graph:
    """Who uses each module of the package: notebooks by stem, other users as ``lib``."""

    def __init__(self) -> None:
        self.files = _module_files()
        self.reexports = _reexports(self.files)
        self.users: dict[str, set[str]] = {m: set() for m in self.files}
        for module, path in self.files.items():
            if path.name != "__init__.py":
                self._add(module, [path.read_text(encoding="utf-8")])
        for nb in sorted((ROOT / "notebooks").glob("*.md")):
            self._add(f"notebook:{nb.stem}", _code_cells(nb.read_text(encoding="utf-8")))
        for page in sorted((ROOT / "book").glob("*.md")):
            self._add(f"book/{page.name}", _code_cells(page.read_text(encoding="utf-8")))
        for path in sorted((ROOT / "benchmarks").glob("*.py")):
            self._add(f"benchmarks/{path.name}", [path.read_text(encoding="utf-8")])

    def _is_package(self, module: str) -> bool:
        return module in self.files and self.files[module].name == "__init__.py"

    def _resolve(self, module: str, name: str) -> str:
        if f"{module}.{name}" in self.files:
            return f"{module}.{name}"
        return self.reexports.get((module, name), module)

    def _add(self, user: str, sources: list[str]) -> None:
        aliases: dict[str, str] = {}
        for source in sources:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            used = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                        and node.module.split(".")[0] == "attncourse":
                    for alias in node.names:
                        target = self._resolve(node.module, alias.name)
                        used.add(target)
                        if self._is_package(target):
                            aliases[alias.asname or alias.name] = target
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] == "attncourse":
                            used.add(alias.name)
                            aliases[alias.asname or alias.name] = alias.name
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    chain, base = [], node
                    while isinstance(base, ast.Attribute):
                        chain.append(base.attr)
                        base = base.value
                    if not (isinstance(base, ast.Name) and base.id in aliases):
                        continue
                    target = aliases[base.id]
                    for attr in reversed(chain):
                        found = self._resolve(target, attr)
                        if found == target:
                            break
                        target = found
                        used.add(target)
                        if not self._is_package(target):
                            break
            for module in used:
                while module not in self.files and "." in module:
                    module = module.rsplit(".", 1)[0]
                if module in self.users and module != user:
                    self.users[module].add(user)

    def owners(self) -> dict[str, set[str]]:
        """Module of a candidate part -> the notebooks it serves, ``lib`` for anything else."""
        candidates = {m for m, p in self.files.items()
                      if p.name != "__init__.py" and m.split(".")[1] in CANDIDATE_PARTS}
        tags = {}
        for m in candidates:
            tags[m] = set()
            for user in self.users[m]:
                if user.startswith("notebook:"):
                    tags[m].add(user.removeprefix("notebook:"))
                elif user not in candidates:
                    tags[m].add("lib")
        changed = True
        while changed:
            changed = False
            for m in candidates:
                for user in self.users[m] & candidates:
                    if not tags[user] <= tags[m]:
                        tags[m] |= tags[user]
                        changed = True
        return tags


# --- planning ------------------------------------------------------------------------------

def _table() -> dict[str, tuple[str, str]]:
    """Today's dotted module -> (its chapter folder, its new dotted name)."""
    out = {}
    for folder, files in MOVES.items():
        for old, new in files.items():
            out[_dotted(old)] = (folder, f"attncourse.chapters.{folder}.{new.removesuffix('.py')}")
    return out


def plan(graph: Graph) -> tuple[dict[str, str], list[str], list[str]]:
    """The moves to make (old dotted -> new dotted), the problems found, and notes."""
    table, problems, notes, moves = _table(), [], [], {}
    for module, tags in sorted(graph.owners().items()):
        where = module.removeprefix("attncourse.").replace(".", "/") + ".py"
        users = ", ".join(sorted(graph.users[module])) or "nobody"
        one = len(tags) == 1 and "lib" not in tags
        if module in table:
            folder = table[module][0]
            if not tags:
                notes.append(f"{where} left in place: no notebook uses it yet (the table "
                             f"moves it to {folder} once one does)")
            elif not one or f"ch{next(iter(tags))}" != folder:
                problems.append(f"the table moves {where} to {folder}, but it is used by {users}")
            else:
                moves[module] = table[module][1]
        elif one:
            problems.append(f"{where} is chapter {next(iter(tags))}'s alone (used by {users}) "
                            "and MOVES lacks it")
    return moves, problems, notes


# --- text rewriting ------------------------------------------------------------------------

IMPORT = re.compile(
    r"^(?P<ind>[ \t]*(?:>>> )?)from (?P<mod>attncourse(?:\.\w+)*) import "
    r"(?P<names>\((?:[^()]|\n)*?\)|[^\n#()]+?)(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)


#: An import written inside a string (code run in a kernel): one line, up to ``\\n`` or a quote.
STRING_IMPORT = re.compile(
    r"(?<=[\"'])(?P<ind>)from (?P<mod>attncourse(?:\.\w+)*) import "
    r"(?P<names>\w+(?: as \w+)?(?:, \w+(?: as \w+)?)*)(?P<tail>)(?=\\n|[\"'])")


def _names(group: str) -> tuple[list[tuple[str, str | None]], str]:
    """The names of an import's group and its first comment."""
    comments = re.findall(r"#[^\n]*", group)
    body = re.sub(r"#[^\n]*", "", group).strip().strip("()")
    names = []
    for item in body.replace("\n", " ").split(","):
        item = item.strip()
        if item:
            name, _, alias = item.partition(" as ")
            names.append((name.strip(), alias.strip() or None))
    return names, (comments[0].strip() if comments else "")


def _fmt(indent: str, module: str, names: list[tuple[str, str | None]], comment: str,
         width: int = WIDTH) -> str:
    """One import statement, wrapped within ``width`` characters."""
    items = [n if a is None else f"{n} as {a}" for n, a in names]
    tail = f"  {comment}" if comment else ""
    one = f"{indent}from {module} import {', '.join(items)}{tail}"
    if len(one) <= width:
        return one
    lines, line = [f"{indent}from {module} import ({tail}"], indent + "    "
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else ")")
        if line.strip() and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line.rstrip())
            line = indent + "    "
        line += ("" if not line.strip() else " ") + piece
    lines.append(line)
    return "\n".join(lines)


def _unqualify(text: str, used: re.Pattern, names: set[str]) -> str:
    """``alias.name`` -> ``name`` for ``names``; lines aligned under the call move left too."""
    out, shift, column, depth = [], 0, 0, 0

    def balance(part: str) -> int:
        return sum(part.count(c) for c in "([{") - sum(part.count(c) for c in ")]}")

    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        if depth > 0 and shift and indent > column + shift:
            line = line[shift:]
        found = [u for u in used.finditer(line) if u[1] in names]
        if found and depth <= 0:
            shift, column = len(found[0][0]) - len(found[0][1]), found[0].start()
            depth = balance(line[found[0].start():])
        else:
            depth += balance(line)
        if depth <= 0:
            shift = 0
        out.append(used.sub(lambda u: u[1] if u[1] in names else u[0], line) if found else line)
    return "\n".join(out)


class Rewriter:
    """Rewrites one file's references to the moved modules."""

    def __init__(self, moves: dict[str, str], graph: Graph) -> None:
        self.moves = moves
        # (package, name) -> new module, for names the packages re-export from moved modules
        self.moved_names = {key: moves[src] for key, src in graph.reexports.items() if src in moves}
        self.moved_sub = {}  # (package, submodule name) -> new dotted
        for old, new in moves.items():
            package, _, name = old.rpartition(".")
            self.moved_sub[(package, name)] = new
        old = sorted(moves, key=len, reverse=True)
        self.dotted = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, old)) + r")(?!\w)") if old else None
        self.paths = {m.replace(".", "/") + ".py": n.replace(".", "/") + ".py" for m, n in moves.items()}
        self.path_re = re.compile(r"(?<![\w/])(" + "|".join(map(re.escape, self.paths)) + r")") if old else None
        self.problems: list[str] = []

    def _in_string(self, match: re.Match) -> str:
        """An import inside a string: its statements joined by ``\\n``, never wrapped."""
        return self._statement(match, width=10_000).replace("\n", "\\n")

    def _statement(self, match: re.Match, width: int = WIDTH) -> str:
        indent, module, group, tail = match["ind"], match["mod"], match["names"], match["tail"]
        names, comment = _names(group + tail)
        stay, out = [], {}
        for name, alias in names:
            if (module, name) in self.moved_sub:
                package, _, leaf = self.moved_sub[(module, name)].rpartition(".")
                out.setdefault(package, []).append((leaf, alias or (name if name != leaf else None)))
            elif (module, name) in self.moved_names:
                out.setdefault(self.moved_names[(module, name)], []).append((name, alias))
            else:
                stay.append((name, alias))
        if module in self.moves:
            out.setdefault(self.moves[module], []).extend(stay)
            stay = []
        if not out:
            return match[0]
        statements = [_fmt(indent, module, stay, comment, width)] if stay else []
        statements += [_fmt(indent, new, out[new], comment, width) for new in sorted(out)]
        return "\n".join(statements)

    def _attributes(self, text: str, path: str) -> str:
        """``viz.plot_x`` -> ``plot_x`` for a moved module's name, imported where viz is."""
        bindings = []  # (end of the binding line, its indent, alias, package)
        for m in re.finditer(r"^([ \t]*)from attncourse import ([\w, ]+?)[ \t]*(?:#.*)?$", text, re.M):
            for item in m[2].split(","):
                name, _, alias = item.strip().partition(" as ")
                bindings.append((m.end(), m[1], (alias or name).strip(), f"attncourse.{name.strip()}"))
        for m in re.finditer(r"^([ \t]*)import (attncourse\.\w+) as (\w+)[ \t]*(?:#.*)?$", text, re.M):
            bindings.append((m.end(), m[1], m[3], m[2]))
        inserts: dict[int, list[str]] = {}
        subs = []  # (pattern, names)
        for end, indent, alias, package in bindings:
            used = re.compile(rf"(?<![\w.]){re.escape(alias)}\.(\w+)")
            moved: dict[str, list[str]] = {}
            for use in used.finditer(text):
                new = self.moved_names.get((package, use[1]))
                if new and use[1] not in moved.setdefault(new, []):
                    moved[new].append(use[1])
            if not moved:
                continue
            for name in (n for names in moved.values() for n in names):
                binding = re.compile(rf"^\s*(?:def|class)\s+{name}\b|^\s*{name}\s*=[^=]|"
                                     rf"\bimport\b[^\n]*\b{name}\b|\bas\s+{name}\b|"
                                     rf"\bfor\s+{name}\b", re.M)
                if binding.search(text):
                    self.problems.append(f"{path}: `{alias}.{name}` would become `{name}`, "
                                         "which the file already binds")
            inserts.setdefault(end, []).extend(
                _fmt(indent, new, [(n, None) for n in sorted(names)], "")
                for new, names in sorted(moved.items()))
            subs.append((used, {n for names in moved.values() for n in names}))
        for end in sorted(inserts, reverse=True):
            text = text[:end] + "\n" + "\n".join(inserts[end]) + text[end:]
        for used, names in subs:
            text = _unqualify(text, used, names)
        return text

    def _drop_unused_aliases(self, text: str) -> str:
        def keep(m: re.Match) -> str:
            items = [i.strip() for i in m[2].split(",")]
            rest = text[:m.start()] + text[m.end():]
            kept = [i for i in items
                    if re.search(rf"(?<![\w.]){re.escape(i.partition(' as ')[2] or i)}\b", rest)]
            if kept == items:
                return m[0]
            return f"{m[1]}from attncourse import {', '.join(kept)}" if kept else "\0DROP"
        text = re.sub(r"^([ \t]*)from attncourse import ([\w, ]+?)[ \t]*$", keep, text, flags=re.M)
        return text.replace("\0DROP\n", "")

    def rewrite(self, text: str, path: str) -> str:
        if self.dotted is None:
            return text
        before = text
        text = IMPORT.sub(self._statement, text)
        text = STRING_IMPORT.sub(self._in_string, text)
        attributes = self._attributes(text, path)
        if attributes != text:
            text = self._drop_unused_aliases(attributes)
        text = self.dotted.sub(lambda m: self.moves[m[1]], text)
        text = self.path_re.sub(lambda m: self.paths[m[1]], text)
        if path.endswith(".py") and text != before:
            text = _wrap_prose(text, before)
        return text


def _wrap_prose(text: str, before: str) -> str:
    """Wrap the lines the rewrite made longer than ruff's limit (:data:`LIMIT`).

    A string holding ``\\n`` is split after it; a docstring or comment line is cut within
    :data:`WIDTH` and what is cut off joins the next line of the same paragraph.
    """
    old = set(before.split("\n"))
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        body = line.lstrip(" ")
        if line in old or len(line) <= LIMIT:
            out.append(line)
            continue
        joined = re.match(r'( *)"(.*?\\n)(.+)$', line)
        if joined and not body.startswith('"""'):
            out.append(f'{joined[1]}"{joined[2]}"')
            lines.insert(i, f'{joined[1]}"{joined[3]}')
            continue
        prose = body.startswith(('"""', "#")) or not re.search(r"[()=\[\]{}'\"]", body)
        indent = line[:len(line) - len(body)] + ("# " if body.startswith("#") else "")
        cut = line.rfind(" ", len(indent) + 1, WIDTH + 1)
        if not prose or cut <= len(indent):
            out.append(line)
            continue
        out.append(line[:cut])
        rest = line[cut + 1:]
        following = lines[i] if i < len(lines) else ""
        same = following.startswith(indent) and following.strip() and not re.match(
            r"\s*(?:[-*]\s|:|>>>|\"\"\"$)", following[len(indent):] if indent.strip() else following)
        if same and not rest.endswith('"""'):
            lines[i] = indent + rest + " " + following[len(indent):].lstrip()
            while len(lines[i]) > WIDTH and (cut := lines[i].rfind(" ", len(indent) + 1, WIDTH + 1)) > 0:
                out.append(lines[i][:cut])
                lines[i] = indent + lines[i][cut + 1:]
        else:
            lines.insert(i, indent + rest)
    return "\n".join(out)


# --- the steps -----------------------------------------------------------------------------

def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def _text_files() -> list[Path]:
    names = _git("ls-files", "--cached", "--others", "--exclude-standard").splitlines()
    out = []
    for name in sorted(set(names)):
        path = ROOT / name
        if name in ("tools/move_chapters.py", "tests/test_move_chapters.py") or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            out.append(path)
    return out


def _labels() -> dict[str, str]:
    """Exercise label -> the stem of the notebook that holds it."""
    out = {}
    for nb in sorted((ROOT / "notebooks").glob("*.md")):
        for label in re.findall(r"^:label:\s*(\S+)", nb.read_text(encoding="utf-8"), re.M):
            out[label] = nb.stem
    return out


def rubric_plan() -> tuple[dict[str, list[str]], list[str]]:
    """Folder -> the source of each of its rubric entries in course/rubrics.py; problems."""
    if not RUBRICS_PY.exists():
        return {}, []
    text = RUBRICS_PY.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    labels, out, problems = _labels(), {}, []
    for node in ast.parse(text).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "RUBRICS" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                label = key.value if isinstance(key, ast.Constant) else None
                if label not in labels:
                    problems.append(f"course/rubrics.py: rubric {label!r} is the label of no "
                                    "exercise in notebooks/")
                    continue
                entry = "".join(lines[key.lineno - 1:value.end_lineno])
                entry = entry.rstrip("\n").rstrip(",") + ",\n"
                out.setdefault(f"ch{labels[label]}", []).append(entry)
    return out, problems


def _chapter_init(folder: str) -> str:
    stem = folder.removeprefix("ch")
    number = stem.split("_")[0].lstrip("0")
    return (f'"""Chapter {number}\'s own code: what only ``notebooks/{stem}.md`` uses.\n\n'
            'See :mod:`attncourse.chapters`.\n"""\n')


def split_rubrics(entries: dict[str, list[str]]) -> list[str]:
    """Write the chapters' rubrics.py, the Rubric class's module, and course's collection."""
    done = []
    text = RUBRICS_PY.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    rubric_py = PKG / "chapters" / "rubric.py"
    cut = []  # line ranges (1-based, inclusive) to replace, with the replacement
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Rubric":
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if not rubric_py.exists():
                rubric_py.write_text(_rubric_head() + "".join(lines[start - 1:node.end_lineno]).rstrip()
                                     + '\n\n\n__all__ = ["Rubric"]\n', encoding="utf-8")
                done.append("wrote attncourse/chapters/rubric.py (the Rubric class)")
            cut.append((start, node.end_lineno, ""))
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "RUBRICS" and isinstance(node.value, ast.Dict):
            cut.append((node.lineno, node.end_lineno, _collect()))
    for folder, items in sorted(entries.items()):
        path = PKG / "chapters" / folder / "rubrics.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text(_chapter_init(folder), encoding="utf-8")
        if path.exists():
            old = path.read_text(encoding="utf-8")
            end = old.rindex("}\n")
            path.write_text(old[:end] + "".join(items) + old[end:], encoding="utf-8")
        else:
            number = folder.removeprefix("ch").split("_")[0].lstrip("0")
            path.write_text(
                f'"""Rubrics of chapter {number}\'s written exercises (collected by '
                ':mod:`attncourse.course.rubrics`)."""\n\n'
                "from attncourse.chapters.rubric import Rubric\n\n"
                "RUBRICS: dict[str, Rubric] = {\n" + "".join(items) + "}\n", encoding="utf-8")
        done.append(f"{len(items)} rubric(s) -> attncourse/chapters/{folder}/rubrics.py")
    if cut:
        for start, end, new in sorted(cut, reverse=True):
            lines[start - 1:end] = [new] if new else []
        text = "".join(lines)
        text = re.sub(r"\n{4,}", "\n\n\n", text)
        if "from attncourse.chapters.rubric import Rubric" not in text:
            text = text.replace("from dataclasses import dataclass\n",
                                "import attncourse.chapters as chapters\n"
                                "from attncourse.chapters.rubric import Rubric\n")
        RUBRICS_PY.write_text(text, encoding="utf-8")
        done.append("course/rubrics.py collects the chapters' rubrics")
    return done


def edits_pending() -> tuple[list[tuple[Path, str, str]], list[str], list[str]]:
    """The edits to apply, the problems (an edit's text not found) and notes."""
    todo, problems, notes = [], [], []
    for optional, (name, old, new, *done) in [(False, e) for e in EDITS] + [(True, e) for e in DOC_EDITS]:
        path = ROOT / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        marker = done[0] if done else new
        if (marker and marker in text) or (not marker and old not in text):
            continue
        if old in text:
            todo.append((path, old, new))
        else:
            (notes if optional else problems).append(
                f"{name}: neither the old nor the new text of an edit; do it by hand: "
                f"{(new or old).strip().splitlines()[0][:70]!r}")
    return todo, problems, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if anything is left to move or rewrite")
    parser.add_argument("--dry-run", action="store_true", help="say what a run would do")
    args = parser.parse_args(argv)

    graph = Graph()
    moves, problems, notes = plan(graph)
    rubrics, rubric_problems = rubric_plan()
    edits, edit_problems, edit_notes = edits_pending()
    notes += edit_notes
    problems += rubric_problems + edit_problems
    for note in notes:
        print(f"move_chapters: note: {note}", file=sys.stderr)
    # references to a module an earlier run moved (a branch merged since may add one) are
    # rewritten too: the rewriter knows each table entry whose new file exists
    known = dict(moves)
    for old, (_folder, new) in _table().items():
        if old not in graph.files and new in graph.files:
            known[old] = new
    originals = {path: path.read_text(encoding="utf-8") for path in _text_files()}
    texts = dict(originals)
    texts.update(_reexport_edits(moves))
    for path, old, new in edits:
        texts[path] = texts[path].replace(old, new)
    rewriter = Rewriter(known, graph)
    for path in texts:
        texts[path] = rewriter.rewrite(texts[path], str(path.relative_to(ROOT)))
    problems += rewriter.problems
    changed = {path: text for path, text in texts.items() if text != originals[path]}
    if problems:
        print("move_chapters: stopped, nothing changed: " + "; ".join(problems), file=sys.stderr)
        return 2
    has_class = RUBRICS_PY.exists() and "class Rubric" in RUBRICS_PY.read_text(encoding="utf-8")
    pending = ([f"move {graph.files[m].relative_to(ROOT)} -> {n.replace('.', '/')}.py"
                for m, n in moves.items()]
               + [f"rewrite {p.relative_to(ROOT)}" for p in changed]
               + [f"rubrics -> attncourse/chapters/{f}/rubrics.py" for f in rubrics]
               + (["Rubric class -> attncourse/chapters/rubric.py"] if has_class else []))
    if args.check or args.dry_run:
        for line in pending:
            print(line)
        if args.check:
            print(f"move_chapters --check: {len(pending)} thing(s) left" if pending
                  else "move_chapters --check: every chapter's own code is in its folder")
        return 1 if pending and args.check else 0

    for path, text in changed.items():
        path.write_text(text, encoding="utf-8")
    chapters = PKG / "chapters"
    for old, new in moves.items():
        source = graph.files[old]
        target = ROOT / (new.replace(".", "/") + ".py")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not (target.parent / "__init__.py").exists():
            (target.parent / "__init__.py").write_text(_chapter_init(target.parent.name),
                                                       encoding="utf-8")
        _git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
    if (moves or rubrics or has_class) and not (chapters / "__init__.py").exists():
        chapters.mkdir(exist_ok=True)
        (chapters / "__init__.py").write_text(_landed("attncourse/chapters/__init__.py"), encoding="utf-8")
    done = [f"git mv {line.removeprefix('move ')}" for line in pending if line.startswith("move ")]
    if changed:
        done.append(f"rewrote {len(changed)} file(s)")
    if rubrics or has_class:
        done += split_rubrics(rubrics)
    if done:
        _git("add", "-A", "attncourse/chapters")
        python = {ROOT / _moved_path(p, moves) for p in changed if p.suffix == ".py"}
        python |= {RUBRICS_PY, *chapters.rglob("*.py")}
        ruff = Path(sys.executable).parent / "ruff"
        ruff = str(ruff) if ruff.exists() else shutil.which("ruff")
        if ruff is None:
            print("move_chapters: note: no ruff here: run `ruff check --select I --fix .` "
                  "to sort the rewritten imports", file=sys.stderr)
            ruff = "true"
        # import order wherever imports were rewritten; unused imports only where an edit
        # or the rubrics' split took the last use away
        subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix",
                        *sorted(map(str, python))], cwd=ROOT, check=False)
        edited = {RUBRICS_PY} | {p for p, _, _ in edits if p.suffix == ".py"}
        subprocess.run([ruff, "check", "--quiet", "--select", "F401", "--fix",
                        *sorted(map(str, edited))], cwd=ROOT, check=False)
    for line in done:
        print(line)
    print(f"move_chapters: {len(done)} step(s) done" if done else "move_chapters: nothing left to do")
    return 0


def _moved_path(path: Path, moves: dict[str, str]) -> Path:
    """Where ``path`` is after the moves (relative to the repository)."""
    rel = str(path.relative_to(ROOT)) if path.is_absolute() else str(path)
    for old, new in moves.items():
        if rel == old.replace(".", "/") + ".py":
            return Path(new.replace(".", "/") + ".py")
    return Path(rel)


def _reexport_edits(moves: dict[str, str]) -> dict[Path, str]:
    """The packages' ``__init__.py`` without the moved modules' imports and ``__all__`` names."""
    out = {}
    for package in CANDIDATE_PARTS:
        path = PKG / package / "__init__.py"
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        drop, names = set(), set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and node.module in moves:
                drop.update(range(node.lineno - 1, node.end_lineno))
                names.update(a.asname or a.name for a in node.names)
        if not drop:
            continue
        kept = [line for i, line in enumerate(lines) if i not in drop]
        text = "".join(kept)
        text = re.sub(r'^\s*"(' + "|".join(map(re.escape, names)) + r')",\n', "", text, flags=re.M)
        out[path] = text
    return out


if __name__ == "__main__":
    sys.exit(main())
