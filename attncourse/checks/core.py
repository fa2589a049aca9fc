"""The engine behind every exercise check: run hidden cases, describe the first miss.

A chapter's check is a list of :class:`Case` objects handed to :func:`run_cases`
together with the learner's function. The runner calls the function on each
case in turn and stops at the first one that goes wrong, whether the function
raised, returned the wrong kind of thing or the wrong numbers. It never
re-raises and never prints: everything the learner needs is in the returned
:class:`CheckResult`, which a notebook shows as a short coloured box.

Outputs may be NumPy arrays, torch tensors (on any device, with or without
gradients) or nested lists; they are all compared as NumPy arrays.

Three rules keep the feedback honest and useful:

- *References are refused.* A check names the course package's own implementations of
  what its exercise asks for (``references``); while the learner's function runs, each of
  them is replaced, wherever the package or the learner's namespace holds it, by a
  stand-in that records the call and raises. A function that hands the work to them
  fails with a message saying so, whatever it returns.
- *Unwritten is not wrong.* A stub (a body of ``...`` or ``pass``, or one raising
  ``NotImplementedError`` as nbgrader's released notebooks do) gets "not passed yet".
- *A nudge first, unless the mistake is recognised.* When the check recognises the mistake
  (a case's ``diagnose`` names it, or the signature is wrong), its hint says so at once.
  Otherwise the first failed attempt of a check shows a nudge (the case's ``nudge``, or a
  general one); from the second on, the full hint, which gives the idea of the fix but
  never its code (``tests/checks/test_hints.py``). ``result.hint`` always holds the full
  hint.
- *No hand-offs.* Besides the references, a check refuses any call (direct or not) to a
  library function that does the exercise's job, to the package outside the checks, or
  to a chapter's helper from another cell (:mod:`attncourse.checks.hand_offs`).
"""

from __future__ import annotations

import copy
import html
import os
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attncourse.checks.guard import (
    HandOff,
    HandOffs,
    ReferenceCalled,
    is_reference,
    is_stub,
    reference_name,
    refused,
    unwrap,
    watching,
)
from attncourse.checks.hand_offs import HAND_OFFS

PASS_MARK = "✔"
FAIL_MARK = "✘"

#: Entries of a row shown in full when a row is short enough to read at a glance.
_ROW_DISPLAY_LIMIT = 8
#: Longest exception message shown, in characters.
_EXCEPTION_MESSAGE_LIMIT = 160
#: Failed attempts of a check (per kernel session) shown with a nudge before the full hint.
NUDGE_ATTEMPTS = 1
#: The nudge of a case that has none of its own.
GENERAL_NUDGE = ("Work this case out by hand, or run your function on its inputs (the "
                 "result's `.args`) in a new cell, and compare each step with the statement.")
#: What a stub's check says until it is written.
NOT_YET = "not passed yet"
_failed_attempts: dict[str, int] = {}


@dataclass(frozen=True, repr=False)
class CheckResult:
    """The outcome of checking one exercise, truthy when every hidden case passes.

    A notebook cell that ends with a check shows it as a small green or red
    box (``_repr_html_``); ``print(result)`` gives the same report as text.

    Attributes
    ----------
    name : str
        The check's name, e.g. ``"check_softmax"``.
    passed : bool
        Whether every hidden case passed.
    cases_passed : int
        Cases that passed before the first failure (all of them when ``passed``).
    cases_total : int
        Number of hidden cases.
    message : str
        ``"all 6 hidden cases pass"``, or the first failing case described:
        which case, the inputs' shapes, and what was expected against what the
        function returned (first differing entry, a shape or a type) or raised.
    hint : str
        What to look at to fix the failure; empty when ``passed``.
    args : tuple
        Positional inputs of the failing case, so that ``fn(*result.args,
        **result.kwargs)`` reproduces it in a new cell; empty when ``passed``.
    kwargs : dict
        Keyword inputs of the failing case.
    nudge : str
        What the report shows instead of ``hint`` on a first failed attempt (empty: the
        report shows ``hint``). A mistake the check recognises (``recognised``) gets no
        nudge: its hint names it at once.
    recognised : bool
        Whether ``hint`` names a mistake the check recognised in what the function did
        (a case's ``diagnose``, a wrong signature), rather than the case's general hint.
    value : object
        What the function returned, where a check keeps it so that the chapter need not
        compute it again (chapter 7b's trained weights); ``None`` otherwise.
    """

    name: str
    passed: bool
    cases_passed: int
    cases_total: int
    message: str
    hint: str = ""
    args: tuple = field(default=(), compare=False)
    kwargs: Mapping[str, Any] = field(default_factory=dict, compare=False)
    nudge: str = field(default="", compare=False)
    #: Whether the hint names the mistake the check recognised (shown at once, never a nudge).
    recognised: bool = field(default=False, compare=False)
    #: A costly result the chapter reuses (a trained model), else None.
    value: Any = field(default=None, compare=False)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def shown_hint(self) -> str:
        """The hint the report shows: the nudge on a first attempt, else the full hint."""
        if self.nudge:
            return f"{self.nudge} (A fuller hint comes if the next attempt fails.)"
        return self.hint

    def __str__(self) -> str:
        mark = PASS_MARK if self.passed else FAIL_MARK
        text = f"{mark} {self.name}: {self.message}"
        if self.shown_hint:
            text += f"\n  hint: {self.shown_hint}"
        return text

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        if self.passed:
            border, background, colour, mark = "#2e7d32", "#edf7ed", "#1e4620", PASS_MARK
        else:
            border, background, colour, mark = "#c62828", "#fdecea", "#5f2120", FAIL_MARK
        body = f"<b>{mark} {html.escape(self.name)}</b>: {html.escape(self.message)}"
        if self.shown_hint:
            body += f"\n<b>hint:</b> {html.escape(self.shown_hint)}"
        style = (
            f"border:1px solid {border};border-left:6px solid {border};background:{background};"
            f"color:{colour};padding:6px 10px;margin:4px 0;border-radius:4px;"
            "font-family:monospace;white-space:pre-wrap"
        )
        return f'<div style="{style}">{body}</div>'


#: ``diagnose(got, case)`` looks at what the learner's function returned and
#: names the likely bug, or returns ``None`` to fall back on the case's hint.
Diagnose = Callable[[Any, "Case"], "str | None"]


@dataclass(frozen=True)
class Case:
    """One hidden test case of an exercise.

    Attributes
    ----------
    description : str
        What the case is about, shown to the learner, e.g. ``"masked row, seq_len=4"``.
    args : Mapping[str, Any]
        Inputs passed positionally, in order; the names only label them in messages.
    expected : array-like or tuple of array-like
        The right answer. A tuple means the function must return that many
        arrays (named by ``output_names``).
    kwargs : Mapping[str, Any]
        Inputs passed by keyword.
    atol, rtol : float
        Tolerances of the comparison, as in :func:`numpy.allclose`.
    hint : str
        Shown when this case fails and ``diagnose`` names no specific bug.
    nudge : str
        Shown instead of the hint on a first failed attempt: a pointer that leaves the fix
        to the learner (default: :data:`GENERAL_NUDGE`).
    output_names : tuple of str, optional
        Names of the returned arrays when ``expected`` is a tuple,
        e.g. ``("output", "weights")``.
    dtype : numpy dtype, optional
        A dtype the result must have (e.g. ``bool`` for masks); checked after the values.
    diagnose : callable, optional
        ``diagnose(got, case) -> str | None``, see :data:`Diagnose`. ``got`` is
        what the function returned, converted to NumPy where possible.
    """

    description: str
    args: Mapping[str, Any]
    expected: Any
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    atol: float = 1e-6
    rtol: float = 1e-5
    hint: str = ""
    output_names: tuple[str, ...] | None = None
    dtype: Any = None
    diagnose: Diagnose | None = None
    nudge: str = ""


def to_numpy(value: Any) -> Any:
    """Convert a torch tensor, list or NumPy array to an ndarray; anything else unchanged.

    Tensors are detached and moved to the CPU first. Values that do not form a
    numeric or boolean array (``None``, strings, ragged lists) come back as they were.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple, int, float, bool, np.generic)):
        try:
            array = np.asarray([to_numpy(v) for v in value] if isinstance(value, (list, tuple)) else value)
        except (ValueError, TypeError):
            return value
        if array.dtype.kind in "biuf":
            return array
    return value


def _is_numeric_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def fmt_shape(shape: Sequence[int]) -> str:
    """``(3,)``, ``(2, 4)``: a shape as Python writes a tuple."""
    return str(tuple(int(s) for s in shape))


def fmt_number(value: Any) -> str:
    """A scalar in a few significant digits; ``NaN`` and ``inf`` spelled out."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def _fmt_row(row: np.ndarray) -> str:
    return "[" + ", ".join(fmt_number(v) for v in row) + "]"


def _fmt_index(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def describe_value(value: Any) -> str:
    """A short phrase for what a function returned: ``an ndarray of shape (2, 3)``."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"an ndarray of shape {fmt_shape(value.shape)} and dtype {value.dtype}"
    if hasattr(value, "detach") and hasattr(value, "shape"):
        return f"a tensor of shape {fmt_shape(value.shape)} and dtype {value.dtype}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__} ({value!r:.40})"


def _describe_input(name: str, value: Any) -> str:
    array = to_numpy(value)
    if isinstance(array, np.ndarray) and array.ndim > 0:
        return f"{name} {fmt_shape(array.shape)} {array.dtype}"
    return f"{name}={value!r}"


def describe_inputs(case: Case) -> str:
    """``x (3, 4) float64, axis=-1``: every input by name, arrays by shape and dtype."""
    parts = [_describe_input(name, value) for name, value in case.args.items()]
    parts += [f"{name}={value!r}" for name, value in case.kwargs.items()]
    return ", ".join(parts)


def first_mismatch(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> str | None:
    """Describe the first entry where ``got`` and ``expected`` differ, or ``None``.

    Both must have the same shape. NaN or inf where ``expected`` is finite
    always counts as a difference, and the description counts them.
    """
    got_f = got.astype(np.float64)
    exp_f = expected.astype(np.float64)
    close = np.isclose(got_f, exp_f, atol=atol, rtol=rtol, equal_nan=True)
    if close.all():
        return None
    index = tuple(int(i) for i in np.argwhere(~close)[0])
    lines = [
        f"at index {_fmt_index(index)}: expected {fmt_number(expected[index])}, got {fmt_number(got[index])}"
    ]
    bad = ~np.isfinite(got_f) & np.isfinite(exp_f)
    if bad.any():
        lines[0] += f" ({int(bad.sum())} of {got.size} entries are NaN or inf where numbers were expected)"
    if got.ndim >= 1 and got.shape[-1] <= _ROW_DISPLAY_LIMIT:
        row = index[:-1]
        name = "row" if got.ndim > 1 else "array"
        lines.append(f"expected {name} {_fmt_row(expected[row])}")
        lines.append(f"got {name}      {_fmt_row(got[row])}")
    return "\n  ".join(lines)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # attncourse itself
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _learner_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of the traceback that lies in the learner's own code.

    Frames of the standard library, installed packages and attncourse are
    skipped, so an error raised inside NumPy points at the learner's line that
    called NumPy.
    """
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # the first frame is the runner's call
    library = _library_dirs()
    own = [f for f in frames if not os.path.realpath(f.filename).startswith(library)]
    return own[-1] if own else None


def describe_exception(exc: BaseException) -> str:
    """One line: the exception's type and message and the learner's line that raised it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > _EXCEPTION_MESSAGE_LIMIT:
        text = text[: _EXCEPTION_MESSAGE_LIMIT - 3] + "..."
    line = f"your function raised {type(exc).__name__}" + (f": {text}" if text else "")
    frame = _learner_frame(exc)
    if frame is not None:
        where = f"line {frame.lineno} in {frame.name}"
        if frame.line:
            where += f": `{frame.line.strip()}`"
        line += f" ({where})"
    return line


def _exception_hint(exc: BaseException, case: Case) -> tuple[str, bool]:
    """The hint for a function that raised, and whether it names a recognised mistake."""
    text = str(exc)
    if isinstance(exc, TypeError) and ("positional argument" in text or "keyword argument" in text):
        names = list(case.args) + [f"{key}={key}" for key in case.kwargs]
        return f"Check your function's signature: this case calls it as fn({', '.join(names)}).", True
    return case.hint or "Call your function on this case's inputs in a new cell to see the full error.", False


def _compare(got: Any, case: Case) -> str | None:
    """Describe how ``got`` differs from ``case.expected``, or ``None`` if it matches."""
    if isinstance(case.expected, tuple):
        names = case.output_names or tuple(f"result[{i}]" for i in range(len(case.expected)))
        wanted = f"a tuple ({', '.join(names)})"
        if got is None:
            return f"your function returned None; expected {wanted}. Did you forget `return`?"
        if not isinstance(got, (tuple, list)):
            return f"your function returned {describe_value(got)}; expected {wanted}"
        if len(got) != len(case.expected):
            return f"your function returned {len(got)} values; expected {len(case.expected)}: ({', '.join(names)})"
        for name, g, e in zip(names, got, case.expected):
            problem = _compare_array(g, np.asarray(e), case, name)
            if problem:
                return problem
        return None
    return _compare_array(got, np.asarray(case.expected), case, None)


def _compare_array(got: Any, expected: np.ndarray, case: Case, name: str | None) -> str | None:
    what = "your function" if name is None else f"`{name}`"
    if got is None:
        extra = " Did you forget `return`?" if name is None else ""
        return f"{what} returned None; expected an array of shape {fmt_shape(expected.shape)}.{extra}"
    if not _is_numeric_array(got):
        return (f"{what} returned {describe_value(got)}; expected an array of numbers of shape "
                f"{fmt_shape(expected.shape)}")
    if got.shape != expected.shape:
        verb = "returned" if name is None else "has"
        return f"{what} {verb} shape {fmt_shape(got.shape)}; expected shape {fmt_shape(expected.shape)}"
    mismatch = first_mismatch(got, expected, case.atol, case.rtol)
    if mismatch:
        return (f"in `{name}` " if name else "") + mismatch
    if case.dtype is not None and got.dtype != np.dtype(case.dtype):
        return (
            f"{what} has the right values but dtype {got.dtype}; "
            f"expected dtype {np.dtype(case.dtype)}"
        )
    return None


def _convert(got: Any, case: Case) -> Any:
    if isinstance(case.expected, tuple) and isinstance(got, (tuple, list)):
        return tuple(to_numpy(g) for g in got)
    return to_numpy(got)


def remote_answer(fn: Any) -> Any:
    """The answer under ``fn`` when it runs in a process of its own (the grade of record's
    :class:`attncourse.course.sandbox.process.AnswerProcess`), else ``None``."""
    inner = unwrap(fn)
    return inner if getattr(inner, "is_remote", False) is True else None


def calling(fn: Any, caller: Callable) -> Callable:
    """``caller(fn, *args, **kwargs)`` as a function of the case's inputs.

    ``caller`` is how a check calls the learner's function (launch a kernel, backpropagate a
    loss); for an answer graded in a process of its own it runs there, beside the answer
    (it must be listed in the exercise's ``HandOffs.calls``).
    """
    remote = remote_answer(fn)
    if remote is not None:
        return remote.via(caller)
    def call(*args: Any, **kwargs: Any) -> Any:
        return caller(fn, *args, **kwargs)
    return call


def _call(fn: Callable, case: Case, references: Sequence[Any] = (), hand_offs: HandOffs | None = None,
          learner: Any = None) -> tuple[Any, list[str], list[HandOff]]:
    args = copy.deepcopy(tuple(case.args.values()))
    kwargs = copy.deepcopy(dict(case.kwargs))
    remote = remote_answer(learner if learner is not None else fn)
    if remote is not None:  # observed in its own process, which reports the hand-offs
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                result = fn(*args, **kwargs)
            except Exception:
                if remote.hand_offs:
                    return None, [], remote.hand_offs
                raise
        return result, [], remote.hand_offs
    # Overflow warnings from a learner's exp() would print above the result box;
    # the result already says what went wrong.
    with warnings.catch_warnings(), np.errstate(all="ignore"), refused(references, fn) as calls:
        warnings.simplefilter("ignore")
        with watching(hand_offs, learner if learner is not None else fn) as seen:
            try:
                result = fn(*args, **kwargs)
            except ReferenceCalled:
                result = None
            except Exception:
                if seen:  # a hand-off that then failed is refused as a hand-off
                    return None, calls, seen
                raise
        return result, calls, seen


def _not_yet(name: str, fn: Any, total: int, exc: BaseException | None = None) -> CheckResult:
    """"Not passed yet", naming the stub that was hit: the function whose
    ``NotImplementedError`` was raised (``my_block`` inside a written ``my_gpt``), else ``fn``."""
    frame = _learner_frame(exc) if exc is not None else None
    what = frame.name if frame is not None and frame.name != "<module>" else getattr(unwrap(fn), "__name__",
                                                                                       "your function")
    return CheckResult(
        name=name, passed=False, cases_passed=0, cases_total=total,
        message=f"{NOT_YET}: `{what}` is not written yet",
        hint="Replace the `...` (or `raise NotImplementedError()`) with your code, then run "
             "the cell again.")


def _refusal(name: str, total: int, ref_name: str, passed_itself: bool,
             rules: HandOffs | None = None) -> CheckResult:
    how = "is" if passed_itself else "calls"
    return CheckResult(
        name=name, passed=False, cases_passed=0, cases_total=total,
        message=(f"not accepted: your function {how} `{ref_name}`, the course package's own "
                 "implementation of what this exercise asks you to write (the check runs your "
                 "function with it switched off)"),
        hint=f"Allowed: {rules.uses}" if rules is not None else
             "Write the computation yourself from NumPy or PyTorch operations: that is the exercise.")


def _hand_off_refusal(name: str, total: int, hand_off: HandOff, rules: HandOffs) -> CheckResult:
    if hand_off.kind == "library":
        why = (f"your function hands the work to `{hand_off.name}`, a library function that "
               "computes what this exercise asks you to write")
    elif hand_off.kind == "package":
        why = (f"your function calls `{hand_off.name}` from the course package; this exercise "
               "asks you to write the computation yourself")
    elif hand_off.kind == "observers":
        why = ("your function switched off what watches it while it runs (the profiler or the "
               "torch function mode): the grade of record cannot tell what it called")
    elif hand_off.kind == "namespace":
        why = (f"your function calls `{hand_off.name}`, defined in another cell of your notebook "
               "(a chapter's helper); write the computation in the exercise's own cell")
    else:
        why = rules.must_call_message or "the computation the exercise asks for never ran"
    return CheckResult(name=name, passed=False, cases_passed=0, cases_total=total,
                       message=f"not accepted: {why}", hint=f"Allowed: {rules.uses}")


def reset_attempts() -> None:
    """Forget the failed attempts counted so far (every check shows a nudge first again)."""
    _failed_attempts.clear()


def run_cases(name: str, fn: Any, cases: Sequence[Case], references: Sequence[Any] = (),
              hand_offs: HandOffs | None = None, learner: Any = None) -> CheckResult:
    """Run ``fn`` on each hidden case and report the first failure.

    Parameters
    ----------
    name : str
        The check's name shown in the report, e.g. ``"check_softmax"``.
    fn : callable
        The learner's function.
    cases : sequence of Case
        Hidden cases, run in order; the first failure stops the run.
    references : sequence of callable
        The package's implementations of what the exercise asks for: ``fn`` fails if it
        is one of them or calls one (they raise while it runs, see :func:`refused`).
    hand_offs : HandOffs, optional
        The library, package and notebook functions ``fn`` may not call, directly or
        indirectly, and what it may use (see :func:`attncourse.checks.guard.watching`).
    learner : callable, optional
        The learner's own function when ``fn`` is a check's wrapper around it (it tells
        the namespace rule which cell is the learner's); default ``fn``.

    Returns
    -------
    CheckResult
        Never raises for anything the learner's function does: exceptions,
        wrong types, wrong shapes and wrong values are all described in it. A stub
        gets "not passed yet"; a failure shows a nudge on the check's first failed
        attempt (see the module's docstring).

    Examples
    --------
    >>> import numpy as np
    >>> case = Case("doubling", args={"x": np.array([1.0, 2.0])}, expected=np.array([2.0, 4.0]))
    >>> print(run_cases("check_double", lambda x: 2 * x, [case]))
    ✔ check_double: all 1 hidden cases pass
    """
    total = len(cases)
    if not callable(fn):
        return CheckResult(
            name=name, passed=False, cases_passed=0, cases_total=total,
            message=f"expected your function itself, but got {describe_value(to_numpy(fn))}",
            hint=f"Pass the function without calling it: {name}(my_function), not {name}(my_function(...)).",
        )
    if hand_offs is None:
        hand_offs = HAND_OFFS.get(name)
    itself = is_reference(fn, references)
    if itself is not None:
        return _refusal(name, total, reference_name(itself), passed_itself=True, rules=hand_offs)
    result = _run(name, fn, cases, references, hand_offs, learner)
    if result.passed or result.message.startswith(NOT_YET) or result.message.startswith("not accepted"):
        return result
    _failed_attempts[name] = _failed_attempts.get(name, 0) + 1
    if _failed_attempts[name] <= NUDGE_ATTEMPTS and not result.recognised:  # a named mistake: at once
        case = cases[result.cases_passed]
        result = replace(result, nudge=case.nudge or GENERAL_NUDGE)
    return result


def _run(name: str, fn: Any, cases: Sequence[Case], references: Sequence[Any],
         hand_offs: HandOffs | None = None, learner: Any = None) -> CheckResult:
    total = len(cases)
    for number, case in enumerate(cases, start=1):
        header = f"case {number} of {total} ({case.description}) failed\n  inputs: {describe_inputs(case)}"
        failure = CheckResult(  # filled in below when this case fails
            name=name, passed=False, cases_passed=number - 1, cases_total=total, message="",
            args=tuple(case.args.values()), kwargs=dict(case.kwargs),
        )
        try:
            raw, calls, seen = _call(fn, case, references, hand_offs, learner)
        except NotImplementedError as exc:
            return _not_yet(name, fn, total, exc)
        except Exception as exc:  # the learner's bug, reported rather than re-raised
            if number == 1 and is_stub(fn):
                return _not_yet(name, fn, total)
            hint, recognised = _exception_hint(exc, case)
            return replace(failure, message=f"{header}\n  {describe_exception(exc)}", hint=hint,
                           recognised=recognised)
        if calls:  # even when the learner's code caught the stand-in's exception
            return _refusal(name, total, calls[0], passed_itself=False, rules=hand_offs)
        if seen:
            return _hand_off_refusal(name, total, seen[0], hand_offs)
        if raw is None and number == 1 and is_stub(fn):
            return _not_yet(name, fn, total)
        got = _convert(raw, case)
        problem = _compare(got, case)
        if problem is not None:
            hint, recognised = _diagnose(got, case)
            return replace(failure, message=f"{header}\n  {problem}", hint=hint, recognised=recognised)
    return CheckResult(name=name, passed=True, cases_passed=total, cases_total=total,
                       message=f"all {total} hidden cases pass")


def _diagnose(got: Any, case: Case) -> tuple[str, bool]:
    """The hint for a wrong result, and whether the case's ``diagnose`` recognised the mistake."""
    if case.diagnose is not None:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                specific = case.diagnose(got, case)
        except Exception:  # a diagnosis that trips over odd output must not hide the report
            specific = None
        if specific and specific != case.hint:
            return specific, True
    return case.hint, False


# ---------------------------------------------------------------- diagnosing common bugs
# A check's ``diagnose`` computes what typical buggy versions of the exercise
# would return and names the bug whose output the learner's matches.


def same_values(got: Any, other: np.ndarray, case: Case) -> bool:
    """Whether ``got`` is a numeric array of ``other``'s shape and values, within the case's tolerances."""
    return (
        isinstance(got, np.ndarray)
        and got.shape == other.shape
        and got.dtype.kind in "biuf"
        and bool(np.allclose(got.astype(np.float64), other, atol=case.atol, rtol=case.rtol, equal_nan=True))
    )


def buggy_variants(recipes: Sequence[tuple[str, Callable[[], Any]]]) -> list[tuple[str, np.ndarray]]:
    """Evaluate each ``(hint, recipe)`` of a buggy version; one whose shapes do not fit (it would raise) is left out."""
    out = []
    for hint, recipe in recipes:
        try:
            with np.errstate(all="ignore"):
                out.append((hint, np.asarray(recipe(), dtype=np.float64)))
        except (ValueError, ZeroDivisionError):
            pass
    return out


def variant_hint(got: Any, variants: Sequence[tuple[str, Any]], expected: np.ndarray, case: Case) -> str | None:
    """The hint of the first variant that differs from ``expected`` and equals ``got``, or None."""
    expected = np.asarray(expected, dtype=np.float64)
    for hint, variant in variants:
        variant = np.asarray(variant, dtype=np.float64)
        if (variant.shape == expected.shape and not same_values(variant, expected, case)
                and same_values(got, variant, case)):
            return hint
    return None


__all__ = [
    "GENERAL_NUDGE",
    "NOT_YET",
    "buggy_variants",
    "calling",
    "remote_answer",
    "reset_attempts",
    "same_values",
    "variant_hint",
    "Case",
    "CheckResult",
    "Diagnose",
    "describe_exception",
    "describe_inputs",
    "describe_value",
    "first_mismatch",
    "fmt_number",
    "fmt_shape",
    "run_cases",
    "to_numpy",
]
