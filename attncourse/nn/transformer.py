"""The Transformer encoder-decoder, in the paper's order and notation (chapter 5).

Source: Vaswani et al. (2017), "Attention Is All You Need", sections 3.1-3.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attncourse.nn.attention import KVCache, MultiHeadAttention
from attncourse.nn.ffn import PositionwiseFeedForward
from attncourse.nn.norm import (
    Weights,
    residual,
)
from attncourse.nn.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
)
from attncourse.nn.protocol import EncoderDecoder
from attncourse.nn.rnn import PAD_ID, Seq2SeqOutput, reorder_batch

#: The values of ``Transformer(positional=...)``.
POSITIONAL_KINDS: tuple[str, ...] = ("sinusoidal", "learned")

class EncoderLayer(nn.Module):
    """Self-attention and FFN, each with residual and LayerNorm (3.1)."""

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False
    ) -> None:
        super().__init__()
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = PositionwiseFeedForward(d_model, d_ff)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False, fast: bool = True
    ) -> tuple[torch.Tensor, Weights]:
        """x (batch, src_len, d_model) -> x, weights or None."""
        x, weights = residual(
            x, lambda h: self.self_attn(h, h, h, mask, need_weights=need_weights, fast=fast),
            self.self_attn_norm, self.dropout, self.norm_first,
        )
        x, _ = residual(x, lambda h: (self.ffn(h), None), self.ffn_norm, self.dropout, self.norm_first)
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, FFN; residual, LayerNorm."""

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False
    ) -> None:
        super().__init__()
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = PositionwiseFeedForward(d_model, d_ff)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.cross_attn_norm = nn.LayerNorm(d_model)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor | None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        fast: bool = True,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        need_cross_weights: bool = False,
    ) -> tuple[torch.Tensor, Weights, Weights]:
        """Run the layer on ``y`` (batch, tgt_len, d_model), or on new steps.

        Returns y, self-attention weights (batch, num_heads, tgt_len, cache_len +
        tgt_len) and cross-attention weights (batch, num_heads, tgt_len, src_len), or
        None. Raises ``ValueError`` if both ``memory`` and ``cross_cache`` are None or a
        shape does not fit.
        """
        if memory is None and cross_cache is None:
            raise ValueError("the decoder layer needs the encoder output (memory) or its cross_cache")
        kv = None if cross_cache is not None else memory
        y, self_weights = residual(
            y,
            lambda h: self.self_attn(h, h, h, tgt_mask, need_weights=need_weights, fast=fast, kv_cache=self_cache),
            self.self_attn_norm, self.dropout, self.norm_first,
        )
        y, cross_weights = residual(
            y, lambda h: self.cross_attn(h, kv, kv, memory_mask, need_weights=need_weights or need_cross_weights,
                                         fast=fast, kv_cache=cross_cache),
            self.cross_attn_norm, self.dropout, self.norm_first,
        )
        y, _ = residual(y, lambda h: (self.ffn(h), None), self.ffn_norm, self.dropout, self.norm_first)
        return y, self_weights, cross_weights


@dataclass
class TransformerEncoderState:
    """What :meth:`Transformer.encode` computes once per batch."""

    memory: torch.Tensor
    mask: torch.Tensor
    cross_kv: list[KVCache]


@dataclass
class TransformerDecoderState:
    """The decoder's state between steps."""

    self_kv: list[KVCache]
    step: int


def causal_mask(tgt_len: int, device=None) -> torch.Tensor:
    """(tgt_len, tgt_len) bool, True where t may attend to j <= t (3.2.3)."""
    return torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=device).tril()


class Transformer(nn.Module, EncoderDecoder):
    """The encoder-decoder Transformer of Vaswani et al. (2017), figure 1.

    Raises ``ValueError`` for an unknown ``positional``, a non-positive size,
    ``dropout`` outside [0, 1), or ``num_heads`` not dividing ``d_model``.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        max_len: int = 512,
        norm_first: bool = False,
        positional: str = "sinusoidal",
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("d_model", d_model), ("num_heads", num_heads), ("d_ff", d_ff), ("max_len", max_len),
                            ("num_encoder_layers", num_encoder_layers), ("num_decoder_layers", num_decoder_layers)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.config: dict[str, Any] = {
            "src_vocab_size": int(src_vocab_size), "tgt_vocab_size": int(tgt_vocab_size),
            "d_model": int(d_model), "num_heads": int(num_heads),
            "num_encoder_layers": int(num_encoder_layers), "num_decoder_layers": int(num_decoder_layers),
            "d_ff": int(d_ff), "dropout": float(dropout), "max_len": int(max_len),
            "norm_first": bool(norm_first), "positional": positional, "tie_embeddings": bool(tie_embeddings),
        }
        self.d_model, self.max_len, self.norm_first = int(d_model), int(max_len), bool(norm_first)
        self.src_embedding = nn.Embedding(src_vocab_size, d_model, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model, padding_idx=PAD_ID)
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
            with torch.no_grad():
                embedding.weight[PAD_ID].zero_()
        position_cls = SinusoidalPositionalEncoding if positional == "sinusoidal" else LearnedPositionalEncoding
        self.src_positional = position_cls(max_len, d_model)
        self.tgt_positional = position_cls(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.output_proj.weight = self.tgt_embedding.weight

    # ----- embeddings (sections 3.4, 3.5) -----

    def embed_source(self, src: torch.Tensor) -> torch.Tensor:
        """Dropout(E x sqrt(d_model) + PE): (batch, src_len, d_model)."""
        x = self.src_embedding(src) * math.sqrt(self.d_model)
        return self.dropout(self.src_positional(x))

    def embed_target(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Dropout(E y sqrt(d_model) + PE) from position ``offset``."""
        y = self.tgt_embedding(tgt) * math.sqrt(self.d_model)
        return self.dropout(self.tgt_positional(y, offset))

    # ----- the two stacks, on embedded inputs -----

    def encode_embedded(
        self, x: torch.Tensor, src_mask: torch.Tensor | None = None, need_weights: bool = False, fast: bool = True
    ) -> tuple[torch.Tensor, list[Weights]]:
        """Encoder stack: memory (batch, src_len, d_model), weights."""
        mask = None if src_mask is None else src_mask[:, None, None, :]
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, need_weights=need_weights, fast=fast)
            weights.append(w)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, weights

    def decode_embedded(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        fast: bool = True,
    ) -> tuple[torch.Tensor, list[Weights], list[Weights]]:
        """Decoder stack, teacher forced: (batch, tgt_len, d_model), weights."""
        if tgt_mask is None:
            tgt_mask = causal_mask(y.shape[1], y.device)
        memory_mask = None if src_mask is None else src_mask[:, None, None, :]
        self_weights, cross_weights = [], []
        last = len(self.decoder_layers) - 1
        for i, layer in enumerate(self.decoder_layers):
            y, sw, cw = layer(y, memory, tgt_mask, memory_mask, need_weights=need_weights, fast=fast,
                              need_cross_weights=i == last)
            self_weights.append(sw)
            cross_weights.append(cw)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return y, self_weights, cross_weights

    # ----- teacher forcing -----

    def _validate_batch(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor | None = None) -> None:
        if src.dim() != 2:
            raise ValueError(f"src must be token ids (batch, src_len), got shape {tuple(src.shape)}")
        if src_mask.dtype != torch.bool:
            raise TypeError(f"src_mask must be boolean (True = real token), got dtype {src_mask.dtype}")
        if src_mask.shape != src.shape:
            raise ValueError(f"src_mask {tuple(src_mask.shape)} must have the shape of src {tuple(src.shape)}")
        if tgt_in is not None and (tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]):
            raise ValueError(
                f"tgt_in must be (batch, tgt_len) with the batch of src {tuple(src.shape)}, got {tuple(tgt_in.shape)}"
            )

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Teacher forcing, every position at once; ``ValueError`` past ``max_len``."""
        self._validate_batch(src, src_mask, tgt_in)
        memory, _ = self.encode_embedded(self.embed_source(src), src_mask)
        hidden, _, cross = self.decode_embedded(self.embed_target(tgt_in), memory, src_mask)
        return Seq2SeqOutput(logits=self.output_proj(hidden), attention=cross[-1].mean(dim=1))

    def attention_maps(
        self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, list[torch.Tensor]]:
        """Every attention weight of every head and layer (teaching path)."""
        self._validate_batch(src, src_mask, tgt_in)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                memory, enc_self = self.encode_embedded(self.embed_source(src), src_mask, need_weights=True)
                _, dec_self, cross = self.decode_embedded(
                    self.embed_target(tgt_in), memory, src_mask, need_weights=True
                )
        finally:
            self.train(was_training)
        return {"encoder_self": enc_self, "decoder_self": dec_self, "cross": cross}

    # ----- incremental decoding (the protocol of attncourse.nn.protocol.EncoderDecoder) -----

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> TransformerEncoderState:
        """Run the encoder once; project it for every cross-attention."""
        self._validate_batch(src, src_mask)
        memory, _ = self.encode_embedded(self.embed_source(src), src_mask)
        cross_kv = [layer.cross_attn.project_kv(memory, memory) for layer in self.decoder_layers]
        return TransformerEncoderState(memory=memory, mask=src_mask, cross_kv=cross_kv)

    def init_state(self, enc: TransformerEncoderState) -> TransformerDecoderState:
        """Empty self-attention caches (step 0) for the batch of ``enc``."""
        batch = enc.memory.shape[0]
        caches = [
            layer.self_attn.empty_cache(batch, enc.memory.dtype, enc.memory.device) for layer in self.decoder_layers
        ]
        return TransformerDecoderState(self_kv=caches, step=0)

    def decode_step(
        self, prev_tokens: torch.Tensor, state: TransformerDecoderState, enc: TransformerEncoderState
    ) -> tuple[torch.Tensor, TransformerDecoderState, torch.Tensor]:
        """One decoder step with the KV cache (``ValueError`` at ``max_len``)."""
        batch = enc.memory.shape[0]
        if prev_tokens.shape != (batch,):
            raise ValueError(
                f"prev_tokens must be (batch,) = ({batch},) to fit the encoder output "
                f"{tuple(enc.memory.shape)}, got {tuple(prev_tokens.shape)}"
            )
        y = self.embed_target(prev_tokens[:, None], offset=state.step)  # (batch, 1, d_model)
        memory_mask = enc.mask[:, None, None, :]
        caches = [KVCache(c.k, c.v) for c in state.self_kv]  # new objects: the old state stays as it was
        last = len(self.decoder_layers) - 1
        for i, (layer, cache, cross) in enumerate(zip(self.decoder_layers, caches, enc.cross_kv)):
            y, _, cross_weights = layer(y, None, None, memory_mask, self_cache=cache, cross_cache=cross,
                                        need_cross_weights=i == last)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        logits = self.output_proj(y[:, 0])
        new_state = TransformerDecoderState(self_kv=caches, step=state.step + 1)
        return logits, new_state, cross_weights[:, :, 0].mean(dim=1)

    def reorder(self, obj: Any, indices: torch.Tensor) -> Any:
        """Select batch rows of a decoder or encoder state."""
        return reorder_batch(obj, indices)
