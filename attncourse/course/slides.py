"""A short slide deck per chapter, for the instructor edition: reveal.js, offline.

Made from the chapter's student edition (plain Markdown, no solutions) by nbconvert's
slides exporter: one slide for the title and the learning goals, one per section (its
heading, first paragraph and display equations), and one listing the exercises. Code cells are left out: the
notebook is where the code runs. The decks open from ``file://`` with no network:
reveal.js comes from the ``sphinx-revealjs`` wheel and MathJax from
``sphinx-mathjax-offline``, both copied beside the decks. Written by ``python -m attncourse
student-edition`` into ``instructor/slides/``; nothing built is committed.
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


def _paragraph(text: str) -> str:
    """The first paragraph of a markdown text (up to its first blank line)."""
    return text.strip().split("\n\n")[0]


def deck(student: NotebookNode) -> NotebookNode:
    """The slides of a chapter from its (plain Markdown) student edition."""
    cells = [c for c in student.cells if c.cell_type == "markdown"]
    slides: list[NotebookNode] = []
    exercises: list[str] = []
    title = next((c for c in cells if c.source.startswith("# ")), None)
    if title is not None:
        goals = next((c for c in cells if "**Learning goals**" in c.source), None)
        body = [_paragraph(title.source)]
        if goals is not None:
            body.append(goals.source.replace("> ", "").replace(">\n", "\n"))
        body.append(f"<small>{NOTICE_TEXT}</small>")  # the licence notice a copy must carry
        slides.append(nbformat.v4.new_markdown_cell("\n\n".join(body)))
    section: NotebookNode | None = None  # the slide of the section being read
    shown = 0  # its display equations so far
    for index, cell in enumerate(cells):
        heading = re.match(r"^## (.+)$", cell.source, re.M)
        found = re.findall(r"^### Exercise \d+: (.+?)(?: \([a-z0-9-]+\))?$", cell.source, re.M)
        exercises += found
        if heading is not None:
            section, shown = None, 0
            if heading.group(1) in ("Exercises", "References", "Works cited"):
                continue
            rest = cell.source[heading.end():].strip()
            if not rest and index + 1 < len(cells):
                rest = cells[index + 1].source
            section = nbformat.v4.new_markdown_cell(f"## {heading.group(1)}\n\n{_paragraph(rest)}")
            slides.append(section)
        # The section's key equations: its display maths, at most MAX_EQUATIONS a slide.
        for equation in _DISPLAY_MATH.findall(cell.source):
            if section is not None and shown < MAX_EQUATIONS and equation not in section.source:
                section.source += f"\n\n{equation}"
                shown += 1
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


def write_decks(students: dict[str, NotebookNode], folder: Path) -> list[Path]:
    """Write ``folder/<chapter>.slides.html`` for each student edition, with the assets beside."""
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
        page, _ = exporter.from_notebook_node(deck(student))
        path = folder / f"{name}.slides.html"
        path.write_text(page, encoding="utf-8")
        written.append(path)
    return written


__all__ = ["deck", "write_decks"]
