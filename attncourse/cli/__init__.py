"""The command line, ``python -m attncourse`` (:mod:`~attncourse.cli.commands`): ``train`` and
``evaluate`` for encoder-decoders (:mod:`~attncourse.cli.train_evaluate`), ``train-lm`` and ``sample`` for
chapter 7's language model (:mod:`~attncourse.cli.lm`), and the options and
their checks (:mod:`~attncourse.cli.options`). It builds runs from the recipes
of :mod:`attncourse.recipes` and trains them with :mod:`attncourse.train`.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "commands": ("main",),
})

__all__ = ["main"]
