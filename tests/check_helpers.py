"""Assertions shared by the tests of the exercise checks (``test_checks*.py``)."""

import types

import pytest

from attncourse.checks import CheckResult
from attncourse.checks.guard import HandOffs


def assert_failed(result: CheckResult, case_number: int, *hint_parts: str) -> None:
    """``result`` is a failure at hidden case ``case_number`` whose hint contains every ``hint_parts``."""
    assert isinstance(result, CheckResult)
    assert not result.passed and not result
    assert result.cases_passed == case_number - 1, result.message
    assert result.message.startswith(f"case {case_number} of {result.cases_total} (")
    for part in hint_parts:
        assert part in result.hint, f"{part!r} not in hint {result.hint!r}"


def assert_raised(result: CheckResult, error: str, where: str) -> str:
    """``result`` says in three lines, no traceback, that the function raised ``error`` in ``where``.

    ``where`` is the function's name, and the line it raised at as the message quotes it
    (`` name: `code` ``). Returns the last line (the exception's).
    """
    lines = result.message.splitlines()
    assert len(lines) == 3 and f"raised {error}" in lines[-1], result.message
    assert f"in {where}" in lines[-1], lines[-1]
    assert "Traceback" not in result.message
    return lines[-1]


def own_copy(fn):
    """A new function running ``fn``'s code: a learner's own implementation, for the tests.

    The checks refuse the package's references (``attncourse.checks.guard``); a learner's
    function built on the same maths, as the tests write their buggy versions, is a
    different object and is not refused. Passed to a check itself, it still is (same code).
    """
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


@pytest.fixture
def lenient_hand_offs(monkeypatch):
    """The checks' hand-off rules switched off (but a kernel exercise's "a kernel ran").

    The diagnostics tests build right and buggy answers from torch, SciPy and the
    package's helpers to reach a given hint; whether such answers are refused as
    hand-offs is the business of ``tests/checks/test_hand_offs.py``.
    """
    from attncourse.checks import hand_offs

    for name, rules in list(hand_offs.HAND_OFFS.items()):
        monkeypatch.setitem(hand_offs.HAND_OFFS, name, HandOffs(
            rules.uses, package=False, namespace=False, must_call=rules.must_call,
            must_call_message=rules.must_call_message))
