"""RNN encoder-decoders, with and without Bahdanau attention, in one class (chapter 2).

Source: Bahdanau, Cho, Bengio (2015), section 3, eqs. (4)-(6), appendix A.
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
    """Raise ``ValueError`` unless ``tgt_in`` is (batch of ``src``, tgt_len)."""
    if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
        raise ValueError(
            f"tgt_in must be (batch, tgt_len) with the batch of src {tuple(src.shape)}, "
            f"got {tuple(tgt_in.shape)}"
        )


def reorder_batch(obj: Any, indices: torch.Tensor) -> Any:
    """Select batch rows ``indices`` in a tensor, dataclass or container."""
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
    """GRU encoder, packed so padding is never read (Bahdanau et al., A.2.1)."""

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
        """Encode ``src`` (batch, src_len): states and final state.

        States (batch, src_len, enc_dim), final (batch, enc_dim). Raises ``ValueError``
        if ``src_mask`` does not have the shape of ``src``, a row has no real token or
        padding is not on the right; ``TypeError`` if it is not bool.
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
    """What the decoder needs from the encoder, computed once per batch of sentences."""

    states: torch.Tensor
    final: torch.Tensor
    mask: torch.Tensor
    projected_keys: torch.Tensor | None = None


@dataclass
class Seq2SeqOutput:
    """Teacher-forced output of :meth:`Seq2Seq.forward`."""

    logits: torch.Tensor
    attention: torch.Tensor | None


class Seq2Seq(nn.Module, EncoderDecoder):
    """RNN encoder-decoder, with Bahdanau attention or without (``None``).

    Raises ``ValueError`` for an unknown ``attention`` or a non-positive size.
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
        """Run the encoder once per batch."""
        states, final = self.encoder(src, src_mask)
        projected = None if self.attention is None else self.attention.project_keys(states)
        return EncoderState(states=states, final=final, mask=src_mask, projected_keys=projected)

    def init_state(self, enc: EncoderState) -> torch.Tensor:
        """The first decoder state s_0, shape (batch, hidden_dim)."""
        if self.attention is not None and self.encoder.bidirectional:
            source = enc.final[:, self.encoder.hidden_dim:]  # h_1_backward
        else:
            source = enc.final
        return torch.tanh(self.init_proj(source))

    def decode_step(
        self, prev_tokens: torch.Tensor, state: torch.Tensor, enc: EncoderState
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decoder step: from y_{i-1} and s_{i-1} to the scores of y_i and s_i."""
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
        """Rows ``indices`` of a decoder state or an :class:`EncoderState`."""
        return reorder_batch(obj, indices)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Teacher forcing: :meth:`decode_step` fed ``tgt_in[:, i-1]`` at each i."""
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
    """The ``hidden_dim`` whose :class:`Seq2Seq` has about ``target_params`` parameters.

    Raises ``ValueError`` if ``target_params`` is not positive or ``hidden_dim`` is in
    ``kwargs``.
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
