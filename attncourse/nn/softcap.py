"""Attention-logit soft-capping: every score passes through ``cap * tanh(score / cap)``.

Gemma 2 caps its attention logits at 50 so that no score runs away during training; the
cap is smooth, nearly the identity for scores well under it. The variant changes only the
scores, so it is the model of a *score-only* variant: :meth:`SoftCapAttention.attend` is
the step it replaces, and :meth:`SoftCapAttention.score_mod` states the same change in
FlexAttention's terms (:mod:`attncourse.nn.flex` runs it there).

Source: Gemma Team (2024), "Gemma 2: Improving Open Language Models at a Practical Size",
section 2 (logit soft-capping, attention cap 50.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attncourse.functional.torch_attention import masked_softmax
from attncourse.nn.attend import repeat_kv
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.registry import register_attention


@dataclass(frozen=True)
class SoftCapOptions(GQAOptions):
    """Options of variant ``"softcap"``: those of ``"gqa"`` and the cap."""

    softcap: float = field(default=50.0, metadata={
        "help": "soft-cap of the attention scores, cap * tanh(score / cap) (Gemma 2: 50; default 50)",
        "check": "positive_float", "limit": (1e-3, 1e6, "a cap below the scores flattens them"),
        "metavar": "CAP"})

    def __post_init__(self) -> None:
        if not self.softcap > 0:
            raise ValueError(f"softcap must be a positive number, got {self.softcap!r}")


def soft_cap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(scores / cap)``, elementwise: the scores bounded in ``(-cap, cap)``."""
    return cap * torch.tanh(scores / cap)


class SoftCapAttention(CausalSelfAttention):
    """:class:`CausalSelfAttention` whose scores are soft-capped before the softmax.

    Options as ``CausalSelfAttention`` plus ``options.softcap`` (:class:`SoftCapOptions`).
    """

    options: SoftCapOptions

    @classmethod
    def from_options(cls, options: SoftCapOptions, **kwargs) -> SoftCapAttention:
        """Build ``"softcap"`` from ``options`` (kept as :attr:`options`)."""
        return super().from_options(options, **kwargs)

    def score_mod(self, score: torch.Tensor, batch: torch.Tensor, head: torch.Tensor,
                  q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        """FlexAttention's ``score_mod``: the scaled score ``q.k / sqrt(d_k)``, capped."""
        return soft_cap(score, self.options.softcap)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
               bias: torch.Tensor | None, *, need_weights: bool = False, fast: bool = True,
               is_causal: bool = False, query_positions: torch.Tensor | None = None,
               key_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``softmax(cap tanh(q k^T / (sqrt(d_k) cap)) + bias) v`` over the allowed keys.

        ``q (batch, h, seq_len, d_k)``, ``k, v (batch, g, src_len, d_k)`` -> heads shaped
        like ``q`` and the weights ``(batch, h, seq_len, src_len)`` (a row with no allowed
        key: zeros). The bias (ALiBi's) is added after the cap.
        """
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
        scores = soft_cap(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, self.options.softcap)
        if bias is not None:
            scores = scores + bias
        weights = masked_softmax(scores, allowed)
        return weights @ v, weights


register_attention("softcap", SoftCapOptions, SoftCapAttention.from_options)

__all__ = ["SoftCapAttention", "SoftCapOptions", "soft_cap"]
