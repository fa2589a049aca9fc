"""RNN encoder-decoders, with and without Bahdanau attention, in one class.

The encoder reads the source x_1..x_S with a (by default bidirectional) GRU and
leaves one annotation h_j per position. The two decoders differ in one line,
the context vector c they read at each target step i:

* **no attention** (Cho et al. 2014; Sutskever et al. 2014): c = the encoder's
  final state, *the same vector at every step*. It is the only thing the decoder
  knows about the source, however long the source is: the bottleneck.
* **Bahdanau attention** (Bahdanau et al. 2015): c_i = sum_j alpha_ij h_j with
  weights from :class:`~attncourse.nn.additive.AdditiveAttention` on the
  previous decoder state s_{i-1}; a fresh summary of the source at every step.

Everything else is shared, so a comparison measures attention alone:

    s_0 = tanh(W_s x)                           x: encoder final state (see below)
    s_i = GRU([E y_{i-1}; c_i], s_{i-1})        (Bahdanau eq. (4)-(5); Cho eq. for h_t)
    p(y_i | y_<i, x) = softmax(W_o [s_i; c_i; E y_{i-1}] + b_o)

Token ids: pad 0, bos 1, eos 2, unk 3. Masks are boolean, ``True`` at real tokens.

References
----------
Sutskever, Vinyals, Le (2014), "Sequence to Sequence Learning with Neural Networks".
Cho et al. (2014), "Learning Phrase Representations using RNN Encoder-Decoder for
Statistical Machine Translation", section 2.2.
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3, equations (4)-(6), appendix A.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attncourse.nn.additive import AdditiveAttention
from attncourse.nn.protocol import EncoderDecoder

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

#: The values of ``Seq2Seq(attention=...)``.
ATTENTION_KINDS: tuple[str | None, ...] = (None, "bahdanau")


def _validate_source(src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """Validate a padded source batch and return its lengths (batch,) on the CPU."""
    if src.dim() != 2:
        raise ValueError(f"src must be token ids (batch, src_len), got shape {tuple(src.shape)}")
    if src_mask.dtype != torch.bool:
        raise TypeError(f"src_mask must be boolean (True = real token), got dtype {src_mask.dtype}")
    if src_mask.shape != src.shape:
        raise ValueError(
            f"src_mask {tuple(src_mask.shape)} must have the shape of src {tuple(src.shape)}"
        )
    lengths = src_mask.sum(dim=1)
    if src.shape[0] == 0 or int(lengths.min()) < 1:
        raise ValueError("every source sentence needs at least one real token (src_mask row with a True)")
    positions = torch.arange(src.shape[1], device=src_mask.device)
    if not torch.equal(src_mask, positions[None, :] < lengths[:, None]):
        raise ValueError("src_mask must mark a prefix of each row (real tokens first, then padding)")
    return lengths.cpu()


def validate_target_inputs(src: torch.Tensor, tgt_in: torch.Tensor) -> None:
    """Raise ValueError unless ``tgt_in`` is (batch, tgt_len) with the batch of ``src`` (batch, src_len)."""
    if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
        raise ValueError(
            f"tgt_in must be (batch, tgt_len) with the batch of src {tuple(src.shape)}, "
            f"got {tuple(tgt_in.shape)}"
        )


def reorder_batch(obj: Any, indices: torch.Tensor) -> Any:
    """Select rows of the batch dimension in anything a decoder carries between steps.

    Tensors are indexed on dim 0; dataclasses, tuples, lists and dicts are
    rebuilt with their members reordered; ``None`` and other values pass through.
    Beam search uses it to follow each surviving hypothesis back to its parent.

    Parameters
    ----------
    obj : Tensor (batch, ...), dataclass, tuple, list, dict or None
    indices : (new_batch,) long
        Row ``k`` of the result is row ``indices[k]`` of ``obj``; rows may repeat.

    Returns
    -------
    Same type as ``obj``, with batch size ``new_batch``.
    """
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, indices.to(obj.device))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: reorder_batch(getattr(obj, f.name), indices) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, (tuple, list)):
        return type(obj)(reorder_batch(o, indices) for o in obj)
    if isinstance(obj, dict):
        return {k: reorder_batch(v, indices) for k, v in obj.items()}
    return obj


class Encoder(nn.Module):
    """GRU encoder over embedded source tokens, with packing so padding is never read.

    Parameters
    ----------
    vocab_size : int
        Source vocabulary size (id 0 is padding).
    emb_dim : int
        Width of the token embeddings E x_j.
    hidden_dim : int
        Width n of each direction's GRU state.
    bidirectional : bool
        Run a forward and a backward GRU and concatenate their states,
        h_j = [h_j_forward; h_j_backward] (Bahdanau et al. 2015, section 3.2), so
        each annotation summarises the words before *and* after position j.
    dropout : float
        Dropout on the embeddings.

    Attributes
    ----------
    enc_dim : int
        Width of each annotation: ``2 * hidden_dim`` if bidirectional, else ``hidden_dim``.

    References
    ----------
    Bahdanau et al. (2015), section 3.2 and appendix A.2.1; Cho et al. (2014), section 2.3 (the GRU).
    """

    def __init__(
        self, vocab_size: int, emb_dim: int, hidden_dim: int, bidirectional: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.bidirectional = bool(bidirectional)
        self.hidden_dim = int(hidden_dim)
        self.enc_dim = self.hidden_dim * (2 if bidirectional else 1)
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(emb_dim, hidden_dim, batch_first=True, bidirectional=bidirectional)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch of source sentences.

        Parameters
        ----------
        src : (batch, src_len) long
            Source token ids, padded with 0 on the right.
        src_mask : (batch, src_len) bool
            ``True`` at real tokens; each row must be a prefix of ``True``.

        Returns
        -------
        states : (batch, src_len, enc_dim)
            Annotations h_j; exactly zero at padded positions.
        final : (batch, enc_dim)
            Last forward state h_S_forward, concatenated with the backward
            state at the first word h_1_backward if bidirectional. Packing makes
            these the states at each sentence's own last (first) real token, so
            no sentence depends on how much padding it was given.

        Raises
        ------
        ValueError
            If ``src_mask`` does not have the shape of ``src``, a row has no real
            token, or padding is not on the right.
        TypeError
            If ``src_mask`` is not boolean.
        """
        lengths = _validate_source(src, src_mask)
        embedded = self.dropout(self.embedding(src))
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        packed_states, h_n = self.rnn(packed)
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.shape[1])
        # h_n: (num_directions, batch, hidden_dim); index 0 forward, index 1 backward.
        final = torch.cat([h_n[0], h_n[1]], dim=-1) if self.bidirectional else h_n[0]
        return states, final


@dataclass
class EncoderState:
    """What the decoder needs from the encoder, computed once per batch of sentences.

    Attributes
    ----------
    states : (batch, src_len, enc_dim)
        Annotations h_j (zero at padding).
    final : (batch, enc_dim)
        The encoder's final state (see :meth:`Encoder.forward`).
    mask : (batch, src_len) bool
        ``True`` at real source tokens.
    projected_keys : (batch, src_len, attn_dim) or None
        U_a h_j for the attention model (``None`` without attention).
    """

    states: torch.Tensor
    final: torch.Tensor
    mask: torch.Tensor
    projected_keys: torch.Tensor | None = None


@dataclass
class Seq2SeqOutput:
    """Teacher-forced output of :meth:`Seq2Seq.forward`.

    Attributes
    ----------
    logits : (batch, tgt_len, tgt_vocab)
        Unnormalised scores of y_i given y_<i and the source, for every step.
    attention : (batch, tgt_len, src_len) or None
        alpha_ij for every target step i and source position j (zero at padded
        source positions), or ``None`` for the model without attention.
    """

    logits: torch.Tensor
    attention: torch.Tensor | None


class Seq2Seq(nn.Module, EncoderDecoder):
    """RNN encoder-decoder, with Bahdanau attention (``attention="bahdanau"``) or without (``None``).

    Encoder: :class:`Encoder`. Decoder: a GRU cell whose step i reads the
    previous target word and a context vector c_i,

        s_i = GRU([E y_{i-1}; c_i], s_{i-1}),
        p(y_i | y_<i, x) = softmax(W_o [s_i; c_i; E y_{i-1}] + b_o).

    Without attention, c_i = the encoder's ``final`` state at every step, as in
    Cho et al. (2014), where the summary c enters every decoder step and the
    output; it is the decoder's only view of the source. (Sutskever et al. 2014
    pass the final state only as the initial decoder state.) With attention,
    c_i = sum_j alpha_ij h_j from :class:`AdditiveAttention` queried by s_{i-1}
    (Bahdanau et al. 2015, eqs. (4)-(6)).

    Initial state: without attention, s_0 = tanh(W_s final). With attention
    and a bidirectional encoder, s_0 = tanh(W_s h_1_backward), the backward
    state at the first word, as in Bahdanau et al. (2015), appendix A.2.2 (with
    a one-directional encoder, ``final`` is used).

    Output layer: the paper feeds [s_i; c_i; E y_{i-1}] through a maxout layer
    and then a linear layer (appendix A.2.2, "deep output"). We use one linear
    layer W_o on the same three inputs: simpler, and ample for the course's tasks.
    Bahdanau's eq. (4) writes g(y_{i-1}, s_i, c_i); we follow it and use s_i.

    Parameters
    ----------
    src_vocab_size, tgt_vocab_size : int
        Vocabulary sizes (id 0 is padding, 1 bos, 2 eos, 3 unk).
    emb_dim : int
        Width of the source and target embeddings.
    hidden_dim : int
        Width n of the decoder state and of each encoder direction; also the
        width n' of the alignment MLP.
    attention : {"bahdanau", None}
        Which decoder to build.
    bidirectional : bool
        Bidirectional encoder (the paper's choice); annotations are 2n wide.
    dropout : float
        Dropout on embeddings and before the output layer (active in training mode only).

    Attributes
    ----------
    config : dict
        The constructor arguments, JSON-serialisable; ``Seq2Seq.from_config(model.config)``
        rebuilds the architecture.
    encoder : Encoder
    attention : AdditiveAttention or None
        The alignment model (its parameters are ``w_a``, ``u_a``, ``v_a``).

    Raises
    ------
    ValueError
        If ``attention`` is not one of :data:`ATTENTION_KINDS` or a size is not positive.

    References
    ----------
    Bahdanau et al. (2015), section 3 and appendix A; Cho et al. (2014), section 2.2;
    Sutskever et al. (2014), section 2.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        emb_dim: int = 64,
        hidden_dim: int = 128,
        attention: str | None = "bahdanau",
        bidirectional: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("emb_dim", emb_dim), ("hidden_dim", hidden_dim)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.config: dict[str, Any] = {
            "src_vocab_size": int(src_vocab_size), "tgt_vocab_size": int(tgt_vocab_size),
            "emb_dim": int(emb_dim), "hidden_dim": int(hidden_dim), "attention": attention,
            "bidirectional": bool(bidirectional), "dropout": float(dropout),
        }
        self.hidden_dim = int(hidden_dim)
        self.encoder = Encoder(src_vocab_size, emb_dim, hidden_dim, bidirectional, dropout)
        enc_dim = self.encoder.enc_dim
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        if attention == "bahdanau":
            self.attention = AdditiveAttention(hidden_dim, enc_dim, hidden_dim)
            init_dim = hidden_dim if bidirectional else enc_dim
        else:
            self.attention = None
            init_dim = enc_dim
        self.init_proj = nn.Linear(init_dim, hidden_dim)  # W_s
        self.cell = nn.GRUCell(emb_dim + enc_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim + enc_dim + emb_dim, tgt_vocab_size)  # W_o, b_o

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> EncoderState:
        """Run the encoder once per batch, as :class:`EncoderDecoder` describes.

        Returns
        -------
        EncoderState
            Annotations, final state, mask and (with attention) U_a h_j.
        """
        states, final = self.encoder(src, src_mask)
        projected = None if self.attention is None else self.attention.project_keys(states)
        return EncoderState(states=states, final=final, mask=src_mask, projected_keys=projected)

    def init_state(self, enc: EncoderState) -> torch.Tensor:
        """The first decoder state s_0, shape (batch, hidden_dim).

        s_0 = tanh(W_s h_1_backward) with attention and a bidirectional encoder
        (Bahdanau et al. 2015, appendix A.2.2); s_0 = tanh(W_s final) otherwise.
        """
        if self.attention is not None and self.encoder.bidirectional:
            source = enc.final[:, self.encoder.hidden_dim:]  # h_1_backward
        else:
            source = enc.final
        return torch.tanh(self.init_proj(source))

    def decode_step(
        self, prev_tokens: torch.Tensor, state: torch.Tensor, enc: EncoderState
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decoder step: from y_{i-1} and s_{i-1} to the scores of y_i and s_i.

        As :meth:`EncoderDecoder.decode_step`, with
        the state s_{i-1} of shape (batch, hidden_dim) and weights alpha_ij, or ``None``
        without attention.
        """
        batch = enc.states.shape[0]
        if prev_tokens.shape != (batch,):
            raise ValueError(
                f"prev_tokens must be (batch,) = ({batch},) to fit the encoder states "
                f"{tuple(enc.states.shape)}, got {tuple(prev_tokens.shape)}"
            )
        if state.shape != (batch, self.hidden_dim):
            raise ValueError(
                f"state must be (batch, hidden_dim) = {(batch, self.hidden_dim)} to fit the encoder "
                f"states {tuple(enc.states.shape)}, got {tuple(state.shape)}"
            )
        y_prev = self.dropout(self.tgt_embedding(prev_tokens))  # E y_{i-1}
        if self.attention is None:
            context, weights = enc.final, None  # the same c at every step: the bottleneck
        else:
            context, weights = self.attention(state, enc.states, enc.mask, enc.projected_keys)
        new_state = self.cell(torch.cat([y_prev, context], dim=-1), state)
        logits = self.output(self.dropout(torch.cat([new_state, context, y_prev], dim=-1)))
        return logits, new_state, weights

    def reorder(self, obj: Any, indices: torch.Tensor) -> Any:
        """Rows ``indices`` of a decoder state (batch, hidden_dim) or an :class:`EncoderState`.

        See :func:`reorder_batch`.
        """
        return reorder_batch(obj, indices)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Teacher forcing, as :meth:`EncoderDecoder.forward`: :meth:`decode_step` for
        i = 1..tgt_len, fed ``tgt_in[:, i-1]``, so it equals decoding step by step.

        Returns
        -------
        Seq2SeqOutput
            ``attention`` is None without attention.
        """
        validate_target_inputs(src, tgt_in)
        enc = self.encode(src, src_mask)
        state = self.init_state(enc)
        logits, weights = [], []
        for i in range(tgt_in.shape[1]):
            step_logits, state, step_weights = self.decode_step(tgt_in[:, i], state, enc)
            logits.append(step_logits)
            weights.append(step_weights)
        attention = None if self.attention is None else torch.stack(weights, dim=1)
        return Seq2SeqOutput(logits=torch.stack(logits, dim=1), attention=attention)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (elements, not tensors) of a model."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def hidden_dim_for_budget(
    target_params: int,
    src_vocab: int,
    tgt_vocab: int,
    attention: str | None,
    max_hidden: int = 4096,
    **kwargs: Any,
) -> int:
    """The ``hidden_dim`` whose :class:`Seq2Seq` has the parameter count closest to a target.

    Use it to compare models at equal budget, as Bahdanau et al. (2015) compare
    RNNencdec and RNNsearch: fix the attention model, then find the hidden
    size at which the plain model has as many parameters (or the reverse).
    The count grows with ``hidden_dim``, so a binary search finds it.

    Parameters
    ----------
    target_params : int
        Parameter budget, e.g. ``count_parameters(other_model)``.
    src_vocab, tgt_vocab : int
        Source and target vocabulary sizes.
    attention : {"bahdanau", None}
    max_hidden : int
        Upper end of the search.
    **kwargs
        Other :class:`Seq2Seq` arguments (``emb_dim``, ``bidirectional``, ...).

    Returns
    -------
    int
        The hidden size in [1, max_hidden] with the closest count.

    Raises
    ------
    ValueError
        If ``target_params`` is not positive or ``hidden_dim`` is passed in ``kwargs``.
    """
    if target_params < 1:
        raise ValueError(f"target_params must be positive, got {target_params}")
    if "hidden_dim" in kwargs:
        raise ValueError("hidden_dim is what this function finds; do not pass it")

    def count(hidden: int) -> int:
        with torch.device("meta"):  # shapes only, no memory or initialisation
            model = Seq2Seq(src_vocab, tgt_vocab, hidden_dim=hidden, attention=attention, **kwargs)
        return count_parameters(model)

    lo, hi = 1, max_hidden
    while lo < hi:  # smallest hidden with count >= target
        mid = (lo + hi) // 2
        if count(mid) >= target_params:
            hi = mid
        else:
            lo = mid + 1
    candidates = [h for h in (lo - 1, lo) if h >= 1]
    return min(candidates, key=lambda h: abs(count(h) - target_params))
