"""Assertions shared by the tests of the exercise checks (``test_checks*.py``)."""

import types

from attncourse.checks import CheckResult


def assert_failed(result: CheckResult, case_number: int, *hint_parts: str) -> None:
    """``result`` is a failure at hidden case ``case_number`` whose hint contains every ``hint_parts``."""
    assert isinstance(result, CheckResult)
    assert not result.passed and not result
    assert result.cases_passed == case_number - 1, result.message
    assert result.message.startswith(f"case {case_number} of {result.cases_total} (")
    for part in hint_parts:
        assert part in result.hint, f"{part!r} not in hint {result.hint!r}"


def own_copy(fn):
    """A new function running ``fn``'s code: a learner's own implementation, for the tests.

    The checks refuse the package's references (``attncourse.checks.guard``); a learner's
    function built on the same maths, as the tests write their buggy versions, is a
    different object and is not refused. Passed to a check itself, it still is (same code).
    """
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy
