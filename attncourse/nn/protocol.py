"""The protocols: what greedy and beam search need of an encoder-decoder, and what a
decoder-only model needs of its attention and of that attention's cache.

:func:`~attncourse.decode.search.greedy_decode` and
:func:`~attncourse.decode.search.beam_search` decode any model that implements
:class:`EncoderDecoder`: the RNN encoder-decoders (:class:`~attncourse.nn.rnn.Seq2Seq`,
:class:`~attncourse.nn.luong.LuongSeq2Seq`) and the
:class:`~attncourse.nn.transformer.Transformer` say so by naming it among their
bases, and document here, once, what each method takes and returns; their own
docstrings add only what is particular to them.

The encoder runs once per batch (:meth:`EncoderDecoder.encode`); the decoder
then runs one step per output token (:meth:`EncoderDecoder.decode_step`), from
the previous token y_{i-1} and a decoder state to the scores of y_i, exactly as
the sequence is factorised in p(y | x) = prod_i p(y_i | y_<i, x) (Sutskever et
al. 2014, eq. (1); Bahdanau et al. 2015, eq. (2)).

A decoder-only model (:class:`~attncourse.nn.gpt.GPT`) stacks blocks around
one self-attention each and never looks inside it: any module implementing
:class:`DecoderAttention` can be plugged in by name
(:mod:`attncourse.nn.spec`). Multi-head, grouped-query and multi-query
attention with a window, RoPE or ALiBi
(:class:`~attncourse.nn.causal_attention.CausalSelfAttention`) and multi-head latent
attention (:class:`~attncourse.nn.mla.MultiHeadLatentAttention`) implement it;
the attention-only Transformer of chapter 9 is a model spec (no FFN, no norms,
untied output) around the first. Each keeps its own cache
(:class:`DecoderCache`): the keys and values of every head, or one latent per
token. tests/test_nn_decoder_attention.py holds every registered variant to the
contract written here: cached decoding equals the full forward, shapes, masks,
gradients.

A memory attention (:mod:`attncourse.nn.memory_attention`: linear attention, DeltaNet, Gated
DeltaNet) says so with a class attribute ``fixed_state = True``: its cache is a state of fixed
size (``cache_numbers_per_token()`` is 0, ``state_numbers()`` its size), so it returns weights
only without a cache, their rows need not sum to 1, and its mask may hide keys but not choose
them per query. The rest of the contract holds as written.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class EncoderDecoder(Protocol):
    """An encoder-decoder that decodes step by step (greedy, beam search, scheduled sampling).

    Attributes
    ----------
    config : dict
        The constructor's arguments: ``type(model).from_config(model.config)``
        rebuilds the model (a checkpoint stores it).
    """

    config: dict[str, Any]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EncoderDecoder:
        """Build an (untrained) model from :attr:`config`, e.g. before loading a state dict."""
        return cls(**config)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Any:
        """Run the encoder once per batch.

        Parameters
        ----------
        src : (batch, src_len) long
            Source token ids, padded.
        src_mask : (batch, src_len) bool
            ``True`` at real tokens.

        Returns
        -------
        encoder state
            Whatever :meth:`decode_step` reads at every step (the encoder's
            states, the mask, precomputed keys); its batch rows follow ``src``.

        Raises
        ------
        ValueError, TypeError
            For a malformed batch (shapes that do not fit, a mask that is not bool).
        """
        ...

    def init_state(self, enc: Any) -> Any:
        """The decoder's state before the first step, for the batch of ``enc``."""
        ...

    def decode_step(self, prev_tokens: torch.Tensor, state: Any, enc: Any) -> tuple[torch.Tensor, Any, Any]:
        """One decoder step: from y_{i-1} and the state to the scores of y_i and the next state.

        Parameters
        ----------
        prev_tokens : (batch,) long
            Previous target tokens y_{i-1} (``<bos>`` at the first step).
        state
            From :meth:`init_state` or the previous step; not modified.
        enc
            From :meth:`encode`, batch rows aligned with ``prev_tokens``.

        Returns
        -------
        logits : (batch, tgt_vocab)
            Unnormalised scores of y_i.
        new_state
            The state after this step.
        weights : (batch, src_len) or None
            Attention weights over the source (exactly 0 at padding), or None
            for a model without attention.

        Raises
        ------
        ValueError
            If ``prev_tokens`` or ``state`` do not fit the encoder state's batch.
        """
        ...

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> Any:
        """Teacher forcing: the scores of every next target token, given the gold previous ones.

        What training calls (``model(src, src_mask, tgt_in)``); for the same
        prefix its logits equal those of :meth:`decode_step`, step by step.

        Parameters
        ----------
        src : (batch, src_len) long
        src_mask : (batch, src_len) bool
            ``True`` at real source tokens.
        tgt_in : (batch, tgt_len) long
            Target inputs, starting with ``<bos>`` (the target shifted right).

        Returns
        -------
        output
            With ``logits`` (batch, tgt_len, tgt_vocab) and ``attention``
            (batch, tgt_len, src_len) or None.

        Raises
        ------
        ValueError
            If ``tgt_in`` is not (batch, tgt_len) with the batch of ``src``.
        """
        ...

    def reorder(self, obj: Any, indices: torch.Tensor) -> Any:
        """Select batch rows ``indices`` (new_batch,) of a decoder state or an encoder state (beam search)."""
        ...


@runtime_checkable
class DecoderCache(Protocol):
    """What a decoder attention keeps of earlier positions between decoding steps.

    Chapter 6's :class:`~attncourse.nn.attention.KVCache` (keys and values per
    head), MLA's :class:`~attncourse.nn.mla.LatentCache` (one latent per token) and
    a memory attention's :class:`~attncourse.nn.memory_attention.MemoryState` (one
    fixed-size state) are examples. The attention that made the cache is the only
    reader and writer of its contents; others read its length and its ``kind``.

    Attributes
    ----------
    kind : str
        What it holds: ``"keys and values"``, ``"latent"``, ``"state"`` (a fixed-size
        memory, which cannot drop its last tokens), or a variant's own word. Code that
        needs to know (the paged pool, speculative decoding, a model's cache bytes) reads
        this, never the cache's attributes.
    """

    kind: str

    def __len__(self) -> int:
        """The positions held, ``cache_len``; the next new position is number ``cache_len``."""
        ...


@runtime_checkable
class DecoderAttention(Protocol):
    """Causal self-attention as a decoder-only block uses it, with a cache for generation.

    Attributes
    ----------
    d_model : int
        Width of the input and output.
    num_heads : int
        h, the number of query heads: the weights have one row of maps per head.
    causal : bool
        Whether position i sees only keys j <= i.
    """

    d_model: int
    num_heads: int
    causal: bool

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, kv_cache: DecoderCache | None = None,
                need_weights: bool = False, fast: bool = True,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each new position to the cached ones and to the allowed new ones.

        Called once on a whole sequence (training, a prompt), or step by step with a
        cache; the two give the same outputs, which is what generation relies on.

        Parameters
        ----------
        x : (batch, seq_len, d_model)
            The new positions; with ``kv_cache`` they follow its ``cache_len`` positions.
        mask : bool tensor broadcastable to (batch, num_heads, seq_len, cache_len + seq_len), optional
            Extra mask, ``True`` = may attend (e.g. left padding), combined with the
            variant's own (causal, window). A query with no allowed key outputs zeros.
        kv_cache : DecoderCache, optional
            From :meth:`empty_cache` or earlier calls; this call's entries are appended
            in place, so that decoding the positions one call at a time gives the
            outputs of one call on them all.
        need_weights : bool
            Return the attention weights.
        fast : bool
            Allowed to use a fused kernel (``scaled_dot_product_attention``) when the
            weights are not needed; the result is the same up to rounding.
        positions : (seq_len,) int tensor, optional
            Absolute position of each new token, for schemes that rotate by position
            (RoPE); default ``cache_len + arange(seq_len)``. Masks, windows and ALiBi's
            distances follow the cache's order (query i is key ``cache_len + i``).

        Returns
        -------
        output : (batch, seq_len, d_model)
        weights : (batch, num_heads, seq_len, cache_len + seq_len) or None
            Each row sums to 1 over the allowed keys (all zeros for a query with none);
            None unless ``need_weights``.

        Raises
        ------
        ValueError
            If ``x``, the cache, ``mask`` or ``positions`` do not fit (both shapes named).
        """
        ...

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> DecoderCache:
        """A cache with no positions for ``batch`` sequences; default dtype and device: the weights'."""
        ...

    def cache_numbers_per_token(self) -> int:
        """Numbers the cache grows by per token and sequence (``2 g d_k`` for keys and values of g heads)."""
        ...
