"""The licence notice that every handed-out copy of the course carries.

The course's text and figures are licensed under CC BY-SA 4.0 and its code under MIT
(``LICENSE``, ``LICENSE-CONTENT``); both ask that a copy keep the title, the authors and
the licences. Student, instructor and nbgrader notebooks start with :func:`notice_cell`,
the class README ends with :data:`NOTICE`, and every slide deck's title slide shows it.
"""

from __future__ import annotations

import nbformat
from nbformat import NotebookNode

#: The course's title and authors, as the book's ``_config.yml`` gives them (a test keeps
#: them equal).
TITLE = "attncourse: attention, step by step"
AUTHORS = "the attncourse developers"
CC_BY_SA = "https://creativecommons.org/licenses/by-sa/4.0/"
MIT = "https://opensource.org/license/mit"
NOTICE = (f"*{TITLE}*, by {AUTHORS}. The text and figures are licensed under "
          f"[CC BY-SA 4.0]({CC_BY_SA}) (Creative Commons Attribution-ShareAlike 4.0 "
          f"International), the code under the [MIT licence]({MIT}); see the course's "
          "`LICENSE` and `LICENSE-CONTENT`. Copies and adaptations keep this notice, and "
          "share the text under the same licence.")

#: :data:`NOTICE` with its addresses as text, not links: the decks open offline, and a test
#: finds no ``href`` to the network in them.
NOTICE_TEXT = (NOTICE.replace(f"[CC BY-SA 4.0]({CC_BY_SA})", f"CC BY-SA 4.0 (`{CC_BY_SA}`)")
               .replace(f"[MIT licence]({MIT})", f"MIT licence (`{MIT}`)"))


def notice_cell() -> NotebookNode:
    """A markdown cell holding :data:`NOTICE`, marked ``{"attncourse": {"notice": true}}``."""
    cell = nbformat.v4.new_markdown_cell(NOTICE)
    cell.metadata["attncourse"] = {"notice": True}
    return cell


__all__ = ["AUTHORS", "CC_BY_SA", "MIT", "NOTICE", "NOTICE_TEXT", "TITLE", "notice_cell"]
