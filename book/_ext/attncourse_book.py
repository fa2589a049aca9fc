"""Sphinx extension of the course's book: pages that work without a kernel or a network.

Four jobs, all for the reader of the static HTML book, and one for the graders:

- Jupyter Book executes the chapters in kernels started by this Sphinx process,
  and a kernel inherits its environment. Setting ``ATTNCOURSE_STATIC_EXPLORERS=1``
  here makes every explorer of :mod:`attncourse.widgets` add its static HTML
  rendering (pre-computed states, plain controls, inline script) to its display,
  next to the widget view that JupyterLab shows; ``_config.yml`` tells myst-nb to
  prefer ``text/html`` and to load no widget scripts from the network. A learner's
  JupyterLab never sets the variable, so explorers there cost no pre-rendering.
- Each chapter page offers its executed notebook (``.ipynb``) for download beside
  the MyST source. sphinx-book-theme does so only when an online launch service
  (Binder, JupyterHub, Colab, Thebe) is configured, which an offline book has no
  use for; so the notebook is copied next to the page's sources here and the
  theme's download menu lists it.
- Figures a notebook draws get a text alternative: myst-nb gives an output image
  its file name as ``alt``. A figure with a caption gets its caption; an image
  without one is described by the section it appears in.
- Nothing on a page is broken or needs a server: Thebe (a launcher that runs the
  code on a public Binder) is configured off, but sphinx-thebe still adds its
  settings script to every page, twice, which is a JavaScript error; both of its
  scripts are dropped, and so is the saved widget state, which only the widget
  scripts the book does not load would read. And the bibliography's entries get the ARIA role
  ``listitem`` that their ``role="list"`` container requires (docutils writes
  ``doc-biblioentry``, which ARIA 1.2 deprecated and axe-core rejects).
  ``static/attncourse.css`` gives links on tinted admonition backgrounds a blue
  with enough contrast (WCAG AA), and makes a code cell 88 characters wide at 1280 px
  (longer lines wrap rather than scroll sideways).
- An ``{exercise}`` may carry a ``:timeout:`` (seconds) for the graders
  (:data:`EXERCISE_OPTIONS`); sphinx-exercise is taught the option so the book accepts it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

#: The variable :mod:`attncourse.runtime` reads (``BOOK_ENV`` there); written
#: out here so that the book's configuration does not import the course's package.
BOOK_ENV = "ATTNCOURSE_STATIC_EXPLORERS"


def offer_notebook(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Copy a chapter's executed notebook into ``_sources`` and name it in the page's context."""
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not str(context.get("sourcename", "")).endswith(".md") or not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def drop_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Remove the scripts a static page has no use for: sphinx-thebe's, and the widget state.

    No Thebe launcher is configured. The widget state (myst-nb embeds the saved
    state of every ipywidget the notebook made: the explorers; progress bars are
    text in a book build, :class:`attncourse.runtime.BookBar`) is
    read only by the ipywidgets HTML manager, which the book does not load;
    the explorers show their static rendering instead.
    """
    def unused(script: Any) -> bool:
        attributes = getattr(script, "attributes", {}) or {}
        body = attributes.get("body", "") or ""
        return ("sphinx-thebe" in str(getattr(script, "filename", script)) or "THEBE_JS_URL" in body
                or attributes.get("type") == "application/vnd.jupyter.widget-state+json")

    if "script_files" in context:
        context["script_files"] = [script for script in context["script_files"] if not unused(script)]


def visit_citation(self: Any, node: Any) -> None:
    """docutils' bibliography entry, with the role ``listitem`` in place of ``doc-biblioentry``."""
    from sphinx.writers.html5 import HTML5Translator

    HTML5Translator.visit_citation(self, node)
    self.body[-1] = self.body[-1].replace('role="doc-biblioentry"', 'role="listitem"')


def depart_citation(self: Any, node: Any) -> None:
    from sphinx.writers.html5 import HTML5Translator

    HTML5Translator.depart_citation(self, node)


def describe_images(app: Any, doctree: Any, docname: str) -> None:
    """Replace the file-name ``alt`` of notebook output images by their caption or section."""
    from docutils import nodes

    for image in doctree.findall(nodes.image):
        alt, uri = image.get("alt", ""), image.get("uri", "")
        if alt and Path(alt).name != Path(uri).name:
            continue  # a real description, written by an author
        parent = image.parent
        while parent is not None and not isinstance(parent, (nodes.figure, nodes.section)):
            parent = parent.parent
        caption = next(iter(parent.findall(nodes.caption)), None) if isinstance(parent, nodes.figure) else None
        if caption is not None:
            image["alt"] = " ".join(caption.astext().split())
            continue
        section = image.parent
        while section is not None and not isinstance(section, nodes.section):
            section = section.parent
        title = section[0].astext() if section is not None and isinstance(section[0], nodes.title) else docname
        image["alt"] = f"Figure drawn by the code above, in the section '{title}'"


def add_static(app: Any) -> None:
    """Serve ``static/`` beside the theme's files, so that ``attncourse.css`` reaches every page."""
    app.config.html_static_path.append(str(Path(__file__).parent / "static"))


#: The per-cell time limit of a test build, in seconds (`make test`); `make book` has none.
CELL_TIMEOUT_ENV = "ATTNCOURSE_CELL_TIMEOUT"


def cell_timeout(default: int) -> int:
    """The per-cell limit: ``ATTNCOURSE_CELL_TIMEOUT`` if set (seconds), else ``default`` (-1: none)."""
    value = os.environ.get(CELL_TIMEOUT_ENV, "").strip()
    return int(value) if value else default


def apply_cell_timeout(app: Any, config: Any) -> None:
    """myst-nb's execution timeout from the environment, for the notebooks the build runs itself."""
    config.nb_execution_timeout = cell_timeout(config.nb_execution_timeout)


#: Options the course adds to sphinx-exercise's ``{exercise}``: ``:timeout:`` (seconds) is
#: the time limit of an exercise whose check runs the learner's own training, read by the
#: nbgrader source and the grade of record (``attncourse.course.exercises``). It is a
#: directive option, next to the ``:label:`` the graders key on, rather than a MyST comment
#: or cell metadata: one place states it, and the book validates it (a positive integer).
#: sphinx-exercise 1.2 rejects options it does not know (a MyST ``directive_option``
#: warning, an error under ``-W``), so the option is registered here; the page shows nothing
#: of it.
EXERCISE_OPTIONS = {"timeout": "positive_int"}


def register_exercise_options() -> None:
    """Add :data:`EXERCISE_OPTIONS` to sphinx-exercise's ``exercise`` and ``exercise-start``."""
    from docutils.parsers.rst import directives
    from sphinx_exercise.directive import ExerciseDirective, ExerciseStartDirective

    for directive in (ExerciseDirective, ExerciseStartDirective):
        directive.option_spec = {**directive.option_spec,
                                 **{name: getattr(directives, kind) for name, kind in EXERCISE_OPTIONS.items()}}


def setup(app: Any) -> dict[str, Any]:
    os.environ[BOOK_ENV] = "1"
    register_exercise_options()
    app.connect("config-inited", apply_cell_timeout)
    app.connect("builder-inited", add_static)
    app.add_css_file("attncourse.css")
    app.connect("doctree-resolved", describe_images)
    app.connect("html-page-context", drop_scripts, priority=900)
    from docutils import nodes

    app.add_node(nodes.citation, override=True, html=(visit_citation, depart_citation))
    # Before sphinx-book-theme builds its download menu (priority 501).
    app.connect("html-page-context", offer_notebook, priority=500)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
