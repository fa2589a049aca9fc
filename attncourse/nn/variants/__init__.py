"""Every attention variant a :class:`~attncourse.nn.spec.DecoderSpec` can name, registered by importing it.

Each variant's module registers itself (:func:`~attncourse.nn.spec.register_attention`, one
line at its end); this package imports them, so adding a variant to the package is its module
and one line here. :data:`~attncourse.nn.spec.ATTENTION_VARIANTS` imports this package the first
time it is read.

Variants defined outside the package are named in the environment variable
``ATTNCOURSE_VARIANTS``: importable module names, separated by commas, imported after the
package's own. That is how a fresh process (``python -m attncourse train-lm --attention NAME``,
``sample`` of its checkpoint) sees a variant defined in a user's module or in a test file, e.g.::

    ATTNCOURSE_VARIANTS=my_variants python -m attncourse train-lm --attention mine ...

Raises
------
ImportError
    If a module named in ``ATTNCOURSE_VARIANTS`` cannot be imported (the message names the variable).
"""

import importlib
import os

from attncourse.nn import (  # noqa: F401 (each registers its variant)
    causal_attention,
    gated,
    memory_attention,
    mla,
)

#: The environment variable naming the modules of further variants.
VARIANTS_VARIABLE = "ATTNCOURSE_VARIANTS"


def _import_named() -> None:
    for name in filter(None, (n.strip() for n in os.environ.get(VARIANTS_VARIABLE, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ImportError(f"{VARIANTS_VARIABLE} names module {name!r}, which does not import: {error}") from error


_import_named()

__all__ = ["VARIANTS_VARIABLE"]
