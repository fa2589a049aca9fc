"""Lazy re-exports for the packages' ``__init__`` files (PEP 562 ``__getattr__``)."""

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
    """``(__getattr__, __dir__)`` of ``package``, importing ``sources`` on demand.

    ``__getattr__`` raises AttributeError for names neither exported nor submodules.
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
