"""A learner's function whose results must be plain numbers, arrays or tensors.

The grade of record (:mod:`attncourse.course.record`) hands each check this wrapper instead
of the learner's function: a result is accepted only if it is, by its exact type, a Python
number, a NumPy array or scalar of numbers, a torch tensor, or a tuple, list or dict (by name) of those.
An object that would compute its value later (when the check converts it, after the guard
stopped watching: ``__array__``, ``__float__``, a subclass of ``ndarray`` or ``Tensor``)
is refused while the guard still watches. The wrapper lives among the checks so that the
guard's package rule does not count it as a hand-off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

_NUMBERS = (int, float, bool, complex)


def plain(value: Any) -> Any:
    """``value`` itself if it is plain (see the module's docstring).

    Raises
    ------
    TypeError
        Naming the type found, for anything else.
    """
    kind = type(value)
    if value is None or kind in _NUMBERS:
        return value
    if kind in (tuple, list):
        return kind(plain(item) for item in value)
    if kind is dict:  # a model's parameters by name (chapter 7b's training loop)
        if not all(type(key) is str for key in value):
            raise TypeError("an answer's dict has names (str) as its keys")
        return {key: plain(item) for key, item in value.items()}
    if kind is np.ndarray or (isinstance(value, np.generic) and kind.__module__ == "numpy"):
        if value.dtype.kind not in "biufc":
            raise TypeError(f"an answer returns numbers, not an array of dtype {value.dtype}")
        return value
    if kind is torch.Tensor:
        return value
    raise TypeError(f"an answer returns numbers, arrays or tensors, not {kind.__name__}")


def plain_results(fn: Callable) -> Callable:
    """``fn``, whose every result goes through :func:`plain` (``functools.wraps``: the checks
    still see ``fn`` under it)."""
    @functools.wraps(fn)
    def answer(*args: Any, **kwargs: Any) -> Any:
        return plain(fn(*args, **kwargs))
    return answer


__all__ = ["plain", "plain_results"]
