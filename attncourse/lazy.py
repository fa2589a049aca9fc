"""Lazy re-exports for the packages' ``__init__`` files (PEP 562).

A package lists which of its modules defines each public name; the name is imported
the first time it is read (``from attncourse.nn import GPT``, ``attncourse.nn.GPT``),
so that importing one module of the package (``import attncourse.nn.gpt``) loads
only what that module needs, not every module the package re-exports. A submodule
reads as an attribute as before (``attncourse.functional.sparse_masks``), imported
on first use too.

Where a re-exported name is also the name of the submodule defining it
(``attncourse.functional.flash_attention``, the function and its module), the name
stays the function's, as it was when the ``__init__`` files imported everything:
the import system's binding of the submodule to the package is ignored for it.

References
----------
PEP 562, "Module __getattr__ and __dir__" (Python 3.7).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping

#: Per package, the re-exported names that are also the names of their submodules.
_SHADOWED: dict[str, frozenset[str]] = {}


class _Package(types.ModuleType):
    """A package whose re-exported name outranks the submodule of the same name."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _SHADOWED.get(self.__name__, ()):
            return  # the import system binding the submodule: the name stays the function's
        super().__setattr__(name, value)


def lazy_exports(package: str, sources: Mapping[str, tuple[str, ...]]) -> tuple[Callable, Callable]:
    """The ``__getattr__`` and ``__dir__`` of package ``package`` that import ``sources`` on demand.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    sources : mapping submodule -> names
        The names each submodule (relative to ``package``) defines and the package re-exports.

    Returns
    -------
    (__getattr__, __dir__)
        To assign to the package's globals. ``__getattr__(name)`` imports the submodule
        defining ``name`` (or the submodule ``name``), caches the value in the package
        and returns it.

    Raises
    ------
    AttributeError
        From ``__getattr__``, for a name that is neither re-exported nor a submodule.
    """
    where = {name: module for module, names in sources.items() for name in names}
    namespace = sys.modules[package].__dict__
    shadowed = frozenset(name for name, module in where.items() if name == module)
    if shadowed:
        _SHADOWED[package] = shadowed
        sys.modules[package].__class__ = _Package

    def __getattr__(name: str):
        module = where.get(name)
        if module is None and name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = f"{package}.{module or name}"
        try:
            value = importlib.import_module(target)
        except ModuleNotFoundError as error:
            if module is not None or error.name != target:
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        if module is not None:
            value = getattr(value, name)
            namespace[name] = value  # the next read finds it without this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
