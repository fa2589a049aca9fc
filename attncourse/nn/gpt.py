"""A decoder-only Transformer language model ("GPT"): the Transformer's decoder without cross-attention.

Take the encoder-decoder of chapter 6, drop the encoder and the cross-attention,
and keep the masked self-attention and the FFN: a stack of identical blocks
that reads tokens x_1 .. x_T and predicts, at each position t, the next token
x_{t+1} from x_1 .. x_t (Radford et al. 2018). The causal mask is what makes this
a language model: without it position t sees x_{t+1} and copies it.

Each block is pre-norm (as in GPT-2, Radford et al. 2019, section 2.3):

    x = x + CausalSelfAttention(LayerNorm(x))
    x = x + FFN(LayerNorm(x))

with a final LayerNorm, and the output layer tied to the token embedding
(Press and Wolf 2017). Positions come from one of four schemes:
``"sinusoidal"`` and ``"learned"`` add a vector to each embedded token
(:mod:`attncourse.nn.positional`, chapter 5); ``"rope"`` rotates queries and keys
and ``"alibi"`` biases the scores, inside every attention layer
(:mod:`attncourse.nn.causal_attention`). ``num_kv_heads`` selects multi-head, grouped-query
or multi-query attention, ``window`` sliding-window attention, ``latent_dim``
multi-head latent attention (:mod:`attncourse.nn.mla`, chapter 10), and
``attention_only`` drops the FFN and the LayerNorms from every block (chapter 9).

Those keywords are chapter 7's shorthand: they build a :class:`~attncourse.nn.spec.DecoderSpec`,
the model's one description, which ``GPT(spec=...)`` takes whole (the attention by registered
name with its own options, RMSNorm, SwiGLU, RoPE's base, biases, tying), so that a
Llama-style model is a spec too. The model is built from the spec alone, with no branch
per variant, and its checkpoints store the spec.

Generation feeds the prompt once, then one token at a time; each layer keeps
its keys and values in chapter 6's :class:`~attncourse.nn.attention.KVCache`
(:meth:`GPT.init_cache`), so a step projects only the new token.

References
----------
Radford, Narasimhan, Salimans, Sutskever (2018), "Improving Language Understanding
by Generative Pre-Training", section 3.1.
Radford et al. (2019), "Language Models are Unsupervised Multitask Learners", section 2.3.
Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits", "Transformer Overview"
(attention-only Transformers, ``attention_only=True``).
Vaswani et al. (2017), sections 3.1-3.5.
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
    """Pre-norm causal self-attention and FFN, each in a residual connection, as ``spec`` says.

    Parameters
    ----------
    spec : DecoderSpec
        Its attention, norm, FFN, positions, ``causal`` and ``dropout`` (residual dropout).
    attention : AttentionSpec, optional
        This block's attention, if not ``spec.attention`` (a hybrid's block: ``spec.attentions()[i]``).

    Attributes
    ----------
    attn : a :class:`~attncourse.nn.protocol.DecoderAttention`
        Built by the spec's registered attention variant.
    ffn : nn.Module or None
        None with ``ffn="none"``.
    attn_norm : nn.Module
        nn.LayerNorm, RMSNorm, or nn.Identity with ``norm="none"``: with neither norm
        nor FFN the block is ``x + attn(x)``, a sum of paths (Elhage et al. 2021, "Transformer Overview").
    ffn_norm : nn.Module or None
        None when there is no FFN.
    """

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
        """``x (batch, seq_len, d_model)`` -> same shape, and the weights ``(batch, h, seq_len, src_len)`` or None.

        The arguments are those of :meth:`attncourse.nn.protocol.DecoderAttention.forward`.
        """
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

    Parameters
    ----------
    vocab_size : int
    d_model : int
    num_heads : int
        Query heads h; must divide ``d_model``.
    num_layers : int
        Blocks L.
    d_ff : int
        FFN inner width.
    max_len : int
        Positions of the sinusoidal or learned table; inputs longer than this raise.
        RoPE and ALiBi have no table and take any length.
    positional : {"sinusoidal", "learned", "rope", "alibi", "none"}
        ``"none"``: no position information (NoPE; only the causal mask tells positions apart).
    num_kv_heads : int, optional
        Key/value heads g (default h): h multi-head, 1 multi-query, between grouped.
    causal : bool
        ``False`` drops the causal mask (the model can then see the token it predicts).
    window : int, optional
        Sliding-window attention: each query sees the last ``window`` positions, itself
        included (a centred window of odd ``window`` when not causal).
    dropout : float
        On embeddings and on every sublayer's output.
    latent_dim : int, optional
        Multi-head latent attention with a cached latent of this width d_c (DeepSeek-AI
        2024, section 2.1) instead of grouped-query attention; needs ``num_kv_heads``
        unset (or h), no ``window`` and no ALiBi.
    rope_dim : int, optional
        MLA's decoupled rotary width d_h^R (even); default d_k / 2 (rounded up to even)
        with ``positional="rope"``, and must be 0 or unset with the other schemes.
    attention_only : bool
        The attention-only Transformer in which Elhage et al. (2021) and Olsson et
        al. (2022) read what heads do (chapter 9): blocks without the FFN (``d_ff``
        is then unused), no LayerNorm (``final_norm`` is the identity), and an
        output layer of its own, not tied to the embedding, so that every logit is
        a sum of linear paths. Measured in chapter 9: with the LayerNorms, 2-layer
        models on the repeat task stalled near ln S for 600 steps without forming
        induction heads; without them the heads formed by step 150.
    spec : DecoderSpec or dict, keyword only
        The whole model as a :class:`~attncourse.nn.spec.DecoderSpec` (or its
        :meth:`~attncourse.nn.spec.DecoderSpec.to_dict`), instead of the keywords above,
        which must then be left out.

    Attributes
    ----------
    config : dict
        ``{"spec": spec.to_dict()}``; ``GPT.from_config(model.config)`` rebuilds the architecture.
    spec : DecoderSpec
        What the model was built from (the keywords build one: :func:`keyword_spec`).
    embedding : nn.Embedding(vocab_size, d_model)
        Initialised N(0, 1/d_model) and scaled by sqrt(d_model), as in chapter 6.
    positional_encoding : SinusoidalPositionalEncoding, LearnedPositionalEncoding or None
    blocks : nn.ModuleList of DecoderOnlyBlock
    final_norm : nn.LayerNorm (nn.Identity if ``attention_only``; the spec's norm)
    output_proj : nn.Linear(d_model, vocab_size, bias=False), its weight tied to ``embedding.weight``
        (untied if ``attention_only`` or ``tie_output=False``: then initialised N(0, 1/d_model))

    Raises
    ------
    ValueError
        If ``positional`` is unknown, a size is not a positive int, the heads do not
        divide, ``window`` is not a positive int (odd when not causal), or ``latent_dim``
        is combined with fewer key/value heads, a window, ALiBi or a bad ``rope_dim``;
        or if the spec is invalid.
    TypeError
        If ``spec`` is given together with other arguments.

    References
    ----------
    Radford et al. (2018, 2019); Vaswani et al. (2017).
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
        self.final_norm = spec.norm.build(spec.d_model)
        self.dropout = nn.Dropout(spec.dropout)
        self.output_proj = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        if spec.tie_output:
            self.output_proj.weight = self.embedding.weight
        else:
            nn.init.normal_(self.output_proj.weight, std=spec.d_model**-0.5)

    @classmethod
    def from_spec(cls, spec: DecoderSpec | dict[str, Any]) -> GPT:
        """Build an (untrained) model from a :class:`~attncourse.nn.spec.DecoderSpec` or its dict."""
        return cls(spec=spec)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GPT:
        """Build an (untrained) model from :attr:`config`, e.g. before loading a state dict.

        Raises
        ------
        ValueError
            If ``config`` is not ``{"spec": ...}`` or describes an invalid model.
        """
        if not (isinstance(config, dict) and set(config) == {"spec"}):
            keys = sorted(config) if isinstance(config, dict) else type(config).__name__
            raise ValueError(f"a GPT config must be {{'spec': ...}}, got {keys}: train the model again with "
                             "this version of attncourse")
        return cls(spec=config["spec"])

    def init_cache(self, batch: int) -> list[DecoderCache]:
        """One empty cache per block (each attention's ``empty_cache``): :class:`~attncourse.nn.attention.KVCache`
        ``(batch, num_kv_heads, 0, d_k)``, or with MLA :class:`~attncourse.nn.mla.LatentCache`
        ``(batch, 0, d_c)``."""
        return [block.attn.empty_cache(batch) for block in self.blocks]

    def cache_bytes_per_token(self) -> int:
        """Bytes the KV cache grows by per token and sequence: ``layers * cache_numbers_per_token * bytes``,
        i.e. ``2 * layers * num_kv_heads * d_k * bytes``, or with MLA ``layers * (d_c + d_h^R) * bytes``."""
        element = self.embedding.weight.element_size()
        return sum(block.attn.cache_numbers_per_token() for block in self.blocks) * element

    def cache_bytes(self, tokens: int) -> int:
        """Bytes of every layer's cache for one sequence of ``tokens`` tokens: what grows per token
        (:meth:`cache_bytes_per_token`) plus a memory attention's fixed state
        (``state_numbers``, :mod:`attncourse.nn.memory_attention`), whatever the length.

        Raises
        ------
        ValueError
            If ``tokens`` is not a non-negative int.
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
        """Logits of the next token at every position.

        Parameters
        ----------
        tokens : (batch, seq_len) int
            Token ids; with ``kv_caches`` the positions after the cached ones.
        kv_caches : list of KVCache (LatentCache, any DecoderCache), optional
            From :meth:`init_cache`; each layer's keys and values are appended in place.
        mask : bool tensor broadcastable to (batch, num_heads, seq_len, cache_len + seq_len), optional
            Extra mask, ``True`` = may attend (e.g. left padding), combined with the causal mask.
        need_weights : bool
            Return every layer's attention weights.
        fast : bool
            See :meth:`attncourse.nn.protocol.DecoderAttention.forward`.
        positions : (batch, seq_len) or (seq_len,) int tensor, optional
            Absolute position of each token, from 0; default ``cache_len + arange(seq_len)``
            (the tokens follow the cached ones), which gives bit-identical logits when passed
            explicitly. A sinusoidal or learned table adds its rows at these positions (one
            row per sequence allowed); RoPE rotates queries and keys by them, one row for the
            whole batch, so a (batch, seq_len) tensor must then have equal rows. ALiBi's
            distances and the masks follow the cache's order
            (:meth:`~attncourse.nn.protocol.DecoderAttention.forward`), so with ALiBi the
            positions must be the default ones.

        Returns
        -------
        logits : (batch, seq_len, vocab_size)
            Scores of x_{t+1} given x_1 .. x_t (given the whole sequence if ``causal=False``).
        weights : list over layers of (batch, num_heads, seq_len, cache_len + seq_len), or of None

        Raises
        ------
        ValueError
            If ``tokens`` is not a 2-D integer tensor, a token id lies outside
            ``0 .. vocab_size - 1``, the caches do not match the layers, a position
            does not fit a sinusoidal/learned table of ``max_len`` rows, or ``positions``
            has another shape, is not integer, is negative, or is not one the scheme can take.
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
    """The :class:`~attncourse.nn.spec.DecoderSpec` that :class:`GPT`'s keywords describe.

    The attention is ``"mla"`` with ``latent_dim``, else ``"gqa"``
    (:func:`~attncourse.nn.spec.flat_attention`); LayerNorm and a ReLU FFN of width ``d_ff``,
    or neither with ``attention_only``, whose output layer is then untied.

    Raises
    ------
    ValueError
        If ``positional`` is unknown or the spec refuses the combination (one line).
    """
    if positional not in GPT_POSITIONAL:
        raise ValueError(f"positional must be one of {GPT_POSITIONAL}, got {positional!r}")
    attention = flat_attention(None, num_heads, num_kv_heads=num_kv_heads, window=window,
                               latent_dim=latent_dim, rope_dim=rope_dim)
    return DecoderSpec(vocab_size, d_model, num_heads, num_layers, max_len, causal, dropout, attention,
                       PositionSpec(positional), NormSpec("none" if attention_only else "layernorm"),
                       FFNSpec("none" if attention_only else "relu", d_ff), tie_output=not attention_only)


#: The keyword constructor's arguments and defaults (left out when ``spec=`` is given).
_KEYWORDS = {name: p.default for name, p in inspect.signature(GPT.__init__).parameters.items()
             if name not in ("self", "spec")}
