"""Where the Triton kernels run: compiled on a CUDA GPU, or interpreted on CPU tensors.

Imported by :mod:`attncourse.kernels` before triton reads ``TRITON_INTERPRET``, it sets
it to 1 if the user left it unset and torch sees no CUDA GPU. Without triton (Linux
x86_64 only), :data:`jit` and :data:`tl` are stand-ins: kernels can be read, not run.
"""

from __future__ import annotations

import os
import sys
import types

import torch

#: ``TRITON_INTERPRET`` as the user left it, before this module looked at it.
_USER_SETTING = os.environ.get("TRITON_INTERPRET")

#: Whether triton's language was imported (by other code) before this module could choose
#: the interpreter. Its standard functions (``tl.max``, ``tl.cdiv``...) are ``@triton.jit``
#: functions defined at that import, so they were compiled ones, and an interpreted kernel
#: that calls them fails with "Cannot call @triton.jit'd outside of the scope of a kernel".
_IMPORTED_TOO_EARLY = False

if _USER_SETTING is None and not torch.cuda.is_available():
    _IMPORTED_TOO_EARLY = "triton.language" in sys.modules
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
    import triton.language as tl
except ImportError:  # not Linux x86_64, or a minimal install
    triton = None
    tl = None

#: Whether ``import triton`` works here.
TRITON_AVAILABLE = triton is not None

#: Whether kernels run under Triton's interpreter (on CPU tensors) rather than compiled.
# read as Triton itself reads it (triton's knobs), not with the course's env_flag
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")

MISSING_MESSAGE = (
    "triton is not installed here: it installs on Linux x86_64 only "
    "(pip install triton==3.9.0, or `make .venv/.installed-stamp` there)"
)


def require_triton() -> None:
    """Raise a one-line ``RuntimeError`` if the kernels cannot run here.

    That is: no triton, triton imported too early, or ``TRITON_INTERPRET=0`` and no GPU.
    """
    if triton is None:
        raise RuntimeError(MISSING_MESSAGE)
    if _IMPORTED_TOO_EARLY:
        raise RuntimeError(
            "triton was imported before attncourse.kernels could set TRITON_INTERPRET=1 (no "
            "CUDA GPU here): import attncourse.kernels first, or set TRITON_INTERPRET=1 "
            "before starting Python")
    if not INTERPRETED and not torch.cuda.is_available():
        raise RuntimeError(
            f"no CUDA GPU here and TRITON_INTERPRET={_USER_SETTING!r} asks for compiled kernels: "
            "unset it, or set TRITON_INTERPRET=1, before starting Python")


def kernel_device() -> torch.device:
    """The device of the tensors the kernels take here: ``cpu`` when interpreted, else ``cuda``."""
    return torch.device("cpu" if INTERPRETED else "cuda")


def describe() -> str:
    """One line saying how the kernels run on this machine."""
    if triton is None:
        return MISSING_MESSAGE
    if INTERPRETED:
        return (f"triton {triton.__version__}: TRITON_INTERPRET=1, kernels run on the CPU "
                "under Triton's interpreter (exact, slow)")
    return f"triton {triton.__version__}: kernels compiled for {torch.cuda.get_device_name()}"


class _MissingKernel:
    """:data:`jit` without triton: readable; launching it says why it cannot run."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__

    def __getitem__(self, grid):
        raise RuntimeError(MISSING_MESSAGE)


if triton is None:
    # Stand-ins so that a module or a notebook cell defining a kernel still runs: the
    # annotations (``BLOCK: tl.constexpr``) are evaluated when the function is defined.
    tl = types.SimpleNamespace(constexpr=object, float32=None, float64=None, float16=None,
                               bfloat16=None)

    def jit(fn=None, **_options):
        """Stand-in for ``triton.jit``: the kernel can be read, not launched."""
        if fn is None:
            return _MissingKernel
        return _MissingKernel(fn)
else:
    jit = triton.jit


__all__ = ["INTERPRETED", "MISSING_MESSAGE", "TRITON_AVAILABLE", "describe", "jit", "kernel_device",
           "require_triton", "tl", "triton"]
