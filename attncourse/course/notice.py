"""The licence notice that every handed-out copy of the course carries.

The course's text and figures are licensed under CC BY-SA 4.0 and its code under MIT
(``LICENSE``, ``LICENSE-CONTENT``); both ask that a copy keep the title, the authors and
the licences. Student, instructor and nbgrader notebooks start with :func:`notice_cell`,
the class README ends with :data:`NOTICE`, and every slide deck's title slide shows it.
The notice names the licence files: :func:`write_licences` puts them beside what
``student-edition`` writes (the class folder, and each nbgrader assignment, whose release
then hands them out with the notebook).
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
    """Copy the course's :data:`LICENCE_FILES` from ``root`` into ``folder``; the files written.

    Raises
    ------
    ValueError
        If ``root`` lacks one of them (an installed package without its checkout): a copy
        must not name a licence file it does not carry.
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
