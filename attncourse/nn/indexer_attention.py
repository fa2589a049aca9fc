"""DeepSeek Sparse Attention (DSA): a lightning indexer picks the keys each query reads.

A few cheap indexer heads score every earlier key,

    I_{t,s} = sum_j w_{t,j} ReLU(q^I_{t,j} . k^I_s),

with ``q^I_{t,j}`` (``index_dim`` numbers) and ``w_{t,j}`` (one number) computed from
the query token and one indexer key ``k^I_s`` per token; each query then attends, with
every head of the main (GQA) attention, only to the ``top_k_keys`` earlier keys of
highest score, plus itself. The cache keeps the indexer keys beside the keys and values.

Training. The selection is not differentiable, so the indexer learns from its own loss:
the KL divergence from the main attention's distribution over all allowed keys (summed
over heads, L1-normalised, detached) to ``softmax(I_{t,:})``, the report's eq. (3). Its
input is detached from the model, so this loss trains the indexer only and the language
model's loss the rest, as in the report's sparse stage; the main attention reads the
selected keys from the first step (the report's dense warm-up is left out). The loss is
added to the training loss's gradient without changing any loss value the training loop
sees (:class:`AddAuxiliaryLoss`, a layer's output passed through unchanged).

Source: DeepSeek-AI (2025), "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with
DeepSeek Sparse Attention", section 1, eqs. (1)-(2) (the indexer, the selection) and
section 2.1, eqs. (3)-(4) (its training).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from attncourse.functional.torch_attention import masked_softmax
from attncourse.nn.alibi import alibi_bias
from attncourse.nn.attend import allowed_keys, repeat_kv, validate_call
from attncourse.nn.attention import split_heads
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.registry import register_attention
from attncourse.nn.rope import RopeScaling, apply_rope


@dataclass(frozen=True)
class DSAOptions(GQAOptions):
    """Options of variant ``"dsa"``: those of ``"gqa"`` and the indexer's sizes.

    Raises ``ValueError`` unless the three sizes are positive ints.
    """

    index_heads: int = field(
        default=4,
        metadata={
            "help": "with --attention dsa: heads H^I of the lightning indexer "
            "(default 4; DeepSeek-V3.2: 64)",
            "check": "positive_int",
            "limit": (1, 64, "memory grows with it"),
            "metavar": "H",
        },
    )
    index_dim: int = field(
        default=16,
        metadata={
            "help": "with --attention dsa: width d^I of the indexer's queries and "
            "keys, even with RoPE "
            "(default 16; DeepSeek-V3.2: 128)",
            "check": "positive_int",
            "limit": (1, 4096, "memory grows with it"),
            "metavar": "D",
        },
    )
    # not "top_k": sample's --top-k is another thing (the most probable tokens)
    top_k_keys: int = field(
        default=16,
        metadata={
            "help": "with --attention dsa: earlier keys each query reads, besides "
            "itself (default 16, a quarter "
            "of chapter 7's context; DeepSeek-V3.2: 2048)",
            "check": "positive_int",
            "limit": (1, 1 << 20, "more than the context reads every key"),
            "metavar": "K",
        },
    )

    def __post_init__(self) -> None:
        for name in ("index_heads", "index_dim", "top_k_keys"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass
class IndexedKVCache:
    """Keys and values ``(batch, g, cache_len, d_k)``, indexer keys ``(.., d^I)``."""

    kind = "keys, values and indexer keys"

    k: torch.Tensor
    v: torch.Tensor
    k_index: torch.Tensor

    def __len__(self) -> int:
        return int(self.k.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor, k_index: torch.Tensor) -> None:
        """Extend with ``k, v (batch, g, new, d_k)``, ``k_index (batch, new, d^I)``."""
        self.k = torch.cat([self.k, k], dim=2)
        self.v = torch.cat([self.v, v], dim=2)
        self.k_index = torch.cat([self.k_index, k_index], dim=1)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]
        self.k_index = self.k_index[:, :length]


def index_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The lightning indexer's scores ``I_{t,s} = sum_j w_{t,j} ReLU(q_{t,j} . k_s)``.

    Parameters
    ----------
    q : torch.Tensor
        Indexer queries ``(batch, H^I, tgt_len, d^I)``.
    k : torch.Tensor
        Indexer keys ``(batch, src_len, d^I)``, one per token (shared by the heads).
    w : torch.Tensor
        Head weights ``(batch, tgt_len, H^I)``.

    Returns
    -------
    torch.Tensor
        ``(batch, tgt_len, src_len)``, unitless scores (only their order matters).

    Raises
    ------
    ValueError
        If the shapes do not fit.

    Source: DeepSeek-AI (2025), section 1, eq. (1).
    """
    if (
        q.dim() != 4
        or k.dim() != 3
        or w.dim() != 3
        or k.shape[0] != q.shape[0]
        or k.shape[2] != q.shape[3]
        or w.shape != (q.shape[0], q.shape[2], q.shape[1])
    ):
        raise ValueError(
            f"index_scores needs q (batch, H, tgt_len, d), k (batch, src_len, d) "
            f"and w (batch, "
            f"tgt_len, H), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(w.shape)}"
        )
    dots = torch.relu(q @ k[:, None].transpose(-2, -1))  # (batch, H, tgt_len, src_len)
    return torch.einsum("bjts,btj->bts", dots, w)


def select_top_k(
    scores: torch.Tensor, allowed: torch.Tensor, top_k: int
) -> torch.Tensor:
    """Each query's ``top_k`` allowed earlier keys by ``scores``, and itself.

    The queries are the last ``tgt_len`` of ``src_len`` positions (query ``t`` is key
    ``src_len - tgt_len + t``); "earlier" means every allowed key but the query's own.
    Ties go to the earlier key (a stable sort), so a row is chosen alike whether it is
    computed alone (cached decoding) or with others.

    Parameters
    ----------
    scores : torch.Tensor
        ``(batch, tgt_len, src_len)`` indexer scores (:func:`index_scores`).
    allowed : torch.Tensor
        Bool, True = may attend, broadcastable to ``(batch, heads, tgt_len, src_len)``
        (heads 1 when the mask is the same for every head).
    top_k : int
        Keys read besides the query's own; all of them where fewer are allowed.

    Returns
    -------
    torch.Tensor
        Bool ``(batch, heads, tgt_len, src_len)``: the keys read, within ``allowed``.

    Raises
    ------
    ValueError
        If ``top_k`` is not a positive int or the shapes do not fit.

    Source: DeepSeek-AI (2025), section 1, eq. (2).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int, got {top_k!r}")
    if scores.dim() != 3:
        raise ValueError(
            f"scores must be (batch, tgt_len, src_len), got {tuple(scores.shape)}"
        )
    batch, tgt_len, src_len = scores.shape
    if allowed.dim() < 4:
        allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
    shape = torch.broadcast_shapes(allowed.shape, (batch, 1, tgt_len, src_len))
    allowed = allowed.expand(shape)
    own = torch.arange(src_len, device=scores.device)[None, :] == (
        torch.arange(tgt_len, device=scores.device)[:, None] + src_len - tgt_len
    )  # (tgt_len, src_len)
    earlier = allowed & ~own
    ranked = scores[:, None].expand(shape).masked_fill(~earlier, float("-inf"))
    order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices[
        ..., :top_k
    ]
    chosen = torch.zeros(shape, dtype=torch.bool, device=scores.device).scatter(
        -1, order, True
    )
    return (chosen & earlier) | (allowed & own)


def keys_read_fraction(seq_len: int, top_k: int) -> float:
    """Share of the causal (query, key) pairs DSA reads in a window of ``seq_len``.

    ``sum_t (min(top_k, t) + 1) / sum_t (t + 1)``, ``t = 0 .. seq_len - 1``: a unitless
    share in (0, 1]. Source: DeepSeek-AI (2025), section 1, eq. (2) (k keys per query).

    Raises
    ------
    ValueError
        Unless both are positive ints.
    """
    for name, value in (("seq_len", seq_len), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    read = sum(min(top_k, t) + 1 for t in range(seq_len))
    return read / (seq_len * (seq_len + 1) / 2)


def indexer_kl(
    scores: torch.Tensor, attention: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """``mean_t KL(p_t || softmax(I_{t,:}))``, ``p_t`` the heads' summed attention.

    Parameters
    ----------
    scores : torch.Tensor
        Indexer scores ``(batch, tgt_len, src_len)``.
    attention : torch.Tensor
        The main attention's weights ``(batch, h, tgt_len, src_len)`` over every
        allowed key (treated as constants).
    allowed : torch.Tensor
        Bool, broadcastable to ``(batch, heads, tgt_len, src_len)``: the keys both
        distributions range over (those of any head). A query with none adds 0.

    Returns
    -------
    torch.Tensor
        A scalar, nats per query.

    Source: DeepSeek-AI (2025), section 2.1, eq. (3) (the dense warm-up's loss).
    """
    if allowed.dim() == 4:  # a key any head may read
        allowed = allowed.any(1)
    allowed = allowed.expand(scores.shape)
    target = attention.detach().sum(1).masked_fill(~allowed, 0.0)
    target = target / target.sum(-1, keepdim=True).clamp_min(
        torch.finfo(target.dtype).tiny
    )
    # a finite floor, not -inf: a query with no allowed key then gives 0, not NaN
    log_q = torch.log_softmax(
        scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), dim=-1
    )
    return (torch.xlogy(target, target) - target * log_q).sum(-1).mean()


class AddAuxiliaryLoss(torch.autograd.Function):
    """``x`` unchanged forward; backward also sends gradient 1 to ``loss``.

    Adds a scalar ``loss`` to the training objective of whatever is computed from
    ``x`` without changing any value. Source: DeepSeek-AI (2024), DeepSeek-V2's
    released modelling code (``AddAuxiliaryLoss``, its MoE balance loss).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.loss_shape, ctx.loss_dtype = loss.shape, loss.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: D102
        return grad, torch.ones(
            ctx.loss_shape, dtype=ctx.loss_dtype, device=grad.device
        )


class IndexerAttention(CausalSelfAttention):
    """GQA whose queries read only the keys a lightning indexer selects.

    Options as :class:`CausalSelfAttention` plus ``index_heads``, ``index_dim`` and
    ``top_k_keys`` (:class:`DSAOptions`). With RoPE the indexer's queries and keys are
    rotated too (else it could not tell a near key from a far one). After each call
    :attr:`last_keys_read` holds the share of allowed (query, key) pairs read and, in
    training, :attr:`last_index_loss` the indexer's KL (nats).

    Raises ``ValueError`` as :class:`CausalSelfAttention`, for an indexer size that is
    not a positive int, or for an odd ``index_dim`` with RoPE. Source: DeepSeek-AI
    (2025), sections 1 and 2.1.
    """

    options: DSAOptions

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        positional: str | None = None,
        causal: bool = True,
        window: int | None = None,
        rope_base: float = 10000.0,
        bias: bool = False,
        rope_scaling: RopeScaling | None = None,
        index_heads: int = 4,
        index_dim: int = 16,
    ) -> None:
        super().__init__(
            d_model,
            num_heads,
            num_kv_heads,
            positional,
            causal,
            window,
            rope_base,
            bias,
            rope_scaling,
        )
        for name, value in (("index_heads", index_heads), ("index_dim", index_dim)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if positional == "rope" and index_dim % 2:
            raise ValueError(
                f"RoPE rotates feature pairs: index_dim={index_dim} must be even"
            )
        self.index_heads, self.index_dim = int(index_heads), int(index_dim)
        self.w_qi = nn.Linear(d_model, self.index_heads * self.index_dim, bias=False)
        self.w_ki = nn.Linear(d_model, self.index_dim, bias=False)
        self.w_wi = nn.Linear(d_model, self.index_heads, bias=False)
        self.last_keys_read: float | None = None
        self.last_index_loss: float | None = None

    @classmethod
    def from_options(
        cls,
        options: DSAOptions,
        *,
        d_model: int,
        num_heads: int,
        causal: bool,
        positional: str | None,
        rope_base: float,
        rope_scaling: RopeScaling | None = None,
    ) -> IndexerAttention:
        """Build ``"dsa"`` from ``options`` (kept as :attr:`options`)."""
        module = cls(
            d_model,
            num_heads,
            options.num_kv_heads,
            positional,
            causal,
            options.window,
            rope_base,
            options.bias,
            rope_scaling,
            options.index_heads,
            options.index_dim,
        )
        module.options = options
        return module

    def cache_numbers_per_token(self) -> int:
        """Numbers cached per token: keys, values ``2 g d_k``, indexer key ``d^I``."""
        return 2 * self.num_kv_heads * self.d_k + self.index_dim

    def empty_cache(
        self, batch: int, dtype: torch.dtype | None = None, device=None
    ) -> IndexedKVCache:
        """An :class:`IndexedKVCache` with no positions."""
        dtype = self.w_q.weight.dtype if dtype is None else dtype
        device = self.w_q.weight.device if device is None else device
        empty = torch.zeros(
            batch, self.num_kv_heads, 0, self.d_k, dtype=dtype, device=device
        )
        return IndexedKVCache(
            empty,
            empty.clone(),
            torch.zeros(batch, 0, self.index_dim, dtype=dtype, device=device),
        )

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.positional != "rope":
            return x
        return apply_rope(x, positions, self.rope_base, self.rope_scaling)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        kv_cache: IndexedKVCache | None = None,
        need_weights: bool = False,
        fast: bool = True,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each new position to its selected cached and new keys.

        ``x (batch, seq_len, d_model)``; bool ``mask`` broadcastable to ``(batch, h,
        seq_len, cache_len + seq_len)``; ``kv_cache`` grows in place. Returns the output
        (like ``x``) and the weights ``(batch, h, seq_len, cache_len + seq_len)``, zero
        off the selected keys (None if ``fast`` and not ``need_weights``). The weights
        are always written out: the indexer's loss needs the dense ones.

        Raises
        ------
        ValueError
            For a bad shape, mask, positions or cache.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must be (batch, seq_len, d_model={self.d_model}), "
                f"got {tuple(x.shape)}"
            )
        batch, seq_len, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        if kv_cache is not None and (
            not isinstance(kv_cache, IndexedKVCache)
            or kv_cache.k.shape[0] != batch
            or kv_cache.k.shape[1] != self.num_kv_heads
            or kv_cache.k.shape[3] != self.d_k
            or kv_cache.k_index.shape != (batch, offset, self.index_dim)
        ):
            raise ValueError(
                f"kv_cache must be an IndexedKVCache of (batch={batch}, num_kv_heads="
                f"{self.num_kv_heads}, cache_len, d_k={self.d_k}) keys and values "
                f"and (batch, cache_len, {self.index_dim}) indexer keys"
            )
        positions = validate_call(
            mask, positions, batch, self.num_heads, seq_len, offset, x.device
        )
        q = self._rope(split_heads(self.w_q(x), self.num_heads), positions)
        k = self._rope(split_heads(self.w_k(x), self.num_kv_heads), positions)
        v = split_heads(self.w_v(x), self.num_kv_heads)
        # the indexer learns from its own loss only (report, section 2.1)
        index_input = x.detach()
        q_index = self._rope(
            split_heads(self.w_qi(index_input), self.index_heads), positions
        )
        k_index = self._rope(self.w_ki(index_input)[:, None], positions)[:, 0]
        if kv_cache is not None:
            kv_cache.append(k, v, k_index)
            k, v, k_index = kv_cache.k, kv_cache.v, kv_cache.k_index
        src_len = k.shape[2]
        allowed = allowed_keys(
            seq_len, src_len, self.causal, self.window, device=x.device
        )
        if allowed is None:
            allowed = torch.ones(seq_len, src_len, dtype=torch.bool, device=x.device)
        if mask is not None:
            allowed = mask & allowed
        scores_index = index_scores(q_index, k_index, self.w_wi(index_input))
        selected = select_top_k(scores_index, allowed, self.options.top_k_keys)
        k, v = repeat_kv(k, self.num_heads), repeat_kv(v, self.num_heads)
        scores = q @ k.transpose(-2, -1) / self.d_k**0.5
        if self.positional == "alibi":
            scores = scores + alibi_bias(
                self.num_heads, seq_len, src_len, dtype=q.dtype
            ).to(x.device)
        weights = masked_softmax(scores, selected)
        out = self.output(x, weights @ v)
        pairs = allowed.expand_as(selected).sum()
        self.last_keys_read = float(selected.sum() / pairs) if int(pairs) else 0.0
        if self.training and torch.is_grad_enabled():
            loss = indexer_kl(scores_index, masked_softmax(scores, allowed), allowed)
            self.last_index_loss = float(loss.detach())
            out = AddAuxiliaryLoss.apply(out, loss)
        return out, (weights if need_weights or not fast else None)


register_attention("dsa", DSAOptions, IndexerAttention.from_options)

__all__ = [
    "AddAuxiliaryLoss",
    "DSAOptions",
    "IndexedKVCache",
    "IndexerAttention",
    "index_scores",
    "indexer_kl",
    "keys_read_fraction",
    "select_top_k",
]
