"""The Transformer encoder-decoder (Vaswani et al. 2017), in the paper's order and notation.

Embeddings (section 3.4). Each token id becomes a learned d_model-wide vector,
multiplied by sqrt(d_model) so that it is not drowned by the positional
encoding added next (section 3.5, :mod:`attncourse.nn.positional`); dropout
acts on the sum (section 5.4).

Encoder (section 3.1). N identical layers, each with two sublayers:
multi-head self-attention (every source position attends to every real source
position) and a position-wise feed-forward network

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                     (equation (2))

Each sublayer sits in a residual connection followed by layer normalisation,

    x = LayerNorm(x + Dropout(Sublayer(x)))                    ("post-norm", the paper)

Many later implementations normalise the sublayer's *input* instead,

    x = x + Dropout(Sublayer(LayerNorm(x)))                    ("pre-norm", ``norm_first=True``)

which trains more stably in deep stacks (Xiong et al. 2020). The residual
stream of a pre-norm stack is never normalised, so a final LayerNorm closes
each stack when ``norm_first=True``; the post-norm stack ends with a LayerNorm
already and gets none, as in the paper. (``torch.nn.Transformer`` adds a final
LayerNorm to both stacks whatever ``norm_first`` is; the tests remove it from
the reference for the post-norm comparison.)

Decoder (section 3.1). N layers with three sublayers: *masked* self-attention
(target position t attends to positions <= t only, section 3.2.3), cross-attention
("encoder-decoder attention": queries from the decoder, keys and values from
the encoder output, section 3.2.3), and the FFN. A linear layer then gives the
logits of the next token; with ``tie_embeddings`` it is the target embedding
matrix itself (section 3.4, after Press and Wolf 2017).

Decoding. :meth:`Transformer.encode`, :meth:`~Transformer.init_state`,
:meth:`~Transformer.decode_step` and :meth:`~Transformer.reorder` implement the
decoding protocol of :mod:`attncourse.decode.search`, so ``greedy_decode`` and
``beam_search`` run on this model as on the RNNs. Each step embeds one token,
appends its keys and values to a per-layer :class:`~attncourse.nn.attention.KVCache`
and attends over the cache; a single new query may see every cached position,
so no causal mask is needed. The cross-attention keys and values depend on the
source only and are computed once in ``encode``.

Token ids: pad 0, bos 1, eos 2, unk 3 (as in :mod:`attncourse.nn.rnn`). Masks
are boolean, ``True`` = real token / may attend.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", sections 3.1-3.5, 5.4, equation (2).
Ba, Kiros, Hinton (2016), "Layer Normalization".
Press, Wolf (2017), "Using the Output Embedding to Improve Language Models".
Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture" (pre-norm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attncourse.nn.attention import KVCache, MultiHeadAttention
from attncourse.nn.ffn import PositionwiseFeedForward  # importable from here as before
from attncourse.nn.norm import (  # residual: importable from here as before
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
    """Self-attention and FFN, each in a residual connection with LayerNorm (section 3.1).

    Parameters
    ----------
    d_model, num_heads, d_ff : int
        Width, heads h, FFN inner width.
    dropout : float
        Residual dropout on each sublayer's output (section 5.4).
    norm_first : bool
        ``False``: post-norm as in the paper; ``True``: pre-norm (see :func:`residual`).

    Attributes
    ----------
    self_attn : MultiHeadAttention
    ffn : PositionwiseFeedForward
    self_attn_norm, ffn_norm : nn.LayerNorm

    References
    ----------
    Vaswani et al. (2017), sections 3.1, 3.2.3 and 3.3.
    """

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
        """Run the layer.

        Parameters
        ----------
        x : (batch, src_len, d_model)
        mask : bool, broadcastable to (batch, num_heads, src_len, src_len), optional
            ``True`` = may attend; for source padding ``src_mask[:, None, None, :]``.
        need_weights : bool
            Also return the self-attention weights.
        fast : bool
            See :meth:`MultiHeadAttention.forward`.

        Returns
        -------
        x : (batch, src_len, d_model)
        weights : (batch, num_heads, src_len, src_len) or None
        """
        x, weights = residual(
            x, lambda h: self.self_attn(h, h, h, mask, need_weights=need_weights, fast=fast),
            self.self_attn_norm, self.dropout, self.norm_first,
        )
        x, _ = residual(x, lambda h: (self.ffn(h), None), self.ffn_norm, self.dropout, self.norm_first)
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention and FFN, each with residual and LayerNorm (section 3.1).

    Parameters
    ----------
    d_model, num_heads, d_ff : int
    dropout : float
        Residual dropout (section 5.4).
    norm_first : bool
        ``False``: post-norm (the paper); ``True``: pre-norm.

    Attributes
    ----------
    self_attn : MultiHeadAttention
        Queries, keys and values: the target prefix.
    cross_attn : MultiHeadAttention
        Queries: the decoder; keys and values: the encoder output ("memory").
    ffn : PositionwiseFeedForward
    self_attn_norm, cross_attn_norm, ffn_norm : nn.LayerNorm

    References
    ----------
    Vaswani et al. (2017), sections 3.1 and 3.2.3.
    """

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
        """Run the layer on the whole target prefix, or on new steps with caches.

        Parameters
        ----------
        y : (batch, tgt_len, d_model)
            Target-side states (tgt_len = 1 while decoding step by step).
        memory : (batch, src_len, d_model) or None
            Encoder output; may be ``None`` when ``cross_cache`` holds its projections.
        tgt_mask : bool, broadcastable to (batch, num_heads, tgt_len, cache_len + tgt_len), optional
            Self-attention mask, ``True`` = may attend; causal ``(tgt_len, tgt_len)`` when
            teacher forcing, ``None`` for one new step over a cache.
        memory_mask : bool, broadcastable to (batch, num_heads, tgt_len, src_len), optional
            Cross-attention mask, e.g. ``src_mask[:, None, None, :]``.
        need_weights : bool
            Return both attention weights.
        fast : bool
            See :meth:`MultiHeadAttention.forward`.
        self_cache : KVCache, optional
            Keys and values of earlier steps; this call's are appended in place.
        cross_cache : KVCache, optional
            Projected memory (:meth:`MultiHeadAttention.project_kv`), used instead of ``memory``.
        need_cross_weights : bool
            Return the cross-attention weights even if ``need_weights`` is False.

        Returns
        -------
        y : (batch, tgt_len, d_model)
        self_weights : (batch, num_heads, tgt_len, cache_len + tgt_len) or None
        cross_weights : (batch, num_heads, tgt_len, src_len) or None
            Exactly 0 at key positions where ``memory_mask`` is False.

        Raises
        ------
        ValueError
            If both ``memory`` and ``cross_cache`` are None, or a shape does not fit.
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
    """What :meth:`Transformer.encode` computes once per batch, for every decoding step.

    Attributes
    ----------
    memory : (batch, src_len, d_model)
        The encoder output.
    mask : (batch, src_len) bool
        ``True`` at real source tokens.
    cross_kv : list of KVCache, one per decoder layer
        Each layer's cross-attention keys and values, ``(batch, num_heads, src_len, d_k)``.
    """

    memory: torch.Tensor
    mask: torch.Tensor
    cross_kv: list[KVCache]


@dataclass
class TransformerDecoderState:
    """The decoder's state between steps.

    Attributes
    ----------
    self_kv : list of KVCache, one per decoder layer
        Self-attention keys and values of the steps so far, ``(batch, num_heads, step, d_k)``.
    step : int
        Number of tokens fed so far; the position of the next one.
    """

    self_kv: list[KVCache]
    step: int


def causal_mask(tgt_len: int, device=None) -> torch.Tensor:
    """``(tgt_len, tgt_len)`` bool, ``True`` where position t may attend to position j <= t (section 3.2.3)."""
    return torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=device).tril()


class Transformer(nn.Module, EncoderDecoder):
    """The encoder-decoder Transformer of Vaswani et al. (2017), figure 1.

    Parameters
    ----------
    src_vocab_size, tgt_vocab_size : int
        Vocabulary sizes (id 0 is padding).
    d_model : int
        Model width (512 in the base model).
    num_heads : int
        h (8); must divide ``d_model``.
    num_encoder_layers, num_decoder_layers : int
        N (6 each).
    d_ff : int
        FFN inner width (2048).
    dropout : float
        P_drop (0.1): on embeddings + positions and on every sublayer output (section 5.4).
    max_len : int
        Longest source or target sequence (positions 0..max_len-1).
    norm_first : bool
        ``False``: post-norm, as in the paper; ``True``: pre-norm, with a final
        LayerNorm after each stack (see the module docstring).
    positional : {"sinusoidal", "learned"}
        Positional encoding (section 3.5; Table 3 (E) compares the two). Learned
        tables are separate for source and target.
    tie_embeddings : bool
        Use the target embedding matrix as the pre-softmax linear layer
        (section 3.4). The paper also shares it with the source embedding,
        which needs a joint vocabulary; here the vocabularies are separate.

    Attributes
    ----------
    config : dict
        The constructor arguments, JSON-serialisable; ``Transformer.from_config(model.config)``
        rebuilds the architecture.
    src_embedding, tgt_embedding : nn.Embedding
        Initialised N(0, 1 / d_model), so that after the sqrt(d_model) scaling the
        entries have unit variance; the padding row is zero.
    src_positional, tgt_positional : SinusoidalPositionalEncoding or LearnedPositionalEncoding
    encoder_layers : nn.ModuleList of EncoderLayer
    decoder_layers : nn.ModuleList of DecoderLayer
    encoder_norm, decoder_norm : nn.LayerNorm or None
        Final LayerNorms, present only when ``norm_first``.
    output_proj : nn.Linear(d_model, tgt_vocab_size, bias=False)
        The pre-softmax linear layer; its weight *is* ``tgt_embedding.weight`` when tied.

    Raises
    ------
    ValueError
        If ``positional`` is unknown, a size is not positive, ``dropout`` is
        outside [0, 1), or ``d_model`` is not divisible by ``num_heads``.

    References
    ----------
    Vaswani et al. (2017), section 3 and Table 3; Press and Wolf (2017).
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
        """Dropout(E x * sqrt(d_model) + PE): ``src (batch, src_len) -> (batch, src_len, d_model)``."""
        x = self.src_embedding(src) * math.sqrt(self.d_model)
        return self.dropout(self.src_positional(x))

    def embed_target(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Dropout(E y * sqrt(d_model) + PE) for target positions ``offset ..``:
        ``tgt (batch, tgt_len) -> (batch, tgt_len, d_model)``."""
        y = self.tgt_embedding(tgt) * math.sqrt(self.d_model)
        return self.dropout(self.tgt_positional(y, offset))

    # ----- the two stacks, on embedded inputs -----

    def encode_embedded(
        self, x: torch.Tensor, src_mask: torch.Tensor | None = None, need_weights: bool = False, fast: bool = True
    ) -> tuple[torch.Tensor, list[Weights]]:
        """The encoder stack (with the final LayerNorm when ``norm_first``).

        Parameters
        ----------
        x : (batch, src_len, d_model)
            Embedded source (:meth:`embed_source`).
        src_mask : (batch, src_len) bool, optional
            ``True`` at real tokens; padded positions are never attended to.
        need_weights : bool
            Return each layer's self-attention weights.
        fast : bool
            See :meth:`MultiHeadAttention.forward`.

        Returns
        -------
        memory : (batch, src_len, d_model)
        weights : list over layers of (batch, num_heads, src_len, src_len), or of None
        """
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
        """The decoder stack under teacher forcing (with the final LayerNorm when ``norm_first``).

        Parameters
        ----------
        y : (batch, tgt_len, d_model)
            Embedded target inputs (:meth:`embed_target`).
        memory : (batch, src_len, d_model)
            Encoder output.
        src_mask : (batch, src_len) bool, optional
            ``True`` at real source tokens.
        tgt_mask : bool broadcastable to (batch, num_heads, tgt_len, tgt_len), optional
            Self-attention mask; default causal (:func:`causal_mask`). Padding
            sits at the end of a target, so under the causal mask no real
            position sees it; no target padding mask is needed.
        need_weights : bool
            Return every layer's weights.
        fast : bool

        Returns
        -------
        hidden : (batch, tgt_len, d_model)
            Decoder output, before the pre-softmax linear layer.
        self_weights : list over layers of (batch, num_heads, tgt_len, tgt_len) or None
        cross_weights : list over layers of (batch, num_heads, tgt_len, src_len) or None
            The last layer's entry is always computed (:meth:`forward` reports it).
        """
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
        """Teacher forcing, as :meth:`EncoderDecoder.forward`: every position at once.

        Returns
        -------
        Seq2SeqOutput
            ``attention`` is the last decoder layer's cross-attention averaged over
            heads (exactly 0 at padded source positions; rows sum to 1).

        Raises
        ------
        ValueError
            Also if a sequence is longer than ``max_len``.
        TypeError
            If ``src_mask`` is not boolean.
        """
        self._validate_batch(src, src_mask, tgt_in)
        memory, _ = self.encode_embedded(self.embed_source(src), src_mask)
        hidden, _, cross = self.decode_embedded(self.embed_target(tgt_in), memory, src_mask)
        return Seq2SeqOutput(logits=self.output_proj(hidden), attention=cross[-1].mean(dim=1))

    def attention_maps(
        self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, list[torch.Tensor]]:
        """Every attention weight of every head and layer (teaching path), e.g. for a widget.

        Runs in evaluation mode (no dropout) without gradients; the training
        flag is restored afterwards.

        Parameters
        ----------
        src : (batch, src_len) long
        src_mask : (batch, src_len) bool
        tgt_in : (batch, tgt_len) long

        Returns
        -------
        dict
            ``"encoder_self"``: list over encoder layers of (batch, num_heads, src_len, src_len);
            ``"decoder_self"``: list over decoder layers of (batch, num_heads, tgt_len, tgt_len);
            ``"cross"``: list over decoder layers of (batch, num_heads, tgt_len, src_len).

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.
        """
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
        """Run the encoder once and project its output for every decoder layer's cross-attention.

        As :meth:`EncoderDecoder.encode`; returns a
        :class:`TransformerEncoderState`.
        """
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
        """One decoder step with the KV cache: from y_{t-1} to the logits of y_t.

        As :meth:`EncoderDecoder.decode_step`.
        Equal to :meth:`forward`'s logits at position t for the same prefix (with
        dropout off), at the cost of one position per step. The new state's caches
        are one step longer (``step + 1``); the weights are the last decoder layer's
        cross-attention weights averaged over heads.

        Raises
        ------
        ValueError
            Also if the step reaches ``max_len``.
        """
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
        """Select batch rows of a decoder state or encoder state (for beam search); see
        :func:`attncourse.nn.rnn.reorder_batch`."""
        return reorder_batch(obj, indices)
