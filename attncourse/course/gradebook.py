"""The grade of record into nbgrader's gradebook: after ``nbgrader autograde``, each graded
check's points become its test cell's manual score, which nbgrader prefers everywhere.
"""

from __future__ import annotations

from pathlib import Path


class GradebookError(ValueError):
    """A grade the gradebook does not hold (one line)."""


def record_into_gradebook(records: list[dict], database: Path) -> int:
    """Set every record's points as its check's manual score; how many were set.

    Raises
    ------
    GradebookError
        If ``database`` is not a file or holds no grade for a record (not autograded yet).
    """
    from nbgrader.api import Gradebook, MissingEntry

    from attncourse.course.grading import scripts_on_path

    if not database.is_file():
        raise GradebookError(f"--gradebook {str(database)!r} is not a file (nbgrader's gradebook.db)")
    done = 0
    with scripts_on_path(), Gradebook(f"sqlite:///{database.resolve()}") as gb:
        for record in records:
            chapter, student = record["chapter"], record["student"]
            for ex in record["exercises"]:
                try:
                    grade = gb.find_grade(f"{ex['label']}-check", chapter, chapter, student)
                except MissingEntry:
                    raise GradebookError(f"the gradebook has no grade {ex['label']}-check of {student!r} "
                                         f"for {chapter}: run nbgrader autograde first") from None
                grade.manual_score = ex["points"]
                done += 1
        gb.db.commit()
    return done


__all__ = ["GradebookError", "record_into_gradebook"]
