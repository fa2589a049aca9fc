"""A check's result in an nbgrader test cell: shown to the student, failing only under grading.

nbgrader scores a test cell 0 when it raises, and full marks otherwise. A plain ``assert
result.passed`` would also stop a student's *Run All* at the first exercise not yet
answered, so :func:`graded` raises only where nbgrader executes the notebook (its
autograder and validator set ``NBGRADER_EXECUTION``); elsewhere it shows the result box
and the notebook carries on. The box is *displayed*, not returned: nbgrader reads a test
cell's returned value as a partial score and warns when it is not a number.
"""

from __future__ import annotations

import os

from attncourse.checks.core import CheckResult

#: Values of ``NBGRADER_EXECUTION`` under which a failed check raises.
GRADING = ("autograde", "validate")


def graded(result: CheckResult) -> None:
    """Display ``result``; when nbgrader grades or validates, raise unless it passed.

    Raises
    ------
    AssertionError
        With the result's report, if ``result`` did not pass and ``NBGRADER_EXECUTION``
        is ``"autograde"`` or ``"validate"``.
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
