"""Sphinx extension of the course's book: explorers render for a page without a kernel.

Jupyter Book executes the chapters in kernels started by this Sphinx process,
and a kernel inherits its environment. Setting ``ATTNCOURSE_STATIC_EXPLORERS=1``
here makes every explorer of :mod:`attncourse.widgets` add its static HTML
rendering (pre-computed states, plain controls, inline script) to its display,
next to the widget view that JupyterLab shows. ``_config.yml`` then tells
myst-nb to prefer ``text/html`` over the widget view and to load no widget
scripts from the network. A learner's JupyterLab never sets the variable, so
explorers there cost no pre-rendering.
"""

from __future__ import annotations

import os
from typing import Any

#: The variable :mod:`attncourse.widgets.static` reads (``BOOK_ENV`` there); written
#: out here so that the book's configuration does not import the course's package.
BOOK_ENV = "ATTNCOURSE_STATIC_EXPLORERS"


def setup(app: Any) -> dict[str, Any]:
    os.environ[BOOK_ENV] = "1"
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
