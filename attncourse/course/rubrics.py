"""Rubrics for the written exercises: what a full, a partial and a no-credit answer says.

For the instructor edition only (``instructor/rubrics.md`` and a *Rubric* cell after each
written solution in ``instructor/<chapter>.ipynb``); never in the book or the student
editions. Each written exercise is worth :data:`attncourse.course.nbgrader_source.WRITTEN_POINTS`
point: full credit 1, partial credit 0.5, no credit 0. A unit test checks that every
written exercise of every chapter has a rubric, and that no rubric is left over.
"""

from __future__ import annotations

import attncourse.chapters as chapters
from attncourse.chapters.rubric import Rubric


def _chapters_rubrics() -> dict[str, Rubric]:
    """Every chapter folder's ``RUBRICS``, in the book's order; a label twice is an error."""
    found: dict[str, Rubric] = {}
    for module in chapters.modules("rubrics"):
        twice = found.keys() & module.RUBRICS.keys()
        if twice:
            raise ValueError(f"rubrics given by two chapters: {', '.join(sorted(twice))}")
        found |= module.RUBRICS
    return found


RUBRICS: dict[str, Rubric] = _chapters_rubrics()


def rubrics_markdown(exercises: list, titles: dict[str, str] | None = None) -> str:
    """``rubrics.md`` of the instructor edition: one section per written exercise given."""
    lines = ["# Rubrics for the written exercises", "",
             "For instructors only. Each written exercise is worth 1 point: full credit 1, "
             "partial credit 0.5, no credit 0. Read the reference answer in the instructor "
             "edition beside each rubric.", ""]
    chapter = None
    for ex in exercises:
        if ex.kind != "written" or ex.label not in RUBRICS:
            continue
        if ex.chapter != chapter:
            chapter = ex.chapter
            lines += [f"## {chapter}", ""]
        lines += [f"### {ex.title} ({ex.label})", "", RUBRICS[ex.label].markdown(), ""]
    return "\n".join(lines)


__all__ = ["RUBRICS", "Rubric", "rubrics_markdown"]
