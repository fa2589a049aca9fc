"""A decoder-only model as data, and the registry of attention variants.

:class:`DecoderSpec` holds the sizes and one spec per part (attention, positions, norm,
FFN). A new attention variant is a module with a ``DecoderAttention``, an options
dataclass and a builder; it registers itself in one line and is named in
:mod:`attncourse.nn.variants` (outside the package: in ``ATTNCOURSE_VARIANTS``)::

    register_attention("mine", MyOptions, MyAttention.from_options)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import attncourse.nn.variants  # noqa: F401 (the package's variants register themselves)
from attncourse.nn.ffn import FFNS
from attncourse.nn.norm import NORMS
from attncourse.nn.registry import (
    ATTENTION_VARIANTS,
    AttentionVariant,
    register_attention,
)
from attncourse.nn.rope import RopeScaling


def _option_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _options(cls: type, value: Any, what: str) -> Any:
    """``value`` as dataclass ``cls``: None -> defaults, a dict -> its fields."""
    if value is None:
        return cls()
    if isinstance(value, Mapping):
        names = _option_names(cls)
        for option in sorted(set(value) - names):
            owners = [repr(other) for other, v in ATTENTION_VARIANTS.items() if option in _option_names(v.options)]
            whose = f", an option of {' and '.join(owners)}" if owners else ""
            raise ValueError(f"{what} has no option {option!r}: it cannot be combined with {option}="
                             f"{value[option]!r} (not with {option}{whose}); its options are "
                             f"{', '.join(sorted(names)) or 'none'}")
        return cls(**value)
    if not isinstance(value, cls):
        raise TypeError(f"{what} takes options of type {cls.__name__}, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class AttentionSpec:
    """A block's attention: a registered variant's ``name`` and its ``options``.

    ``options``: its dataclass, a dict of its fields or None (defaults). Raises
    ``ValueError`` for an unknown name or option, ``TypeError`` for another's.
    """

    name: str = "gqa"
    options: Any = None

    def __post_init__(self) -> None:
        _validate_kind("attention", self.name, ATTENTION_VARIANTS)
        options = _options(ATTENTION_VARIANTS[self.name].options, self.options, f"attention {self.name!r}")
        object.__setattr__(self, "options", options)

    def build(self, d_model: int, num_heads: int, causal: bool, positions: PositionSpec) -> nn.Module:
        """One block's attention (``ValueError`` if the variant refuses it)."""
        inside = positions.kind if positions.kind in INSIDE_ATTENTION else None
        build = ATTENTION_VARIANTS[self.name].build
        extra = {}
        if positions.scaling is not None:  # only then: a builder without the keyword still builds the rest
            if "rope_scaling" not in inspect.signature(build).parameters:
                raise ValueError(f"attention {self.name!r} does not support rope_scaling "
                                 f"(got {positions.rope_scaling!r})")
            extra["rope_scaling"] = positions.scaling
        return build(self.options, d_model=d_model, num_heads=num_heads, causal=causal, positional=inside,
                     rope_base=positions.base, **extra)

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., **options}``, plain values; ``AttentionSpec(d.pop("name"), d)`` rebuilds it."""
        return {"name": self.name, **dataclasses.asdict(self.options)}


def flat_attention(name: str | None, num_heads: int, **options: Any) -> AttentionSpec:
    """The attention that flat options (GPT's keywords, train-lm's) describe.

    None picks ``"mla"`` with ``latent_dim``, else ``"gqa"``; ``ValueError`` if unknown.
    """
    given = {k: v for k, v in options.items() if v is not None}
    chosen = name
    name = name or ("mla" if "latent_dim" in given else "gqa")
    _validate_kind("attention", name, ATTENTION_VARIANTS)
    if "num_kv_heads" not in _option_names(ATTENTION_VARIANTS[name].options) and given.get("num_kv_heads") == num_heads:
        del given["num_kv_heads"]  # multi-head is every variant's meaning: passed only to one with the option
    try:
        return AttentionSpec(name, given)
    except ValueError as error:
        if chosen is None and name == "gqa" and "'mla'" in str(error):
            raise ValueError(f"{error} (latent_dim chooses 'mla')") from None
        raise


#: Position schemes: added to the embeddings, or acting inside attention.
ADDED_TO_EMBEDDINGS: tuple[str, ...] = ("sinusoidal", "learned")
INSIDE_ATTENTION: tuple[str, ...] = ("rope", "alibi")
#: No position information at all ("NoPE"): a causal model still tells positions apart (chapter 12).
NO_POSITIONS: tuple[str, ...] = ("none",)


@dataclass(frozen=True)
class PositionSpec:
    """How the model knows positions: ``kind``, RoPE's ``base``, its stretching.

    ``rope_scaling`` stretches RoPE by ``rope_factor``; ``ValueError`` if invalid.
    """

    kind: str = "rope"
    base: float = 10000.0
    rope_scaling: str | None = None
    rope_factor: float = 1.0
    original_len: int | None = None

    def __post_init__(self) -> None:
        _validate_kind("positions", self.kind, dict.fromkeys(ADDED_TO_EMBEDDINGS + INSIDE_ATTENTION + NO_POSITIONS))
        if not float(self.base) > 1:
            raise ValueError(f"RoPE's base must be > 1, got {self.base!r}")
        object.__setattr__(self, "base", float(self.base))
        if self.rope_scaling is None:
            if self.rope_factor != 1.0:
                raise ValueError(f"rope_factor={self.rope_factor!r} needs rope_scaling ('pi', 'ntk' or 'yarn')")
            return
        if self.kind != "rope":
            raise ValueError(f"rope_scaling={self.rope_scaling!r} stretches RoPE: it needs positions 'rope', "
                             f"not {self.kind!r}")
        RopeScaling(self.rope_scaling, self.rope_factor, self.original_len)  # checks the options
        object.__setattr__(self, "rope_factor", float(self.rope_factor))

    @property
    def scaling(self) -> RopeScaling | None:
        """The :class:`~attncourse.nn.rope.RopeScaling` of these options, or None."""
        if self.rope_scaling is None:
            return None
        return RopeScaling(self.rope_scaling, self.rope_factor, self.original_len)

    def to_dict(self) -> dict[str, Any]:
        """Plain values; ``PositionSpec(**d)`` rebuilds it."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NormSpec:
    """The norm before each sublayer and at the end: layernorm, rmsnorm or none."""

    kind: str = "layernorm"
    eps: float = 1e-5

    def __post_init__(self) -> None:
        _validate_kind("norm", self.kind, NORMS)
        if not float(self.eps) > 0:
            raise ValueError(f"norm eps must be > 0, got {self.eps!r}")

    def build(self, d_model: int) -> nn.Module:
        """One normalisation layer of width ``d_model`` (nn.Identity for ``"none"``)."""
        return NORMS[self.kind](d_model, self.eps)


@dataclass(frozen=True)
class FFNSpec:
    """The feed-forward sublayer: relu, gelu, swiglu or none, ``d_ff`` wide."""

    kind: str = "relu"
    d_ff: int = 256
    bias: bool = True

    def __post_init__(self) -> None:
        _validate_kind("ffn", self.kind, FFNS)
        _validate_size("d_ff", self.d_ff)

    def build(self, d_model: int) -> nn.Module | None:
        """One FFN sublayer ``(batch, seq_len, d_model)`` -> same shape, or None for ``"none"``."""
        build = FFNS[self.kind]
        return None if build is None else build(d_model, self.d_ff, self.bias)


def _attention_spec(entry: Any) -> AttentionSpec:
    """An entry of a per-block attention: an AttentionSpec, a dict of its fields, or a name."""
    if isinstance(entry, str):
        return AttentionSpec(entry)
    if isinstance(entry, Mapping):
        options = dict(entry)
        return AttentionSpec(options.pop("name", "gqa"), options)
    if not isinstance(entry, AttentionSpec):
        raise TypeError(f"an entry of layer_attention must be an AttentionSpec, a dict or a name, got "
                        f"{type(entry).__name__}")
    return entry


def _validate_kind(what: str, kind: str, table: Mapping[str, Any]) -> None:
    if kind not in table:
        more = ("; a variant defined outside attncourse is named by its module in ATTNCOURSE_VARIANTS"
                if table is ATTENTION_VARIANTS else "")
        raise ValueError(f"{what} must be one of {tuple(table)}, got {kind!r}{more}")


def _validate_size(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class DecoderSpec:
    """Everything a decoder-only model (:class:`~attncourse.nn.gpt.GPT`) is built from.

    Sizes, ``causal``, ``dropout``, a spec (or dict) per part, output tie, embedding
    scale, a hybrid's ``layer_attention``. Raises ``ValueError`` if invalid.
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 8
    num_layers: int = 2
    max_len: int = 256
    causal: bool = True
    dropout: float = 0.0
    attention: AttentionSpec = field(default_factory=AttentionSpec)
    positions: PositionSpec = field(default_factory=PositionSpec)
    norm: NormSpec = field(default_factory=NormSpec)
    ffn: FFNSpec = field(default_factory=FFNSpec)
    tie_output: bool = True
    scale_embedding: bool = True
    layer_attention: tuple[AttentionSpec, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len"):
            _validate_size(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        for name, cls in (("attention", AttentionSpec), ("positions", PositionSpec), ("norm", NormSpec),
                          ("ffn", FFNSpec)):
            value = getattr(self, name)
            if isinstance(value, Mapping) and cls is AttentionSpec:
                options = dict(value)
                value = AttentionSpec(options.pop("name", "gqa"), options)
            elif isinstance(value, Mapping):
                value = cls(**value)
            if not isinstance(value, cls):
                raise TypeError(f"{name} must be a {cls.__name__} or a dict, got {type(value).__name__}")
            object.__setattr__(self, name, value)
        if self.layer_attention is not None:
            object.__setattr__(self, "layer_attention", self._per_layer(self.layer_attention))
        checked: list[AttentionSpec] = []
        for attention in self.attentions():
            if attention not in checked:
                checked.append(attention)
                self._validate_attention(attention)

    def _per_layer(self, given: Any) -> tuple[AttentionSpec, ...]:
        """``layer_attention`` as a tuple of AttentionSpec, one per block (checked)."""
        if isinstance(given, (str, Mapping, AttentionSpec)) or not isinstance(given, (tuple, list)):
            raise TypeError(f"layer_attention must be a tuple with one AttentionSpec per block, got "
                            f"{type(given).__name__}")
        if len(given) != self.num_layers:
            raise ValueError(f"layer_attention has {len(given)} entries for num_layers={self.num_layers}: "
                             f"give one attention per block")
        return tuple(_attention_spec(entry) for entry in given)

    def attentions(self) -> tuple[AttentionSpec, ...]:
        """The attention of each block, in order (``layer_attention``, or ``attention`` repeated)."""
        return self.layer_attention or (self.attention,) * self.num_layers

    @classmethod
    def layer_pattern(cls, pattern: Any, num_layers: int) -> tuple[AttentionSpec, ...]:
        """``layer_attention`` repeating ``pattern`` over ``num_layers`` blocks.

        E.g. ``("deltanet",) * 3 + ("gqa",)``; ``ValueError`` unless its length divides.
        """
        pattern = tuple(pattern)
        if not pattern or num_layers % len(pattern):
            raise ValueError(f"a layer pattern of {len(pattern)} blocks does not tile num_layers={num_layers}")
        return tuple(_attention_spec(entry) for entry in pattern) * (num_layers // len(pattern))

    def _validate_attention(self, attention: AttentionSpec) -> None:
        """Build ``attention`` on the meta device, so that a clash is refused here."""
        try:
            with torch.device("meta"):
                attention.build(self.d_model, self.num_heads, self.causal, self.positions)
        except ValueError:
            raise
        except Exception:  # noqa: BLE001 - not a refusal: the real build will say what it is
            pass

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (a checkpoint's ``model_config``); ``DecoderSpec(**d)`` rebuilds it."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["attention"] = self.attention.to_dict()
        out["positions"] = self.positions.to_dict()
        for name in ("norm", "ffn"):
            out[name] = dataclasses.asdict(out[name])
        if self.layer_attention is not None:
            out["layer_attention"] = [attention.to_dict() for attention in self.layer_attention]
        return out


__all__ = [
    "ADDED_TO_EMBEDDINGS", "ATTENTION_VARIANTS", "INSIDE_ATTENTION", "NO_POSITIONS", "AttentionSpec",
    "AttentionVariant", "DecoderSpec", "FFNSpec", "NormSpec", "PositionSpec", "flat_attention",
    "register_attention",
]
