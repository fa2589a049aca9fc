"""A short reveal.js slide deck per chapter, for the instructor edition, opened offline.

Made from the student edition by nbconvert's slides exporter: a title slide with the
learning goals, one slide per section (heading, first paragraph, display equations), one
listing the exercises; with the executed notebook (:func:`executed_notebooks`), each
section's first figure on a slide of its own (:data:`MAX_FIGURES` at most). reveal.js and
MathJax are copied beside the decks, in ``instructor/slides/``.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from attncourse.course.notice import NOTICE_TEXT

#: nbconvert's reveal.js template with nothing from a CDN: no jQuery, require.js or mermaid,
#: reveal.js loaded by plain script tags, MathJax 3 (the offline copy) instead of MathJax 2.
_TEMPLATE = """{%- extends 'reveal/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block footer_js -%}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({controls: true, progress: true, history: true, slideNumber: true,
                   transition: "slide", plugins: [RevealNotes]});
</script>
{%- endblock footer_js -%}
{%- block html_head_js_mathjax -%}
<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], processEscapes: true}};</script>
<script src="{{ resources.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
"""


#: Display equations ``$$ ... $$`` of a section shown on its slide, at most.
MAX_EQUATIONS = 2
_DISPLAY_MATH = re.compile(r"\$\$.+?\$\$", re.S)
#: An inline formula that defines something (it holds "="), shown displayed on the slide of
#: a section whose chapter writes its equations inline.
_A_NUMBER = re.compile(r"[^=]+=\s*[\d.,{}~\\ ]+")  # "d_model = 512" is a size, not an equation
_INLINE_EQUATION = re.compile(r"(?<![$\\])\$([^$\n]*[^$\n<>]=[^$\n]*)\$(?!\$)")


#: Figures a deck shows at most: the first of each section, in order.
MAX_FIGURES = 8
#: Where a book build leaves the executed chapters, relative to the repository's root: the
#: jupyter-cache of ``make book``, then of ``make test``'s fresh build (the ``.ipynb`` files
#: beside them in ``jupyter_execute/`` hold no outputs).
EXECUTED = ("_build/.jupyter_cache", "_build/test-book/_build/.jupyter_cache")
_IMAGES = ("image/png", "image/jpeg", "image/svg+xml")


def _key(heading: str) -> str:
    """A heading compared across editions: letters and digits only (MyST roles differ)."""
    return re.sub(r"[^a-z0-9]", "", heading.lower())


def figures(executed: NotebookNode) -> dict[str, list[tuple[str, str]]]:
    """The figures of an executed chapter by section: ``{heading key: [(mime type, data)]}``."""
    found: dict[str, list[tuple[str, str]]] = {}
    section = ""
    for cell in executed.cells:
        if cell.cell_type == "markdown":
            for heading in re.findall(r"^## (.+)$", cell.source, re.M):
                section = _key(heading)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                mime = next((m for m in _IMAGES if m in data), None)
                if mime is not None:
                    value = data[mime]
                    found.setdefault(section, []).append((mime, "".join(value) if isinstance(value, list) else value))
    return found


def _figure_cell(heading: str, mime: str, data: str) -> NotebookNode:
    """A slide holding one figure, embedded as a data URI (the deck stays one offline file)."""
    import base64
    import html

    if mime == "image/svg+xml":
        data = base64.b64encode(data.encode("utf-8")).decode("ascii")
    alt = html.escape(" ".join(re.sub(r"\$[^$]*\$", "", heading).split()), quote=True)
    return nbformat.v4.new_markdown_cell(
        f"## {heading}\n\n<img src=\"data:{mime};base64,{data.strip()}\" alt=\"{alt}: a figure of the "
        f"chapter\" style=\"max-height: 520px; max-width: 100%\">")


def with_outputs(chapter: NotebookNode, ran: NotebookNode) -> NotebookNode | None:
    """``chapter`` with the outputs of ``ran``, a cache record's code cells; None if they differ.

    jupyter-cache keeps only the code cells of what it executed; a chapter edited since
    then (other code) gets no outputs rather than another version's.
    """
    code = [c for c in chapter.cells if c.cell_type == "code"]
    executed = [c for c in ran.cells if c.cell_type == "code"]
    if [c.source for c in code] != [c.source for c in executed]:
        return None
    out = copy.deepcopy(chapter)
    for cell, done in zip((c for c in out.cells if c.cell_type == "code"), executed):
        cell.outputs = done.get("outputs", [])
    return out


def _cached(cache: Path, chapters: dict[str, NotebookNode]) -> dict[str, NotebookNode]:
    """The chapters with the outputs of their latest execution in a jupyter-cache folder."""
    from jupyter_cache import get_cache

    records = get_cache(str(cache))
    latest: dict[str, tuple] = {}
    for record in records.list_cache_records():
        name = Path(record.uri).stem
        if name in chapters and (name not in latest or record.created > latest[name][0]):
            latest[name] = (record.created, record.pk)
    found = {name: with_outputs(chapters[name], records.get_cache_bundle(pk).nb)
             for name, (_, pk) in latest.items()}
    return {name: nb for name, nb in found.items() if nb is not None}


def executed_notebooks(root: Path, chapters: dict[str, NotebookNode], here: bool = False) -> dict[str, NotebookNode]:
    """The executed chapters a book build left under ``root`` (:data:`EXECUTED`), by name, their
    outputs put into ``chapters`` (name -> chapter as read); with ``here``, ``root`` itself is
    a jupyter-cache folder or a folder of executed ``<chapter>.ipynb``.
    """
    found: dict[str, NotebookNode] = {}
    for folder in ([root] if here else [root / place for place in EXECUTED]):
        missing = {name: nb for name, nb in chapters.items() if name not in found}
        if (folder / "global.db").is_file():
            found |= _cached(folder, missing)
        elif here:
            found |= {name: nbformat.read(folder / f"{name}.ipynb", as_version=4) for name in missing
                      if (folder / f"{name}.ipynb").is_file()}
    return found


def _paragraph(text: str) -> str:
    """The first paragraph of a markdown text (up to its first blank line)."""
    return text.strip().split("\n\n")[0]


def _no_dangling(paragraph: str) -> str:
    """``paragraph`` without a last sentence that ends on ":" (it announces code or a list
    the slide does not show); that sentence alone ends on "." instead."""
    if not paragraph.rstrip().endswith(":"):
        return paragraph
    text = paragraph.rstrip()[:-1]
    cut = max(text.rfind(". "), text.rfind(".\n"))
    return text[:cut + 1] if cut > 0 else text + "."


def _goals(text: str) -> str:
    """The learning goals of a chapter's opening cell: from "**Learning goals**" to the
    blank line after its list (the title, the introduction and the prerequisites stay out:
    they repeated the title and overflowed the slide)."""
    text = text.replace("> ", "").replace(">\n", "\n")
    start = text.index("**Learning goals**")
    end = text.find("\n\n**", start + 1)
    return text[start:end if end > 0 else None].strip()


def deck(student: NotebookNode, executed: NotebookNode | None = None) -> NotebookNode:
    """The slides of a chapter from its (plain Markdown) student edition.

    With ``executed``, the chapter's executed notebook, each section's first figure
    follows the section's slide, :data:`MAX_FIGURES` at most.
    """
    cells = [c for c in student.cells if c.cell_type == "markdown"]
    shown_figures = figures(executed) if executed is not None else {}
    pending: NotebookNode | None = None  # the figure slide of the section being read
    n_figures = 0
    slides: list[NotebookNode] = []
    exercises: list[str] = []
    title = next((c for c in cells if c.source.startswith("# ")), None)
    if title is not None:
        goals = next((c for c in cells if "**Learning goals**" in c.source), None)
        body = [title.source.strip().split("\n")[0]]
        if goals is not None:
            body.append(_goals(goals.source))
        body.append(f"<small>{NOTICE_TEXT}</small>")  # the licence notice a copy must carry
        slides.append(nbformat.v4.new_markdown_cell("\n\n".join(body)))
    section: NotebookNode | None = None  # the slide of the section being read
    shown = 0  # its display equations so far
    for index, cell in enumerate(cells):
        exercises += re.findall(r"^### Exercise \d+: (.+?)(?: \([a-z0-9-]+\))?$", cell.source, re.M)
        # A cell may hold several sections: each "## " heading starts one.
        for piece in re.split(r"(?m)^(?=## )", cell.source):
            heading = re.match(r"^## (.+)$", piece, re.M)
            if heading is not None:
                if pending is not None:
                    slides.append(pending)
                section, shown, pending = None, 0, None
                if heading.group(1) in ("Exercises", "References", "Works cited"):
                    continue
                rest = piece[heading.end():].strip()
                if not rest and index + 1 < len(cells):
                    rest = cells[index + 1].source
                section = nbformat.v4.new_markdown_cell(
                    f"## {heading.group(1)}\n\n{_no_dangling(_paragraph(rest))}")
                slides.append(section)
                own = shown_figures.get(_key(heading.group(1)))
                if own and n_figures < MAX_FIGURES:
                    pending = _figure_cell(heading.group(1), *own[0])
                    n_figures += 1
            # The section's key equations: its display maths, then its inline formulas that
            # define something, at most MAX_EQUATIONS a slide.
            inline = [f"$${formula.strip()}$$" for formula in _INLINE_EQUATION.findall(_DISPLAY_MATH.sub("", piece))
                      if len(formula) >= 12 and not _A_NUMBER.fullmatch(formula)]
            for equation in _DISPLAY_MATH.findall(piece) + inline:
                if section is not None and shown < MAX_EQUATIONS and equation not in section.source:
                    section.source += f"\n\n{equation}"
                    shown += 1
    if pending is not None:
        slides.append(pending)
    if exercises:
        slides.append(nbformat.v4.new_markdown_cell(
            "## Exercises\n\n" + "\n".join(f"{i}. {name}" for i, name in enumerate(exercises, 1))))
    for cell in slides:
        cell.metadata["slideshow"] = {"slide_type": "slide"}
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(student.metadata)
    out.cells = slides
    return out


def _assets() -> tuple[Path, Path]:
    """The reveal.js folder (``dist/``, ``plugin/``) and MathJax's ``tex-chtml.js``."""
    import sphinx_revealjs

    reveal = Path(sphinx_revealjs.__file__).parent / "_static" / "revealjs"
    import sysconfig

    mathjax = Path(sysconfig.get_paths()["purelib"]) / "sphinx-mathjax-offline" / "static" / "mathjax"
    if not (reveal / "dist" / "reveal.js").exists() or not (mathjax / "tex-chtml.js").exists():
        raise OSError("reveal.js or MathJax not found: install requirements.txt "
                      "(sphinx-revealjs, sphinx-mathjax-offline)")
    return reveal, mathjax


def write_decks(students: dict[str, NotebookNode], folder: Path,
                executed: dict[str, NotebookNode] | None = None) -> list[Path]:
    """Write ``folder/<chapter>.slides.html`` for each student edition, with the assets beside.

    ``executed`` maps a chapter to its executed notebook, whose figures its deck shows.
    """
    executed = executed or {}
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter

    reveal, mathjax = _assets()
    folder.mkdir(parents=True, exist_ok=True)
    # reveal.js, and of MathJax only the component the decks load and its fonts (3 MB of 29).
    for source, target in ((reveal / "dist", folder / "reveal.js" / "dist"),
                           (reveal / "plugin", folder / "reveal.js" / "plugin"),
                           (mathjax / "output", folder / "mathjax" / "output")):
        shutil.copytree(source, target, dirs_exist_ok=True)
    shutil.copy2(mathjax / "tex-chtml.js", folder / "mathjax" / "tex-chtml.js")
    exporter = SlidesExporter(extra_loaders=[DictLoader({"attncourse_slides.j2": _TEMPLATE})],
                              template_file="attncourse_slides.j2", reveal_url_prefix="reveal.js",
                              mathjax_url="mathjax/tex-chtml.js", exclude_input_prompt=True)
    written = []
    for name, student in students.items():
        page, _ = exporter.from_notebook_node(deck(student, executed.get(name)))
        path = folder / f"{name}.slides.html"
        path.write_text(page, encoding="utf-8")
        written.append(path)
    return written


__all__ = ["EXECUTED", "MAX_FIGURES", "deck", "executed_notebooks", "figures", "write_decks"]
