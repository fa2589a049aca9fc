"""Guards of the exercise checks: the package's references refused, stubs recognised.

A check names the course package's own implementations of what its exercise asks for.
:func:`refused` replaces them, while the learner's function runs, by stand-ins that
record the call and raise :class:`ReferenceCalled`, wherever the loaded ``attncourse``
modules or the learner's namespace (a notebook's globals) hold them, under any name.
:func:`is_stub` tells an unwritten exercise (``...``, ``pass``, ``raise
NotImplementedError()``) from a wrong one.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class ReferenceCalled(BaseException):
    """Raised by the stand-in of a refused reference (a ``BaseException``, so that a
    learner's ``except Exception`` does not hide it)."""


def reference_name(ref: Any) -> str:
    """``attncourse.functional.numpy_attention.softmax``: where a reference is defined."""
    module = getattr(ref, "__module__", None) or ""
    name = getattr(ref, "__qualname__", None) or getattr(ref, "__name__", None) or repr(ref)
    return f"{module}.{name}" if module else name


def unwrap(fn: Any) -> Any:
    """The function under partials, bound methods and ``functools.wraps`` layers."""
    for _ in range(10):
        inner = (getattr(fn, "func", None) if isinstance(fn, functools.partial)
                 else getattr(fn, "__wrapped__", None) or getattr(fn, "__func__", None))
        if inner is None:
            return fn
        fn = inner
    return fn


def is_reference(fn: Any, references: Sequence[Any]) -> Any:
    """The reference that ``fn`` is (or wraps), or ``None``."""
    inner = unwrap(fn)
    code = getattr(inner, "__code__", None)
    for ref in references:
        if inner is ref or (code is not None and code is getattr(unwrap(ref), "__code__", None)):
            return ref
    return None


@contextlib.contextmanager
def refused(references: Sequence[Any], fn: Any) -> Iterator[list[str]]:
    """Replace every reference by a raising stand-in while ``fn`` runs; yield the calls made.

    The stand-ins take the place of the references in every loaded ``attncourse`` module,
    in ``fn``'s globals (a notebook's namespace), whatever name they are bound to there,
    in its closure and its default arguments; everything is put back on exit.
    """
    calls: list[str] = []

    def stand_in(ref: Any) -> Callable:
        name = reference_name(ref)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise ReferenceCalled(name)
        return refuse

    swaps: list[tuple[Any, Any, Any]] = []  # (namespace or closure cell, key, original)
    if references:
        by_id = {id(ref): stand_in(ref) for ref in references}
        spaces = [vars(module) for key, module in list(sys.modules.items())
                  if module is not None and (key == "attncourse" or key.startswith("attncourse."))]
        inner = unwrap(fn)
        own = getattr(inner, "__globals__", None)
        if isinstance(own, dict):
            spaces.append(own)
        for space in spaces:
            for key, value in list(space.items()):
                if id(value) in by_id:
                    swaps.append((space, key, value))
                    space[key] = by_id[id(value)]
        # A reference held by a closure (a function defined inside another) or a default.
        for cell in getattr(inner, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if id(cell.cell_contents) in by_id:
                    swaps.append((cell, None, cell.cell_contents))
                    cell.cell_contents = by_id[id(cell.cell_contents)]
        defaults = getattr(inner, "__defaults__", None)
        if defaults and any(id(d) in by_id for d in defaults):
            swaps.append((inner, "__defaults__", defaults))
            inner.__defaults__ = tuple(by_id.get(id(d), d) for d in defaults)
    try:
        yield calls
    finally:
        for where, key, value in reversed(swaps):
            if isinstance(where, dict):
                where[key] = value
            elif key is None:
                where.cell_contents = value
            else:
                setattr(where, key, value)


def is_stub(fn: Any) -> bool:
    """Whether ``fn``'s body is only ``...``, ``pass``, a docstring or ``raise NotImplementedError``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(unwrap(fn))))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for statement in node.body:
        if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                               and isinstance(statement.value, ast.Constant)):
            continue
        if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement):
            continue
        return False
    return True


__all__ = ["ReferenceCalled", "is_reference", "is_stub", "reference_name", "refused", "unwrap"]
