"""Each chapter's own code, one folder per notebook.

``chNN_<name>/`` holds what only ``notebooks/NN_<name>.md`` uses: ``checks.py`` (its
exercises' checks), ``recipe.py`` (what it trains), ``explorer.py`` (its interactive
explorer), ``figures.py`` (its own static figures) and ``rubrics.py`` (the rubrics of its
written exercises). What several chapters share stays in the library layers (the maths,
the modules, decoding, the engine, the explorers' machinery, the checks' engine), which a
chapter's folder imports. No library part imports a chapter's folder and no folder imports
another's (``tests/project/test_layers.py``); :mod:`attncourse.course` finds the rubrics through
:func:`modules`. Adding a chapter is its notebook, its folder and a line in ``_toc.yml``.

``tests/project/test_layers.py`` fails if a module that one chapter alone uses has been left in a
library part.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def folders() -> list[str]:
    """The chapters' folder names (``ch04_self_attention``, ...), in the book's order."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if info.ispkg and info.name.startswith("ch"))


def folder(stem: str) -> str:
    """The folder of notebook ``stem``: ``04_self_attention`` -> ``ch04_self_attention``."""
    return f"ch{stem}"


def modules(role: str, stem: str | None = None) -> list[ModuleType]:
    """The chapters' modules whose name ends with ``role``, imported, in the book's order.

    ``modules("checks")`` gives every folder's ``checks`` (and ``kernel_checks``);
    ``stem`` (a notebook's file stem) keeps one chapter's. A folder without such a module
    adds nothing.
    """
    names = [folder(stem)] if stem is not None else folders()
    found = []
    for name in names:
        for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent / name)]),
                           key=lambda info: info.name):
            if info.name.endswith(role):
                found.append(importlib.import_module(f"{__name__}.{name}.{info.name}"))
    return found


def check(name: str) -> Callable:
    """The ``check_*`` function ``name``: from :mod:`attncourse.checks` or a chapter's checks.

    Raises
    ------
    AttributeError
        If no check module has a function of that name.
    """
    import attncourse.checks as shared

    for module in [shared, *modules("checks")]:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"no check named {name!r} in attncourse.checks or a chapter's checks")


__all__ = ["check", "folder", "folders", "modules"]
