"""Multi-head attention (Vaswani et al. 2017, section 3.2.2), with a teaching path and a fast path.

One attention function with d_model-wide queries, keys and values can only
form one weighted average per query. Multi-head attention instead projects
them h times into narrower spaces, d_k = d_v = d_model / h, and attends in
each space separately:

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                    (section 3.2.2)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O

The h projections W_i^Q of width d_k are stored side by side as one
(d_model, h * d_k) matrix W^Q (``w_q``), so one matrix product computes all
heads' queries; :func:`split_heads` then cuts the last axis into h pieces and
:func:`merge_heads` is the Concat. The cost is about that of one full-width
head.

Two paths compute the same thing (a test holds them equal):

* the **teaching path** (``fast=False`` or ``need_weights=True``) calls
  :func:`attncourse.functional.attention`, softmax(Q K^T / sqrt(d_k)) V written
  out, and can return the weights of every head;
* the **fast path** calls ``torch.nn.functional.scaled_dot_product_attention``,
  which never stores the (tgt_len, src_len) weights when its kernels allow.

Masks are boolean, ``True`` = may attend, everywhere in the course (the
convention of ``scaled_dot_product_attention``'s boolean ``attn_mask``; the
opposite of ``key_padding_mask`` and of a boolean ``attn_mask`` in
``torch.nn.MultiheadAttention``). A query that may attend to nothing gets a zero
output on both paths, never NaN.

For incremental decoding, a :class:`KVCache` keeps the projected keys and values
of earlier steps, so each new token projects only its own.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", sections 3.2.1-3.2.3, equation (1)
and the equations of section 3.2.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.torch_attention import attention


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the feature axis into ``num_heads`` heads: the h projections side by side, taken apart.

    Parameters
    ----------
    x : (batch, seq_len, num_heads * d_k)
        E.g. Q W^Q, all heads' queries.
    num_heads : int
        h.

    Returns
    -------
    (batch, num_heads, seq_len, d_k)
        Head i is ``x[..., i * d_k:(i + 1) * d_k]``, i.e. Q W_i^Q.

    Raises
    ------
    ValueError
        If ``x`` is not 3-D or its width is not divisible by ``num_heads``.
    """
    if x.dim() != 3 or x.shape[-1] % num_heads != 0:
        raise ValueError(
            f"split_heads needs (batch, seq_len, num_heads * d_k) with a width divisible by "
            f"num_heads={num_heads}, got {tuple(x.shape)}"
        )
    batch, seq_len, width = x.shape
    return x.view(batch, seq_len, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concat(head_1, ..., head_h): the inverse of :func:`split_heads`.

    Parameters
    ----------
    x : (batch, num_heads, seq_len, d_v)

    Returns
    -------
    (batch, seq_len, num_heads * d_v)

    Raises
    ------
    ValueError
        If ``x`` is not 4-D.
    """
    if x.dim() != 4:
        raise ValueError(f"merge_heads needs (batch, num_heads, seq_len, d_v), got {tuple(x.shape)}")
    batch, num_heads, seq_len, d_v = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_v)


@dataclass
class KVCache:
    """Projected keys K W^K and values V W^V, split into heads, kept between decoding steps.

    Self-attention in the decoder appends the current step's key and value
    (:meth:`MultiHeadAttention.forward` with ``kv_cache=``); cross-attention
    computes them once from the encoder output (:meth:`MultiHeadAttention.project_kv`).
    :func:`attncourse.nn.rnn.reorder_batch` reorders its rows for beam search.

    Attributes
    ----------
    k : (batch, num_heads, cache_len, d_k)
    v : (batch, num_heads, cache_len, d_v)
    """

    kind = "keys and values"

    k: torch.Tensor
    v: torch.Tensor

    def __len__(self) -> int:
        return int(self.k.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Extend the cache along the sequence axis with ``k, v (batch, num_heads, new_len, d)``.

        The attributes are rebound to new tensors; tensors held elsewhere (an
        earlier decoder state) are not modified.
        """
        self.k = torch.cat([self.k, k], dim=2)
        self.v = torch.cat([self.v, v], dim=2)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Parameters
    ----------
    d_model : int
        Width of queries, keys, values and output.
    num_heads : int
        h; each head has d_k = d_v = d_model / h.
    dropout : float
        Dropout on the attention weights, in training mode only (as in
        ``torch.nn.MultiheadAttention``; the paper's dropout is on sublayer outputs,
        which :mod:`attncourse.nn.transformer` applies). Returned weights are before dropout.
    bias : bool
        Add biases to the four projections (the paper's equations have none;
        ``torch.nn.MultiheadAttention`` has them).

    Attributes
    ----------
    w_q, w_k, w_v : nn.Linear(d_model, d_model)
        W^Q, W^K, W^V: the h per-head projections side by side. ``nn.Linear``
        stores the transpose, so ``w_q.weight[i * d_k:(i + 1) * d_k].T`` is W_i^Q.
    w_o : nn.Linear(d_model, d_model)
        W^O.
    d_k : int
        d_model // num_heads.

    Raises
    ------
    ValueError
        If ``d_model`` is not divisible by ``num_heads`` (the message names both),
        or a size or the dropout rate is out of range.

    References
    ----------
    Vaswani et al. (2017), section 3.2.2.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if int(d_model) < 1 or int(num_heads) < 1:
            raise ValueError(f"d_model and num_heads must be positive, got d_model={d_model}, num_heads={num_heads}")
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} must be divisible by num_heads={num_heads} "
                f"(each head gets d_k = d_model / num_heads); try num_heads in "
                f"{[h for h in range(1, min(d_model, 16) + 1) if d_model % h == 0]}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.d_model, self.num_heads = int(d_model), int(num_heads)
        self.d_k = self.d_model // self.num_heads
        self.dropout = float(dropout)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform projections and zero biases, as ``torch.nn.MultiheadAttention``."""
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            nn.init.xavier_uniform_(linear.weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def to_torch(self) -> nn.MultiheadAttention:
        """``torch.nn.MultiheadAttention`` holding these weights: PyTorch's implementation of the same map.

        W^Q, W^K, W^V are stacked into its ``in_proj_weight`` (and the biases into
        ``in_proj_bias``), W^O is its ``out_proj``; it is batch-first, on this module's device
        and dtype, with its dropout rate. Note that its boolean masks are True where a key
        may *not* be attended, the opposite of :meth:`forward`'s.

        Returns
        -------
        torch.nn.MultiheadAttention
            A copy: later changes to either module's weights do not reach the other.
        """
        weight = self.w_q.weight
        bias = self.w_q.bias is not None
        theirs = nn.MultiheadAttention(self.d_model, self.num_heads, dropout=self.dropout, bias=bias,
                                       batch_first=True, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            theirs.in_proj_weight.copy_(torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight]))
            theirs.out_proj.weight.copy_(self.w_o.weight)
            if bias:
                theirs.in_proj_bias.copy_(torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias]))
                theirs.out_proj.bias.copy_(self.w_o.bias)
        return theirs

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, d_model) -> (batch, num_heads, seq_len, d_k); see :func:`split_heads`."""
        return split_heads(x, self.num_heads)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, num_heads, seq_len, d_v) -> (batch, seq_len, d_model); see :func:`merge_heads`."""
        return merge_heads(x)

    def _validate_inputs(self, name: str, x: torch.Tensor, batch: int | None = None) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model or (batch is not None and x.shape[0] != batch):
            expected = f"(batch{'=' + str(batch) if batch is not None else ''}, seq_len, d_model={self.d_model})"
            raise ValueError(f"{name} must be {expected}, got {tuple(x.shape)}")

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> KVCache:
        """K W^K and V W^V split into heads, e.g. once per sentence for cross-attention.

        Parameters
        ----------
        key, value : (batch, src_len, d_model)

        Returns
        -------
        KVCache
            ``k, v: (batch, num_heads, src_len, d_k)``.

        Raises
        ------
        ValueError
            If the shapes do not fit ``d_model`` or each other.
        """
        self._validate_inputs("key", key)
        self._validate_inputs("value", value, key.shape[0])
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} need the same src_len")
        return KVCache(k=self.split_heads(self.w_k(key)), v=self.split_heads(self.w_v(value)))

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> KVCache:
        """A :class:`KVCache` with no entries, ``k, v: (batch, num_heads, 0, d_k)``."""
        dtype = self.w_q.weight.dtype if dtype is None else dtype
        device = self.w_q.weight.device if device is None else device
        empty = torch.zeros(batch, self.num_heads, 0, self.d_k, dtype=dtype, device=device)
        return KVCache(k=empty, v=empty.clone())

    def _validate_mask(self, mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"mask must be a boolean tensor (True = may attend), got {dtype}")
        try:
            fits = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to (batch, num_heads, tgt_len, src_len) "
                f"= {scores_shape}; a key padding mask (batch, src_len) needs mask[:, None, None, :]"
            )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        fast: bool = True,
        kv_cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each query to the keys, in every head, and mix the heads with W^O.

        Parameters
        ----------
        query : (batch, tgt_len, d_model)
            What asks: the decoder states, or the same sequence as ``key`` in self-attention.
        key, value : (batch, src_len, d_model), or None with ``kv_cache``
            What is looked up and what is returned. ``None`` (both) uses the
            cached keys and values only, as cross-attention does while decoding.
        mask : bool tensor broadcastable to (batch, num_heads, tgt_len, src_len), optional
            ``True`` where a query may attend to a key. A key padding mask
            ``(batch, src_len)`` is passed as ``mask[:, None, None, :]``, a causal
            mask as ``(tgt_len, tgt_len)``. With a cache, src_len counts the
            cached keys and the new ones.
        need_weights : bool
            Return the weights of every head (forces the teaching path).
        fast : bool
            Use ``scaled_dot_product_attention`` when the weights are not needed;
            ``False`` takes the teaching path. Both give the same output.
        kv_cache : KVCache, optional
            Keys and values of earlier positions. When ``key``/``value`` are given,
            their projections are **appended to the cache in place** (the cache's
            attributes are rebound to the concatenation) and attention runs
            over all of them.

        Returns
        -------
        output : (batch, tgt_len, d_model)
            MultiHead(Q, K, V); zero (before W^O's bias) for a query that may attend to nothing.
        weights : (batch, num_heads, tgt_len, src_len) or None
            Each head's attention weights (rows sum to 1; exactly 0 where the mask
            is False; a fully masked row is all zeros), if ``need_weights``.

        Raises
        ------
        ValueError
            If a shape does not fit ``d_model``, the batch or the mask; the message names both shapes.
        TypeError
            If the mask is not boolean.

        References
        ----------
        Vaswani et al. (2017), section 3.2.2 and equation (1).
        """
        self._validate_inputs("query", query)
        batch = query.shape[0]
        if (key is None) != (value is None):
            raise ValueError("pass both key and value, or neither (to use kv_cache alone)")
        if key is None:
            if kv_cache is None:
                raise ValueError("key and value may be None only when a kv_cache holds them")
            k, v = kv_cache.k, kv_cache.v
        else:
            new = self.project_kv(key, value)
            if new.k.shape[0] != batch:
                raise ValueError(f"query {tuple(query.shape)} and key {tuple(key.shape)} differ in batch")
            if kv_cache is not None:
                kv_cache.append(new.k, new.v)
                new = kv_cache
            k, v = new.k, new.v
        if k.shape[0] != batch:
            raise ValueError(f"query {tuple(query.shape)} and cached keys {tuple(k.shape)} differ in batch")
        q = self.split_heads(self.w_q(query))  # (batch, num_heads, tgt_len, d_k)
        if mask is not None:
            self._validate_mask(mask, (batch, self.num_heads, q.shape[2], k.shape[2]))
        p_drop = self.dropout if self.training else 0.0
        if need_weights or not fast:
            heads, weights = attention(q, k, v, mask)  # teaching path: softmax(Q K^T / sqrt(d_k)) V
            if p_drop > 0:
                heads = F.dropout(weights, p_drop, training=True) @ v
        else:
            heads = self._fast_attention(q, k, v, mask, p_drop)
            weights = None
        output = self.w_o(self.merge_heads(heads))
        return output, (weights if need_weights else None)

    @staticmethod
    def _fast_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, p_drop: float
    ) -> torch.Tensor:
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)
        # Some SDPA kernels return NaN for a row with no allowed key. Let such rows
        # attend everywhere (finite values and gradients), then zero them.
        fully_masked = ~mask.any(dim=-1, keepdim=True)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | fully_masked, dropout_p=p_drop)
        return out.masked_fill(fully_masked, 0.0)
