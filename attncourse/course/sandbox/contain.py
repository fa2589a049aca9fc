"""The operating system's limits on the process that runs a student's answer.

:func:`contain` runs in the answer's process once its modules are imported, before the
answer's code exists there, and returns the names of the layers that ran (a kernel too old
for one leaves it out, and the grade of record says so):

- ``rlimits``: memory, CPU time, no file grown (``RLIMIT_FSIZE`` 0), descriptors, no core,
  no new process;
- ``no_new_privs``, ``not_dumpable``, ``parent_death`` (``prctl``);
- ``landlock`` (ABI 1+): nothing written anywhere; files read only where Python and the
  installed packages are (not the course's repository, the submissions or another
  process's ``/proc``); ABI 4+: no TCP; ABI 6+: no signal out, no abstract socket;
- ``seccomp``: new processes, programs, ``ptrace``, mounts and namespaces kill the
  process; sockets and every call that writes or changes a file fail with an error.

Landlock is called through :mod:`ctypes`: no binding covers its network and scope rules.

References
----------
Linux kernel documentation, "Landlock: unprivileged access control" (ABI 1-7);
``seccomp(2)``; ``setrlimit(2)``; ``prctl(2)``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys
from collections.abc import Iterable

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_VERSION = 1
_RULE_PATH_BENEATH = 1
# Filesystem rights (ABI 1 unless noted).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_FS_WRITE_ABI1 = sum(1 << i for i in range(4, 13))  # remove, make (char, dir, reg, sock...)
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2  # ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def prctl(option: int, value: int) -> None:
    """``prctl(option, value)``; OSError on failure."""
    if _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(0, int(version))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def landlock(readable: Iterable[str]) -> int:
    """Restrict this process with Landlock: read only beneath ``readable``, write nowhere,
    no TCP, no signals or abstract sockets outside. Returns the ABI used (0: not available,
    nothing done)."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    read = _EXECUTE | _READ_FILE | _READ_DIR
    fs = read | _WRITE_FILE | _FS_WRITE_ABI1
    fs |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    attr = _RulesetAttr(fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(_libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                                   ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        for path in dict.fromkeys(readable):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path this machine does not have
            try:
                rights = read if os.path.isdir(path) else _EXECUTE | _READ_FILE
                rule = _PathBeneath(rights, fd)
                _check(_libc.syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                     ctypes.byref(rule), ctypes.c_uint32(0)), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def readable_paths(course_root: str) -> list[str]:
    """Where the answer's process may read: the system's libraries and configuration,
    ``/sys``, ``/dev``, its own ``/proc/<pid>`` and ``/proc``'s machine-wide facts (CPU,
    memory), Python's installation and every folder on
    ``sys.path``, except the course's repository (``course_root``) and, in a folder that
    holds the package ``attncourse`` itself, that package (its other entries one by one)."""
    course_root = os.path.realpath(course_root)
    # Of /proc, this process's own folder and the machine's facts: not another process's
    # command line (a grader's --seed), environment or descriptors.
    paths = ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/sys", "/dev",
             f"/proc/{os.getpid()}", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys"]
    for entry in [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, *sys.path]:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == course_root or course_root.startswith(real + os.sep):
            continue  # the repository or a folder above it: never as a whole
        if os.path.isdir(os.path.join(real, "attncourse")):
            paths += [os.path.join(real, name) for name in os.listdir(real)
                      if not name.startswith("attncourse")]
        else:
            paths.append(real)
    return paths


def _rlimit(which: int, soft: int, hard: int | None = None) -> None:
    old_soft, old_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if old_hard != resource.RLIM_INFINITY:
        hard = min(hard, old_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _virtual_memory() -> int:
    """This process's virtual memory now, bytes (0 if unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rlimits(memory: int, cpu_seconds: float) -> None:
    """The resource limits: ``memory`` bytes of address space beyond what is mapped now,
    ``cpu_seconds`` of CPU time (soft; killed 2 s later), no file growth, no core file,
    no new process (see the module's docstring)."""
    _rlimit(resource.RLIMIT_AS, _virtual_memory() + memory)
    cpu = max(1, int(cpu_seconds) + 1)
    _rlimit(resource.RLIMIT_CPU, cpu, cpu + 2)
    _rlimit(resource.RLIMIT_FSIZE, 0)
    _rlimit(resource.RLIMIT_CORE, 0)
    _rlimit(resource.RLIMIT_NOFILE, 256)
    _rlimit(resource.RLIMIT_NPROC, 0)


#: System calls that end the process (no library an answer uses makes them): programs,
#: other processes reached, mounts, namespaces, kernel modules and the kernel's other doors.
_KILLED = (
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open",
    "pidfd_getfd", "pidfd_send_signal", "kcmp", "mount", "umount2", "pivot_root", "chroot", "setns",
    "unshare", "swapon", "swapoff", "reboot", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "fanotify_init", "open_by_handle_at", "name_to_handle_at", "move_mount",
    "fsopen", "fsmount", "open_tree", "memfd_secret",
)
#: System calls refused with an error (a library may try them and carry on without):
#: sockets, and whatever creates, removes or changes a file.
_REFUSED = (
    "socket", "socketpair", "creat", "truncate", "ftruncate", "fallocate", "unlink", "unlinkat", "rename", "renameat",
    "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat", "symlink", "symlinkat", "chmod",
    "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
    "utimensat", "futimesat", "mknod", "mknodat", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr",
)
#: Flags of open(2) that write: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND.
_WRITE_FLAGS = (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND)
_CLONE_THREAD = 0x00010000
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")


def _pyseccomp():
    """The binding with libseccomp loaded, or ``None``: loaded before the other layers, since
    finding the library runs the compiler on a temporary file."""
    try:
        import pyseccomp

        pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    except (ImportError, OSError, RuntimeError, AttributeError):
        return None
    return pyseccomp


def seccomp(allow_threads: bool) -> bool:
    """Load the system-call filter (see the module's docstring); False if libseccomp or its
    binding is missing (nothing done)."""
    sc = _pyseccomp()
    if sc is None:
        return False
    flt = sc.SyscallFilter(sc.ALLOW)

    def rule(action: int, name: str, *args: object) -> None:
        try:
            flt.add_rule(action, name, *args)
        except (OSError, ValueError, RuntimeError):
            pass  # a system call this architecture does not have (fork on arm64)

    for name in ("fork", "vfork"):
        rule(sc.KILL_PROCESS, name)
    if allow_threads:
        rule(sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, 0))
    else:
        rule(sc.KILL_PROCESS, "clone")
    rule(sc.ERRNO(errno.ENOSYS), "clone3")  # the C library then falls back to clone, seen above
    rule(sc.ERRNO(errno.ENOSYS), "openat2")  # its flags are out of the filter's reach
    for name in _KILLED:
        rule(sc.KILL_PROCESS, name)
    for name in _REFUSED:
        rule(sc.ERRNO(errno.EPERM), name)
    for flag in _WRITE_FLAGS:
        rule(sc.ERRNO(errno.EACCES), "open", sc.Arg(1, sc.MASKED_EQ, flag, flag))
        rule(sc.ERRNO(errno.EACCES), "openat", sc.Arg(2, sc.MASKED_EQ, flag, flag))
    me = os.getpid()
    for name in _SIGNALS:  # a signal to itself only (its first argument is its pid)
        rule(sc.KILL_PROCESS, name, sc.Arg(0, sc.NE, me))
    flt.load()
    return True


#: The layers :func:`contain` knows, in the order it applies them.
LAYERS = ("rlimits", "prctl", "landlock", "seccomp")


def contain(course_root: str, memory: int, cpu_seconds: float, allow_threads: bool = False,
            only: tuple[str, ...] = LAYERS) -> list[str]:
    """Apply every layer this machine offers to the calling process (``only`` some of
    :data:`LAYERS`, to measure what each stops alone); return the names of those applied."""
    layers = []
    _pyseccomp()
    if "rlimits" in only:
        rlimits(memory, cpu_seconds)
        layers.append("rlimits")
    options = ((PR_SET_NO_NEW_PRIVS, 1, "no_new_privs"), (PR_SET_DUMPABLE, 0, "not_dumpable"),
               (PR_SET_PDEATHSIG, 9, "parent_death"))
    for option, value, name in options if "prctl" in only else ():
        try:
            prctl(option, value)
            layers.append(name)
        except OSError:
            pass
    if "landlock" in only:
        if "prctl" not in only:  # Landlock needs no_new_privs (or root's CAP_SYS_ADMIN)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
        abi = landlock(readable_paths(course_root))
        if abi:
            layers.append(f"landlock-abi{abi}")
    if "seccomp" in only and seccomp(allow_threads):
        layers.append("seccomp")
    return layers


__all__ = ["LAYERS", "PR_SET_CHILD_SUBREAPER", "PR_SET_DUMPABLE", "contain", "landlock", "landlock_abi", "prctl",
           "readable_paths", "rlimits", "seccomp"]
