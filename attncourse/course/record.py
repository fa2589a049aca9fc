"""The grade of record: each answer runs in a process that holds nothing of the grade.

``python -m attncourse grade SUBMISSIONS...`` never runs a submission: each coding
exercise's answer is cut out (:mod:`attncourse.course.answers`) and run in a contained
process of its own (:mod:`attncourse.course.sandbox`), which gets inputs and sends back
outputs and the hand-offs it saw; here the exercise's check draws its cases with this
grading's seed, computes the expected values and decides. A process that dies, sends what
is not an answer or runs out of time scores 0 with the reason.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import attncourse.chapters as chapters
from attncourse.checks.core import reset_attempts
from attncourse.checks.guard import HAND_OFFS
from attncourse.course.answers import PRELOADABLE, Answer
from attncourse.course.nbgrader_source import CHECK_POINTS, EXERCISE_LIMIT
from attncourse.course.sandbox.process import AnswerEnded, AnswerProcess


@dataclass
class Outcome:
    """One exercise's grade of record.

    ``status``: ``"passed"``, ``"failed"`` (the check said no, or the answer's definitions
    raised), ``"refused"`` (the answer handed the exercise's work to a library or the
    course's package, named in ``message``), ``"missing"`` (no answer to run), ``"time
    limit"`` or ``"crashed"`` (the process ended, or sent something that is not an answer).
    """

    label: str
    check: str
    function: str
    status: str
    points: float
    max_points: float
    message: str
    seconds: float
    fresh_cases: bool = False
    #: The containment layers the answer's process ran under (:mod:`attncourse.course.sandbox.contain`).
    layers: list[str] = field(default_factory=list)
    #: The check's hint when it said no: the same for every student (no first-attempt nudge).
    hint: str = ""


@contextlib.contextmanager
def seeded(check: Any, seed: int) -> Iterator[bool]:
    """While inside, ``check`` draws its random cases with ``seed``: every ``*_cases`` function
    of its module that takes a ``seed`` gets it (put back on exit). Yields whether the check
    itself calls one of them: chapter 7b's training check shares a module with seeded checks,
    and its one case is not drawn."""
    space = getattr(check, "__globals__", {})
    called = set(getattr(getattr(check, "__code__", None), "co_names", ()))
    fresh, saved = False, {}
    for name, value in list(space.items()):
        if name.endswith("_cases") and callable(value):
            try:
                takes_seed = "seed" in inspect.signature(value).parameters
            except (TypeError, ValueError):
                continue
            if takes_seed:
                saved[name] = value
                space[name] = functools.partial(value, seed=seed)
                fresh |= name in called
    try:
        yield fresh
    finally:
        space.update(saved)


def _preload(answer: Answer) -> tuple[str, ...]:
    """The course's modules the answer imports that its exercise allows (its ``allow``
    entries' modules and Triton's names): imported in its process before the limits."""
    rules = HAND_OFFS.get(answer.exercise.check)
    allowed = {a.rsplit(".", 1)[0] for a in (rules.allow if rules else ())}
    allowed |= {a.rsplit(".", 2)[0] for a in (rules.allow if rules else ())}  # module.Class.method
    allowed |= set(PRELOADABLE)
    return tuple(m for m in answer.course_imports if m in allowed)


def grade_answer(answer: Answer, seed: int, limit: float = EXERCISE_LIMIT) -> Outcome:
    """The grade of record of one extracted answer (see the module's docstring)."""
    ex = answer.exercise
    start = time.perf_counter()
    layers: list[str] = []

    def outcome(status: str, message: str, fresh: bool = False, hint: str = "") -> Outcome:
        points = CHECK_POINTS if status == "passed" else 0
        return Outcome(ex.label, ex.check, ex.function, status, points, CHECK_POINTS,
                       " ".join(str(message).split())[:300], round(time.perf_counter() - start, 2),
                       fresh, list(layers), " ".join(str(hint).split())[:600])

    if answer.problem:
        return outcome("missing", answer.problem)
    if ex.timeout is not None:  # an exercise that runs the learner's training declares its own
        limit = max(limit, ex.timeout)
    check = chapters.check(ex.check)
    rules = HAND_OFFS.get(ex.check)  # registered by the check's module, imported just above
    with seeded(check, seed) as fresh:
        remote = AnswerProcess(answer.source, ex.function, rules, limit, preload=_preload(answer))
        try:
            remote.start()
            layers = remote.layers
            if remote.definition_hand_offs:
                return outcome("refused", f"not accepted: running the answer's definitions calls "
                                          f"`{remote.definition_hand_offs[0].name}`", fresh)
            reset_attempts()  # every student's failure gets the full hint, none a nudge
            result = check(remote)
        except AnswerEnded as end:
            layers = remote.layers
            return outcome(end.status, end.message, fresh)
        except Exception as err:  # the answer's definitions raised: that answer's fault
            layers = remote.layers
            return outcome("failed", f"the answer's definitions raised {type(err).__name__}: {err}", fresh)
        finally:
            remote.close()
    message = str(result.message)
    status = "passed" if result.passed else "refused" if message.startswith("not accepted") else "failed"
    return outcome(status, message, fresh, "" if result.passed else result.hint)


#: Largest submitted notebook read, bytes.
MAX_NOTEBOOK = 50 * 2**20


def read_submission(path: Path) -> Any:
    """A submitted notebook as nbformat's node, read as data only.

    Raises
    ------
    ValueError
        In one line, if it is not a notebook of nbformat 4 or one converted to it.
    OSError
        If it cannot be read.
    """
    import json

    import nbformat

    if path.stat().st_size > MAX_NOTEBOOK:
        raise ValueError(f"larger than {MAX_NOTEBOOK // 2**20} MB")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError, MemoryError) as err:
        raise ValueError(f"not JSON ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError("not a notebook (its JSON is not an object)")
    if data.get("nbformat") != 4:
        try:
            data = nbformat.convert(nbformat.from_dict(data), 4)
        except Exception as err:  # nbformat's converters on a forged notebook  # noqa: BLE001
            raise ValueError(f"not a notebook nbformat can read ({type(err).__name__})") from None
    return nbformat.from_dict(data)


def grade_notebook(path: Path, chapter: Path, seed: int, limit: float = EXERCISE_LIMIT) -> dict:
    """Grade one submitted notebook of ``chapter`` (``notebooks/*.md``): a JSON-ready record.

    A notebook that cannot be read, or whose cells make the extraction fail, scores 0 on
    every exercise, each with the reason ("missing"); nothing here raises for a bad
    submission.
    """
    from attncourse.course.answers import coding_exercises, extract

    start = time.perf_counter()
    try:
        answers = extract(read_submission(path), chapter)
    except Exception as err:  # an unreadable file, or the extraction of a hostile notebook  # noqa: BLE001
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        answers = [Answer(ex, problem=f"the notebook cannot be graded: {reason}")
                   for ex in coding_exercises(chapter)]
    outcomes = [grade_answer(answer, seed, limit) for answer in answers]
    return {
        "submission": str(path),
        "student": student_of(path, chapter.stem),
        "chapter": chapter.stem,
        "seed": seed,
        "score": sum(o.points for o in outcomes),
        "max_score": sum(o.max_points for o in outcomes),
        "seconds": round(time.perf_counter() - start, 2),
        "containment": sorted({layer for o in outcomes for layer in o.layers}),
        "exercises": [asdict(o) for o in outcomes],
    }


def student_of(path: Path, chapter: str) -> str:
    """The student of ``submitted/<student>/<chapter>/<file>.ipynb``; else the file's stem."""
    parts = path.resolve().parts
    if len(parts) >= 3 and parts[-2] == chapter:
        return parts[-3]
    return path.stem


__all__ = ["MAX_NOTEBOOK", "Outcome", "grade_answer", "grade_notebook", "read_submission", "seeded", "student_of"]
