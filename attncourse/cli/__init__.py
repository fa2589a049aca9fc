"""The command line, ``python -m attncourse`` (:mod:`~attncourse.cli.commands`): ``train`` and
``evaluate`` for encoder-decoders (:mod:`~attncourse.cli.train_evaluate`), ``train-lm`` and ``sample`` for
chapter 7's language model (:mod:`~attncourse.cli.lm`), and the options and
their checks (:mod:`~attncourse.cli.options`). It builds runs from the recipes
of :mod:`attncourse.recipes` and trains them with :mod:`attncourse.train`.
"""

from attncourse.cli.commands import main

__all__ = ["main"]
