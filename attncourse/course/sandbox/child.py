"""The process that runs one student's answer: inputs in, outputs out, nothing else.

A fresh interpreter (``python -I``, empty folder, minimal environment) imports NumPy,
torch and this module, never a check, a case generator, a reference, the seed or an
expected value, and forks one process per exercise (:func:`serve`, :func:`answer`), which
keeps standard input and the result descriptor only. It reads the setup (the answer's
source, its name, its hand-off rules, the course modules it may use), imports those,
contains itself (:func:`attncourse.course.sandbox.contain.contain`), then runs each call
asked for under three observers (a ``TorchFunctionMode``, a ``TorchDispatchMode`` and
:func:`attncourse.checks.guard.watching`), checking after each call that they are still in
place, and answers with one message (:mod:`attncourse.course.sandbox.wire`). Whatever the
answer does here reaches only its own outputs, which the grader validates.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from dataclasses import replace
from typing import Any

#: The descriptor an answer's process writes its answers to; requests come on standard input.
RESULT_FD = 3


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
        message = encode(None, ok=False, error={"type": "TypeError", "message": f"the result cannot be graded: {err}",
                                                "where": ""}, hand_offs=fields.get("hand_offs", []))
    write_message(RESULT_FD, message)


def _where(err: BaseException, filename: str) -> str:
    """``line 3 in my_softmax: `return e / e.sum()``` for the answer's deepest frame.

    Only the answer's own lines are looked up (from the line cache): reading another
    frame's source file could be the course's, which the tripwire refuses."""
    frames = [f for f in traceback.StackSummary.extract(traceback.walk_tb(err.__traceback__), lookup_lines=False)
              if f.filename == filename]
    if not frames:
        return ""
    frame = frames[-1]
    import linecache

    line = linecache.getline(filename, frame.lineno).strip() if frame.lineno else ""
    return f"line {frame.lineno} in {frame.name}" + (f": `{line}`" if line else "")


def _error(err: BaseException, filename: str) -> dict:
    text = " ".join(str(err).split())[:300]
    builtin = next((c for c in type(err).__mro__ if c.__module__ == "builtins"), Exception)
    return {"type": builtin.__name__,
            "name": type(err).__name__, "message": text, "where": _where(err, filename)}


class Observers:
    """The three observers of a run (see the module's docstring) and what they saw."""

    def __init__(self, rules: Any, learner: Any) -> None:
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

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

        class Dispatched(TorchDispatchMode):
            """Records the exercise's hand-offs among the operators that reach torch's
            dispatcher: ``torch.ops.aten._softmax`` and any other route below the Python API."""

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = getattr(getattr(func, "overloadpacket", func), "__name__", "") or ""
                if name.lstrip("_") in stripped:
                    seen.append(HandOff("library", f"torch.ops.aten.{name}"))
                return func(*args, **(kwargs or {}))

        stripped = {n.lstrip("_") for n in names}
        self.mode = Recorder()
        self.dispatch = Dispatched()
        self.torch = torch

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, list]:
        """``fn(*args, **kwargs)`` observed: ``(result, hand-offs)``. An exception propagates;
        the hand-offs seen until then are in ``self.last``."""
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        from attncourse.checks.guard import HandOff, watching

        self.torch_seen.clear()
        seen: list = []
        tampered = False
        try:
            with watching(self.rules, self.learner) as seen, self.dispatch, self.mode:
                profile = sys.getprofile()
                try:
                    result = fn(*args, **kwargs)
                finally:
                    stack = _get_current_function_mode_stack()
                    tampered = (sys.getprofile() is not profile or not stack or stack[-1] is not self.mode
                                or _get_current_dispatch_mode() is not self.dispatch)
        finally:
            self.last = list(self.torch_seen) + list(seen)
            if tampered:
                self.last.append(HandOff("observers", ""))
        return result, self.last


#: Exit status of an answer's process stopped by :func:`tripwire`.
EXIT_FORBIDDEN = 86
#: Audit events no answer has a reason to raise: new processes and programs, signals, the
#: network, C functions looked up by name (a system call through ``ctypes``), and every
#: change to a file or folder.
_FORBIDDEN_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.killpg", "socket.__new__", "socket.connect", "socket.bind",
    "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "ctypes.dlopen", "ctypes.dlsym",
    "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
    "os.link", "os.symlink", "os.utime", "os.chflags", "os.lchflags", "os.setxattr",
    "os.removexattr", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
    "shutil.move", "shutil.rmtree", "shutil.chown", "shutil.make_archive", "shutil.unpack_archive",
    "tempfile.mkstemp", "tempfile.mkdtemp", "mmap.__new__", "sys.remote_exec",
})


def tripwire(course_root: str) -> None:
    """Stop this process, the reason on the result descriptor, when the answer tries through
    Python what no answer needs (an audit hook, PEP 578): :data:`_FORBIDDEN_EVENTS`, a signal
    out, a file opened for writing, the course's files or another ``/proc``. The contained
    process refuses these anyway; the tripwire makes the attempt itself score 0.
    """
    import re

    from attncourse.course.sandbox.contain import readable_paths

    me = os.getpid()
    root = os.path.realpath(course_root) + os.sep
    readable = tuple(os.path.realpath(p) + os.sep for p in readable_paths(course_root))  # a venv inside
    other_proc = re.compile(r"^/proc/(\d+)(/|$)")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def outside(path: object) -> str | None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return None
        real = os.path.realpath(path)
        if (real.startswith(root) or real == root.rstrip(os.sep)) and not real.startswith(readable):
            return f"read the course's files ({path})"
        for form in (os.path.normpath(os.path.abspath(path)), real):  # /proc/<pid>/fd/0 resolves elsewhere
            match = other_proc.match(form)
            if match and int(match.group(1)) != me:
                return f"look into another process ({path})"
        return None

    def stop(reason: str) -> None:
        from attncourse.course.sandbox.wire import encode, write_message

        with contextlib.suppress(BaseException):
            write_message(RESULT_FD, encode(None, ok=False, forbidden=reason[:200], hand_offs=[]))
        os._exit(EXIT_FORBIDDEN)

    def hook(event: str, args: tuple) -> None:
        if event in _FORBIDDEN_EVENTS:
            stop(f"call {event}")
        elif event == "os.kill" and args and args[0] not in (me, 0):
            stop(f"signal process {args[0]}")
        elif event == "open" and args:
            mode, flags = (args[1] if len(args) > 1 else "") or "", (args[2] if len(args) > 2 else 0) or 0
            if any(c in str(mode) for c in "wax+") or (isinstance(flags, int) and flags & write_flags):
                stop(f"open {args[0]!r} for writing")
            why = outside(args[0])
            if why:
                stop(why)
        elif event in ("os.listdir", "os.scandir") and args:
            why = outside(args[0])
            if why:
                stop(why)

    sys.addaudithook(hook)


def warm_up() -> None:
    """What every answer's process needs, done once in the fork server: NumPy and torch (one
    thread), Triton's choice of its interpreter, the observers' first use (entering a
    dispatch mode imports torch's compiler), the temporary folder and torch's cache folder
    (asked for on first use; nothing is written later), and tqdm without its monitor
    thread (no thread may start)."""
    import tempfile

    import numpy  # noqa: F401 - the inputs' format needs it
    import torch

    torch.set_num_threads(1)
    # Triton chooses its interpreter when triton.language is first imported (torch's
    # compiler imports it below): the course's choice is made first.
    import attncourse.kernels.triton_setup  # noqa: F401

    observers = Observers(None, None)
    observers.run(torch.ones(2).add, 1)
    tempfile.gettempdir()
    os.makedirs(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "inductor"), exist_ok=True)
    with contextlib.suppress(ImportError):
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    import attncourse.course.sandbox.contain as contain

    contain._pyseccomp()  # finding libseccomp runs the compiler: not after the limits


def serve(control: int) -> None:
    """The fork server: warm up, then fork one answer's process per request on ``control``
    (a UNIX socket to the grader, which sends ``fork`` with the process's two pipe ends,
    and ``kill`` when the exercise ends). It holds nothing of the grade either."""
    import signal
    import socket
    import struct

    from attncourse.course.sandbox.contain import (
        PR_SET_CHILD_SUBREAPER,
        PR_SET_DUMPABLE,
        PR_SET_PDEATHSIG,
        prctl,
    )

    for option, value in ((PR_SET_DUMPABLE, 0), (PR_SET_CHILD_SUBREAPER, 1), (PR_SET_PDEATHSIG, 9)):
        with contextlib.suppress(OSError):
            prctl(option, value)
    warm_up()
    last = 0
    sock = socket.socket(fileno=control)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4, 2)
        except OSError:
            return
        if not message:
            return  # the grader is gone
        if message == b"fork" and len(fds) == 2:
            pid = os.fork()
            if pid == 0:
                try:
                    sock.close()
                    os.setsid()  # a session and process group of its own, killed whole
                    os.dup2(fds[0], 0)
                    os.dup2(fds[1], RESULT_FD)
                    keep = {0, 1, 2, RESULT_FD}
                    for fd in [int(f) for f in os.listdir("/proc/self/fd")]:
                        if fd not in keep:
                            with contextlib.suppress(OSError):
                                os.close(fd)
                    answer()
                finally:
                    os._exit(0)
            for fd in fds:
                os.close(fd)
            last = pid
            sock.sendall(struct.pack("<q", pid))
        elif message == b"kill":  # the exercise is over: this process's children, orphans included
            sock.sendall(struct.pack("<q", _kill_children(signal.SIGKILL, last)))
        else:
            for fd in fds:
                os.close(fd)


#: What :func:`_kill_children` reports when it did not see the answer's process end.
UNKNOWN_STATUS = 1 << 32


def _kill_children(sig: int, watched: int) -> int:
    """Kill and reap every child of this process (an answer's process, and whatever it
    left re-parented here: the server is a subreaper); return how ``watched`` ended (its
    exit code, or minus the signal that ended it), or :data:`UNKNOWN_STATUS`."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                parent = stat.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if parent == me:
            with contextlib.suppress(OSError):
                os.kill(int(entry), sig)
    found = UNKNOWN_STATUS
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return found
        if pid == watched:
            found = os.waitstatus_to_exitcode(status)


def answer() -> None:
    """One answer's process, forked from the server: read the setup, import what the
    exercise may use, contain, define the answer, then serve the grader's calls."""
    from attncourse.checks.guard import HandOffs
    from attncourse.course.sandbox.contain import contain

    _, setup = read_request()
    # The course's modules this exercise may use, and the caller of a kernel or a loss:
    # imported now, since after the limits the course's files are unreadable.
    import importlib

    for module in setup["preload"]:
        importlib.import_module(module)
    adapters = {}
    for name in setup["adapters"]:
        module, _, qualname = name.partition(":")
        adapters[name] = getattr(importlib.import_module(module), qualname)
    rules = HandOffs(**setup["rules"]) if setup["rules"] is not None else None
    layers = contain(setup["course_root"], setup["memory"], setup["cpu_seconds"], setup["allow_threads"])
    sys.dont_write_bytecode = True
    filename = f"<answer {setup['function']}>"
    import linecache

    # The checks' stub test and Triton's @jit read the source through linecache.
    linecache.cache[filename] = (len(setup["source"]), None, setup["source"].splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "attncourse_answer", "__builtins__": __builtins__}
    # Nobody reads a warning here, and showing one reads its source line (maybe the course's).
    import warnings

    warnings.simplefilter("ignore")
    tripwire(setup["course_root"])
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


