"""Inference: turning a trained model's next-token distributions into outputs.

:mod:`~attncourse.decode.search` decodes an encoder-decoder (greedy and beam
search, sequence log-probabilities, translating one sentence) through the
decoder protocol the RNN models and the Transformer implement;
:mod:`~attncourse.decode.generation` samples from chapter 7's decoder-only GPT
(temperature, top-k, the KV cache, a step-by-step trace for the explorer).

It sits below the training engine: widgets and chapters that only decode import
it without importing training.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "generation": ("GenerationStep", "generate", "next_token_probs", "seconds_per_token", "trace_generation"),
    "search": ("beam_search", "greedy_decode", "sequence_log_probs", "translate", "wu_length_penalty"),
})

__all__ = [
    "GenerationStep",
    "beam_search",
    "generate",
    "greedy_decode",
    "next_token_probs",
    "seconds_per_token",
    "sequence_log_probs",
    "trace_generation",
    "translate",
    "wu_length_penalty",
]
