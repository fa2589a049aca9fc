"""Gated attention: a sigmoid gate on each head's output, computed from the layer's input.

Qiu et al. (2025) compare many places and forms of a gate in a Transformer's
attention and keep one: after scaled dot-product attention and before the output
projection, each head's output is multiplied elementwise by a sigmoid of a linear
map of the same input the queries came from ("G1", head-specific, elementwise):

    Y = Attention(Q, K, V)                          (batch, h, n, d_k) before merging
    G = sigmoid(X W_g + b_g)                        (batch, n, h d_k), one gate per feature of each head
    output = (merge_heads(Y) * G) W^O

With the gate a head can output (close to) nothing, instead of having to park its
weight on a token it does not need, which is their explanation of why the gate
removes the "attention sink" on the first token and the very large activations
that come with it, and why it lets training take larger learning rates (their
sections 4 and 5). With W_g = 0 and a large bias the gate is 1 and the module is
:class:`~attncourse.nn.causal_attention.CausalSelfAttention` with the same weights (tested).

Registered as ``"gated"`` (:mod:`attncourse.nn.spec`), with the options of ``"gqa"``;
everything else (GQA, windows, RoPE and its scalings, ALiBi, the cache) is inherited.

References
----------
Qiu et al. (2025), "Gated Attention for Large Language Models: Non-linearity,
Sparsity, and Attention-Sink-Free", section 2 (the gate's positions and forms;
G1 after SDPA, elementwise, head-specific, sigmoid), sections 4-5 (sinks, massive
activations, learning rates).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attncourse.nn.attention import merge_heads
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.spec import register_attention


@dataclass(frozen=True)
class GatedOptions(GQAOptions):
    """The options of attention variant ``"gated"``: those of ``"gqa"``
    (:class:`~attncourse.nn.causal_attention.GQAOptions`: ``num_kv_heads``, ``window``, ``bias`` on the four
    projections; the gate always has one), under their own name."""


class GatedSelfAttention(CausalSelfAttention):
    """:class:`~attncourse.nn.causal_attention.CausalSelfAttention` with a sigmoid gate on every head's output.

    Parameters
    ----------
    As :class:`~attncourse.nn.causal_attention.CausalSelfAttention`.

    Attributes
    ----------
    w_g : nn.Linear(d_model, h * d_k)
        The gate's map from the attention's input, with a bias (initialised 0: gates of 1/2).
    last_gate : (batch, seq_len, h * d_k) tensor or None
        The gate of the last call, detached, for inspection.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.w_g = nn.Linear(self.d_model, self.num_heads * self.d_k, bias=True)
        nn.init.zeros_(self.w_g.bias)
        self.last_gate: torch.Tensor | None = None

    # from_options is CausalSelfAttention's: GatedOptions has GQAOptions' fields, and it builds cls.

    def output(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """``(merge_heads(heads) * sigmoid(x W_g + b_g)) W^O``: heads ``(batch, h, seq_len, d_k)``,
        x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_model)`` (Qiu et al. 2025, G1)."""
        gate = torch.sigmoid(self.w_g(x))
        self.last_gate = gate.detach()
        return self.w_o(merge_heads(heads) * gate)


register_attention("gated", GatedOptions, GatedSelfAttention.from_options)
