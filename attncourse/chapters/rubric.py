"""A rubric of a written exercise: what a full, a partial and a no-credit answer says.

Each chapter's ``rubrics.py`` holds its exercises' rubrics; :mod:`attncourse.course.rubrics`
collects them for the instructor edition.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rubric:
    """What answers at each level say."""

    full: str
    partial: str
    none: str

    def markdown(self, title: str = "") -> str:
        """The rubric as a Markdown list, under a bold title if given."""
        head = [f"**Rubric{': ' + title if title else ''}**", ""]
        return "\n".join(head + [f"- *Full credit (1)*: {self.full}", f"- *Partial credit (0.5)*: {self.partial}",
                                 f"- *No credit (0)*: {self.none}"])


__all__ = ["Rubric"]
