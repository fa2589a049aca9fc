"""Files written before :class:`~attncourse.nn.spec.DecoderSpec`, read in one place.

A :class:`~attncourse.nn.spec.DecoderSpec` is the one description of a decoder. Two
older forms still sit in files, and this module is the only code that reads them:

- **GPT's keyword configs.** Checkpoints of chapter 7's models (and of every model built
  with :class:`~attncourse.nn.gpt.GPT`'s keywords, chapter 7's shorthand) store
  ``model_config`` as the keywords, ``{"vocab_size": ..., "positional": ..., ...}``,
  not as a spec. :func:`spec_from_keywords` turns them into the spec they describe,
  with the same parameters in the same order (``tests/fixtures/gpt/`` holds what the
  keywords built before specs existed), and gives the config back in the keyword form,
  so that those files and their hashes stay as they were.
- **Language-model run folders.** A run's folder is named by a hash of its settings
  (:func:`~attncourse.recipes.lm.lm_settings`). :data:`SAVED_FIELDS` are the fields every
  run held when runs were first cached; a field added since is in the settings only when
  set, so that the folders trained before it keep their names.

A config that is neither a spec nor the keywords is refused by
:meth:`~attncourse.nn.gpt.GPT.from_config` (:func:`spec_from_config`) in one line that says
how to get a file of today's form: train the model again.
"""

from __future__ import annotations

from typing import Any

from attncourse.functional.sparse_masks import validate_sliding_window
from attncourse.nn.causal_attention import GQAOptions
from attncourse.nn.mla import MLAOptions, mla_dims
from attncourse.nn.spec import (
    INSIDE_ATTENTION,
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    NormSpec,
    PositionSpec,
    flat_attention,
)

#: The fields of :class:`~attncourse.recipes.lm.LMConfig` that every language-model run's
#: settings hold: those that existed when runs were first cached. A field added later is in
#: the settings only when it is not at its default, so that adding a setting (one field,
#: one option of ``train-lm``) keeps the earlier runs' folders.
SAVED_FIELDS = ("positional", "num_kv_heads", "causal", "window", "d_model", "num_heads", "num_layers", "d_ff",
                "max_len", "context", "batch_size", "steps", "steps_per_epoch", "lr", "warmup", "weight_decay",
                "clip_norm", "dropout", "seed", "corpus")

#: How to get a file of today's form from one this module cannot read.
RETRAIN = ("train the model again with this version of attncourse (python -m attncourse train-lm, "
           "or the chapter's training cell)")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def spec_from_keywords(vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, max_len: int,
                       positional: str, num_kv_heads: int | None, causal: bool, window: int | None,
                       dropout: float, latent_dim: int | None, rope_dim: int | None,
                       attention_only: bool) -> tuple[DecoderSpec, dict[str, Any]]:
    """The spec GPT's keywords describe, and the keyword config a checkpoint stores for it.

    The arguments are :class:`~attncourse.nn.gpt.GPT`'s keywords (``positional`` already
    checked to be one of :data:`~attncourse.nn.gpt.GPT_POSITIONAL`). The config holds MLA's
    sizes (resolved) only with ``latent_dim`` and ``attention_only`` only when set, as the
    files written before either existed.

    Raises
    ------
    ValueError
        If a size is not a positive int, ``window`` is not a
        window (:func:`~attncourse.functional.sparse_masks.validate_sliding_window`), or the
        spec refuses the combination (one line naming the options).
    """
    sizes = {name: _positive_int(name, value) for name, value in (
        ("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
        ("num_layers", num_layers), ("d_ff", d_ff), ("max_len", max_len))}
    num_kv_heads = _positive_int("num_kv_heads", num_heads if num_kv_heads is None else num_kv_heads)
    window = None if window is None else validate_sliding_window(window, causal)
    # Which variant and which of its options: the spec's reading of flat options (its rules, once).
    attention = flat_attention(None, sizes["num_heads"], num_kv_heads=num_kv_heads, window=window,
                               latent_dim=latent_dim, rope_dim=rope_dim)
    config: dict[str, Any] = {**sizes, "positional": positional, "num_kv_heads": num_kv_heads,
                              "causal": bool(causal), "window": window, "dropout": float(dropout)}
    if attention.name == "mla":
        inside = positional if positional in INSIDE_ATTENTION else None
        dims = mla_dims(attention.options, sizes["d_model"], sizes["num_heads"], inside)
        config.update(latent_dim=dims[0], rope_dim=dims[1])
        attention = AttentionSpec("mla", MLAOptions(*dims))
    else:
        attention = AttentionSpec("gqa", GQAOptions(num_kv_heads, window))
    if attention_only:
        config["attention_only"] = True
    spec = DecoderSpec(
        config["vocab_size"], config["d_model"], config["num_heads"], config["num_layers"], config["max_len"],
        config["causal"], config["dropout"], attention, PositionSpec(positional),
        NormSpec("none" if attention_only else "layernorm"),
        FFNSpec("none" if attention_only else "relu", config["d_ff"]), tie_output=not attention_only)
    return spec, config


def spec_from_config(config: Any, keywords: dict[str, Any]) -> DecoderSpec | dict[str, Any]:
    """What a file's ``model_config`` describes: a spec (``{"spec": ...}``) or GPT's keywords (checked).

    Parameters
    ----------
    config : dict
        A checkpoint's ``model_config`` (:attr:`~attncourse.nn.gpt.GPT.config`).
    keywords : dict
        GPT's keyword arguments and their defaults.

    Returns
    -------
    DecoderSpec, or the keyword dict to pass to ``GPT(**...)``.

    Raises
    ------
    ValueError
        If ``config`` is neither: one line naming the keys it has and :data:`RETRAIN`.
    """
    if isinstance(config, dict) and set(config) == {"spec"}:
        spec = config["spec"]
        return spec if isinstance(spec, DecoderSpec) else DecoderSpec(**spec)
    if isinstance(config, dict) and "vocab_size" in config and set(config) <= set(keywords):
        return dict(config)
    keys = sorted(config) if isinstance(config, dict) else type(config).__name__
    raise ValueError(f"a GPT config must be {{'spec': ...}} or GPT's keywords, got {keys}: {RETRAIN}")
