"""What every decoder attention shares: its argument checks, which keys a query may see, key/value
heads shared by query heads, and the default *attend* step.

A decoder attention (:class:`~attncourse.nn.protocol.DecoderAttention`) is plumbing around
one step. The plumbing checks the call (:func:`validate_call`), splits heads, applies the
positions, appends to the cache and builds the mask of allowed keys (:func:`allowed_keys`);
the step turns queries, keys and values into each head's output:

    attend(q, k, v, allowed, bias) -> (heads, weights)
    q (batch, h, n, d), k, v (batch, g, m, d) with g dividing h (:func:`repeat_kv`),
    allowed (n, m) or broadcastable bool (True = may attend) or None, bias (h, n, m) float or None
    heads (batch, h, n, d_v), weights (batch, h, n, m) or None

as ``transformers`` registers an attention function and leaves the module alone
(``ALL_ATTENTION_FUNCTIONS``). :func:`dot_product_attend` is the default,
softmax(q k^T / sqrt(d) + bias) v (Vaswani et al. 2017, equation (1)) through
``scaled_dot_product_attention`` when the weights are not needed; :func:`softmax_attend`
is its written-out form with any scale, on which a variant that only changes the
scores builds (e.g. cosine-similarity attention, a few lines: see
:class:`~attncourse.nn.causal_attention.CausalSelfAttention.attend`).

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1), and 3.2.3 (the causal mask).
Ainslie et al. (2023), "GQA", section 2.2 (key/value heads shared by groups of query heads).
Wolf et al. (2020), "Transformers: State-of-the-Art Natural Language Processing" (the library's
attention interface, ``transformers.modeling_utils.AttentionInterface``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attncourse.functional.sparse_masks import validate_sliding_window
from attncourse.functional.torch_attention import masked_softmax


def validate_call(mask: torch.Tensor | None, positions: torch.Tensor | None, batch: int, num_heads: int,
               seq_len: int, offset: int, device) -> torch.Tensor:
    """Check what every decoder attention takes besides ``x`` and its cache; return the positions.

    ``mask`` must broadcast to ``(batch, num_heads, seq_len, offset + seq_len)`` (:func:`validate_mask`),
    ``positions`` be ``(seq_len,)`` integers or None (:func:`validate_positions`, which gives the default).
    """
    if mask is not None:
        validate_mask(mask, (batch, num_heads, seq_len, offset + seq_len))
    return validate_positions(positions, seq_len, offset, device)


def validate_positions(positions: torch.Tensor | None, seq_len: int, offset: int, device) -> torch.Tensor:
    """The positions of ``seq_len`` new tokens: ``positions`` checked, or ``offset + arange(seq_len)``.

    Raises
    ------
    ValueError
        If ``positions`` is not a ``(seq_len,)`` integer tensor.
    """
    if positions is None:
        return torch.arange(offset, offset + seq_len, device=device)
    if (not isinstance(positions, torch.Tensor) or positions.shape != (seq_len,)
            or positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool):
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"positions must be a (seq_len={seq_len},) integer tensor, got {shape}")
    return positions.to(device)


def validate_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``mask`` is a bool tensor broadcastable to ``scores_shape``
    ``(batch, num_heads, seq_len, cache_len + seq_len)``."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {kind}")
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(scores_shape):
        raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"(batch, num_heads, seq_len, cache_len + seq_len) = {scores_shape}")


def repeat_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Expand ``num_kv_heads`` key (or value) heads to ``num_heads``: head i gets kv head i // group.

    Parameters
    ----------
    x : (batch, num_kv_heads, seq_len, d)
    num_heads : int
        Number of query heads h; a multiple of ``num_kv_heads``.

    Returns
    -------
    (batch, num_heads, seq_len, d)
        Each kv head repeated ``group = num_heads // num_kv_heads`` times in a row
        (``repeat_interleave``, as ``scaled_dot_product_attention(enable_gqa=True)`` does).

    Raises
    ------
    ValueError
        If ``x`` is not 4-D or ``num_heads`` is not a multiple of its heads.
    """
    if x.dim() != 4 or num_heads % x.shape[1] != 0:
        raise ValueError(
            f"repeat_kv needs (batch, num_kv_heads, seq_len, d) with num_heads={num_heads} a multiple of "
            f"num_kv_heads, got {tuple(x.shape)}"
        )
    group = num_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def allowed_keys(tgt_len: int, src_len: int, causal: bool = True, window: int | None = None,
                 device=None) -> torch.Tensor | None:
    """Which keys each query may attend to, the queries being the last ``tgt_len`` of ``src_len`` positions.

    Parameters
    ----------
    tgt_len, src_len : int
    causal : bool
        Query at position i sees keys j <= i (Vaswani et al. 2017, section 3.2.3).
    window : int, optional
        The ``window`` keys nearest the query, itself included (the definition of
        :func:`attncourse.functional.sliding_window_mask`): causal, ``0 <= i - j < window``,
        the query and the ``window - 1`` positions before it; not causal, the centred
        ``|i - j| <= (window - 1) / 2`` (``window`` odd).

    Returns
    -------
    (tgt_len, src_len) bool tensor, ``True`` = may attend; None when every key is allowed
    (no mask and no window, or one causal query at the last position, as in a decoding step).

    Raises
    ------
    ValueError
        If ``window`` is not a positive int, or is even with ``causal=False``.
    """
    if window is not None:
        window = validate_sliding_window(window, causal)
        reach = window - 1 if causal else (window - 1) // 2  # largest |i - j| allowed
        if reach >= src_len - 1:
            window = None  # the window holds every key
    if (not causal or tgt_len <= 1) and window is None:
        return None  # one query at the last position may see every key, as may a query without a mask
    query_pos = torch.arange(tgt_len, device=device)[:, None] + (src_len - tgt_len)
    key_pos = torch.arange(src_len, device=device)[None, :]
    allowed = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device)
    if causal:
        allowed &= key_pos <= query_pos
    if window is not None:
        allowed &= (query_pos - key_pos).abs() <= reach
    return allowed


def softmax_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                   bias: torch.Tensor | None = None, scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out: ``softmax(q k^T * scale + bias) v`` over the allowed keys.

    Parameters
    ----------
    q : (batch, h, n, d)
    k : (batch, g, m, d)
        g key heads, g dividing h (each serves h / g query heads, :func:`repeat_kv`).
    v : (batch, g, m, d_v)
    allowed : bool tensor broadcastable to (batch, h, n, m), or None
        ``True`` = may attend; a query with no allowed key gets all-zero weights.
    bias : float tensor broadcastable to (batch, h, n, m), optional
        Added to the scores (ALiBi's distances).
    scale : float, optional
        Multiplies the scores; default: they are divided by sqrt(d) (Vaswani et al. 2017, eq. (1)).

    Returns
    -------
    heads : (batch, h, n, d_v)
    weights : (batch, h, n, m)
        Rows sum to 1 (all zeros for a query with no allowed key).
    """
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    scores = q @ k.transpose(-2, -1)
    # Divided, not multiplied by 1 / sqrt(d): the trained models' numbers were computed this way.
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, allowed)
    return weights @ v, weights


def sdpa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                bias: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
    """:func:`softmax_attend`'s heads (default scale) through ``F.scaled_dot_product_attention``.

    Shapes as :func:`softmax_attend`; returns the heads ``(batch, h, n, d_v)`` only.
    ``is_causal`` says that ``allowed`` is None or exactly the causal mask of n queries and
    n = m keys, so SDPA may use its causal kernel instead of reading a mask.
    """
    # Without a bias SDPA shares the kv heads itself (enable_gqa), reading each one once;
    # with ALiBi's float bias the heads are expanded first.
    if bias is not None:
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    gqa = k.shape[1] != q.shape[1]
    if bias is None and (allowed is None or is_causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal and allowed is not None,
                                              enable_gqa=gqa)
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    # A row with no allowed key (e.g. a left-padding query) attends everywhere, then is zeroed.
    fully_masked = ~allowed.any(dim=-1, keepdim=True)
    allowed = allowed | fully_masked
    attn_mask = allowed if bias is None else bias.masked_fill(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=gqa)
    return out.masked_fill(fully_masked, 0.0)


def dot_product_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                       bias: torch.Tensor | None = None, *, need_weights: bool = False, fast: bool = True,
                       is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The default attend step: scaled dot-product attention, fused unless the weights are wanted.

    Shapes as :func:`softmax_attend`. With ``need_weights`` or ``fast=False`` it is
    :func:`softmax_attend` (the weights returned), otherwise :func:`sdpa_attend` (weights None);
    ``is_causal`` as there.
    """
    if need_weights or not fast:
        return softmax_attend(q, k, v, allowed, bias)
    return sdpa_attend(q, k, v, allowed, bias, is_causal), None


__all__ = ["allowed_keys", "validate_call", "validate_mask", "validate_positions", "dot_product_attend", "repeat_kv",
           "sdpa_attend", "softmax_attend"]
