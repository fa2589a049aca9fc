"""The attention variants a :class:`~attncourse.nn.spec.DecoderSpec` can name, by name.

A variant's module registers it in one line, :func:`register_attention`; the package's are
imported by :mod:`attncourse.nn.variants`, others are named (comma-separated module names)
in the environment variable ``ATTNCOURSE_VARIANTS`` and imported on the registry's first read.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from torch import nn

#: The environment variable naming the modules of variants defined outside the package.
VARIANTS_VARIABLE = "ATTNCOURSE_VARIANTS"


@dataclass(frozen=True)
class AttentionVariant:
    """A registered attention variant: its options dataclass and its builder.

    ``build(options, *, d_model, num_heads, causal, positional, rope_base)`` returns a
    ``DecoderAttention``; it gets ``rope_scaling`` only if it takes that keyword.
    """

    name: str
    options: type
    build: Callable[..., nn.Module]


class _Variants(Mapping):
    """The registry; its first read imports the modules named in ``ATTNCOURSE_VARIANTS``."""

    def __init__(self) -> None:
        self._table: dict[str, AttentionVariant] = {}
        self._loaded = False

    def _load(self) -> dict[str, AttentionVariant]:
        if not self._loaded:
            self._loaded = True  # before the imports: their own registrations must not load again
            for name in filter(None, (n.strip() for n in os.environ.get(VARIANTS_VARIABLE, "").split(","))):
                try:
                    importlib.import_module(name)
                except ImportError as error:
                    raise ImportError(f"{VARIANTS_VARIABLE} names module {name!r}, which does not import: "
                                      f"{error}") from error
        return self._table

    def __getitem__(self, name: str) -> AttentionVariant:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"ATTENTION_VARIANTS({sorted(self._load())})"


#: The attention variants by name; :func:`register_attention` adds one.
ATTENTION_VARIANTS: Mapping[str, AttentionVariant] = _Variants()


def register_attention(name: str, options: type, build: Callable[..., nn.Module]) -> AttentionVariant:
    """Register variant ``name`` for :class:`AttentionSpec`, from its module at import.

    Raises ``TypeError`` unless ``options`` is a dataclass, ``ValueError`` if taken.
    """
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"the options of attention variant {name!r} must be a dataclass, got {options!r}")
    variant = AttentionVariant(name, options, build)
    table = ATTENTION_VARIANTS._table  # not a read: registering loads nothing
    if table.get(name, variant) != variant:
        raise ValueError(f"attention variant {name!r} is already registered")
    table[name] = variant
    return variant



__all__ = ["ATTENTION_VARIANTS", "VARIANTS_VARIABLE", "AttentionVariant", "register_attention"]
