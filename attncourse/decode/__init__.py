"""Inference: search for encoder-decoders and sampling for decoder-only models.

Importable without the training engine.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "fast": ("Decoder", "fast_path_supported"),
    "generation": ("GenerationStep", "generate", "next_token_probs", "seconds_per_token", "trace_generation"),
    "search": ("beam_search", "greedy_decode", "sequence_log_probs", "translate", "wu_length_penalty"),
})

__all__ = [
    "Decoder",
    "GenerationStep",
    "beam_search",
    "fast_path_supported",
    "generate",
    "greedy_decode",
    "next_token_probs",
    "seconds_per_token",
    "sequence_log_probs",
    "trace_generation",
    "translate",
    "wu_length_penalty",
]
