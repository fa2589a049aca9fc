"""Interactive explorers for notebooks, built with ipywidgets on :mod:`attncourse.viz`."""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "explorer": ("AttentionExplorer",),
})

__all__ = [
    "AttentionExplorer",
]
