"""Every attention variant a ``DecoderSpec`` can name, registered on import."""

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
