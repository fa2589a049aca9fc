"""Hidden cases drawn at grading time: what a check's ``*_cases(seed)`` adds.

The grade of record gives every ``*_cases`` function that takes a ``seed`` the grading's
seed (:func:`attncourse.course.record.seeded`). An answer that memorised the cases a
learner can see (a table from inputs to the expected outputs, here built from the cases
themselves) passes the check in the notebook, and fails once graded. The reference answers
passing the drawn cases is ``tests/course/test_grade_of_record.py``'s job (every solution, a fresh
seed each run).
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import attncourse.chapters as chapters
from attncourse.course.answers import coding_exercises

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
#: The checks of the chapters' coding exercises.
CHECKS = sorted({ex.check for path in CHAPTERS for ex in coding_exercises(path)})
#: Checks whose one case is the learner's own training (chapter 7b, 300 steps): a table
#: cannot answer it, and drawing more cases would train again.
NOT_DRAWN = {"check_training"}
#: Checks that drew cases at grading time before every check did (now every
#: check but :data:`NOT_DRAWN`, 40 of 41).
DRAWN_BEFORE = 15
#: Checks a table cannot pass even on the visible cases: a Triton kernel is required, or
#: the loss's gradient is checked too.
TABLE_REFUSED = {"check_causal_early_exit", "check_reinforce_loss", "check_sink_window"}


def _cases_functions(check: Any) -> dict[str, Any]:
    """The ``*_cases`` functions of ``check``'s module that its source calls."""
    space, source = check.__globals__, inspect.getsource(check)
    return {name: value for name, value in space.items()
            if name.endswith("_cases") and name != "run_cases" and callable(value) and f"{name}(" in source}


def _seeded(check: Any) -> bool:
    return any("seed" in inspect.signature(fn).parameters for fn in _cases_functions(check).values())


def _key(value: Any) -> Any:
    """A hashable fingerprint of an argument: arrays and tensors by shape and bytes."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return ("array", value.shape, str(value.dtype), value.tobytes())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    return ("value", repr(value))


def memoriser(cases: list) -> Any:
    """An "answer" that looks its inputs up among ``cases`` and returns their expected output."""
    table = {_key([*case.args.values(), case.kwargs]): case.expected for case in cases}

    def answer(*args, **kwargs):
        found = table.get(_key([*args, kwargs]))
        if found is None:
            return np.zeros(1)  # a case it never saw: it knows nothing
        return tuple(map(torch.as_tensor, found)) if isinstance(found, tuple) else torch.as_tensor(np.asarray(found))
    return answer


def test_the_count_of_checks_with_cases_drawn_at_grading_time():
    seeded = [name for name in CHECKS if _seeded(chapters.check(name))]
    missing = sorted(set(CHECKS) - set(seeded) - NOT_DRAWN)
    print(f"\n{len(seeded)} of {len(CHECKS)} checks draw hidden cases when graded (before: {DRAWN_BEFORE}); "
          f"without: {missing}")
    assert len(seeded) > DRAWN_BEFORE and not missing, missing


@pytest.mark.parametrize("name", [n for n in CHECKS if n not in NOT_DRAWN])
def test_a_memorised_answer_fails_the_cases_drawn_at_grading_time(name, monkeypatch):
    check = chapters.check(name)
    if not _seeded(check):
        pytest.skip(f"{name} draws no cases at grading time yet")
    visible = [case for fn in _cases_functions(check).values() for case in fn()]
    answer = memoriser(visible)
    if name not in TABLE_REFUSED:  # what the notebook's check cannot tell from doing the exercise
        assert check(answer).passed, f"{name}: the table does not even pass the visible cases"
    for cases_name, fn in _cases_functions(check).items():
        if "seed" in inspect.signature(fn).parameters:
            monkeypatch.setitem(check.__globals__, cases_name, functools.partial(fn, seed=12345))
    drawn = [case for fn in _cases_functions(check).values() for case in fn()]
    assert len(drawn) > len(visible) or any(
        _key(list(a.args.values())) != _key(list(b.args.values())) for a, b in zip(drawn, visible, strict=True)), \
        "the seed changed no case"
    result = check(answer)
    assert not result.passed, f"{name}: a table of the visible cases passed the drawn ones"
