"""Luong attention (global, local-m, local-p) and an encoder-decoder built on it.

Luong, Pham and Manning (2015) keep Bahdanau's idea - a fresh context vector
at every target step - and change *when* attention runs and *how* it scores.

**When.** Bahdanau's decoder attends with its previous state s_{t-1} and then
updates: s_{t-1} -> a_t -> c_t -> s_t. Luong's decoder first updates its
recurrent state and then attends with the *current* one,

    h_t = RNN(h_{t-1}, [E y_{t-1}; h~_{t-1}])       (input feeding, section 3.3)
    a_t(s) = align(h_t, h̄_s),  c_t = sum_s a_t(s) h̄_s      (eq. (7))
    h~_t = tanh(W_c [c_t; h_t])                      (eq. (5))
    p(y_t | y_<t, x) = softmax(W_s h~_t)            (eq. (6))

so the path is h_t -> a_t -> c_t -> h~_t (section 3.1). The attentional
state h~_t is fed to the next step's input ("input feeding"), so that the
decoder knows what it attended to before.

**How.** Four score functions (eqs. (8)-(9)):

* ``dot``      score = h_t^T h̄_s                   query h_t, keys h̄_s
* ``general``  score = h_t^T W_a h̄_s               query h_t, keys W_a h̄_s
* ``concat``   score = v_a^T tanh(W_a [h_t; h̄_s])  query and key meet inside an MLP
* ``location`` a_t = softmax(W_a h_t)              query h_t only; no keys

and three modes: *global* attends to every source position (section 3.1);
*local-m* attends to the window [p_t - D, p_t + D] around p_t = t; *local-p*
predicts p_t = S * sigmoid(v_p^T tanh(W_p h_t)) (eq. (10)) and also
multiplies the weights by a Gaussian centred at p_t with sigma = D / 2
(eq. (11)). In every variant the **query** is the current decoder state h_t,
and the **values** are the encoder states h̄_s (the keys too, for dot,
general and concat).

The NumPy teaching path is :mod:`attncourse.functional.luong`; the two are
tested equal. Equation numbers follow the arXiv version (1508.04025v5).

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, sections 3 (eqs. (5)-(6)), 3.1 (eqs. (7)-(9)),
3.2 (eqs. (10)-(11)), 3.3 (input feeding) and 4.1 (training details).
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
    """Luong attention for one decoder step of a batch: global, local-m or local-p.

    What plays which part, for every variant:

    * ``dot``: query h_t (the *current* decoder state); keys h̄_s; values h̄_s.
    * ``general``: query h_t; keys W_a h̄_s; values h̄_s.
    * ``concat``: query h_t and key h̄_s meet inside v_a^T tanh(W_a [h_t; h̄_s]),
      as in Bahdanau's MLP; values h̄_s.
    * ``location``: query h_t alone, scores W_a h_t (one row of W_a per
      position); no keys; values h̄_s.

    The mode decides *which* keys and values take part: all source positions
    (``global``) or those in the window [p_t - D, p_t + D] (``local-m``,
    ``local-p``). In local-p the query also predicts p_t.

    Parameters
    ----------
    hidden_dim : int
        Width of the decoder state h_t.
    score : {"dot", "general", "concat", "location"}
        Score function (eqs. (8)-(9)).
    mode : {"global", "local-m", "local-p"}
        Global (section 3.1) or local (section 3.2) attention.
    window : int
        Half-width D of the local window, >= 0 (>= 1 for local-p, whose
        Gaussian has sigma = D / 2). The paper uses D = 10. Unused for global.
    max_src_len : int, optional
        Longest source the location score can handle (rows of its W_a);
        required for ``score="location"``, ignored otherwise.
    key_dim : int, optional
        Width of the encoder states h̄_s; default ``hidden_dim``. The dot score
        needs ``key_dim == hidden_dim``.
    attn_dim : int, optional
        Width of the concat score's hidden layer; default ``hidden_dim``.
    gaussian : bool, optional
        Multiply the weights by the Gaussian of eq. (11). Default: the paper's
        choice, ``True`` for local-p, ``False`` otherwise. ``False`` exists
        for teaching and tests: a local window covering the whole sentence
        without the Gaussian is global attention.

    Attributes
    ----------
    w_a : Parameter or None
        general: (hidden_dim, key_dim); concat: (attn_dim, hidden_dim + key_dim),
        first ``hidden_dim`` columns acting on h_t; location: (max_src_len, hidden_dim).
    v_a : Parameter (attn_dim,) or None
        concat only.
    w_p : Parameter (hidden_dim, hidden_dim) or None
        local-p only: W_p of eq. (10).
    v_p : Parameter (hidden_dim,) or None
        local-p only: v_p of eq. (10).

    Notes
    -----
    *The Gaussian is not renormalised.* Luong et al. multiply the softmax over
    the window by exp(-(s - p_t)^2 / (2 sigma^2)) and use the product as it is
    (eq. (11)); we follow the paper, so local-p weights sum to less than 1 and
    c_t is shrunk when p_t falls between words or the alignment is spread out.
    The factor is differentiable in p_t, which is how W_p and v_p receive
    gradients; the window cut |s - p_t| <= D is a hard mask and passes none.

    Positions are 0-based (s = 0..S-1, first target step t = 0). local-m uses
    p_t = min(t, S - 1), S being each sentence's real length, so the window
    always holds the last word rather than sliding off the sentence. local-p
    uses p_t = S * sigmoid(.) in (0, S) as written in the paper. Windows
    crossing the sentence boundary keep only the real positions inside them
    (section 3.2). Parameters are drawn from U(-0.1, 0.1) as in section 4.1.

    Raises
    ------
    ValueError
        For an unknown score or mode, a negative or non-integer window,
        ``window=0`` with local-p, ``score="location"`` without
        ``max_src_len``, ``score="dot"`` with ``key_dim != hidden_dim``, a
        Gaussian with global attention, or a non-positive size.

    References
    ----------
    Luong et al. (2015), sections 3.1-3.2, eqs. (7)-(11); section 4.1.
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
        """Draw every parameter from U(-0.1, 0.1) (Luong et al. 2015, section 4.1)."""
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
        """The part of the score that depends on the source only, computed once per sentence.

        Parameters
        ----------
        h_s : (batch, src_len, key_dim)
            Encoder states h̄_s.

        Returns
        -------
        (batch, src_len, hidden_dim) or (batch, src_len, attn_dim) or None
            general: W_a h̄_s; concat: the h̄_s half of W_a [h_t; h̄_s];
            ``None`` for dot and location, which have nothing to precompute.

        Raises
        ------
        ValueError
            If ``h_s`` is not ``(batch, src_len, key_dim)``.
        """
        self._validate_keys(h_s)
        if self.score == "general":
            return h_s @ self.w_a.T
        if self.score == "concat":
            return h_s @ self.w_a[:, self.hidden_dim:].T
        return None

    def aligned_positions(self, h_t: torch.Tensor, lengths: torch.Tensor, t: int | None = None) -> torch.Tensor | None:
        """Aligned positions p_t, 0-based and real-valued, or None for global attention.

        Parameters
        ----------
        h_t : (batch, hidden_dim)
            Current decoder states.
        lengths : (batch,) long
            Real source lengths S.
        t : int, optional
            Target step, 0-based; required for local-m.

        Returns
        -------
        (batch,) tensor or None
            local-m: p_t = min(t, S - 1); local-p: p_t = S sigmoid(v_p^T tanh(W_p h_t))
            (eq. (10)), with gradients to W_p and v_p; global: None.

        Raises
        ------
        ValueError
            If local-m gets no integer ``t >= 0``.
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
        """Context vector, attention weights and aligned position for one decoder step.

        Parameters
        ----------
        h_t : (batch, hidden_dim)
            Current decoder states h_t, the queries.
        h_s : (batch, src_len, key_dim)
            Encoder states h̄_s, the values (and keys).
        src_mask : (batch, src_len) bool, optional
            ``True`` where position s may be attended (a real token); S is the
            number of ``True`` per row. Padded positions get weight exactly 0;
            a row with no ``True`` gets zero weights and a zero context.
            Default: every position is real.
        t : int, optional
            Target step, 0-based; required for local-m (p_t = min(t, S - 1)).
        projected_keys : tensor, optional
            ``project_keys(h_s)`` computed earlier; computed here if omitted.

        Returns
        -------
        context : (batch, key_dim)
            c_t = sum_s a_t(s) h̄_s.
        weights : (batch, src_len)
            a_t(s): the softmax of the scores over the allowed positions
            (window and real tokens; eq. (7)), times the Gaussian of eq. (11)
            for local-p. Exactly 0 outside the window and at padding.
        p_t : (batch,) or None
            Aligned positions (real-valued; with gradients for local-p), or
            ``None`` for global attention.

        Raises
        ------
        ValueError
            If the shapes do not fit each other (the message names them), the
            source is longer than ``max_src_len`` for the location score, or
            local-m gets no ``t``.
        TypeError
            If ``src_mask`` is not boolean.

        References
        ----------
        Luong et al. (2015), eqs. (7)-(11).
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
    """What a :class:`LuongSeq2Seq` decoder carries from step t - 1 to step t.

    Attributes
    ----------
    hidden : (batch, hidden_dim)
        The recurrent state h_{t-1}.
    attentional : (batch, hidden_dim)
        The attentional state h~_{t-1} = tanh(W_c [c_{t-1}; h_{t-1}]), fed to
        the next input with input feeding (zeros before the first step).
    step : int
        Index t of the next target step (0 before the first); local-m uses it as p_t.
    position : (batch,) or None
        p_{t-1}, the aligned position of the step that produced this state
        (``None`` for global attention and before the first step).
    """

    hidden: torch.Tensor
    attentional: torch.Tensor
    step: int = 0
    position: torch.Tensor | None = None


@dataclass
class LuongSeq2SeqOutput(Seq2SeqOutput):
    """Teacher-forced output of :meth:`LuongSeq2Seq.forward`.

    Attributes
    ----------
    logits : (batch, tgt_len, tgt_vocab)
    attention : (batch, tgt_len, src_len)
        a_t(s) for every target step and source position (zero at padding and
        outside local windows).
    positions : (batch, tgt_len) or None
        Aligned positions p_t of the local modes, ``None`` for global attention.
    """

    positions: torch.Tensor | None = None


class LuongSeq2Seq(nn.Module, EncoderDecoder):
    """RNN encoder-decoder with Luong attention; same decoding protocol as :class:`~attncourse.nn.rnn.Seq2Seq`.

    Encoder: :class:`~attncourse.nn.rnn.Encoder`, a GRU; bidirectional by
    default with ``hidden_dim // 2`` units per direction, so that its states
    h̄_s = [forward; backward] are ``hidden_dim`` wide like the decoder's h_t
    (the dot score needs it). Decoder, at target step t (0-based):

        h_t  = GRU([E y_{t-1}; h~_{t-1}], h_{t-1})     (input feeding, section 3.3)
        c_t, a_t, p_t = LuongAttention(h_t, h̄, mask, t)  (eqs. (7)-(11))
        h~_t = tanh(W_c [c_t; h_t])                    (eq. (5))
        p(y_t | y_<t, x) = softmax(W_s h~_t + b_s)     (eq. (6))

    The query is the current state h_t; the keys and values are the encoder
    states h̄_s (see :class:`LuongAttention` for each score). Without input
    feeding the GRU reads E y_{t-1} alone. The first state h_0 is the encoder's
    final state, as in the paper's decoder, which starts where the encoder
    stopped; h~_0 = 0.

    Differences from the paper, for the course's small tasks: one GRU layer
    instead of a stack of four LSTMs; a bias b_s in the output layer; our
    encoder may be bidirectional (the paper's reads the source left to right).

    It implements the decoder protocol,
    :class:`~attncourse.nn.protocol.EncoderDecoder`; the decoder state is a
    :class:`LuongDecoderState`.

    Parameters
    ----------
    src_vocab_size, tgt_vocab_size : int
        Vocabulary sizes (id 0 is padding, 1 bos, 2 eos, 3 unk).
    emb_dim : int
        Width of the source and target embeddings.
    hidden_dim : int
        Width of h_t, h~_t and the encoder states h̄_s; even if bidirectional.
    score : {"dot", "general", "concat", "location"}
        Score function (eqs. (8)-(9)).
    mode : {"global", "local-m", "local-p"}
        Global or local attention (sections 3.1-3.2).
    window : int
        Half-width D of the local window (the paper: 10; small tasks need less).
    input_feeding : bool
        Feed h~_{t-1} to the next step's input (section 3.3).
    bidirectional : bool
        Bidirectional encoder with ``hidden_dim // 2`` units per direction.
    dropout : float
        Dropout on embeddings and before the output layer (training mode only).
    max_src_len : int, optional
        Required for ``score="location"``; ignored otherwise.

    Attributes
    ----------
    config : dict
        Constructor arguments, JSON-serialisable; ``LuongSeq2Seq.from_config(model.config)``
        rebuilds the architecture.
    encoder : Encoder
    attention : LuongAttention
    w_c : Linear (2 * hidden_dim -> hidden_dim), no bias
        W_c of eq. (5).
    output : Linear (hidden_dim -> tgt_vocab)
        W_s (and b_s) of eq. (6).

    Raises
    ------
    ValueError
        For a non-positive size, an odd ``hidden_dim`` with a bidirectional
        encoder, a bad dropout, or any error of :class:`LuongAttention`.

    References
    ----------
    Luong et al. (2015), section 3 (eqs. (5)-(6)), 3.1-3.2, 3.3 (input feeding).
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
        """Run the encoder once per batch, as :class:`EncoderDecoder` describes.

        Returns
        -------
        EncoderState
            States h̄_s (batch, src_len, hidden_dim), final state (batch, hidden_dim),
            the mask and ``projected_keys`` (W_a h̄_s for general, the h̄_s half
            of concat's W_a; ``None`` for dot and location).

        Raises
        ------
        ValueError
            Also if the source is longer than ``max_src_len`` for the location score.
        """
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
        """One decoder step: from y_{t-1} and (h_{t-1}, h~_{t-1}) to the scores of y_t.

        As :meth:`EncoderDecoder.decode_step`:
        the logits are W_s h~_t + b_s, the new state holds h_t, h~_t, step t + 1 and
        p_t, and the weights a_t(s) are exactly 0 outside the window too.

        Raises
        ------
        TypeError
            If ``state`` is not a :class:`LuongDecoderState`.
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
        """Rows ``indices`` of a :class:`LuongDecoderState` or an :class:`EncoderState`; ``step`` is shared and kept."""
        return reorder_batch(obj, indices)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> LuongSeq2SeqOutput:
        """Teacher forcing, as :meth:`EncoderDecoder.forward`: :meth:`decode_step` for
        t = 0..tgt_len-1, fed ``tgt_in[:, t]``, so it equals decoding step by step.

        Returns
        -------
        LuongSeq2SeqOutput
            Also ``positions`` (batch, tgt_len), the aligned positions p_t of
            local-p attention, or ``None``.
        """
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
