"""A Llama model's shape, read from a GGUF file's metadata, and the tensors it implies.

Source: Touvron et al. (2023), "LLaMA", section 2.2.
"""

from __future__ import annotations

from dataclasses import dataclass


class GGUFError(ValueError):
    """A file that is not a GGUF file, is truncated, or describes no model read here."""


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama decoder's hyper-parameters, named as in :class:`~attncourse.nn.gpt.GPT`.

    Each field reads one ``llama.*`` key; ``tied_embeddings`` is True when the file has
    no ``output.weight``.
    """

    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    rms_eps: float
    rope_base: float
    max_len: int
    vocab_size: int
    tied_embeddings: bool

    @property
    def d_k(self) -> int:
        """Width of one head: ``d_model // num_heads``."""
        return self.d_model // self.num_heads

    @classmethod
    def from_metadata(
        cls, metadata: dict, tensor_names: set[str] | frozenset[str]
    ) -> LlamaConfig:
        """Read the configuration from a GGUF file's metadata and tensor names.

        Raises ``GGUFError`` if the architecture is not ``llama``, a key is missing, the
        heads do not divide the width, or the file uses partial RoPE or RoPE scaling.
        """
        architecture = metadata.get("general.architecture")
        if architecture != "llama":
            raise GGUFError(
                f"the file describes a {architecture!r} model; only 'llama' is read here "
                "(general.architecture)"
            )

        def key(name, kind):
            if f"llama.{name}" not in metadata:
                raise GGUFError(f"the file has no llama.{name} in its metadata")
            value = metadata[f"llama.{name}"]
            if isinstance(value, (list, tuple, str, bool)):
                raise GGUFError(f"llama.{name} should be one number, got {value!r}")
            return kind(value)

        vocab_size = metadata.get("llama.vocab_size")
        if vocab_size is None:
            vocab_size = len(metadata.get("tokenizer.ggml.tokens", ()))
        config = cls(
            num_layers=key("block_count", int),
            d_model=key("embedding_length", int),
            num_heads=key("attention.head_count", int),
            num_kv_heads=key("attention.head_count_kv", int),
            d_ff=key("feed_forward_length", int),
            rms_eps=key("attention.layer_norm_rms_epsilon", float),
            rope_base=float(metadata.get("llama.rope.freq_base", 10000.0)),
            max_len=key("context_length", int),
            vocab_size=int(vocab_size),
            tied_embeddings="output.weight" not in tensor_names,
        )
        sizes = (config.num_layers, config.d_model, config.num_heads)
        sizes += (config.num_kv_heads, config.d_ff, config.vocab_size)
        if min(sizes) < 1:
            raise GGUFError(f"the file's model has a size below 1: {config}")
        if (
            config.d_model % config.num_heads
            or config.num_heads % config.num_kv_heads
            or config.d_k % 2
        ):
            raise GGUFError(
                f"{config.num_heads} query heads and {config.num_kv_heads} key/value heads do not "
                f"split d_model={config.d_model} into even heads"
            )
        rotary = metadata.get("llama.rope.dimension_count", config.d_k)
        if rotary != config.d_k:
            raise GGUFError(
                f"RoPE on {rotary} of each head's {config.d_k} features "
                "(llama.rope.dimension_count) is not read here"
            )
        scaling = metadata.get("llama.rope.scaling.type", "none")
        if scaling != "none":
            raise GGUFError(
                f"RoPE scaling {scaling!r} (llama.rope.scaling.type) is not read here"
            )
        return config


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> torch shape, matrices as (out_features, in_features).

    E.g. ``token_embd.weight`` (vocab_size, d_model), ``blk.{i}.attn_k.weight``
    (num_kv_heads * d_k, d_model), ``blk.{i}.ffn_down.weight`` (d_model, d_ff).
    """
    d, kv = config.d_model, config.num_kv_heads * config.d_k
    shapes = {"token_embd.weight": (config.vocab_size, d)}
    for i in range(config.num_layers):
        shapes.update(
            {
                f"blk.{i}.attn_norm.weight": (d,),
                f"blk.{i}.attn_q.weight": (config.num_heads * config.d_k, d),
                f"blk.{i}.attn_k.weight": (kv, d),
                f"blk.{i}.attn_v.weight": (kv, d),
                f"blk.{i}.attn_output.weight": (d, config.num_heads * config.d_k),
                f"blk.{i}.ffn_norm.weight": (d,),
                f"blk.{i}.ffn_gate.weight": (config.d_ff, d),
                f"blk.{i}.ffn_up.weight": (config.d_ff, d),
                f"blk.{i}.ffn_down.weight": (d, config.d_ff),
            }
        )
    shapes["output_norm.weight"] = (d,)
    if not config.tied_embeddings:
        shapes["output.weight"] = (config.vocab_size, d)
    return shapes
