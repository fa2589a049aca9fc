"""What greedy and beam search need of a model, and a decoder of its attention."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class EncoderDecoder(Protocol):
    """An encoder-decoder that decodes step by step (greedy, beam search)."""

    config: dict[str, Any]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EncoderDecoder:
        """Build an untrained model from :attr:`config`."""
        return cls(**config)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Any:
        """Run the encoder once per batch.

        ``src`` (batch, src_len) long, ``src_mask`` (batch, src_len) bool. Raises
        ``ValueError`` or ``TypeError`` for a malformed batch.
        """
        ...

    def init_state(self, enc: Any) -> Any:
        """The decoder's state before the first step, for the batch of ``enc``."""
        ...

    def decode_step(self, prev_tokens: torch.Tensor, state: Any, enc: Any) -> tuple[torch.Tensor, Any, Any]:
        """One step: from y_{i-1} (batch,) and the state to logits and the next state.

        Logits (batch, tgt_vocab), weights (batch, src_len) or None. Raises
        ``ValueError`` if ``prev_tokens`` or ``state`` do not fit the batch.
        """
        ...

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> Any:
        """Teacher forcing: logits of every next token given ``tgt_in``.

        ``tgt_in`` is (batch, tgt_len). Raises ``ValueError`` if ``tgt_in`` does not
        have the batch of ``src``.
        """
        ...

    def reorder(self, obj: Any, indices: torch.Tensor) -> Any:
        """Select batch rows ``indices`` (new_batch,) of a decoder or encoder state."""
        ...


@runtime_checkable
class DecoderCache(Protocol):
    """What a decoder attention keeps of earlier positions between decoding steps."""

    kind: str

    def __len__(self) -> int:
        """The positions held, ``cache_len``."""
        ...


@runtime_checkable
class DecoderAttention(Protocol):
    """Causal self-attention as a decoder block uses it, with a cache."""

    d_model: int
    num_heads: int
    causal: bool

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, kv_cache: DecoderCache | None = None,
                need_weights: bool = False, fast: bool = True,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each new position to the cached ones and to the allowed new ones.

        Shapes: ``x`` (batch, seq_len, d_model), ``mask`` bool broadcastable to (batch,
        num_heads, seq_len, cache_len + seq_len), ``positions`` (seq_len,) int -> output
        (batch, seq_len, d_model), weights (batch, num_heads, seq_len, cache_len +
        seq_len) or None. Raises ``ValueError`` if ``x``, the cache, mask or positions
        do not fit.
        """
        ...

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> DecoderCache:
        """A cache with no positions for ``batch`` sequences."""
        ...

    def cache_numbers_per_token(self) -> int:
        """Numbers cached per token and sequence (2 g d_k for g KV heads)."""
        ...
