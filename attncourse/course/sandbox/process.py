"""The grader's side of the boundary: a student's answer as a function of another process.

:class:`AnswerProcess` stands for the answer's function in the grading process: a call
sends the inputs to :mod:`attncourse.course.sandbox.child` and returns its outputs, so a
check runs unchanged here, out of the answer's reach; :meth:`AnswerProcess.via` runs a
check's caller (``HandOffs.calls``) in the answer's process. :func:`protect_grader` makes
the grader not dumpable and a subreaper; each answer is forked by a :class:`ForkServer`
into a session of its own, killed whole when its exercise ends.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attncourse.checks.guard import HandOff, HandOffs, stub_definition
from attncourse.course.sandbox.child import UNKNOWN_STATUS
from attncourse.course.sandbox.contain import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    prctl,
)
from attncourse.course.sandbox.wire import (
    MAX_BYTES,
    WireError,
    decode,
    encode,
    write_message,
)

#: The course's repository: the answer's process may not read beneath it.
COURSE_ROOT = Path(__file__).resolve().parents[3]
#: Memory an answer may allocate beyond what its process holds once started, bytes.
MEMORY = 4 * 2**30
#: Seconds the answer's process has to start and run the answer's definitions.
STARTUP_SECONDS = 60.0
_BOOT = ("import sys; sys.path.insert(0, {root!r}); "
         "from attncourse.course.sandbox.child import serve; serve({fd})")
_PROTECTED = False


class AnswerEnded(BaseException):
    """The answer's process is gone or out of time: the exercise ends here.

    A ``BaseException``, so that no check's ``except Exception`` takes it for a wrong
    answer. ``status`` is ``"time limit"``, ``"crashed"``, or ``"refused"`` (the answer
    tried what no answer needs, :func:`attncourse.course.sandbox.child.tripwire`).
    """

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def protect_grader() -> list[str]:
    """Make this process not dumpable and a child subreaper (Linux); the layers set."""
    global _PROTECTED
    done = []
    for option, name in ((PR_SET_DUMPABLE, "grader_not_dumpable"), (PR_SET_CHILD_SUBREAPER, "subreaper")):
        try:
            prctl(option, 0 if option == PR_SET_DUMPABLE else 1)
            done.append(name)
        except (OSError, AttributeError):
            pass
    _PROTECTED = True
    return done


def is_stub_source(source: str, function: str) -> bool:
    """Whether ``function``'s definition in ``source`` is a stub (``...``, ``pass``, a docstring,
    ``raise NotImplementedError``), as :func:`attncourse.checks.guard.is_stub` reads one."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return stub_definition(defs[-1] if defs else None)


def _environment(workdir: str) -> dict[str, str]:
    """What Python, NumPy, torch and Triton need, and nothing of the grader's."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "ATTNCOURSE_NO_TRAINING": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "TORCHINDUCTOR_CACHE_DIR": os.path.join(workdir, "inductor"),
           "TRITON_CACHE_DIR": os.path.join(workdir, "triton")}
    for name in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "ATEN_CPU_CAPABILITY"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class AnswerProcess:
    """One exercise's answer (``source``, defining ``function``), in a process of its own.

    A call sends the inputs (:mod:`attncourse.course.sandbox.wire`) and returns the outputs,
    or raises the answer's exception as the same built-in type, or :class:`AnswerEnded` (the
    process died, sent what is not an answer or ran past ``limit`` seconds, all calls
    together); ``hand_offs`` holds what the last call handed off.
    """

    #: Tells the checks that this function runs elsewhere (:func:`attncourse.checks.core.run_cases`).
    is_remote = True

    def __init__(self, source: str, function: str, rules: HandOffs | None, limit: float,
                 preload: tuple[str, ...] = ()) -> None:
        self.source, self.function, self.rules, self.limit = source, function, rules, limit
        self.preload = tuple(preload)
        self.answer_is_stub = is_stub_source(source, function)
        self.__name__ = function
        self.hand_offs: list[HandOff] = []
        self.definition_hand_offs: list[HandOff] = []
        self.layers: list[str] = []
        self.pid: int | None = None
        self.deadline = 0.0

    # ----------------------------------------------------------------- lifetime
    def start(self) -> AnswerProcess:
        """Start the process and define the answer in it; raises :class:`AnswerEnded`, or
        the answer's own error at definition (as a call would)."""
        import torch

        requests_in, self.requests = os.pipe()
        self.results, results_out = os.pipe()
        try:
            self.pid = fork_server().fork(requests_in, results_out)
        except OSError as err:  # the fork server died or did not start: no answer ran
            raise AnswerEnded("crashed", f"the grader could not start the answer's process ({err})") from None
        finally:
            os.close(requests_in)
            os.close(results_out)
        rules = asdict(self.rules) if self.rules is not None else None
        self.deadline = time.monotonic() + STARTUP_SECONDS + self.limit
        self._send(None, source=self.source, function=self.function, rules=rules,
                   preload=list(self.preload), adapters=list(self.rules.calls if self.rules else ()),
                   course_root=str(COURSE_ROOT), memory=MEMORY,
                   cpu_seconds=STARTUP_SECONDS + 2 * self.limit,
                   allow_threads=bool(torch.cuda.is_available()))
        _, fields = self._receive()
        self.layers = [str(x) for x in fields.get("layers", [])][:20]
        self.definition_hand_offs = self._hand_offs(fields)
        self.deadline = time.monotonic() + self.limit
        if fields.get("ok") is not True:
            self._raise(fields)
        return self

    def close(self) -> None:
        """Kill the process's whole group, and anything it left behind (re-parented to the
        fork server, a subreaper, which kills and reaps its children)."""
        if self.pid is None:
            return
        for fd in (self.requests, self.results):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):  # a dead server took its children with it (parent death)
            fork_server().reap()
        self.pid = None

    def __enter__(self) -> AnswerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(None, args, kwargs)

    def via(self, caller: Callable) -> Callable:
        """A function that runs ``caller(answer, *args, **kwargs)`` in the answer's process;
        ``caller`` must be one of the exercise's ``HandOffs.calls``."""
        name = f"{caller.__module__}:{caller.__qualname__}"
        if self.rules is None or name not in self.rules.calls:
            raise ValueError(f"{name} is not among the exercise's callers (HandOffs.calls)")

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, args, kwargs)
        call.__wrapped__ = self  # the guards' unwrap() finds the answer under it
        return call

    def _call(self, adapter: str | None, args: tuple, kwargs: dict) -> Any:
        self.hand_offs = []
        try:
            self._send((tuple(args), dict(kwargs)), strict=False, adapter=adapter)
        except WireError as err:  # the check's own inputs: a bug of ours, not the answer's
            raise RuntimeError(f"the grader cannot send this case: {err}") from None
        value, fields = self._receive()
        self.hand_offs = self._hand_offs(fields)
        if fields.get("ok") is not True:
            self._raise(fields)
        return value

    # ----------------------------------------------------------------- the pipe
    def _send(self, value: Any, strict: bool = True, **fields: Any) -> None:
        message = encode(value, strict, **fields)
        try:
            write_message(self.requests, message)
        except (BrokenPipeError, OSError):
            raise AnswerEnded("crashed", self._ended()) from None

    def _read(self, count: int) -> bytes:
        chunks = []
        while count:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise AnswerEnded("time limit", f"stopped after {self.limit:g} s")
            ready, _, _ = select.select([self.results], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.results, min(count, 1 << 20))
            if not chunk:
                raise AnswerEnded("crashed", self._ended())
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _receive(self) -> tuple[Any, dict]:
        (length,) = struct.unpack("<Q", self._read(8))
        if length > MAX_BYTES + 64:
            raise AnswerEnded("crashed", "the answer's process sent more than the grader reads")
        try:
            value, fields = decode(self._read(length))
        except WireError as err:
            raise AnswerEnded("crashed", f"the answer's process sent something that is not an answer ({err})") from None
        return value, fields

    def _ended(self) -> str:
        code = None
        if self.pid is not None:  # it closed its end: wait for it, and kill what it left
            with contextlib.suppress(OSError):
                code = fork_server().reap()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = {"SIGSYS": "a forbidden system call (a new process, thread or program, or another "
                             "process reached)",
                   "SIGXFSZ": "writing a file", "SIGXCPU": "its CPU time",
                   "SIGKILL": "killed"}.get(name, "")
            return f"the answer's process ended by {name}" + (f": {why}" if why else "")
        return "the answer's process ended without a result" + (f" (exit {code})" if code is not None else "")

    @staticmethod
    def _hand_offs(fields: dict) -> list[HandOff]:
        found = []
        for item in fields.get("hand_offs", [])[:50] if type(fields.get("hand_offs")) is list else []:
            if type(item) is list and len(item) == 2 and all(type(x) is str for x in item):
                found.append(HandOff(item[0][:20], item[1][:200]))
        return found

    def _raise(self, fields: dict) -> None:
        if "forbidden" in fields:
            raise AnswerEnded("refused", f"stopped: the answer tried to {str(fields['forbidden'])[:200]}, "
                                         "which no answer needs")
        error = fields.get("error")
        if type(error) is not dict:
            raise AnswerEnded("crashed", "the answer's process sent an error without its description")
        name, message, where = (str(error.get(k, ""))[:300] for k in ("type", "message", "where"))
        kind = getattr(builtins, name, None)
        text = message + (f" ({where})" if where else "")
        again: Exception = RuntimeError(f"{str(error.get('name', name))[:60]}: {text}")
        if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
            with contextlib.suppress(TypeError):  # a built-in that takes other arguments
                again = kind(text)
        raise again


class ForkServer:
    """The process the answers' processes are forked from (:func:`attncourse.course.sandbox.child.serve`).

    Started once per grading process, as a fresh interpreter that imports NumPy, torch and
    the sandbox's own modules (never a check), in a session of its own, with an empty
    working folder and a minimal environment; it dies with the grader.
    """

    def __init__(self) -> None:
        import socket

        self.workdir = tempfile.mkdtemp(prefix="attncourse-answers-")
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT.format(root=str(COURSE_ROOT), fd=theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), close_fds=True, cwd=self.workdir,
                env=_environment(self.workdir), start_new_session=True)
        finally:
            theirs.close()
        self.socket = ours
        self.socket.settimeout(STARTUP_SECONDS)
        self.statuses: dict[int, int] = {}
        self.owner = os.getpid()

    def _recv(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.socket.recv(count - len(data))
            if not chunk:
                raise OSError("the fork server is gone")
            data += chunk
        return data

    def fork(self, requests_in: int, results_out: int) -> int:
        """A new answer's process with these two pipe ends (its standard input and result
        descriptor); its pid."""
        import socket

        socket.send_fds(self.socket, [b"fork"], [requests_in, results_out])
        (pid,) = struct.unpack("<q", self._recv(8))
        return pid

    def reap(self) -> int | None:
        """Kill whatever the server's children are (the answer's process and anything it
        left behind), wait for them, and say how the last answer's process ended (its exit
        code, minus the signal), if it ended then."""
        self.socket.sendall(b"kill")
        (status,) = struct.unpack("<q", self._recv(8))
        return None if status == UNKNOWN_STATUS else status

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _stat(pid: str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command's name (state, ppid, pgrp, session...)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


_SERVER: ForkServer | None = None


def fork_server() -> ForkServer:
    """This grading process's fork server, started on first use (and again if it died)."""
    global _SERVER
    if _SERVER is not None and (_SERVER.owner != os.getpid() or _SERVER.process.poll() is not None):
        _SERVER = None
    if _SERVER is None:
        if not _PROTECTED:
            protect_grader()
        _SERVER = ForkServer()
        atexit.register(_SERVER.close)
    return _SERVER


__all__ = ["AnswerEnded", "AnswerProcess", "COURSE_ROOT", "ForkServer", "MEMORY", "fork_server", "is_stub_source",
           "protect_grader"]
