"""The licence notice every handed-out copy carries: text and figures CC BY-SA 4.0, code MIT.

:func:`notice_cell` starts every notebook, :data:`NOTICE` ends the class README and every
deck's title slide shows it; :func:`write_licences` puts the licence files beside them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

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


#: The licence files the notice names, in the course's checkout (code: MIT; text: CC BY-SA).
LICENCE_FILES = ("LICENSE", "LICENSE-CONTENT")
COURSE_ROOT = Path(__file__).resolve().parents[2]


def write_licences(folder: Path, root: Path = COURSE_ROOT) -> list[Path]:
    """Copy :data:`LICENCE_FILES` from ``root`` into ``folder``; the files written.

    Raises
    ------
    ValueError
        If ``root`` lacks one (a copy must not name a licence it does not carry).
    """
    missing = [name for name in LICENCE_FILES if not (root / name).is_file()]
    if missing:
        raise ValueError(f"the course's {' and '.join(missing)} is missing from {str(root)!r}: the "
                         "editions name it; run student-edition from a checkout of the course")
    folder.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(root / name, folder / name)) for name in LICENCE_FILES]


def notice_cell() -> NotebookNode:
    """A markdown cell holding :data:`NOTICE`, marked ``{"attncourse": {"notice": true}}``."""
    cell = nbformat.v4.new_markdown_cell(NOTICE)
    cell.metadata["attncourse"] = {"notice": True}
    return cell


__all__ = ["AUTHORS", "CC_BY_SA", "LICENCE_FILES", "MIT", "NOTICE", "NOTICE_TEXT", "TITLE", "notice_cell",
           "write_licences"]
