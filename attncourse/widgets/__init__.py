"""Interactive explorers for notebooks, built with ipywidgets on top of :mod:`attncourse.viz`.

Each explorer draws the same static figures that the chapters show next to it,
so what a learner sees while exploring matches the printed page.
They share their layout, display and redrawing through
:class:`attncourse.widgets.base.Explorer`.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "explorer": ("AttentionExplorer",),
})

__all__ = [
    "AttentionExplorer",
]
