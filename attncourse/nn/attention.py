"""Multi-head attention, with a teaching path that returns the weights and a fast path.

Masks are boolean, True = may attend. Source: Vaswani et al. (2017), "Attention Is All
You Need", section 3.2.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.torch_attention import attention


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, seq_len, num_heads * d_k) -> (batch, num_heads, seq_len, d_k).

    Raises ``ValueError`` if ``x`` is not 3-D or its width is not divisible by
    ``num_heads``.
    """
    if x.dim() != 3 or x.shape[-1] % num_heads != 0:
        raise ValueError(
            f"split_heads needs (batch, seq_len, num_heads * d_k) with a width divisible by "
            f"num_heads={num_heads}, got {tuple(x.shape)}"
        )
    batch, seq_len, width = x.shape
    return x.view(batch, seq_len, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concat(head_1, ..., head_h): (batch, h, seq_len, d_v) -> (batch, seq_len, h d_v).

    Raises ``ValueError`` if ``x`` is not 4-D.
    """
    if x.dim() != 4:
        raise ValueError(f"merge_heads needs (batch, num_heads, seq_len, d_v), got {tuple(x.shape)}")
    batch, num_heads, seq_len, d_v = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_v)


@dataclass
class KVCache:
    """Keys and values ``k, v`` (batch, num_heads, cache_len, d_k) between steps."""

    kind = "keys and values"

    k: torch.Tensor
    v: torch.Tensor

    def __len__(self) -> int:
        return int(self.k.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Extend with ``k, v`` (batch, num_heads, new_len, d_k)."""
        self.k = torch.cat([self.k, k], dim=2)
        self.v = torch.cat([self.v, v], dim=2)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class StaticKVCache:
    """Keys and values in buffers preallocated to ``capacity`` positions, filled in place.

    The buffers ``keys, values`` are (batch, num_heads, capacity, d_k); ``k, v`` are views of
    the first ``len(self)`` positions, so an attention layer uses it as a :class:`KVCache`
    (:class:`~attncourse.nn.protocol.DecoderCache`, ``kind = "keys and values"``), but
    ``append`` copies into the buffers instead of concatenating: no allocation per step,
    and the buffers keep their address, as a compiled step or a CUDA graph needs. Source:
    Kwon et al. (2023), "Efficient Memory Management for Large Language Model Serving with
    PagedAttention", section 3.1 (a contiguous cache preallocated to the final length).

    Parameters
    ----------
    batch, num_heads, capacity, d_k : int
        Sizes of the buffers; ``capacity`` is the final length (prompt + new tokens).
    dtype : torch.dtype
    device : torch.device or str, optional

    Raises
    ------
    ValueError
        If a size is not a positive int (``capacity`` may be 0).
    """

    kind = "keys and values"

    def __init__(self, batch: int, num_heads: int, capacity: int, d_k: int,
                 dtype: torch.dtype = torch.float32, device=None) -> None:
        sizes = {"batch": batch, "num_heads": num_heads, "d_k": d_k, "capacity": capacity + 1}
        for name, value in sizes.items():
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.keys = torch.zeros(batch, num_heads, capacity, d_k, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the buffers hold."""
        return int(self.keys.shape[2])

    @property
    def k(self) -> torch.Tensor:
        """The cached keys, (batch, num_heads, cache_len, d_k): a view of :attr:`keys`."""
        return self.keys[:, :, :self.length]

    @property
    def v(self) -> torch.Tensor:
        """The cached values, (batch, num_heads, cache_len, d_k): a view of :attr:`values`."""
        return self.values[:, :, :self.length]

    def __len__(self) -> int:
        return self.length

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write ``k, v`` (batch, num_heads, new_len, d_k) after the cached positions.

        Raises
        ------
        ValueError
            If they do not fit the buffers' other sizes, or the positions would pass ``capacity``.
        """
        start, end = self.length, self.length + k.shape[2]
        expected = self.keys.shape[:2] + self.keys.shape[3:]
        if k.dim() != 4 or k.shape != v.shape or k.shape[:2] + k.shape[3:] != expected:
            raise ValueError(f"append needs keys and values (batch, num_heads, new_len, d_k) = "
                             f"{tuple(expected[:2])} + (new_len, {expected[2]}), got {tuple(k.shape)} "
                             f"and {tuple(v.shape)}")
        if end > self.capacity:
            raise ValueError(f"{end} positions do not fit the static cache's capacity of {self.capacity}")
        self.keys[:, :, start:end].copy_(k)
        self.values[:, :, start:end].copy_(v)
        self.length = end

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens); the buffers stay."""
        self.length = max(0, min(int(length), self.length))


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, d_k = d_model / num_heads.

    ``dropout`` acts on the weights in training. Raises ``ValueError`` if ``num_heads``
    does not divide ``d_model`` or a size or rate is out of range. Source: Vaswani et
    al. (2017), section 3.2.2.
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
        """Glorot-uniform projections and zero biases."""
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            nn.init.xavier_uniform_(linear.weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def to_torch(self) -> nn.MultiheadAttention:
        """A batch-first ``torch.nn.MultiheadAttention`` with a copy of these weights.

        Its boolean masks are True where a key may *not* be attended.
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
        """(batch, seq_len, d_model) -> (batch, num_heads, seq_len, d_k)."""
        return split_heads(x, self.num_heads)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, num_heads, seq_len, d_v) -> (batch, seq_len, d_model)."""
        return merge_heads(x)

    def _validate_inputs(self, name: str, x: torch.Tensor, batch: int | None = None) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model or (batch is not None and x.shape[0] != batch):
            expected = f"(batch{'=' + str(batch) if batch is not None else ''}, seq_len, d_model={self.d_model})"
            raise ValueError(f"{name} must be {expected}, got {tuple(x.shape)}")

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> KVCache:
        """K W^K, V W^V of ``key, value`` (batch, src_len, d_model) as a KVCache.

        Raises ``ValueError`` if the shapes do not fit ``d_model`` or each other.
        """
        self._validate_inputs("key", key)
        self._validate_inputs("value", value, key.shape[0])
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} need the same src_len")
        return KVCache(k=self.split_heads(self.w_k(key)), v=self.split_heads(self.w_v(value)))

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> KVCache:
        """A :class:`KVCache` with ``k, v`` of shape (batch, num_heads, 0, d_k)."""
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
        """Attend from each query to the keys in every head; mix the heads with W^O.

        Shapes: ``query`` (batch, tgt_len, d_model), ``key, value`` (batch, src_len,
        d_model) or None (cache only), ``mask`` bool broadcastable to (batch, num_heads,
        tgt_len, src_len) -> output (batch, tgt_len, d_model), weights (batch,
        num_heads, tgt_len, src_len) or None. New keys and values are appended to
        ``kv_cache`` in place. Raises ``ValueError`` if a shape does not fit,
        ``TypeError`` if the mask is not bool.
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
