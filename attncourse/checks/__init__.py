"""Instant feedback on the course's coding exercises.

Each ``check_*`` function runs a learner's function on hidden cases and returns
a :class:`CheckResult`: truthy when all cases pass, and shown in a notebook as a
short green or red box that names the first failing case, what was expected
and what came back, and a hint. Nothing is printed and nothing is raised.

>>> from attncourse.checks import check_softmax
>>> check_softmax(my_softmax)  # doctest: +SKIP
✔ check_softmax: all 7 hidden cases pass

Chapters add their checks on top of the engine in :mod:`attncourse.checks.core`:
a list of :class:`Case` objects and :func:`run_cases`.
"""

from attncourse.checks.attention_at_scale import (
    check_causal_linear_attention,
    check_online_softmax_update,
    check_rescale_output,
)
from attncourse.checks.attention_family import (
    check_general_score,
    check_local_p_weights,
    check_temperature_softmax,
)
from attncourse.checks.conv_attention import (
    check_pixel_attention,
    check_receptive_field,
)
from attncourse.checks.core import Case, CheckResult, run_cases, to_numpy
from attncourse.checks.decoder_only import (
    check_left_padded_causal_mask,
    check_repeat_kv,
    check_rope,
)
from attncourse.checks.flash_kernel import (
    check_causal_early_exit,
    check_flash_hbm_bytes,
)
from attncourse.checks.graded import graded
from attncourse.checks.heads import check_copying_score, check_prefix_matching_score
from attncourse.checks.image_attention import (
    check_doubly_stochastic_penalty,
    check_reinforce_loss,
)
from attncourse.checks.long_context import (
    check_alibi_far_bias,
    check_stretched_frequencies,
    check_yarn_frequencies,
)
from attncourse.checks.real_model import (
    check_q4_1_block,
    check_rms_norm,
    check_top_p,
)
from attncourse.checks.self_attention import (
    check_causal_mask,
    check_scaled_dot_product,
    check_softmax,
)
from attncourse.checks.seq2seq import (
    check_additive_score,
    check_gru_cell,
    check_masked_softmax,
    check_padding_mask,
)
from attncourse.checks.serving import (
    check_block_lookup,
    check_cache_bytes,
    check_per_channel_int8,
    check_residual_distribution,
)
from attncourse.checks.training import check_label_smoothing, check_noam_schedule
from attncourse.checks.transformer import check_merge_heads, check_split_heads

__all__ = [
    "Case",
    "CheckResult",
    "check_additive_score",
    "check_alibi_far_bias",
    "check_block_lookup",
    "check_cache_bytes",
    "check_causal_early_exit",
    "check_causal_linear_attention",
    "check_causal_mask",
    "check_copying_score",
    "check_doubly_stochastic_penalty",
    "check_flash_hbm_bytes",
    "check_general_score",
    "check_gru_cell",
    "check_label_smoothing",
    "check_left_padded_causal_mask",
    "check_local_p_weights",
    "check_masked_softmax",
    "check_merge_heads",
    "check_noam_schedule",
    "check_online_softmax_update",
    "check_padding_mask",
    "check_per_channel_int8",
    "check_pixel_attention",
    "check_prefix_matching_score",
    "check_q4_1_block",
    "check_receptive_field",
    "check_reinforce_loss",
    "check_repeat_kv",
    "check_rescale_output",
    "check_residual_distribution",
    "check_rms_norm",
    "check_rope",
    "check_scaled_dot_product",
    "check_softmax",
    "check_split_heads",
    "check_stretched_frequencies",
    "check_temperature_softmax",
    "check_top_p",
    "check_yarn_frequencies",
    "graded",
    "run_cases",
    "to_numpy",
]
