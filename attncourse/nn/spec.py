"""A decoder-only model as data: one spec whose parts are specs, and the registry of attention variants.

:class:`DecoderSpec` says everything :class:`~attncourse.nn.gpt.GPT` builds:
the sizes, and one spec for each part of a block,

- the attention (:class:`AttentionSpec`): a variant registered by name in
  :data:`ATTENTION_VARIANTS`, with that variant's own options dataclass;
- the positions (:class:`PositionSpec`): added to the embeddings (sinusoidal,
  learned) or acting inside attention (RoPE with its base, ALiBi);
- the normalisation (:class:`NormSpec`): LayerNorm, RMSNorm or none
  (:mod:`attncourse.nn.norm`);
- the FFN (:class:`FFNSpec`): ReLU, GELU, SwiGLU or none (:mod:`attncourse.nn.ffn`);

and whether the output layer is tied to the embedding. The model reads the
spec and looks each part up by name; it has no branch per variant.

A hybrid gives each block its own attention (``layer_attention``, one
:class:`AttentionSpec` per block, :meth:`DecoderSpec.layer_pattern` builds it from a
repeating pattern): the models of 2025 that keep softmax attention in one block of
four and a fixed-size memory in the others (Qwen3-Next, 2025; Jamba, Lieber et al.
2024, keeps no positions at all in its attention blocks: positions ``"none"``).

A new attention variant is one module, with a class implementing
:class:`~attncourse.nn.protocol.DecoderAttention`, an options dataclass and a
builder ``(options, *, d_model, num_heads, causal, positional, rope_base) ->
module`` (which may also take ``rope_scaling``, passed only when the positions stretch
RoPE). The module registers it itself, in one line::

    register_attention("mine", MyOptions, MyAttention.from_options)

and is named in :mod:`attncourse.nn.variants`, which imports every variant. This module
imports none: :data:`ATTENTION_VARIANTS` imports that package the first time it is read
(as do the modules named in the environment variable ``ATTNCOURSE_VARIANTS``,
comma-separated: a variant defined outside the package, e.g. in a test, reaches a
fresh process such as ``python -m attncourse train-lm --attention NAME``). A variant
whose only change is the score subclasses :class:`~attncourse.nn.causal_attention.CausalSelfAttention`
and replaces its ``attend`` step (:mod:`attncourse.nn.attend`).

A Llama-style model (chapter 11's SmolLM2-135M) reads::

    DecoderSpec(vocab_size=49152, d_model=576, num_heads=9, num_layers=30, max_len=8192,
                attention=AttentionSpec("gqa", GQAOptions(num_kv_heads=3)),
                positions=PositionSpec("rope", base=100000.0),
                norm=NormSpec("rmsnorm", eps=1e-5), ffn=FFNSpec("swiglu", 1536, bias=False),
                tie_output=True, scale_embedding=False)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attncourse.nn.ffn import FFNS
from attncourse.nn.norm import NORMS
from attncourse.nn.rope import RopeScaling


@dataclass(frozen=True)
class AttentionVariant:
    """One registered attention variant: its options dataclass and its builder.

    Attributes
    ----------
    name : str
    options : type
        A dataclass; its default instance must build.
    build : callable
        ``build(options, *, d_model, num_heads, causal, positional, rope_base)`` -> a module
        implementing :class:`~attncourse.nn.protocol.DecoderAttention`; raises ValueError
        for options or a position scheme it does not support. A builder that takes a
        ``rope_scaling`` keyword (:class:`~attncourse.nn.rope.RopeScaling`) gets it when the
        positions stretch RoPE; others are refused then.
    """

    name: str
    options: type
    build: Callable[..., nn.Module]


class _Variants(Mapping):
    """The registry: a read-only mapping name -> :class:`AttentionVariant` that, on its first read,
    imports :mod:`attncourse.nn.variants` (every variant of the package registers itself there)."""

    def __init__(self) -> None:
        self._table: dict[str, AttentionVariant] = {}
        self._loaded = False

    def _load(self) -> dict[str, AttentionVariant]:
        if not self._loaded:
            self._loaded = True  # before the import: the variants' own registrations must not load again
            importlib.import_module("attncourse.nn.variants")
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
    """Make an attention variant available to :class:`AttentionSpec` under ``name``.

    Called by the variant's own module, at import (see the module's docstring).

    Raises
    ------
    TypeError
        If ``options`` is not a dataclass.
    ValueError
        If ``name`` already names another variant.
    """
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"the options of attention variant {name!r} must be a dataclass, got {options!r}")
    variant = AttentionVariant(name, options, build)
    table = ATTENTION_VARIANTS._table  # not a read: registering does not load the package's variants
    if table.get(name, variant) != variant:
        raise ValueError(f"attention variant {name!r} is already registered")
    table[name] = variant
    return variant


def _option_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _options(cls: type, value: Any, what: str) -> Any:
    """``value`` as an instance of dataclass ``cls``: None -> defaults, a dict -> its fields.

    An option ``cls`` lacks is refused here, for every entry point (a dict, GPT's keywords,
    train-lm's options), naming the variants that have it.
    """
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
    """The attention of every block: a registered variant and its options.

    Attributes
    ----------
    name : str
        A key of :data:`ATTENTION_VARIANTS` (``"gqa"``: MHA, GQA, MQA, windows; ``"mla"``;
        ``"gated"``: ``"gqa"`` with a sigmoid gate on each head's output).
    options : dataclass instance, dict or None
        The variant's own options (e.g. :class:`~attncourse.nn.causal_attention.GQAOptions`); a dict
        of its fields or None (its defaults) is converted.

    Raises
    ------
    ValueError
        If ``name`` is not registered, or a dict names an option the variant lacks.
    TypeError
        If ``options`` is another variant's dataclass.
    """

    name: str = "gqa"
    options: Any = None

    def __post_init__(self) -> None:
        _validate_kind("attention", self.name, ATTENTION_VARIANTS)
        options = _options(ATTENTION_VARIANTS[self.name].options, self.options, f"attention {self.name!r}")
        object.__setattr__(self, "options", options)

    def build(self, d_model: int, num_heads: int, causal: bool, positions: PositionSpec) -> nn.Module:
        """The attention module of one block, a :class:`~attncourse.nn.protocol.DecoderAttention`.

        RoPE and ALiBi reach it as ``positional``; the schemes added to the embeddings as None.

        Raises
        ------
        ValueError
            If the variant refuses these sizes, options or position scheme.
        """
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
    """The attention that flat options describe: GPT's keyword arguments and train-lm's options,
    one namespace for every variant's options (``num_kv_heads``, ``window``, ``latent_dim``...).

    Parameters
    ----------
    name : str or None
        A registered variant; None: ``"mla"`` if ``latent_dim`` is set, else ``"gqa"``.
    num_heads : int
        h; ``num_kv_heads == h`` is multi-head, every variant's meaning, passed on only to a
        variant that has the option.
    **options
        Those set (not None) go to the variant by name.

    Raises
    ------
    ValueError
        If ``name`` is not registered, or an option is set that the variant does not have
        (:class:`AttentionSpec` says so). The variant's own rules are checked when a
        :class:`DecoderSpec` holds it.
    """
    given = {k: v for k, v in options.items() if v is not None}
    chosen = name
    name = name or ("mla" if "latent_dim" in given else "gqa")
    _validate_kind("attention", name, ATTENTION_VARIANTS)
    if given.get("num_kv_heads") == num_heads:  # multi-head: the variant's default, one description
        del given["num_kv_heads"]
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
    """How the model knows positions: ``kind`` is one of :data:`ADDED_TO_EMBEDDINGS`,
    :data:`INSIDE_ATTENTION` or :data:`NO_POSITIONS`, and ``base`` RoPE's base of
    theta_i = base^(-2i / d_k) (10000; SmolLM2: 100000), unused by the other schemes.

    ``rope_scaling`` (``"pi"``, ``"ntk"``, ``"yarn"``; None) stretches RoPE by ``rope_factor``
    for a model trained on ``original_len`` positions (YaRN needs it): see
    :class:`~attncourse.nn.rope.RopeScaling`, which :attr:`scaling` returns.

    Raises
    ------
    ValueError
        For an unknown kind, ``base <= 1``, scaling without RoPE, or a bad scaling option.
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
    """The normalisation before each sublayer and at the end.

    Attributes
    ----------
    kind : {"layernorm", "rmsnorm", "none"}
    eps : float
        Added to the variance (LayerNorm) or the mean square (RMSNorm).
    """

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
    """The position-wise feed-forward sublayer.

    Attributes
    ----------
    kind : {"relu", "gelu", "swiglu", "none"}
    d_ff : int
        Inner width (unused with ``"none"``).
    bias : bool
        Biases on its projections.
    """

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
    """Everything a decoder-only model is built from (:class:`~attncourse.nn.gpt.GPT`).

    Attributes
    ----------
    vocab_size, d_model, num_heads, num_layers : int
        V, the width, h query heads (dividing ``d_model``), L blocks.
    max_len : int
        Rows of a sinusoidal or learned position table (RoPE and ALiBi take any length).
    causal : bool
    dropout : float
        On the embeddings and on every sublayer's output, in [0, 1).
    attention : AttentionSpec
        The attention of every block, unless ``layer_attention`` is given.
    positions : PositionSpec
        One scheme for every block (a memory attention refuses RoPE and ALiBi: a hybrid with
        one uses ``"none"``, ``"learned"`` or ``"sinusoidal"``).
    norm : NormSpec
        Before each sublayer (pre-norm) and after the last block.
    ffn : FFNSpec
    tie_output : bool
        The output layer's weight is the embedding's (Press and Wolf 2017).
    scale_embedding : bool
        Multiply the embeddings by sqrt(d_model) (Vaswani et al. 2017, section 3.4; the
        course's models); Llama-style models do not.
    layer_attention : tuple of AttentionSpec, or None
        A hybrid: block i's attention is ``layer_attention[i]`` (``attention`` is then
        unused); each entry may be an AttentionSpec, a dict of its fields or a variant's
        name. None: every block has ``attention``.

    Each part may also be given as a dict of its fields (as :meth:`to_dict` writes them).

    Raises
    ------
    ValueError
        If a size is not a positive int, ``dropout`` is outside [0, 1), a part is invalid,
        or ``layer_attention`` does not have one entry per block (one line).
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
        """``layer_attention`` that repeats ``pattern`` over ``num_layers`` blocks.

        Parameters
        ----------
        pattern : sequence of AttentionSpec, dict or variant name
            E.g. ``("deltanet",) * 3 + ("gqa",)``: Qwen3-Next's three memory blocks per softmax
            block (2025).
        num_layers : int
            A multiple of ``len(pattern)``.

        Raises
        ------
        ValueError
            If the pattern is empty or its length does not divide ``num_layers`` (one line).
        """
        pattern = tuple(pattern)
        if not pattern or num_layers % len(pattern):
            raise ValueError(f"a layer pattern of {len(pattern)} blocks does not tile num_layers={num_layers}")
        return tuple(_attention_spec(entry) for entry in pattern) * (num_layers // len(pattern))

    def _validate_attention(self, attention: AttentionSpec) -> None:
        """Build one attention module on the meta device (no memory, no random numbers drawn): the
        variant's builder checks its options against these sizes and positions, so that a clash is
        refused here, whatever described the model. An error other than ValueError (an operation
        the meta device lacks) leaves the check to the real build."""
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
