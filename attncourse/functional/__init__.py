"""The maths of attention: a traced NumPy teaching path and a batched torch path.

Masks are boolean with ``True`` meaning *may attend*, everywhere in the course.
"""

from attncourse.functional.additive import BAHDANAU_MOVES, AdditiveStepTrace, additive_attention_step
from attncourse.functional.numpy_attention import (
    STEPS,
    SelfAttentionTrace,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    self_attention_trace,
    softmax,
)
from attncourse.functional.positional import positional_frequencies, relative_shift_matrix, sinusoidal_encoding
from attncourse.functional.torch_attention import attention, masked_softmax, self_attention

__all__ = [
    "BAHDANAU_MOVES",
    "AdditiveStepTrace",
    "additive_attention_step",
    "STEPS",
    "SelfAttentionTrace",
    "attention",
    "causal_mask",
    "masked_softmax",
    "padding_mask",
    "positional_frequencies",
    "relative_shift_matrix",
    "scaled_dot_product_attention",
    "self_attention",
    "self_attention_trace",
    "sinusoidal_encoding",
    "softmax",
]
