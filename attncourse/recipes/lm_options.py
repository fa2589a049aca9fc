"""The model that train-lm's options describe, as the spec reads it: which attention variant with
which of its options (:func:`lm_attention`), the :class:`~attncourse.nn.spec.DecoderSpec` that
:class:`~attncourse.recipes.lm.LMConfig` checks its options with (:func:`lm_decoder_spec`), and the
spec's messages in the options' names (:func:`in_options`).

Every rule of the model is the spec's (:mod:`attncourse.nn.spec`, and each variant's builder);
this module only translates, so that a clash is refused in the same words whatever describes
the model (tests/test_model_rules.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from attncourse.nn.spec import (
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    PositionSpec,
    flat_attention,
)

if TYPE_CHECKING:
    from attncourse.recipes.lm import LMConfig

#: LMConfig's fields that are options of attention variants, passed to a variant whose options have them.
ATTENTION_OPTIONS = ("num_kv_heads", "window", "latent_dim", "rope_dim", "chunk_size")


def lm_attention(config: LMConfig) -> AttentionSpec:
    """The :class:`~attncourse.nn.spec.AttentionSpec` that ``config``'s options describe
    (:func:`~attncourse.nn.spec.flat_attention`).

    The variant is ``config.attention``, or ``"gated"`` with ``gate``, ``"mla"`` with
    ``latent_dim``, else ``"gqa"``; its options are :data:`ATTENTION_OPTIONS` that are set
    (not None), by name; its other options keep their defaults.

    Raises
    ------
    ValueError
        If the name is not registered, or an option is set that the variant does not have.
    """
    name = config.attention or ("gated" if config.gate else None)
    return flat_attention(name, config.num_heads, **{k: getattr(config, k) for k in ATTENTION_OPTIONS})


def lm_layer_attention(config: LMConfig) -> tuple[AttentionSpec, ...] | None:
    """The blocks' attentions of a hybrid (``config.softmax_every``), or None.

    Every ``softmax_every``-th block, counting from 1, has softmax attention (``"gqa"``), the
    others :func:`lm_attention`'s: with 4 blocks and ``softmax_every=4``, three memory blocks
    and then a softmax block, Qwen3-Next's order (2025).

    Raises
    ------
    ValueError
        If the other blocks' attention is softmax attention too (no hybrid), or ``num_layers`` is
        not a multiple of ``softmax_every`` (one line, in the options' names).
    """
    if config.softmax_every is None:
        return None
    other = lm_attention(config)
    if other.name == "gqa":
        raise ValueError(f"softmax_every={config.softmax_every} needs another attention for the other blocks "
                         f"(e.g. attention 'deltanet')")
    if config.num_layers % config.softmax_every:
        raise ValueError(f"softmax_every={config.softmax_every} must divide num_layers={config.num_layers}")
    pattern = (other,) * (config.softmax_every - 1) + (AttentionSpec("gqa"),)
    return DecoderSpec.layer_pattern(pattern, config.num_layers)


def lm_decoder_spec(config: LMConfig, vocab_size: int) -> DecoderSpec:
    """The :class:`~attncourse.nn.spec.DecoderSpec` of ``config``'s sizes, positions and attention,
    with no model built: what :class:`LMConfig` checks its options with (the spec holds every rule).
    The model itself is :func:`build_lm`'s (whose spec may differ in how it spells the defaults)."""
    positions = PositionSpec(config.positional, rope_scaling=config.rope_scaling, rope_factor=config.rope_factor,
                             original_len=config.context)
    return DecoderSpec(vocab_size, config.d_model, config.num_heads, config.num_layers, config.max_len,
                       config.causal, config.dropout, lm_attention(config), positions, ffn=FFNSpec("relu", config.d_ff),
                       layer_attention=lm_layer_attention(config))


#: How :func:`in_options` names the spec's fields: train-lm's options (``rope_factor`` -> ``--rope-factor``).
_FIELD_WORDS = ("num_kv_heads", "latent_dim", "rope_dim", "rope_scaling", "rope_factor", "d_model", "num_heads",
                "window", "softmax_every", "num_layers", "chunk_size")


def in_options(message: str) -> str:
    """A message of the spec in train-lm's words: ``rope_factor=2.0`` -> ``--rope-factor 2.0``,
    ``positional='rope'`` and ``positions 'rope'`` -> ``--positional rope``, ``attention 'mla'``
    -> ``--attention mla``, and the bare names of :data:`_FIELD_WORDS` as options."""
    for name in (*_FIELD_WORDS, "positional", "dropout"):
        flag = "--" + name.replace("_", "-")
        message = re.sub(rf"(?<![\w-]){name}=(['\"]?)([^\s,;:()'\"]*)\1", rf"{flag} \2", message)
        if name in _FIELD_WORDS:
            message = re.sub(rf"(?<![\w-]){name}\b", flag, message)
    message = re.sub(r"(?<![\w-])positions '(\w+)'", r"--positional \1", message)
    message = re.sub(r"^attention must be one of", "--attention must be one of", message)
    return re.sub(r"(?<![\w-])attention '([\w.-]+)'", r"--attention \1", message)


__all__ = ["ATTENTION_OPTIONS", "in_options", "lm_attention", "lm_decoder_spec", "lm_layer_attention"]
