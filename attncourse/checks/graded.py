"""A check's result in an nbgrader test cell: displayed (a returned value would be read as a
partial score), raising only under nbgrader, so that a student's *Run All* goes on."""

from __future__ import annotations

import os

from attncourse.checks.core import CheckResult

#: Values of ``NBGRADER_EXECUTION`` under which a failed check raises.
GRADING = ("autograde", "validate")


def graded(result: CheckResult) -> None:
    """Display ``result``.

    Raises
    ------
    AssertionError
        If it did not pass and ``NBGRADER_EXECUTION`` is ``"autograde"`` or ``"validate"``.
    TypeError
        If ``result`` is not a :class:`CheckResult`.
    """
    if not isinstance(result, CheckResult):
        raise TypeError(f"graded() takes the result of a check_* function, not {type(result).__name__}")
    try:
        from IPython.display import display
    except ImportError:  # outside IPython
        display = print
    display(result)
    if not result.passed and os.environ.get("NBGRADER_EXECUTION") in GRADING:
        raise AssertionError(str(result))


__all__ = ["GRADING", "graded"]
