"""The grade of record: each answer run alone, after the checks, in a process of its own.

``python -m attncourse grade SUBMISSIONS...`` scores collected submissions (``nbgrader
collect``'s ``submitted/<student>/<chapter>/<chapter>.ipynb``, or any ``.ipynb``) without
running them. For every coding exercise of the chapter:

1. the answer is cut out of the notebook by its syntax tree (:mod:`attncourse.course.answers`):
   the graded function and what it needs by name, nothing that does something;
2. it is refused if it is what :mod:`attncourse.course.refusals` forbids (the interpreter's
   machinery, frames, dunders, the exercise's hand-offs by any name or path);
3. otherwise it runs in a fresh process, forked from this one after every check was
   imported and before any answer existed (spawned, importing the checks first, where
   forking is not safe: see :func:`_context`): the answer's definitions are executed there, then its check runs on
   hidden cases drawn with this grading's seed (a check whose cases take a seed gets fresh
   random ones), with the check's runtime guard on and every result required to be a plain
   number, array or tensor (:mod:`attncourse.checks.plain`). A process past its time limit
   is killed: that exercise scores zero, the others are graded as usual.

The notebook's own test cells, its ``NBGRADER_EXECUTION``, whatever it patches or redefines:
none of it runs here. The in-notebook checks stay the learner's instant feedback.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import multiprocessing
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import attncourse.chapters as chapters
from attncourse.checks.hand_offs import HAND_OFFS
from attncourse.checks.plain import plain_results
from attncourse.course.answers import Answer
from attncourse.course.nbgrader_source import CHECK_POINTS, EXERCISE_LIMIT
from attncourse.course.refusals import refusal
from attncourse.runtime import NO_TRAINING_ENV

# The checks are imported here, before any answer exists: a forked grading process starts
# with them loaded, and a spawned one imports them by importing this module.
CHECK_MODULES = chapters.modules("checks")


@dataclass
class Outcome:
    """One exercise's grade of record.

    ``status``: ``"passed"``, ``"failed"`` (the check said no), ``"refused"`` (the static
    analysis said no, before running), ``"missing"`` (no answer to run), ``"time limit"``
    or ``"crashed"`` (the process ended without a result).
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


def _seed_cases(check: Any, seed: int) -> bool:
    """Make ``check`` draw its random cases with ``seed``: every ``*_cases`` function of its
    module that takes a ``seed`` gets it. Whether the check itself calls one of them (run in
    the grading process only): chapter 7b's training check shares a module with seeded
    checks, and its one case is not drawn."""
    space = getattr(check, "__globals__", {})
    called = set(getattr(getattr(check, "__code__", None), "co_names", ()))
    fresh = False
    for name, value in list(space.items()):
        if name.endswith("_cases") and callable(value):
            try:
                takes_seed = "seed" in inspect.signature(value).parameters
            except (TypeError, ValueError):
                continue
            if takes_seed:
                space[name] = functools.partial(value, seed=seed)
                fresh |= name in called
    return fresh


def _run_answer(conn: Any, check_name: str, function: str, source: str, seed: int) -> None:
    """The grading process: define the answer, run its check, send ``(passed, message, fresh)``."""
    try:
        # What the answer prints goes nowhere: it must not write into the grader's report.
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        import torch

        torch.set_num_threads(1)  # fair on a shared grader, and safe after fork
        os.environ[NO_TRAINING_ENV] = "1"  # a check loads no model that is not prepared (none does)
        check = chapters.check(check_name)
        fresh = _seed_cases(check, seed)
        filename = f"<answer {function}>"
        # The checks (and Triton's @jit) read the answer's source through linecache.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"__name__": "attncourse_answer"}
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - analysed, in its own process
        fn = namespace[function]
        kernel = bool(HAND_OFFS.get(check_name) and HAND_OFFS[check_name].must_call)
        result = check(fn if kernel else plain_results(fn))
        conn.send((bool(result.passed), " ".join(str(result.message).split())[:300], fresh))
    except BaseException as err:  # the answer's definitions failed: that answer's fault
        conn.send((False, f"{type(err).__name__}: {' '.join(str(err).split())[:200]}", False))
    finally:
        conn.close()


def _context() -> Any:
    """How grading processes start: ``ATTNCOURSE_GRADE_START`` (``fork`` or ``spawn``) if set;
    else fork on Linux (the checks are loaded already: no import per exercise) without an
    NVIDIA GPU, spawn elsewhere (macOS and Windows; and where CUDA, which the checks' import
    asks about, cannot be used again in a forked process)."""
    method = os.environ.get("ATTNCOURSE_GRADE_START", "").strip()
    if method not in ("fork", "spawn"):
        method = "fork" if sys.platform.startswith("linux") and not os.path.exists("/dev/nvidiactl") else "spawn"
    return multiprocessing.get_context(method)


def grade_answer(answer: Answer, seed: int, limit: float = EXERCISE_LIMIT) -> Outcome:
    """The grade of record of one extracted answer (see the module's docstring)."""
    ex = answer.exercise
    start = time.perf_counter()

    def outcome(status: str, message: str, fresh: bool = False) -> Outcome:
        points = CHECK_POINTS if status == "passed" else 0
        return Outcome(ex.label, ex.check, ex.function, status, points, CHECK_POINTS, message,
                       round(time.perf_counter() - start, 2), fresh)

    if answer.problem:
        return outcome("missing", answer.problem)
    why = refusal(answer.source, ex.check)
    if why:
        return outcome("refused", f"not accepted: {why}")
    if ex.timeout is not None:  # an exercise that runs the learner's training declares its own
        limit = max(limit, ex.timeout)
    context = _context()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_run_answer, args=(send, ex.check, ex.function, answer.source, seed),
                              daemon=True)
    sys.stdout.flush()  # a forked process would print what is still buffered a second time
    sys.stderr.flush()
    process.start()
    send.close()
    try:
        if not receive.poll(limit):
            return outcome("time limit", f"stopped after {limit:g} s")
        try:
            passed, message, fresh = receive.recv()
        except (EOFError, OSError):
            return outcome("crashed", f"the grading process ended without a result (exit {process.exitcode})")
        return outcome("passed" if passed else "failed", message, fresh)
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receive.close()


def grade_notebook(path: Path, chapter: Path, seed: int, limit: float = EXERCISE_LIMIT) -> dict:
    """Grade one submitted notebook of ``chapter`` (``notebooks/*.md``): a JSON-ready record."""
    import nbformat

    from attncourse.course.answers import extract

    start = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    outcomes = [grade_answer(answer, seed, limit) for answer in extract(nb, chapter)]
    return {
        "submission": str(path),
        "student": student_of(path, chapter.stem),
        "chapter": chapter.stem,
        "seed": seed,
        "score": sum(o.points for o in outcomes),
        "max_score": sum(o.max_points for o in outcomes),
        "seconds": round(time.perf_counter() - start, 2),
        "exercises": [asdict(o) for o in outcomes],
    }


def student_of(path: Path, chapter: str) -> str:
    """The student of ``submitted/<student>/<chapter>/<file>.ipynb``; else the file's stem."""
    parts = path.resolve().parts
    if len(parts) >= 3 and parts[-2] == chapter:
        return parts[-3]
    return path.stem


__all__ = ["CHECK_MODULES", "Outcome", "grade_answer", "grade_notebook", "student_of"]
