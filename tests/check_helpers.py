"""Assertions shared by the tests of the exercise checks (``test_checks*.py``)."""

from attncourse.checks import CheckResult


def assert_failed(result: CheckResult, case_number: int, *hint_parts: str) -> None:
    """``result`` is a failure at hidden case ``case_number`` whose hint contains every ``hint_parts``."""
    assert isinstance(result, CheckResult)
    assert not result.passed and not result
    assert result.cases_passed == case_number - 1, result.message
    assert result.message.startswith(f"case {case_number} of {result.cases_total} (")
    for part in hint_parts:
        assert part in result.hint, f"{part!r} not in hint {result.hint!r}"
