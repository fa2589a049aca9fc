"""The maths of attention: a traced NumPy teaching path and a batched torch path.

Masks are boolean with ``True`` meaning *may attend*, everywhere in the course.
"""

from attncourse.functional.additive import (
    BAHDANAU_MOVES,
    AdditiveStepTrace,
    additive_attention_step,
)
from attncourse.functional.cost import (
    H100_BF16_FLOPS,
    H100_HBM_BANDWIDTH,
    attention_bytes,
    attention_flops,
    peak_traced_bytes,
    saved_tensor_bytes,
)
from attncourse.functional.flash_attention import (
    FlashAttentionFunction,
    flash_attention,
)
from attncourse.functional.linear_attention import (
    batched_linear_attention,
    elu_feature_map,
    linear_attention,
    linear_attention_weights,
)
from attncourse.functional.local_attention import WindowedAttention, windowed_attention
from attncourse.functional.luong import (
    LUONG_MODES,
    LUONG_MOVES,
    LUONG_SCORES,
    LuongStepTrace,
    attentional_state,
    gaussian_weights,
    local_window,
    luong_step,
    predict_position,
    score_concat,
    score_dot,
    score_general,
    score_location,
)
from attncourse.functional.numpy_attention import (
    STEPS,
    SelfAttentionTrace,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    self_attention_trace,
    softmax,
)
from attncourse.functional.positional import (
    positional_frequencies,
    relative_shift_matrix,
    sinusoidal_encoding,
)
from attncourse.functional.sparse_masks import (
    global_tokens_mask,
    mask_density,
    sliding_window_mask,
    strided_mask,
)
from attncourse.functional.temperature import entropy, hardmax, softmax_with_temperature
from attncourse.functional.tiled_attention import (
    OnlineSoftmaxTrace,
    TiledAttention,
    TileStep,
    online_softmax_step,
    online_softmax_trace,
    tiled_attention,
    weights_from_lse,
)
from attncourse.functional.torch_attention import (
    attention,
    masked_softmax,
    self_attention,
)

__all__ = [
    "LUONG_MODES",
    "LUONG_MOVES",
    "LUONG_SCORES",
    "LuongStepTrace",
    "attentional_state",
    "gaussian_weights",
    "hardmax",
    "local_window",
    "luong_step",
    "predict_position",
    "score_concat",
    "score_dot",
    "score_general",
    "score_location",
    "softmax_with_temperature",
    "entropy",
    "BAHDANAU_MOVES",
    "AdditiveStepTrace",
    "additive_attention_step",
    "STEPS",
    "SelfAttentionTrace",
    "attention",
    "causal_mask",
    "sliding_window_mask",
    "FlashAttentionFunction",
    "H100_BF16_FLOPS",
    "H100_HBM_BANDWIDTH",
    "attention_bytes",
    "attention_flops",
    "peak_traced_bytes",
    "saved_tensor_bytes",
    "OnlineSoftmaxTrace",
    "TiledAttention",
    "TileStep",
    "batched_linear_attention",
    "elu_feature_map",
    "flash_attention",
    "global_tokens_mask",
    "linear_attention",
    "linear_attention_weights",
    "mask_density",
    "online_softmax_step",
    "online_softmax_trace",
    "strided_mask",
    "tiled_attention",
    "weights_from_lse",
    "masked_softmax",
    "padding_mask",
    "positional_frequencies",
    "relative_shift_matrix",
    "scaled_dot_product_attention",
    "self_attention",
    "self_attention_trace",
    "sinusoidal_encoding",
    "softmax",
    "WindowedAttention",
    "windowed_attention",
]
