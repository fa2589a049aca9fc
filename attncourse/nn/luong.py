"""Luong attention (global, local-m, local-p) and an encoder-decoder built on it.

Source: Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", sections 3-3.3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attncourse.functional.luong import (
    LUONG_MODES,
    LUONG_SCORES,
    validate_half_width,
    validate_score_and_mode,
)
from attncourse.functional.torch_attention import masked_softmax
from attncourse.nn.additive import validate_key_mask
from attncourse.nn.protocol import EncoderDecoder
from attncourse.nn.rnn import (
    PAD_ID,
    Encoder,
    EncoderState,
    Seq2SeqOutput,
    reorder_batch,
    validate_target_inputs,
)

#: Uniform initialisation range of Luong et al. (2015), section 4.1.
INIT_RANGE = 0.1


class LuongAttention(nn.Module):
    """Luong attention for one decoder step: global, local-m or local-p (eqs. (7)-(11)).

    Raises ``ValueError`` for an unknown score or mode, a bad window or size, the
    location score without ``max_src_len``, or dot with ``key_dim != hidden_dim``.
    """

    def __init__(
        self,
        hidden_dim: int,
        score: str = "general",
        mode: str = "global",
        window: int = 10,
        max_src_len: int | None = None,
        key_dim: int | None = None,
        attn_dim: int | None = None,
        gaussian: bool | None = None,
    ) -> None:
        super().__init__()
        validate_score_and_mode(score, mode)
        key_dim = hidden_dim if key_dim is None else key_dim
        attn_dim = hidden_dim if attn_dim is None else attn_dim
        for name, value in (("hidden_dim", hidden_dim), ("key_dim", key_dim), ("attn_dim", attn_dim)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        if gaussian is None:
            gaussian = mode == "local-p"
        if gaussian and mode == "global":
            raise ValueError("global attention has no aligned position p_t, so no Gaussian; use gaussian=None or False")
        self.window = validate_half_width(window, "local-p" if gaussian else "local-m")
        if score == "dot" and key_dim != hidden_dim:
            raise ValueError(
                f"the dot score compares h_t and h̄_s directly, so they need one width: "
                f"hidden_dim={hidden_dim} vs key_dim={key_dim}; use score='general' or 'concat'"
            )
        if score == "location":
            if max_src_len is None or isinstance(max_src_len, bool) or int(max_src_len) < 1:
                raise ValueError(
                    f"score='location' scores each position with its own row of W_a, so it needs "
                    f"max_src_len (a positive int, the longest source), got {max_src_len!r}"
                )
        self.hidden_dim, self.key_dim, self.attn_dim = int(hidden_dim), int(key_dim), int(attn_dim)
        self.score, self.mode, self.gaussian = score, mode, bool(gaussian)
        self.max_src_len = int(max_src_len) if score == "location" else None

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape))

        self.w_a = {
            "dot": None,
            "general": param(self.hidden_dim, self.key_dim) if score == "general" else None,
            "concat": param(self.attn_dim, self.hidden_dim + self.key_dim) if score == "concat" else None,
            "location": param(self.max_src_len, self.hidden_dim) if score == "location" else None,
        }[score]
        self.v_a = param(self.attn_dim) if score == "concat" else None
        self.w_p = param(self.hidden_dim, self.hidden_dim) if mode == "local-p" else None
        self.v_p = param(self.hidden_dim) if mode == "local-p" else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every parameter from U(-0.1, 0.1) (Luong et al. 2015, section 4.1)."""
        for p in self.parameters():
            nn.init.uniform_(p, -INIT_RANGE, INIT_RANGE)

    def extra_repr(self) -> str:
        extra = f", max_src_len={self.max_src_len}" if self.max_src_len is not None else ""
        window = "" if self.mode == "global" else f", window={self.window}, gaussian={self.gaussian}"
        return (f"hidden_dim={self.hidden_dim}, key_dim={self.key_dim}, score={self.score!r}, "
                f"mode={self.mode!r}{window}{extra}")

    def _validate_keys(self, h_s: torch.Tensor) -> None:
        if h_s.dim() != 3 or h_s.shape[-1] != self.key_dim:
            raise ValueError(
                f"h_s must be the encoder states (batch, src_len, key_dim={self.key_dim}), got {tuple(h_s.shape)}"
            )

    def project_keys(self, h_s: torch.Tensor) -> torch.Tensor | None:
        """The source-only part of the score, or None.

        ``h_s`` is (batch, src_len, key_dim). Raises ``ValueError`` if ``h_s`` does not
        have ``key_dim``.
        """
        self._validate_keys(h_s)
        if self.score == "general":
            return h_s @ self.w_a.T
        if self.score == "concat":
            return h_s @ self.w_a[:, self.hidden_dim:].T
        return None

    def aligned_positions(self, h_t: torch.Tensor, lengths: torch.Tensor, t: int | None = None) -> torch.Tensor | None:
        """Aligned positions p_t (batch,), 0-based reals; None if global.

        Raises ``ValueError`` if local-m gets no integer ``t >= 0``.
        """
        if self.mode == "global":
            return None
        if self.mode == "local-m":
            if t is None or isinstance(t, bool) or int(t) != t or t < 0:
                raise ValueError(f"mode='local-m' needs the target step t, an integer >= 0, got {t!r}")
            last = (lengths - 1).clamp(min=0).to(h_t.dtype)
            return torch.clamp(torch.full_like(last, float(t)), max=last)  # p_t = min(t, S - 1)
        hidden = torch.tanh(h_t @ self.w_p.T)
        return lengths.to(h_t.dtype) * torch.sigmoid(hidden @ self.v_p)  # eq. (10)

    def forward(
        self,
        h_t: torch.Tensor,
        h_s: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        t: int | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Context (batch, key_dim), weights (batch, src_len) and p_t (batch,) or None.

        Shapes: ``h_t`` (batch, hidden_dim), ``h_s`` (batch, src_len, key_dim),
        ``src_mask`` (batch, src_len) bool. Raises ``ValueError`` if the shapes do not
        fit, the source is longer than ``max_src_len``, or local-m gets no ``t``;
        ``TypeError`` for a non-bool mask.
        """
        if h_t.dim() != 2 or h_t.shape[-1] != self.hidden_dim:
            raise ValueError(f"h_t must be (batch, hidden_dim={self.hidden_dim}), got {tuple(h_t.shape)}")
        self._validate_keys(h_s)
        batch, src_len = h_s.shape[0], h_s.shape[1]
        if h_t.shape[0] != batch:
            raise ValueError(f"h_t {tuple(h_t.shape)} and h_s {tuple(h_s.shape)} have different batch sizes")
        if src_mask is None:
            src_mask = torch.ones(batch, src_len, dtype=torch.bool, device=h_s.device)
        else:
            validate_key_mask(src_mask, "src_mask", h_s, "h_s")
        if self.score == "location" and src_len > self.max_src_len:
            raise ValueError(
                f"score='location' covers max_src_len={self.max_src_len} positions, but h_s "
                f"{tuple(h_s.shape)} has src_len={src_len}"
            )
        if projected_keys is None:
            projected_keys = self.project_keys(h_s)
        elif self.score in ("general", "concat"):
            width = self.hidden_dim if self.score == "general" else self.attn_dim
            if tuple(projected_keys.shape) != (batch, src_len, width):
                raise ValueError(
                    f"projected_keys must be {(batch, src_len, width)} to fit h_s {tuple(h_s.shape)}, "
                    f"got {tuple(projected_keys.shape)}"
                )

        lengths = src_mask.sum(dim=1)  # S, per sentence
        p_t = self.aligned_positions(h_t, lengths, t)
        positions = torch.arange(src_len, device=h_s.device, dtype=h_s.dtype)
        allowed = src_mask
        if p_t is not None:
            # The window is a hard cut: p_t is detached here and gets its gradient through the Gaussian.
            allowed = allowed & ((positions[None, :] - p_t.detach()[:, None]).abs() <= self.window)

        if self.score == "dot":
            scores = (h_s @ h_t.unsqueeze(-1)).squeeze(-1)
        elif self.score == "general":
            scores = (projected_keys @ h_t.unsqueeze(-1)).squeeze(-1)
        elif self.score == "concat":
            query_term = h_t @ self.w_a[:, : self.hidden_dim].T
            scores = torch.tanh(query_term.unsqueeze(1) + projected_keys) @ self.v_a
        else:
            scores = (h_t @ self.w_a.T)[:, :src_len]

        weights = masked_softmax(scores, allowed, dim=-1)  # eq. (7), over the window
        if self.gaussian:
            sigma = self.window / 2.0
            weights = weights * torch.exp(-((positions[None, :] - p_t[:, None]) ** 2) / (2.0 * sigma**2))  # eq. (11)
        context = (weights.unsqueeze(1) @ h_s).squeeze(1)
        return context, weights, p_t


@dataclass
class LuongDecoderState:
    """What a :class:`LuongSeq2Seq` decoder carries from step t - 1 to step t."""

    hidden: torch.Tensor
    attentional: torch.Tensor
    step: int = 0
    position: torch.Tensor | None = None


@dataclass
class LuongSeq2SeqOutput(Seq2SeqOutput):
    """Teacher-forced output of :meth:`LuongSeq2Seq.forward`."""

    positions: torch.Tensor | None = None


class LuongSeq2Seq(nn.Module, EncoderDecoder):
    """RNN encoder-decoder with Luong attention and input feeding (section 3.3).

    Raises ``ValueError`` for a non-positive size, an odd ``hidden_dim`` with a
    bidirectional encoder, a bad dropout, or any error of :class:`LuongAttention`.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        emb_dim: int = 64,
        hidden_dim: int = 128,
        score: str = "general",
        mode: str = "global",
        window: int = 4,
        input_feeding: bool = True,
        bidirectional: bool = True,
        dropout: float = 0.0,
        max_src_len: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("emb_dim", emb_dim), ("hidden_dim", hidden_dim)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        if bidirectional and hidden_dim % 2:
            raise ValueError(
                f"a bidirectional encoder splits hidden_dim into two directions, so it must be even, got {hidden_dim}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.attention = LuongAttention(hidden_dim, score=score, mode=mode, window=window, max_src_len=max_src_len)
        self.config: dict[str, Any] = {
            "src_vocab_size": int(src_vocab_size), "tgt_vocab_size": int(tgt_vocab_size),
            "emb_dim": int(emb_dim), "hidden_dim": int(hidden_dim), "score": score, "mode": mode,
            "window": int(window), "input_feeding": bool(input_feeding), "bidirectional": bool(bidirectional),
            "dropout": float(dropout), "max_src_len": None if max_src_len is None else int(max_src_len),
        }
        self.hidden_dim = int(hidden_dim)
        self.input_feeding = bool(input_feeding)
        per_direction = hidden_dim // 2 if bidirectional else hidden_dim
        self.encoder = Encoder(src_vocab_size, emb_dim, per_direction, bidirectional, dropout)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.cell = nn.GRUCell(emb_dim + (hidden_dim if input_feeding else 0), hidden_dim)
        self.w_c = nn.Linear(2 * hidden_dim, hidden_dim, bias=False)  # W_c, eq. (5)
        self.output = nn.Linear(hidden_dim, tgt_vocab_size)  # W_s, eq. (6)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> EncoderState:
        """Run the encoder once per batch (``ValueError`` past ``max_src_len``)."""
        states, final = self.encoder(src, src_mask)
        if self.attention.score == "location" and src.shape[1] > self.attention.max_src_len:
            raise ValueError(
                f"score='location' covers max_src_len={self.attention.max_src_len} positions, "
                f"but src {tuple(src.shape)} has src_len={src.shape[1]}"
            )
        return EncoderState(states=states, final=final, mask=src_mask,
                            projected_keys=self.attention.project_keys(states))

    def init_state(self, enc: EncoderState) -> LuongDecoderState:
        """The first decoder state: h_0 = the encoder's final state, h~_0 = 0, t = 0."""
        return LuongDecoderState(hidden=enc.final, attentional=torch.zeros_like(enc.final), step=0)

    def decode_step(
        self, prev_tokens: torch.Tensor, state: LuongDecoderState, enc: EncoderState
    ) -> tuple[torch.Tensor, LuongDecoderState, torch.Tensor]:
        """From y_{t-1}, h_{t-1} and h~_{t-1} to the scores of y_t.

        Raises ``TypeError`` if ``state`` is not a :class:`LuongDecoderState`.
        """
        if not isinstance(state, LuongDecoderState):
            raise TypeError(f"state must be a LuongDecoderState (from init_state), got {type(state).__name__}")
        batch = enc.states.shape[0]
        if prev_tokens.shape != (batch,):
            raise ValueError(
                f"prev_tokens must be (batch,) = ({batch},) to fit the encoder states "
                f"{tuple(enc.states.shape)}, got {tuple(prev_tokens.shape)}"
            )
        for name in ("hidden", "attentional"):
            value = getattr(state, name)
            if value.shape != (batch, self.hidden_dim):
                raise ValueError(
                    f"state.{name} must be (batch, hidden_dim) = {(batch, self.hidden_dim)} to fit the encoder "
                    f"states {tuple(enc.states.shape)}, got {tuple(value.shape)}"
                )
        y_prev = self.dropout(self.tgt_embedding(prev_tokens))  # E y_{t-1}
        rnn_input = torch.cat([y_prev, state.attentional], dim=-1) if self.input_feeding else y_prev
        h_t = self.cell(rnn_input, state.hidden)
        context, weights, p_t = self.attention(h_t, enc.states, enc.mask, t=state.step,
                                               projected_keys=enc.projected_keys)
        attentional = torch.tanh(self.w_c(torch.cat([context, h_t], dim=-1)))  # h~_t, eq. (5)
        logits = self.output(self.dropout(attentional))  # eq. (6)
        new_state = LuongDecoderState(hidden=h_t, attentional=attentional, step=state.step + 1, position=p_t)
        return logits, new_state, weights

    def reorder(self, obj: Any, indices: torch.Tensor) -> Any:
        """Rows ``indices`` of a decoder state or an :class:`EncoderState`."""
        return reorder_batch(obj, indices)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> LuongSeq2SeqOutput:
        """Teacher forcing: :meth:`decode_step` fed ``tgt_in[:, t]`` at each t."""
        validate_target_inputs(src, tgt_in)
        enc = self.encode(src, src_mask)
        state = self.init_state(enc)
        logits, weights, positions = [], [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, step_weights = self.decode_step(tgt_in[:, t], state, enc)
            logits.append(step_logits)
            weights.append(step_weights)
            positions.append(state.position)
        return LuongSeq2SeqOutput(
            logits=torch.stack(logits, dim=1),
            attention=torch.stack(weights, dim=1),
            positions=None if self.attention.mode == "global" else torch.stack(positions, dim=1),
        )


__all__ = [
    "LUONG_MODES",
    "LUONG_SCORES",
    "LuongAttention",
    "LuongDecoderState",
    "LuongSeq2Seq",
    "LuongSeq2SeqOutput",
]
