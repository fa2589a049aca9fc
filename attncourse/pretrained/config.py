"""A Llama model's shape, read from a GGUF file's metadata, and the tensors that shape implies.

GGUF keeps a model's hyper-parameters as named metadata under the architecture's
prefix (``llama.block_count``, ``llama.attention.head_count``, ...; the key names
are listed in llama.cpp's ``gguf-py/gguf/constants.py``, class ``Keys``).
:class:`LlamaConfig` gathers the ones a Llama decoder needs under the course's names
(those of chapter 7's :class:`~attncourse.nn.gpt.GPT`), and
:func:`expected_shapes` lists the tensors the file must then hold, in torch's
``(out_features, in_features)`` orientation.

Llama (Touvron et al. 2023, section 2.2) is chapter 7's pre-norm decoder with rotary
positions (Su et al. 2021) and two changes: RMSNorm instead of LayerNorm (Zhang and
Sennrich 2019) and a SwiGLU feed-forward layer (Shazeer 2020); its attention is
multi-head. Later Llama-style models add grouped-query attention, fewer key/value heads
than query heads (Ainslie et al. 2023): Llama 2 in its larger models only, 34B and 70B
(Touvron et al. 2023b, section 2.2), SmolLM2-135M with 3 key/value heads for 9 query
heads. Multi-head attention is the case ``num_kv_heads == num_heads``.
"""

from __future__ import annotations

from dataclasses import dataclass


class GGUFError(ValueError):
    """A file that is not a GGUF file, is truncated, or does not describe a model read here."""


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a Llama decoder, as a GGUF file's metadata gives them.

    Attributes
    ----------
    num_layers : int
        Decoder blocks (``llama.block_count``).
    d_model : int
        Width of the residual stream (``llama.embedding_length``).
    num_heads : int
        Query heads (``llama.attention.head_count``).
    num_kv_heads : int
        Key/value heads, shared by ``num_heads // num_kv_heads`` query heads each
        (``llama.attention.head_count_kv``).
    d_ff : int
        Hidden width of the SwiGLU feed-forward layer (``llama.feed_forward_length``).
    rms_eps : float
        The epsilon of RMSNorm (``llama.attention.layer_norm_rms_epsilon``; stored as
        float32, so 1e-5 reads 9.9999997e-06).
    rope_base : float
        The base of RoPE's frequencies, 10,000 in Su et al. 2021 (``llama.rope.freq_base``).
    max_len : int
        The context length the model was trained for (``llama.context_length``).
    vocab_size : int
        Tokens (``llama.vocab_size``, else the tokenizer's list).
    tied_embeddings : bool
        True when the file has no ``output.weight``: the output layer reuses the token
        embedding (Press and Wolf 2017).
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
        """Width of one head's queries, keys and values: ``d_model // num_heads``."""
        return self.d_model // self.num_heads

    @classmethod
    def from_metadata(
        cls, metadata: dict, tensor_names: set[str] | frozenset[str]
    ) -> LlamaConfig:
        """Read the configuration from a GGUF file's metadata and tensor names.

        Parameters
        ----------
        metadata : dict
            Key -> value, as :attr:`~attncourse.pretrained.reader.GGUFFile.metadata`.
        tensor_names : set of str
            The file's tensors (``output.weight`` present or not decides ``tied_embeddings``).

        Raises
        ------
        GGUFError
            If the architecture is not ``llama``, a key is missing, the heads do not divide
            the width, or the file asks for something this reader does not do (RoPE on part
            of each head, RoPE scaling).
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
    """The tensors a Llama GGUF file holds for ``config``, GGUF's names -> torch shapes.

    Matrices are ``(out_features, in_features)``, as ``torch.nn.Linear.weight`` (GGUF
    lists each shape the other way round, innermost dimension first). Norm weights are
    vectors. ``output.weight`` is listed only when the embeddings are not tied.

    Returns
    -------
    dict
        ``token_embd.weight: (vocab_size, d_model)``, ``blk.{i}.attn_q.weight:
        (num_heads * d_k, d_model)``, ``blk.{i}.attn_k.weight`` and ``attn_v``:
        ``(num_kv_heads * d_k, d_model)``, ``attn_output: (d_model, num_heads * d_k)``,
        ``ffn_gate`` and ``ffn_up: (d_ff, d_model)``, ``ffn_down: (d_model, d_ff)``,
        ``attn_norm``, ``ffn_norm`` and ``output_norm: (d_model,)``.
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
