"""The decoder protocol: what greedy and beam search need of an encoder-decoder.

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
