"""Attention as a fixed-size memory: linear attention, DeltaNet and Gated DeltaNet.

Source: Katharopoulos et al. (2020), "Transformers are RNNs", eqs. (18)-(19); Yang et
al. (2024), "Parallelizing Linear Transformers with the Delta Rule", sections 3-4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.delta_rule import (
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_weights,
)
from attncourse.functional.fast_weights import (
    linear_attention_parallel,
    linear_attention_recurrent,
)
from attncourse.nn.attend import validate_call
from attncourse.nn.attention import merge_heads, split_heads
from attncourse.nn.protocol import DecoderAttention
from attncourse.nn.registry import register_attention


@dataclass(frozen=True)
class MemoryOptions:
    """Options of the variants ``"linear"``, ``"deltanet"``, ``"gated-deltanet"``.

    Raises ``ValueError`` unless ``chunk_size`` > 0 and ``conv_size`` >= 0 are ints.
    """

    chunk_size: int = field(default=64, metadata={
        "help": "with --attention linear, deltanet or gated-deltanet: positions per chunk of the delta "
                "rules' chunkwise form (default 64; the outputs agree to rounding, 16 trains faster on a CPU)",
        "check": "positive_int", "limit": (1, 8192, "a chunk's matrices grow with its square"), "metavar": "C"})
    bias: bool = False
    conv_size: int = field(default=0, metadata={
        "help": "with a memory attention: width of the short causal convolution on the projections "
                "(default 0: none; Yang et al. use 4)",
        "check": "nonnegative_int", "limit": (0, 64, "a convolution wider than a chunk"), "metavar": "K"})

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {self.chunk_size!r}")
        if isinstance(self.conv_size, bool) or not isinstance(self.conv_size, int) or self.conv_size < 0:
            raise ValueError(f"conv_size must be a non-negative int, got {self.conv_size!r}")


@dataclass
class MemoryState:
    """A memory attention's cache: its state, whatever the tokens read."""

    kind = "state"

    state: torch.Tensor
    length: int = 0
    tail: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.length

    def advance(self, state: torch.Tensor, positions: int, tail: torch.Tensor | None = None) -> None:
        """Replace the state and convolution tail by those ``positions`` later."""
        self.state, self.tail = state, tail
        self.length += positions


class MemoryAttention(nn.Module, DecoderAttention):
    """Decoder attention with a fixed-size memory per head as its cache.

    A subclass gives the update rule. Raises ``ValueError`` if ``num_heads`` does not
    divide ``d_model``.
    """

    #: Its cache is a state of fixed size (the contract tests read this): no weights over cached keys.
    fixed_state = True
    causal = True

    def __init__(self, d_model: int, num_heads: int, chunk_size: int = 64, bias: bool = False,
                 conv_size: int = 0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.chunk_size, self.conv_size = chunk_size, conv_size
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        # one filter per feature of q, k and v (depthwise), over the last conv_size tokens
        self.conv = (nn.Conv1d(3 * d_model, 3 * d_model, conv_size, groups=3 * d_model, bias=False)
                     if conv_size else None)

    @classmethod
    def from_options(cls, options: MemoryOptions, *, d_model: int, num_heads: int, causal: bool,
                     positional: str | None, rope_base: float) -> MemoryAttention:
        """Build the variant for a model spec (causal, no positions inside).

        Raises ``ValueError`` if ``causal`` is False or a position scheme acts inside
        attention.
        """
        if not causal:
            raise ValueError(f"{cls.__name__} is a causal memory: it needs causal=True")
        if positional is not None:
            raise ValueError(f"{cls.__name__} keeps no positions in its state: use positions 'learned', "
                             f"'sinusoidal' or 'none', not {positional!r}")
        module = cls(d_model, num_heads, options.chunk_size, options.bias, options.conv_size)
        module.options = options
        return module

    def state_width(self) -> int:
        """Columns of each head's state: d_v."""
        return self.d_k

    def state_numbers(self) -> int:
        """Numbers cached per sequence: num_heads d_k width + the conv tail."""
        tail = max(self.conv_size - 1, 0) * 3 * self.d_model
        return self.num_heads * self.d_k * self.state_width() + tail

    def cache_numbers_per_token(self) -> int:
        """0: the memory does not grow with the tokens."""
        return 0

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> MemoryState:
        """A zero state (batch, num_heads, d_k, width), like the weights."""
        weight = self.w_q.weight
        dtype, device = dtype or weight.dtype, device or weight.device
        tail = (torch.zeros(batch, self.conv_size - 1, 3 * self.d_model, dtype=dtype, device=device)
                if self.conv is not None else None)
        return MemoryState(torch.zeros(batch, self.num_heads, self.d_k, self.state_width(), dtype=dtype,
                                       device=device), tail=tail)

    def features(self, x: torch.Tensor, keep: torch.Tensor | None,
                 tail: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        """q, k, v (batch, num_heads, seq_len, d_k), beta, decay and conv tail."""
        raise NotImplementedError

    def projections(self, x: torch.Tensor, keep: torch.Tensor | None,
                    tail: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """x W^Q, x W^K, x W^V per head, through the short convolution if any."""
        p = torch.cat([self.w_q(x), self.w_k(x), self.w_v(x)], dim=-1)  # (batch, n, 3 d_model)
        new_tail = None
        if keep is not None:
            shape = (*p.shape[:2], 3, self.num_heads, self.d_k)
            p = (p.view(shape) * keep.transpose(1, 2)[:, :, None, :, None]).view(p.shape)
        if self.conv is not None:
            start = p.new_zeros(p.shape[0], self.conv_size - 1, p.shape[2]) if tail is None else tail
            full = torch.cat([start, p], dim=1)
            new_tail = full[:, full.shape[1] - (self.conv_size - 1):]
            p = self.conv(full.transpose(1, 2)).transpose(1, 2)  # no padding: n outputs, causal
        q, k, v = p.split(self.d_model, dim=-1)
        return (*(split_heads(t, self.num_heads) for t in (q, k, v)), new_tail)

    def memory(self, inputs: dict[str, torch.Tensor | None], state: torch.Tensor | None,
               fast: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the rule over the new positions: outputs and the new state."""
        raise NotImplementedError

    def weights(self, inputs: dict[str, torch.Tensor | None]) -> torch.Tensor:
        """The (batch, num_heads, n, n) matrix the parallel form applies."""
        raise NotImplementedError

    def read_out(self, out: torch.Tensor) -> torch.Tensor:
        """Each head's output from the memory's read."""
        return out

    def _keep(self, mask: torch.Tensor | None, batch: int, n: int, offset: int) -> torch.Tensor | None:
        if mask is None:
            return None
        if mask.dim() >= 2 and mask.shape[-2] != 1:
            raise ValueError(f"{type(self).__name__} can hide keys from every query but not choose them per "
                             f"query: mask must be (..., 1, cache_len + seq_len), got {tuple(mask.shape)}")
        columns = mask.expand(batch, self.num_heads, 1, offset + n)[:, :, 0, offset:]
        return columns.to(self.w_q.weight.dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, kv_cache: MemoryState | None = None,
                need_weights: bool = False, fast: bool = True,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As :meth:`DecoderAttention.forward`, with a memory as cache.

        Raises ``ValueError`` also for a mask that differs between queries, or
        ``need_weights`` with a non-empty cache.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, seq_len, d_model={self.d_model}), got {tuple(x.shape)}")
        batch, n, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        validate_call(mask, positions, batch, self.num_heads, n, offset, x.device)
        if need_weights and offset:
            raise ValueError(f"{type(self).__name__} keeps no keys: no weights over the {offset} cached "
                             f"tokens; ask need_weights without a cache")
        inputs = self.features(x, self._keep(mask, batch, n, offset), None if kv_cache is None else kv_cache.tail)
        out, state = self.memory(inputs, None if kv_cache is None else kv_cache.state, fast)
        if kv_cache is not None:
            kv_cache.advance(state, n, inputs["tail"])
        output = self.w_o(merge_heads(self.read_out(out)))
        return output, (self.weights(inputs) if need_weights else None)


class LinearMemoryAttention(MemoryAttention):
    """Causal linear attention, phi = elu + 1 (Katharopoulos et al. 2020)."""

    def state_width(self) -> int:
        """d_v + 1: the values' columns and the normaliser's."""
        return self.d_k + 1

    def features(self, x, keep, tail=None):
        q, k, v, tail = self.projections(x, keep, tail)
        phi_k = F.elu(k) + 1
        phi_k = phi_k if keep is None else phi_k * keep[..., None]  # a hidden key writes nothing
        ones = torch.ones_like(v[..., :1])
        return {"q": F.elu(q) + 1, "k": phi_k, "v": torch.cat([v, ones], dim=-1), "beta": None, "decay": None,
                "tail": tail}

    def memory(self, inputs, state, fast):
        form = linear_attention_parallel if fast else linear_attention_recurrent
        return form(inputs["q"], inputs["k"], inputs["v"], initial_state=state)

    def read_out(self, out):
        numerator, normaliser = out[..., :-1], out[..., -1:]
        # A query that sees no key (all hidden) has a normaliser of exactly 0: its output is 0.
        return numerator / torch.where(normaliser > 0, normaliser, torch.ones_like(normaliser))

    def weights(self, inputs):
        scores = (inputs["q"] @ inputs["k"].transpose(-2, -1)).tril()
        total = scores.sum(-1, keepdim=True)
        return scores / torch.where(total > 0, total, torch.ones_like(total))


class DeltaNetAttention(MemoryAttention):
    """The delta rule, S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.w_beta = nn.Linear(self.d_model, self.num_heads)

    def _delta_inputs(self, x, keep, tail):
        q, k, v, tail = self.projections(x, keep, tail)
        beta = torch.sigmoid(self.w_beta(x)).transpose(1, 2)  # (batch, heads, seq_len)
        beta = beta if keep is None else beta * keep  # beta = 0: a hidden key writes nothing
        return {"q": F.normalize(F.silu(q), dim=-1), "k": F.normalize(F.silu(k), dim=-1), "v": v,
                "beta": beta, "decay": None, "tail": tail}

    def features(self, x, keep, tail=None):
        return self._delta_inputs(x, keep, tail)

    def memory(self, inputs, state, fast):
        args = (inputs["q"], inputs["k"], inputs["v"], inputs["beta"], inputs["decay"])
        if fast:
            return delta_rule_chunkwise(*args, chunk_size=self.chunk_size, initial_state=state)
        return delta_rule_recurrent(*args, initial_state=state)

    def weights(self, inputs):
        return delta_rule_weights(inputs["q"], inputs["k"], inputs["beta"], inputs["decay"])


class GatedDeltaNetAttention(DeltaNetAttention):
    """The gated delta rule S_t = a_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t.

    Source: Yang, Kautz, Hatamizadeh (2025), "Gated Delta Networks", section 3.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.w_a = nn.Linear(self.d_model, self.num_heads)
        nn.init.constant_(self.w_a.bias, -3.0)
        self.a_log = nn.Parameter(torch.zeros(self.num_heads))

    def features(self, x, keep, tail=None):
        inputs = self._delta_inputs(x, keep, tail)
        rate = torch.exp(self.a_log) * F.softplus(self.w_a(x))  # (batch, seq_len, heads), >= 0
        decay = torch.exp(-rate).transpose(1, 2).clamp_min(math.ldexp(1.0, -60))  # decay_matrix takes its log
        inputs["decay"] = decay if keep is None else torch.where(keep > 0, decay, torch.ones_like(decay))
        return inputs


register_attention("linear", MemoryOptions, LinearMemoryAttention.from_options)
register_attention("deltanet", MemoryOptions, DeltaNetAttention.from_options)
register_attention("gated-deltanet", MemoryOptions, GatedDeltaNetAttention.from_options)
