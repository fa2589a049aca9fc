"""The process that runs one student's answer: inputs in, outputs out, nothing else.

Started by :class:`attncourse.course.sandbox.process.AnswerProcess` as a fresh interpreter
(``python -I``), with an empty working folder, a minimal environment and two descriptors:
standard input, on which the grader writes, and the result descriptor, on which this
process answers (standard output and error go nowhere). It never imports a check, a case
generator or a reference, and never learns the grading's seed or an expected value.

1. It reads the setup: the extracted answer's source, the graded name, the exercise's
   hand-off rules, the modules of the course it may use (imported now, before the limits),
   the limits.
2. It imports NumPy and torch (one thread), then those modules, then contains itself
   (:func:`attncourse.course.sandbox.contain.contain`).
3. It runs the answer's definitions, then each call the grader asks for, under two
   observers: a :class:`torch.overrides.TorchFunctionMode` that records every torch
   function reached by any route (from C too: ``map``, ``functools.partial``), and
   :func:`attncourse.checks.guard.watching`, the checks' profiler, for NumPy, SciPy, the
   course package and the must-call rule of a kernel exercise. After each call it checks
   that both observers are still in place.
4. It answers each request with one message (:mod:`attncourse.course.sandbox.wire`): the
   outputs, or the exception's type, message and line, and the hand-offs seen.

Whatever the answer does to this process (patching it, forging messages on the result
descriptor) reaches only this exercise's outputs, which the grader validates and compares.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from dataclasses import replace
from typing import Any

#: The descriptor answers go to (its number is the first argument); requests come on
#: standard input.
RESULT_FD = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3


def _read_exact(count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_request() -> tuple[Any, dict]:
    """The grader's next message (value, fields)."""
    import struct

    from attncourse.course.sandbox.wire import decode

    (length,) = struct.unpack("<Q", _read_exact(8))
    return decode(_read_exact(length))


def send(value: Any = None, **fields: Any) -> None:
    """Answer the grader: ``value`` and ``fields``; a value that cannot be sent becomes an error."""
    from attncourse.course.sandbox.wire import WireError, encode, write_message

    try:
        message = encode(value, **fields)
    except WireError as err:
        fields.pop("ok", None)
        message = encode(None, ok=False, error={"type": "TypeError", "message": f"your function returned {err}",
                                                "where": ""}, hand_offs=fields.get("hand_offs", []))
    write_message(RESULT_FD, message)


def _where(err: BaseException, filename: str) -> str:
    """``line 3 in my_softmax: `return e / e.sum()``` for the answer's deepest frame."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f"line {frame.lineno} in {frame.name}" + (f": `{frame.line.strip()}`" if frame.line else "")


def _error(err: BaseException, filename: str) -> dict:
    text = " ".join(str(err).split())[:300]
    return {"type": type(err).__name__ if type(err).__module__ == "builtins" else "Exception",
            "name": type(err).__name__, "message": text, "where": _where(err, filename)}


class Observers:
    """The two observers of a run (see the module's docstring) and what they saw."""

    def __init__(self, rules: Any, learner: Any) -> None:
        import torch
        from torch.overrides import TorchFunctionMode

        from attncourse.checks.guard import HandOff

        self.rules = rules
        self.learner = learner
        self.last: list = []
        names = {entry.split(":", 1)[1] for entry in (rules.library if rules else ())
                 if entry.startswith("torch:")}
        seen: list[HandOff] = []
        self.torch_seen = seen

        class Recorder(TorchFunctionMode):
            """Records the exercise's hand-offs among the torch functions reached."""

            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "") or ""
                if name in names or name.lstrip("_") in names:
                    owner = getattr(func, "__qualname__", name) or name
                    seen.append(HandOff("library", f"torch.{owner.replace('_VariableFunctionsClass.', '')}"))
                return func(*args, **(kwargs or {}))

        self.mode = Recorder()
        self.torch = torch

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, list]:
        """``fn(*args, **kwargs)`` observed: ``(result, hand-offs)``. An exception propagates;
        the hand-offs seen until then are in ``self.last``."""
        from torch.overrides import _get_current_function_mode_stack

        from attncourse.checks.guard import HandOff, watching

        self.torch_seen.clear()
        seen: list = []
        tampered = False
        try:
            with watching(self.rules, self.learner) as seen, self.mode:
                profile = sys.getprofile()
                try:
                    result = fn(*args, **kwargs)
                finally:
                    stack = _get_current_function_mode_stack()
                    tampered = sys.getprofile() is not profile or not stack or stack[-1] is not self.mode
        finally:
            self.last = list(self.torch_seen) + list(seen)
            if tampered:
                self.last.append(HandOff("observers", ""))
        return result, self.last


def main() -> None:
    """The answer's process (see the module's docstring)."""
    import numpy  # noqa: F401 - before the limits: the inputs' format needs it
    import torch

    torch.set_num_threads(1)
    from attncourse.checks.guard import HandOffs
    from attncourse.course.sandbox.contain import contain

    _, setup = read_request()
    # The course's modules this exercise may use, and the caller of a kernel or a loss
    # (an adapter): imported now, since after the limits the course's files are unreadable.
    import importlib

    for module in setup["preload"]:
        importlib.import_module(module)
    adapters = {}
    for name in setup["adapters"]:
        module, _, qualname = name.partition(":")
        adapters[name] = getattr(importlib.import_module(module), qualname)
    rules = HandOffs(**setup["rules"]) if setup["rules"] is not None else None
    # Folders torch makes on first use (torch.optim imports its compiler, which asks for its
    # cache folder): made now, in the empty working folder, since nothing is written later.
    import tempfile

    tempfile.gettempdir()
    with contextlib.suppress(ImportError):  # tqdm's monitor is a thread: none may start
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    os.makedirs(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "inductor"), exist_ok=True)
    layers = contain(setup["course_root"], setup["memory"], setup["cpu_seconds"], setup["allow_threads"])
    sys.dont_write_bytecode = True
    filename = f"<answer {setup['function']}>"
    import linecache

    # The checks' stub test and Triton's @jit read the source through linecache.
    linecache.cache[filename] = (len(setup["source"]), None, setup["source"].splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "attncourse_answer", "__builtins__": __builtins__}
    # The definitions are observed too (a default argument, a decorator, a class body run
    # now), without the must-call rule, which only a call can meet.
    observers = Observers(replace(rules, must_call=()) if rules is not None else None, None)
    try:
        code = compile(setup["source"], filename, "exec", dont_inherit=True)
        _, seen = observers.run(exec, code, namespace)
        fn = namespace[setup["function"]]
    except BaseException as err:  # the answer's definitions failed: its own fault
        send(None, ok=False, error=_error(err, filename), hand_offs=_hand_offs(observers.last), layers=layers)
        return
    observers.learner, observers.rules = fn, rules
    send(None, ok=True, ready=True, layers=layers, hand_offs=_hand_offs(seen))
    while True:
        try:
            value, fields = read_request()
        except EOFError:
            return
        args, kwargs = value
        adapter = adapters.get(fields.get("adapter")) if fields.get("adapter") else None
        target = fn if adapter is None else (lambda *a, **k: adapter(fn, *a, **k))
        try:
            result, seen = observers.run(target, *args, **kwargs)
        except BaseException as err:  # reported, not raised: the grader describes it
            send(None, ok=False, error=_error(err, filename), hand_offs=_hand_offs(observers.last))
            continue
        send(result, ok=True, hand_offs=_hand_offs(seen))


def _hand_offs(seen: list) -> list[list[str]]:
    return [[h.kind, h.name] for h in seen]


if __name__ == "__main__":
    main()
