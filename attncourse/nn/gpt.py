"""A decoder-only Transformer language model ("GPT"), built from a model spec.

Pre-norm blocks of causal self-attention and FFN, a final norm, an output layer tied to
the embedding (chapter 7). Source: Radford et al. (2019), section 2.3 (GPT-2).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from attncourse.nn.norm import residual
from attncourse.nn.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
)
from attncourse.nn.protocol import DecoderCache
from attncourse.nn.spec import (
    ADDED_TO_EMBEDDINGS,
    INSIDE_ATTENTION,
    NO_POSITIONS,
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    NormSpec,
    PositionSpec,
    flat_attention,
)

#: The values of ``GPT(positional=...)``.
GPT_POSITIONAL: tuple[str, ...] = ADDED_TO_EMBEDDINGS + INSIDE_ATTENTION + NO_POSITIONS

#: Position tables added to the embeddings, by scheme.
_POSITION_TABLES = {"sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEncoding}


class DecoderOnlyBlock(nn.Module):
    """Pre-norm attention and FFN, each residual; ``attention`` overrides the spec's."""

    def __init__(self, spec: DecoderSpec, attention: AttentionSpec | None = None) -> None:
        super().__init__()
        # The creation order (attention, FFN, norms) fixes the seeded initialisation and the
        # state_dict's order: checkpoints and chapters' numbers depend on it.
        self.attn = (attention or spec.attention).build(spec.d_model, spec.num_heads, spec.causal, spec.positions)
        self.ffn = spec.ffn.build(spec.d_model)
        self.attn_norm = spec.norm.build(spec.d_model)
        self.ffn_norm = None if self.ffn is None else spec.norm.build(spec.d_model)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, kv_cache: DecoderCache | None = None,
                need_weights: bool = False, fast: bool = True,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x (batch, seq_len, d_model)`` -> same shape, attention weights or None."""
        x, weights = residual(
            x, lambda h: self.attn(h, mask, kv_cache, need_weights=need_weights, fast=fast,
                                   positions=positions),
            self.attn_norm, self.dropout, norm_first=True,
        )
        if self.ffn is not None:
            x, _ = residual(x, lambda h: (self.ffn(h), None), self.ffn_norm, self.dropout, norm_first=True)
        return x, weights


class GPT(nn.Module):
    """A decoder-only Transformer language model.

    Built from the keywords (:func:`keyword_spec`) or a whole ``spec`` (a
    ``DecoderSpec`` or its dict). ``num_kv_heads``: GQA; ``window``: sliding window;
    ``latent_dim``: MLA (chapter 10); ``attention_only``: no FFN, no norm, untied output
    (chapter 9). Raises ``ValueError`` for an invalid model, ``TypeError`` for ``spec``
    with keywords too. Source: Radford et al. (2018), section 3.1.
    """

    def __init__(self, vocab_size: int | None = None, d_model: int = 64, num_heads: int = 8,
                 num_layers: int = 2, d_ff: int = 256, max_len: int = 256, positional: str = "rope",
                 num_kv_heads: int | None = None, causal: bool = True, window: int | None = None,
                 dropout: float = 0.0, latent_dim: int | None = None, rope_dim: int | None = None,
                 attention_only: bool = False, *, spec: DecoderSpec | dict[str, Any] | None = None) -> None:
        arguments = dict(locals())
        super().__init__()
        if spec is None:
            if vocab_size is None:
                raise TypeError("GPT needs vocab_size (or a whole spec=DecoderSpec(...))")
            spec = keyword_spec(vocab_size, d_model, num_heads, num_layers, d_ff, max_len, positional,
                                num_kv_heads, causal, window, dropout, latent_dim, rope_dim, attention_only)
        else:
            given = {k: v for k, v in arguments.items() if k in _KEYWORDS and v != _KEYWORDS[k]}
            if given:
                raise TypeError(f"GPT takes either spec= or the keyword sizes, not both (got {sorted(given)})")
            spec = spec if isinstance(spec, DecoderSpec) else DecoderSpec(**spec)
        self.config = {"spec": spec.to_dict()}
        self.spec = spec
        self.d_model, self.max_len, self.positional = spec.d_model, spec.max_len, spec.positions.kind
        self.vocab_size = spec.vocab_size
        # The creation order (embedding, positions, blocks, final norm, output) fixes the seeded
        # initialisation and the state_dict's order.
        self.embedding = nn.Embedding(spec.vocab_size, spec.d_model)
        nn.init.normal_(self.embedding.weight, std=spec.d_model**-0.5)
        table = _POSITION_TABLES.get(spec.positions.kind)
        self.positional_encoding = None if table is None else table(spec.max_len, spec.d_model)
        self.blocks = nn.ModuleList(DecoderOnlyBlock(spec, attention) for attention in spec.attentions())
        layers = [block.attn for block in self.blocks]
        for i, attn in enumerate(layers):  # a layer that reads another's keys (cross-layer attention)
            if hasattr(attn, "link_layers"):
                attn.link_layers(i, layers)
        self.final_norm = spec.norm.build(spec.d_model)
        self.dropout = nn.Dropout(spec.dropout)
        self.output_proj = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        if spec.tie_output:
            self.output_proj.weight = self.embedding.weight
        else:
            nn.init.normal_(self.output_proj.weight, std=spec.d_model**-0.5)

    @classmethod
    def from_spec(cls, spec: DecoderSpec | dict[str, Any]) -> GPT:
        """Build an untrained model from a ``DecoderSpec`` or its dict."""
        return cls(spec=spec)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GPT:
        """Build an untrained model from :attr:`config`, e.g. to load a state dict.

        Raises ``ValueError`` unless ``config`` is ``{"spec": ...}`` of a valid model.
        """
        if not (isinstance(config, dict) and set(config) == {"spec"}):
            keys = sorted(config) if isinstance(config, dict) else type(config).__name__
            raise ValueError(f"a GPT config must be {{'spec': ...}}, got {keys}: train the model again with "
                             "this version of attncourse")
        return cls(spec=config["spec"])

    def init_cache(self, batch: int) -> list[DecoderCache]:
        """One empty cache per block (its attention's ``empty_cache(batch)``)."""
        return [block.attn.empty_cache(batch) for block in self.blocks]

    def cache_bytes_per_token(self) -> int:
        """Bytes the caches grow by per token (GQA: ``2 L g d_k`` numbers)."""
        element = self.embedding.weight.element_size()
        return sum(block.attn.cache_numbers_per_token() for block in self.blocks) * element

    def cache_bytes(self, tokens: int) -> int:
        """Bytes of every layer's cache for ``tokens`` tokens, fixed states included.

        Raises ``ValueError`` unless ``tokens`` is an int >= 0.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be a non-negative int, got {tokens!r}")
        element = self.embedding.weight.element_size()
        fixed = sum(block.attn.state_numbers() for block, cache in zip(self.blocks, self.init_cache(1))
                    if cache.kind == "state")
        return self.cache_bytes_per_token() * tokens + fixed * element

    def forward(self, tokens: torch.Tensor, kv_caches: list[DecoderCache] | None = None,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                fast: bool = True, positions: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Next-token logits ``(batch, seq_len, vocab_size)`` and each layer's weights.

        ``tokens (batch, seq_len)`` int; ``kv_caches`` from :meth:`init_cache`, grown in
        place; ``positions`` ``(seq_len,)`` or ``(batch, seq_len)``, default: after the
        cached ones. Raises ``ValueError`` for bad tokens, caches or positions.
        """
        if tokens.dim() != 2 or tokens.is_floating_point() or tokens.is_complex():
            raise ValueError(f"tokens must be a (batch, seq_len) integer tensor, got {tuple(tokens.shape)} "
                             f"{tokens.dtype}")
        if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < self.vocab_size:
            raise ValueError(f"token ids must lie in 0..vocab_size - 1 = 0..{self.vocab_size - 1}, "
                             f"got ids from {int(tokens.min())} to {int(tokens.max())}")
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(f"kv_caches has {len(kv_caches)} entries for {len(self.blocks)} layers")
        offset = 0 if kv_caches is None else len(kv_caches[0])
        positions = self._validate_positions(positions, tokens.shape, offset)
        x = self.embedding(tokens)
        if self.spec.scale_embedding:
            x = x * math.sqrt(self.d_model)
        if self.positional_encoding is not None:
            if positions is None:
                x = self.positional_encoding(x, offset)
            else:  # the table's rows at the given positions: the same numbers as its slice for the default
                table = getattr(self.positional_encoding, "pe", None)
                x = x + (self.positional_encoding.embedding.weight if table is None else table)[positions]
        x = self.dropout(x)
        # the attention layers take one (seq_len,) row of positions (the rows were checked equal)
        rows = None if positions is None or self.positional_encoding is not None else positions.reshape(
            -1, tokens.shape[1])[0]
        all_weights = []
        for i, block in enumerate(self.blocks):
            cache = None if kv_caches is None else kv_caches[i]
            x, weights = block(x, mask, cache, need_weights=need_weights, fast=fast, positions=rows)
            all_weights.append(weights)
        return self.output_proj(self.final_norm(x)), all_weights


    def _validate_positions(self, positions: torch.Tensor | None, shape: torch.Size,
                         offset: int) -> torch.Tensor | None:
        """``forward``'s ``positions`` checked (on the embedding's device), or None for the default."""
        if positions is None:
            return None
        batch, seq_len = shape
        if (not isinstance(positions, torch.Tensor) or positions.shape not in ((seq_len,), (batch, seq_len))
                or positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool):
            got = (f"{tuple(positions.shape)} {positions.dtype}" if isinstance(positions, torch.Tensor)
                   else type(positions).__name__)
            raise ValueError(f"positions must be a (seq_len={seq_len},) or (batch={batch}, seq_len={seq_len}) "
                             f"integer tensor, got {got}")
        positions = positions.to(self.embedding.weight.device, torch.long)
        if positions.numel() and int(positions.min()) < 0:
            raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
        if self.positional_encoding is not None:
            if positions.numel() and int(positions.max()) >= self.max_len:
                raise ValueError(f"position {int(positions.max())} does not fit the {self.positional} table of "
                                 f"max_len={self.max_len} rows")
            return positions
        rows = positions.reshape(-1, seq_len)
        if not bool((rows == rows[0]).all()):
            raise ValueError("positions differ between the sequences of the batch; the attention layers "
                             f"({self.positional}) take one row of positions for the whole batch")
        default = torch.arange(offset, offset + seq_len, device=rows.device)
        if self.positional == "alibi" and not torch.equal(rows[0], default):
            raise ValueError(f"ALiBi's distances follow the cache's order: positions must be {offset} .. "
                             f"{offset + seq_len - 1} here, got {rows[0].tolist()[:8]}")
        return positions


def keyword_spec(vocab_size: int, d_model: int = 64, num_heads: int = 8, num_layers: int = 2, d_ff: int = 256,
                 max_len: int = 256, positional: str = "rope", num_kv_heads: int | None = None,
                 causal: bool = True, window: int | None = None, dropout: float = 0.0,
                 latent_dim: int | None = None, rope_dim: int | None = None,
                 attention_only: bool = False) -> DecoderSpec:
    """The model spec that :class:`GPT`'s keywords describe.

    ``"mla"`` with ``latent_dim``, else ``"gqa"``; neither FFN nor norm with
    ``attention_only``. Raises ``ValueError`` for a bad ``positional`` or spec.
    """
    if positional not in GPT_POSITIONAL:
        raise ValueError(f"positional must be one of {GPT_POSITIONAL}, got {positional!r}")
    if num_kv_heads is None and latent_dim is None:  # the spec names g = h (chapter 11 compares it)
        num_kv_heads = num_heads
    attention = flat_attention(None, num_heads, num_kv_heads=num_kv_heads, window=window,
                               latent_dim=latent_dim, rope_dim=rope_dim)
    return DecoderSpec(vocab_size, d_model, num_heads, num_layers, max_len, causal, dropout, attention,
                       PositionSpec(positional), NormSpec("none" if attention_only else "layernorm"),
                       FFNSpec("none" if attention_only else "relu", d_ff), tie_output=not attention_only)


#: The keyword constructor's arguments and defaults (left out when ``spec=`` is given).
_KEYWORDS = {name: p.default for name, p in inspect.signature(GPT.__init__).parameters.items()
             if name not in ("self", "spec")}
