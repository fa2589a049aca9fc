"""Rubrics of the written exercises (full 1, partial 0.5, none 0), for the instructor
edition only: ``instructor/rubrics.md`` and a cell after each written solution.
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
