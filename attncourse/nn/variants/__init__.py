"""Every attention variant of the package, registered on import (:mod:`attncourse.nn.registry`)."""

from attncourse.nn import (  # noqa: F401 (each registers its variant)
    causal_attention,
    cla,
    gated,
    indexer_attention,
    memory_attention,
    mla,
    softcap,
)
