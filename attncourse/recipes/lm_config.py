"""One language-model run as settings (:class:`LMConfig`), and the model spec they give.

Each option of each registered attention variant becomes a field of :class:`LMConfig`
and an option of ``train-lm``, default None (the variant's default).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from attncourse.nn.gpt import GPT_POSITIONAL
from attncourse.nn.rope import ROPE_SCALINGS
from attncourse.nn.spec import (
    ATTENTION_VARIANTS,
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    PositionSpec,
    flat_attention,
)
from attncourse.train.config import (
    BATCH,
    CLIP_NORM,
    FFN_WIDTH,
    HEADS,
    LAYERS,
    LEARNING_RATE,
    ROPE_FACTOR,
    SIZE,
    STEPS,
    WEIGHT_DECAY,
    WIDTH,
    Limit,
    setting,
)


@dataclass(frozen=True)
class LMSettings:
    """The fields of :class:`LMConfig` that are not a variant's options.

    Raises ``ValueError`` if ``steps`` is not a multiple of ``steps_per_epoch`` or
    ``context`` does not fit a position table.
    """

    positional: str = setting("rope", "position scheme (default rope)", choices=GPT_POSITIONAL, group="model")
    causal: bool = setting(
        True, "the causal mask (default); --no-causal trains without it, to see the model peek (chapter 7)",
        group="model")
    d_model: int = setting(64, "width of the embeddings and of every block (default 64)", check="positive_int",
                           limit=WIDTH, group="model", metavar="N")
    num_heads: int = setting(8, "attention heads; must divide --d-model (default 8)", check="positive_int",
                             limit=HEADS, group="model", metavar="N")
    num_layers: int = setting(2, "decoder blocks (default 2)", check="positive_int", limit=LAYERS,
                              group="model", metavar="N")
    d_ff: int = setting(256, "inner width of the feed-forward layers (default 256)", check="positive_int",
                        limit=FFN_WIDTH, group="model", metavar="N")
    max_len: int = setting(
        256, "positions of a sinusoidal or learned table (default 256)", check="positive_int",
        limit=Limit(1, 8192, "positions; attention memory grows with its square"), group="model", metavar="N")
    context: int = setting(64, "training window, in characters (default 64)", check="positive_int",
                           limit=Limit(1, 8192, "attention memory grows with its square"), metavar="N")
    batch_size: int = setting(32, "windows per step (default 32)", check="positive_int", limit=BATCH,
                              metavar="N")
    steps: int = setting(300, "optimiser steps in all; a multiple of --steps-per-epoch (default 300)",
                         check="positive_int", limit=STEPS, metavar="N")
    steps_per_epoch: int = setting(100, "steps between checkpoints and validation (default 100)",
                                   check="positive_int", limit=STEPS, metavar="N")
    lr: float = setting(3e-3, "AdamW's learning rate, constant after the warmup (default 0.003)",
                        check="positive_float", limit=LEARNING_RATE, metavar="LR")
    warmup: int = setting(30, "steps of linear warmup of the rate (default 30)", check="positive_int",
                          limit=STEPS, metavar="N")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay (default 0.01)",
                                  check="nonnegative_float", limit=WEIGHT_DECAY, metavar="W")
    clip_norm: float = setting(1.0, "clip the gradient's global norm to C (default 1.0)", check="positive_float",
                               limit=CLIP_NORM, metavar="C")
    dropout: float = setting(0.0, "dropout in every block (default 0)", check="dropout", group="model",
                             metavar="P")
    seed: int = setting(0, "initial weights and batches (default 0)", check="seed", metavar="S")
    #: Not an option: train_lm sets it to the text's digest (--text names the text).
    corpus: str = ""
    rope_scaling: str | None = setting(
        None, "stretch RoPE past the training length --context (chapter 12): position interpolation, "
        "NTK-aware base, or YaRN (by frequency band, with its attention temperature)", choices=ROPE_SCALINGS,
        group="model")
    rope_factor: float = setting(
        1.0, "with --rope-scaling: the scale factor s = target length / --context (default 1)",
        check="positive_float", limit=ROPE_FACTOR, group="model", metavar="S")
    attention: str | None = setting(
        None, "the attention variant, any registered by name: gqa, gated, mla, softcap, cla, dsa, linear, "
        "deltanet, gated-deltanet, and those of the modules named in the environment variable ATTNCOURSE_VARIANTS; "
        "the options below set its options of those names (default: gqa; mla with --latent-dim)",
        check="text", group="model", metavar="NAME")
    softmax_every: int | None = setting(
        None, "a hybrid (chapter 14): every N-th block keeps softmax attention (gqa), the others --attention "
        "(Qwen3-Next: 4); --num-layers must be a multiple of N", check="positive_int", limit=LAYERS,
        group="model", metavar="N")

    def __post_init__(self) -> None:
        if self.steps < 1 or self.steps_per_epoch < 1 or self.steps % self.steps_per_epoch:
            raise ValueError(f"steps={self.steps} must be a positive multiple of "
                             f"steps_per_epoch={self.steps_per_epoch}")
        if self.context < 1 or self.batch_size < 1:
            raise ValueError(f"context and batch_size must be positive, got {self.context}, {self.batch_size}")
        if self.positional in ("sinusoidal", "learned") and self.context > self.max_len:
            raise ValueError(f"context={self.context} does not fit max_len={self.max_len} positions")
        # One description, one run: multi-head and the name the options imply are left unset.
        if getattr(self, "num_kv_heads", None) == self.num_heads:
            object.__setattr__(self, "num_kv_heads", None)
        if self.attention == ("mla" if getattr(self, "latent_dim", None) is not None else "gqa"):
            object.__setattr__(self, "attention", None)

    @property
    def run_name(self) -> str:
        """Readable prefix of the run's folder: positions, attention and its options set, mask, seed."""
        scaling = "" if self.rope_scaling is None else f"-{self.rope_scaling}{self.rope_factor:g}"
        options = "".join(f"-{name.replace('_', '-')}{getattr(self, name)}" for name in VARIANT_OPTIONS
                          if getattr(self, name) is not None)
        hybrid = "" if self.softmax_every is None else f"-softmax-every{self.softmax_every}"
        mask = "causal" if self.causal else "nomask"
        return (f"lm/{self.positional}{scaling}-{self.attention or 'default'}{options}{hybrid}-{mask}"
                f"-seed{self.seed}")


#: How the command line reads a variant's option of each type, unless its field's metadata says.
_READ_AS = {int: ("int", Limit(-2**31, 2**31 - 1, "a 32-bit integer")), float: ("float", Limit(-1e30, 1e30, SIZE)),
            str: ("text", None), bool: ("switch", None)}


def _option_setting(name: str, kind: type, owners: list[str], metadata: typing.Mapping[str, Any]) -> Any:
    """The LMConfig field of variant option ``name`` (default None: the variant's default)."""
    check, limit = _READ_AS[kind]
    given = metadata.get("limit")
    whose = ", ".join(repr(owner) for owner in owners)
    return setting(None, metadata.get("help") or f"option {name} of attention {whose} (default: the variant's)",
                   check=metadata.get("check", check), limit=Limit(*given) if given else limit, group="model",
                   metavar=metadata.get("metavar") or (None if kind is bool else name.split("_")[-1].upper()))


def _variant_options() -> list[tuple[str, Any, Any]]:
    """``(name, type, field)`` for every option of every registered variant, each once.

    Raises ``ValueError`` if an option is named like a setting, or has two types.
    """
    taken = {f.name for f in dataclasses.fields(LMSettings)}
    found: dict[str, tuple[type, list[str], Any]] = {}
    for variant in ATTENTION_VARIANTS.values():
        hints = typing.get_type_hints(variant.options)
        for f in dataclasses.fields(variant.options):
            kinds = [t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None)]
            if len(kinds) != 1 or kinds[0] not in _READ_AS:
                continue  # not a command-line value; set it through an AttentionSpec
            if f.name in taken:
                raise ValueError(f"attention {variant.name!r}'s option {f.name!r} is also a setting of train-lm: "
                                 "rename the option")
            kind, owners, metadata = found.setdefault(f.name, (kinds[0], [], f.metadata))
            if kind is not kinds[0]:
                raise ValueError(f"option {f.name!r} is a {kind.__name__} of {owners[0]!r} and a "
                                 f"{kinds[0].__name__} of {variant.name!r}: rename one")
            owners.append(variant.name)
    return [(name, kind | None, _option_setting(name, kind, owners, metadata))
            for name, (kind, owners, metadata) in found.items()]


_OPTIONS = _variant_options()
#: The fields of :class:`LMConfig` that are options of attention variants.
VARIANT_OPTIONS: tuple[str, ...] = tuple(name for name, _, _ in _OPTIONS)

LMConfig = dataclasses.make_dataclass("LMConfig", _OPTIONS, bases=(LMSettings,), frozen=True)
LMConfig.__module__ = __name__
LMConfig.__doc__ = f"""One language-model run: :class:`LMSettings` and the attention
variants' options ({", ".join(VARIANT_OPTIONS)}), each None (the variant's default)
unless set.

Raises ``ValueError`` as :class:`LMSettings`.
"""


def lm_attention(config: LMConfig) -> AttentionSpec:
    """The attention of ``config``: its variant with the options set.

    Raises ``ValueError`` for an unknown variant or an option it lacks.
    """
    return flat_attention(config.attention, config.num_heads, **{k: getattr(config, k) for k in VARIANT_OPTIONS})


def lm_spec(config: LMConfig, vocab_size: int, positions: PositionSpec | None = None) -> DecoderSpec:
    """The :class:`~attncourse.nn.spec.DecoderSpec` of ``config``'s model, checked.

    ``positions`` defaults to ``config.positional``, scaled if set. Raises
    ``ValueError`` if the spec refuses the combination or for a bad ``softmax_every``.
    """
    if positions is None:
        positions = PositionSpec(config.positional, rope_scaling=config.rope_scaling,
                                 rope_factor=config.rope_factor,
                                 original_len=None if config.rope_scaling is None else config.context)
    attention = lm_attention(config)
    layers = None
    if config.softmax_every is not None:
        if attention.name == "gqa":
            raise ValueError(f"softmax_every={config.softmax_every} needs another attention for the other "
                             f"blocks (e.g. attention 'deltanet')")
        if config.num_layers % config.softmax_every:
            raise ValueError(f"softmax_every={config.softmax_every} must divide num_layers={config.num_layers}")
        pattern = (attention,) * (config.softmax_every - 1) + (AttentionSpec("gqa"),)
        layers = DecoderSpec.layer_pattern(pattern, config.num_layers)
    return DecoderSpec(vocab_size, config.d_model, config.num_heads, config.num_layers, config.max_len,
                       config.causal, config.dropout, attention, positions, ffn=FFNSpec("relu", config.d_ff),
                       layer_attention=layers)


def lm_settings(config: LMConfig) -> dict[str, Any]:
    """What names a run and ``--resume`` compares: the fields, unset options omitted."""
    return {k: v for k, v in dataclasses.asdict(config).items() if not (k in VARIANT_OPTIONS and v is None)}


__all__ = ["LMConfig", "LMSettings", "VARIANT_OPTIONS", "lm_attention", "lm_settings", "lm_spec"]
