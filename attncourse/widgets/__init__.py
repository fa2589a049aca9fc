"""Interactive explorers for notebooks, built with ipywidgets on top of :mod:`attncourse.viz`.

Each explorer draws the same static figures that the chapters show next to it,
so what a learner sees while exploring matches the printed page.
They share their layout, display and redrawing through
:class:`attncourse.widgets.base.Explorer`.
"""

from attncourse.widgets.explorer import AttentionExplorer

__all__ = [
    "AttentionExplorer",
]
