"""What each exercise check refuses as a hand-off, and what the learner may use.

Every check runs the learner's function under :func:`attncourse.checks.guard.watching`
with its entry of :data:`HAND_OFFS`: a call, direct or indirect, to a library function that
computes what the exercise asks for, to any function of the course package outside the
checks, or to a function of the notebook defined in another cell (a chapter's helper) makes
the check answer "not accepted", with what the exercise allows. The building blocks an
exercise names (``np.exp`` and ``np.sum`` for a softmax, ``repeat_interleave`` for grouped
keys) stay allowed. ``tests/checks/test_hand_offs.py`` holds the cheats each entry refuses.
"""

from __future__ import annotations

from attncourse.checks.guard import ATTENTION, SOFTMAX, HandOffs

#: Launchers of a Triton kernel: compiled (``JITFunction.run``) or interpreted on the CPU.
TRITON_LAUNCH = ("triton.runtime.jit.JITFunction.run", "triton.runtime.interpreter.GridExecutor.__call__",
                 "triton.runtime.interpreter.InterpretedFunction.run")
#: Library attention layers and Transformer blocks: refused by the capstone's checks (chapter 7b).
TRANSFORMER_LAYERS = ATTENTION + ("torch:TransformerEncoderLayer", "torch:TransformerDecoderLayer",
                                  "torch:Transformer", "torch:TransformerEncoder", "torch:TransformerDecoder")
_MASK_OPS = "NumPy operations such as np.tril, np.ones, np.arange, comparisons and broadcasting"

#: The methods of a book build's progress bar (:class:`attncourse.runtime.BookBar`) that tqdm
#: calls while a loop runs, after ``progress_bar`` has returned it.
BOOK_BAR = ("attncourse.runtime.BookBar.close", "attncourse.runtime._Nowhere.write",
            "attncourse.runtime._Nowhere.flush")

HAND_OFFS: dict[str, HandOffs] = {
    # Chapter 1
    "check_gru_cell": HandOffs(
        "NumPy operations: matrix products (@), np.split, np.exp and np.tanh.",
        library=("torch:gru_cell", "torch:GRUCell", "torch:gru", "torch:GRU", "torch:_thnn_fused_gru_cell")),
    "check_padding_mask": HandOffs(
        "NumPy operations such as np.arange and comparisons.",
        library=("torch:pad_sequence", "torch:pack_padded_sequence")),
    # Chapter 2
    "check_additive_score": HandOffs("NumPy operations: matrix products (@) and np.tanh."),
    "check_masked_softmax": HandOffs(
        "NumPy operations such as np.where, np.exp, np.max and np.sum; your own my_softmax.",
        library=SOFTMAX),
    # Chapter 3
    "check_general_score": HandOffs("NumPy matrix products (@).", library=("torch:bilinear", "torch:Bilinear")),
    "check_local_p_weights": HandOffs(
        "NumPy operations such as np.arange, np.where, np.exp and np.sum.", library=SOFTMAX),
    "check_temperature_softmax": HandOffs("NumPy operations: np.exp, np.max and np.sum.", library=SOFTMAX),
    # Chapter 3b
    "check_doubly_stochastic_penalty": HandOffs("NumPy or PyTorch sums, differences and squares."),
    "check_reinforce_loss": HandOffs(
        "PyTorch operations on the tensors: sums, means, products, .detach().",
        calls=("attncourse.chapters.ch03b_attention_over_images.calls:reinforce_outputs",)),
    # Chapter 4
    "check_softmax": HandOffs("NumPy operations: np.exp, np.max and np.sum (or the array methods).",
                              library=SOFTMAX),
    "check_scaled_dot_product": HandOffs(
        "NumPy operations: matrix products, np.where, np.exp, np.max and np.sum; your own my_softmax.",
        library=SOFTMAX + ATTENTION),
    "check_causal_mask": HandOffs(_MASK_OPS + ".", library=("torch:generate_square_subsequent_mask",)),
    # Chapter 4b
    "check_receptive_field": HandOffs("Python arithmetic and a loop over the layers."),
    "check_pixel_attention": HandOffs(
        "NumPy operations: reshape, transpose, matrix products, np.exp, np.max and np.sum.",
        library=SOFTMAX + ATTENTION),
    # Chapter 5
    "check_split_heads": HandOffs("Tensor reshapes and transposes (view, reshape, transpose, permute).",
                                  library=("einops:rearrange",) + ATTENTION),
    "check_merge_heads": HandOffs("Tensor reshapes and transposes (view, reshape, transpose, permute).",
                                  library=("einops:rearrange",) + ATTENTION),
    # Chapter 6
    "check_noam_schedule": HandOffs("NumPy operations: powers and np.minimum.",
                                    library=("torch:LambdaLR",)),
    "check_label_smoothing": HandOffs(
        "NumPy operations: np.max, np.exp, np.log, np.sum, indexing and np.mean.",
        library=SOFTMAX + ("torch:cross_entropy", "torch:cross_entropy_loss", "torch:nll_loss",
                           "torch:CrossEntropyLoss", "torch:NLLLoss", "torch:kl_div", "torch:KLDivLoss")),
    # Chapter 7
    "check_left_padded_causal_mask": HandOffs(_MASK_OPS + "."),
    "check_rope": HandOffs(
        "torch operations: arange, powers, cos, sin, stack, indexing and reshapes (real arithmetic).",
        library=("torch:view_as_complex", "torch:view_as_real", "torch:polar", "torch:complex")),
    "check_repeat_kv": HandOffs("torch operations such as repeat_interleave, expand and reshape."),
    # Chapter 7b (the capstone): no library attention layer or Transformer block
    "check_causal_attention": HandOffs(
        "torch operations: matrix products (@), reshape/view, transpose, masked_fill, softmax.",
        library=TRANSFORMER_LAYERS),
    "check_block": HandOffs(
        "torch operations, your my_causal_attention, a LayerNorm (your own, or F.layer_norm) "
        "and relu.", library=TRANSFORMER_LAYERS),
    "check_gpt": HandOffs(
        "torch operations (indexing, @, F.layer_norm) and your my_block.", library=TRANSFORMER_LAYERS),
    "check_training": HandOffs(
        "torch: randn, zeros, ones, randint, torch.optim.AdamW, F.cross_entropy; your my_gpt; "
        "a progress bar (tqdm, or the course's progress_bar).",
        # the bar and, in a book build, the methods tqdm calls on it while the loop runs
        library=TRANSFORMER_LAYERS, allow=("attncourse.runtime.progress_bar", *BOOK_BAR)),
    # Chapter 8
    "check_online_softmax_update": HandOffs(
        "NumPy operations: np.maximum, np.where, np.isfinite, np.exp and np.sum.", library=SOFTMAX),
    "check_rescale_output": HandOffs("NumPy operations: np.exp, broadcasting and matrix products.",
                                     library=SOFTMAX + ATTENTION),
    "check_causal_linear_attention": HandOffs(
        "NumPy operations: np.where, np.exp, np.outer, matrix products and a loop over positions; "
        "the feature map phi may be the package's elu_feature_map.",
        library=SOFTMAX + ATTENTION, allow=("attncourse.functional.linear_attention.elu_feature_map",)),
    "check_flash_hbm_bytes": HandOffs("Python arithmetic (math.ceil)."),
    "check_causal_early_exit": HandOffs(
        "a kernel decorated with triton.jit, written with triton.language (tl.load, tl.dot, tl.store...).",
        library=SOFTMAX + ATTENTION + ("torch:matmul", "torch:bmm", "torch:einsum"),
        must_call=TRITON_LAUNCH,
        must_call_message="no Triton kernel ran: the check launches your kernel as "
                          "kernel[grid](...), and that launch must run a @jit kernel",
        calls=("attncourse.chapters.ch08_attention_at_scale.calls:launch_forward_kernel",)),
    # Chapter 9
    "check_prefix_matching_score": HandOffs(
        "NumPy operations: comparisons, np.tri or np.tril, sums, any and means."),
    "check_copying_score": HandOffs("np.linalg.eigvals, sums and absolute values."),
    # Chapter 10
    "check_cache_bytes": HandOffs("Python arithmetic on the dict's entries."),
    "check_block_lookup": HandOffs("Python integer division (//) and remainder (%), and indexing."),
    "check_per_channel_int8": HandOffs(
        "torch operations: abs, amax, division, round, clamp and where.",
        library=("torch:quantize_per_channel", "torch:fake_quantize_per_channel_affine",
                 "torch:quantize_per_tensor", "torch:fake_quantize_per_tensor_affine")),
    "check_residual_distribution": HandOffs("torch operations: subtraction, clamp, sum and division."),
    # Chapter 11
    "check_fold_gain": HandOffs(
        "NumPy operations: indexing with None (a new axis), products and broadcasting, "
        "or np.diag and a matrix product."),
    "check_quantize_q4_1": HandOffs(
        "NumPy operations: min and max, arithmetic in np.float32, np.floor, np.minimum, "
        "astype, viewing float16 values as bytes (`.view`), shifts (<<), bitwise or (|) "
        "and np.concatenate.",
        library=("gguf:quantize", "gguf:quantize_blocks", "gguf:Q4_1")),
    "check_min_p": HandOffs(
        "NumPy operations: np.exp, max, sums, comparisons and np.where.",
        library=("transformers:MinPLogitsWarper",)),
    # Chapter 12
    "check_stretched_frequencies": HandOffs("NumPy operations: np.arange, powers and division."),
    "check_yarn_frequencies": HandOffs(
        "NumPy operations: np.arange, powers, np.pi, np.clip and arithmetic."),
    "check_alibi_far_bias": HandOffs("NumPy operations: np.arange, powers and products."),
    # Chapter 13
    "check_padded_attention": HandOffs(
        "NumPy operations: matrix products (@), reshape, transpose, np.where, np.exp, np.max and np.sum.",
        library=SOFTMAX + ATTENTION + TRANSFORMER_LAYERS),
    "check_bert_mask": HandOffs("NumPy operations: comparisons, & and |, and np.where."),
    "check_patchify": HandOffs("NumPy reshape and transpose.", library=("einops:rearrange", "torch:unfold",
                                                                       "torch:Unfold")),
    "check_rollout": HandOffs("NumPy operations: means, np.eye and matrix products (@)."),
    "check_mean_pool": HandOffs("NumPy operations: products, sums and division."),
    "check_high_norm_share": HandOffs("NumPy operations: np.linalg.norm (or squares and np.sqrt), "
                                      "np.median, comparisons and means."),
    # Chapter 14
    "check_delta_transition": HandOffs(
        "NumPy operations: np.eye, np.outer, matrix products (@) and a loop over the writes."),
    "check_gated_retention": HandOffs(
        "NumPy operations: np.eye, np.outer, matrix products (@) and loops over the writes."),
    "check_decay_matrix": HandOffs(
        "NumPy operations such as np.cumsum, np.log, np.exp, np.prod, np.tril and loops."),
    "check_wy_factors": HandOffs(
        "NumPy operations: matrix products, np.tril, np.eye, np.linalg.solve or a loop."),
    "check_square_map_reads": HandOffs(
        "NumPy operations: np.einsum or np.outer, reshape, matrix products (@) and sums."),
    "check_state_bytes": HandOffs("Python arithmetic."),
}

__all__ = ["HAND_OFFS", "TRANSFORMER_LAYERS", "TRITON_LAUNCH"]
