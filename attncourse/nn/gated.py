"""Gated attention: a sigmoid gate, computed from the input, on each head's output.

Source: Qiu et al. (2025), "Gated Attention for Large Language Models", section 2 (G1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attncourse.nn.attention import merge_heads
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.registry import register_attention


@dataclass(frozen=True)
class GatedOptions(GQAOptions):
    """Options of variant ``"gated"``: those of ``"gqa"`` (``GQAOptions``)."""


class GatedSelfAttention(CausalSelfAttention):
    """``CausalSelfAttention`` with a sigmoid gate on every head's output."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.w_g = nn.Linear(self.d_model, self.num_heads * self.d_k, bias=True)
        nn.init.zeros_(self.w_g.bias)
        self.last_gate: torch.Tensor | None = None

    # from_options is CausalSelfAttention's: GatedOptions has GQAOptions' fields, and it builds cls.

    def output(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """(merge_heads(heads) * sigmoid(x W_g + b_g)) W^O, (batch, seq_len, d)."""
        gate = torch.sigmoid(self.w_g(x))
        self.last_gate = gate.detach()
        return self.w_o(merge_heads(heads) * gate)


register_attention("gated", GatedOptions, GatedSelfAttention.from_options)
